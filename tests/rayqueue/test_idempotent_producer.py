"""The idempotent producer (issue #7): producer ids, sequences, lost answers and retries."""

from __future__ import annotations

import random
import threading

import pytest
import ray

from actors.protocol import FetchRequest
from rayqueue.config import producer_config
from rayqueue.errors import InvalidConfigError, InvalidRecordError, KafkaTimeoutError, NetworkError
from rayqueue.producer.transaction_manager import increment_sequence
from storage.records.reader import iter_batches
from tests.helpers import LostCall, wait_for

# Every test here runs over both twins of the record codec (the producer's builder, the readers) (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")


def raw_batches(cluster, topic: str, partition: int) -> list:
    """Every batch of the partition's log as stored (via the leader's fetch), in order."""
    meta = cluster.metadata([topic]).topics[topic].partitions[partition]
    batches, offset = [], 0
    while True:
        result = ray.get(
            meta.leader_handle.fetch.remote(
                FetchRequest(offset, 1 << 20, 0, 1, current_leader_epoch=meta.leader_epoch)
            ),
            timeout=30,
        )
        got = list(iter_batches(result.records))
        if not got:
            return batches
        batches.extend(got)
        offset = got[-1].next_offset
        if offset >= result.high_watermark:
            return batches


def log_values(cluster, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every data record in the partition's log."""
    return [(r.offset, r.value) for b in raw_batches(cluster, topic, partition) if not b.is_control for r in b]


# -- configuration ---------------------------------------------------------------------


def test_idempotence_is_on_by_default_and_needs_acks_all():
    assert producer_config()["enable.idempotence"] is True
    # Only defaulted: a conflicting key turns it off silently, as in Kafka 3.x.
    assert producer_config(acks="1")["enable.idempotence"] is False
    assert producer_config(acks="0")["enable.idempotence"] is False
    assert producer_config(retries=0)["enable.idempotence"] is False
    assert producer_config(max_in_flight_requests_per_connection=6)["enable.idempotence"] is False
    assert producer_config({"acks": "-1", "max.in.flight.requests.per.connection": 5})["enable.idempotence"] is True
    assert producer_config(enable_idempotence=False, acks="1")["enable.idempotence"] is False


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ({"acks": "1"}, "acks"),
        ({"acks": "0"}, "acks"),
        ({"retries": 0}, "retries"),
        ({"max.in.flight.requests.per.connection": 6}, "max.in.flight.requests.per.connection"),
    ],
)
def test_explicit_idempotence_conflicts_name_the_keys(setting, key):
    with pytest.raises(InvalidConfigError, match=rf"enable\.idempotence.*{key}"):
        producer_config({"enable.idempotence": True, **setting})
    with pytest.raises(InvalidConfigError, match=rf"transactional\.id.*{key}"):
        producer_config({"transactional.id": "t", **setting})


def test_transactional_id_needs_idempotence(cluster):
    with pytest.raises(InvalidConfigError, match=r"transactional\.id.*enable\.idempotence"):
        producer_config(transactional_id="t", enable_idempotence=False)
    with pytest.raises(InvalidConfigError, match="acks"):
        cluster.producer(enable_idempotence=True, acks="1")
    assert producer_config(transactional_id="t")["transaction.timeout.ms"] == 60000


def test_sequences_wrap_as_kafkas():
    assert increment_sequence(0, 5) == 5
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 3, 5) == 2


# -- on the cluster ---------------------------------------------------------------------


def test_batches_carry_producer_id_epoch_and_consecutive_sequences(cluster, new_topic):
    topic = new_topic(partitions=2)
    producer = cluster.producer(batch_size=200, linger_ms=1)
    futures = [producer.send(topic, b"v%04d" % i, partition=i % 2) for i in range(300)]
    bulk = producer.send_many(topic, [b"bulk-%d" % i for i in range(1000)], partition=1)
    producer.flush(60)
    bulk.get(10)
    assert all(f.get(10).offset >= 0 for f in futures)
    producer_id, epoch = producer._txn.producer_id, producer._txn.epoch
    assert producer_id >= 0 and epoch >= 0
    for partition, records in ((0, 150), (1, 1150)):
        batches = raw_batches(cluster, topic, partition)
        assert len(batches) > 3  # several batches, so the sequences below say something
        assert {(b.producer_id, b.producer_epoch) for b in batches} == {(producer_id, epoch)}
        assert not any(b.is_transactional for b in batches)
        expected = 0
        for batch in batches:
            assert batch.base_sequence == expected
            expected += len(batch)
        assert expected == records
    producer.close()


