"""A read-only view of a running cluster at one moment, and rates between two such views.

Built from the same requests the CLI and Admin make (controller metadata, each leader's
log description, the group and transaction coordinators), so ``rayqueue status --watch``
and the web console show what ``rayqueue topics describe`` / ``groups describe`` would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import ray

from actors import launch
from actors.broker.probe import PING_TIMEOUT_S, ping_brokers
from actors.gateway.broker_view import listed_brokers
from actors.gateway.probe import probe_listeners, probe_targets
from actors.names import host_broker_id
from actors.protocol import TransactionState
from actors.types import BrokerMetadata, ClusterMetadata, MemberDescription, TopicPartition
from rayqueue.admin import Admin, PartitionLogInfo
from rayqueue.connection import ClusterHandle
from rayqueue.errors import as_kafka_error

logger = logging.getLogger(__name__)

# A snapshot is a status view: an offline or slow leader must not hold it up for
# default.api.timeout.ms; its partition shows without offsets instead.
_LEADER_TIMEOUT_S = 5.0


# How long a broker's listener may take to answer ApiVersions before it counts as down.
LISTENER_PROBE_TIMEOUT_S = 2.0

# A transaction is open from its first partition until its markers are written; a completed
# one keeps its start time at the coordinator, but has no age.
_OPEN_STATES = frozenset({TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT})


@dataclass(frozen=True, slots=True)
class BrokerView:
    """One broker: where it runs and how many replicas and leaders it holds."""

    broker_id: int
    node_id: str
    node_address: str
    rack: str | None  # rayqueue brokers have no broker.rack; kept for Kafka's shape
    alive: bool
    host: str
    port: int
    partitions: int  # replicas assigned to this broker
    leaders: int


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition: placement from the controller, offsets and size from its leader
    (None when it has no leader or the leader did not answer)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    under_replicated: bool
    offline: bool
    log_start_offset: int | None = None
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_end_offset: int | None = None
    size_bytes: int | None = None
    segments: int | None = None
    # An Iceberg topic's translation on the leader (rayqueue.iceberg.PartitionTranslation's
    # fields); None when the leader does not translate the partition.
    iceberg: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TopicView:
    """A topic with its partitions and the configs it overrides."""

    name: str
    topic_id: str
    internal: bool
    replication_factor: int
    configs: dict[str, Any]
    partitions: tuple[PartitionView, ...]

    @property
    def size_bytes(self) -> int:
        """Bytes on the leaders' logs (partitions without an answer count 0)."""
        return sum(p.size_bytes or 0 for p in self.partitions)

    @property
    def high_watermark_sum(self) -> int:
        """Sum of the partitions' high watermarks: the topic's messages in, ever."""
        return sum(p.high_watermark or 0 for p in self.partitions)

    @property
    def messages(self) -> int:
        """Records (and control markers) between log start and high watermark."""
        return sum((p.high_watermark or 0) - (p.log_start_offset or 0) for p in self.partitions)

    @property
    def iceberg(self) -> dict[str, Any] | None:
        """An Iceberg topic's translation summed over its partitions (None: none translates):
        offsets behind the high watermarks, the longest wait, invalid records, errors."""
        parts = [p.iceberg for p in self.partitions if p.iceberg is not None]
        if not parts:
            return None
        return {
            "mode": parts[0]["mode"],
            "partitions": len(parts),
            "lag_records": sum(p["lag_records"] for p in parts),
            "lag_seconds": max(p["lag_seconds"] for p in parts),
            "translated_records": sum(p["translated_records"] for p in parts),
            "invalid_records": sum(p["invalid_records"] for p in parts),
            "errors": [p["error"] for p in parts if p["error"]],
        }


@dataclass(frozen=True, slots=True)
class GroupOffsetView:
    """A group's progress on one partition (``kafka-consumer-groups --describe``'s row)."""

    topic: str
    partition: int
    committed: int | None
    log_end_offset: int | None  # the high watermark: what a read_uncommitted consumer can reach
    lag: int | None
    owner: str | None  # member id of the partition's owner, if any


