"""Producer and Consumer (assign mode) end to end on the session cluster."""

from __future__ import annotations

import itertools
import threading
import time

import pyarrow as pa
import pytest

from rayqueue import TopicPartition
from rayqueue.errors import (
    InvalidConfigError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from rayqueue.partitioner import partition_for_key
from tests.helpers import LostCall, consume_all, wait_for

# Every test here runs over both twins of the record codec on the client side (tests/twins.py):
# the producer's batches and the consumer's decoding. The brokers run the compiled twins.
pytestmark = pytest.mark.usefixtures("twin")


def test_records_come_back_in_order_per_partition_across_topics(cluster, new_topic):
    topics = [new_topic(partitions=3), new_topic(partitions=2)]
    producer = cluster.producer(linger_ms=2)
    sent = {}
    for i in range(600):
        topic = topics[i % 2]
        md = producer.send(topic, f"{topic}:{i}".encode(), key=f"k{i % 13}".encode())
        sent[i] = (topic, md)
    producer.flush(60)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(t, p) for t in topics for p in range(3 if t == topics[0] else 2)])
    records = consume_all(consumer, 600)
    assert sorted(r.value for r in records) == sorted(f"{t}:{i}".encode() for i, (t, _) in sent.items())
    by_tp: dict = {}
    for r in records:
        by_tp.setdefault((r.topic, r.partition), []).append(r)
    for rs in by_tp.values():
        offsets = [r.offset for r in rs]
        assert offsets == list(range(len(rs)))  # every offset once, in order
        sends = [int(r.value.split(b":")[1]) for r in rs]
        assert sends == sorted(sends)  # the order they were sent in
    for topic, future in sent.values():
        md = future.get(10)
        assert md.topic == topic and md.offset >= 0


def test_keys_land_on_kafkas_partitions(cluster, new_topic):
    topic = new_topic(partitions=5)
    producer = cluster.producer()
    keys = [f"user-{i}".encode() for i in range(50)]
    futures = [producer.send(topic, b"v", key=k) for k in keys]
    producer.flush(60)
    for key, future in zip(keys, futures, strict=True):
        assert future.get(10).partition == partition_for_key(key, 5)
    # Reference values from Kafka's own murmur2 test vectors.
    from rayqueue.partitioner import murmur2

    assert murmur2(b"21") == -973932308 and murmur2(b"foobar") == -790332482


def test_null_keys_stick_to_a_partition_per_batch(cluster, new_topic):
    topic = new_topic(partitions=4)
    producer = cluster.producer(linger_ms=1000, batch_size=100000)
    futures = [producer.send(topic, b"x") for _ in range(50)]
    producer.flush(60)
    assert len({f.get(10).partition for f in futures}) == 1


def test_send_many_bulk_path_with_keys_partition_and_arrow(cluster, new_topic):
    topic = new_topic(partitions=3)
    producer = cluster.producer(compression_type="lz4")
    values = [f"bulk-{i}".encode() for i in range(5000)]
    keys = [f"k{i % 7}".encode() for i in range(5000)]
    result = producer.send_many(topic, values, keys=keys).get(60)
    assert sum(count for _, _, count in result) == 5000
    producer.send_many(topic, pa.array([b"arrow-0", b"arrow-1"]), partition=2).get(60)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    records = consume_all(consumer, 5002)
    for r in records:
        if r.key is not None:
            assert r.partition == partition_for_key(r.key, 3)
    assert {r.value for r in records if r.partition == 2} >= {b"arrow-0", b"arrow-1"}
    assert sorted(r.value for r in records if r.value.startswith(b"bulk")) == sorted(values)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips_with_headers_and_nulls(cluster, new_topic, codec):
    topic = new_topic()
    producer = cluster.producer(compression_type=codec, linger_ms=5)
    producer.send(topic, b"v1", key=b"k1", headers=[("h", b"1"), ("empty", None)], timestamp=1234)
    producer.send(topic, None, key=b"tombstone")
    producer.send(topic, b"no key")
    producer.flush(60)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    records = consume_all(consumer, 3)
    assert [(r.key, r.value) for r in records] == [(b"k1", b"v1"), (b"tombstone", None), (None, b"no key")]
    assert records[0].headers == (("h", b"1"), ("empty", None)) and records[0].timestamp == 1234


def test_callbacks_serializers_and_record_metadata(cluster, new_topic):
    topic = new_topic()
    producer = cluster.producer(value_serializer=str.encode, key_serializer=str.encode)
    seen = []
    done = threading.Event()

    def callback(md, err):
        seen.append((md, err))
        done.set()

    producer.send(topic, "hello", key="k", callback=callback)
    producer.flush(60)
    assert done.wait(10)
    md, err = seen[0]
    assert err is None and (md.topic, md.partition, md.offset) == (topic, 0, 0)
    consumer = cluster.consumer(
        auto_offset_reset="earliest", value_deserializer=bytes.decode, key_deserializer=bytes.decode
    )
    consumer.assign([TopicPartition(topic, 0)])
    (record,) = consume_all(consumer, 1)
    assert (record.key, record.value) == ("k", "hello")


