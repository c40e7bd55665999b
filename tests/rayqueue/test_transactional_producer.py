"""The transactional producer (issue #7): init, begin, send, offsets, commit, abort, fencing."""

from __future__ import annotations

import itertools
import time

import pytest
import ray

from rayqueue import OffsetAndMetadata, TopicPartition
from rayqueue.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidRecordError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
)
from rayqueue.producer import transaction_manager
from rayqueue.producer.transaction_manager import TransactionAbortedError, coordinator_call
from tests.helpers import wait_for
from tests.rayqueue.test_idempotent_producer import raw_batches

_ids = itertools.count()


def _txn_id(request) -> str:
    return f"{request.node.name[:40]}-{next(_ids)}"


def _read(cluster, topic: str, partitions: int, isolation: str, expected: int) -> list:
    """Every record of the topic as a consumer with ``isolation`` sees it (waits for ``expected``)."""
    consumer = cluster.consumer(auto_offset_reset="earliest", isolation_level=isolation, fetch_max_wait_ms=50)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    records: list = []
    try:

        def caught_up() -> bool:
            records.extend(consumer.poll(100))
            ends = consumer.end_offsets(tps)
            return len(records) >= expected and all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_for(caught_up, timeout=60, interval=0, what=f"{expected} records ({isolation})")
    finally:
        consumer.close()
    return records


@pytest.fixture
def txn_producer(cluster, request):
    """A factory of transactional producers (closed at the end): ``txn_producer(txn_id=None, **cfg)``."""
    made = []

    def make(txn_id: str | None = None, **config):
        producer = cluster.producer(transactional_id=txn_id or _txn_id(request), **config)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        try:
            producer.close(10)
        except Exception:  # noqa: BLE001 - a fenced producer may refuse to flush
            pass


def test_commit_makes_records_visible_and_the_marker_is_skipped(cluster, admin, new_topic, txn_producer):
    topic = new_topic(partitions=3)
    producer = txn_producer(linger_ms=5)
    producer.init_transactions()
    producer.begin_transaction()
    futures = [producer.send(topic, b"c%d" % i, partition=i % 3) for i in range(30)]
    producer.flush(30)
    # Sent, so in the coordinator's transaction, but not committed yet.
    description = admin.describe_transactions([producer.config["transactional.id"]])
    (txn,) = description.values()
    assert txn.state == "Ongoing"
    assert set(txn.partitions) == {TopicPartition(topic, p) for p in range(3)}
    producer.commit_transaction()
    assert all(f.get(10).offset >= 0 for f in futures)
    for isolation in ("read_uncommitted", "read_committed"):
        records = _read(cluster, topic, 3, isolation, 30)
        assert sorted(r.value for r in records) == sorted(b"c%d" % i for i in range(30))
    for p in range(3):
        batches = raw_batches(cluster, topic, p)
        data, markers = [b for b in batches if not b.is_control], [b for b in batches if b.is_control]
        assert data and all(b.is_transactional and b.producer_id == producer._txn.producer_id for b in data)
        assert len(markers) == 1 and markers[0].control_record().is_commit
        assert markers[0].base_offset > data[-1].last_offset


def test_abort_hides_records_from_read_committed(cluster, new_topic, txn_producer):
    topic = new_topic(partitions=2)
    producer = txn_producer()
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(10):
        producer.send(topic, b"aborted-%d" % i, partition=i % 2)
    producer.flush(30)
    producer.abort_transaction()
    producer.begin_transaction()
    for i in range(4):
        producer.send(topic, b"kept-%d" % i, partition=i % 2)
    producer.commit_transaction()
    committed = _read(cluster, topic, 2, "read_committed", 4)
    assert sorted(r.value for r in committed) == [b"kept-%d" % i for i in range(4)]
    everything = _read(cluster, topic, 2, "read_uncommitted", 14)
    assert len(everything) == 14  # no control records handed out, aborted ones visible


def test_abort_fails_records_not_yet_sent(cluster, new_topic, txn_producer):
    topic = new_topic()
    producer = txn_producer(linger_ms=60000, batch_size=1 << 20)
    producer.init_transactions()
    producer.begin_transaction()
    future = producer.send(topic, b"never-sent")
    producer.abort_transaction()
    with pytest.raises(TransactionAbortedError):
        future.get(10)
    # Nothing reached the coordinator, and the producer goes on.
    producer.begin_transaction()
    producer.send(topic, b"sent")
    producer.commit_transaction()
    assert [r.value for r in _read(cluster, topic, 1, "read_committed", 1)] == [b"sent"]


def test_a_fenced_zombie_can_neither_send_nor_commit(cluster, new_topic, txn_producer, request):
    topic = new_topic()
    txn_id = _txn_id(request)
    zombie = txn_producer(txn_id)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send(topic, b"zombie-1").get(30)
    successor = txn_producer(txn_id)
    successor.init_transactions()  # fences the zombie and aborts its open transaction
    assert successor._txn.epoch > zombie._txn.epoch
    with pytest.raises(ProducerFencedError):
        zombie.send(topic, b"zombie-2").get(30)
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.send(topic, b"zombie-3")
    with pytest.raises(ProducerFencedError):
        zombie.begin_transaction()
    successor.begin_transaction()
    successor.send(topic, b"successor")
    successor.commit_transaction()
    assert [r.value for r in _read(cluster, topic, 1, "read_committed", 1)] == [b"successor"]


