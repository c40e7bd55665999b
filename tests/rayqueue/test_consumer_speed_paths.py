"""The consumer's fast paths keep Kafka's semantics: records built lazily per fetch, a second
fetch in flight at a predicted offset, iteration through C-level chaining."""

from __future__ import annotations

import itertools
import os
import pickle

from actors.types import TopicPartition
from rayqueue.consumer import ConsumerRecord
from tests.helpers import consume_all, wait_for
from tests.rayqueue.test_consumer_read_committed import TP, Log, fake_consumer, poll_until


def test_records_are_the_public_named_tuple(cluster, new_topic):
    topic = new_topic()
    producer = cluster.producer()
    producer.send(topic, b"v", key=b"k", headers=[("h", b"1")], timestamp=1234).get(60)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    (record,) = consume_all(consumer, 1)
    consumer.close()
    assert type(record) is ConsumerRecord and isinstance(record, tuple)
    assert record == ConsumerRecord(topic, 0, 0, 1234, 0, b"k", b"v", (("h", b"1"),), record.leader_epoch)
    assert record._asdict()["value"] == b"v" and record._replace(offset=5).offset == 5
    assert repr(record).startswith("ConsumerRecord(topic=")
    assert pickle.loads(pickle.dumps(record)) == record


def test_predicted_fetches_with_uneven_batches_lose_and_repeat_nothing(ray_session):
    # Batch sizes vary, so a predicted offset lands short (overlap), long (gap) or inside a batch.
    log = Log()
    sizes = itertools.cycle([1, 7, 2, 30, 3, 11, 5])
    while log.next_offset < 3000:
        log.data([b"%05d" % (log.next_offset + i) for i in range(next(sizes))])
    for iterate in (False, True):
        consumer, leader = fake_consumer(log, max_partition_fetch_bytes=600)
        try:
            if iterate:
                got = list(itertools.islice(consumer, log.next_offset))
            else:
                got = poll_until(consumer, log.next_offset)
            assert [r.offset for r in got] == list(range(log.next_offset))
            assert all(r.value == b"%05d" % r.offset for r in got)
        finally:
            consumer.close()