def test_record_metadata_timestamp_is_create_time_or_the_logs_append_time(cluster, new_topic):
    """As Kafka's RecordMetadata: the record's own timestamp under CreateTime, the
    broker's append time under message.timestamp.type=LogAppendTime."""
    producer = cluster.producer(linger_ms=5)
    create = new_topic()
    futures = [producer.send(create, b"v", timestamp=1000 + i) for i in range(3)]
    assert [f.get(60).timestamp for f in futures] == [1000, 1001, 1002]
    log_append = new_topic(message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    futures = [producer.send(log_append, b"v", timestamp=1000 + i) for i in range(3)]
    stamped = {f.get(60).timestamp for f in futures}
    assert len(stamped) == 1 and before <= stamped.pop() <= int(time.time() * 1000)


def test_a_callback_runs_once_whether_it_comes_before_or_after_completion():
    """add_callback races the sender completing the batch: each callback runs exactly once."""
    from rayqueue.producer.futures import FutureRecordMetadata, ProduceRequestResult

    tp = TopicPartition("t", 0)
    for round_ in range(300):
        result = ProduceRequestResult(tp)
        calls: list = []
        completer = threading.Thread(target=result.done, args=(10, -1, None))
        completer.start()
        for delta in range(3):
            FutureRecordMetadata.of(result, delta, 100 + delta).add_callback(
                lambda md, err, calls=calls: calls.append((md.offset, md.timestamp, err))
            )
        completer.join()
        assert sorted(calls) == [(10, 100, None), (11, 101, None), (12, 102, None)], round_


def test_batches_older_than_delivery_timeout_fail(cluster, new_topic):
    """Calls that never answer: each batch fails when it reaches delivery.timeout.ms in
    flight (Kafka's in-flight expiry, KIP-91), and no call is resent while it might still
    be appended. Answers that come later change nothing. The timeout must cover
    linger.ms + request.timeout.ms, as in Kafka."""
    with pytest.raises(InvalidConfigError, match="delivery.timeout.ms"):
        cluster.producer(delivery_timeout_ms=1000, request_timeout_ms=2000)
    topic = new_topic()
    producer = cluster.producer(
        acks=1, linger_ms=0, max_in_flight_requests_per_connection=1, request_timeout_ms=1000, delivery_timeout_ms=1500
    )
    hung: list[LostCall] = []
    real = producer._sender.append_records

    def every_call_hangs(host, request):
        hung.append(LostCall())
        return hung[-1]

    producer._sender.append_records = every_call_hangs
    first = producer.send(topic, b"first")
    wait_for(lambda: hung, timeout=30, what="the first produce call")
    second = producer.send(topic, b"second")  # waits for the first (one call in flight)
    for future in (first, second):
        with pytest.raises(KafkaTimeoutError, match="since batch creation"):
            future.get(30)
    assert len(hung) <= 2  # each batch went out once at most
    for call in hung:
        call.fail(NetworkError("injected: the answer came too late"))  # dropped
    producer._sender.append_records = real
    assert producer.send(topic, b"third").get(30).offset == 0  # nothing was appended; the producer goes on
    producer.close()


def test_seek_position_pause_resume_and_offsets_for_times(cluster, new_topic):
    # Timestamps of 1970 on a cluster that checks retention every second: kept forever, or
    # the retention check deletes them before they are read (seen under load).
    topic = new_topic(retention_ms=-1)
    tp = TopicPartition(topic, 0)
    producer = cluster.producer()
    for i in range(10):
        producer.send(topic, f"{i}".encode(), timestamp=1000 * (i + 1))
    producer.flush(60)
    consumer = cluster.consumer(auto_offset_reset="latest", max_poll_records=3)
    consumer.assign([tp])
    assert consumer.position(tp) == 10
    assert consumer.beginning_offsets([tp]) == {tp: 0} and consumer.end_offsets([tp]) == {tp: 10}
    consumer.seek(tp, 4)
    first = consume_all(consumer, 3)
    assert [r.offset for r in first] == [4, 5, 6] and consumer.position(tp) == 7
    found = consumer.offsets_for_times({tp: 5500})[tp]
    assert (found.offset, found.timestamp) == (5, 6000)
    assert consumer.offsets_for_times({tp: 10**12})[tp] is None
    consumer.seek_to_beginning()
    consumer.pause([tp])
    assert not consumer.poll(300) and consumer.paused() == {tp}
    consumer.resume([tp])
    assert [r.offset for r in consume_all(consumer, 3)] == [0, 1, 2]
    consumer.seek_to_end()
    assert consumer.position(tp) == 10 and not consumer.poll(200)


def test_out_of_range_position_resets_by_auto_offset_reset(cluster, admin, new_topic):
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    producer = cluster.producer()
    for i in range(5):
        producer.send(topic, f"{i}".encode())
    producer.flush(60)
    assert admin.delete_records({tp: 3}) == {tp: 3}
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([tp])
    consumer.seek(tp, 1)  # below the log start now
    assert [r.offset for r in consume_all(consumer, 2)] == [3, 4]


def test_a_fetch_that_cannot_be_sent_loses_no_records_and_fails_the_next_poll(cluster, new_topic):
    """The next fetch is sent while an answer is taken and after records are handed out;
    if it cannot be sent, those records still come out, and the error is raised by the
    next poll with nothing to return (Kafka's fetcher defers errors the same way)."""
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    producer = cluster.producer()
    producer.send_many(topic, [b"%d" % i for i in range(10)], partition=0).get(60)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([tp])
    assert consumer.position(tp) == 0
    real_leader = consumer._metadata.leader
    calls = itertools.count()

    def leader_then_boom(partition):
        if next(calls):  # the first fetch goes out; every later one fails to
            raise RuntimeError("boom")
        return real_leader(partition)

    consumer._metadata.leader = leader_then_boom
    got: list = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        got.extend(consumer.poll(100))  # must not raise while records are to be had
    assert [r.offset for r in got] == list(range(10))
    with pytest.raises(KafkaError, match="boom"):
        consumer.poll(100)
    consumer._metadata.leader = real_leader
    producer.send(topic, b"10", partition=0).get(60)
    assert [r.value for r in consume_all(consumer, 1)] == [b"10"]
    consumer.close()


def test_iterating_the_consumer(cluster, new_topic):
    topic = new_topic(partitions=2)
    producer = cluster.producer()
    producer.send_many(topic, [b"%d" % i for i in range(1000)]).get(60)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == 1000:
            break
    assert sorted(got) == sorted(b"%d" % i for i in range(1000))


def test_producer_errors(cluster, new_topic):
    topic = new_topic(partitions=2)
    producer = cluster.producer(buffer_memory=10000, max_block_ms=200, linger_ms=60000, batch_size=10**6)
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send(topic, b"x", partition=7)
    with pytest.raises(RecordTooLargeError):
        producer.send(topic, b"x" * 20000)
    # Lingering batches keep the buffer full: the next send blocks max.block.ms, then fails.
    for _ in range(9):
        producer.send(topic, b"y" * 1000, partition=0)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError):
        producer.send(topic, b"y" * 1000, partition=0)
    assert time.monotonic() - started >= 0.15
    with pytest.raises(InvalidConfigError, match="linger.ms"):
        cluster.producer(linger_msx=5)
    producer.close(30)


