"""The Controller actor: brokers, topics, replica placement, leaders, epochs.

It is the one place cluster metadata changes, and every change is written to the
metadata log (``MetadataLog``) before it takes effect; a controller restarted by Ray
replays that log and re-attaches to (or re-creates) the replica actors. It watches every
replica through Ray: each replica's ``run`` call stays pending for the replica's life,
so its failure tells the controller the replica died. It never sits on the data path:
clients ask it for metadata (leader actor handles and epochs) and talk to leaders directly.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.config import broker_config, topic_defaults
from actors.metadata_log import MetadataLog
from actors.partition import PartitionReplica
from actors.types import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from storage.config import LOG_CONFIG
from storage.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    LeaderNotAvailableError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)

CONTROLLER_NAME = "controller"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
NO_LEADER = -1


def replica_actor_name(topic: str, partition: int, broker_id: int) -> str:
    """The Ray actor name of one replica (unique within the cluster's namespace)."""
    return f"replica|{topic}|{partition}|{broker_id}"


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; a name that could leave the data dir never passes."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 from a random UUID, as Kafka's Uuid.toString()."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def assign_replicas(
    num_partitions: int, replication_factor: int, brokers: list[int], first_partition: int = 0, start: int | None = None
) -> list[list[int]]:
    """Kafka's rack-unaware default assignment: leaders round-robin from a random start,
    followers shifted so that the replicas of consecutive partitions spread out."""
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactorError(f"replication factor {replication_factor} > {n} available brokers")
    start = random.randrange(n) if start is None else start
    shift = start
    out = []
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out.append(replicas)
    return out


@dataclass
class _Partition:
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0


@dataclass
class _Topic:
    name: str
    configs: dict[str, Any]
    partitions: list[_Partition] = field(default_factory=list)


@dataclass
class ClusterState:
    """Everything the metadata log records, rebuilt by replaying it."""

    cluster_id: str = ""
    controller_epoch: int = 0
    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    topics: dict[str, _Topic] = field(default_factory=dict)

    def apply(self, record: dict[str, Any]) -> None:
        """Apply one metadata record."""
        kind = record["type"]
        if kind == "cluster":
            self.cluster_id = record["cluster_id"]
        elif kind == "controller_epoch":
            self.controller_epoch = record["epoch"]
        elif kind == "broker":
            self.brokers[record["broker_id"]] = BrokerMetadata(
                record["broker_id"], record["node_id"], record["data_dir"], record.get("alive", True)
            )
        elif kind == "topic":
            self.topics[record["name"]] = _Topic(record["name"], record["configs"])
        elif kind == "topic_config":
            self.topics[record["name"]].configs = record["configs"]
        elif kind == "partition":
            partitions = self.topics[record["topic"]].partitions
            state = _Partition(
                record["replicas"], record["leader"], record["leader_epoch"], record["isr"], record["partition_epoch"]
            )
            if record["partition"] == len(partitions):
                partitions.append(state)
            else:
                partitions[record["partition"]] = state
        elif kind == "delete_topic":
            self.topics.pop(record["name"], None)
        else:
            raise InvalidRequestError(f"unknown metadata record type {kind!r}")


class Controller:
    """Owns cluster metadata; creates, watches and restarts replica actors."""

    def __init__(self, namespace: str, config: dict[str, Any]) -> None:
        self._namespace = namespace
        self._config = broker_config(config)
        self._root = Path(self._config["log.dirs"])
        self._metadata = MetadataLog(self._root / "__cluster_metadata-0")
        self._state = ClusterState()
        for record in self._metadata.replay():
            self._state.apply(record)
        if not self._state.cluster_id:
            self._write({"type": "cluster", "cluster_id": new_cluster_id()})
        self._write({"type": "controller_epoch", "epoch": self._state.controller_epoch + 1})
        self._handles: dict[tuple[str, int, int], Any] = {}
        self._watches: dict[tuple[str, int, int], asyncio.Task] = {}
        self._lock: asyncio.Lock | None = None
        self._started = False
        self._stopping = False
        logger.info(
            "controller epoch %d for cluster %s (%d topics)",
            self._state.controller_epoch,
            self._state.cluster_id,
            len(self._state.topics),
        )

    # -- lifecycle ------------------------------------------------------------------------

    async def register_brokers(self, node_ids: list[str]) -> ClusterMetadata:
        """Bind the brokers to Ray nodes (round-robin) and bring every replica up.

        Called by ``rayqueue.launch``. Broker ids and data dirs persist with the data; a
        relaunch on the same data binds them to the current nodes.
        """
        async with self._mutex():
            for broker_id in range(self._config["rayqueue.num.brokers"]):
                node = node_ids[broker_id % len(node_ids)]
                data_dir = str(self._root / f"broker-{broker_id}")
                known = self._state.brokers.get(broker_id)
                if known is None or known.node_id != node or not known.alive:
                    self._write(
                        {"type": "broker", "broker_id": broker_id, "node_id": node, "data_dir": data_dir, "alive": True}
                    )
            self._started = False
        await self._ensure_started()
        return await self.get_metadata()

    async def _ensure_started(self) -> None:
        """After a (re)start, attach to or create every replica and watch it."""
        if self._started:
            return
        async with self._mutex():
            if self._started:
                return
            starts = []
            for topic in self._state.topics.values():
                for p, part in enumerate(topic.partitions):
                    for broker in part.replicas:
                        starts.append(self._attach_or_start(topic.name, p, broker))
            await asyncio.gather(*starts)
            for topic in self._state.topics.values():
                for p in range(len(topic.partitions)):
                    await self._elect_if_needed(topic.name, p, bump=False)
            self._started = True

    async def shutdown(self, delete_data: bool = False) -> None:
        """Close every replica cleanly (clean-shutdown markers) and stop watching."""
        self._stopping = True
        for task in self._watches.values():
            task.cancel()
        closes = [handle.close.remote(delete_data) for handle in self._handles.values()]
        for ref in closes:
            try:
                await ref
            except ray.exceptions.RayActorError:
                pass
        for handle in self._handles.values():
            ray.kill(handle, no_restart=True)
        self._handles.clear()
        self._metadata.close()

    # -- topics ---------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        num_partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, Any] | None = None,
        replica_assignment: list[list[int]] | None = None,
    ) -> TopicMetadata:
        """Create a topic (Kafka's CreateTopics) and start its replicas."""
        await self._ensure_started()
        validate_topic_name(name)
        overrides = LOG_CONFIG.parse(configs or {}).non_default() if configs else {}
        overrides = {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()}
        async with self._mutex():
            if name in self._state.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            live = self._live_brokers()
            if replica_assignment is not None:
                assignment = [list(r) for r in replica_assignment]
                self._check_assignment(assignment)
            else:
                partitions = num_partitions or self._config["num.partitions"]
                if partitions < 1:
                    raise InvalidPartitionsError(f"num_partitions={partitions}; must be at least 1")
                rf = replication_factor or self._config["default.replication.factor"]
                if rf < 1:
                    raise InvalidReplicationFactorError(f"replication factor {rf}; must be at least 1")
                assignment = assign_replicas(partitions, rf, live)
            self._check_supported_rf(assignment)
            self._write({"type": "topic", "name": name, "configs": overrides})
            for p, replicas in enumerate(assignment):
                self._write_partition(name, p, _Partition(replicas, NO_LEADER, -1, list(replicas)))
            await asyncio.gather(*(self._attach_or_start(name, p, b) for p, r in enumerate(assignment) for b in r))
            for p in range(len(assignment)):
                await self._elect_if_needed(name, p, bump=True)
        logger.info("created topic %s with %d partitions", name, len(assignment))
        return self._topic_metadata(self._state.topics[name])

    async def delete_topic(self, name: str) -> None:
        """Delete a topic, its replicas and their data."""
        await self._ensure_started()
        if not self._config["delete.topic.enable"]:
            raise PolicyViolationError("delete.topic.enable is false")
        async with self._mutex():
            topic = self._require_topic(name)
            self._write({"type": "delete_topic", "name": name})
            for p, part in enumerate(topic.partitions):
                for broker in part.replicas:
                    await self._stop_replica(name, p, broker, delete=True)

    async def create_partitions(self, name: str, total: int, assignment: list[list[int]] | None = None) -> TopicMetadata:
        """Grow a topic to ``total`` partitions (Kafka never shrinks one)."""
        await self._ensure_started()
        async with self._mutex():
            topic = self._require_topic(name)
            current = len(topic.partitions)
            if total <= current:
                raise InvalidPartitionsError(f"topic {name!r} has {current} partitions; asked for {total}")
            rf = len(topic.partitions[0].replicas)
            if assignment is None:
                assignment = assign_replicas(total - current, rf, self._live_brokers(), first_partition=current)
            else:
                self._check_assignment(assignment)
            self._check_supported_rf(assignment)
            for i, replicas in enumerate(assignment):
                self._write_partition(name, current + i, _Partition(list(replicas), NO_LEADER, -1, list(replicas)))
            await asyncio.gather(
                *(self._attach_or_start(name, current + i, b) for i, r in enumerate(assignment) for b in r)
            )
            for p in range(current, total):
                await self._elect_if_needed(name, p, bump=True)
            return self._topic_metadata(topic)

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, sorted."""
        return sorted(t for t in self._state.topics if include_internal or t not in INTERNAL_TOPICS)

    async def describe_configs(self, name: str) -> dict[str, tuple[Any, str]]:
        """Every topic config with its value and source (DEFAULT, STATIC_BROKER, DYNAMIC_TOPIC)."""
        topic = self._require_topic(name)
        broker_defaults = topic_defaults(self._config)
        out = {}
        for key, spec in LOG_CONFIG.keys.items():
            if key in topic.configs:
                out[key] = (topic.configs[key], "DYNAMIC_TOPIC_CONFIG")
            elif broker_defaults.get(key, spec.default) != spec.default:
                out[key] = (broker_defaults[key], "STATIC_BROKER_CONFIG")
            else:
                out[key] = (spec.default, "DEFAULT_CONFIG")
        return out

    async def alter_configs(
        self, name: str, set_configs: dict[str, Any] | None = None, delete_configs: list[str] | None = None
    ) -> dict[str, Any]:
        """Set and/or remove topic config overrides (Kafka's IncrementalAlterConfigs)."""
        await self._ensure_started()
        async with self._mutex():
            topic = self._require_topic(name)
            merged = dict(topic.configs)
            for key in delete_configs or []:
                merged.pop(LOG_CONFIG.canonical(key), None)
            for key, value in (set_configs or {}).items():
                canonical = LOG_CONFIG.canonical(key)
                checked = LOG_CONFIG.keys[canonical].convert(value)
                merged[canonical] = list(checked) if isinstance(checked, tuple) else checked
            self._write({"type": "topic_config", "name": name, "configs": merged})
            effective = self._effective_config(topic)
            for (t, _, _), handle in list(self._handles.items()):
                if t == name:
                    await handle.update_config.remote(effective)
            return merged

    # -- metadata -------------------------------------------------------------------------

    async def get_metadata(self, topics: list[str] | None = None, auto_create: bool = False) -> ClusterMetadata:
        """A snapshot of brokers and topics with leader handles, for clients to cache.

        With ``auto_create`` (and auto.create.topics.enable), unknown topics are created
        with num.partitions and default.replication.factor, as a Kafka broker does.
        """
        await self._ensure_started()
        names = list(self._state.topics) if topics is None else list(topics)
        if auto_create and self._config["auto.create.topics.enable"]:
            for name in names:
                if name not in self._state.topics and name not in INTERNAL_TOPICS:
                    try:
                        await self.create_topic(name)
                    except TopicAlreadyExistsError:
                        pass
        return ClusterMetadata(
            self._state.cluster_id,
            self._state.controller_epoch,
            tuple(self._state.brokers.values()),
            {n: self._topic_metadata(self._state.topics[n]) for n in names if n in self._state.topics},
        )

    async def describe_cluster(self) -> dict[str, Any]:
        """Cluster id, controller epoch, brokers and counts."""
        await self._ensure_started()
        return {
            "cluster_id": self._state.cluster_id,
            "controller_epoch": self._state.controller_epoch,
            "brokers": list(self._state.brokers.values()),
            "topics": len(self._state.topics),
            "partitions": sum(len(t.partitions) for t in self._state.topics.values()),
            "replica_actors": len(self._handles),
            "data_root": str(self._root),
        }

    async def replica_handles(self, topic: str, partition: int) -> dict[int, Any]:
        """Actor handles of every live replica of a partition, by broker id (for tests/tools)."""
        return {b: h for (t, p, b), h in self._handles.items() if t == topic and p == partition}

    async def wait_online(self, topic: str, partition: int, timeout_s: float = 60.0) -> PartitionMetadata:
        """Wait until the partition has a live leader; returns its metadata."""
        deadline = time.monotonic() + timeout_s
        while True:
            await self._ensure_started()
            topic_state = self._require_topic(topic)
            meta = self._partition_metadata(topic, partition, topic_state.partitions[partition])
            if meta.leader_handle is not None:
                return meta
            if time.monotonic() > deadline:
                raise LeaderNotAvailableError(f"{topic}-{partition} has no leader after {timeout_s}s")
            await asyncio.sleep(0.05)

    # -- replicas: start, watch, restart --------------------------------------------------

    async def _attach_or_start(self, topic: str, partition: int, broker_id: int) -> None:
        key = (topic, partition, broker_id)
        name = replica_actor_name(topic, partition, broker_id)
        try:
            handle = ray.get_actor(name, namespace=self._namespace)
            await handle.ping.remote()
        except (ValueError, ray.exceptions.RayActorError):
            handle = await self._start_replica(topic, partition, broker_id)
            if handle is None:
                return
        self._handles[key] = handle
        self._watch(key, handle)

    async def _start_replica(self, topic: str, partition: int, broker_id: int) -> Any | None:
        broker = self._state.brokers[broker_id]
        if not self._node_alive(broker.node_id):
            logger.warning("broker %d's node %s is down; replica %s-%d stays offline", broker_id, broker.node_id, topic, partition)
            return None
        name = replica_actor_name(topic, partition, broker_id)
        deadline = time.monotonic() + 30
        while True:
            try:
                handle = (
                    ray.remote(PartitionReplica)
                    .options(
                        name=name,
                        namespace=self._namespace,
                        lifetime="detached",
                        num_cpus=0,
                        max_concurrency=1000,
                        max_restarts=0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(broker.node_id, soft=False),
                    )
                    .remote(topic, partition, broker_id, broker.data_dir, self._effective_config(self._state.topics[topic]))
                )
                await handle.ping.remote()
                return handle
            except ValueError:
                # The dead actor's name is released asynchronously; try again shortly.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    def _watch(self, key: tuple[str, int, int], handle: Any) -> None:
        old = self._watches.pop(key, None)
        if old is not None:
            old.cancel()
        self._watches[key] = asyncio.get_running_loop().create_task(self._watch_replica(key, handle))

    async def _watch_replica(self, key: tuple[str, int, int], handle: Any) -> None:
        try:
            await handle.run.remote()
        except ray.exceptions.RayActorError:
            if self._stopping or self._handles.get(key) is not handle:
                return
            logger.warning("replica %s died; restarting it", key)
            await self._on_replica_death(*key)

    async def _on_replica_death(self, topic: str, partition: int, broker_id: int) -> None:
        async with self._mutex():
            self._handles.pop((topic, partition, broker_id), None)
            state = self._state.topics.get(topic)
            if state is None or partition >= len(state.partitions):
                return
            part = state.partitions[partition]
            if part.leader == broker_id:
                self._write_partition(
                    topic, partition, _Partition(part.replicas, NO_LEADER, part.leader_epoch, part.isr, part.partition_epoch + 1)
                )
            handle = await self._start_replica(topic, partition, broker_id)
            if handle is None:
                return
            self._handles[(topic, partition, broker_id)] = handle
            self._watch((topic, partition, broker_id), handle)
            await self._elect_if_needed(topic, partition, bump=True)

    async def _stop_replica(self, topic: str, partition: int, broker_id: int, delete: bool) -> None:
        key = (topic, partition, broker_id)
        handle = self._handles.pop(key, None)
        task = self._watches.pop(key, None)
        if task is not None:
            task.cancel()
        if handle is None:
            return
        try:
            await handle.close.remote(delete)
        except ray.exceptions.RayActorError:
            pass
        ray.kill(handle, no_restart=True)

    async def _elect_if_needed(self, topic: str, partition: int, bump: bool) -> None:
        """Give the partition a leader: the current one if alive, else the first live ISR member."""
        part = self._state.topics[topic].partitions[partition]
        live = [b for b in part.isr if (topic, partition, b) in self._handles]
        leader = part.leader if part.leader in live else (live[0] if live else NO_LEADER)
        if leader == NO_LEADER:
            return
        epoch = part.leader_epoch + 1 if (bump or leader != part.leader or part.leader_epoch < 0) else part.leader_epoch
        if leader != part.leader or epoch != part.leader_epoch:
            part = _Partition(part.replicas, leader, epoch, part.isr, part.partition_epoch + 1)
            self._write_partition(topic, partition, part)
        handle = self._handles[(topic, partition, leader)]
        await handle.become_leader.remote(
            part.leader_epoch, part.replicas, part.isr, self._config["log.retention.check.interval.ms"]
        )

    # -- helpers --------------------------------------------------------------------------

    def _mutex(self) -> asyncio.Lock:
        # Created lazily so it belongs to the actor's event loop.
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _write(self, record: dict[str, Any]) -> None:
        """Durably record a change, then apply it."""
        self._metadata.append(record)
        self._state.apply(record)

    def _write_partition(self, topic: str, partition: int, part: _Partition) -> None:
        self._write(
            {
                "type": "partition",
                "topic": topic,
                "partition": partition,
                "replicas": part.replicas,
                "leader": part.leader,
                "leader_epoch": part.leader_epoch,
                "isr": part.isr,
                "partition_epoch": part.partition_epoch,
            }
        )

    def _effective_config(self, topic: _Topic) -> dict[str, Any]:
        return {**topic_defaults(self._config), **topic.configs}

    def _require_topic(self, name: str) -> _Topic:
        topic = self._state.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return topic

    def _live_brokers(self) -> list[int]:
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        live = sorted(b.broker_id for b in self._state.brokers.values() if b.node_id in alive)
        if not live:
            raise InvalidReplicationFactorError("no live brokers")
        return live

    def _node_alive(self, node_id: str) -> bool:
        return any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())

    def _check_assignment(self, assignment: list[list[int]]) -> None:
        if not assignment or any(not replicas for replicas in assignment):
            raise InvalidReplicaAssignmentError("every partition needs at least one replica")
        sizes = {len(replicas) for replicas in assignment}
        if len(sizes) != 1:
            raise InvalidReplicaAssignmentError("all partitions must have the same replication factor")
        for replicas in assignment:
            if len(set(replicas)) != len(replicas) or any(b not in self._state.brokers for b in replicas):
                raise InvalidReplicaAssignmentError(f"bad replica list {replicas}")

    def _check_supported_rf(self, assignment: list[list[int]]) -> None:
        # Follower replication is not built yet: refuse rather than pretend.
        if any(len(replicas) > 1 for replicas in assignment):
            raise InvalidReplicationFactorError("replication factor > 1 is not supported yet by this rayqueue build")

    def _partition_metadata(self, topic: str, p: int, part: _Partition) -> PartitionMetadata:
        handle = self._handles.get((topic, p, part.leader)) if part.leader != NO_LEADER else None
        offline = tuple(b for b in part.replicas if (topic, p, b) not in self._handles)
        return PartitionMetadata(
            topic,
            p,
            part.leader if handle is not None else NO_LEADER,
            part.leader_epoch,
            tuple(part.replicas),
            tuple(part.isr),
            handle,
            part.partition_epoch,
            offline,
        )

    def _topic_metadata(self, topic: _Topic) -> TopicMetadata:
        return TopicMetadata(
            topic.name,
            tuple(self._partition_metadata(topic.name, p, part) for p, part in enumerate(topic.partitions)),
            topic.name in INTERNAL_TOPICS,
            dict(topic.configs),
        )