def test_predicted_fetches_with_even_batches_fetch_nothing_twice(ray_session):
    log = Log()
    for _ in range(200):
        log.data([b"x" * 20] * 10)
    starts: list[int] = []
    under_way: list[int] = []
    consumer, leader = fake_consumer(log, max_partition_fetch_bytes=2000)
    fetch = leader.fetch.remote

    def counting(request):
        starts.append(request.fetch_offset)
        under_way.append(consumer._fetcher.fetches_in_flight(TP))
        return fetch(request)

    leader.fetch.remote = counting
    try:
        got = poll_until(consumer, log.next_offset)
        assert [r.offset for r in got] == list(range(log.next_offset))
        # Every fetch started where the one before it ended: each guess was right, and
        # guesses were made (more than one fetch was under way at times).
        data_starts = [s for s in starts if s < log.next_offset]  # at the end it polls on
        assert len(data_starts) == len(set(data_starts)) == -(-log.next_offset // 60)
        assert sorted(data_starts) == data_starts
        assert max(under_way) >= 1
    finally:
        consumer.close()


def test_leaving_a_loop_loses_nothing_and_commit_inside_it_is_exact(cluster, new_topic):
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    values = [os.urandom(50) for _ in range(5000)]
    cluster.producer().send_many(topic, values, partition=0).get(60)
    consumer = cluster.consumer(
        group_id=f"speed-{topic}", auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=700
    )
    consumer.assign([tp])
    try:
        seen = []
        for record in consumer:
            seen.append(record)
            if len(seen) == 1234:
                consumer.commit()  # mid-fetch: exactly what was handed out
                assert consumer.committed([tp])[tp].offset == 1234 == consumer.position(tp)
                break
        seen += consume_all(consumer, 5000 - 1234)
        assert [r.offset for r in seen] == list(range(5000))
        assert [r.value for r in seen] == values
        wait_for(lambda: not consumer.poll(50) and consumer.position(tp) == 5000, 30)
    finally:
        consumer.close()


def test_revoked_partition_stops_an_iteration_at_once(cluster, new_topic):
    topic = new_topic(partitions=2)
    producer = cluster.producer()
    for p in (0, 1):
        producer.send_many(topic, [b"%d" % i for i in range(3000)], partition=p).get(60)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    a, b = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer.assign([a, b])
    try:
        it = iter(consumer)
        first = next(it)
        consumer.assign([TopicPartition(topic, 1 - first.partition)])  # drop the one under way
        rest = list(itertools.islice(it, 3000))
        assert {r.partition for r in rest} == {1 - first.partition}
        assert [r.offset for r in rest] == list(range(3000))
    finally:
        consumer.close()


def _fetch_answer(min_offset: int):
    """A fetch answer of two batches and a transaction marker, read from ``min_offset`` (inside the first)."""
    from actors.fetch import FetchCursor
    from actors.protocol import FetchResponse
    from storage.records.builder import RecordBatchBuilder
    from storage.records.control import build_control_batch

    first = RecordBatchBuilder(base_offset=10)
    for i in range(5):
        first.append(b"v%d" % i, key=None if i % 2 else b"k%d" % i, timestamp=1000 + i, headers=[("h", b"%d" % i)])
    second = RecordBatchBuilder(base_offset=15, compression="gzip", timestamp_type=1)
    second.append_many([b"w"] * 3, timestamps=5)
    marker = build_control_batch(True, 7, 0, timestamp=9, base_offset=18)
    data = first.build() + second.build() + marker
    return FetchCursor(min_offset).complete(FetchResponse(data, 19, 19, 0, 19, 4))


def test_a_fetch_decodes_to_the_records_of_the_public_type_over_both_twins():
    """The consumer's decoder, over both twins of its kernels: position, keys, headers,
    LogAppendTime, a marker skipped, deserializers, and a chunk cut and resumed mid-way."""
    from rayqueue.consumer.fetcher import RecordDecoder
    from tests import twins

    tp = TopicPartition("t", 2)
    expected = [
        ConsumerRecord("t", 2, 10 + i, 1000 + i, 0, None if i % 2 else b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),), 4)
        for i in range(2, 5)
    ] + [ConsumerRecord("t", 2, 15 + i, None, 1, None, b"w", (), 4) for i in range(3)]
    for kind in twins.KINDS if twins.compiled_available() else ("pure",):
        with twins.use(kind):
            fetched = _fetch_answer(12)
            chunk = RecordDecoder()(tp, fetched, fetched.next_offset)
            assert chunk.remaining() == 6 and chunk.next_offset() == 12 and chunk.end_offset == 19
            first = chunk.take(2)
            assert chunk.next_offset() == 14 and chunk.remaining() == 4
            rest = chunk.rest()  # a pause: the records not taken go back to the buffer
            assert chunk.remaining() == 0 and list(chunk.records) == []
            got = first + list(rest.records)
            assert all(type(r) is ConsumerRecord for r in got)
            # LogAppendTime: the batch's maxTimestamp, whatever the records say.
            max_ts = got[3].timestamp
            assert got == [r._replace(timestamp=max_ts) if r.timestamp is None else r for r in expected], kind
            assert rest.next_offset() == 19

            decoder = RecordDecoder(key_deserializer=bytes.upper, value_deserializer=len)
            chunk = decoder(tp, _fetch_answer(0), 19)
            taken = list(itertools.islice(chunk.records, 4))
            chunk.stop()  # a seek: nothing more comes out of an iteration under way
            assert list(chunk.records) == [] and chunk.remaining() == 0
            assert [(r.offset, r.key, r.value) for r in taken] == [
                (10, b"K0", 2),
                (11, None, 2),
                (12, b"K2", 2),
                (13, None, 2),
            ]
            empty = RecordDecoder()(tp, _fetch_answer(19), 19)
            assert empty.remaining() == 0 and list(empty.records) == [] and empty.next_offset() == 19