@dataclass(frozen=True, slots=True)
class GroupView:
    """A consumer group: state, protocol, members and per-partition offsets and lag."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation_id: int
    members: tuple[MemberDescription, ...]
    offsets: tuple[GroupOffsetView, ...]

    @property
    def lag(self) -> int:
        """Total lag over the partitions whose end is known."""
        return sum(o.lag or 0 for o in self.offsets)


@dataclass(frozen=True, slots=True)
class TransactionView:
    """A transactional id as the transaction coordinator knows it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int
    age_ms: int | None  # of the open transaction; None when none is open
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything the status view and the console show, taken at ``taken_at``."""

    taken_at: float  # time.time()
    monotonic: float  # time.monotonic(), for rates
    cluster_id: str
    namespace: str
    controller_epoch: int
    brokers: tuple[BrokerView, ...]
    topics: dict[str, TopicView]
    groups: dict[str, GroupView]
    transactions: tuple[TransactionView, ...]
    errors: tuple[str, ...] = field(default=())  # parts of the view that could not be read

    @property
    def partitions(self) -> list[PartitionView]:
        """Every partition of every topic."""
        return [p for t in self.topics.values() for p in t.partitions]

    @property
    def under_replicated(self) -> list[PartitionView]:
        """Partitions with fewer in-sync replicas than replicas (Kafka's URPs)."""
        return [p for p in self.partitions if p.under_replicated and not p.offline]

    @property
    def offline(self) -> list[PartitionView]:
        """Partitions without a live leader."""
        return [p for p in self.partitions if p.offline]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (tuples as lists, TopicPartitions as dicts), derived totals included."""
        data = asdict(self)
        for name, topic in self.topics.items():
            data["topics"][name].update(size_bytes=topic.size_bytes, messages=topic.messages, iceberg=topic.iceberg)
        for group_id, group in self.groups.items():
            data["groups"][group_id]["lag"] = group.lag
            for member in data["groups"][group_id]["members"]:
                # Opaque client protocol bytes are not for a browser.
                member.pop("metadata", None)
                member.pop("member_assignment", None)
        data["under_replicated"] = [[p.topic, p.partition] for p in self.under_replicated]
        data["offline"] = [[p.topic, p.partition] for p in self.offline]
        return data


def _error_text(exc: BaseException) -> str:
    error = as_kafka_error(exc, what="rayqueue actor")
    name = getattr(error, "kafka_name", type(error).__name__)
    message = error.args[0] if error.args else ""
    return " ".join(f"{name}: {message}".split())


def _node_addresses() -> dict[str, str]:
    try:
        return {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()}
    except Exception:  # noqa: BLE001 - the address is decoration; the node id is still shown
        return {}


def take_snapshot(
    cluster: ClusterHandle, admin: Admin | None = None, *, include_internal: bool = True
) -> ClusterSnapshot:
    """Read the cluster once. Parts that fail (a leader down, a coordinator restarting)
    are left empty and named in ``errors``; only an unreachable controller raises.

    With an ``admin`` acting as a principal the snapshot holds what that principal may
    describe: the topics its Admin lists (and the brokers' partition counts over those),
    the groups and transactional ids its Admin lists."""
    admin = admin if admin is not None else Admin(cluster)
    errors: list[str] = []
    monotonic, taken_at = time.monotonic(), time.time()
    if admin.principal is None:
        meta = cluster.metadata()
    else:
        # The brokers from a metadata call naming no topic, the topics as the principal's
        # Admin describes them (leaving out what it may not DESCRIBE, as Kafka's Metadata does).
        meta = replace(cluster.metadata([]), topics=admin.describe_topics())
    nodes = _node_addresses()

    online = [p.tp for t in meta.topics.values() for p in t.partitions if not p.offline]
    logs: dict[TopicPartition, PartitionLogInfo] = {}
    if online:
        try:
            logs = admin.describe_partition_logs(online, timeout_s=_LEADER_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - one slow leader: ask the others one by one
            errors.append(f"partition logs: {_error_text(exc)}")
            logs = _partition_logs_one_by_one(admin, online)

    topics: dict[str, TopicView] = {}
    for name, t in sorted(meta.topics.items()):
        if t.internal and not include_internal:
            continue
        partitions = []
        for p in t.partitions:
            log = logs.get(p.tp)
            partitions.append(
                PartitionView(
                    p.topic,
                    p.partition,
                    p.leader,
                    p.leader_epoch,
                    tuple(p.replicas),
                    tuple(p.isr),
                    tuple(p.offline_replicas),
                    p.under_replicated,
                    p.offline,
                    *(
                        (
                            log.log_start_offset,
                            log.high_watermark,
                            log.last_stable_offset,
                            log.log_end_offset,
                            log.size_bytes,
                            log.segments,
                            log.iceberg,
                        )
                        if log is not None
                        else ()
                    ),
                )
            )
        rf = len(t.partitions[0].replicas) if t.partitions else 0
        topics[name] = TopicView(name, t.topic_id, t.internal, rf, dict(t.configs), tuple(partitions))

    replicas = {b.broker_id: 0 for b in meta.brokers}
    leaders = {b.broker_id: 0 for b in meta.brokers}
    for t in meta.topics.values():
        for p in t.partitions:
            for r in p.replicas:
                replicas[r] = replicas.get(r, 0) + 1
            if p.leader >= 0:
                leaders[p.leader] = leaders.get(p.leader, 0) + 1
    brokers = tuple(
        BrokerView(
            b.broker_id,
            b.node_id,
            nodes.get(b.node_id, "?"),
            None,
            b.alive,
            b.host,
            b.port,
            replicas.get(b.broker_id, 0),
            leaders.get(b.broker_id, 0),
        )
        for b in sorted(meta.brokers, key=lambda b: b.broker_id)
    )

    ends = {tp: log.high_watermark for tp, log in logs.items()}
    groups = _groups(admin, ends, errors)
    transactions = _transactions(admin, taken_at, errors)
    return ClusterSnapshot(
        taken_at,
        monotonic,
        meta.cluster_id,
        cluster.namespace,
        meta.controller_epoch,
        brokers,
        topics,
        groups,
        transactions,
        tuple(errors),
    )


def listeners_down(
    meta: ClusterMetadata, config: Mapping[str, Any] | None = None, timeout_s: float = LISTENER_PROBE_TIMEOUT_S
) -> list[tuple[BrokerMetadata, str]]:
    """The brokers Metadata names (alive, with a registered listener) whose advertised
    address does not answer an ApiVersions request within ``timeout_s``, each with why:
    connected to for real, from this process, as a Kafka client would (over TLS with the
    listener's keys from ``config``, the cluster's configuration, for a TLS listener)."""
    brokers = listed_brokers(meta.brokers)
    if not brokers:
        return []
    reasons = asyncio.run(probe_listeners(probe_targets(brokers, config), timeout_s))
    return [(b, reasons[b.broker_id]) for b in brokers if reasons[b.broker_id] is not None]


def brokers_not_answering(
    meta: ClusterMetadata, namespace: str, timeout_s: float = PING_TIMEOUT_S
) -> list[tuple[BrokerMetadata, str]]:
    """The live brokers one of whose host actors in ``namespace`` (one per broker, K, or one
    per replica, as rayqueue.broker.placement says) does not answer a ping within
    ``timeout_s``, each with why: a listener in another process may still answer ApiVersions
    for a broker whose event loop is blocked."""
    brokers = {b.broker_id: b for b in meta.brokers if b.alive}
    hosts: dict[int, list[Any]] = {}
    for name, actor in launch.named_actors(namespace, "broker|").items():
        broker = host_broker_id(name)
        if broker in brokers:
            hosts.setdefault(broker, []).append(actor)
    reasons = asyncio.run(ping_brokers(hosts, timeout_s)) if hosts else {}
    return [(brokers[b], reason) for b, reason in sorted(reasons.items()) if reason is not None]


def _partition_logs_one_by_one(admin: Admin, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionLogInfo]:
    out = {}
    for tp in tps:
        try:
            out.update(admin.describe_partition_logs([tp], timeout_s=1.0))
        except Exception:  # noqa: BLE001 - the partition shows without offsets
            pass
    return out


def _groups(admin: Admin, ends: Mapping[TopicPartition, int], errors: list[str]) -> dict[str, GroupView]:
    try:
        listings = admin.list_groups()
        descriptions = admin.describe_groups([g.group_id for g in listings]) if listings else {}
    except Exception as exc:  # noqa: BLE001 - shown as a message, the rest of the view stands
        errors.append(f"groups: {_error_text(exc)}")
        return {}
    out = {}
    for listing in sorted(listings, key=lambda g: g.group_id):
        desc = descriptions.get(listing.group_id)
        if desc is None:
            continue
        try:
            committed = admin.list_group_offsets(listing.group_id)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"group {listing.group_id} offsets: {_error_text(exc)}")
            committed = {}
        owner = {tp: m.member_id for m in desc.members for tp in m.assignment}
        offsets = []
        for tp in sorted(set(committed) | set(owner)):
            om = committed.get(tp)
            end = ends.get(tp)
            # As Admin.group_lag: a partition never committed counts its whole log as lag.
            lag = None if end is None else max(0, end - (om.offset if om else 0))
            offsets.append(GroupOffsetView(tp.topic, tp.partition, om.offset if om else None, end, lag, owner.get(tp)))
        out[listing.group_id] = GroupView(
            desc.group_id,
            str(desc.state),
            desc.protocol_type,
            desc.protocol,
            desc.generation_id,
            tuple(desc.members),
            tuple(offsets),
        )
    return out


def _transactions(admin: Admin, now: float, errors: list[str]) -> tuple[TransactionView, ...]:
    try:
        ids = [t.transactional_id for t in admin.list_transactions()]
        descriptions = admin.describe_transactions(ids) if ids else {}
    except Exception as exc:  # noqa: BLE001
        errors.append(f"transactions: {_error_text(exc)}")
        return ()
    now_ms = int(now * 1000)
    return tuple(
        TransactionView(
            d.transactional_id,
            d.producer_id,
            d.producer_epoch,
            str(d.state),
            d.timeout_ms,
            d.start_ms,
            max(0, now_ms - d.start_ms) if d.start_ms >= 0 and d.state in _OPEN_STATES else None,
            tuple(d.partitions),
        )
        for d in sorted(descriptions.values(), key=lambda d: d.transactional_id)
    )


@dataclass(frozen=True, slots=True)
class TopicRate:
    """Messages per second on one topic between two snapshots.

    ``messages_in``: the partitions' high watermarks moving (records acknowledged, as
    Kafka's MessagesInPerSec counts them once replicated; transaction markers count too).
    ``messages_out``: the groups' committed offsets moving, summed over groups: records
    consumers have confirmed, not fetches (a reader without a group or that never commits
    is not seen; a reset that moves offsets backwards counts 0, not negative).
    """

    topic: str
    messages_in: float
    messages_out: float


def rates(before: ClusterSnapshot, after: ClusterSnapshot) -> dict[str, TopicRate]:
    """Messages in and out per second per topic between two snapshots (0 when no time
    passed). A topic created in between counts all it holds as come in meanwhile."""
    elapsed = after.monotonic - before.monotonic
    out = {}
    for name, topic in after.topics.items():
        if elapsed <= 0:
            out[name] = TopicRate(name, 0.0, 0.0)
            continue
        old = before.topics.get(name)
        if old is None or old.topic_id != topic.topic_id:
            # Created (or recreated) since ``before``: everything it holds came in meanwhile.
            old_hw: dict[int, int | None] = {p.partition: 0 for p in topic.partitions}
        else:
            old_hw = {p.partition: p.high_watermark for p in old.partitions}
        moved_in = sum(
            max(0, p.high_watermark - old_hw[p.partition])
            for p in topic.partitions
            if p.high_watermark is not None and old_hw.get(p.partition) is not None
        )
        out[name] = TopicRate(name, moved_in / elapsed, _committed_moved(before, after, name) / elapsed)
    return out


def _committed_moved(before: ClusterSnapshot, after: ClusterSnapshot, topic: str) -> int:
    moved = 0
    for group_id, group in after.groups.items():
        old = before.groups.get(group_id)
        if old is None:
            continue
        was = {(o.topic, o.partition): o.committed for o in old.offsets if o.topic == topic}
        for o in group.offsets:
            if o.topic != topic or o.committed is None:
                continue
            prev = was.get((o.topic, o.partition))
            if prev is not None:
                moved += max(0, o.committed - prev)
    return moved


class RateSampler:
    """Keeps the last snapshot and answers the rates since it: call ``sample`` in a loop."""

    def __init__(self) -> None:
        self._last: ClusterSnapshot | None = None

    def sample(self, snapshot: ClusterSnapshot) -> dict[str, TopicRate]:
        """The rates between the previous snapshot and ``snapshot`` (zeros the first time)."""
        previous, self._last = self._last, snapshot
        return rates(previous if previous is not None else snapshot, snapshot)


__all__ = [
    "BrokerView",
    "ClusterSnapshot",
    "GroupOffsetView",
    "GroupView",
    "PartitionView",
    "RateSampler",
    "TopicRate",
    "TopicView",
    "TransactionView",
    "rates",
    "take_snapshot",
]
