"""The transaction coordinator actor called directly: producer ids, the state machine,
fencing, markers, timeouts, restarts, and transactional offset commits.

EndTxn answers once PrepareCommit/PrepareAbort is durable and the markers follow, so a test
that reads what a transaction ended waits for CompleteCommit/CompleteAbort (the markers are
written before it), as a Kafka reader sees a commit once its markers are in."""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import NamedTuple

import pytest
import ray

from actors.clock import SYSTEM
from actors.names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, offsets_partition_for, transaction_partition_for
from actors.protocol import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AllocateProducerIdsRequest,
    AppendOrigin,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FetchRequest,
    InitProducerIdRequest,
    IsolationLevel,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from actors.transaction_coordinator import transaction_key
from actors.transaction_coordinator.state_manager import TransactionStateManager
from actors.types import OffsetAndMetadata, TopicPartition
from rayqueue.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from storage import RecordBatchBuilder, iter_batches
from tests.helpers import consume_all, wait_for

_ids = itertools.count()


def new_tid(request) -> str:
    return f"{request.node.name}-{next(_ids)}"


class OpenTxn(NamedTuple):
    topic: str
    tp: TopicPartition
    tid: str
    pid: int
    epoch: int


@pytest.fixture
def open_txn(cluster, new_topic, request) -> OpenTxn:
    """A new topic and transactional id, with a transaction holding b"committed" open on the
    topic's partition 0."""
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    tid = new_tid(request)
    pid, epoch = open_transaction(cluster, tid, tp, b"committed")
    return OpenTxn(topic, tp, tid, pid, epoch)


def fail_appends(actor, times: int, matches) -> None:
    """Run in the coordinator: its next ``times`` appends to ``__transaction_state`` whose
    ``(key, value)`` records ``matches`` fail as an unwritable partition would."""
    topic = actor._topic
    original = topic.append
    topic.injected_failures = 0

    async def append(p, records, *args, **kwargs):
        if topic.injected_failures < times and matches(records):
            topic.injected_failures += 1
            raise CoordinatorNotAvailableError("injected: __transaction_state is not writable")
        return await original(p, records, *args, **kwargs)

    topic.append = append


def restore_appends(actor) -> int:
    """Run in the coordinator: undo :func:`fail_appends`; how many appends it failed."""
    failures = actor._topic.injected_failures
    del actor._topic.append, actor._topic.injected_failures
    return failures


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    for v in values:
        builder.append(v)
    return builder.build()


def leader_of(cluster, topic: str, partition: int = 0):
    meta = cluster.metadata([topic]).topics[topic].partitions[partition]
    return meta.leader_handle, meta.leader_epoch


def produce(cluster, tid: str, tp: TopicPartition, pid: int, epoch: int, seq: int, values: list[bytes]):
    """A transactional batch of ``tid``'s producer, with its transactional id (the leader
    verifies a transaction's first batch with the coordinator, KIP-890)."""
    leader, leader_epoch = leader_of(cluster, tp.topic, tp.partition)
    request = ProduceRequest(txn_batch(pid, epoch, seq, values), -1, 30000, leader_epoch, transactional_id=tid)
    return ray.get(leader.produce.remote(request))


def open_transaction(cluster, tid: str, tp: TopicPartition, value: bytes) -> tuple[int, int]:
    """A new producer for ``tid`` with a transaction holding ``value`` on ``tp``: (pid, epoch)."""
    coordinator = cluster.transaction_coordinator
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    pid, epoch = ident.producer_id, ident.epoch
    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])))
    produce(cluster, tid, tp, pid, epoch, 0, [value])
    return pid, epoch


def read(cluster, tp: TopicPartition, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED):
    leader, _ = leader_of(cluster, tp.topic, tp.partition)
    return ray.get(leader.fetch.remote(FetchRequest(0, 1 << 22, 0, 1, isolation)))


def markers(records: bytes) -> list[tuple[int, bool]]:
    return [(b.producer_id, b.control_record().is_commit) for b in iter_batches(records) if b.is_control]


def state_of(coordinator, tid: str):
    return ray.get(coordinator.describe_transactions.remote(DescribeTransactionsRequest([tid])))[0]


def completed(coordinator, tid: str, state: str = "CompleteCommit", timeout: float = 60):
    """Wait until the id's transaction reached ``state`` (its markers are written by then)."""
    return wait_for(lambda: (d := state_of(coordinator, tid)).state == state and d, timeout, what=f"{tid} {state}")


def completing(coordinator, tid: str) -> bool:
    """Whether a completion of the id is claimed (running or about to) in the coordinator."""
    return ray.get(coordinator.__ray_call__.remote(lambda self: self.state.completing(tid)))


def actor_pid(actor) -> int:
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))


def restart(actor, timeout: float = 60) -> None:
    """Kill ``actor`` (Ray restarts it) and wait until the new instance has loaded its state."""
    before = actor_pid(actor)
    ray.kill(actor, no_restart=False)
    wait_for(lambda: actor_pid(actor) != before and ray.get(actor.ping.remote()), timeout, what="restart and reload")


