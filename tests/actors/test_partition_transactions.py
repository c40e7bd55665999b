"""The replica's side of exactly-once: duplicates, markers, the LSO and read_committed fetches.

A transactional batch reaches a leader only in a transaction the coordinator knows (KIP-890:
the leader asks it before the transaction's first batch there), so these tests open each
transaction at the coordinator (``transactions``), then drive the replica's markers
themselves."""

from __future__ import annotations

import itertools

import pytest
import ray

from actors.protocol import (
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FetchRequest,
    InitProducerIdRequest,
    IsolationLevel,
    ListOffsetsRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from actors.types import TopicPartition
from rayqueue.errors import (
    InvalidProducerEpochError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    ProducerFencedError,
)
from storage import RecordBatchBuilder, iter_batches
from tests.helpers import kill_broker, wait_for

# Producer ids far above anything the coordinator hands out in a test session.
_pids = itertools.count(10**12)
_tids = itertools.count()
# Long enough that the coordinator never aborts one of these transactions by itself mid-test.
TXN_TIMEOUT_MS = 900_000


@pytest.fixture
def transactions(cluster):
    """``open(topic) -> (transactional id, producer id)``: a transaction the coordinator
    knows, at epoch 0, holding partition 0 of ``topic``. Afterwards each is aborted through
    the coordinator (one already fenced is left as it is) and its end waited for, so none
    outlives its test."""
    yield from _transactions(cluster)


@pytest.fixture
def failover_transactions(failover_cluster):
    """``transactions`` on the failover cluster."""
    yield from _transactions(failover_cluster)


def _transactions(cluster):
    coordinator = cluster.transaction_coordinator
    opened: list[tuple[str, int]] = []

    def open_(topic: str) -> tuple[str, int]:
        tid = f"partition-txn-{next(_tids)}"
        pid = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid, TXN_TIMEOUT_MS))).producer_id
        tp = TopicPartition(topic, 0)
        ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, 0, (tp,))))
        opened.append((tid, pid))
        return tid, pid

    yield open_
    for tid, pid in opened:
        try:
            ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, 0, False)), timeout=30)
        except ProducerFencedError:
            continue
        wait_for(
            lambda tid=tid: (
                ray.get(coordinator.describe_transactions.remote(DescribeTransactionsRequest((tid,))))[0].state
                in ("CompleteAbort", "Empty")
            ),
            60,
            what=f"the end of {tid}",
        )


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes], transactional: bool = True) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional
    )
    for v in values:
        builder.append(v)
    return builder.build()


def plain_batch(values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder()
    for v in values:
        builder.append(v)
    return builder.build()


def leader_of(cluster, topic: str, partition: int = 0):
    meta = cluster.metadata([topic]).topics[topic].partitions[partition]
    return meta.leader_handle, meta.leader_epoch


def values_of(records: bytes) -> list[bytes]:
    return [r.value for b in iter_batches(records) if not b.is_control for r in b]


def txn_produce(tid: str, records: bytes, epoch: int) -> ProduceRequest:
    return ProduceRequest(records, -1, 30000, epoch, transactional_id=tid)


def test_read_committed_stops_at_the_lso_and_reports_aborted_transactions(cluster, new_topic, transactions):
    topic = new_topic()
    leader, epoch = leader_of(cluster, topic)
    aborted_tid, aborted_pid = transactions(topic)
    ray.get(leader.produce.remote(ProduceRequest(plain_batch([b"a", b"b"]), -1, 30000, epoch)))  # 0-1
    ray.get(leader.produce.remote(txn_produce(aborted_tid, txn_batch(aborted_pid, 0, 0, [b"x", b"y"]), epoch)))  # 2-3
    ray.get(leader.produce.remote(ProduceRequest(plain_batch([b"c"]), -1, 30000, epoch)))  # 4

    uncommitted = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0)))
    assert values_of(uncommitted.records) == [b"a", b"b", b"x", b"y", b"c"]
    committed = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0, 1, IsolationLevel.READ_COMMITTED)))
    assert committed.high_watermark == 5 and committed.last_stable_offset == 2
    assert values_of(committed.records) == [b"a", b"b"] and committed.aborted_transactions == ()
    assert ray.get(leader.describe.remote())["last_stable_offset"] == 2
    assert ray.get(leader.list_offsets.remote(ListOffsetsRequest(-1, epoch, IsolationLevel.READ_COMMITTED))).offset == 2

    marker = ray.get(leader.write_txn_marker.remote(WriteTxnMarkersRequest(aborted_pid, 0, 0, False, epoch)))
    assert marker.base_offset == 5
    committed = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0, 1, IsolationLevel.READ_COMMITTED)))
    assert committed.last_stable_offset == committed.high_watermark == 6
    # The records are all there (the consumer drops the aborted ones); the fetch says which.
    assert values_of(committed.records) == [b"a", b"b", b"x", b"y", b"c"]
    assert committed.aborted_transactions == ((aborted_pid, 2),)
    control = [b for b in iter_batches(committed.records) if b.is_control]
    assert len(control) == 1 and not control[0].control_record().is_commit

    committed_tid, committed_pid = transactions(topic)
    ray.get(leader.produce.remote(txn_produce(committed_tid, txn_batch(committed_pid, 0, 0, [b"z"]), epoch)))  # 6
    ray.get(leader.write_txn_marker.remote(WriteTxnMarkersRequest(committed_pid, 0, 0, True, epoch)))  # 7
    after = ray.get(leader.fetch.remote(FetchRequest(6, 1 << 20, 0, 1, IsolationLevel.READ_COMMITTED)))
    assert values_of(after.records) == [b"z"] and after.aborted_transactions == ()
    assert after.last_stable_offset == 8


