"""KIP-848's consumer groups as a plain state machine (Kafka's ``GroupMetadataManager``, its
consumer group part).

A member heartbeats (ConsumerGroupHeartbeat) every ``group.consumer.heartbeat.interval.ms``;
each heartbeat does what Kafka's does, in its order:

1. the member is created or updated; when its subscription changed (topic names, a regex, or
   the partitions of the subscribed topics), the **group epoch** goes up;
2. when the group epoch is ahead of the target assignment's, a new **target assignment** is
   computed by the group's server-side assignor (``uniform`` or ``range``), at most once per
   ``group.consumer.assignment.interval.ms`` (changes in between are batched, as Kafka 4.4);
3. the member is **reconciled** one step towards its target (:mod:`.current_assignment`):
   revoke first, then take what its old owners released.

A member that does not heartbeat within ``group.consumer.session.timeout.ms``, or does not
revoke within its rebalance timeout, is fenced (removed, the group epoch bumped). A member
that leaves with epoch -1 is removed; a static member (``group.instance.id``) leaving with
-2 keeps its partitions until its session times out, and a new instance of it takes them
over without a rebalance. Stale epochs are fenced: FENCED_MEMBER_EPOCH, except the previous
epoch with a subset of the current assignment (its last answer was lost).

Every change is a list of ``__consumer_offsets`` records (:mod:`.consumer_records`), applied
to the state the way a restarted coordinator replays them (:meth:`replay`), so the log and
the memory never disagree; the answer waits until they are durable (``GroupResult.durable``).
Timers are soft state, restarted after a load. Classic members inside consumer groups and the
conversions between the two kinds live in :mod:`.consumer_group_classic` (a mixin).

No Ray, no I/O; time comes from the injected clock; the topics from :attr:`image`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import re2

from actors.clock import Clock
from actors.consumer_group_config import ConsumerGroupSettings
from actors.group_coordinator import consumer_records as cr
from actors.group_coordinator.consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    ResolvedRegex,
    TopicMetadata,
    same_partitions,
)
from actors.group_coordinator.consumer_group_classic import ClassicMembers
from actors.group_coordinator.consumer_group_views import ConsumerGroupViews
from actors.group_coordinator.current_assignment import Owned, reconcile
from actors.group_coordinator.group_metadata_manager import GroupMetadataManager
from actors.group_coordinator.metadata_image import EMPTY_IMAGE, MetadataImage
from actors.group_coordinator.records import Record
from actors.group_coordinator.results import GroupResult
from actors.group_coordinator.server_assignors import SERVER_ASSIGNORS, MemberSpec, PartitionAssignorError
from actors.protocol import INT32_MAX, INT32_MIN, int_field
from actors.protocol_consumer_groups import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicAssignment,
)
from storage.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnknownServerError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
)

logger = logging.getLogger(__name__)

# rayqueue's bounds on what one member may subscribe to: the member's record must fit in
# one __consumer_offsets batch (Kafka has none; its requests are bounded by their size only).
MAX_SUBSCRIBED_TOPICS = 10_000
MAX_REGEX_LENGTH = 16_384
_REGEX_CACHE = 1024
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def _new_member_id() -> str:
    return str(uuid.uuid4())


@dataclass(slots=True)
class MemberTimers:
    """A member's deadlines (monotonic seconds): its session; its rebalance timeout while it
    must revoke (``(epoch, deadline)``: fenced if still at that epoch); a classic member's
    join (after REBALANCE_IN_PROGRESS) and sync (after its join) deadlines."""

    session: float
    rebalance: tuple[int, float] | None = None
    join: float | None = None
    sync: float | None = None

    def next(self) -> float:
        """The earliest deadline."""
        due = [self.session]
        if self.rebalance is not None:
            due.append(self.rebalance[1])
        if self.join is not None:
            due.append(self.join)
        if self.sync is not None:
            due.append(self.sync)
        return min(due)


def _owned(partitions: Any) -> dict[str, set[int]] | None:
    """A heartbeat's owned partitions as topic id -> partitions (None: not reported)."""
    if partitions is None:
        return None
    out: dict[str, set[int]] = {}
    try:
        for topic_id, ps in partitions:
            if not isinstance(topic_id, str):
                raise TypeError(topic_id)
            out.setdefault(topic_id, set()).update(int_field("partition", p, 0, INT32_MAX) for p in ps)
    except (TypeError, ValueError):
        raise InvalidRequestError(
            f"topic_partitions must be (topic id, partitions) pairs, not {partitions!r:.60}"
        ) from None
    return out