def test_producer_ids_are_unique_and_blocks_survive_a_controller_restart(cluster):
    coordinator = cluster.transaction_coordinator
    ids = [ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(None))) for _ in range(5)]
    assert all(i.epoch == 0 for i in ids) and len({i.producer_id for i in ids}) == 5

    controller = cluster.controller
    block = ray.get(controller.allocate_producer_ids.remote(AllocateProducerIdsRequest(10)))
    first = block.producer_id_start
    assert block.producer_id_len == 10
    before = cluster.describe()["controller_epoch"]
    ray.kill(controller, no_restart=False)  # Ray restarts it; it replays its metadata log
    wait_for(lambda: cluster.describe()["controller_epoch"] > before, 60, what="controller restart")
    again = ray.get(controller.allocate_producer_ids.remote(AllocateProducerIdsRequest(10))).producer_id_start
    assert again >= first + 10  # nothing handed out twice
    assert all(i.producer_id < again for i in ids)

    # A restarted coordinator takes a new block: no id of the old one comes back.
    restart(coordinator)
    later = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(None)))
    assert later.producer_id >= again + 10


def test_commit_writes_markers_everywhere_and_makes_offsets_visible(cluster, new_topic, request):
    coordinator, groups = cluster.transaction_coordinator, cluster.group_coordinator
    topic = new_topic(partitions=2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    tid, group = new_tid(request), f"group-{next(_ids)}"
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 60000)))
    pid, epoch = ident.producer_id, ident.epoch
    assert state_of(coordinator, tid).state == "Empty"

    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, tps)))
    desc = state_of(coordinator, tid)
    assert desc.state == "Ongoing" and set(desc.partitions) == set(tps) and desc.start_ms > 0
    for i, tp in enumerate(tps):
        produce(cluster, tid, tp, pid, epoch, 0, [f"v{i}".encode()])
        assert (
            read(cluster, tp, IsolationLevel.READ_COMMITTED).last_stable_offset == 0
        )  # the open transaction holds the LSO

    ray.get(coordinator.add_offsets_to_txn.remote(AddOffsetsToTxnRequest(tid, pid, epoch, group)))
    source = TopicPartition("source", 0)
    ray.get(
        groups.txn_offset_commit.remote(
            TxnOffsetCommitRequest(tid, pid, epoch, group, {source: OffsetAndMetadata(42, "meta")}, "", None, -1)
        )
    )
    assert source not in ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group)))
    with pytest.raises(UnstableOffsetCommitError):
        ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group, [source], True)))

    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))
    desc = completed(coordinator, tid)
    assert desc.partitions == ()
    for tp in tps:
        result = read(cluster, tp, IsolationLevel.READ_COMMITTED)
        assert markers(result.records) == [(pid, True)]
        assert result.last_stable_offset == result.log_end_offset == 2 and result.aborted_transactions == ()
    offsets_tp = TopicPartition(
        OFFSETS_TOPIC, offsets_partition_for(group, cluster.config["offsets.topic.num.partitions"])
    )
    assert (pid, True) in markers(read(cluster, offsets_tp).records)
    committed = ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group, [source], True)))
    assert committed[source].offset == 42 and committed[source].metadata == "meta"

    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))  # a retried commit is fine
    with pytest.raises(InvalidTxnStateError):
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, False)))  # but it cannot turn into an abort


def test_the_markers_of_one_broker_go_in_one_call(cluster, new_topic, request):
    """As Kafka's WriteTxnMarkers carries every partition one broker leads, the coordinator
    sends the markers of a transaction in one call per leader broker, not per partition."""
    coordinator = cluster.transaction_coordinator
    topic = new_topic(partitions=6)
    tps = [TopicPartition(topic, p) for p in range(6)]
    tid = new_tid(request)
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 60000)))
    pid, epoch = ident.producer_id, ident.epoch
    # The first commit looks the leaders up (one partition at a time); the second one knows them.
    for seq in (0, 1):
        ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, tps)))
        for tp in tps:
            produce(cluster, tid, tp, pid, epoch, seq, [b"v"])
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))
        completed(coordinator, tid)
    led: dict[int, tuple[object, int]] = {}
    for tp in tps:
        assert markers(read(cluster, tp, IsolationLevel.READ_COMMITTED).records) == [(pid, True)] * 2
        handle, _ = leader_of(cluster, topic, tp.partition)
        led[handle.broker_id] = (handle.host, led.get(handle.broker_id, (None, 0))[1] + 1)
    assert max(count for _, count in led.values()) >= 2  # some broker leads several of them
    for broker, count in led.values():
        assert ray.get(broker.describe_host.remote())["most_markers_per_call"] >= count


def test_abort_hides_data_and_drops_offsets(cluster, new_topic, request):
    coordinator, groups = cluster.transaction_coordinator, cluster.group_coordinator
    tp = TopicPartition(new_topic(), 0)
    tid, group = new_tid(request), f"group-{next(_ids)}"
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    pid, epoch = ident.producer_id, ident.epoch
    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])))
    produce(cluster, tid, tp, pid, epoch, 0, [b"gone"])
    ray.get(coordinator.add_offsets_to_txn.remote(AddOffsetsToTxnRequest(tid, pid, epoch, group)))
    ray.get(
        groups.txn_offset_commit.remote(
            TxnOffsetCommitRequest(
                tid, pid, epoch, group, {TopicPartition("src", 0): OffsetAndMetadata(7)}, "", None, -1
            )
        )
    )
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, False)))
    completed(coordinator, tid, "CompleteAbort")
    result = read(cluster, tp, IsolationLevel.READ_COMMITTED)
    assert markers(result.records) == [(pid, False)] and result.aborted_transactions == ((pid, 0),)
    assert ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group, None, True))) == {}

    # The next transaction of the same producer starts from a clean state.
    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])))
    produce(cluster, tid, tp, pid, epoch, 1, [b"kept"])
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))
    completed(coordinator, tid)
    result = read(cluster, tp, IsolationLevel.READ_COMMITTED)
    assert markers(result.records) == [(pid, False), (pid, True)]
    assert result.aborted_transactions == ((pid, 0),)


