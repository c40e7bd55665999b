"""Topics and their partitions: placement, leaders, ISR, reassignment (Kafka's
``ReplicationControlManager``).

Replication follows Kafka's ISR design. A partition's leader is elected from its ISR: the
current leader while it is live and in sync, else the first live ISR member in replica
order, at a new leader epoch. With ``unclean.leader.election.enable`` false (Kafka's
default) a partition whose in-sync replicas are all down stays offline rather than lose
committed records; with it true a live out-of-sync replica leads and becomes the whole ISR.
A replica that goes down leaves the ISR at once (as a fenced Kafka broker does), except the
last member: the ISR is never empty, so that member can lead again when it comes back. A
leader's ISR change (AlterPartition) applies only from the current leader at the current
leader and partition epochs, and only live replicas (or members already in) may join.
A reassignment adds the target replicas, waits until all of them are in the ISR, moves
leadership into the target if it is outside, and removes the old replicas.

Whether a replica runs is the shell's knowledge (it holds the actor handles): methods that
need it take ``online``, the set of live replicas as ``(topic, partition, broker)``.
Every method returns the records to append (a :class:`ControllerResult`); nothing here
changes until those records are replayed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.controller import records
from actors.controller.cluster_control import ClusterControlManager
from actors.controller.configuration_control import ConfigurationControlManager, topic_overrides
from actors.controller.placement import assign_replicas, check_assignment, manual_assignment
from actors.controller.records import NO_LEADER, ControllerResult, PartitionRegistration
from actors.names import INTERNAL_TOPICS
from actors.protocol import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    require,
)
from actors.topics import (
    INT32_MAX,
    check_partitions_per_request,
    resolve_count,
    unify_collision_chars,
    validate_topic_name,
)
from actors.types import PartitionMetadata, TopicMetadata
from storage.errors import (
    ElectionNotNeededError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    PolicyViolationError,
    PreferredLeaderNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)

# One replica: (topic, partition, broker id).
Replica = tuple[str, int, int]


@dataclass(slots=True)
class TopicControlInfo:
    """A topic's id and partitions (Kafka's TopicControlInfo)."""

    name: str
    # KIP-516: tells a recreated topic from a deleted one of the same name (on every replica's disk).
    topic_id: str = ""
    partitions: list[PartitionRegistration] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Partitions that CreateTopics or CreatePartitions adds; their replicas start next.
    ``planned`` is what a validate-only CreateTopics answers (nothing is written)."""

    topic: str
    first: int
    assignment: list[list[int]]
    planned: TopicMetadata | None = None

    def partitions(self) -> range:
        """The new partitions' indexes."""
        return range(self.first, self.first + len(self.assignment))

    def replicas(self) -> list[Replica]:
        """Every replica of the new partitions."""
        return [(self.topic, self.first + i, b) for i, brokers in enumerate(self.assignment) for b in brokers]


@dataclass(frozen=True, slots=True)
class Election:
    """A partition's leader after an election (NO_LEADER: offline); ``unclean`` when it was
    taken from outside the ISR."""

    leader: int
    leader_epoch: int
    unclean: bool = False


@dataclass(frozen=True, slots=True)
class ReassignmentDone:
    """A completed reassignment: its replicas, the old ones to remove, the leader after it."""

    target: list[int]
    removing: list[int]
    leader: int


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """What one partition record changes, as Kafka's metrics count it."""

    isr_shrink: bool
    isr_expand: bool
    leader_elected: bool


@dataclass(frozen=True, slots=True)
class ReplicationStats:
    """The replication gauges: offline partitions; per topic, under-replicated and
    under-min-ISR partitions; per broker, the partitions it leads and hosts."""

    offline: int
    under_replicated: dict[str, int]
    under_min_isr: dict[str, int]
    leaders: dict[int, int]
    hosted: dict[int, int]