def test_produce_to_unknown_topic_auto_creates_it(cluster, admin):
    name = "auto-created-topic"
    producer = cluster.producer()
    producer.send(name, b"hello").get(60)
    assert name in admin.list_topics()
    admin.delete_topic(name)


def test_null_key_records_find_a_partition_after_the_topic_is_recreated_smaller(cluster, admin):
    """The sticky partition is checked against fresh metadata when a batch opens: after
    the topic is recreated with one partition, null-key records go to partition 0 again
    (a sticky partition 1 or 2 from before would be retried until it expired)."""
    name = "recreated-smaller"
    admin.create_topic(name, 3)
    producer = cluster.producer(batch_size=200, linger_ms=0, delivery_timeout_ms=2000, request_timeout_ms=1000)
    try:
        # Each record fills a batch, which moves the sticky partition on (KIP-794).
        wait_for(lambda: producer.send(name, b"x" * 200).get(30).partition != 0, timeout=60)
        admin.delete_topic(name)
        admin.create_topic(name, 1)
        # A record sent to an old partition fails (it expires); wait_for counts that as "not yet".
        wait_for(lambda: producer.send(name, b"after").get(30).partition == 0, timeout=60)
    finally:
        producer.close(30)
        admin.delete_topic(name)


def test_producer_is_thread_safe_and_takes_a_user_partitioner(cluster, new_topic):
    topic = new_topic(partitions=3)
    chosen = []

    def last_partition(topic_name, key, num_partitions):
        chosen.append((topic_name, key, num_partitions))
        return num_partitions - 1

    producer = cluster.producer(partitioner=last_partition, linger_ms=1)
    futures: list = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        mine = [producer.send(topic, b"%d-%d" % (n, i), key=b"k%d" % n) for i in range(250)]
        with lock:
            futures.extend(mine)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    producer.flush(60)
    metadata = [f.get(10) for f in futures]
    assert len(metadata) == 1000 and {md.partition for md in metadata} == {2}
    assert sorted(md.offset for md in metadata) == list(range(1000))  # no record lost or doubled
    assert chosen[0][0] == topic and chosen[0][2] == 3 and len(chosen) == 1000
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 2)])
    by_thread: dict = {}
    for r in consume_all(consumer, 1000):
        n, i = r.value.split(b"-")
        by_thread.setdefault(n, []).append(int(i))
    # Each thread's records keep the order that thread sent them in.
    assert all(seq == list(range(250)) for seq in by_thread.values())