def test_second_instance_fences_the_first_and_aborts_its_transaction(cluster, new_topic, request):
    coordinator = cluster.transaction_coordinator
    tp = TopicPartition(new_topic(), 0)
    tid = new_tid(request)
    group = f"group-{next(_ids)}"
    first = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    ray.get(
        coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, first.producer_id, first.epoch, [tp]))
    )
    produce(cluster, tid, tp, first.producer_id, first.epoch, 0, [b"zombie"])
    ray.get(coordinator.add_offsets_to_txn.remote(AddOffsetsToTxnRequest(tid, first.producer_id, first.epoch, group)))
    commit = cluster.group_coordinator.txn_offset_commit
    ray.get(
        commit.remote(
            TxnOffsetCommitRequest(
                tid,
                first.producer_id,
                first.epoch,
                group,
                {TopicPartition("in", 0): OffsetAndMetadata(1)},
                "",
                None,
                -1,
            )
        )
    )

    second = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    assert second.producer_id == first.producer_id and second.epoch > first.epoch
    # The zombie's open transaction was aborted with a bumped epoch before the answer.
    result = read(cluster, tp, IsolationLevel.READ_COMMITTED)
    assert markers(result.records) == [(first.producer_id, False)]
    assert result.aborted_transactions == ((first.producer_id, 0),) and result.last_stable_offset == 2
    assert state_of(coordinator, tid).state == "Empty"

    with pytest.raises(ProducerFencedError):
        ray.get(
            coordinator.add_partitions_to_txn.remote(
                AddPartitionsToTxnRequest(tid, first.producer_id, first.epoch, [tp])
            )
        )
    with pytest.raises(ProducerFencedError):
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, first.producer_id, first.epoch, True)))
    # Nor can it write data: the coordinator will not vouch for its epoch (KIP-890: Kafka
    # answers PRODUCER_FENCED), and the log holds a newer epoch.
    with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
        produce(cluster, tid, tp, first.producer_id, first.epoch, 1, [b"more"])
    with pytest.raises(ProducerFencedError):  # nor commit offsets
        ray.get(
            commit.remote(
                TxnOffsetCommitRequest(
                    tid,
                    first.producer_id,
                    first.epoch,
                    group,
                    {TopicPartition("in", 0): OffsetAndMetadata(2)},
                    "",
                    None,
                    -1,
                )
            )
        )
    assert ray.get(cluster.group_coordinator.fetch_offsets.remote(OffsetFetchRequest(group))) == {}
    # KIP-360: the old instance's bump request is fenced too.
    with pytest.raises(ProducerFencedError):
        ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 60000, first.producer_id, first.epoch)))
    # The new instance works.
    ray.get(
        coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, second.producer_id, second.epoch, [tp]))
    )
    produce(cluster, tid, tp, second.producer_id, second.epoch, 0, [b"fresh"])
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, second.producer_id, second.epoch, True)))
    completed(coordinator, tid)
    assert markers(read(cluster, tp).records)[-1] == (second.producer_id, True)


def test_bad_requests_are_refused(cluster, new_topic, request):
    coordinator = cluster.transaction_coordinator
    tid = new_tid(request)
    with pytest.raises(InvalidTransactionTimeoutError):
        ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 900001)))
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    with pytest.raises(InvalidTxnStateError):  # nothing to commit
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, ident.producer_id, ident.epoch, True)))
    with pytest.raises(InvalidProducerIdMappingError):
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, ident.producer_id + 1, ident.epoch, True)))
    with pytest.raises(InvalidProducerIdMappingError):
        ray.get(coordinator.end_txn.remote(EndTxnRequest("never-initialised", ident.producer_id, ident.epoch, True)))
    with pytest.raises(UnknownTopicOrPartitionError):
        ray.get(
            coordinator.add_partitions_to_txn.remote(
                AddPartitionsToTxnRequest(
                    tid, ident.producer_id, ident.epoch, [TopicPartition("no-such-topic-here", 0)]
                )
            )
        )
    topic = new_topic()
    with pytest.raises(UnknownTopicOrPartitionError):
        ray.get(
            coordinator.add_partitions_to_txn.remote(
                AddPartitionsToTxnRequest(tid, ident.producer_id, ident.epoch, [TopicPartition(topic, 5)])
            )
        )
    with pytest.raises(UnknownMemberIdError):  # a transactional commit checks the member like a plain one
        ray.get(
            cluster.group_coordinator.txn_offset_commit.remote(
                TxnOffsetCommitRequest(
                    tid,
                    ident.producer_id,
                    ident.epoch,
                    "no-such-group",
                    {TopicPartition(topic, 0): OffsetAndMetadata(1)},
                    "member-1",
                    None,
                    3,
                )
            )
        )


