"""One consumer group of KIP-848's protocol and its members (Kafka's ``ConsumerGroup`` and
``ConsumerGroupMember``).

Plain data and the rules that belong to one group. Every field that is persisted lives in a
``__consumer_offsets`` record (:mod:`.consumer_records`), and the group changes only by
:meth:`ConsumerGroup.apply`-ing such records, live or on replay, so that a coordinator that
restarts rebuilds exactly the state it had. What is derived (the partition epochs, the static
members, the group's state) is recomputed as the records apply.

- the **group epoch** goes up whenever the group's membership or subscriptions change;
- the **target assignment** (with its assignment epoch) is what the server-side assignor
  computed for that epoch; members converge to it one heartbeat at a time;
- each member has its **member epoch**, its current assignment (each partition with the
  epoch it was assigned at, as Kafka 4.4's commit validation wants), and the partitions it
  must still revoke; a partition has one owner at a time: the **partition epochs** map each
  owned partition to its owner's epoch, and a partition pending revocation stays owned until
  its old owner stops reporting it.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from actors.types import TopicPartition

logger = logging.getLogger(__name__)

GROUP_TYPE = "consumer"
PROTOCOL_TYPE = "consumer"
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# topic id -> partitions (a target assignment)
Assignment = dict[str, frozenset[int]]
# topic id -> partition -> the epoch it was assigned at (a member's current assignment)
EpochPartitions = dict[str, dict[int, int]]


class MemberState(enum.IntEnum):
    """Where a member stands in its reconciliation (Kafka's ``MemberState``, its record values)."""

    STABLE = 0  # reconciled to its target at the target epoch
    UNREVOKED_PARTITIONS = 1  # must revoke partitions before it may move to the next epoch
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for partitions others still own
    UNKNOWN = 127  # written by a newer version: the member is fenced and rejoins


class ConsumerGroupState(enum.StrEnum):
    """A consumer group's state as ListGroups and ConsumerGroupDescribe show it."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol inside a consumer group: its session timeout
    and its protocols (name, opaque subscription metadata), in its order of preference."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    def protocol_names(self) -> tuple[str, ...]:
        """The protocol names, most preferred first."""
        return tuple(name for name, _ in self.protocols)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A subscribed topic as the group last assigned it (Kafka's subscription metadata)."""

    topic_id: str
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """The topics a subscribed regex matched, as of image ``version`` and wall time ``timestamp``."""

    topics: frozenset[str]
    version: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """A member: its subscription (member metadata record) and its current assignment
    (current member assignment record). Replaced, never changed in place."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: EpochPartitions = field(default_factory=dict)
    pending_revocation: EpochPartitions = field(default_factory=dict)

    @property
    def uses_classic_protocol(self) -> bool:
        """The member joined with JoinGroup (a classic client in a consumer group)."""
        return self.classic is not None

    def metadata(self) -> tuple:
        """What the member metadata record holds (compared to decide whether to write one)."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        )

    def current(self) -> tuple:
        """What the current assignment record holds."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned, self.pending_revocation)

    def with_metadata(self, other: ConsumerGroupMember) -> ConsumerGroupMember:
        """This member with ``other``'s subscription fields."""
        return dataclasses.replace(
            self,
            instance_id=other.instance_id,
            rack_id=other.rack_id,
            client_id=other.client_id,
            client_host=other.client_host,
            subscribed_topic_names=other.subscribed_topic_names,
            subscribed_topic_regex=other.subscribed_topic_regex,
            rebalance_timeout_ms=other.rebalance_timeout_ms,
            server_assignor=other.server_assignor,
            classic=other.classic,
        )

    def with_current(self, other: ConsumerGroupMember) -> ConsumerGroupMember:
        """This member with ``other``'s current assignment fields."""
        return dataclasses.replace(
            self,
            member_epoch=other.member_epoch,
            previous_member_epoch=other.previous_member_epoch,
            state=other.state,
            assigned=other.assigned,
            pending_revocation=other.pending_revocation,
        )

    def is_reconciled_to(self, epoch: int) -> bool:
        """Stable at ``epoch``."""
        return self.state == MemberState.STABLE and self.member_epoch == epoch

    def assigned_partitions(self) -> Assignment:
        """The current assignment without epochs."""
        return {t: frozenset(ps) for t, ps in self.assigned.items()}

    def assignment_epoch(self, topic_id: str, partition: int) -> int | None:
        """The epoch ``partition`` was assigned at, whether still held or pending revocation;
        None when the member has no such partition."""
        epoch = self.assigned.get(topic_id, {}).get(partition)
        if epoch is None:
            epoch = self.pending_revocation.get(topic_id, {}).get(partition)
        return epoch


def assignment_of(partitions: EpochPartitions) -> Assignment:
    """An assignment without its epochs."""
    return {t: frozenset(ps) for t, ps in partitions.items() if ps}


def same_partitions(a: EpochPartitions, b: EpochPartitions) -> bool:
    """Whether two current assignments hold the same partitions (whatever their epochs)."""
    return assignment_of(a) == assignment_of(b)


class ConsumerGroup:
    """A consumer group (see the module docstring). Offsets are the offset manager's, and the
    timers (session, rebalance, join and sync deadlines) the group manager's."""

    type = GROUP_TYPE
    protocol_type = PROTOCOL_TYPE

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        self.partition_epochs: dict[str, dict[int, int]] = {}
        # The offset manager's expiry starts from the later of this and a commit (a consumer
        # group's offsets expire by their commit time, as Kafka's).
        self.state_timestamp_ms = -1
        # Soft state: when the regexes were last matched (monotonic seconds) and the image
        # version they were matched against.
        self.regex_refreshed_s = float("-inf")

    def __repr__(self) -> str:
        return f"ConsumerGroup({self.group_id!r}, epoch={self.group_epoch}, members={len(self.members)})"

    # -- derived state ----------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        """Empty, Assigning (a new target is due), Reconciling (members converging) or Stable."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        """No members."""
        return not self.members

    def num_classic_members(self) -> int:
        """Members that speak the classic protocol."""
        return sum(1 for m in self.members.values() if m.uses_classic_protocol)

    def current_partition_epoch(self, topic_id: str, partition: int) -> int:
        """The epoch of the partition's owner, or -1 when nobody owns it."""
        return self.partition_epochs.get(topic_id, {}).get(partition, -1)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        """The member holding ``instance_id``, if any."""
        if instance_id is None:
            return None
        member_id = self.static.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def target_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        """A member's target (a static member taking over an instance gets its predecessor's)."""
        if member_id in self.target or instance_id is None:
            return self.target.get(member_id, {})
        previous = self.static.get(instance_id)
        return self.target.get(previous, {}) if previous is not None else {}

    def member_topics(self, member: ConsumerGroupMember) -> set[str]:
        """The topic names a member subscribes to: its names and its regex's resolved topics."""
        return self.member_topics_with(member, self.resolved_regexes)

    @staticmethod
    def member_topics_with(member: ConsumerGroupMember, resolved: Mapping[str, ResolvedRegex]) -> set[str]:
        """:meth:`member_topics` with the given resolved regexes."""
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            found = resolved.get(member.subscribed_topic_regex)
            if found is not None:
                topics.update(found.topics)
        return topics

    def subscribed_topics(self) -> set[str]:
        """Every topic name a member subscribes to (by name or through a resolved regex)."""
        return self.subscribed_topics_with(self.members.values(), self.resolved_regexes)

    def subscribed_topics_with(
        self, members: Iterable[ConsumerGroupMember], resolved: Mapping[str, ResolvedRegex]
    ) -> set[str]:
        """The topics ``members`` subscribe to, with the given resolved regexes."""
        topics: set[str] = set()
        for m in members:
            topics.update(self.member_topics_with(m, resolved))
        return topics

    def topic_names(self) -> dict[str, str]:
        """Topic id -> name of the subscribed topics."""
        return {t.topic_id: name for name, t in self.subscription_metadata.items()}

    def assigned_partitions(self) -> set[TopicPartition]:
        """Every partition a member holds, by name (the lag of a group covers them)."""
        names = self.topic_names()
        return {
            TopicPartition(names[t], p)
            for m in self.members.values()
            for t, ps in m.assigned.items()
            if t in names
            for p in ps
        }

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """The member's target has a partition another member still owns."""
        if member.state != MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, partitions in self.target.get(member.member_id, {}).items():
            held = member.assigned.get(topic_id, {})
            if any(p not in held and self.current_partition_epoch(topic_id, p) != -1 for p in partitions):
                return True
        return False

    # -- changes (only through records) -----------------------------------------------------

    def put_member(self, member: ConsumerGroupMember) -> None:
        """Add or replace a member, keeping the static members and partition epochs right."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        self._own(member)
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id

    def drop_member(self, member_id: str) -> ConsumerGroupMember | None:
        """Remove a member (its partitions become free)."""
        old = self.members.pop(member_id, None)
        if old is None:
            return None
        self._release(old)
        if old.instance_id is not None and self.static.get(old.instance_id) == member_id:
            del self.static[old.instance_id]
        return old

    def _own(self, member: ConsumerGroupMember) -> None:
        for partitions in (member.assigned, member.pending_revocation):
            for topic_id, ps in partitions.items():
                epochs = self.partition_epochs.setdefault(topic_id, {})
                for p in ps:
                    previous = epochs.get(p)
                    if previous is not None and previous != member.member_epoch:
                        # Two owners at once is a coordinator bug or a damaged log; the newest
                        # record wins and the conflict is logged.
                        logger.error(
                            "group %s: partition %s-%d owned at epoch %d is set to epoch %d by member %s",
                            self.group_id,
                            topic_id,
                            p,
                            previous,
                            member.member_epoch,
                            member.member_id,
                        )
                    epochs[p] = member.member_epoch

    def _release(self, member: ConsumerGroupMember) -> None:
        for partitions in (member.assigned, member.pending_revocation):
            for topic_id, ps in partitions.items():
                epochs = self.partition_epochs.get(topic_id)
                if epochs is None:
                    continue
                for p in ps:
                    if epochs.get(p) == member.member_epoch:
                        del epochs[p]
                if not epochs:
                    del self.partition_epochs[topic_id]


__all__ = [
    "GROUP_TYPE",
    "JOIN_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "PROTOCOL_TYPE",
    "Assignment",
    "ClassicMemberMetadata",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "EpochPartitions",
    "MemberState",
    "ResolvedRegex",
    "TopicMetadata",
    "assignment_of",
    "same_partitions",
]
