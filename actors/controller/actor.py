"""The Controller actor: brokers, topics, replica placement, leaders, epochs.

It is the one place cluster metadata changes, and every change is written to the
metadata log (``MetadataLog``) before it takes effect; a controller restarted by Ray
replays that log and re-attaches to (or re-creates) the replica actors. It watches every
replica through Ray: each replica's ``run`` call stays pending for the replica's life,
so its failure tells the controller the replica died. It never sits on the data path:
clients ask it for metadata (leader actor handles and epochs) and talk to leaders directly.

Replication (Kafka's ISR design): the controller elects each partition's leader from its
ISR (first live member in replica order, with a new leader epoch) and tells the other
live replicas to follow it. Leaders report ISR changes through ``alter_partition``,
checked against the partition epoch so stale changes are refused. A dead replica leaves
the ISR at once (as a fenced Kafka broker does) and rejoins after it has caught up. With
``unclean.leader.election.enable`` false a partition whose ISR is all gone stays offline
rather than lose committed records. Brokers can be stopped and started, added, and
partitions reassigned (add the new replicas, wait for them to join the ISR, switch,
remove the old ones); preferred leaders are restored on demand or periodically.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray

from actors import internal_records as stored
from actors import launch
from actors.config import broker_config, topic_defaults
from actors.gateway.probe import probe_listeners
from actors.metadata_log import MetadataLog
from actors.metrics import TICK_S, Recorder
from actors.names import INTERNAL_TOPICS, METADATA_TOPIC, replica_actor_name
from actors.partition import DEFAULT_REPLICATION, PartitionReplica, remove_stray_partitions
from actors.protocol import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterableConfig,
    AlterConfigOp,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    AlterPartitionResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    LeaderAndIsrRequest,
    MetadataRequest,
    require,
)
from actors.types import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata, TopicPartition
from storage.config import LOG_CONFIG, validate_log_config
from storage.errors import (
    ElectionNotNeededError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    LeaderNotAvailableError,
    PolicyViolationError,
    PreferredLeaderNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)

SHUTDOWN_CLOSE_TIMEOUT_S = 30.0
# How often the controller checks that each listed broker's listener answers (the
# listener-up gauge): an ApiVersions round trip each, bounded by the probe's timeout.
LISTENER_PROBE_INTERVAL_S = 5.0
STRAY_SWEEP_TIMEOUT_S = 30.0  # how long a starting broker's stray-log sweep may hold the controller
MAX_TOPIC_NAME_LENGTH = 249
INT32_MAX = 2**31 - 1
# Kafka's controller refuses a request that would add more partitions than this (KAFKA-17870).
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
NO_LEADER = -1
_ATTACHED, _STARTED = "attached", "started"


def _restarted_by_ray() -> bool:
    """True inside an actor that Ray has restarted (False outside any actor)."""
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return False
    return bool(context.was_current_actor_reconstructed)


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


def unify_collision_chars(name: str) -> str:
    """Kafka's Topic.unifyCollisionChars: metric names replace '.' with '_', so two topics
    that differ only there would share their metrics; Kafka refuses the second one."""
    return name.replace(".", "_")


def resolve_count(value: Any, default: int, what: str, error: type[KafkaError]) -> int:
    """A partition count or replication factor as CreateTopics takes it (KIP-464): None or -1
    means the broker default; anything else must be an int32 of at least 1."""
    if value is None or (type(value) is int and value == -1):
        return default
    # bool is an int to Python, never a count to Kafka (an int32 on the wire).
    if type(value) is not int:
        raise error(f"{what} must be an integer or -1 (the broker default), got {value!r}")
    if not 1 <= value <= INT32_MAX:
        raise error(f"{what} is {value}; it must be at least 1, or -1 for the broker default")
    return value


def _check_partitions_per_request(count: int) -> None:
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise PolicyViolationError(
            f"excessively large number of partitions per request: {count} (the limit is {MAX_PARTITIONS_PER_REQUEST})"
        )


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 from a random UUID, as Kafka's Uuid.toString()."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def new_topic_id() -> str:
    """A topic id (KIP-516) as Kafka's Uuid.randomUuid() makes one: never starting with "-",
    so that it cannot be mistaken for a command-line option."""
    while True:
        topic_id = new_cluster_id()
        if not topic_id.startswith("-"):
            return topic_id


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


def _planned_topic(name: str, assignment: list[list[int]], overrides: dict[str, Any]) -> TopicMetadata:
    """The topic a validate-only CreateTopics would create: its assignment and configs, no
    leaders (nothing runs) and no topic id (none is drawn)."""
    return TopicMetadata(
        name,
        tuple(PartitionMetadata(name, p, NO_LEADER, -1, tuple(r), tuple(r)) for p, r in enumerate(assignment)),
        name in INTERNAL_TOPICS,
        dict(overrides),
    )


def _altered(
    overrides: dict[str, Any], effective: dict[str, Any], changes: tuple[AlterableConfig, ...]
) -> dict[str, Any]:
    """A topic's config overrides after IncrementalAlterConfigs ``changes`` (Kafka's
    semantics: APPEND adds the values a list config lacks, SUBTRACT removes values, both
    starting from the effective value). Checked as a whole: InvalidConfigError (an unknown
    key, a bad value, APPEND/SUBTRACT on a non-list) or InvalidRequestError (a key named
    twice, an unknown operation), and then nothing changes."""
    merged = dict(overrides)
    seen: set[str] = set()
    for change in changes:
        if type(change) is not AlterableConfig:
            raise InvalidRequestError(f"a config change must be an AlterableConfig, not {change!r:.60}")
        key = LOG_CONFIG.canonical(change.name)
        if key in seen:
            raise InvalidRequestError(f"config {key} is changed twice in one request")
        seen.add(key)
        try:
            op = AlterConfigOp(change.config_operation)
        except ValueError:
            raise InvalidRequestError(f"unknown config operation {change.config_operation!r:.20}") from None
        spec = LOG_CONFIG.keys[key]
        if op is AlterConfigOp.DELETE:
            merged.pop(key, None)
            continue
        value = spec.convert(change.value)
        if op is not AlterConfigOp.SET:
            if spec.type != "list":
                raise InvalidConfigError(f"{key} is not a list config: {op.name} does not apply")
            current = list(merged.get(key, effective.get(key, spec.default)) or ())
            if op is AlterConfigOp.APPEND:
                value = current + [v for v in value if v not in current]
            else:
                value = [v for v in current if v not in value]
            value = spec.convert(value)
        merged[key] = list(value) if isinstance(value, tuple) else value
    return merged


@dataclass
class _Partition:
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0
    # The replica list a reassignment moves to; ``replicas`` holds target + old meanwhile.
    target: list[int] | None = None


@dataclass
class _Topic:
    name: str
    configs: dict[str, Any]
    partitions: list[_Partition] = field(default_factory=list)
    # KIP-516: tells a recreated topic from a deleted one of the same name (on every replica's disk).
    topic_id: str = ""


# The fields of each metadata record type, as the controller writes them (a type that
# includes None is optional), and its fields that are lists of broker ids.
_RECORD_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "cluster": {"cluster_id": (str,)},
    "controller_epoch": {"epoch": (int,)},
    "broker": {"broker_id": (int,), "node_id": (str,), "data_dir": (str,), "alive": (bool, type(None))},
    "listener": {"broker_id": (int,), "host": (str,), "port": (int,)},
    "topic": {"name": (str,), "configs": (dict,), "topic_id": (str, type(None))},
    "topic_id": {"name": (str,), "topic_id": (str,)},
    "topic_config": {"name": (str,), "configs": (dict,)},
    "partition": {
        "topic": (str,),
        "partition": (int,),
        "replicas": (list,),
        "leader": (int,),
        "leader_epoch": (int,),
        "isr": (list,),
        "partition_epoch": (int,),
        "target": (list, type(None)),
    },
    "delete_topic": {"name": (str,)},
    "producer_ids": {"next_producer_id": (int,)},
}
_INT_LISTS = {"partition": ("replicas", "isr", "target")}


@dataclass
class ClusterState:
    """Everything the metadata log records, rebuilt by replaying it."""

    cluster_id: str = ""
    controller_epoch: int = 0
    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    topics: dict[str, _Topic] = field(default_factory=dict)
    # The first producer id not yet handed out (Kafka's ProducerIdsRecord.nextProducerId).
    next_producer_id: int = 0

    def apply(self, record: dict[str, Any]) -> None:
        """Apply one metadata record. One that is not what the controller writes (an unknown
        type, a field missing or of the wrong type, a topic or broker it does not know)
        raises ValueError/TypeError/KeyError and changes nothing."""
        kind = record["type"]
        fields = _RECORD_FIELDS.get(kind)
        if fields is None:
            raise ValueError(f"unknown metadata record type {kind!r:.40}")
        for name, types in fields.items():
            stored.field(record, name, types, None if type(None) in types else stored.REQUIRED)
        for name in _INT_LISTS.get(kind, ()):
            if record.get(name) is not None:
                stored.items_of(record[name], int, name)
        if kind == "cluster":
            self.cluster_id = record["cluster_id"]
        elif kind == "controller_epoch":
            self.controller_epoch = record["epoch"]
        elif kind == "broker":
            known = self.brokers.get(record["broker_id"])
            self.brokers[record["broker_id"]] = BrokerMetadata(
                record["broker_id"],
                record["node_id"],
                record["data_dir"],
                record.get("alive", True),
                # A broker stopped or moved keeps its listener until its gateway registers again.
                known.host if known is not None else "",
                known.port if known is not None else -1,
            )
        elif kind == "listener":
            # Kafka's RegisterBrokerRecord endpoints: where the broker's gateway is reached.
            known = self.brokers[record["broker_id"]]  # KeyError: a broker never registered
            self.brokers[record["broker_id"]] = replace(known, host=record["host"], port=record["port"])
        elif kind == "topic":
            self.topics[record["name"]] = _Topic(record["name"], record["configs"], topic_id=record.get("topic_id", ""))
        elif kind == "topic_id":
            self.topics[record["name"]].topic_id = record["topic_id"]
        elif kind == "topic_config":
            self.topics[record["name"]].configs = record["configs"]
        elif kind == "partition":
            partitions = self.topics[record["topic"]].partitions
            if not 0 <= record["partition"] <= len(partitions):
                raise ValueError(f"partition {record['partition']} of {record['topic']} ({len(partitions)} known)")
            state = _Partition(
                record["replicas"],
                record["leader"],
                record["leader_epoch"],
                record["isr"],
                record["partition_epoch"],
                record.get("target"),
            )
            if record["partition"] == len(partitions):
                partitions.append(state)
            else:
                partitions[record["partition"]] = state
        elif kind == "delete_topic":
            self.topics.pop(record["name"], None)
        elif kind == "producer_ids":
            self.next_producer_id = max(self.next_producer_id, record["next_producer_id"])


class Controller:
    """Owns cluster metadata; creates, watches and restarts replica actors."""

    def __init__(self, namespace: str, config: dict[str, Any]) -> None:
        self._namespace = namespace
        self._config = broker_config(config)
        self._root = Path(self._config["log.dirs"])
        self._metadata = MetadataLog(self._root / f"{METADATA_TOPIC}-0")
        self._state = ClusterState()
        # A record that cannot be read or applied is skipped (logged and counted), as
        # Kafka's loaders skip theirs: one bad record must not keep the cluster down.
        self._skipped = stored.SkippedRecords(METADATA_TOPIC)
        for offset, record in self._metadata.entries(self._skipped):
            try:
                self._state.apply(record)
            except stored.READ_ERRORS as exc:
                self._skipped.skip(0, offset, exc)
        self._skipped_reported = 0  # of _skipped.count, handed to the metric so far
        if not self._state.cluster_id:
            self._write({"type": "cluster", "cluster_id": new_cluster_id()})
        self._write({"type": "controller_epoch", "epoch": self._state.controller_epoch + 1})
        for topic in self._state.topics.values():
            if not topic.topic_id:
                # A metadata log written before topic ids: the topic gets one now, for good.
                self._write({"type": "topic_id", "name": topic.name, "topic_id": new_topic_id()})
        self._handles: dict[tuple[str, int, int], Any] = {}
        self._watches: dict[tuple[str, int, int], asyncio.Task] = {}
        self._lock: asyncio.Lock | None = None
        self._reassignments: dict[tuple[str, int], asyncio.Task] = {}
        self._rebalancer: asyncio.Task | None = None
        self._metrics_enabled = self._config["rayqueue.metrics.enabled"]
        self._recorder = Recorder(namespace, True) if self._metrics_enabled else None
        self._metrics_task: asyncio.Task | None = None
        self._listener_task: asyncio.Task | None = None
        self._listeners_down: dict[int, str] = {}  # broker id -> why its listener did not answer
        self._probed: set[int] = set()  # brokers whose listener-up gauge was set
        self._exported_topics: set[str] = set()
        self._started = False
        self._stopping = False
        logger.info(
            "controller epoch %d for cluster %s (%d topics)",
            self._state.controller_epoch,
            self._state.cluster_id,
            len(self._state.topics),
        )
        self._restart_task: asyncio.Task | None = None
        if _restarted_by_ray():
            # Leaders call alter_partition and replicas die whether or not a client calls us:
            # a restarted controller brings itself up. A task of the actor's own event loop
            # (where an async actor's constructor runs), not a remote call to itself: Ray
            # fails that call (ACTOR_UNAVAILABLE) when it is told, before the constructor
            # returns, that the actor is still restarting.
            # (A first start waits for register_brokers, which binds brokers to live nodes.)
            self._restart_task = asyncio.get_running_loop().create_task(self.start())

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
                    self._write_broker(broker_id, node, data_dir, alive=True)
                if known is not None and known.host:
                    # A launch starts gateways anew (or none): forget the last run's listeners.
                    self._write({"type": "listener", "broker_id": broker_id, "host": "", "port": -1})
            self._started = False
        await self._ensure_started()
        return await self.get_metadata(MetadataRequest())

    async def start(self) -> None:
        """Bring a (re)started controller up (idempotent): attach to or create every replica,
        watch them, run the leader rebalance loop. A failed attempt is retried."""
        while not self._started and not self._stopping:
            try:
                await self._ensure_started()
            except Exception:
                logger.exception("controller start failed; retrying")
                await asyncio.sleep(1.0)

    async def _ensure_started(self) -> None:
        """After a (re)start, attach to or create every replica and watch it."""
        if self._started:
            return
        async with self._mutex():
            if self._started:
                return
            keys = [
                (topic.name, p, broker)
                for topic in self._state.topics.values()
                for p, part in enumerate(topic.partitions)
                for broker in part.replicas
            ]
            outcomes = await asyncio.gather(*(self._attach_or_start(*key) for key in keys))
            recreated = {key for key, outcome in zip(keys, outcomes, strict=True) if outcome == _STARTED}
            for topic in self._state.topics.values():
                for p, part in enumerate(topic.partitions):
                    # A replica that could not come back (node gone, broker stopped) is no
                    # longer in sync, as if its death had been seen.
                    self._drop_offline_from_isr(topic.name, p)
                    # A leader that died unseen and was recreated starts a new term: a new
                    # epoch makes its followers re-truncate and fetch from the new actor.
                    leader_recreated = (topic.name, p, topic.partitions[p].leader) in recreated
                    await self._elect_if_needed(topic.name, p, bump=leader_recreated)
                    if part.target is not None:
                        self._track_reassignment(topic.name, p)
            await self._remove_strays(list(self._state.brokers))
            if self._rebalancer is None:
                self._rebalancer = asyncio.get_running_loop().create_task(self._rebalance_loop())
            if self._metrics_task is None and self._recorder is not None:
                self._metrics_task = asyncio.get_running_loop().create_task(self._metrics_loop())
                self._listener_task = asyncio.get_running_loop().create_task(self._listener_loop())
            self._started = True

    async def shutdown(self, delete_data: bool = False) -> None:
        """Close every replica cleanly (clean-shutdown markers) and stop watching."""
        self._stopping = True
        tasks = [self._rebalancer, self._metrics_task, self._listener_task, self._restart_task]
        for task in [*self._watches.values(), *self._reassignments.values(), *tasks]:
            if task is not None:
                task.cancel()
        closes = [asyncio.ensure_future(handle.close.remote(delete_data)) for handle in self._handles.values()]
        if closes:
            # Bounded: a replica that cannot close cleanly is killed below all the same (its
            # log recovers on the next open), so shutdown never hangs on one.
            done, _ = await asyncio.wait(closes, timeout=SHUTDOWN_CLOSE_TIMEOUT_S)
            for future in done:
                if future.exception() is not None and not isinstance(future.exception(), ray.exceptions.RayActorError):
                    logger.warning("replica close failed: %s", future.exception())
        for handle in self._handles.values():
            launch.kill(handle)
        self._handles.clear()
        self._metadata.close()

    # -- topics ---------------------------------------------------------------------------

    async def create_topic(self, request: CreateTopicsRequest) -> TopicMetadata:
        """Create a topic (one of Kafka's CreateTopics) and start its replicas.

        ``num_partitions`` / ``replication_factor`` of -1 (or None) take num.partitions /
        default.replication.factor (KIP-464); 0 and other negatives are refused, as is a
        replication factor above the number of live brokers. With ``assignments`` both must
        be left at -1. With ``validate_only`` every check runs and nothing is written: the
        answer is the topic as it would be, with no leaders and no topic id yet.
        """
        require(request, CreateTopicsRequest)
        name, num_partitions, replication_factor = request.name, request.num_partitions, request.replication_factor
        replica_assignment = request.assignments
        await self._ensure_started()
        validate_topic_name(name)
        overrides = self._topic_overrides(request.configs)
        async with self._mutex():
            if name in self._state.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            unified = unify_collision_chars(name)
            for existing in self._state.topics:
                if unify_collision_chars(existing) == unified:
                    raise InvalidTopicError(
                        f"topic {name!r} collides with existing topic {existing!r} ('.' and '_' are the same in metric names)"
                    )
            live = self._live_brokers()
            if replica_assignment is not None:
                if num_partitions not in (None, -1) or replication_factor not in (None, -1):
                    raise InvalidRequestError(
                        "a replica assignment was given: num_partitions and replication_factor must be unset (-1)"
                    )
                assignment = self._manual_assignment(replica_assignment, live)
            else:
                partitions = resolve_count(
                    num_partitions, self._config["num.partitions"], "num_partitions", InvalidPartitionsError
                )
                rf = resolve_count(
                    replication_factor,
                    self._config["default.replication.factor"],
                    "replication factor",
                    InvalidReplicationFactorError,
                )
                _check_partitions_per_request(partitions)
                assignment = assign_replicas(partitions, rf, live)
            self._check_topic_config(overrides)
            if request.validate_only:
                return _planned_topic(name, assignment, overrides)
            self._write({"type": "topic", "name": name, "configs": overrides, "topic_id": new_topic_id()})
            for p, replicas in enumerate(assignment):
                self._write_partition(name, p, _Partition(replicas, NO_LEADER, -1, list(replicas)))
            await asyncio.gather(*(self._attach_or_start(name, p, b) for p, r in enumerate(assignment) for b in r))
            for p in range(len(assignment)):
                self._drop_offline_from_isr(name, p)
                await self._elect_if_needed(name, p, bump=True)
            if self._effective_config(self._state.topics[name])["min.insync.replicas"] > len(assignment[0]):
                logger.warning("topic %s: min.insync.replicas exceeds the replication factor; acks=all will fail", name)
        logger.info("created topic %s with %d partitions", name, len(assignment))
        return self._topic_metadata(self._state.topics[name])

    async def delete_topic(self, request: DeleteTopicsRequest) -> None:
        """Delete a topic (one of Kafka's DeleteTopics), its replicas and their data."""
        require(request, DeleteTopicsRequest)
        name = request.name
        await self._ensure_started()
        if not self._config["delete.topic.enable"]:
            raise PolicyViolationError("delete.topic.enable is false")
        async with self._mutex():
            topic = self._require_topic(name)
            self._write({"type": "delete_topic", "name": name})
            # Together: each stop waits until its actor is gone, under the controller's lock.
            await asyncio.gather(
                *(
                    self._stop_replica(name, p, broker, delete=True)
                    for p, part in enumerate(topic.partitions)
                    for broker in part.replicas
                )
            )

    async def create_partitions(self, request: CreatePartitionsRequest) -> TopicMetadata:
        """Grow a topic to ``count`` partitions (one of Kafka's CreatePartitions; Kafka never
        shrinks one). With ``validate_only`` every check runs and the topic stays as it is."""
        require(request, CreatePartitionsRequest)
        name, total = request.name, request.count
        assignment = [list(r) for r in request.assignments] if request.assignments is not None else None
        await self._ensure_started()
        async with self._mutex():
            topic = self._require_topic(name)
            current = len(topic.partitions)
            if type(total) is not int:
                raise InvalidPartitionsError(f"the new partition count must be an integer, got {total!r}")
            if total <= current:
                raise InvalidPartitionsError(f"topic {name!r} has {current} partitions; asked for {total}")
            if total > INT32_MAX:
                raise InvalidPartitionsError(f"{total} partitions is above the limit {INT32_MAX}")
            _check_partitions_per_request(total - current)
            rf = len(topic.partitions[0].replicas)
            live = self._live_brokers()
            if assignment is None:
                assignment = assign_replicas(total - current, rf, live, first_partition=current)
            else:
                assignment = self._manual_assignment(assignment, live)
                if len(assignment) != total - current:
                    raise InvalidReplicaAssignmentError(
                        f"increasing the partition count by {total - current} needs as many replica lists; "
                        f"{len(assignment)} given"
                    )
                if len(assignment[0]) != rf:
                    raise InvalidReplicaAssignmentError(
                        f"topic {name!r} has replication factor {rf}; the new partitions have {len(assignment[0])}"
                    )
            if request.validate_only:
                return self._topic_metadata(topic)
            for i, replicas in enumerate(assignment):
                self._write_partition(name, current + i, _Partition(list(replicas), NO_LEADER, -1, list(replicas)))
            await asyncio.gather(
                *(self._attach_or_start(name, current + i, b) for i, r in enumerate(assignment) for b in r)
            )
            for p in range(current, total):
                self._drop_offline_from_isr(name, p)
                await self._elect_if_needed(name, p, bump=True)
            return self._topic_metadata(topic)

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, sorted."""
        return sorted(t for t in self._state.topics if include_internal or t not in INTERNAL_TOPICS)

    async def describe_configs(self, request: DescribeConfigsRequest) -> dict[str, tuple[Any, str]]:
        """The topic's configs (all, or ``configuration_keys``) with value and source
        (DEFAULT, STATIC_BROKER, DYNAMIC_TOPIC); one resource of Kafka's DescribeConfigs."""
        require(request, DescribeConfigsRequest)
        topic = self._require_topic(request.resource_name)
        keys = request.configuration_keys
        broker_defaults = topic_defaults(self._config)
        out = {}
        for key, spec in LOG_CONFIG.keys.items():
            if keys is not None and key not in keys:
                continue
            if key in topic.configs:
                out[key] = (topic.configs[key], "DYNAMIC_TOPIC_CONFIG")
            elif broker_defaults.get(key, spec.default) != spec.default:
                out[key] = (broker_defaults[key], "STATIC_BROKER_CONFIG")
            else:
                out[key] = (spec.default, "DEFAULT_CONFIG")
        return out

    async def alter_configs(self, request: IncrementalAlterConfigsRequest) -> dict[str, Any]:
        """Change topic config overrides (one resource of Kafka's IncrementalAlterConfigs):
        SET, DELETE (back to the default), and APPEND / SUBTRACT on list configs. Every key
        and value is checked before anything changes: one bad entry refuses the whole request
        (INVALID_CONFIG) and leaves the topic's configs as they were. Returns the topic's
        overrides after it (with ``validate_only``: the ones it would leave; nothing changes)."""
        require(request, IncrementalAlterConfigsRequest)
        name = request.resource_name
        await self._ensure_started()
        async with self._mutex():
            topic = self._require_topic(name)
            merged = _altered(topic.configs, self._effective_config(topic), request.configs)
            self._check_topic_config(merged)
            if request.validate_only:
                return merged
            self._write({"type": "topic_config", "name": name, "configs": merged})
            effective = self._effective_config(topic)
            for (t, _, _), handle in list(self._handles.items()):
                if t == name:
                    await handle.update_config.remote(effective)
            if effective["unclean.leader.election.enable"]:
                # As Kafka does when the setting is turned on: offline partitions elect at once.
                for p, part in enumerate(topic.partitions):
                    if (name, p, part.leader) not in self._handles:
                        await self._elect_if_needed(name, p, bump=False)
            return merged

    async def register_listener(self, broker_id: int, host: str, port: int) -> None:
        """Record where broker ``broker_id``'s Kafka protocol gateway is reached (its
        advertised listener), as a Kafka broker registers its endpoints; Metadata answers
        name it. Durable, so a restarted controller still knows it."""
        async with self._mutex():
            broker = self._require_broker(broker_id)
            if (broker.host, broker.port) != (host, port):
                self._write({"type": "listener", "broker_id": broker_id, "host": host, "port": port})
        logger.info("broker %d's gateway listens at %s:%d", broker_id, host, port)

    # -- producer ids ---------------------------------------------------------------------

    async def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
        """Hand out a block of ``count`` producer ids (Kafka's AllocateProducerIds). The block
        is in the metadata log before it is answered, so a restarted controller never hands
        an id out twice."""
        require(request, AllocateProducerIdsRequest)
        count = request.count
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1_000_000:
            raise InvalidRequestError(f"producer id block size {count}; use 1..1000000")
        async with self._mutex():
            first = self._state.next_producer_id
            if first + count > 2**63 - 1:
                raise InvalidRequestError("producer ids are exhausted")
            self._write({"type": "producer_ids", "next_producer_id": first + count})
        logger.info("allocated producer ids [%d, %d)", first, first + count)
        return AllocateProducerIdsResponse(first, count)

    # -- metadata -------------------------------------------------------------------------

    async def get_metadata(self, request: MetadataRequest) -> ClusterMetadata:
        """A snapshot of brokers and topics with leader handles, for clients to cache (Kafka's
        Metadata).

        With ``allow_auto_topic_creation`` (and auto.create.topics.enable), unknown topics are
        created with num.partitions and default.replication.factor, as a Kafka broker does.
        """
        require(request, MetadataRequest)
        await self._ensure_started()
        names = list(self._state.topics) if request.topics is None else list(request.topics)
        for name in names:
            if not isinstance(name, str):
                raise InvalidTopicError(f"a topic name is a string, got {type(name).__name__}")
        if request.allow_auto_topic_creation and self._config["auto.create.topics.enable"]:
            for name in names:
                if name not in self._state.topics and name not in INTERNAL_TOPICS:
                    try:
                        await self.create_topic(CreateTopicsRequest(name))
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
            "metadata_records_skipped": self._skipped.count,
        }

    async def replica_handles(self, tp: TopicPartition) -> dict[int, Any]:
        """Actor handles of every live replica of a partition, by broker id (for tests/tools)."""
        return {b: h for (t, p, b), h in self._handles.items() if t == tp.topic and p == tp.partition}

    async def wait_online(self, tp: TopicPartition, timeout_s: float = 60.0) -> PartitionMetadata:
        """Wait until the partition has a live leader; returns its metadata."""
        topic, partition = tp.topic, tp.partition
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

    async def _attach_or_start(self, topic: str, partition: int, broker_id: int) -> str | None:
        """Attach to the replica's live actor or create it; returns _ATTACHED, _STARTED or
        None (its broker is stopped or its node is down)."""
        key = (topic, partition, broker_id)
        name = replica_actor_name(topic, partition, broker_id)
        outcome = _ATTACHED
        handle = launch.find_actor(name, self._namespace)
        if handle is not None:
            try:
                await handle.ping.remote()
            except ray.exceptions.RayActorError:
                handle = None
        if handle is None:
            handle = await self._start_replica(topic, partition, broker_id)
            if handle is None:
                return None
            outcome = _STARTED
        self._handles[key] = handle
        self._watch(key, handle)
        return outcome

    async def _start_replica(self, topic: str, partition: int, broker_id: int) -> Any | None:
        broker = self._state.brokers[broker_id]
        if not broker.alive:
            return None  # stopped with stop_broker
        if not self._node_alive(broker.node_id):
            logger.warning(
                "broker %d's node %s is down; replica %s-%d stays offline", broker_id, broker.node_id, topic, partition
            )
            return None
        name = replica_actor_name(topic, partition, broker_id)
        deadline = time.monotonic() + 30
        while True:
            try:
                handle = launch.launch(
                    PartitionReplica,
                    launch.REPLICA,
                    name,
                    self._namespace,
                    broker.node_id,
                    topic,
                    partition,
                    broker_id,
                    broker.data_dir,
                    self._effective_config(self._state.topics[topic]),
                    self._state.topics[topic].topic_id,
                    self._metrics_enabled,
                    self._namespace,
                )
                await handle.ping.remote()
                return handle
            except ValueError:
                # The dead actor's name is released asynchronously; try again shortly.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def _remove_strays(self, broker_ids: list[int]) -> None:
        """On each running broker's node, delete the partition directories it no longer hosts
        (topics deleted or replicas moved while it was down; see remove_stray_partitions).
        A failure is logged: it leaves disk space behind, never a wrong log."""
        hosted: dict[int, set[str]] = {b: set() for b in broker_ids}
        for topic in self._state.topics.values():
            for p, part in enumerate(topic.partitions):
                for b in {*part.replicas, *(part.target or ())}:
                    if b in hosted:
                        hosted[b].add(f"{topic.name}-{p}")
        calls = {}
        for b in broker_ids:
            broker = self._state.brokers.get(b)
            if broker is None or not broker.alive or not self._node_alive(broker.node_id):
                continue
            calls[b] = launch.run_on_node(remove_stray_partitions, broker.node_id, broker.data_dir, hosted[b])
        for b, ref in calls.items():
            try:
                # Bounded: this runs under the controller's lock.
                removed = await asyncio.wait_for(ref, STRAY_SWEEP_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - see the docstring
                logger.exception("broker %d: could not remove stray partition directories", b)
                continue
            if removed:
                logger.warning("broker %d: removed stray partition directories %s", b, removed)

    def _watch(self, key: tuple[str, int, int], handle: Any) -> None:
        old = self._watches.pop(key, None)
        # The death handler runs in the old watch task: cancelling it would abort the handler.
        if old is not None and old is not asyncio.current_task():
            old.cancel()
        self._watches[key] = asyncio.get_running_loop().create_task(self._watch_replica(key, handle))

    async def _watch_replica(self, key: tuple[str, int, int], handle: Any) -> None:
        try:
            await handle.run.remote()
        except ray.exceptions.RayActorError:
            if self._stopping or self._handles.get(key) is not handle:
                return
            logger.warning("replica %s died; restarting it", key)
            try:
                await self._on_replica_death(*key)
            except Exception:  # a task's exception would otherwise vanish silently
                logger.exception("handling the death of replica %s failed", key)

    async def _on_replica_death(self, topic: str, partition: int, broker_id: int) -> None:
        """A replica actor died: drop it from the ISR, elect if it led, then restart it as a follower."""
        async with self._mutex():
            self._handles.pop((topic, partition, broker_id), None)
            state = self._state.topics.get(topic)
            if state is None or partition >= len(state.partitions):
                return
            self._remove_from_isr(topic, partition, broker_id)
            # Elect before restarting: the restart takes about a second, failover should not.
            await self._elect_if_needed(topic, partition, bump=False)
            handle = await self._start_replica(topic, partition, broker_id)
            if handle is None:
                return
            self._handles[(topic, partition, broker_id)] = handle
            self._watch((topic, partition, broker_id), handle)
            await self._elect_if_needed(topic, partition, bump=False)

    def _remove_from_isr(self, topic: str, partition: int, broker_id: int) -> None:
        """A replica went down: it leaves the ISR (unless it is the last member) and leadership."""
        part = self._state.topics[topic].partitions[partition]
        # Kafka never empties the ISR: the last member stays so that it can lead again when
        # it returns, and no out-of-sync replica can take over without an unclean election.
        isr = [b for b in part.isr if b != broker_id] or part.isr
        leader = NO_LEADER if part.leader == broker_id else part.leader
        if isr != part.isr or leader != part.leader:
            self._write_partition(
                topic,
                partition,
                _Partition(part.replicas, leader, part.leader_epoch, isr, part.partition_epoch + 1, part.target),
            )

    def _drop_offline_from_isr(self, topic: str, partition: int) -> None:
        """Replicas without a live actor leave the ISR (a new partition's ISR holds only the
        replicas that came up, as Kafka leaves fenced brokers out), so a stopped broker does
        not hold the high watermark back."""
        part = self._state.topics[topic].partitions[partition]
        for b in part.replicas:
            if (topic, partition, b) not in self._handles:
                self._remove_from_isr(topic, partition, b)

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
        launch.kill(handle)
        # ray.kill returns before the actor is gone: a replica started next under the same
        # name (a topic deleted and created again) must not attach to this closed one.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                await asyncio.wait_for(handle.ping.remote(), 1.0)
            except (ray.exceptions.RayActorError, TimeoutError):
                return
            await asyncio.sleep(0.05)

    async def _elect_if_needed(self, topic: str, partition: int, bump: bool) -> None:
        """Give the partition a leader (the current one if alive, else the first live ISR member
        in replica order) and tell every live replica its role.

        The leader epoch goes up when the leader changes (or ``bump``). Without a live ISR
        member the partition stays offline unless unclean.leader.election.enable allows an
        out-of-sync replica, which then becomes the whole ISR.
        """
        t = self._state.topics[topic]
        part = t.partitions[partition]
        live = [b for b in part.replicas if (topic, partition, b) in self._handles]
        live_isr = [b for b in live if b in part.isr]
        isr = part.isr
        if part.leader in live_isr:
            leader = part.leader
        elif live_isr:
            leader = live_isr[0]
        elif live and self._effective_config(t)["unclean.leader.election.enable"]:
            leader, isr = live[0], [live[0]]
            if self._recorder is not None:
                self._recorder.add(self._recorder.metrics.unclean_elections, 1, (("topic", topic),))
            logger.warning("%s-%d: unclean election of broker %d; records may be lost", topic, partition, leader)
        else:
            leader = NO_LEADER
        if leader == NO_LEADER:
            if part.leader != NO_LEADER:
                self._write_partition(
                    topic,
                    partition,
                    _Partition(part.replicas, NO_LEADER, part.leader_epoch, isr, part.partition_epoch + 1, part.target),
                )
            logger.warning("%s-%d is offline: no live in-sync replica", topic, partition)
            return
        changed = leader != part.leader or part.leader_epoch < 0
        epoch = part.leader_epoch + 1 if (bump or changed) else part.leader_epoch
        if leader != part.leader or epoch != part.leader_epoch or isr != part.isr:
            part = _Partition(part.replicas, leader, epoch, isr, part.partition_epoch + 1, part.target)
            self._write_partition(topic, partition, part)
            if changed:
                logger.info(
                    "%s-%d: broker %d elected leader at epoch %d (ISR %s)", topic, partition, leader, epoch, isr
                )
        await self._push(topic, partition)

    async def _push(self, topic: str, partition: int) -> None:
        """Send the partition's state to its live replicas: the leader first, then the followers."""
        part = self._state.topics[topic].partitions[partition]
        retention = self._config["log.retention.check.interval.ms"]
        replication = {k: self._config[k] for k in DEFAULT_REPLICATION}
        leader = self._handles.get((topic, partition, part.leader)) if part.leader != NO_LEADER else None
        if leader is None:
            return
        state = LeaderAndIsrRequest(
            part.leader,
            part.leader_epoch,
            tuple(part.replicas),
            tuple(part.isr),
            part.partition_epoch,
            leader_handle=leader,
            controller=self._self_handle(),
            retention_check_ms=retention,
            replication=replication,
        )
        await self._call_replica(leader.become_leader.remote(state))
        calls = []
        for b in part.replicas:
            handle = self._handles.get((topic, partition, b))
            if handle is None or b == part.leader:
                continue
            calls.append(self._call_replica(handle.become_follower.remote(state)))
        await asyncio.gather(*calls)

    async def _call_replica(self, ref: Any) -> Any:
        # A dead replica is the watcher's business; a hung one must not stall the controller.
        try:
            return await asyncio.wait_for(ref, 30)
        except (ray.exceptions.RayActorError, TimeoutError):
            logger.warning("replica call failed", exc_info=True)
            return None

    def _self_handle(self) -> Any:
        return ray.get_runtime_context().current_actor

    # -- replication: ISR changes, brokers, elections, reassignment -------------------------

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """A leader's ISR change (Kafka's AlterPartition); answers the partition's state as committed.

        Refused (the current state is answered unchanged) when the caller is not the current
        leader at the current leader and partition epochs, so a stale change never applies.
        Only live replicas may join.
        """
        require(request, AlterPartitionRequest)
        topic, partition, leader_id = request.topic_name, request.partition_index, request.broker_id
        isr = request.new_isr
        # A leader may call before any client does after a controller restart: the live
        # replicas must be known before an expansion is judged.
        await self._ensure_started()
        async with self._mutex():
            t = self._state.topics.get(topic)
            if t is None or not 0 <= partition < len(t.partitions):
                raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
            part = t.partitions[partition]
            if (leader_id, request.leader_epoch, request.partition_epoch) != (
                part.leader,
                part.leader_epoch,
                part.partition_epoch,
            ):
                return AlterPartitionResponse(part.leader_epoch, part.partition_epoch, tuple(part.isr))
            new_isr = [
                b
                for b in part.replicas
                if b == leader_id or (b in isr and (b in part.isr or (topic, partition, b) in self._handles))
            ]
            if new_isr != part.isr:
                part = _Partition(
                    part.replicas, part.leader, part.leader_epoch, new_isr, part.partition_epoch + 1, part.target
                )
                self._write_partition(topic, partition, part)
                logger.info(
                    "%s-%d: ISR is now %s (partition epoch %d)", topic, partition, new_isr, part.partition_epoch
                )
            return AlterPartitionResponse(part.leader_epoch, part.partition_epoch, tuple(part.isr))

    async def stop_broker(self, broker_id: int) -> None:
        """Shut one broker down cleanly: its replicas close, leave the ISRs and give up leadership."""
        await self._ensure_started()
        async with self._mutex():
            broker = self._require_broker(broker_id)
            self._write_broker(broker_id, broker.node_id, broker.data_dir, alive=False)
            for topic, p in self._partitions_on(broker_id):
                # Close first, so that nothing more is appended to the old leader, then elect.
                await self._stop_replica(topic, p, broker_id, delete=False)
                self._remove_from_isr(topic, p, broker_id)
                await self._elect_if_needed(topic, p, bump=False)
        logger.info("broker %d stopped", broker_id)

    async def start_broker(self, broker_id: int) -> None:
        """Start a stopped broker: its replicas recover from disk, follow their leaders and catch up."""
        await self._ensure_started()
        async with self._mutex():
            broker = self._require_broker(broker_id)
            self._write_broker(broker_id, broker.node_id, broker.data_dir, alive=True)
            on = self._partitions_on(broker_id)
            await asyncio.gather(*(self._attach_or_start(t, p, broker_id) for t, p in on))
            for t, p in on:
                await self._elect_if_needed(t, p, bump=False)
            await self._remove_strays([broker_id])
        logger.info("broker %d started", broker_id)

    async def add_broker(self, node_id: str, broker_id: int | None = None) -> int:
        """Register a new broker on Ray node ``node_id`` (hex id); returns its id. It holds no
        replicas until partitions are reassigned to it."""
        async with self._mutex():
            if not self._node_alive(node_id):
                raise InvalidRequestError(f"Ray node {node_id} is not alive")
            if broker_id is None:
                broker_id = max(self._state.brokers, default=-1) + 1
            elif broker_id in self._state.brokers:
                raise InvalidRequestError(f"broker {broker_id} already exists")
            data_dir = str(self._root / f"broker-{broker_id}")
            self._write_broker(broker_id, node_id, data_dir, alive=True)
            return broker_id

    async def elect_leaders(self, request: ElectLeadersRequest) -> dict[TopicPartition, str | None]:
        """Preferred leader election (Kafka's ElectLeaders): move leadership to each
        partition's first replica.

        Answers None per partition that moved, else the reason (ElectionNotNeeded,
        PreferredLeaderNotAvailable) as the error's class name.
        """
        require(request, ElectLeadersRequest)
        await self._ensure_started()
        out: dict[TopicPartition, str | None] = {}
        async with self._mutex():
            if request.topic_partitions is None:
                wanted = [(t.name, p) for t in self._state.topics.values() for p in range(len(t.partitions))]
            else:
                wanted = [(tp.topic, tp.partition) for tp in request.topic_partitions]
            for topic, p in wanted:
                t = self._require_topic(topic)
                if not 0 <= p < len(t.partitions):
                    raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{p}")
                try:
                    await self._elect_preferred(topic, p)
                    out[TopicPartition(topic, p)] = None
                except (ElectionNotNeededError, PreferredLeaderNotAvailableError) as exc:
                    out[TopicPartition(topic, p)] = type(exc).__name__
        return out

    async def _elect_preferred(self, topic: str, p: int) -> None:
        part = self._state.topics[topic].partitions[p]
        preferred = part.replicas[0]
        if part.leader == preferred:
            raise ElectionNotNeededError(f"{topic}-{p} is led by its preferred replica {preferred}")
        if preferred not in part.isr or (topic, p, preferred) not in self._handles:
            raise PreferredLeaderNotAvailableError(
                f"{topic}-{p}: preferred replica {preferred} is not live and in sync"
            )
        self._write_partition(
            topic,
            p,
            _Partition(
                part.replicas, preferred, part.leader_epoch + 1, part.isr, part.partition_epoch + 1, part.target
            ),
        )
        logger.info("%s-%d: preferred replica %d leads at epoch %d", topic, p, preferred, part.leader_epoch + 1)
        await self._push(topic, p)

    async def _rebalance_loop(self) -> None:
        """auto.leader.rebalance.enable: periodically give leadership back to preferred replicas."""
        while not self._stopping:
            await asyncio.sleep(self._config["leader.imbalance.check.interval.seconds"])
            if not self._config["auto.leader.rebalance.enable"]:
                continue
            try:
                async with self._mutex():
                    for t in list(self._state.topics.values()):
                        for p in range(len(t.partitions)):
                            try:
                                await self._elect_preferred(t.name, p)
                            except (ElectionNotNeededError, PreferredLeaderNotAvailableError):
                                pass
            except Exception:  # the next turn tries again
                logger.exception("leader rebalance failed")

    async def alter_partition_reassignments(self, request: AlterPartitionReassignmentsRequest) -> None:
        """Move partitions to new replica lists (Kafka's AlterPartitionReassignments).

        The new replicas start as followers and catch up; once all of them are in the ISR
        leadership moves into the new list if needed and the old replicas are removed with
        their data. Returns at once; ``list_partition_reassignments`` shows what is ongoing.
        """
        require(request, AlterPartitionReassignmentsRequest)
        await self._ensure_started()
        async with self._mutex():
            for tp, target in request.reassignments.items():
                topic, p = tp.topic, tp.partition
                t = self._require_topic(topic)
                if not 0 <= p < len(t.partitions):
                    raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{p}")
                target = list(target)
                self._check_assignment([target])
                part = t.partitions[p]
                replicas = target + [b for b in part.replicas if b not in target]
                self._write_partition(
                    topic,
                    p,
                    _Partition(replicas, part.leader, part.leader_epoch, part.isr, part.partition_epoch + 1, target),
                )
                await asyncio.gather(*(self._attach_or_start(topic, p, b) for b in target if b not in part.replicas))
                await self._elect_if_needed(topic, p, bump=False)
                self._track_reassignment(topic, p)

    async def list_partition_reassignments(self) -> dict[tuple[str, int], dict[str, list[int]]]:
        """Ongoing reassignments: replicas, adding and removing, per partition."""
        # Under the mutex: a reassignment being completed (old replicas stopping) still counts.
        async with self._mutex():
            return self._reassignments_now()

    def _reassignments_now(self) -> dict[tuple[str, int], dict[str, list[int]]]:
        out = {}
        for t in self._state.topics.values():
            for p, part in enumerate(t.partitions):
                if part.target is not None:
                    out[(t.name, p)] = {
                        "replicas": list(part.replicas),
                        "adding": [b for b in part.target if b not in part.isr],
                        "removing": [b for b in part.replicas if b not in part.target],
                    }
        return out

    def _track_reassignment(self, topic: str, p: int) -> None:
        task = self._reassignments.get((topic, p))
        if task is None or task.done():
            self._reassignments[(topic, p)] = asyncio.get_running_loop().create_task(
                self._complete_reassignment(topic, p)
            )

    async def _complete_reassignment(self, topic: str, p: int) -> None:
        while not self._stopping:
            await asyncio.sleep(0.1)
            t = self._state.topics.get(topic)
            if t is None:
                return
            part = t.partitions[p]
            if part.target is None:
                return
            if not all(b in part.isr for b in part.target):
                continue
            async with self._mutex():
                part = t.partitions[p]
                target = part.target or part.replicas
                removing = [b for b in part.replicas if b not in target]
                isr = [b for b in part.isr if b in target]
                leader, epoch = part.leader, part.leader_epoch
                if leader not in target:
                    live = [b for b in target if b in isr and (topic, p, b) in self._handles]
                    leader, epoch = (live[0], epoch + 1) if live else (NO_LEADER, epoch)
                self._write_partition(topic, p, _Partition(list(target), leader, epoch, isr, part.partition_epoch + 1))
                await self._push(topic, p)
                await asyncio.gather(*(self._stop_replica(topic, p, b, delete=True) for b in removing))
                if leader == NO_LEADER:
                    await self._elect_if_needed(topic, p, bump=False)
            logger.info("%s-%d: reassignment to %s complete", topic, p, target)
            return

    def _partitions_on(self, broker_id: int) -> list[tuple[str, int]]:
        return [
            (t.name, p)
            for t in self._state.topics.values()
            for p, part in enumerate(t.partitions)
            if broker_id in part.replicas
        ]

    def _require_broker(self, broker_id: int) -> BrokerMetadata:
        broker = self._state.brokers.get(broker_id)
        if broker is None:
            raise InvalidRequestError(f"unknown broker {broker_id}")
        return broker

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

    def _write_broker(self, broker_id: int, node_id: str, data_dir: str, alive: bool) -> None:
        self._write(
            {"type": "broker", "broker_id": broker_id, "node_id": node_id, "data_dir": data_dir, "alive": alive}
        )

    def _write_partition(self, topic: str, partition: int, part: _Partition) -> None:
        if self._recorder is not None:
            self._count_change(topic, partition, part)
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
                "target": part.target,
            }
        )

    # -- metrics --------------------------------------------------------------------------

    def _count_change(self, topic: str, partition: int, part: _Partition) -> None:
        """Count what a partition change is: ISR shrink or expansion, leader election."""
        partitions = self._state.topics[topic].partitions
        if partition >= len(partitions):
            return
        old, rec = partitions[partition], self._recorder
        tags = (("topic", topic),)
        if set(part.isr) < set(old.isr):
            rec.add(rec.metrics.isr_shrinks, 1, tags)
        elif set(part.isr) > set(old.isr):
            rec.add(rec.metrics.isr_expands, 1, tags)
        if part.leader != old.leader and part.leader != NO_LEADER:
            rec.add(rec.metrics.leader_elections, 1, tags)

    async def _metrics_loop(self) -> None:
        """Every TICK_S: the summed counters to Ray, and the replication gauges from the state."""
        while not self._stopping:
            await asyncio.sleep(TICK_S)
            try:
                self._record_state()
            except Exception:  # metrics must never take the controller down
                logger.exception("recording controller metrics failed")

    async def _listener_loop(self) -> None:
        """Every LISTENER_PROBE_INTERVAL_S: is each listed broker's listener serving?"""
        while not self._stopping:
            await asyncio.sleep(LISTENER_PROBE_INTERVAL_S)
            try:
                await self._probe_listeners()
            except Exception:  # metrics must never take the controller down
                logger.exception("probing the brokers' listeners failed")

    async def _probe_listeners(self) -> None:
        """Set the listener-up gauge of every broker Metadata names (alive, with a registered
        listener) from an ApiVersions round trip to its advertised address; a broker no
        longer named reads 0. A change of state is logged once."""
        rec = self._recorder
        listed = [
            (b.broker_id, b.host, b.port) for b in self._state.brokers.values() if b.alive and b.host and b.port > 0
        ]
        reasons = await probe_listeners(listed)
        for broker_id, host, port in listed:
            reason = reasons[broker_id]
            if reason is not None and broker_id not in self._listeners_down:
                logger.warning("broker %d's listener %s:%d does not answer: %s", broker_id, host, port, reason)
            elif reason is None and broker_id in self._listeners_down:
                logger.info("broker %d's listener %s:%d answers again", broker_id, host, port)
            if reason is None:
                self._listeners_down.pop(broker_id, None)
            else:
                self._listeners_down[broker_id] = reason
        for broker_id in self._probed | set(reasons):
            up = reasons.get(broker_id, "not listed") is None
            rec.metrics.listener_up.set(1 if up else 0, rec.tags(broker=broker_id))
        self._probed |= set(reasons)

    def _record_state(self) -> None:
        rec = self._recorder
        m = rec.metrics
        if self._skipped.count > self._skipped_reported:
            # Skipped while the metadata log was replayed, before there was a recorder.
            rec.add(
                m.internal_records_skipped, self._skipped.count - self._skipped_reported, (("topic", METADATA_TOPIC),)
            )
            self._skipped_reported = self._skipped.count
        rec.flush()
        offline = 0
        leaders = dict.fromkeys(self._state.brokers, 0)
        hosted = dict.fromkeys(self._state.brokers, 0)
        for t in self._state.topics.values():
            under = under_min = 0
            min_isr = self._effective_config(t)["min.insync.replicas"]
            for part in t.partitions:
                offline += part.leader == NO_LEADER
                under += len(part.isr) < len(part.replicas)
                under_min += len(part.isr) < min_isr
                if part.leader in leaders:
                    leaders[part.leader] += 1
                for b in part.replicas:
                    if b in hosted:
                        hosted[b] += 1
            m.under_replicated.set(under, rec.tags(topic=t.name))
            m.under_min_isr.set(under_min, rec.tags(topic=t.name))
        # A deleted topic's series drop to zero rather than keep their last value.
        for name in self._exported_topics - set(self._state.topics):
            m.under_replicated.set(0, rec.tags(topic=name))
            m.under_min_isr.set(0, rec.tags(topic=name))
        self._exported_topics = set(self._state.topics)
        m.offline.set(offline, rec.tags())
        m.active_controller.set(1, rec.tags())
        for b in self._state.brokers:
            m.leader_count.set(leaders[b], rec.tags(broker=b))
            m.partition_count.set(hosted[b], rec.tags(broker=b))

    def _effective_config(self, topic: _Topic) -> dict[str, Any]:
        return {**topic_defaults(self._config), **topic.configs}

    def _require_topic(self, name: str) -> _Topic:
        if not isinstance(name, str):
            raise InvalidTopicError(f"a topic name is a string, got {type(name).__name__}")
        topic = self._state.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return topic

    def _live_brokers(self) -> list[int]:
        alive = launch.alive_nodes()
        live = sorted(b.broker_id for b in self._state.brokers.values() if b.alive and b.node_id in alive)
        if not live:
            raise InvalidReplicationFactorError("no live brokers")
        return live

    def _node_alive(self, node_id: str) -> bool:
        return node_id in launch.alive_nodes()

    def _check_assignment(self, assignment: list[list[int]]) -> None:
        if not isinstance(assignment, (list, tuple)) or not assignment:
            raise InvalidReplicaAssignmentError("a replica assignment is a non-empty list of replica lists")
        for replicas in assignment:
            if not isinstance(replicas, (list, tuple)) or not replicas:
                raise InvalidReplicaAssignmentError("every partition needs at least one replica")
            if any(type(b) is not int for b in replicas):
                raise InvalidReplicaAssignmentError(f"bad replica list {replicas!r}: broker ids are integers")
        sizes = {len(replicas) for replicas in assignment}
        if len(sizes) != 1:
            raise InvalidReplicaAssignmentError("all partitions must have the same replication factor")
        for replicas in assignment:
            if len(set(replicas)) != len(replicas) or any(b not in self._state.brokers for b in replicas):
                raise InvalidReplicaAssignmentError(f"bad replica list {replicas}")

    def _manual_assignment(self, raw: Any, live: list[int]) -> list[list[int]]:
        """A replica assignment given by the user, checked as Kafka's controller does: known
        brokers, no duplicates, one replication factor, and some live replica per partition."""
        self._check_assignment(raw)
        _check_partitions_per_request(len(raw))
        assignment = [list(replicas) for replicas in raw]
        for p, replicas in enumerate(assignment):
            if not any(b in live for b in replicas):
                raise InvalidReplicaAssignmentError(
                    f"every broker in the replica list {replicas} of partition {p} is down"
                )
        return assignment

    def _topic_overrides(self, configs: Any) -> dict[str, Any]:
        """A topic's config overrides as given (each key and value checked, nothing filled in),
        stored as JSON-ready values."""
        if configs is None:
            return {}
        if not isinstance(configs, Mapping):
            raise InvalidConfigError(f"topic configs must be a mapping of keys to values, got {type(configs).__name__}")
        overrides = LOG_CONFIG.convert_overrides(configs)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()}

    def _check_topic_config(self, overrides: dict[str, Any]) -> None:
        """The rules between keys (Kafka's LogConfig.validateValues), on the config the topic would have."""
        validate_log_config({**topic_defaults(self._config), **overrides})

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
            topic.topic_id,
        )