def test_a_partition_added_to_a_grown_topic_is_found(cluster, admin, new_topic, request):
    """The coordinator remembers partition counts; a partition past the remembered count
    makes it ask the controller again, so a topic that grew is not refused."""
    coordinator = cluster.transaction_coordinator
    tid = new_tid(request)
    topic = new_topic()
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))

    def add(partition: int) -> None:
        ray.get(
            coordinator.add_partitions_to_txn.remote(
                AddPartitionsToTxnRequest(tid, ident.producer_id, ident.epoch, [TopicPartition(topic, partition)])
            )
        )

    add(0)  # the topic's count (1) is remembered now
    with pytest.raises(UnknownTopicOrPartitionError):
        add(1)
    admin.create_partitions(topic, 2)
    add(1)
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, ident.producer_id, ident.epoch, False)))


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(cluster, new_topic, request):
    coordinator = cluster.transaction_coordinator
    tp = TopicPartition(new_topic(), 0)
    tid = new_tid(request)
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 1000)))
    pid, epoch = ident.producer_id, ident.epoch
    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])))
    produce(cluster, tid, tp, pid, epoch, 0, [b"hung"])
    # The background loop (every transaction.abort.timed.out.transaction.cleanup.interval.ms) aborts it.
    desc = wait_for(lambda: (d := state_of(coordinator, tid)).state == "CompleteAbort" and d, 60, what="timeout abort")
    assert desc.producer_epoch == epoch + 1
    result = read(cluster, tp, IsolationLevel.READ_COMMITTED)
    assert markers(result.records) == [(pid, False)] and result.aborted_transactions == ((pid, 0),)
    with pytest.raises(ProducerFencedError):
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))
    with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):  # as above
        produce(cluster, tid, tp, pid, epoch, 1, [b"late"])


def test_coordinator_restart_mid_transaction_keeps_it(cluster, new_topic, request):
    coordinator = cluster.transaction_coordinator
    tp = TopicPartition(new_topic(), 0)
    tid = new_tid(request)
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    pid, epoch = ident.producer_id, ident.epoch
    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])))
    produce(cluster, tid, tp, pid, epoch, 0, [b"survives"])
    restart(coordinator)
    desc = state_of(coordinator, tid)
    assert desc.state == "Ongoing" and desc.partitions == (tp,) and desc.producer_epoch == epoch
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))
    completed(coordinator, tid)
    assert markers(read(cluster, tp).records) == [(pid, True)]


def test_coordinator_restart_after_prepare_commit_completes_the_commit(cluster, admin, new_topic, request):
    coordinator, groups = cluster.transaction_coordinator, cluster.group_coordinator
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    tid, group = new_tid(request), f"group-{next(_ids)}"
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    pid, epoch = ident.producer_id, ident.epoch
    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])))
    produce(cluster, tid, tp, pid, epoch, 0, [b"committed-after-restart"])
    ray.get(coordinator.add_offsets_to_txn.remote(AddOffsetsToTxnRequest(tid, pid, epoch, group)))
    ray.get(
        groups.txn_offset_commit.remote(
            TxnOffsetCommitRequest(
                tid, pid, epoch, group, {TopicPartition("in", 0): OffsetAndMetadata(11)}, "", None, -1
            )
        )
    )
    # The data partition cannot take an acks=all marker now: the commit stops after PrepareCommit,
    # which is what EndTxn answers.
    admin.alter_configs(topic, {"min.insync.replicas": 2})
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)), timeout=60)
    assert state_of(coordinator, tid).state == "PrepareCommit" and completing(coordinator, tid)
    # The actor closes (its completion stops, nothing left running) and dies: the next one completes it.
    ray.get(coordinator.close.remote(), timeout=30)
    assert ray.get(coordinator.__ray_call__.remote(lambda self: len(self._completions))) == 0
    restart(coordinator)
    assert state_of(coordinator, tid).state == "PrepareCommit"  # reloaded, still retrying the marker
    admin.alter_configs(topic, delete_configs=["min.insync.replicas"])
    wait_for(lambda: state_of(coordinator, tid).state == "CompleteCommit", 60, what="commit completed on reload")
    assert markers(read(cluster, tp).records) == [(pid, True)]
    assert (
        ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group, None, True)))[TopicPartition("in", 0)].offset
        == 11
    )
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))  # the client's retry succeeds


def test_group_coordinator_reload_honours_transactional_offsets(cluster, new_topic, request):
    coordinator, groups = cluster.transaction_coordinator, cluster.group_coordinator
    tp = TopicPartition(new_topic(), 0)
    group = f"group-{next(_ids)}"
    outcomes = {}
    for name, end in (("committed", True), ("aborted", False), ("pending", None)):
        tid = new_tid(request)
        ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
        pid, epoch = ident.producer_id, ident.epoch
        ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])))
        ray.get(coordinator.add_offsets_to_txn.remote(AddOffsetsToTxnRequest(tid, pid, epoch, group)))
        source = TopicPartition(name, 0)
        ray.get(
            groups.txn_offset_commit.remote(
                TxnOffsetCommitRequest(tid, pid, epoch, group, {source: OffsetAndMetadata(100)}, "", None, -1)
            )
        )
        if end is not None:
            ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, end)))
            completed(coordinator, tid, "CompleteCommit" if end else "CompleteAbort")
        outcomes[name] = (tid, pid, epoch, source)
    ray.get(
        groups.commit_offsets.remote(
            OffsetCommitRequest(group, {TopicPartition("plain", 0): OffsetAndMetadata(5)}, "", None, -1)
        )
    )

    restart(groups)  # it replays __consumer_offsets, markers included
    offsets = ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group)))
    assert offsets[outcomes["committed"][3]].offset == 100
    assert offsets[TopicPartition("plain", 0)].offset == 5
    assert outcomes["aborted"][3] not in offsets and outcomes["pending"][3] not in offsets
    with pytest.raises(UnstableOffsetCommitError):
        ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group, None, True)))
    # Partitions without a pending commit are stable.
    assert ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group, [TopicPartition("plain", 0)], True)))

    tid, pid, epoch, source = outcomes["pending"]
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))
    completed(coordinator, tid)
    assert ray.get(groups.fetch_offsets.remote(OffsetFetchRequest(group, None, True)))[source].offset == 100


