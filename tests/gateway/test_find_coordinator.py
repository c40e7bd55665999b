"""FindCoordinator while a coordinator's internal topic is missing, as Kafka answers it.

The internal topics are created when the cluster starts; one can still be missing (data an
older version wrote, before topics were created at launch; the topic deleted). The lookup
then starts creating it in the background and answers COORDINATOR_NOT_AVAILABLE (the client
asks again) instead of the first group or transaction request waiting for the topic's
replicas to start: on a loaded machine that outlasted the Java client's 30 s request timeout
(Kafka Connect's sink consumer and kafka-console-consumer lost their offset commits).

The first tests have no Ray (the controller and the coordinator's handle are stand-ins); the
last deletes both topics of a real one-broker cluster and uses them again through a Kafka
client.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
import ray

from actors.gateway.broker_view import InternalHandles
from actors.gateway.handlers.groups import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, _coordinator_of
from actors.group_coordinator import GroupCoordinator
from actors.names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, offsets_partition_for
from actors.protocol import DeleteTopicsRequest
from actors.transaction_coordinator import TransactionCoordinator
from actors.types import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from storage.errors import CoordinatorNotAvailableError
from tests.gateway.wire import Wire, build_request, parse_bootstrap
from tests.helpers import consume_all, wait_for

BROKERS = tuple(BrokerMetadata(b, f"node-{b}", f"/data/{b}", True, "127.0.0.1", 9000 + b) for b in range(3))
FIND = 10
COORDINATOR_NOT_AVAILABLE = 15
_ids = itertools.count()


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

    def __init__(self, controller: FakeController, groups: GroupCoordinator, txns: TransactionCoordinator) -> None:
        self.broker_id = 0
        self.controller = controller
        # Creating an internal topic is the gateway's own call (no client principal).
        self.internal = InternalHandles(
            controller,
            type("Handle", (), {"ensure_topic": _Method(txns.ensure_topic)})(),
            type("Handle", (), {"ensure_topic": _Method(groups.ensure_topic)})(),
        )

    async def cluster(self, topics):
        return await self.controller._get_metadata(type("R", (), {"topics": tuple(topics)})())


def _setup() -> tuple[FakeController, GroupCoordinator, TransactionCoordinator, FakeView]:
    controller = FakeController()
    groups, txns = GroupCoordinator("ns", {}), TransactionCoordinator("ns", {})
    groups._controller = txns._controller = controller
    return controller, groups, txns, FakeView(controller, groups, txns)


async def _until_created(coordinator) -> None:
    for _ in range(200):
        if await coordinator.ensure_topic():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the topic was not created")


def _leader_of(controller: FakeController, topic: str, key: str) -> int:
    partitions = controller.topics[topic].partitions
    return partitions[offsets_partition_for(key, len(partitions))].leader


def test_a_missing_topic_is_created_once_in_the_background():
    async def scenario():
        controller, groups, txns, view = _setup()
        for key_type, topic, coordinator in (
            (KEY_TYPE_GROUP, OFFSETS_TOPIC, groups),
            (KEY_TYPE_TRANSACTION, TRANSACTION_STATE_TOPIC, txns),
        ):
            controller.release.clear()
            for _ in range(3):  # asked again while it is being created: still one creation
                with pytest.raises(CoordinatorNotAvailableError):
                    await _coordinator_of(view, "my-key", key_type)
                await asyncio.sleep(0.01)
            assert [r.name for r in controller.created] == [topic]
            assert controller.created[0].configs["cleanup.policy"] == ["compact"]
            controller.release.set()
            await _until_created(coordinator)
            broker = await _coordinator_of(view, "my-key", key_type)
            assert broker.broker_id == _leader_of(controller, topic, "my-key") and len(controller.created) == 1
            controller.created.clear()

    asyncio.run(scenario())


def test_a_topic_deleted_after_the_coordinator_had_it_is_created_again():
    """A coordinator that once found (or created) its topic does not trust that when the
    lookup finds it gone: it asks the controller, drops what it cached, and creates it."""

    async def scenario():
        controller, groups, _, view = _setup()
        controller.release.set()
        await groups._topic.ensure()  # as at launch
        assert groups._topic._ready and [r.name for r in controller.created] == [OFFSETS_TOPIC]
        assert await _coordinator_of(view, "g", KEY_TYPE_GROUP)
        del controller.topics[OFFSETS_TOPIC]
        controller.release.clear()
        with pytest.raises(CoordinatorNotAvailableError):
            await _coordinator_of(view, "g", KEY_TYPE_GROUP)
        await asyncio.sleep(0.01)
        assert len(controller.created) == 2 and not groups._topic._ready
        controller.release.set()
        await _until_created(groups)
        assert (await _coordinator_of(view, "g", KEY_TYPE_GROUP)).broker_id == _leader_of(
            controller, OFFSETS_TOPIC, "g"
        )

    asyncio.run(scenario())


def test_a_failed_creation_is_tried_again_by_the_next_lookup():
    async def scenario():
        controller, groups, _, view = _setup()
        failures = []

        async def refuse(request):
            failures.append(request)
            raise RuntimeError("no broker yet")

        controller.create_topic = _Method(refuse)
        with pytest.raises(CoordinatorNotAvailableError):
            await _coordinator_of(view, "g", KEY_TYPE_GROUP)
        await asyncio.sleep(0.01)
        assert len(failures) == 1
        controller.create_topic = _Method(controller._create_topic)
        controller.release.set()
        with pytest.raises(CoordinatorNotAvailableError):
            await _coordinator_of(view, "g", KEY_TYPE_GROUP)
        await _until_created(groups)
        assert await _coordinator_of(view, "g", KEY_TYPE_GROUP)

    asyncio.run(scenario())


def _found(wire: Wire, request) -> object:
    """The answer to a FindCoordinator once it is not COORDINATOR_NOT_AVAILABLE."""
    answers = []

    def attempt() -> bool:
        answers.append(wire.call(request))
        return answers[-1].error_code != COORDINATOR_NOT_AVAILABLE

    wait_for(attempt, timeout=120, interval=0.2, what="a coordinator")
    return answers[-1]


def test_deleted_internal_topics_are_created_again_and_serve_kafka_clients(ray_session, tmp_path):
    """On a real cluster: both internal topics deleted, the next lookup of each answers
    COORDINATOR_NOT_AVAILABLE and starts the creation; then it names the gateway, and a
    Kafka client's group commits offsets and a transactional producer commits again."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    import rayqueue

    handle = rayqueue.launch(
        log_dirs=str(tmp_path),
        rayqueue_namespace=f"rayqueue-find-coordinator-{next(_ids)}",
        listeners="PLAINTEXT://127.0.0.1:0",
        rayqueue_num_brokers=1,
        offsets_topic_num_partitions=1,
        transaction_state_log_num_partitions=1,
    )
    try:
        admin = handle.admin()
        admin.create_topic("data", 1, 1)
        (gateway,) = [b for b in handle.metadata([]).brokers if b.port > 0]
        with Wire(parse_bootstrap(handle.bootstrap_servers)) as wire:
            for key_type, topic in ((KEY_TYPE_GROUP, OFFSETS_TOPIC), (KEY_TYPE_TRANSACTION, TRANSACTION_STATE_TOPIC)):
                assert topic in handle.metadata([topic]).topics  # created at launch
                # No client deletes an internal topic: rayqueue's own flag does (Kafka's
                # internalTopicsAllowed), to make the state an older version's data leaves.
                ray.get(handle.controller.delete_topic.remote(DeleteTopicsRequest(topic, internal_topics_allowed=True)))
                assert topic not in handle.metadata([topic]).topics
                first = wire.call(build_request(FIND, 3, key="k", key_type=key_type))
                assert first.error_code == COORDINATOR_NOT_AVAILABLE and first.node_id == -1
                found = _found(wire, build_request(FIND, 3, key="k", key_type=key_type))
                assert found.error_code == 0
                assert (found.node_id, found.host, found.port) == (gateway.broker_id, gateway.host, gateway.port)
                assert topic in handle.metadata([topic]).topics

        common = {"bootstrap.servers": handle.bootstrap_servers}
        consumer = Consumer({**common, "group.id": "after-delete", "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition("data", 0, 0)], asynchronous=False)
            (committed,) = consumer.committed([TopicPartition("data", 0)], timeout=30)
            assert committed.offset == 0 and committed.error is None
        finally:
            consumer.close()
        producer = Producer({**common, "transactional.id": "after-delete"})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce("data", b"in a transaction")
        producer.commit_transaction(60)
        reader = handle.consumer(isolation_level="read_committed", enable_auto_commit=False)
        try:
            reader.assign([rayqueue.TopicPartition("data", 0)])
            reader.seek_to_beginning([rayqueue.TopicPartition("data", 0)])
            assert [r.value for r in consume_all(reader, 1)] == [b"in a transaction"]
        finally:
            reader.close()
    finally:
        handle.shutdown(delete_data=True)
