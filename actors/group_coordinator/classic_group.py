"""One classic consumer group and its members (Kafka's ``ClassicGroup`` and ``ClassicGroupMember``).

Plain data with the rules that belong to one group: which state may follow which (Kafka's
``ClassicGroupState`` valid previous states), which protocol every member supports and which
one wins the vote, and the member lookups that fence zombies. No clock is read here: the
methods that set deadlines take the time from their caller (the group metadata manager,
which has the injected clock), and nothing here imports Ray or asyncio.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from actors.assignors import EAGER
from actors.protocol import GroupState
from actors.types import TopicPartition
from storage.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    UnknownMemberIdError,
)

PROTOCOL_TYPE = "consumer"
GROUP_TYPE = "classic"  # Kafka's GroupType of a group of this kind (ListGroups v5)

# Kafka's ClassicGroupState.validPreviousStates. rayqueue's server-side assignment goes from
# PreparingRebalance straight to Stable (Kafka's client-side one passes CompletingRebalance,
# as rayqueue's groups of Kafka clients do), and a rebalance that cannot assign goes back to
# Stable with the previous assignment.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupStateError(RuntimeError):
    """A transition Kafka's group state machine does not have (a coordinator bug, never a client's)."""


@dataclass
class ClassicGroupMember:
    """A member of a classic group: its subscription, its protocols, its assignment and its
    deadlines (monotonic seconds)."""

    member_id: str
    instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[str]
    topics: tuple[str, ...]
    pattern: str | None
    owned: list[TopicPartition] = field(default_factory=list)
    assignment: list[TopicPartition] = field(default_factory=list)
    session_deadline: float = 0.0
    poll_deadline: float = 0.0
    # In a JoinGroup of the current rebalance: the join itself is its sign of life.
    awaiting_join: bool = False
    metadata: dict[str, bytes] | None = None  # a client-assigning member's, by protocol
    member_assignment: bytes = b""  # the leader's opaque assignment for it
    client_host: str = ""  # a Kafka client's "/<address>", as DescribeGroups shows it

    def touch(self, now: float, poll_age_ms: int = 0) -> None:
        """A sign of life at monotonic time ``now``; ``poll_age_ms`` is how long ago its
        application last polled (``max.poll.interval.ms`` counts from then)."""
        self.session_deadline = now + self.session_timeout_ms / 1000
        self.poll_deadline = now + max(0, self.rebalance_timeout_ms - poll_age_ms) / 1000


@dataclass
class ClassicGroup:
    """A classic group: state, generation, protocol, leader, members and static members."""

    type: ClassVar[str] = GROUP_TYPE
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol: str = ""
    rebalance_protocol: str = EAGER
    leader: str = ""
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    assignors: dict[str, Any] = field(default_factory=dict)  # user-supplied, by name
    snapshot: dict[str, int] = field(default_factory=dict)  # topic -> partitions of the current assignment
    state_timestamp_ms: int = -1  # wall time of the last generation (offset expiry counts from it)
    rebalance_deadline: float = 0.0
    not_before: float = 0.0  # group.initial.rebalance.delay.ms for a group that was empty
    client_assigned: bool = False  # its members are Kafka clients: the leader member assigns
    awaiting_sync: set[str] = field(default_factory=set)  # followers whose SyncGroup waits for the leader's
    pending_ids: dict[str, float] = field(default_factory=dict)  # KIP-394 ids handed out -> expiry

    def transition_to(self, state: GroupState) -> None:
        """Move to ``state``; IllegalGroupStateError when Kafka's state machine has no such step."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalGroupStateError(f"group {self.group_id!r} cannot go from {self.state} to {state}")
        self.state = state

    def add_member(self, member: ClassicGroupMember) -> None:
        """A new member (the first one leads)."""
        self.members[member.member_id] = member
        if member.instance_id:
            self.static[member.instance_id] = member.member_id
        if not self.leader:
            self.leader = member.member_id

    def remove_member(self, member_id: str) -> ClassicGroupMember | None:
        """Drop a member (and its static identity if it is still the instance's). A SyncGroup
        it has parked is answered by the rebalance its removal starts."""
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        return member

    def replace_static_member(self, old_id: str, new_id: str) -> ClassicGroupMember:
        """A static member restarted: its member (assignment and all) goes on under ``new_id``;
        the old id is fenced from now on."""
        member = self.members.pop(old_id)
        self.awaiting_sync.discard(old_id)
        member.member_id = new_id
        member.awaiting_join = False
        self.members[new_id] = member
        assert member.instance_id is not None
        self.static[member.instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        return member

    def member(self, member_id: str, instance_id: str | None) -> ClassicGroupMember:
        """The member, if it is one: FencedInstanceIdError for a static member's older
        instance, UnknownMemberIdError for anyone else."""
        if instance_id:
            known = self.static.get(instance_id)
            if known is not None and known != member_id:
                raise FencedInstanceIdError(
                    f"instance {instance_id!r} is now member {known!r}; {member_id!r} is fenced"
                )
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"unknown member {member_id!r} of group {self.group_id!r}")
        return member

    def check_generation(self, generation_id: int) -> None:
        """IllegalGenerationError unless ``generation_id`` is the current generation."""
        if generation_id != self.generation:
            raise IllegalGenerationError(
                f"generation {generation_id} of {self.group_id!r} is not the current {self.generation}"
            )

    def common_protocols(self, extra: list[str] | tuple[str, ...] | None = None) -> list[str]:
        """The protocols every member (and ``extra``, a joining member's) supports, in the
        first member's order of preference."""
        lists = [m.protocols for m in self.members.values()] + ([list(extra)] if extra else [])
        if not lists:
            return []
        common = set(lists[0]).intersection(*lists[1:])
        return [p for p in lists[0] if p in common]

    def select_protocol(self) -> str:
        """Kafka's ``selectProtocol``: every member votes for its most preferred protocol that
        all support; the most votes win, ties to the earliest in the first member's order."""
        candidates = self.common_protocols()
        if not candidates:
            raise InconsistentGroupProtocolError(f"members of {self.group_id!r} share no assignor")
        votes = Counter(next(p for p in m.protocols if p in candidates) for m in self.members.values())
        best = max(votes.values())
        return next(p for p in candidates if votes.get(p) == best)

    def all_members_joined(self) -> bool:
        """Every member is in a JoinGroup of this rebalance."""
        return all(m.awaiting_join for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members (the rebalance waits this long)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str]:
        """The topics a member subscribes to by name or holds partitions of."""
        topics = {t for m in self.members.values() for t in m.topics}
        topics.update(tp.topic for m in self.members.values() for tp in m.assignment)
        return topics

    def assigned_partitions(self) -> set[TopicPartition]:
        """Every partition a member is assigned (the lag of a group covers them)."""
        return {tp for m in self.members.values() for tp in m.assignment}


__all__ = [
    "GROUP_TYPE",
    "PROTOCOL_TYPE",
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "ClassicGroupMember",
    "IllegalGroupStateError",
]