def test_describe_and_list_transactions(cluster, admin, new_topic, request):
    coordinator = cluster.transaction_coordinator
    tp = TopicPartition(new_topic(), 0)
    tid = new_tid(request)
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 30000)))
    ray.get(
        coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, ident.producer_id, ident.epoch, [tp]))
    )
    desc = admin.describe_transactions([tid, "unknown-id"])
    assert desc[tid].state == "Ongoing" and desc[tid].timeout_ms == 30000 and desc[tid].partitions == (tp,)
    assert desc[tid].producer_id == ident.producer_id and desc["unknown-id"].state == "Dead"
    listed = admin.list_transactions(states=["Ongoing"])
    assert any(t.transactional_id == tid and t.producer_id == ident.producer_id for t in listed)
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, ident.producer_id, ident.epoch, False)))
    assert all(t.transactional_id != tid for t in admin.list_transactions(states=["Ongoing"]))
    # The state lives in the compacted internal topic.
    assert TRANSACTION_STATE_TOPIC in admin.list_topics(include_internal=True)
    assert admin.describe_configs(TRANSACTION_STATE_TOPIC)["cleanup.policy"][0] in (("compact",), ["compact"])


def test_epoch_bumps_retries_and_exhaustion(cluster, request):
    coordinator = cluster.transaction_coordinator
    tid = new_tid(request)
    first = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    # KIP-360: the current producer asks for a bump with its id and epoch ...
    bumped = ray.get(
        coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 60000, first.producer_id, first.epoch))
    )
    assert (bumped.producer_id, bumped.epoch) == (first.producer_id, first.epoch + 1)
    # ... and a retry of that request (its answer was lost) gets the same answer, no second bump.
    again = ray.get(
        coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 60000, first.producer_id, first.epoch))
    )
    assert again == bumped

    # An epoch at the int16 limit: the next instance gets a new producer id at epoch 0.
    # (Written straight into __transaction_state, then reloaded by a restarted coordinator.)
    record = {
        "producer_id": bumped.producer_id,
        "producer_epoch": 32766,
        "last_producer_id": bumped.producer_id,
        "last_producer_epoch": 32765,
        "timeout_ms": 60000,
        "state": "Empty",
        "partitions": [],
        "start_ms": -1,
        "last_update_ms": int(time.time() * 1000),
    }
    partitions = len(cluster.metadata([TRANSACTION_STATE_TOPIC]).topics[TRANSACTION_STATE_TOPIC].partitions)
    leader, epoch = leader_of(cluster, TRANSACTION_STATE_TOPIC, offsets_partition_for(tid, partitions))
    builder = RecordBatchBuilder()
    builder.append(json.dumps(record).encode(), key=transaction_key(tid))
    # As the coordinator writes it: a client's append to an internal topic is refused.
    ray.get(leader.produce.remote(ProduceRequest(builder.build(), -1, 30000, epoch, AppendOrigin.COORDINATOR)))
    restart(coordinator)
    assert state_of(coordinator, tid).producer_epoch == 32766
    rotated = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    assert rotated.producer_id != bumped.producer_id and rotated.epoch == 0
    with pytest.raises(ProducerFencedError):
        ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid, 60000, bumped.producer_id, 32766 - 5)))


def test_idle_transactional_ids_expire(cluster, request):
    coordinator = cluster.transaction_coordinator
    tid = new_tid(request)
    first = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    future = int(time.time() * 1000) + 8 * 24 * 3600 * 1000  # past transactional.id.expiration.ms (7 days)
    assert ray.get(coordinator.expire_transactional_ids.remote(future)) >= 1
    assert state_of(coordinator, tid).state == "Dead"
    restart(coordinator)  # the tombstone is durable
    assert state_of(coordinator, tid).state == "Dead"
    fresh = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
    assert fresh.producer_id != first.producer_id and fresh.epoch == 0


# -- EndTxn answers at PrepareCommit; the completion runs after the answer ------------------------