def test_read_committed_long_poll_waits_for_the_lso(cluster, new_topic, transactions):
    topic = new_topic()
    leader, epoch = leader_of(cluster, topic)
    tid, pid = transactions(topic)
    ray.get(leader.produce.remote(txn_produce(tid, txn_batch(pid, 0, 0, [b"open"]), epoch)))
    pending = leader.fetch.remote(FetchRequest(0, 1 << 20, 60000, 1, IsolationLevel.READ_COMMITTED))
    ready, _ = ray.wait([pending], timeout=0.5)
    assert not ready  # the data is below the HW but above the LSO: nothing to return yet
    ray.get(leader.write_txn_marker.remote(WriteTxnMarkersRequest(pid, 0, 0, True, epoch)))
    result = ray.get(pending, timeout=30)
    assert values_of(result.records) == [b"open"] and result.last_stable_offset == 2


def test_duplicate_batch_is_answered_with_its_original_offsets(cluster, new_topic):
    topic = new_topic()
    leader, epoch = leader_of(cluster, topic)
    pid = next(_pids)
    first = txn_batch(pid, 0, 0, [b"1", b"2"], transactional=False)
    r1 = ray.get(leader.produce.remote(ProduceRequest(first, -1, 30000, epoch)))
    ray.get(leader.produce.remote(ProduceRequest(txn_batch(pid, 0, 2, [b"3"], transactional=False), -1, 30000, epoch)))
    again = ray.get(leader.produce.remote(ProduceRequest(first, -1, 30000, epoch)))  # a retry of the first batch
    assert (again.base_offset, again.last_offset) == (r1.base_offset, r1.last_offset) == (0, 1)
    fetched = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0)))
    assert values_of(fetched.records) == [b"1", b"2", b"3"] and fetched.log_end_offset == 3


def test_marker_needs_min_insync_replicas(cluster, new_topic):
    topic = new_topic(min_insync_replicas=2)  # one replica: acks=all can never be satisfied
    leader, epoch = leader_of(cluster, topic)
    with pytest.raises(NotEnoughReplicasError):
        ray.get(leader.write_txn_marker.remote(WriteTxnMarkersRequest(next(_pids), 0, 0, True, epoch)))