def test_non_idempotent_producer_sends_no_producer_id(cluster, new_topic):
    topic = new_topic()
    producer = cluster.producer(acks="1")
    producer.send(topic, b"x").get(30)
    producer.close()
    (batch,) = raw_batches(cluster, topic, 0)
    assert (batch.producer_id, batch.base_sequence) == (-1, -1)


@pytest.mark.parametrize("bulk", [False, True])
def test_lost_answers_are_retried_without_duplicates_or_reordering(cluster, new_topic, bulk):
    """The leader appends, but the producer sees a NetworkError (the answer was lost), for a
    random third of the produce calls, retries included; the log still holds every record
    exactly once, in the order sent, and each future has the record's real offset."""
    topic = new_topic()
    producer = cluster.producer(batch_size=300, linger_ms=1)
    real = producer._sender.append_records
    rng = random.Random(7)
    lost = []

    def lossy(host, request):
        ref = real(host, request)
        if rng.random() < 0.33:
            ray.get(ref, timeout=30)  # appended at the leader ...
            lost.append(len(request.entries))
            raise NetworkError("injected: the answer of this produce call was lost")  # ... answer gone
        return ref

    producer._sender.append_records = lossy
    values = [b"r%05d" % i for i in range(3000)]
    if bulk:
        results = []
        for start in range(0, len(values), 50):
            results.append(producer.send_many(topic, values[start : start + 50], partition=0))
        producer.flush(120)
        offsets = [o for r in results for _, base, n in r.get(10) for o in range(base, base + n)]
    else:
        futures = [producer.send(topic, v, partition=0) for v in values]
        producer.flush(120)
        offsets = [f.get(10).offset for f in futures]
    producer.close()
    assert len(lost) > 5
    assert log_values(cluster, topic, 0) == list(zip(range(len(values)), values, strict=True))
    assert offsets == list(range(len(values)))


def test_sequences_restart_only_after_an_expired_call_ends(cluster, new_topic):
    """A call is still unanswered when its batch expires (delivery.timeout.ms) and the leader
    appends it late. The producer restarts its sequences under a new epoch only once that
    call has ended (a record sent meanwhile waits, and expires queued), so the next record
    lands after the late one, under the new epoch, and nothing is written twice."""
    topic = new_topic()
    producer = cluster.producer(linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=1500)
    producer.send(topic, b"warm", partition=0).get(30)  # the leader knows this producer
    epoch = producer._txn.epoch
    real = producer._sender.append_records
    stalled = LostCall()
    late: list = []

    def first_call_stalls(host, request):
        if late:
            return real(host, request)
        late.append((host, request))
        return stalled

    producer._sender.append_records = first_call_stalls
    expired = producer.send(topic, b"late", partition=0)
    with pytest.raises(KafkaTimeoutError, match="since batch creation"):
        expired.get(30)
    # The sequences cannot restart while the stalled call may still be appended: a record
    # sent meanwhile waits, and expires in the queue (the accumulator's expiry).
    queued = producer.send(topic, b"queued", partition=0)
    with pytest.raises(KafkaTimeoutError, match="since batch creation"):
        queued.get(30)
    assert producer._txn.epoch == epoch
    host, request = late[0]
    answer = ray.get(real(host, request), timeout=30)  # the leader appends it now ...
    stalled.answer(answer)  # ... and answers, too late for the expired future
    assert producer.send(topic, b"after", partition=0).get(30).offset == 2
    assert producer._txn.epoch == epoch + 1
    producer.close()
    assert [v for _, v in log_values(cluster, topic, 0)] == [b"warm", b"late", b"after"]
    assert [(b.producer_epoch, b.base_sequence) for b in raw_batches(cluster, topic, 0)] == [
        (epoch, 0),
        (epoch, 1),
        (epoch + 1, 0),
    ]