def test_end_txn_answers_at_prepare_commit_and_the_next_transaction_waits_for_the_markers(
    cluster, admin, new_topic, request
):
    coordinator = cluster.transaction_coordinator
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    tid = new_tid(request)
    pid, epoch = open_transaction(cluster, tid, tp, b"first")
    consumer = cluster.consumer(auto_offset_reset="earliest", isolation_level="read_committed", fetch_max_wait_ms=50)
    consumer.assign([tp])
    # The partition's leader cannot take an acks=all marker for now (one replica, two required).
    admin.alter_configs(topic, {"min.insync.replicas": 2})
    try:
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)), timeout=60)
        assert state_of(coordinator, tid).state == "PrepareCommit" and completing(coordinator, tid)
        result = read(cluster, tp, IsolationLevel.READ_COMMITTED)
        assert result.last_stable_offset == 0 and markers(result.records) == []  # not visible yet
        # A retried commit is answered at once (the outcome is durable); an abort is refused.
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)), timeout=30)
        with pytest.raises(InvalidTxnStateError):
            ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, False)), timeout=30)
        # The next transaction's AddPartitionsToTxn waits for the markers (the completion
        # holds the id's lock), rather than starting before the last one is complete.
        following = coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp]))
        ready, _ = ray.wait([following], timeout=2)
        assert not ready and state_of(coordinator, tid).state == "PrepareCommit"
    finally:
        admin.alter_configs(topic, delete_configs=["min.insync.replicas"])
    ray.get(following, timeout=60)
    desc = state_of(coordinator, tid)
    assert desc.state == "Ongoing" and desc.partitions == (tp,)  # the next transaction
    assert markers(read(cluster, tp).records) == [(pid, True)]
    try:
        assert [r.value for r in consume_all(consumer, 1)] == [b"first"]
    finally:
        consumer.close()


def test_a_completion_that_fails_is_retried_until_it_completes(cluster, new_topic, request):
    coordinator = cluster.transaction_coordinator
    tp = TopicPartition(new_topic(), 0)
    tid = new_tid(request)
    pid, epoch = open_transaction(cluster, tid, tp, b"committed")

    def complete_commit(records) -> bool:  # this id's CompleteCommit
        return any(
            key == transaction_key(tid) and value is not None and json.loads(value)["state"] == "CompleteCommit"
            for key, value in records
        )

    ray.get(coordinator.__ray_call__.remote(fail_appends, 2, complete_commit))
    try:
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)), timeout=60)
        completed(coordinator, tid)
    finally:
        failures = ray.get(coordinator.__ray_call__.remote(restore_appends))
    assert failures == 2
    assert not completing(coordinator, tid)
    # The retries did not write the marker again: it was in before the first failure.
    assert markers(read(cluster, tp).records) == [(pid, True)]
    assert read(cluster, tp, IsolationLevel.READ_COMMITTED).last_stable_offset == 2


def test_a_prepare_state_with_no_completion_running_gets_one(cluster, admin, new_topic, request):
    coordinator = cluster.transaction_coordinator
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    tid = new_tid(request)
    pid, epoch = open_transaction(cluster, tid, tp, b"aborted")

    def stop_completions(actor) -> int:
        # As if the completion had died: its task is cancelled (which releases the id's lock).
        tasks = [t for t in actor._completions if t.get_coro().__qualname__.endswith("_run_completion")]
        for task in tasks:
            task.get_loop().call_soon_threadsafe(task.cancel)
        return len(tasks)

    admin.alter_configs(topic, {"min.insync.replicas": 2})
    try:
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, False)), timeout=60)
        assert ray.get(coordinator.__ray_call__.remote(stop_completions)) >= 1
        wait_for(lambda: not completing(coordinator, tid), 30, what="the completion stopped")
        assert state_of(coordinator, tid).state == "PrepareAbort"
        # The next call finds PrepareAbort with nothing completing it: it starts a completion
        # and answers CONCURRENT_TRANSACTIONS, which the client retries.
        with pytest.raises(ConcurrentTransactionsError):
            ray.get(
                coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])), timeout=60
            )
        assert completing(coordinator, tid)
    finally:
        admin.alter_configs(topic, delete_configs=["min.insync.replicas"])
    completed(coordinator, tid, "CompleteAbort")
    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])), timeout=60)
    result = read(cluster, tp, IsolationLevel.READ_COMMITTED)
    assert markers(result.records) == [(pid, False)] and result.aborted_transactions == ((pid, 0),)


# -- CompleteX folded into the next transaction's first record -------------------------------------


def state_records(cluster, tid: str) -> list[list[tuple[bytes, bytes | None]]]:
    """The id's ``__transaction_state`` records as written, batch by batch."""
    partitions = len(cluster.metadata([TRANSACTION_STATE_TOPIC]).topics[TRANSACTION_STATE_TOPIC].partitions)
    tp = TopicPartition(TRANSACTION_STATE_TOPIC, transaction_partition_for(tid, partitions))
    key = transaction_key(tid)
    batches = ([(r.key, r.value) for r in batch if r.key == key] for batch in iter_batches(read(cluster, tp).records))
    return [b for b in batches if b]


def state_log(cluster, tid: str) -> list[list[str]]:
    """The states the id's records write, batch by batch."""
    return [[json.loads(v)["state"] if v is not None else "Dead" for _, v in b] for b in state_records(cluster, tid)]


def adds_waiting(coordinator, tid: str) -> int:
    return ray.get(coordinator.__ray_call__.remote(lambda self: self._adds_waiting.get(tid, 0)))


def markers_done(coordinator, tid: str) -> bool:
    return ray.get(coordinator.__ray_call__.remote(lambda self: self.state.markers_done(tid)))


