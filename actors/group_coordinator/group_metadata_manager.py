"""Group membership as a plain state machine (Kafka's ``GroupMetadataManager`` for classic groups).

Every group moves through Kafka's classic states (Empty, PreparingRebalance,
CompletingRebalance, Stable, Dead). A join parks until the group's rebalance completes: all
known members rejoined, or the rebalance timeout (the largest ``max.poll.interval.ms`` of the
members, as in Kafka) removed the laggards. A member that neither heartbeats within
``session.timeout.ms`` nor polls within ``max.poll.interval.ms`` is removed and the group
rebalances; a static member (``group.instance.id``) that restarts takes over its old member,
fencing the old instance.

Assignment is server-side for rayqueue's consumers: when a rebalance completes the group
picks the protocol every member supports (each member votes for its most preferred, as
Kafka's ``selectProtocol``), runs that assignor (``actors.assignors``; a user-supplied
assignor object travels with the join) and every member gets its part in ``sync_group``.
With a cooperative assignor the members keep consuming what they keep; a partition that
moves is handed over in the second rebalance its old owner asks for after revoking it.

Kafka clients (through the gateway) assign on the client, as Kafka's classic protocol has
it: their joins carry opaque protocol metadata, the leader member gets every member's in its
join answer, and the group waits (CompletingRebalance) for the leader's SyncGroup to hand each
member the opaque assignment the leader sent. A group is one kind or the other at a time:
while it has members, a member of the other kind is refused (InconsistentGroupProtocolError,
as Kafka refuses a different protocol type).

Nothing here waits, writes or reads the time itself: calls return a
:class:`~actors.group_coordinator.results.GroupResult` (the answer, parked calls' answers,
records to write), time comes from the injected clock, and :meth:`GroupMetadataManager.poll`
runs what is due at :meth:`GroupMetadataManager.next_deadline`.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from actors.assignors import EAGER, lookup_assignor, protocol_of
from actors.clock import Clock
from actors.group_coordinator.classic_group import PROTOCOL_TYPE, ClassicGroup, ClassicGroupMember
from actors.group_coordinator.records import encode_group, group_key
from actors.group_coordinator.results import GroupResult, Parked, Wait
from actors.names import INTERNAL_TOPICS
from actors.protocol import (
    GroupState,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from actors.types import GroupDescription, JoinGroupResult, MemberDescription, TopicPartition
from storage.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

logger = logging.getLogger(__name__)

# A parked join gives up this long after its rebalance timeout (then the client rejoins).
JOIN_GRACE_MS = 5000


def check_group_id(group_id: Any) -> None:
    """InvalidGroupIdError unless ``group_id`` is a non-empty string."""
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupIdError("group id must be a non-empty string")


def _new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupMetadataManager:
    """Every classic group of the coordinator and their membership (see the module docstring).

    ``initial_rebalance_delay_ms`` is ``group.initial.rebalance.delay.ms``; ``new_member_id``
    names members (``prefix-uuid`` by default, as Kafka).
    """

    def __init__(
        self,
        clock: Clock,
        initial_rebalance_delay_ms: int = 0,
        new_member_id: Callable[[str], str] = _new_member_id,
    ) -> None:
        self._clock = clock
        self._initial_delay_s = initial_rebalance_delay_ms / 1000
        self._new_member_id = new_member_id
        self.groups: dict[str, ClassicGroup] = {}
        self.topic_counts: dict[str, int] = {}  # topic -> partitions, as last learnt from the controller

    # -- groups ---------------------------------------------------------------------------

    def get(self, group_id: str) -> ClassicGroup | None:
        """The group, if there is one."""
        return self.groups.get(group_id)

    def get_or_create(self, group_id: str) -> ClassicGroup:
        """The group, created Empty if there is none (a join or an offset commit creates it)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=self._clock.wall_ms())
        return group

    def remove(self, group_id: str) -> None:
        """Forget a group (deleted, or nothing left of it)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.state = GroupState.DEAD

    def set_topic_counts(self, counts: dict[str, int]) -> None:
        """The partition count of every topic, as the controller has it now."""
        self.topic_counts = dict(counts)

    def replay(self, group_id: str, group: ClassicGroup | None) -> None:
        """A group metadata record read on load (``None``: its tombstone, the members go)."""
        if group is not None:
            self.groups[group_id] = group
            return
        known = self.groups.get(group_id)
        if known is not None:
            known.members.clear()
            known.static.clear()
            known.state = GroupState.EMPTY

    def start_sessions(self) -> None:
        """After a load: every member's session and poll deadlines count from now."""
        now = self._clock.monotonic()
        for group in self.groups.values():
            for m in group.members.values():
                m.touch(now)

    # -- JoinGroup ------------------------------------------------------------------------

    def validate_join(self, request: JoinGroupRequest) -> None:
        """The checks of a JoinGroup that need no group (made before any metadata lookup)."""
        check_group_id(request.group_id)
        if not request.protocols:
            raise InconsistentGroupProtocolError("a member must support at least one assignor")
        if request.metadata is not None and len(request.metadata) != len(request.protocols):
            raise InvalidRequestError("one protocol metadata per protocol is required")

    def needs_metadata(self, request: JoinGroupRequest) -> bool:
        """The join subscribes by pattern or to a topic whose partition count is not known."""
        return request.pattern is not None or any(t not in self.topic_counts for t in request.topics)

    def join_group(self, request: JoinGroupRequest) -> GroupResult:
        """Join (or rejoin) a group (Kafka's JoinGroup). The response is a JoinGroupResult
        at once (KIP-394's member id, a static member's unchanged rejoin) or a
        :class:`Parked` join answered when the rebalance completes."""
        self.validate_join(request)
        group_id, member_id, instance_id = request.group_id, request.member_id, request.group_instance_id
        protocols = list(request.protocols)
        wire = request.metadata is not None
        group = self.get_or_create(group_id)
        if group.members and group.client_assigned != wire:
            kinds = ("rayqueue consumers", "Kafka clients") if wire else ("Kafka clients", "rayqueue consumers")
            raise InconsistentGroupProtocolError(
                f"group {group_id!r} has members that are {kinds[0]}; {kinds[1]} cannot join it until it is empty"
            )
        if group.members and not group.common_protocols(extra=protocols):
            raise InconsistentGroupProtocolError(
                f"no assignor of {protocols} is supported by every member of {group_id!r}"
            )
        out = GroupResult()
        now = self._clock.monotonic()
        if wire and request.require_known_member_id and not member_id and not instance_id:
            # KIP-394: name the member first, so that a client which times out and retries
            # its join does not leave a phantom member behind.
            new_id = self._new_member_id(request.client_id)
            group.pending_ids[new_id] = now + request.session_timeout_ms / 1000
            out.response = JoinGroupResult(-1, new_id, "", "", EAGER, member_id_required=True)
            return out
        if not group.members:
            group.client_assigned = wire
        topics = tuple(sorted(set(request.topics)))
        metadata = dict(zip(protocols, request.metadata, strict=True)) if wire else None
        if instance_id:
            known = group.static.get(instance_id)
            if known and member_id and member_id != known:
                raise FencedInstanceIdError(f"instance {instance_id!r} is now member {known!r}")
            if known and not member_id:
                # A static member restarted: it takes over its old identity and, when
                # nothing it asked for changed, its partitions without a rebalance.
                member_id = self._replace_static_member(group, known, instance_id, out)
                member = group.members[member_id]
                unchanged = (
                    member.protocols == protocols and member.topics == topics and member.pattern == request.pattern
                )
                if wire:
                    # A client-assigning leader must see the members' metadata again.
                    unchanged = unchanged and member.metadata == metadata and group.leader != member_id
                    unchanged = unchanged and group.state == GroupState.STABLE
                if unchanged and group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                    member.client_id = request.client_id
                    member.client_host = request.client_host
                    member.touch(now)
                    self._persist(group, out)
                    out.response = JoinGroupResult(
                        group.generation, member_id, group.protocol, group.leader, group.rebalance_protocol
                    )
                    return out
            elif not known:
                member_id = member_id or self._new_member_id(instance_id)
        elif member_id and member_id not in group.members and group.pending_ids.pop(member_id, None) is None:
            raise UnknownMemberIdError(f"unknown member {member_id!r} of group {group_id!r}")
        if not member_id:
            member_id = self._new_member_id(request.client_id)
        member = group.members.get(member_id)
        if member is None:
            member = ClassicGroupMember(
                member_id,
                instance_id,
                request.client_id,
                request.session_timeout_ms,
                request.rebalance_timeout_ms,
                [],
                topics,
                request.pattern,
            )
            group.add_member(member)
        member.client_id = request.client_id
        member.client_host = request.client_host
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.protocols = protocols
        member.topics = topics
        member.pattern = request.pattern
        member.owned = list(request.owned_partitions or [])
        member.metadata = metadata
        member.touch(now)
        member.awaiting_join = True
        group.assignors.update(request.assignors or {})
        out.response = Parked(
            Wait.JOIN,
            group_id,
            member_id,
            request.rebalance_timeout_ms + JOIN_GRACE_MS,
            f"rebalance of {group_id!r} did not complete in time; rejoin",
        )
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member_id} joined", out)
        self._maybe_complete_join(group, out)
        return out

    # -- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------

    def sync_group(self, request: SyncGroupRequest) -> GroupResult:
        """This member's assignment for ``generation_id`` (Kafka's SyncGroup). A follower of a
        client-assigned group parks until its leader's SyncGroup brings the assignment."""
        group, member = self.member(request.group_id, request.member_id, request.group_instance_id)
        if group.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group.group_id!r} is rebalancing; rejoin")
        group.check_generation(request.generation_id)
        member.touch(self._clock.monotonic())
        out = GroupResult()
        if group.client_assigned and group.state == GroupState.COMPLETING_REBALANCE:
            if request.member_id != group.leader:
                group.awaiting_sync.add(request.member_id)
                out.response = Parked(
                    Wait.SYNC,
                    group.group_id,
                    request.member_id,
                    group.max_rebalance_timeout_ms(),
                    f"the leader of {group.group_id!r} did not assign in time",
                )
                return out
            self._take_assignment(group, request, out)
        out.response = SyncGroupResponse(tuple(member.assignment), member.member_assignment)
        return out

    def heartbeat(self, request: HeartbeatRequest) -> None:
        """Keep the member alive (Kafka's Heartbeat); ``poll_age_ms`` is the time since its
        application last polled. RebalanceInProgressError when the member must rejoin,
        IllegalGenerationError / UnknownMemberIdError when it was fenced out,
        FencedInstanceIdError for a zombie static member."""
        group, member = self.member(request.group_id, request.member_id, request.group_instance_id)
        member.touch(self._clock.monotonic(), request.poll_age_ms)
        if group.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group.group_id!r} is rebalancing; rejoin")
        group.check_generation(request.generation_id)

    def leave_group(self, request: LeaveGroupRequest) -> GroupResult:
        """Leave at once (Kafka's LeaveGroup: the rebalance starts without waiting for the
        session timeout)."""
        group, _ = self.member(request.group_id, request.member_id, request.group_instance_id)
        out = GroupResult()
        self._remove_member(group, request.member_id, "left the group", out)
        return out

    def member(self, group_id: str, member_id: str, instance_id: str | None) -> tuple[ClassicGroup, ClassicGroupMember]:
        """The group and the member, or the error that fences the caller."""
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"unknown member {member_id!r} of group {group_id!r}")
        return group, group.member(member_id, instance_id)

    # -- offset commits: the group's part -------------------------------------------------

    def validate_offset_commit(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> None:
        """Kafka's ``validateOffsetCommit``: generation -1 with no member id is a standalone
        commit, allowed only while the group has no members; otherwise the member of the
        current generation, not while the group completes a rebalance."""
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            if group is not None and group.members:
                raise UnknownMemberIdError(f"group {group_id!r} has members; a standalone commit is refused")
            return
        if group is None:
            raise IllegalGenerationError(f"group {group_id!r} has no generation {generation_id}")
        group, member = self.member(group_id, member_id, instance_id)
        group.check_generation(generation_id)
        if group.state == GroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id!r} is completing a rebalance")
        member.touch(self._clock.monotonic())

    def validate_txn_offset_commit(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> None:
        """KIP-447: a transactional commit with a member id is checked as a plain one, so a
        zombie of an older generation cannot commit."""
        if not member_id:
            return
        group, member = self.member(group_id, member_id, instance_id)
        if generation_id >= 0:
            group.check_generation(generation_id)
        member.touch(self._clock.monotonic())

    # -- timers and metadata changes ------------------------------------------------------

    def poll(self) -> GroupResult:
        """Run what is due: expired KIP-394 ids, members past their session or poll deadline,
        rebalances past their timeout (laggards removed) or past the initial delay."""
        out = GroupResult()
        now = self._clock.monotonic()
        for group in list(self.groups.values()):
            for pending_id, expiry in list(group.pending_ids.items()):
                if now >= expiry:
                    del group.pending_ids[pending_id]
            for mid, m in list(group.members.items()):
                if m.awaiting_join:
                    continue  # waiting in a join: the join call itself is the sign of life
                if now >= m.session_deadline:
                    self._remove_member(group, mid, f"session timed out ({m.session_timeout_ms} ms)", out)
                elif now >= m.poll_deadline:
                    reason = f"did not poll within max.poll.interval.ms ({m.rebalance_timeout_ms} ms)"
                    self._remove_member(group, mid, reason, out)
            if group.state == GroupState.PREPARING_REBALANCE and now >= group.rebalance_deadline:
                # The laggards are named before any goes: removing the last one completes the
                # rebalance, after which no member is in a join any more.
                laggards = [mid for mid, m in group.members.items() if not m.awaiting_join]
                for mid in laggards:
                    self._remove_member(group, mid, "did not rejoin within the rebalance timeout", out)
            self._maybe_complete_join(group, out)
        return out

    def next_deadline(self) -> float | None:
        """The monotonic time at which :meth:`poll` has something to do (None: nothing pending)."""
        now = self._clock.monotonic()
        deadlines: list[float] = []
        for group in self.groups.values():
            deadlines.extend(group.pending_ids.values())
            deadlines.extend(
                min(m.session_deadline, m.poll_deadline) for m in group.members.values() if not m.awaiting_join
            )
            if group.state == GroupState.PREPARING_REBALANCE:
                deadlines.append(group.rebalance_deadline)
                if group.not_before > now:
                    deadlines.append(group.not_before)
        return min(deadlines, default=None)

    def watched_groups(self) -> list[str]:
        """Groups whose subscriptions the coordinator watches for topic changes: stable,
        with members, assigned here (Kafka clients' groups are watched by their leader
        member, as in Kafka's classic protocol)."""
        return [
            g.group_id
            for g in self.groups.values()
            if g.state == GroupState.STABLE and g.members and not g.client_assigned
        ]

    def check_subscriptions(self, group_ids: Iterable[str]) -> GroupResult:
        """Rebalance the stable groups among ``group_ids`` whose subscribed topics changed
        partition count, or whose regex now matches other topics (:attr:`topic_counts` is
        fresh)."""
        out = GroupResult()
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.state != GroupState.STABLE or group.client_assigned:
                continue
            wanted = {t for m in group.members.values() for t in self._resolve(m)}
            now_counts = {t: self.topic_counts[t] for t in wanted if t in self.topic_counts}
            if now_counts != group.snapshot:
                self._prepare_rebalance(group, f"subscribed topics changed: {group.snapshot} -> {now_counts}", out)
        return out

    # -- describing -----------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, state, protocol type, group type) of every classic group."""
        return sorted((g.group_id, str(g.state), PROTOCOL_TYPE, g.type) for g in self.groups.values())

    def describe(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """State, protocol, generation and members with assignments (Kafka's DescribeGroups);
        unknown groups show as Dead."""
        out = []
        for gid in group_ids:
            g = self.groups.get(gid)
            if g is None:
                out.append(GroupDescription(gid, GroupState.DEAD, "", "", -1, "", ()))
                continue
            members = tuple(
                MemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.topics,
                    tuple(m.assignment),
                    (m.metadata or {}).get(g.protocol, b""),
                    m.member_assignment,
                    m.client_host,
                )
                for m in g.members.values()
            )
            out.append(GroupDescription(gid, g.state, PROTOCOL_TYPE, g.protocol, g.generation, g.leader, members))
        return out

    # -- rebalancing ----------------------------------------------------------------------

    def prepare_rebalance(self, group: ClassicGroup, reason: str, out: GroupResult) -> None:
        """Start a rebalance of ``group`` (a group just converted from a consumer group)."""
        self._prepare_rebalance(group, reason, out)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str, out: GroupResult) -> None:
        was_empty = group.state == GroupState.EMPTY
        group.transition_to(GroupState.PREPARING_REBALANCE)
        now = self._clock.monotonic()
        timeout = group.max_rebalance_timeout_ms() / 1000
        group.rebalance_deadline = now + timeout
        group.not_before = now + min(self._initial_delay_s, timeout) if was_empty else 0.0
        for mid in sorted(group.awaiting_sync):
            out.answer(
                Wait.SYNC,
                group.group_id,
                mid,
                RebalanceInProgressError(f"group {group.group_id!r} is rebalancing; rejoin"),
            )
        group.awaiting_sync.clear()
        logger.info("group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation, reason)

    def _maybe_complete_join(self, group: ClassicGroup, out: GroupResult) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or self._clock.monotonic() < group.not_before:
            return
        if group.all_members_joined():
            self._complete_join(group, out)

    def _complete_join(self, group: ClassicGroup, out: GroupResult) -> None:
        """Every member rejoined (or was dropped): next generation, assignment, answers."""
        group.generation += 1
        group.state_timestamp_ms = self._clock.wall_ms()
        out.rebalances.append(group.group_id)
        if not group.members:
            group.transition_to(GroupState.EMPTY)
            group.protocol, group.leader, group.snapshot = "", "", {}
            self._persist(group, out)
            return
        members = group.members
        if group.leader not in members:
            group.leader = next(iter(members))
        if group.client_assigned:
            self._complete_client_join(group, out)
            return
        try:
            protocol = group.select_protocol()
            assignor = lookup_assignor(protocol, group.assignors)
            subs = {mid: self._resolve(m) for mid, m in members.items()}
            counts = {t: self.topic_counts[t] for ts in subs.values() for t in ts if t in self.topic_counts}
            cooperative = protocol_of(assignor) != EAGER
            current = {mid: (m.owned if cooperative else m.assignment) for mid, m in members.items()}
            assignment = assignor.assign(subs, counts, current)
            _check_assignment(assignment, subs, counts)
        except Exception as exc:  # noqa: BLE001 - a bad user assignor must not kill the coordinator
            logger.exception("group %s: assignment failed", group.group_id)
            error = (
                exc if isinstance(exc, KafkaError) else InconsistentGroupProtocolError(f"assignment failed: {exc!r}")
            )
            self._fail_joins(group, error, out)
            return
        group.protocol = protocol
        group.rebalance_protocol = protocol_of(assignor)
        group.snapshot = counts
        group.transition_to(GroupState.STABLE)
        now = self._clock.monotonic()
        for mid, m in members.items():
            m.assignment = sorted(assignment.get(mid, []))
            m.touch(now)
            if m.awaiting_join:
                result = JoinGroupResult(group.generation, mid, protocol, group.leader, group.rebalance_protocol)
                out.answer(Wait.JOIN, group.group_id, mid, result)
            m.awaiting_join = False
        logger.info(
            "group %s: generation %d stable with %d members (%s)",
            group.group_id,
            group.generation,
            len(members),
            protocol,
        )
        self._persist(group, out)

    def _complete_client_join(self, group: ClassicGroup, out: GroupResult) -> None:
        """A rebalance of Kafka clients completed: the leader gets every member's metadata
        for the chosen protocol and will assign in its SyncGroup."""
        try:
            protocol = group.select_protocol()
        except KafkaError as error:
            self._fail_joins(group, error, out)
            return
        group.protocol = protocol
        try:
            group.rebalance_protocol = protocol_of(lookup_assignor(protocol, {}))
        except Exception:  # noqa: BLE001 - an assignor rayqueue does not have: informational only
            group.rebalance_protocol = EAGER
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        members = group.members
        everyone = tuple((mid, m.instance_id, (m.metadata or {}).get(protocol, b"")) for mid, m in members.items())
        now = self._clock.monotonic()
        for mid, m in members.items():
            m.touch(now)
            if m.awaiting_join:
                result = JoinGroupResult(
                    group.generation,
                    mid,
                    protocol,
                    group.leader,
                    group.rebalance_protocol,
                    members=everyone if mid == group.leader else (),
                )
                out.answer(Wait.JOIN, group.group_id, mid, result)
            m.awaiting_join = False
        logger.info(
            "group %s: generation %d joined by %d members; leader %s assigns (%s)",
            group.group_id,
            group.generation,
            len(members),
            group.leader,
            protocol,
        )

    def _take_assignment(self, group: ClassicGroup, request: SyncGroupRequest, out: GroupResult) -> None:
        """The leader member's SyncGroup: every member's opaque assignment; the group is
        stable and the followers waiting in SyncGroup get theirs."""
        assignments = request.assignments or {}
        decoded = request.assigned_partitions or {}
        for mid, m in group.members.items():
            m.member_assignment = bytes(assignments.get(mid, b""))
            m.assignment = sorted(decoded.get(mid, ()))
            m.owned = list(m.assignment)
        group.transition_to(GroupState.STABLE)
        now = self._clock.monotonic()
        for mid in sorted(group.awaiting_sync):
            m = group.members.get(mid)
            if m is not None:
                m.touch(now)
                out.answer(Wait.SYNC, group.group_id, mid, SyncGroupResponse(tuple(m.assignment), m.member_assignment))
        group.awaiting_sync.clear()
        logger.info(
            "group %s: generation %d stable with %d members (%s, assigned by leader %s)",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol,
            group.leader,
        )
        self._persist(group, out)

    def _fail_joins(self, group: ClassicGroup, error: BaseException, out: GroupResult) -> None:
        """A rebalance that cannot complete: every parked JoinGroup gets ``error`` and the
        group goes back to Stable with its previous assignment."""
        for mid, m in group.members.items():
            if m.awaiting_join:
                out.answer(Wait.JOIN, group.group_id, mid, error)
            m.awaiting_join = False
        group.transition_to(GroupState.STABLE)

    def _resolve(self, member: ClassicGroupMember) -> list[str]:
        topics = set(member.topics)
        if member.pattern is not None:
            regex = re.compile(member.pattern)
            topics.update(t for t in self.topic_counts if t not in INTERNAL_TOPICS and regex.fullmatch(t))
        return sorted(topics)

    def _replace_static_member(self, group: ClassicGroup, old_id: str, instance_id: str, out: GroupResult) -> str:
        old = group.members[old_id]
        fenced = f"instance {instance_id!r} rejoined as a new member"
        if old.awaiting_join:
            out.answer(Wait.JOIN, group.group_id, old_id, FencedInstanceIdError(fenced))
        if old_id in group.awaiting_sync:
            out.answer(Wait.SYNC, group.group_id, old_id, FencedInstanceIdError(fenced))
        new_id = self._new_member_id(instance_id)
        group.replace_static_member(old_id, new_id)
        return new_id

    def _remove_member(self, group: ClassicGroup, member_id: str, reason: str, out: GroupResult) -> None:
        member = group.remove_member(member_id)
        if member is None:
            return
        if member.awaiting_join:
            out.answer(
                Wait.JOIN, group.group_id, member_id, UnknownMemberIdError(f"member {member_id} was removed: {reason}")
            )
        logger.info("group %s: member %s removed: %s", group.group_id, member_id, reason)
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member_id} {reason}", out)
        self._maybe_complete_join(group, out)

    def _persist(self, group: ClassicGroup, out: GroupResult) -> None:
        out.records.append((group.group_id, (group_key(group.group_id), encode_group(group))))


def _check_assignment(assignment: dict[str, Any], subs: dict[str, list[str]], counts: dict[str, int]) -> None:
    """Refuse an assignment (from a user assignor, say) that gives a partition two owners."""
    seen: set[TopicPartition] = set()
    for member, tps in assignment.items():
        if member not in subs:
            raise InvalidRequestError(f"assignor returned unknown member {member!r}")
        for tp in tps:
            if tp in seen:
                raise InvalidRequestError(f"assignor gave {tp} to two members")
            if tp.topic not in counts or not 0 <= tp.partition < counts[tp.topic]:
                raise InvalidRequestError(f"assignor returned unknown partition {tp}")
            seen.add(tp)


__all__ = ["JOIN_GRACE_MS", "GroupMetadataManager", "check_group_id"]