def test_out_of_order_answer_behind_a_retried_batch_is_retried(cluster, new_topic):
    """Batch 1's request is lost before the leader sees it while batch 2 is in flight: the
    leader answers batch 2 OutOfOrderSequence (a gap), which is retriable because batch 1
    is being retried; both land once, in order."""
    topic = new_topic()
    producer = cluster.producer(linger_ms=0)
    # The leader knows the producer (for an unknown one it accepts any sequence, as Kafka).
    producer.send(topic, b"warm", partition=0).get(30)
    real = producer._sender.append_records
    calls: list = []
    first = LostCall()

    def scripted(host, request):
        calls.append(len(request.entries))
        if len(calls) == 1:
            return first  # lost on the way: the leader never sees batch 1 ...
        ref = real(host, request)
        if len(calls) == 2:
            # ... and the loss shows only after batch 2 has been answered.
            ref.future().add_done_callback(lambda _: first.fail(NetworkError("injected: request lost")))
        return ref

    producer._sender.append_records = scripted
    one = producer.send_many(topic, [b"a0", b"a1", b"a2"], partition=0)
    wait_for(lambda: calls, timeout=30, what="the first produce call")
    two = producer.send_many(topic, [b"b0", b"b1"], partition=0)
    producer.flush(60)
    assert [(base, n) for _, base, n in one.get(10)] == [(1, 3)]
    assert [(base, n) for _, base, n in two.get(10)] == [(4, 2)]
    assert len(calls) >= 4  # two first attempts and two retries
    producer.close()
    assert [v for _, v in log_values(cluster, topic, 0)] == [b"warm", b"a0", b"a1", b"a2", b"b0", b"b1"]


def test_a_failed_batch_restarts_sequences_under_a_new_epoch(cluster, new_topic):
    """A batch that fails for good leaves a gap in the sequence: the producer bumps its
    epoch and restarts at sequence 0, so later batches are accepted."""
    topic = new_topic()
    producer = cluster.producer(linger_ms=0)
    real = producer._sender.append_records
    calls = []

    def failing(host, request):
        calls.append(len(request.entries))
        if len(calls) == 2:
            raise InvalidRecordError("injected: rejected for good")
        return real(host, request)

    producer._sender.append_records = failing
    assert producer.send(topic, b"first", partition=0).get(30).offset == 0
    with pytest.raises(InvalidRecordError):
        producer.send(topic, b"rejected", partition=0).get(30)
    epoch = producer._txn.epoch
    assert producer.send(topic, b"after", partition=0).get(30).offset == 1
    producer.close()
    batches = raw_batches(cluster, topic, 0)
    assert [(b.producer_epoch, b.base_sequence) for b in batches] == [(epoch - 1, 0), (epoch, 0)]
    assert [r.value for b in batches for r in b] == [b"first", b"after"]


def test_idempotent_producer_from_threads_keeps_per_thread_order(cluster, new_topic):
    topic = new_topic(partitions=2)
    producer = cluster.producer(batch_size=500, linger_ms=1)
    real = producer._sender.append_records
    rng = random.Random(3)
    lock = threading.Lock()

    def lossy(host, request):
        ref = real(host, request)
        with lock:
            lose = rng.random() < 0.2
        if lose:
            ray.get(ref, timeout=30)
            raise NetworkError("injected: lost answer")
        return ref

    producer._sender.append_records = lossy

    def work(t: int) -> None:
        for i in range(500):
            producer.send(topic, b"%d:%04d" % (t, i), partition=t % 2)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    producer.flush(120)
    producer.close()
    seen = [v for p in range(2) for _, v in log_values(cluster, topic, p)]
    assert len(seen) == len(set(seen)) == 2000
    for t in range(4):
        mine = [int(v.split(b":")[1]) for v in seen if v.startswith(b"%d:" % t)]
        assert mine == list(range(500))