def test_zombie_commit_is_fenced_by_the_coordinator(cluster, new_topic, txn_producer, request):
    topic = new_topic()
    txn_id = _txn_id(request)
    zombie = txn_producer(txn_id)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send(topic, b"zombie").get(30)
    txn_producer(txn_id).init_transactions()
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.abort_transaction()


def test_offsets_sent_to_a_transaction_commit_only_with_it(cluster, admin, new_topic, txn_producer, request):
    source, sink = new_topic(partitions=2), new_topic()
    group = f"g-{_txn_id(request)}"
    tps = [TopicPartition(source, 0), TopicPartition(source, 1)]
    producer = txn_producer()
    producer.init_transactions()

    producer.begin_transaction()
    producer.send(sink, b"x")
    producer.send_offsets_to_transaction({tps[0]: 5, tps[1]: OffsetAndMetadata(7, "m")}, group)
    producer.abort_transaction()
    assert all(om is None for om in admin.list_group_offsets(group, tps).values())

    producer.begin_transaction()
    producer.send(sink, b"y")
    producer.send_offsets_to_transaction({tps[0]: 10, tps[1]: OffsetAndMetadata(12, "meta")}, group)
    producer.commit_transaction()
    committed = wait_for(
        lambda: all(admin.list_group_offsets(group, tps).values()) and admin.list_group_offsets(group, tps)
    )
    assert (committed[tps[0]].offset, committed[tps[1]].offset, committed[tps[1]].metadata) == (10, 12, "meta")


def test_send_offsets_with_a_consumers_group_metadata(cluster, admin, new_topic, txn_producer, request):
    source, sink = new_topic(), new_topic()
    group = f"g-{_txn_id(request)}"
    filler = cluster.producer()
    for i in range(5):
        filler.send(source, b"in-%d" % i)
    filler.close()
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe([source])
    records = wait_for(lambda: list(consumer.poll(200)), timeout=60, what="records through the group")
    producer = txn_producer()
    producer.init_transactions()
    producer.begin_transaction()
    for record in records:
        producer.send(sink, b"out-" + record.value)
    tp = TopicPartition(source, 0)
    producer.send_offsets_to_transaction({tp: consumer.position(tp)}, consumer.group_metadata())
    producer.commit_transaction()
    consumer.close()
    # The offset is the group's once the commit's marker reached __consumer_offsets (right after
    # commit_transaction returns, as in Kafka, it may still be on its way).
    committed = wait_for(lambda: admin.list_group_offsets(group, [tp]).get(tp), timeout=60, what="the committed offset")
    assert committed.offset == records[-1].offset + 1


def test_transactional_calls_out_of_order_raise(cluster, new_topic, txn_producer):
    topic = new_topic()
    plain = cluster.producer()
    for call in (plain.init_transactions, plain.begin_transaction, plain.commit_transaction, plain.abort_transaction):
        with pytest.raises(IllegalStateError, match="transactional"):
            call()
    plain.close()

    producer = txn_producer()
    with pytest.raises(IllegalStateError):
        producer.send(topic, b"before init")
    with pytest.raises(IllegalStateError):
        producer.begin_transaction()
    with pytest.raises(IllegalStateError):
        producer.commit_transaction()
    producer.init_transactions()
    with pytest.raises(IllegalStateError):
        producer.init_transactions()
    with pytest.raises(IllegalStateError):
        producer.send(topic, b"before begin")
    with pytest.raises(IllegalStateError):
        producer.send_many(topic, [b"before begin"])
    with pytest.raises(IllegalStateError):
        producer.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "g")
    with pytest.raises(IllegalStateError):
        producer.commit_transaction()
    with pytest.raises(IllegalStateError):
        producer.abort_transaction()
    producer.begin_transaction()
    with pytest.raises(IllegalStateError):
        producer.begin_transaction()
    producer.commit_transaction()  # an empty transaction commits without the coordinator
    producer.begin_transaction()
    producer.abort_transaction()


def test_a_failed_send_makes_commit_raise_until_aborted(cluster, new_topic, txn_producer):
    topic = new_topic()
    producer = txn_producer(linger_ms=0)
    producer.init_transactions()
    real = producer._sender.append_records
    calls = []

    def failing(host, request):
        calls.append(len(request.entries))
        if len(calls) == 2:
            raise InvalidRecordError("injected: rejected for good")
        return real(host, request)

    producer._sender.append_records = failing
    producer.begin_transaction()
    producer.send(topic, b"ok").get(30)
    bad = producer.send(topic, b"bad")
    with pytest.raises(InvalidRecordError):
        bad.get(30)
    with pytest.raises(KafkaError, match="must be aborted"):
        producer.send(topic, b"more")
    with pytest.raises(KafkaError, match="must be aborted"):
        producer.commit_transaction()
    epoch = producer._txn.epoch
    producer.abort_transaction()
    # A batch of the aborted transaction failed after it had a sequence: the epoch is bumped.
    assert producer._txn.epoch == epoch + 1
    producer.begin_transaction()
    producer.send(topic, b"after")
    producer.commit_transaction()
    assert [r.value for r in _read(cluster, topic, 1, "read_committed", 1)] == [b"after"]