def _is_subset(owned: Owned | None, assigned: dict[str, dict[int, int]]) -> bool:
    if owned is None:
        return False
    return all(all(p in assigned.get(t, {}) for p in ps) for t, ps in owned.items())


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


class ConsumerGroupManager(ClassicMembers, ConsumerGroupViews):
    """Every consumer group of the coordinator (see the module docstring).

    ``classic`` is the classic groups' manager: a group id names one kind of group at a time,
    and the conversions between them (:class:`ClassicMembers`) move a group from one to the
    other.
    """

    def __init__(
        self,
        clock: Clock,
        classic: GroupMetadataManager,
        settings: ConsumerGroupSettings | None = None,
        new_member_id: Callable[[], str] = _new_member_id,
    ) -> None:
        self._clock = clock
        self.classic = classic
        self.settings = settings or ConsumerGroupSettings()
        self._new_member_id = new_member_id
        self.groups: dict[str, ConsumerGroup] = {}
        self.image: MetadataImage = EMPTY_IMAGE
        self.timers: dict[tuple[str, str], MemberTimers] = {}
        # Soft state: when each group's target was last computed (monotonic seconds).
        self.assigned_at: dict[str, float] = {}
        self._regexes: collections.OrderedDict[str, Any] = collections.OrderedDict()

    # -- lookups ----------------------------------------------------------------------------

    def get(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group, if there is one."""
        return self.groups.get(group_id)

    def remove(self, group_id: str) -> None:
        """Forget a group (deleted; its tombstones are durable)."""
        group = self.groups.pop(group_id, None)
        self.assigned_at.pop(group_id, None)
        if group is not None:
            for member_id in list(group.members):
                self.timers.pop((group_id, member_id), None)

    def _group(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            if self.classic.get(group_id) is not None:
                raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
            raise GroupIdNotFoundError(f"Group {group_id} not found.")
        return group

    # -- ConsumerGroupHeartbeat -------------------------------------------------------------

    def heartbeat(self, request: ConsumerGroupHeartbeatRequest) -> GroupResult:
        """Kafka's ConsumerGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1, -2); the
        response is a ConsumerGroupHeartbeatResponse, errors are raised."""
        self._validate(request)
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request)
        return self._heartbeat(request)

    def _validate(self, r: ConsumerGroupHeartbeatRequest) -> None:
        """Kafka's checks of a heartbeat, in its order, before anything changes."""
        if not self.settings.enabled:
            raise UnsupportedVersionError(
                "The consumer group protocol is not enabled (group.coordinator.rebalance.protocols)."
            )
        for name in ("group_id", "member_id"):
            if not isinstance(getattr(r, name), str):
                raise InvalidRequestError(f"{name} must be a string")
        for name in ("instance_id", "rack_id", "subscribed_topic_regex", "server_assignor"):
            if getattr(r, name) is not None and not isinstance(getattr(r, name), str):
                raise InvalidRequestError(f"{name} must be a string or null")
        int_field("member_epoch", r.member_epoch, INT32_MIN, INT32_MAX)
        int_field("rebalance_timeout_ms", r.rebalance_timeout_ms, -1, INT32_MAX)
        names = r.subscribed_topic_names
        if names is not None:
            if not isinstance(names, tuple | list) or not all(isinstance(n, str) for n in names):
                raise InvalidRequestError("subscribed_topic_names must be a list of names")
            if len(names) > MAX_SUBSCRIBED_TOPICS:
                raise InvalidRequestError(f"a member may subscribe to at most {MAX_SUBSCRIBED_TOPICS} topic names")
        if r.subscribed_topic_regex is not None and len(r.subscribed_topic_regex) > MAX_REGEX_LENGTH:
            raise InvalidRequestError(f"SubscribedTopicRegex is longer than {MAX_REGEX_LENGTH} characters")
        if not r.member_id.strip() and (r.api_version >= 1 or r.member_epoch != JOIN_GROUP_MEMBER_EPOCH):
            # From v1 the member names itself; in v0 only a join may come without an id.
            raise InvalidRequestError("MemberId can't be empty.")
        if not r.group_id.strip():
            raise InvalidRequestError("GroupId can't be empty.")
        if _blank(r.instance_id):
            raise InvalidRequestError("InstanceId can't be empty.")
        if _blank(r.rack_id):
            raise InvalidRequestError("RackId can't be empty.")
        if r.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if r.rebalance_timeout_ms == -1:
                raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
            if r.topic_partitions is None or len(r.topic_partitions) > 0:
                raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
            if r.subscribed_topic_names is None and r.subscribed_topic_regex is None:
                raise InvalidRequestError(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
                )
        elif r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if r.instance_id is None:
                raise InvalidRequestError("InstanceId can't be null.")
        elif r.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise InvalidRequestError("MemberEpoch is invalid.")
        if r.server_assignor is not None and r.server_assignor not in self.settings.assignors:
            raise UnsupportedAssignorError(
                f"ServerAssignor {r.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.settings.assignors)}."
            )

    def _heartbeat(self, r: ConsumerGroupHeartbeatRequest) -> GroupResult:
        out = GroupResult(durable=True)
        create = r.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._group_for_heartbeat(r.group_id, create, out)
        member_id = r.member_id or self._new_member_id()
        self._check_not_full(group, member_id)
        owned = _owned(r.topic_partitions)
        records: list[Record] = []
        replaced: ConsumerGroupMember | None = None
        if r.instance_id is None:
            member = self._dynamic_member(group, member_id, r.member_epoch, owned, create, classic=False)
        else:
            member, replaced = self._static_member(
                group, member_id, r.member_epoch, r.instance_id, owned, create, classic=False, records=records
            )
        regex = r.subscribed_topic_regex if r.subscribed_topic_regex is not None else member.subscribed_topic_regex
        updated = dataclasses.replace(
            member,
            instance_id=r.instance_id if r.instance_id is not None else member.instance_id,
            rack_id=r.rack_id if r.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=r.rebalance_timeout_ms
            if r.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=r.server_assignor if r.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(
                tuple(r.subscribed_topic_names)
                if r.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=regex,
            client_id=r.client_id,
            client_host=r.client_host,
            classic=None,
        )
        target_epoch, target, subscription_changed, resolved = self._update_member(
            group, member, updated, replaced, records
        )
        reconciled = self._reconcile(
            group, updated, target_epoch, target, owned, subscription_changed, resolved, records
        )
        self._commit(group.group_id, records, out)
        self._touch_session(group.group_id, member_id, self.settings.session_timeout_ms)
        full = (
            r.rebalance_timeout_ms != -1
            and (r.subscribed_topic_names is not None or r.subscribed_topic_regex is not None)
            and r.topic_partitions is not None
        )
        assignment = None
        if create or full or not same_partitions(member.assigned, reconciled.assigned):
            assignment = self._topic_assignments(reconciled.assigned)
        out.response = ConsumerGroupHeartbeatResponse(
            member_id, reconciled.member_epoch, self.settings.heartbeat_interval_ms, assignment
        )
        return out

    def _update_member(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        replaced: ConsumerGroupMember | None,
        records: list[Record],
    ) -> tuple[int, Assignment, bool, dict[str, ResolvedRegex]]:
        """Step 1 and 2 of a heartbeat or a classic member's join: the member's records, the
        group epoch, the target assignment. Returns the target epoch, the member's target,
        whether its subscription changed, and the group's resolved regexes after the change."""
        gid = group.group_id
        bump = group.group_epoch == 0
        subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names or (
            updated.subscribed_topic_regex or None
        ) != (member.subscribed_topic_regex or None)
        if updated.metadata() != member.metadata() or updated.member_id not in group.members:
            records.append(cr.member_metadata_record(gid, updated))
        bump |= subscription_changed
        members = dict(group.members)
        if replaced is not None:
            members.pop(replaced.member_id, None)
        members[updated.member_id] = updated
        resolved = self._regex_changes(group, members, records)
        metadata = self._subscription_metadata(group.subscribed_topics_with(members.values(), resolved))
        if metadata != group.subscription_metadata:
            records.append(cr.partition_metadata_record(gid, metadata))
            bump = True
        epoch = group.group_epoch + 1 if bump else group.group_epoch
        if bump:
            records.append(cr.group_epoch_record(gid, epoch))
            logger.info("[GroupId %s] Bumped group epoch to %d.", gid, epoch)
        if epoch > group.assignment_epoch and self._assignment_due(group):
            targets = self._compute_target(group, epoch, members, metadata, resolved, records)
            return epoch, targets.get(updated.member_id, {}), subscription_changed, resolved
        target = group.target_of(updated.member_id, updated.instance_id)
        return group.assignment_epoch, target, subscription_changed, resolved

    def _reconcile(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        target_epoch: int,
        target: Assignment,
        owned: Owned | None,
        subscription_changed: bool,
        resolved: dict[str, ResolvedRegex],
        records: list[Record],
    ) -> ConsumerGroupMember:
        """Step 3: move the member one step towards its target; its current assignment record
        when it moved, and its rebalance timeout while it must revoke."""
        new = member.member_id not in group.members
        if member.is_reconciled_to(target_epoch) and not subscription_changed and not new:
            return member
        topics = group.member_topics_with(member, resolved)
        subscribed_ids = {t.topic_id for n in topics if (t := self.image.topic(n)) is not None}
        reconciled = reconcile(
            member,
            target_epoch,
            target,
            group.current_partition_epoch,
            owned,
            subscribed_ids,
            subscription_changed,
        )
        if reconciled.current() != member.current() or new:
            records.append(cr.current_assignment_record(group.group_id, reconciled))
            if not reconciled.uses_classic_protocol:
                timers = self.timers.get((group.group_id, member.member_id))
                if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
                    deadline = self._clock.monotonic() + max(0, reconciled.rebalance_timeout_ms) / 1000
                    if timers is None:
                        timers = self.timers[(group.group_id, member.member_id)] = MemberTimers(deadline)
                    timers.rebalance = (reconciled.member_epoch, deadline)
                elif timers is not None:
                    timers.rebalance = None
        return reconciled

    # -- members ----------------------------------------------------------------------------

    def _group_for_heartbeat(self, group_id: str, create: bool, out: GroupResult) -> ConsumerGroup:
        """The consumer group of a heartbeat: an empty classic group of that id is replaced, a
        classic group of Kafka clients converted when ``group.consumer.migration.policy``
        allows it, anything else refused (GROUP_ID_NOT_FOUND, as Kafka)."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.classic.get(group_id)
        if classic is not None:
            if not create:
                raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
            if not classic.members:
                self._replace_empty_classic(group_id, out)
                return ConsumerGroup(group_id)
            return self.upgrade(classic, out)
        if not create:
            raise GroupIdNotFoundError(f"Consumer group {group_id} not found.")
        return ConsumerGroup(group_id)

    def _check_not_full(self, group: ConsumerGroup, member_id: str) -> None:
        if len(group.members) >= self.settings.max_size and member_id not in group.members:
            raise GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {self.settings.max_size} members."
            )

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, received: int, owned: Owned | None) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
        if received > member.member_epoch:
            raise FencedMemberEpochError(
                f"The consumer group member has a greater member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin."
            )
        if received < member.member_epoch and (
            received != member.previous_member_epoch or not _is_subset(owned, member.assigned)
        ):
            raise FencedMemberEpochError(
                f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin."
            )

    def _dynamic_member(
        self, group: ConsumerGroup, member_id: str, epoch: int, owned: Owned | None, create: bool, classic: bool
    ) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if not create:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
            logger.info(
                "[GroupId %s] Member %s joins the consumer group using the %s protocol.",
                group.group_id,
                member_id,
                "classic" if classic else "consumer",
            )
            return ConsumerGroupMember(member_id)
        if not classic:
            self._check_epoch(member, epoch, owned)
        return member

    def _static_member(
        self,
        group: ConsumerGroup,
        member_id: str,
        epoch: int,
        instance_id: str,
        owned: Owned | None,
        create: bool,
        classic: bool,
        records: list[Record],
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """The static member, and the member it replaces (a new instance of a departed one)."""
        existing = group.static_member(instance_id)
        if create:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id), None
            if existing.member_id == member_id:
                return existing, None
            if (
                not classic
                and not existing.uses_classic_protocol
                and existing.member_epoch != (LEAVE_GROUP_STATIC_MEMBER_EPOCH)
            ):
                raise UnreleasedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} cannot join the group because the "
                    f"instance id is owned by {existing.member_id} member."
                )
            # The new instance takes over the old one's assignment (epoch 0, as Kafka's).
            new = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            gid = group.group_id
            records.extend(cr.member_tombstones(gid, existing.member_id))
            records.append(cr.member_metadata_record(gid, new))
            records.append(cr.target_member_record(gid, member_id, group.target.get(existing.member_id, {})))
            records.append(cr.current_assignment_record(gid, new))
            self.timers.pop((gid, existing.member_id), None)
            logger.info(
                "[GroupId %s] Static member with instance id %s re-joins the consumer group; member %s replaces %s.",
                gid,
                instance_id,
                member_id,
                existing.member_id,
            )
            return new, existing
        if existing is None:
            raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise FencedInstanceIdError(
                f"Static member {member_id} with instance id {instance_id} was fenced by member {existing.member_id}."
            )
        if not classic:
            self._check_epoch(existing, epoch, owned)
        return existing, None

    # -- leaving and fencing ----------------------------------------------------------------

    def _leave(self, r: ConsumerGroupHeartbeatRequest) -> GroupResult:
        out = GroupResult(durable=True)
        group = self._group(r.group_id)
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise UnknownMemberIdError(f"Member {r.member_id} is not a member of group {r.group_id}.")
            self.fence(group, [member], "left the group", out)
        else:
            member = group.static_member(r.instance_id)
            if member is None:
                raise UnknownMemberIdError(f"Instance id {r.instance_id} is unknown.")
            if member.member_id != r.member_id:
                raise FencedInstanceIdError(
                    f"Static member {r.member_id} with instance id {r.instance_id} was fenced by member "
                    f"{member.member_id}."
                )
            if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # It will be back: its partitions stay its own until its session times out.
                leaving = dataclasses.replace(
                    member,
                    previous_member_epoch=member.member_epoch,
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    pending_revocation={},
                )
                self._commit(group.group_id, [cr.current_assignment_record(group.group_id, leaving)], out)
                timers = self.timers.get((group.group_id, member.member_id))
                if timers is not None:
                    timers.rebalance = None
                logger.info("[GroupId %s] Static member %s left temporarily.", group.group_id, member.member_id)
            else:
                self.fence(group, [member], "left the group", out)
        out.response = ConsumerGroupHeartbeatResponse(r.member_id, r.member_epoch, self.settings.heartbeat_interval_ms)
        return out

    def fence(self, group: ConsumerGroup, members: list[ConsumerGroupMember], reason: str, out: GroupResult) -> None:
        """Remove members (they left, or timed out): their records deleted, the subscription
        metadata and the group epoch updated; or, when only classic members would remain and
        the policy allows it, the group becomes a classic group (online downgrade)."""
        if not members:
            return
        for m in members:
            logger.info("[GroupId %s] Member %s fenced from the group: %s.", group.group_id, m.member_id, reason)
        if self.can_downgrade(group, members):
            self.downgrade(group, members, out)
            return
        gid = group.group_id
        records: list[Record] = []
        for m in members:
            records.extend(cr.member_tombstones(gid, m.member_id))
            self.timers.pop((gid, m.member_id), None)
        gone = {m.member_id for m in members}
        remaining = {mid: m for mid, m in group.members.items() if mid not in gone}
        resolved = self._regex_changes(group, remaining, records)
        metadata = self._subscription_metadata(group.subscribed_topics_with(remaining.values(), resolved))
        if metadata != group.subscription_metadata:
            records.append(cr.partition_metadata_record(gid, metadata))
        records.append(cr.group_epoch_record(gid, group.group_epoch + 1))
        self._commit(gid, records, out)

    # -- target assignment ------------------------------------------------------------------

    def _assignment_due(self, group: ConsumerGroup) -> bool:
        last = self.assigned_at.get(group.group_id, float("-inf"))
        return self._clock.monotonic() >= last + self.settings.assignment_interval_ms / 1000

    def preferred_assignor(self, members: Iterable[ConsumerGroupMember]) -> str:
        """The assignor most members name (ties to the configured order), else the default."""
        counts = collections.Counter(m.server_assignor for m in members if m.server_assignor)
        if not counts:
            return self.settings.default_assignor
        best = max(counts.values())
        order = list(self.settings.assignors)
        named = [a for a, c in counts.items() if c == best]
        return min(named, key=lambda a: order.index(a) if a in order else len(order))

    def _compute_target(
        self,
        group: ConsumerGroup,
        epoch: int,
        members: dict[str, ConsumerGroupMember],
        metadata: dict[str, TopicMetadata],
        resolved: dict[str, ResolvedRegex],
        records: list[Record],
    ) -> dict[str, Assignment]:
        """A new target for ``epoch``: the members' changed targets and the epoch as records."""
        name = self.preferred_assignor(members.values())
        assignor = SERVER_ASSIGNORS.get(name) or SERVER_ASSIGNORS[self.settings.default_assignor]
        ids = {n: t.topic_id for n, t in metadata.items()}
        specs = {}
        for mid, m in members.items():
            topics = group.member_topics_with(m, resolved)
            specs[mid] = MemberSpec(
                frozenset(ids[n] for n in topics if n in ids),
                m.instance_id,
                m.rack_id,
                group.target_of(mid, m.instance_id),
            )
        try:
            targets = assignor.assign(specs, {t.topic_id: t.partitions for t in metadata.values()})
        except PartitionAssignorError as exc:
            raise UnknownServerError(f"Failed to compute a new target assignment for epoch {epoch}: {exc}") from exc
        gid = group.group_id
        for mid in specs:
            new = targets.get(mid, {})
            if new != group.target.get(mid):
                records.append(cr.target_member_record(gid, mid, new))
        records.append(cr.target_epoch_record(gid, epoch))
        self.assigned_at[gid] = self._clock.monotonic()
        logger.info("[GroupId %s] Computed a new target assignment for epoch %d with '%s' assignor.", gid, epoch, name)
        return targets

    # -- regexes and subscribed topics ------------------------------------------------------

    def _compile(self, regex: str) -> Any:
        compiled = self._regexes.get(regex)
        if compiled is None:
            try:
                compiled = re2.compile(regex, _RE2_OPTIONS)
            except re2.error as exc:
                reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
                raise InvalidRegularExpressionError(
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {reason}."
                ) from None
            self._regexes[regex] = compiled
            if len(self._regexes) > _REGEX_CACHE:
                self._regexes.popitem(last=False)
        else:
            self._regexes.move_to_end(regex)
        return compiled

    def resolve(self, regex: str) -> ResolvedRegex:
        """The topics of the image that ``regex`` matches whole (RE2 syntax, as Kafka's RE2J)."""
        compiled = self._compile(regex)
        topics = frozenset(n for n in self.image.user_topics() if compiled.fullmatch(n))
        return ResolvedRegex(topics, self.image.version, self._clock.wall_ms())

    def _regex_changes(
        self, group: ConsumerGroup, members: dict[str, ConsumerGroupMember], records: list[Record]
    ) -> dict[str, ResolvedRegex]:
        """The resolved regexes once ``members`` are the group's: a regex nobody subscribes to
        any more is deleted, a new one resolved now (INVALID_REGULAR_EXPRESSION when it does
        not compile); their records are added."""
        gid = group.group_id
        wanted = {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex}
        resolved = dict(group.resolved_regexes)
        for regex in list(resolved):
            if regex not in wanted:
                del resolved[regex]
                records.append((cr.regex_key(gid, regex), None))
        for regex in sorted(wanted - resolved.keys()):
            resolved[regex] = self.resolve(regex)
            records.append(cr.regex_record(gid, regex, resolved[regex]))
        return resolved

    def _subscription_metadata(self, topics: Iterable[str]) -> dict[str, TopicMetadata]:
        out = {}
        for name in topics:
            t = self.image.topic(name)
            if t is not None:
                out[name] = TopicMetadata(t.topic_id, name, t.partitions)
        return out

    def _topic_assignments(self, partitions: dict[str, Any]) -> tuple[TopicAssignment, ...]:
        """An assignment as the answer carries it; topics no longer in the image are left out."""
        out = []
        for topic_id in sorted(partitions):
            name = self.image.name_of(topic_id)
            if partitions[topic_id] and name is not None:
                out.append(TopicAssignment(topic_id, name, tuple(sorted(partitions[topic_id]))))
        return tuple(out)

    # -- metadata changes and timers --------------------------------------------------------

    def set_image(self, image: MetadataImage) -> GroupResult:
        """New topic metadata: groups whose subscribed topics changed (partitions added, a
        topic created that a regex matches, a topic deleted) bump their epoch, and get a new
        target when it is due."""
        out = GroupResult()
        changed = image.version != self.image.version
        self.image = image
        for group in list(self.groups.values()):
            if group.members:
                self._refresh_group(group, changed, out)
        return out

    def _refresh_group(self, group: ConsumerGroup, rematch: bool, out: GroupResult) -> None:
        gid = group.group_id
        records: list[Record] = []
        resolved = dict(group.resolved_regexes)
        bump = False
        if rematch and resolved:
            for regex, old in group.resolved_regexes.items():
                try:
                    new = self.resolve(regex)
                except InvalidRegularExpressionError:
                    continue  # written by an older version: matches nothing new
                if new.topics != old.topics:
                    bump = True
                resolved[regex] = new
                records.append(cr.regex_record(gid, regex, new))
            group.regex_refreshed_s = self._clock.monotonic()
        metadata = self._subscription_metadata(group.subscribed_topics_with(group.members.values(), resolved))
        if metadata != group.subscription_metadata:
            records.append(cr.partition_metadata_record(gid, metadata))
            bump = True
        if bump:
            epoch = group.group_epoch + 1
            records.append(cr.group_epoch_record(gid, epoch))
            logger.info("[GroupId %s] Subscribed topics changed; bumped group epoch to %d.", gid, epoch)
            self._commit(gid, records, out)
            self._maybe_assign(group, out)

    def _maybe_assign(self, group: ConsumerGroup, out: GroupResult) -> None:
        """A new target for a group whose epoch is ahead of it, when the interval allows."""
        if group.members and group.group_epoch > group.assignment_epoch and self._assignment_due(group):
            records: list[Record] = []
            self._compute_target(
                group,
                group.group_epoch,
                dict(group.members),
                group.subscription_metadata,
                group.resolved_regexes,
                records,
            )
            self._commit(group.group_id, records, out)

    def poll(self) -> GroupResult:
        """Run what is due: members past a deadline are fenced, batched target assignments
        computed, subscribed regexes matched again every ``group.consumer.regex.refresh.interval.ms``."""
        out = GroupResult()
        now = self._clock.monotonic()
        for (gid, mid), timers in list(self.timers.items()):
            group = self.groups.get(gid)
            member = group.members.get(mid) if group is not None else None
            if member is None:
                self.timers.pop((gid, mid), None)
                continue
            reason = None
            if now >= timers.session:
                reason = "its session timed out"
            elif timers.rebalance is not None and now >= timers.rebalance[1]:
                if member.member_epoch == timers.rebalance[0]:
                    reason = f"it did not revoke its partitions within {member.rebalance_timeout_ms} ms"
                else:
                    timers.rebalance = None
            elif timers.join is not None and now >= timers.join:
                reason = "it did not rejoin within its rebalance timeout"
            elif timers.sync is not None and now >= timers.sync:
                reason = "it did not sync within its rebalance timeout"
            if reason is not None and group is not None:
                self.fence(group, [member], reason, out)
        refresh_s = self.settings.regex_refresh_interval_ms / 1000
        for group in list(self.groups.values()):
            self._maybe_assign(group, out)
            if group.members and group.resolved_regexes and now >= group.regex_refreshed_s + refresh_s:
                self._refresh_group(group, True, out)
        return out

    def next_deadline(self) -> float | None:
        """The monotonic time at which :meth:`poll` has something to do (None: nothing)."""
        deadlines = [t.next() for t in self.timers.values()]
        interval = self.settings.assignment_interval_ms / 1000
        refresh_s = self.settings.regex_refresh_interval_ms / 1000
        for group in self.groups.values():
            if group.members and group.group_epoch > group.assignment_epoch:
                deadlines.append(self.assigned_at.get(group.group_id, float("-inf")) + interval)
            if group.members and group.resolved_regexes:
                deadlines.append(group.regex_refreshed_s + refresh_s)
        return min(deadlines, default=None)

    def _touch_session(self, group_id: str, member_id: str, session_ms: int) -> None:
        deadline = self._clock.monotonic() + session_ms / 1000
        timers = self.timers.get((group_id, member_id))
        if timers is None:
            self.timers[(group_id, member_id)] = MemberTimers(deadline)
        else:
            timers.session = deadline

    def start_sessions(self) -> None:
        """After a load: every member's session counts from now, as Kafka's coordinator
        schedules them when it loads a group."""
        for gid, group in self.groups.items():
            for mid, m in group.members.items():
                session = m.classic.session_timeout_ms if m.classic is not None else self.settings.session_timeout_ms
                self._touch_session(gid, mid, session)
        self.assigned_at.clear()

    # -- records ----------------------------------------------------------------------------

    def _commit(self, group_id: str, records: list[Record], out: GroupResult) -> None:
        """Apply ``records`` now, as their replay would, and hand them out to be written."""
        if not records:
            return
        for key, value in records:
            k = cr.decode_any_key(key)
            self.replay(k, value)
            if k[0] == cr.GROUP_EPOCH_KEY and value is not None:
                out.rebalances.append(group_id)  # Kafka's consumer group rebalance: an epoch bump
        out.add(group_id, records)

    def replay(self, key: tuple, value: bytes | None) -> None:
        """Apply one consumer group record (live or read on load). A record that is not one
        raises ValueError/TypeError/KeyError and changes nothing."""
        gid = key[1]
        group = self.groups.get(gid)
        if value is None:
            if group is not None:
                self._replay_tombstone(group, key)
            return
        decoded = cr.decode_value(key, value)  # every field checked before anything changes
        if group is None:
            group = self.groups[gid] = ConsumerGroup(gid)
            # A group id names one kind of group: the classic group it replaces goes.
            if self.classic.get(gid) is not None:
                self.classic.remove(gid)
        cr.apply(group, key, decoded)

    def _replay_tombstone(self, group: ConsumerGroup, key: tuple) -> None:
        if key[0] == cr.GROUP_EPOCH_KEY:
            self.remove(group.group_id)
            return
        if key[0] == cr.MEMBER_METADATA_KEY:
            self.timers.pop((group.group_id, key[2]), None)
        cr.apply_tombstone(group, key)


__all__ = ["MAX_REGEX_LENGTH", "MAX_SUBSCRIBED_TOPICS", "ConsumerGroupManager", "MemberTimers"]