def classify_change(old: PartitionRegistration | None, new: PartitionRegistration) -> PartitionChange:
    """Whether a change shrinks or expands the ISR or elects a leader (none for a new partition)."""
    if old is None:
        return PartitionChange(False, False, False)
    return PartitionChange(
        set(new.isr) < set(old.isr),
        set(new.isr) > set(old.isr),
        new.leader != old.leader and new.leader != NO_LEADER,
    )


class ReplicationControlManager:
    """Topics, partitions and their replication state, rebuilt by :meth:`replay`."""

    def __init__(
        self,
        broker_config: Mapping[str, Any],
        cluster: ClusterControlManager,
        configuration: ConfigurationControlManager,
        rng: random.Random | None = None,
    ) -> None:
        # num.partitions and default.replication.factor, for a CreateTopics that leaves them -1.
        self._default_partitions = broker_config["num.partitions"]
        self._default_replication_factor = broker_config["default.replication.factor"]
        self._cluster = cluster
        self._configuration = configuration
        self._rng = rng
        self.topics: dict[str, TopicControlInfo] = {}

    # -- replay ---------------------------------------------------------------------------

    def replay(self, record: dict[str, Any]) -> None:
        """Apply a checked ``topic``, ``topic_id``, ``partition`` or ``delete_topic`` record
        (KeyError/ValueError for one about a topic or partition it does not know; nothing
        changes then)."""
        kind = record["type"]
        if kind == "topic":
            self.topics[record["name"]] = TopicControlInfo(record["name"], record.get("topic_id") or "")
        elif kind == "topic_id":
            self.topics[record["name"]].topic_id = record["topic_id"]
        elif kind == "partition":
            partitions = self.topics[record["topic"]].partitions
            index = record["partition"]
            if not 0 <= index <= len(partitions):
                raise ValueError(f"partition {index} of {record['topic']} ({len(partitions)} known)")
            if index == len(partitions):
                partitions.append(records.registration_of(record))
            else:
                partitions[index] = records.registration_of(record)
        elif kind == "delete_topic":
            self.topics.pop(record["name"], None)
        else:
            raise ValueError(f"not a replication record: {kind!r:.40}")

    def assign_missing_topic_ids(self) -> ControllerResult[None]:
        """An id for every topic of a metadata log written before topic ids, once and for good."""
        return ControllerResult(
            [records.topic_id(t.name, records.new_topic_id()) for t in self.topics.values() if not t.topic_id]
        )

    # -- queries --------------------------------------------------------------------------

    def require_topic(self, name: Any) -> TopicControlInfo:
        """The topic, INVALID_TOPIC_EXCEPTION for a name that is no string, or
        UNKNOWN_TOPIC_OR_PARTITION."""
        if not isinstance(name, str):
            raise InvalidTopicError(f"a topic name is a string, got {type(name).__name__}")
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r:.260}")
        return topic

    def require_partition(self, name: Any, partition: Any) -> PartitionRegistration:
        """The partition's registration, or UNKNOWN_TOPIC_OR_PARTITION."""
        topic = self.require_topic(name)
        if type(partition) is not int or not 0 <= partition < len(topic.partitions):
            raise UnknownTopicOrPartitionError(f"unknown partition {name}-{partition!r:.20}")
        return topic.partitions[partition]

    def has_partition(self, name: str, partition: int) -> bool:
        """Whether the partition exists (a replica of a deleted topic may still report)."""
        topic = self.topics.get(name)
        return topic is not None and 0 <= partition < len(topic.partitions)

    def partitions(self) -> list[tuple[str, int]]:
        """Every partition, topic by topic."""
        return [(t.name, p) for t in self.topics.values() for p in range(len(t.partitions))]

    def replicas(self) -> list[Replica]:
        """Every replica of every partition (during a reassignment: old and new)."""
        return [
            (t.name, p, b) for t in self.topics.values() for p, part in enumerate(t.partitions) for b in part.replicas
        ]

    def partitions_on(self, broker_id: int) -> list[tuple[str, int]]:
        """The partitions with a replica on ``broker_id``."""
        return [
            (t.name, p)
            for t in self.topics.values()
            for p, part in enumerate(t.partitions)
            if broker_id in part.replicas
        ]

    def hosted(self, broker_ids: Collection[int]) -> dict[int, set[str]]:
        """Per broker, the partition directories (``<topic>-<partition>``) it should hold."""
        out: dict[int, set[str]] = {b: set() for b in broker_ids}
        for t in self.topics.values():
            for p, part in enumerate(t.partitions):
                for b in {*part.replicas, *(part.target or ())}:
                    if b in out:
                        out[b].add(f"{t.name}-{p}")
        return out

    def reassigning(self) -> list[tuple[str, int]]:
        """The partitions with a reassignment under way."""
        return [
            (t.name, p) for t in self.topics.values() for p, part in enumerate(t.partitions) if part.target is not None
        ]

    def reassignments(self) -> dict[tuple[str, int], dict[str, list[int]]]:
        """Ongoing reassignments: replicas, adding and removing, per partition (Kafka's
        ListPartitionReassignments)."""
        out = {}
        for t in self.topics.values():
            for p, part in enumerate(t.partitions):
                if part.target is not None:
                    out[(t.name, p)] = {
                        "replicas": list(part.replicas),
                        "adding": [b for b in part.target if b not in part.isr],
                        "removing": [b for b in part.replicas if b not in part.target],
                    }
        return out

    def partition_metadata(self, topic: str, p: int, handles: Mapping[Replica, Any]) -> PartitionMetadata:
        """A partition as Metadata answers it: the leader (NO_LEADER while its actor is not
        live) with its actor handle from ``handles``, and the offline replicas."""
        part = self.topics[topic].partitions[p]
        handle = handles.get((topic, p, part.leader)) if part.leader != NO_LEADER else None
        offline = tuple(b for b in part.replicas if (topic, p, b) not in handles)
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

    def topic_metadata(self, name: str, handles: Mapping[Replica, Any]) -> TopicMetadata:
        """A topic as Metadata answers it."""
        topic = self.require_topic(name)
        return TopicMetadata(
            name,
            tuple(self.partition_metadata(name, p, handles) for p in range(len(topic.partitions))),
            name in INTERNAL_TOPICS,
            self._configuration.overrides(name),
            topic.topic_id,
        )

    def stats(self) -> ReplicationStats:
        """The replication gauges, from the registrations (min.insync.replicas per topic)."""
        offline = 0
        leaders = dict.fromkeys(self._cluster.brokers, 0)
        hosted = dict.fromkeys(self._cluster.brokers, 0)
        under: dict[str, int] = {}
        under_min: dict[str, int] = {}
        for t in self.topics.values():
            min_isr = self._configuration.effective(t.name)["min.insync.replicas"]
            under[t.name] = under_min[t.name] = 0
            for part in t.partitions:
                offline += part.leader == NO_LEADER
                under[t.name] += len(part.isr) < len(part.replicas)
                under_min[t.name] += len(part.isr) < min_isr
                if part.leader in leaders:
                    leaders[part.leader] += 1
                for b in part.replicas:
                    if b in hosted:
                        hosted[b] += 1
        return ReplicationStats(offline, under, under_min, leaders, hosted)

    # -- topics and partitions ------------------------------------------------------------

    def create_topic(
        self, request: CreateTopicsRequest, alive_nodes: Collection[str]
    ) -> ControllerResult[NewPartitions]:
        """One topic of CreateTopics on the live brokers (running, on ``alive_nodes``): a topic record and one partition
        record per partition, every replica in the ISR and no leader yet (the replicas start,
        then each partition elects).

        ``num_partitions`` / ``replication_factor`` of -1 (or None) take num.partitions /
        default.replication.factor (KIP-464); 0 and other negatives are refused, as is a
        replication factor above the number of live brokers. With ``assignments`` both must
        be left at -1. With ``validate_only`` every check runs and nothing is written: the
        answer's ``planned`` is the topic as it would be, with no leaders and no topic id.
        """
        require(request, CreateTopicsRequest)
        name = request.name
        validate_topic_name(name)
        overrides = topic_overrides(request.configs)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        unified = unify_collision_chars(name)
        for existing in self.topics:
            if unify_collision_chars(existing) == unified:
                raise InvalidTopicError(
                    f"topic {name!r} collides with existing topic {existing!r} ('.' and '_' are the same in metric names)"
                )
        live = self._cluster.live_brokers(alive_nodes)
        if request.assignments is not None:
            if request.num_partitions not in (None, -1) or request.replication_factor not in (None, -1):
                raise InvalidRequestError(
                    "a replica assignment was given: num_partitions and replication_factor must be unset (-1)"
                )
            assignment = manual_assignment(request.assignments, self._cluster.brokers, live)
        else:
            partitions = resolve_count(
                request.num_partitions, self._default_partitions, "num_partitions", InvalidPartitionsError
            )
            rf = resolve_count(
                request.replication_factor,
                self._default_replication_factor,
                "replication factor",
                InvalidReplicationFactorError,
            )
            check_partitions_per_request(partitions)
            assignment = assign_replicas(partitions, rf, live, rng=self._rng)
        self._configuration.check(overrides)
        if request.validate_only:
            planned = TopicMetadata(
                name,
                tuple(PartitionMetadata(name, p, NO_LEADER, -1, tuple(r), tuple(r)) for p, r in enumerate(assignment)),
                name in INTERNAL_TOPICS,
                dict(overrides),
            )
            return ControllerResult([], NewPartitions(name, 0, assignment, planned))
        min_isr = {**self._configuration.defaults(), **overrides}["min.insync.replicas"]
        if min_isr > len(assignment[0]):
            logger.warning("topic %s: min.insync.replicas exceeds the replication factor; acks=all will fail", name)
        out = [records.topic(name, overrides, records.new_topic_id())]
        out += [records.partition(name, p, _new_partition(r)) for p, r in enumerate(assignment)]
        return ControllerResult(out, NewPartitions(name, 0, assignment))

    def create_partitions(
        self, request: CreatePartitionsRequest, alive_nodes: Collection[str]
    ) -> ControllerResult[NewPartitions]:
        """Grow a topic to ``count`` partitions (Kafka's CreatePartitions; Kafka never shrinks
        one), at the topic's replication factor, on the live brokers (running, on
        ``alive_nodes``). With ``validate_only`` nothing is written."""
        require(request, CreatePartitionsRequest)
        name, total = request.name, request.count
        topic = self.require_topic(name)
        current = len(topic.partitions)
        if type(total) is not int:
            raise InvalidPartitionsError(f"the new partition count must be an integer, got {total!r:.40}")
        if total <= current:
            raise InvalidPartitionsError(f"topic {name!r} has {current} partitions; asked for {total}")
        if total > INT32_MAX:
            raise InvalidPartitionsError(f"{total} partitions is above the limit {INT32_MAX}")
        check_partitions_per_request(total - current)
        rf = len(topic.partitions[0].replicas)
        live = self._cluster.live_brokers(alive_nodes)
        if request.assignments is None:
            assignment = assign_replicas(total - current, rf, live, first_partition=current, rng=self._rng)
        else:
            assignment = manual_assignment(request.assignments, self._cluster.brokers, live)
            if len(assignment) != total - current:
                raise InvalidReplicaAssignmentError(
                    f"increasing the partition count by {total - current} needs as many replica lists; "
                    f"{len(assignment)} given"
                )
            if len(assignment[0]) != rf:
                raise InvalidReplicaAssignmentError(
                    f"topic {name!r} has replication factor {rf}; the new partitions have {len(assignment[0])}"
                )
        result = NewPartitions(name, current, assignment)
        if request.validate_only:
            return ControllerResult([], result)
        return ControllerResult(
            [
                records.partition(name, p, _new_partition(r))
                for p, r in zip(result.partitions(), assignment, strict=True)
            ],
            result,
        )

    def delete_topic(self, name: str, enabled: bool, internal_allowed: bool = False) -> ControllerResult[list[Replica]]:
        """Delete a topic (Kafka's DeleteTopics; POLICY_VIOLATION unless
        ``delete.topic.enable``); the answer is its replicas, to stop with their data.

        An internal topic (``__consumer_offsets``, ``__transaction_state``) is never deleted:
        its records are the coordinators' state (every committed offset, every open
        transaction). It is INVALID_TOPIC_EXCEPTION, Kafka's error for a client's write or
        DeleteRecords on an internal topic, with or without an authorizer; only
        ``internal_allowed`` (rayqueue's own tools and tests) lifts it."""
        if name in INTERNAL_TOPICS and not internal_allowed:
            raise InvalidTopicError(f"cannot delete internal topic {name}")
        if not enabled:
            raise PolicyViolationError("delete.topic.enable is false")
        topic = self.require_topic(name)
        replicas = [(name, p, b) for p, part in enumerate(topic.partitions) for b in part.replicas]
        return ControllerResult([records.delete_topic(name)], replicas)

    # -- elections and the ISR ------------------------------------------------------------

    def elect(self, topic: str, p: int, online: Collection[Replica], bump: bool) -> ControllerResult[Election]:
        """Give the partition a leader: the current one while it is live and in sync, else the
        first live ISR member in replica order; with ``unclean.leader.election.enable`` a live
        out-of-sync replica when no ISR member lives (it becomes the whole ISR). The leader
        epoch goes up when the leader changes (or ``bump``: a recreated leader starts a new
        term). Without a leader the partition is offline."""
        part = self.topics[topic].partitions[p]
        new, election = self._elected(topic, p, part, online, bump)
        return ControllerResult([records.partition(topic, p, new)] if new is not part else [], election)

    def elect_all(
        self,
        partitions: Collection[tuple[str, int]],
        online: Collection[Replica],
        bump: bool | Collection[tuple[str, int]],
        drop_offline: bool = False,
        down: int | None = None,
    ) -> ControllerResult[dict[tuple[str, int], Election]]:
        """Elect many partitions' leaders in one step (one record per partition that changes,
        appended together): broker ``down``'s replica first leaves each ISR and leadership
        (:meth:`remove_from_isr`), with ``drop_offline`` every replica without a live actor
        too (:meth:`drop_offline`), then each partition elects (:meth:`elect`; ``bump`` for
        all, or the partitions whose epoch goes up). A partition that no longer exists is
        left out. The answer is each partition's election."""
        out: list[dict[str, Any]] = []
        elections: dict[tuple[str, int], Election] = {}
        for topic, p in dict.fromkeys(partitions):
            if not self.has_partition(topic, p):
                continue
            part = current = self.topics[topic].partitions[p]
            if down is not None:
                part = self._removed(part, [down])
            if drop_offline:
                part = self._removed(part, [b for b in part.replicas if (topic, p, b) not in online])
            bumped = bump if isinstance(bump, bool) else (topic, p) in bump
            part, elections[(topic, p)] = self._elected(topic, p, part, online, bumped)
            if part is not current:
                out.append(records.partition(topic, p, part))
        return ControllerResult(out, elections)

    def _elected(
        self, topic: str, p: int, part: PartitionRegistration, online: Collection[Replica], bump: bool
    ) -> tuple[PartitionRegistration, Election]:
        """``part`` after its election (the same object when nothing changes), and the election."""
        live = [b for b in part.replicas if (topic, p, b) in online]
        live_isr = [b for b in live if b in part.isr]
        isr, unclean = part.isr, False
        if part.leader in live_isr:
            leader = part.leader
        elif live_isr:
            leader = live_isr[0]
        elif live and self._configuration.effective(topic)["unclean.leader.election.enable"]:
            leader, isr, unclean = live[0], [live[0]], True
            logger.warning("%s-%d: unclean election of broker %d; records may be lost", topic, p, leader)
        else:
            leader = NO_LEADER
        if leader == NO_LEADER:
            logger.warning("%s-%d is offline: no live in-sync replica", topic, p)
            if part.leader == NO_LEADER:
                return part, Election(NO_LEADER, part.leader_epoch)
            return part.changed(leader=NO_LEADER), Election(NO_LEADER, part.leader_epoch)
        changed = leader != part.leader or part.leader_epoch < 0
        epoch = part.leader_epoch + 1 if (bump or changed) else part.leader_epoch
        if leader != part.leader or epoch != part.leader_epoch or isr != part.isr:
            if changed:
                logger.info("%s-%d: broker %d elected leader at epoch %d (ISR %s)", topic, p, leader, epoch, isr)
            part = part.changed(leader=leader, leader_epoch=epoch, isr=isr)
        return part, Election(leader, epoch, unclean)

    def elect_preferred(self, topic: str, p: int, online: Collection[Replica]) -> ControllerResult[Election]:
        """Preferred leader election (Kafka's ElectLeaders, PREFERRED): leadership moves to the
        first replica, at a new epoch. ELECTION_NOT_NEEDED when it leads already,
        PREFERRED_LEADER_NOT_AVAILABLE when it is not live and in sync."""
        part = self.require_partition(topic, p)
        preferred = part.replicas[0]
        if part.leader == preferred:
            raise ElectionNotNeededError(f"{topic}-{p} is led by its preferred replica {preferred}")
        if preferred not in part.isr or (topic, p, preferred) not in online:
            raise PreferredLeaderNotAvailableError(
                f"{topic}-{p}: preferred replica {preferred} is not live and in sync"
            )
        epoch = part.leader_epoch + 1
        logger.info("%s-%d: preferred replica %d leads at epoch %d", topic, p, preferred, epoch)
        return ControllerResult(
            [records.partition(topic, p, part.changed(leader=preferred, leader_epoch=epoch))],
            Election(preferred, epoch),
        )

    def remove_from_isr(self, topic: str, p: int, broker_id: int) -> ControllerResult[None]:
        """A replica went down: it leaves the ISR (unless it is the last member) and the
        leadership. Nothing for a partition that no longer exists."""
        if not self.has_partition(topic, p):
            return ControllerResult()
        return self._without(topic, p, [broker_id])

    def drop_offline(self, topic: str, p: int, online: Collection[Replica]) -> ControllerResult[None]:
        """Replicas without a live actor leave the ISR (a new partition's ISR holds only the
        replicas that came up, as Kafka leaves fenced brokers out), so a stopped broker does
        not hold the high watermark back."""
        part = self.topics[topic].partitions[p]
        return self._without(topic, p, [b for b in part.replicas if (topic, p, b) not in online])

    def _without(self, topic: str, p: int, down: list[int]) -> ControllerResult[None]:
        part = self.topics[topic].partitions[p]
        new = self._removed(part, down)
        return ControllerResult([records.partition(topic, p, new)] if new is not part else [])

    @staticmethod
    def _removed(part: PartitionRegistration, down: list[int]) -> PartitionRegistration:
        """``part`` without the ``down`` brokers in its ISR and leadership (the same object
        when nothing changes)."""
        isr, leader = part.isr, part.leader
        for b in down:
            # Kafka never empties the ISR: the last member stays so that it can lead again when
            # it returns, and no out-of-sync replica can take over without an unclean election.
            isr = [x for x in isr if x != b] or isr
            leader = NO_LEADER if leader == b else leader
        if isr == part.isr and leader == part.leader:
            return part
        return part.changed(leader=leader, isr=isr)

    def alter_partition(
        self, request: AlterPartitionRequest, online: Collection[Replica]
    ) -> ControllerResult[AlterPartitionResponse]:
        """A leader's ISR change (Kafka's AlterPartition); answers the partition's state as
        committed. Refused (the current state answered, nothing written) unless the caller is
        the current leader at the current leader and partition epochs. The leader stays in;
        a replica joins only if it is live or in the ISR already; replica order is kept."""
        require(request, AlterPartitionRequest)
        topic, p, leader_id = request.topic_name, request.partition_index, request.broker_id
        t = self.topics.get(topic) if isinstance(topic, str) else None
        if t is None or type(p) is not int or not 0 <= p < len(t.partitions):
            raise UnknownTopicOrPartitionError(f"unknown partition {topic!r:.260}-{p!r:.20}")
        part = t.partitions[p]
        current = AlterPartitionResponse(part.leader_epoch, part.partition_epoch, tuple(part.isr))
        if (leader_id, request.leader_epoch, request.partition_epoch) != (
            part.leader,
            part.leader_epoch,
            part.partition_epoch,
        ):
            return ControllerResult([], current)
        try:
            wanted = set(request.new_isr)
        except TypeError:
            raise InvalidRequestError(f"new_isr is a list of broker ids, not {request.new_isr!r:.60}") from None
        new_isr = [
            b for b in part.replicas if b == leader_id or (b in wanted and (b in part.isr or (topic, p, b) in online))
        ]
        if new_isr == part.isr:
            return ControllerResult([], current)
        changed = part.changed(isr=new_isr)
        logger.info("%s-%d: ISR is now %s (partition epoch %d)", topic, p, new_isr, changed.partition_epoch)
        return ControllerResult(
            [records.partition(topic, p, changed)],
            AlterPartitionResponse(changed.leader_epoch, changed.partition_epoch, tuple(new_isr)),
        )

    # -- reassignment ---------------------------------------------------------------------

    def reassign(self, topic: str, p: int, target: Any) -> ControllerResult[list[int]]:
        """Start moving a partition to ``target`` (Kafka's AlterPartitionReassignments): the
        replica list becomes target + old, the target is remembered. The answer is the
        brokers whose replicas start now."""
        part = self.require_partition(topic, p)
        check_assignment([target], self._cluster.brokers)
        target = list(target)
        replicas = target + [b for b in part.replicas if b not in target]
        adding = [b for b in target if b not in part.replicas]
        return ControllerResult([records.partition(topic, p, part.changed(replicas=replicas, target=target))], adding)

    def complete_reassignment(
        self, topic: str, p: int, online: Collection[Replica]
    ) -> ControllerResult[ReassignmentDone]:
        """Finish a reassignment whose target replicas are all in the ISR: the replica list
        becomes the target, the ISR keeps its target members, leadership moves to the first
        live in-sync target replica if the leader is outside the target (NO_LEADER if none
        is live: an election follows). No records and no answer while it is not done (or
        there is none)."""
        if not self.has_partition(topic, p):
            return ControllerResult()
        part = self.topics[topic].partitions[p]
        target = part.target
        if target is None or not all(b in part.isr for b in target):
            return ControllerResult()
        removing = [b for b in part.replicas if b not in target]
        isr = [b for b in part.isr if b in target]
        leader, epoch = part.leader, part.leader_epoch
        if leader not in target:
            live = [b for b in target if b in isr and (topic, p, b) in online]
            leader, epoch = (live[0], epoch + 1) if live else (NO_LEADER, epoch)
        done = part.changed(replicas=list(target), leader=leader, leader_epoch=epoch, isr=isr, target=None)
        logger.info("%s-%d: reassignment to %s complete", topic, p, target)
        return ControllerResult([records.partition(topic, p, done)], ReassignmentDone(list(target), removing, leader))


def _new_partition(replicas: list[int]) -> PartitionRegistration:
    """A new partition: every replica in the ISR until it is seen down, no leader yet."""
    return PartitionRegistration(list(replicas), NO_LEADER, -1, list(replicas))
