"""Classic members in consumer groups, and groups moving between the two protocols (KIP-848's
online migration, as Kafka 4 serves it).

A mixin of :class:`~actors.group_coordinator.consumer_group_manager.ConsumerGroupManager`:

- a **classic member** (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) of a non-empty consumer
  group is a member like the others, reconciled by the same engine: its JoinGroup returns at
  once with its member epoch as the generation, its SyncGroup hands it its current
  assignment (a ConsumerProtocolAssignment for a Kafka client), and its Heartbeat answers
  REBALANCE_IN_PROGRESS whenever it must rejoin to move on (the group epoch moved, it must
  revoke, or partitions it waited for are free). rayqueue's own classic consumers (their
  subscription spelled out, no protocol metadata) are served the same way, except with a
  regex subscription (INCONSISTENT_GROUP_PROTOCOL: a classic member's regex is resolved by
  its own client in Kafka);
- **upgrade**: the first ConsumerGroupHeartbeat to a classic group converts it (an empty one
  always; a non-empty one when ``group.consumer.migration.policy`` allows it and every member
  can be read), keeping its generation as the group epoch and every member's partitions;
- **downgrade**: when the last member using the consumer protocol leaves and only classic
  members remain (of one kind), the group becomes a classic group again and rebalances.

Whatever cannot be converted is refused with Kafka's error (GROUP_ID_NOT_FOUND "is not a
consumer group").
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from actors.assignors import COOPERATIVE, EAGER, lookup_assignor, protocol_of
from actors.group_coordinator import consumer_records as cr
from actors.group_coordinator.classic_group import ClassicGroup, ClassicGroupMember
from actors.group_coordinator.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from actors.group_coordinator.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    metadata_version,
)
from actors.group_coordinator.records import Record, encode_group, group_key
from actors.group_coordinator.results import GroupResult, Wait
from actors.protocol import (
    GroupState,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from actors.types import JoinGroupResult, TopicPartition
from storage.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

logger = logging.getLogger(__name__)


def _rebalance_protocol(protocol: str) -> str:
    try:
        return protocol_of(lookup_assignor(protocol, {}))
    except Exception:  # noqa: BLE001 - a Kafka client's own assignor: say what its name says
        return COOPERATIVE if "cooperative" in protocol else EAGER


class ClassicMembers:
    """The classic protocol's calls on consumer groups, and the conversions (a mixin)."""

    # Provided by ConsumerGroupManager.
    groups: dict[str, ConsumerGroup]
    classic: Any
    image: Any
    settings: Any
    timers: dict
    _clock: Any

    # -- classic members' calls -------------------------------------------------------------

    def classic_join(self, group: ConsumerGroup, request: JoinGroupRequest) -> GroupResult:
        """A JoinGroup to a non-empty consumer group: answered at once, with the member's
        epoch as the generation once it took its step towards its target."""
        out = GroupResult(durable=True)
        wire = request.metadata is not None
        if request.protocol_type != "consumer" or not request.protocols or (not wire and request.pattern is not None):
            raise InconsistentGroupProtocolError(f"Member {request.member_id}'s protocols are not supported.")
        supported = self._classic_protocols(group)
        if supported is not None and not set(request.protocols) & supported:
            raise InconsistentGroupProtocolError(f"Member {request.member_id}'s protocols are not supported.")
        unknown = not request.member_id
        member_id = request.member_id or self._new_member_id()
        self._check_not_full(group, member_id)
        if request.require_known_member_id and unknown and request.group_instance_id is None:
            return GroupResult(response=JoinGroupResult(-1, member_id, "", "", EAGER, member_id_required=True))
        records: list[Record] = []
        replaced = None
        if request.group_instance_id is None:
            member = self._dynamic_member(group, member_id, -1, {}, True, classic=True)
        else:
            member, replaced = self._static_member(
                group, member_id, -1, request.group_instance_id, {}, unknown, classic=True, records=records
            )
        metadata = tuple(request.metadata) if wire else tuple(b"" for _ in request.protocols)
        topics, owned = tuple(request.topics), tuple(request.owned_partitions or ())
        rack = None
        if wire and metadata:
            try:
                topics, owned, rack = decode_subscription(metadata[0])
            except ValueError:
                pass  # what the gateway read of it stands
        updated = dataclasses.replace(
            member,
            instance_id=request.group_instance_id or member.instance_id,
            rack_id=rack or member.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=topics,
            subscribed_topic_regex=None,
            client_id=request.client_id,
            client_host=request.client_host,
            classic=ClassicMemberMetadata(
                request.session_timeout_ms, tuple(zip(request.protocols, metadata, strict=True))
            ),
        )
        epoch, target, changed, resolved = self._update_member(group, member, updated, replaced, records)
        reconciled = self._reconcile(group, updated, epoch, target, self._ids_of(owned), changed, resolved, records)
        self._commit(group.group_id, records, out)
        protocol = request.protocols[0]
        gid = group.group_id
        if replaced is not None and self.can_downgrade(group, []):
            self.downgrade(group, [], out, rebalance=False)
        else:
            self._touch_session(gid, member_id, request.session_timeout_ms)
            timers = self.timers[(gid, member_id)]
            timers.join = None
            timers.sync = self._clock.monotonic() + max(0, request.rebalance_timeout_ms) / 1000
        out.response = JoinGroupResult(reconciled.member_epoch, member_id, protocol, "", _rebalance_protocol(protocol))
        return out

    def classic_sync(self, group: ConsumerGroup, request: SyncGroupRequest) -> GroupResult:
        """A classic member's SyncGroup: its current assignment."""
        member = self._classic_member(group, request.member_id, request.group_instance_id, request.generation_id)
        assert member.classic is not None
        name = member.classic.protocols[0][0] if member.classic.protocols else ""
        if request.protocol_type is not None and request.protocol_type != "consumer":
            raise InconsistentGroupProtocolError(
                f"The protocol type {request.protocol_type} from member {member.member_id} request is not equal to "
                "the group protocol type consumer."
            )
        if request.protocol_name is not None and request.protocol_name != name:
            raise InconsistentGroupProtocolError(
                f"The protocol name {request.protocol_name} from member {member.member_id} request is not equal to "
                f"the protocol name {name} returned in the join response."
            )
        self._check_rebalance(group, member)
        timers = self.timers.get((group.group_id, member.member_id))
        if timers is not None:
            timers.sync = None
        self._touch_session(group.group_id, member.member_id, member.classic.session_timeout_ms)
        partitions = self._partitions_by_name(member)
        data = b""
        first = member.classic.protocols[0][1] if member.classic.protocols else b""
        if first:  # a Kafka client: the consumer protocol's assignment at its version
            data = encode_assignment(partitions, metadata_version(first))
        return GroupResult(response=SyncGroupResponse(partitions, data))

    def classic_heartbeat(self, group: ConsumerGroup, request: HeartbeatRequest) -> None:
        """A classic member's Heartbeat: REBALANCE_IN_PROGRESS when it must rejoin to move on."""
        member = self._classic_member(group, request.member_id, request.group_instance_id, request.generation_id)
        assert member.classic is not None
        self._touch_session(group.group_id, member.member_id, member.classic.session_timeout_ms)
        if (
            member.member_epoch < group.group_epoch
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (member.state == MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased_partition(member))
        ):
            self._join_deadline(group, member)
            raise RebalanceInProgressError(
                f"A new rebalance is triggered in group {group.group_id} and member {member.member_id} "
                "should rejoin to catch up."
            )

    def classic_leave(self, group: ConsumerGroup, request: LeaveGroupRequest) -> GroupResult:
        """A classic member's LeaveGroup (by member id, or by instance id for a static one)."""
        out = GroupResult(durable=True)
        if request.group_instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise UnknownMemberIdError(f"Member {request.member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(request.group_instance_id)
            if member is None:
                raise UnknownMemberIdError(f"Instance id {request.group_instance_id} is unknown.")
            if request.member_id and request.member_id != member.member_id:
                raise FencedInstanceIdError(
                    f"Static member {request.member_id} with instance id {request.group_instance_id} was fenced by "
                    f"member {member.member_id}."
                )
        if not member.uses_classic_protocol:
            raise UnknownMemberIdError(f"Member {member.member_id} does not use the classic protocol.")
        self.fence(group, [member], "left the group (LeaveGroup)", out)
        return out

    def _classic_member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> ConsumerGroupMember:
        """The classic member a SyncGroup or Heartbeat names, at the generation it names (its
        member epoch), or Kafka's error."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise UnknownMemberIdError(
                    f"Member with instance id {instance_id} is not a member of group {group.group_id}."
                )
            if member.member_id != member_id:
                raise FencedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} was fenced by member {member.member_id}."
                )
        if not member.uses_classic_protocol:
            raise UnknownMemberIdError(f"Member {member.member_id} does not use the classic protocol.")
        if generation_id != member.member_epoch:
            raise IllegalGenerationError(
                f"The request generation id {generation_id} is not equal to the member epoch "
                f"{member.member_epoch} of member {member.member_id}."
            )
        return member

    def _check_rebalance(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            self._join_deadline(group, member)
            raise RebalanceInProgressError(
                f"A new rebalance is triggered in group {group.group_id} and member {member.member_id} "
                "should rejoin to catch up."
            )

    def _join_deadline(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        timers = self.timers.get((group.group_id, member.member_id))
        if timers is not None and timers.join is None:
            timers.join = self._clock.monotonic() + max(0, member.rebalance_timeout_ms) / 1000

    @staticmethod
    def _classic_protocols(group: ConsumerGroup) -> set[str] | None:
        """The protocols every classic member supports (None: the group has no classic member)."""
        sets = [set(m.classic.protocol_names()) for m in group.members.values() if m.classic is not None]
        return set.intersection(*sets) if sets else None

    def _ids_of(self, partitions: tuple[TopicPartition, ...]) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for tp in partitions:
            t = self.image.topic(tp.topic)
            if t is not None:
                out.setdefault(t.topic_id, set()).add(tp.partition)
        return out

    def _partitions_by_name(self, member: ConsumerGroupMember) -> tuple[TopicPartition, ...]:
        return tuple(
            sorted(
                TopicPartition(name, p)
                for topic_id, ps in member.assigned.items()
                if (name := self.image.name_of(topic_id)) is not None
                for p in ps
            )
        )

    # -- empty groups change kind -----------------------------------------------------------

    def _replace_empty_classic(self, group_id: str, out: GroupResult) -> None:
        """An empty classic group gives way to a consumer group (its offsets stay)."""
        out.add(group_id, [(group_key(group_id), None)])
        self.classic.remove(group_id)
        logger.info("[GroupId %s] Empty classic group replaced by a consumer group.", group_id)

    def delete_empty(self, group_id: str, out: GroupResult) -> None:
        """An empty consumer group gives way to a classic group (a JoinGroup came; its offsets stay)."""
        group = self.groups[group_id]
        records = cr.group_tombstones(group_id, list(group.members), list(group.resolved_regexes))
        self._commit(group_id, records, out)
        self.groups.pop(group_id, None)
        logger.info("[GroupId %s] Empty consumer group replaced by a classic group.", group_id)

    # -- upgrade ------------------------------------------------------------------------------

    def upgrade(self, classic: ClassicGroup, out: GroupResult) -> ConsumerGroup:
        """Convert a non-empty classic group into a consumer group (GROUP_ID_NOT_FOUND when it
        may not or cannot be): its generation becomes the group epoch, its members keep their
        partitions, and their parked JoinGroup/SyncGroup calls get REBALANCE_IN_PROGRESS."""
        gid = classic.group_id
        refused = GroupIdNotFoundError(f"Group {gid} is not a consumer group.")
        if not self.settings.upgrade_enabled:
            logger.info("Cannot upgrade classic group %s: the online upgrade is disabled.", gid)
            raise refused
        if len(classic.members) > self.settings.max_size:
            logger.info("Cannot upgrade classic group %s: it has more members than group.consumer.max.size.", gid)
            raise refused
        members = []
        for m in classic.members.values():
            converted = self._converted_member(classic, m)
            if converted is None:
                logger.info("Cannot upgrade classic group %s: member %s cannot be converted.", gid, m.member_id)
                raise refused
            members.append(converted)
        for mid, m in classic.members.items():
            if m.awaiting_join:
                out.answer(Wait.JOIN, gid, mid, RebalanceInProgressError(f"group {gid} is being converted; rejoin"))
                m.awaiting_join = False
        for mid in sorted(classic.awaiting_sync):
            out.answer(Wait.SYNC, gid, mid, RebalanceInProgressError(f"group {gid} is being converted; rejoin"))
        classic.awaiting_sync.clear()
        out.add(gid, [(group_key(gid), None)])
        self.classic.remove(gid)
        epoch = classic.generation
        records: list[Record] = [cr.member_metadata_record(gid, m) for m in members]
        records.append(cr.group_epoch_record(gid, epoch))
        records += [cr.target_member_record(gid, m.member_id, m.assigned_partitions()) for m in members]
        records.append(cr.target_epoch_record(gid, epoch))
        records += [cr.current_assignment_record(gid, m) for m in members]
        self._commit(gid, records, out)
        for m in members:
            assert m.classic is not None
            self._touch_session(gid, m.member_id, m.classic.session_timeout_ms)
        logger.info("[GroupId %s] Classic group of %d members upgraded to a consumer group.", gid, len(members))
        return self.groups[gid]

    def _converted_member(self, classic: ClassicGroup, m: ClassicGroupMember) -> ConsumerGroupMember | None:
        """A classic member as a consumer group member, or None when it cannot be read (a
        subscription that is not the consumer protocol's, a custom assignor's user data, a
        regex subscription of rayqueue's own consumer)."""
        topics, assignment, rack = m.topics, tuple(m.assignment), None
        if classic.client_assigned:
            metadata = (m.metadata or {}).get(classic.protocol)
            if metadata is None:
                return None
            try:
                topics, _, rack = decode_subscription(metadata)
                if m.member_assignment:
                    assignment, user_data = decode_assignment(m.member_assignment)
                    if user_data:
                        return None
            except ValueError:
                return None
            protocols = tuple((p, (m.metadata or {}).get(p, b"")) for p in m.protocols)
        else:
            if m.pattern is not None:
                return None
            protocols = tuple((p, b"") for p in m.protocols)
        epoch = classic.generation
        assigned: dict[str, dict[int, int]] = {}
        for tp in assignment:
            t = self.image.topic(tp.topic)
            if t is not None and tp.partition < t.partitions:
                assigned.setdefault(t.topic_id, {})[tp.partition] = epoch
        return ConsumerGroupMember(
            m.member_id,
            instance_id=m.instance_id,
            rack_id=rack,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=tuple(topics),
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            classic=ClassicMemberMetadata(m.session_timeout_ms, protocols),
            member_epoch=epoch,
            previous_member_epoch=epoch,
            state=MemberState.STABLE,
            assigned=assigned,
        )

    # -- downgrade ----------------------------------------------------------------------------

    def can_downgrade(self, group: ConsumerGroup, leaving: list[ConsumerGroupMember]) -> bool:
        """Only classic members (of one kind, sharing a protocol) would remain, and the policy
        allows it (Kafka's ``validateOnlineDowngrade...``)."""
        gone = {m.member_id for m in leaving}
        remaining = [m for mid, m in group.members.items() if mid not in gone]
        if not remaining or not all(m.classic is not None for m in remaining):
            return False
        if not self.settings.downgrade_enabled:
            logger.info("Cannot downgrade consumer group %s: the online downgrade is disabled.", group.group_id)
            return False
        kinds = {bool(m.classic.protocols and m.classic.protocols[0][1]) for m in remaining if m.classic}
        common = set.intersection(*(set(m.classic.protocol_names()) for m in remaining if m.classic))
        return len(kinds) == 1 and bool(common)

    def downgrade(
        self, group: ConsumerGroup, leaving: list[ConsumerGroupMember], out: GroupResult, rebalance: bool = True
    ) -> None:
        """Turn the group into a classic group of its remaining (classic) members, at its epoch
        as the generation; when a member left, the classic group rebalances."""
        gid = group.group_id
        gone = {m.member_id for m in leaving}
        remaining = [m for mid, m in group.members.items() if mid not in gone]
        wire = bool(remaining[0].classic and remaining[0].classic.protocols[0][1])
        first = remaining[0].classic
        assert first is not None
        common = set.intersection(*(set(m.classic.protocol_names()) for m in remaining if m.classic))
        protocol = next(p for p in first.protocol_names() if p in common)
        classic = ClassicGroup(
            gid,
            state=GroupState.STABLE,
            generation=group.group_epoch,
            protocol=protocol,
            rebalance_protocol=_rebalance_protocol(protocol),
            state_timestamp_ms=self._clock.wall_ms(),
            client_assigned=wire,
        )
        now = self._clock.monotonic()
        for m in remaining:
            assert m.classic is not None
            partitions = list(self._partitions_by_name(m))
            cm = ClassicGroupMember(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.classic.session_timeout_ms,
                m.rebalance_timeout_ms,
                list(m.classic.protocol_names()),
                m.subscribed_topic_names,
                None,
                owned=list(partitions),
                assignment=list(partitions),
            )
            if wire:
                cm.metadata = dict(m.classic.protocols)
                cm.member_assignment = encode_assignment(partitions, metadata_version(m.classic.protocols[0][1]))
            cm.client_host = m.client_host
            cm.touch(now)
            classic.add_member(cm)
        records = cr.group_tombstones(gid, list(group.members), list(group.resolved_regexes))
        self._commit(gid, records, out)
        self.groups.pop(gid, None)
        for mid in list(group.members):
            self.timers.pop((gid, mid), None)
        self.classic.groups[gid] = classic
        out.add(gid, [(group_key(gid), encode_group(classic))])
        logger.info("[GroupId %s] Consumer group downgraded to a classic group of %d members.", gid, len(remaining))
        if rebalance:
            self.classic.prepare_rebalance(classic, f"Downgrade group {gid} from consumer to classic.", out)


__all__ = ["ClassicMembers"]
