"""actors.internal_topic: replay reads to the log end, not only the high watermark; creating the topic,
writes retried through leader changes, and a transactional batch's errors given to its producer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from actors.internal_topic import InternalTopic, replay_partition
from actors.protocol import (
    AppendOrigin,
    CreateTopicsRequest,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from actors.types import OffsetAndTimestamp, TopicPartition
from storage import RecordBatchBuilder
from storage.batch_header import batch_boundaries, read_header
from storage.errors import (
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
    ProducerFencedError,
)


class _Method:
    def __init__(self, fn) -> None:
        self.remote = fn


class FakeLeader:
    """A leader whose log holds ``batches`` from ``log_start``; consumer fetches stop at its
    high watermark, which ``hw_steps`` raise one by one each time a fetch waits."""

    def __init__(self, values: list[list[bytes]], log_start: int, hw_steps: list[int]) -> None:
        data, offset = b"", 0
        for vals in values:
            builder = RecordBatchBuilder(base_offset=offset)
            for v in vals:
                builder.append(v, key=v, timestamp=0)
            data += builder.build()
            offset += len(vals)
        self.data, self.log_end, self.log_start = data, offset, log_start
        self.hw_steps = list(hw_steps)
        self.hw = self.hw_steps.pop(0)
        self.waits = 0
        self.list_offsets = _Method(self._list_offsets)
        self.fetch = _Method(self._fetch)

    async def _list_offsets(self, request: ListOffsetsRequest):
        return OffsetAndTimestamp(self.log_start, -1)

    async def _fetch(self, request: FetchRequest):
        offset = request.fetch_offset
        if offset >= self.hw and request.max_wait_ms > 0:
            self.waits += 1
            if self.hw_steps:
                self.hw = self.hw_steps.pop(0)  # the followers caught up meanwhile
        out = b""
        for position, size in batch_boundaries(self.data):
            header = read_header(self.data, position)
            if header.last_offset >= offset and header.base_offset < self.hw:
                out += self.data[position : position + size]
        return FetchResponse(out, self.hw, self.hw, self.log_start, self.log_end, 0)


def replayed(leader: FakeLeader) -> list[bytes]:
    async def run() -> list[bytes]:
        values = []
        async for batch, first in replay_partition(leader, 0):
            values.extend(r.value for r in batch if r.offset >= first)
        return values

    return asyncio.run(run())


def test_replay_waits_for_the_high_watermark_to_reach_the_log_end():
    # A new leader: its log holds offsets 0-9, its high watermark is still at 4.
    leader = FakeLeader([[b"a", b"b"], [b"c", b"d"], [b"e", b"f", b"g"], [b"h", b"i", b"j"]], 0, [4, 7, 10])
    assert replayed(leader) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"i", b"j"]
    assert leader.waits == 2


def test_replay_starts_at_the_log_start_inside_a_batch_and_never_waits_when_caught_up():
    leader = FakeLeader([[b"a", b"b", b"c"], [b"d"]], 1, [4])
    assert replayed(leader) == [b"b", b"c", b"d"]
    assert leader.waits == 0


def test_replay_of_an_empty_partition_returns_at_once():
    leader = FakeLeader([], 0, [0])
    assert replayed(leader) == [] and leader.waits == 0


class FakePartition:
    """A partition leader whose produce calls raise ``errors`` one by one, then succeed."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = list(errors)
        self.produced: list[tuple] = []
        self.produce = _Method(self._produce)

    async def _produce(self, request: ProduceRequest):
        self.produced.append((request.records, request.acks, request.current_leader_epoch, request.origin))
        if self.errors:
            raise self.errors.pop(0)


class FakeController:
    """Enough of the controller for InternalTopic: metadata, topic creation, wait_online."""

    def __init__(self, brokers: int, leader: FakePartition, existing_partitions: int | None = None) -> None:
        self.brokers = list(range(brokers))
        self.partitions = existing_partitions
        self.created: list[tuple] = []
        self.leader = leader
        self.lookups = 0
        self.get_metadata = _Method(self._get_metadata)
        self.create_topic = _Method(self._create_topic)
        self.wait_online = _Method(self._wait_online)

    async def _get_metadata(self, request: MetadataRequest):
        found = {} if self.partitions is None else {"__t": SimpleNamespace(partitions=list(range(self.partitions)))}
        return SimpleNamespace(topics=found, brokers=self.brokers)

    async def _create_topic(self, request: CreateTopicsRequest):
        self.created.append((request.name, request.num_partitions, request.replication_factor, request.configs))
        self.partitions = request.num_partitions

    async def _wait_online(self, tp: TopicPartition, timeout_s: float):
        self.lookups += 1
        return SimpleNamespace(leader_handle=self.leader, leader_epoch=self.lookups)


def test_first_write_creates_the_topic_compacted_with_rf_and_min_isr_capped_at_the_brokers():
    leader = FakePartition([])
    controller = FakeController(2, leader)
    topic = InternalTopic("__t", lambda: controller, 5, 3, min_insync_replicas=3)
    asyncio.run(topic.append(1, [(b"k", b"v")]))
    assert controller.created == [("__t", 5, 2, {"cleanup.policy": ["compact"], "min.insync.replicas": 2})]
    # Written as the coordinator: an internal topic refuses a client's append.
    assert topic.num_partitions == 5 and [(acks, origin) for _, acks, _, origin in leader.produced] == [
        (-1, AppendOrigin.COORDINATOR)
    ]


def test_an_existing_topic_is_not_created_again_and_gives_its_partition_count():
    controller = FakeController(3, FakePartition([]), existing_partitions=7)
    topic = InternalTopic("__t", lambda: controller, 50, 3)
    asyncio.run(topic.ensure())
    assert controller.created == [] and topic.num_partitions == 7


def test_a_retriable_error_is_retried_at_a_freshly_looked_up_leader():
    leader = FakePartition([NotLeaderOrFollowerError("moved")])
    controller = FakeController(1, leader, existing_partitions=1)
    asyncio.run(InternalTopic("__t", lambda: controller, 1, 1).append(0, [(b"k", None)]))
    assert [epoch for _, _, epoch, _ in leader.produced] == [1, 2]


def test_a_non_retriable_error_is_coordinator_not_available_naming_the_partition():
    controller = FakeController(1, FakePartition([InvalidRecordError("bad")]), existing_partitions=1)
    with pytest.raises(CoordinatorNotAvailableError, match="__t-0"):
        asyncio.run(InternalTopic("__t", lambda: controller, 1, 1).append(0, [(b"k", b"v")]))


def test_a_transactional_batch_is_written_as_the_coordinator_and_its_producer_sees_its_own_error():
    leader = FakePartition([InvalidProducerEpochError("old epoch"), InvalidRecordError("bad")])
    controller = FakeController(1, leader, existing_partitions=1)
    topic = InternalTopic("__t", lambda: controller, 1, 1)
    with pytest.raises(ProducerFencedError, match="producer 7 epoch 2"):
        asyncio.run(topic.append(0, [(b"k", b"v")], producer_id=7, producer_epoch=2))
    with pytest.raises(InvalidRecordError, match="__t-0"):
        asyncio.run(topic.append(0, [(b"k", b"v")], producer_id=7, producer_epoch=2))
    header = read_header(leader.produced[0][0], 0)
    assert (header.producer_id, header.producer_epoch, header.is_transactional) == (7, 2, True)
    assert leader.produced[0][3] is AppendOrigin.COORDINATOR