def test_new_partitions_are_added_in_one_call_and_concurrent_transactions_retried(cluster, new_topic, txn_producer):
    """All partitions new in one drain go to the coordinator in one add_partitions_to_txn
    call; ConcurrentTransactions answers are retried with backoff."""
    topic = new_topic(partitions=4)
    producer = txn_producer(linger_ms=200, retry_backoff_ms=10)
    producer.init_transactions()
    real = producer._txn.coordinator()
    calls: list = []

    class Flaky:
        """The coordinator, but the first two add_partitions_to_txn calls are refused."""

        def __getattr__(self, name):
            return getattr(real, name)

        @property
        def add_partitions_to_txn(self):
            class Method:
                @staticmethod
                def remote(request):
                    calls.append(sorted(request.partitions))
                    if len(calls) <= 2:
                        return _failed_ref.remote()
                    return real.add_partitions_to_txn.remote(request)

            return Method

    producer._txn._coordinator = Flaky()
    producer.begin_transaction()
    for p in range(4):
        producer.send(topic, b"p%d" % p, partition=p)
    producer.commit_transaction()
    assert len(calls) == 3 and all(c == sorted(TopicPartition(topic, p) for p in range(4)) for c in calls)
    assert len(_read(cluster, topic, 4, "read_committed", 4)) == 4


@ray.remote(num_cpus=0)
def _failed_ref():
    raise ConcurrentTransactionsError("injected: the previous transaction is still completing")


@ray.remote(num_cpus=0)
class Flaky:
    """An actor whose ``call`` raises ``fail_with`` (a rayqueue error's name) ``times`` times."""

    def __init__(self) -> None:
        self.calls = 0

    def call(self, fail_with: str, times: int) -> int:
        self.calls += 1
        if self.calls <= times:
            from rayqueue import errors

            raise getattr(errors, fail_with)("injected")
        return self.calls


def test_coordinator_calls_ride_through_retriable_errors(ray_session):
    for error in ("CoordinatorLoadInProgressError", "ConcurrentTransactionsError"):
        actor = Flaky.remote()
        assert coordinator_call(lambda a=actor: a, "call", error, 2, timeout_s=30, backoff_s=0.01, what="t") == 3
    actor = Flaky.remote()
    with pytest.raises(ProducerFencedError):
        coordinator_call(lambda: actor, "call", "ProducerFencedError", 1, timeout_s=30, backoff_s=0.01, what="t")
    actor = Flaky.remote()
    with pytest.raises(KafkaTimeoutError):
        coordinator_call(
            lambda: actor, "call", "ConcurrentTransactionsError", 10**6, timeout_s=0.3, backoff_s=0.01, what="t"
        )


def test_concurrent_transactions_is_retried_sooner_than_retry_backoff(ray_session, monkeypatch):
    """CONCURRENT_TRANSACTIONS (the id's previous transaction is still completing, its EndTxn
    answered already) is retried after 20 ms, as Kafka's client does, not after
    retry.backoff.ms doubling; other retriable errors keep the doubling backoff."""
    waits: list[float] = []

    class Clock:
        """The module's clock, recording the pauses instead of sleeping."""

        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            waits.append(seconds)

    monkeypatch.setattr(transaction_manager, "time", Clock)

    actor = Flaky.remote()
    assert (
        coordinator_call(lambda: actor, "call", "ConcurrentTransactionsError", 3, timeout_s=30, backoff_s=0.1, what="t")
        == 4
    )
    assert waits == [0.02, 0.02, 0.02]
    waits.clear()
    actor = Flaky.remote()
    assert (
        coordinator_call(
            lambda: actor, "call", "CoordinatorLoadInProgressError", 3, timeout_s=30, backoff_s=0.1, what="t"
        )
        == 4
    )
    assert waits == pytest.approx([0.1, 0.2, 0.4])
    # A retry.backoff.ms shorter than 20 ms is kept; the sender's AddPartitions retry uses the same rule.
    assert transaction_manager.retry_backoff(ConcurrentTransactionsError("x"), 0.005) == 0.005
    assert transaction_manager.retry_backoff(KafkaError("x"), 0.1) == 0.1


def test_coordinator_restart_is_ridden_through(cluster, new_topic, txn_producer):
    topic = new_topic()
    producer = txn_producer()
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"before").get(30)
    ray.kill(cluster.transaction_coordinator, no_restart=False)  # Ray restarts it; it reloads
    producer.send(topic, b"after")
    producer.commit_transaction()
    values = [r.value for r in _read(cluster, topic, 1, "read_committed", 2)]
    assert values == [b"before", b"after"]
