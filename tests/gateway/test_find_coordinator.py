"""FindCoordinator while the coordinators' internal topics do not exist yet, as Kafka answers
it: the topic is created in the background and the client is told COORDINATOR_NOT_AVAILABLE
(it asks again) instead of its first group or transaction request waiting for the topic's
replicas to start (which on a loaded machine outlasted the Java client's 30 s request
timeout: kafka-console-consumer's final offset commit was lost). No Ray: the controller and
the coordinator's actor handle are stand-ins."""

from __future__ import annotations

import asyncio

import pytest

from actors.gateway.handlers.groups import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, _coordinator_of
from actors.group_coordinator import OFFSETS_TOPIC, GroupCoordinator, offsets_partition_for
from actors.types import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from storage.errors import CoordinatorNotAvailableError

BROKERS = tuple(BrokerMetadata(b, f"node-{b}", f"/data/{b}", True, "127.0.0.1", 9000 + b) for b in range(3))


class _Method:
    """An actor method stand-in: ``.remote(...)`` returns the coroutine."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return self.fn(*args)


class FakeController:
    """Metadata and CreateTopics; a creation completes only once ``release`` is set."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicMetadata] = {}
        self.created: list = []
        self.release = asyncio.Event()
        self.get_metadata = _Method(self._get_metadata)
        self.create_topic = _Method(self._create_topic)

    async def _get_metadata(self, request):
        wanted = request.topics if request.topics is not None else tuple(self.topics)
        return ClusterMetadata("cluster", 1, BROKERS, {t: self.topics[t] for t in wanted if t in self.topics})

    async def _create_topic(self, request):
        self.created.append(request)
        await self.release.wait()
        parts = tuple(
            PartitionMetadata(request.name, p, p % 3, 0, (p % 3,), (p % 3,)) for p in range(request.num_partitions)
        )
        self.topics[request.name] = TopicMetadata(request.name, parts, internal=True)


class FakeView:
    """The part of the gateway's BrokerView FindCoordinator uses."""

    def __init__(self, controller: FakeController, coordinator: GroupCoordinator) -> None:
        self.broker_id = 0
        self.controller = controller
        self.group_coordinator = type("Handle", (), {"ensure_topic": _Method(coordinator.ensure_topic)})()
        self.transaction_coordinator = None

    async def cluster(self, topics):
        return await self.controller._get_metadata(type("R", (), {"topics": tuple(topics)})())


def test_find_coordinator_creates_the_offsets_topic_in_the_background():
    async def scenario():
        controller = FakeController()
        coordinator = GroupCoordinator("ns", {})
        coordinator._controller = controller
        view = FakeView(controller, coordinator)
        for _ in range(3):  # asked again while it is being created: still one creation
            with pytest.raises(CoordinatorNotAvailableError):
                await _coordinator_of(view, "my-group", KEY_TYPE_GROUP)
            await asyncio.sleep(0.01)
        assert [r.name for r in controller.created] == [OFFSETS_TOPIC]
        assert controller.created[0].configs["cleanup.policy"] == ["compact"]
        controller.release.set()
        for _ in range(100):
            if await coordinator.ensure_topic():
                break
            await asyncio.sleep(0.01)
        broker = await _coordinator_of(view, "my-group", KEY_TYPE_GROUP)
        partitions = len(controller.topics[OFFSETS_TOPIC].partitions)
        leader = controller.topics[OFFSETS_TOPIC].partitions[offsets_partition_for("my-group", partitions)].leader
        assert broker.broker_id == leader and len(controller.created) == 1
        # Without a transaction coordinator handle (a bare gateway) the gateway names itself.
        assert (await _coordinator_of(view, "txn", KEY_TYPE_TRANSACTION)).broker_id == 0

    asyncio.run(scenario())