def test_marker_fences_older_epochs_and_survives_a_leader_change(
    failover_cluster, failover_topic, failover_transactions
):
    cluster, new_topic, transactions = failover_cluster, failover_topic, failover_transactions
    topic = new_topic(replication_factor=3)
    leader, epoch = leader_of(cluster, topic)
    tid, pid = transactions(topic)
    ray.get(leader.produce.remote(txn_produce(tid, txn_batch(pid, 0, 0, [b"t1", b"t2"]), epoch)))
    kill_broker(leader)  # the controller elects another ISR member
    meta = wait_for(
        lambda: (
            (m := cluster.metadata([topic]).topics[topic].partitions[0]).leader_epoch > epoch
            and m.leader_handle is not None
            and m
        ),
        60,
        what="a new leader",
    )
    new_leader = meta.leader_handle
    # The new leader rebuilt the producer's open transaction from the replicated log.
    assert (
        ray.get(
            new_leader.fetch.remote(FetchRequest(0, 1 << 20, 0, 1, IsolationLevel.READ_COMMITTED))
        ).last_stable_offset
        == 0
    )
    # A new instance of the transactional id fences the old one: the coordinator aborts its
    # transaction with a bumped epoch, its marker lands on the new leader ...
    ray.get(cluster.transaction_coordinator.init_producer_id.remote(InitProducerIdRequest(tid, TXN_TIMEOUT_MS)))
    result = wait_for(
        lambda: (
            (
                r := ray.get(new_leader.fetch.remote(FetchRequest(0, 1 << 20, 0, 1, IsolationLevel.READ_COMMITTED)))
            ).last_stable_offset
            == 3
            and r
        ),
        60,
        what="the fencing abort",
    )
    assert result.aborted_transactions == ((pid, 0),)
    # ... and the old epoch cannot write (the coordinator refuses to vouch for it; the log
    # would refuse the epoch as well).
    with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
        ray.get(new_leader.produce.remote(txn_produce(tid, txn_batch(pid, 0, 2, [b"zombie"]), meta.leader_epoch)))


def test_batch_ahead_of_its_predecessor_waits_for_it(cluster, new_topic):
    """Ray runs an async actor's calls out of order: a producer's second batch may arrive
    first. It waits for the first instead of failing with OutOfOrderSequence."""
    topic = new_topic()
    leader, epoch = leader_of(cluster, topic)
    pid = next(_pids)
    ray.get(
        leader.produce.remote(ProduceRequest(txn_batch(pid, 0, 0, [b"1", b"2"], transactional=False), -1, 30000, epoch))
    )
    third = leader.produce.remote(ProduceRequest(txn_batch(pid, 0, 3, [b"4"], transactional=False), -1, 30000, epoch))
    ready, _ = ray.wait([third], timeout=0.3)
    assert not ready  # held back, not refused
    second = ray.get(
        leader.produce.remote(ProduceRequest(txn_batch(pid, 0, 2, [b"3"], transactional=False), -1, 30000, epoch))
    )
    assert second.base_offset == 2 and ray.get(third, timeout=30).base_offset == 3
    fetched = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0)))
    assert values_of(fetched.records) == [b"1", b"2", b"3", b"4"]
    # A gap that is never filled still fails, once the wait is over.
    with pytest.raises(OutOfOrderSequenceError):
        ray.get(
            leader.produce.remote(ProduceRequest(txn_batch(pid, 0, 9, [b"x"], transactional=False), 1, 1000, epoch))
        )


def test_new_leader_answers_a_retried_batch_with_its_original_offsets(failover_cluster, failover_topic):
    """Followers keep the producer state too: after a failover, a batch the producer retries
    (its first answer was lost with the old leader) is a duplicate on the new leader."""
    cluster, new_topic = failover_cluster, failover_topic
    topic = new_topic(partitions=1, replication_factor=3)
    old, epoch = leader_of(cluster, topic)
    pid = next(_pids)
    batches = [txn_batch(pid, 0, seq, [b"v%d" % seq], transactional=False) for seq in range(3)]
    first = [
        ray.get(old.produce.remote(ProduceRequest(b, -1, 30000, epoch))) for b in batches
    ]  # acks=all: on every replica
    kill_broker(old)

    def new_leader():
        handle, new_epoch = leader_of(cluster, topic)
        return (handle, new_epoch) if new_epoch > epoch and handle is not None else None

    leader, new_epoch = wait_for(new_leader, timeout=60, what="a new leader")
    # Every one of the producer's last batches is answered from the state, nothing appended.
    for batch, original in zip(batches, first, strict=True):
        again = ray.get(leader.produce.remote(ProduceRequest(batch, -1, 30000, new_epoch)))
        assert (again.base_offset, again.last_offset) == (original.base_offset, original.last_offset)
    fetched = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0)))
    assert values_of(fetched.records) == [b"v0", b"v1", b"v2"]
    # The next sequence goes on where the old leader left off.
    nxt = ray.get(
        leader.produce.remote(ProduceRequest(txn_batch(pid, 0, 3, [b"v3"], transactional=False), -1, 30000, new_epoch))
    )
    assert nxt.base_offset == 3