def add_waiting_for_the_markers(cluster, admin, topic: str, tid: str, pid: int, epoch: int, add_epoch: int):
    """EndTxn (commit) of the open transaction while its markers cannot be written (the
    topic wants two in-sync replicas and has one), an AddPartitionsToTxn (with ``add_epoch``)
    waiting for the id's lock behind the completion; then the markers are let through."""
    coordinator = cluster.transaction_coordinator
    tp = TopicPartition(topic, 0)
    admin.alter_configs(topic, {"min.insync.replicas": 2})
    try:
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)), timeout=60)
        following = coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, add_epoch, [tp]))
        wait_for(lambda: adds_waiting(coordinator, tid) == 1, 30, what="the next add waits for the lock")
        assert state_of(coordinator, tid).state == "PrepareCommit" and not markers_done(coordinator, tid)
    finally:
        admin.alter_configs(topic, delete_configs=["min.insync.replicas"])
    return following


def test_the_next_add_writes_complete_commit_and_its_ongoing_in_one_batch(cluster, admin, new_topic, request):
    coordinator = cluster.transaction_coordinator
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    tid = new_tid(request)
    pid, epoch = open_transaction(cluster, tid, tp, b"first")
    following = add_waiting_for_the_markers(cluster, admin, topic, tid, pid, epoch, epoch)
    ray.get(following, timeout=60)
    desc = state_of(coordinator, tid)
    assert desc.state == "Ongoing" and desc.partitions == (tp,) and not completing(coordinator, tid)
    # Kafka's log shape, the last two records in one batch: one replicated write.
    assert state_log(cluster, tid) == [["Empty"], ["Ongoing"], ["PrepareCommit"], ["CompleteCommit", "Ongoing"]]
    # A load of that log (the coordinator's replay) comes out in the same state, nothing owed.
    loaded = TransactionStateManager(SYSTEM)
    for batch in state_records(cluster, tid):
        for key, value in batch:
            loaded.replay(key, value)
    assert loaded.get(tid).state == "Ongoing" and loaded.get(tid).partitions == {tp}
    assert tid not in loaded.pending_completions()
    assert markers(read(cluster, tp).records) == [(pid, True)]

    # The second transaction commits with no add waiting: its completion writes CompleteCommit.
    produce(cluster, tid, tp, pid, epoch, 1, [b"second"])
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)))
    completed(coordinator, tid)
    assert state_log(cluster, tid)[-2:] == [["PrepareCommit"], ["CompleteCommit"]]
    consumer = cluster.consumer(auto_offset_reset="earliest", isolation_level="read_committed", fetch_max_wait_ms=50)
    try:
        consumer.assign([tp])
        assert [r.value for r in consume_all(consumer, 2)] == [b"first", b"second"]
    finally:
        consumer.close()


def test_back_to_back_transactions_of_a_producer_are_all_read_committed(cluster, new_topic, request):
    topic = new_topic(2)
    tid = new_tid(request)
    producer = cluster.producer(transactional_id=tid, acks="all", linger_ms=5)
    try:
        producer.init_transactions()
        for t in range(6):
            producer.begin_transaction()
            for i in range(4):
                producer.send(topic, b"%d-%d" % (t, i), key=b"%d" % i)
            producer.commit_transaction()
    finally:
        producer.close(30)
    completed(cluster.transaction_coordinator, tid)
    log = state_log(cluster, tid)
    # Every CompleteCommit went alone or with the next transaction's Ongoing; each of the six
    # transactions was prepared and completed once.
    assert all(len(b) == 1 or b == ["CompleteCommit", "Ongoing"] for b in log), log
    states = [s for b in log for s in b]
    assert states.count("PrepareCommit") == 6 and states.count("CompleteCommit") == 6
    assert states[-2:] == ["PrepareCommit", "CompleteCommit"]
    consumer = cluster.consumer(auto_offset_reset="earliest", isolation_level="read_committed", fetch_max_wait_ms=50)
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = sorted(r.value for r in consume_all(consumer, 24))
    finally:
        consumer.close()
    assert got == sorted(b"%d-%d" % (t, i) for t in range(6) for i in range(4))


def test_an_add_refused_after_the_markers_still_leaves_the_id_in_complete_commit(cluster, admin, open_txn):
    coordinator = cluster.transaction_coordinator
    topic, tp, tid, pid, epoch = open_txn
    fenced = add_waiting_for_the_markers(cluster, admin, topic, tid, pid, epoch, epoch + 1)
    with pytest.raises(ProducerFencedError):
        ray.get(fenced, timeout=60)
    # Written before the error was answered, alone.
    assert state_of(coordinator, tid).state == "CompleteCommit" and not completing(coordinator, tid)
    assert state_log(cluster, tid)[-2:] == [["PrepareCommit"], ["CompleteCommit"]]
    assert markers(read(cluster, tp).records) == [(pid, True)]
    assert read(cluster, tp, IsolationLevel.READ_COMMITTED).last_stable_offset == 2


def test_a_folded_append_that_fails_leaves_a_completion_that_writes_only_complete_commit(cluster, admin, open_txn):
    coordinator = cluster.transaction_coordinator
    topic, tp, tid, pid, epoch = open_txn

    def folded(records) -> bool:  # this id's CompleteCommit + Ongoing
        return len(records) == 2 and records[0][0] == transaction_key(tid)

    ray.get(coordinator.__ray_call__.remote(fail_appends, 1, folded))
    try:
        following = add_waiting_for_the_markers(cluster, admin, topic, tid, pid, epoch, epoch)
        with pytest.raises(CoordinatorNotAvailableError):
            ray.get(following, timeout=60)
        completed(coordinator, tid)  # the completion the failed add started
    finally:
        assert ray.get(coordinator.__ray_call__.remote(restore_appends)) == 1
    assert state_log(cluster, tid)[-2:] == [["PrepareCommit"], ["CompleteCommit"]]
    assert markers(read(cluster, tp).records) == [(pid, True)]  # not written again
    wait_for(lambda: not completing(coordinator, tid), 30, what="the completion ended")
    # The client's retry starts the next transaction.
    ray.get(coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp])), timeout=60)
    assert state_of(coordinator, tid).state == "Ongoing"


def test_an_add_that_stops_waiting_leaves_the_complete_commit_to_the_completion(cluster, admin, open_txn):
    coordinator = cluster.transaction_coordinator
    topic, tp, tid, pid, epoch = open_txn
    admin.alter_configs(topic, {"min.insync.replicas": 2})  # the markers wait
    try:
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)), timeout=60)
        following = coordinator.add_partitions_to_txn.remote(AddPartitionsToTxnRequest(tid, pid, epoch, [tp]))
        wait_for(lambda: adds_waiting(coordinator, tid) == 1, 30, what="the next add waits for the lock")
        ray.cancel(following)  # its client went away
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(following, timeout=30)
        wait_for(lambda: adds_waiting(coordinator, tid) == 0, 30, what="the cancelled add no longer counted")
    finally:
        admin.alter_configs(topic, delete_configs=["min.insync.replicas"])
    completed(coordinator, tid)  # nobody waits: the completion wrote it
    wait_for(lambda: not completing(coordinator, tid), 30, what="the completion ended")
    assert markers(read(cluster, tp).records) == [(pid, True)]
    assert state_log(cluster, tid)[-2:] == [["PrepareCommit"], ["CompleteCommit"]]


def stand_in_add(actor, tid: str, count: int) -> None:
    """A stand-in for an add waiting for the id's lock (``count`` 1), then giving up (0): what
    _IdLock does for a real one, which cannot be timed to give up at that very moment."""

    def run() -> None:
        if count:
            actor._adds_waiting[tid] = count
        else:
            actor._adds_waiting.pop(tid, None)
            actor._resume_completion(tid)

    # __ray_call__ runs beside the actor's event loop: do it there, as the actor would.
    actor._load_task.get_loop().call_soon_threadsafe(run)


def left_to_a_stand_in_add(cluster, admin, topic: str, tid: str, pid: int, epoch: int) -> None:
    """EndTxn (commit) whose completion writes the markers and leaves the CompleteCommit to
    a stand-in add that never comes: PrepareCommit, markers done, no completion running."""
    coordinator = cluster.transaction_coordinator
    admin.alter_configs(topic, {"min.insync.replicas": 2})
    try:
        ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)), timeout=60)
        ray.get(coordinator.__ray_call__.remote(stand_in_add, tid, 1))
        wait_for(lambda: adds_waiting(coordinator, tid) == 1, 30, what="the stand-in add counted")
    finally:
        admin.alter_configs(topic, delete_configs=["min.insync.replicas"])
    wait_for(lambda: markers_done(coordinator, tid) and not completing(coordinator, tid), 60, what="left to the add")
    assert state_of(coordinator, tid).state == "PrepareCommit"


def test_a_completion_left_to_an_add_that_gave_up_is_resumed(cluster, admin, open_txn):
    coordinator = cluster.transaction_coordinator
    topic, tp, tid, pid, epoch = open_txn
    left_to_a_stand_in_add(cluster, admin, topic, tid, pid, epoch)
    # A retried EndTxn is answered at once meanwhile, as in any PrepareCommit.
    ray.get(coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, True)), timeout=30)
    ray.get(coordinator.__ray_call__.remote(stand_in_add, tid, 0))
    completed(coordinator, tid)
    assert state_log(cluster, tid)[-1] == ["CompleteCommit"]
    assert markers(read(cluster, tp).records) == [(pid, True)]


def test_init_producer_id_completes_a_prepare_commit_whose_markers_are_done(cluster, admin, open_txn):
    coordinator = cluster.transaction_coordinator
    topic, tp, tid, pid, epoch = open_txn
    left_to_a_stand_in_add(cluster, admin, topic, tid, pid, epoch)
    # A new instance: the CompleteCommit first (the markers are not written again), then the bump.
    ident = ray.get(coordinator.init_producer_id.remote(InitProducerIdRequest(tid)), timeout=60)
    assert (ident.producer_id, ident.epoch) == (pid, epoch + 1)
    assert state_log(cluster, tid)[-3:] == [["PrepareCommit"], ["CompleteCommit"], ["Empty"]]
    assert markers(read(cluster, tp).records) == [(pid, True)]
    assert read(cluster, tp, IsolationLevel.READ_COMMITTED).last_stable_offset == 2
    ray.get(coordinator.__ray_call__.remote(stand_in_add, tid, 0))  # nothing owed: a no-op
    assert state_of(coordinator, tid).state == "Empty" and not completing(coordinator, tid)
