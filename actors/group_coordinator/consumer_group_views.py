"""What is read of KIP-848's consumer groups rather than changed: ListGroups, ConsumerGroupDescribe
and DescribeGroups' view of them, and the checks an offset commit or fetch of a consumer
group's member passes (Kafka 4.4's ``validateOffsetCommit`` / ``validateOffsetFetch``).

A mixin of :class:`~actors.group_coordinator.consumer_group_manager.ConsumerGroupManager`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from actors.group_coordinator.consumer_group import ConsumerGroup
from actors.protocol_consumer_groups import ConsumerGroupDescription, ConsumerGroupMemberDescription, TopicAssignment
from actors.types import GroupDescription, MemberDescription, TopicPartition
from storage.errors import (
    IllegalGenerationError,
    KafkaError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)


class ConsumerGroupViews:
    """Listing, describing and offset checks of consumer groups (a mixin)."""

    # Provided by ConsumerGroupManager.
    groups: dict[str, ConsumerGroup]
    image: Any
    _group: Callable[[str], ConsumerGroup]
    preferred_assignor: Callable[..., str]
    _topic_assignments: Callable[..., tuple[TopicAssignment, ...]]

    # -- describing -------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, state, protocol type, group type) of every consumer group."""
        return sorted((g.group_id, str(g.state), g.protocol_type, g.type) for g in self.groups.values())

    def describe(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        """Kafka's ConsumerGroupDescribe: a group that is not a consumer group is its error."""
        out = []
        for gid in group_ids:
            try:
                group = self._group(gid)
            except KafkaError as exc:
                out.append(ConsumerGroupDescription(gid, error=exc))
                continue
            members = tuple(
                ConsumerGroupMemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.rack_id,
                    m.member_epoch,
                    m.client_id,
                    m.client_host,
                    m.subscribed_topic_names,
                    m.subscribed_topic_regex or None,
                    self._topic_assignments(m.assigned),
                    self._topic_assignments(group.target.get(m.member_id, {})),
                    0 if m.uses_classic_protocol else 1,
                )
                for m in group.members.values()
            )
            out.append(
                ConsumerGroupDescription(
                    gid,
                    str(group.state),
                    group.group_epoch,
                    group.assignment_epoch,
                    self.preferred_assignor(group.members.values()),
                    members,
                )
            )
        return out

    def describe_as_classic(self, group_id: str) -> GroupDescription:
        """A consumer group in the shape of rayqueue's DescribeGroups answer (its epoch as the
        generation, its assignor as the protocol), for ``rayqueue groups describe``."""
        group = self._group(group_id)
        names = self.image
        members = tuple(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                tuple(sorted(group.member_topics(m))),
                tuple(
                    sorted(
                        TopicPartition(name, p)
                        for t, ps in m.assigned.items()
                        if (name := names.name_of(t)) is not None
                        for p in ps
                    )
                ),
                client_host=m.client_host,
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id,
            str(group.state),
            group.protocol_type,
            self.preferred_assignor(group.members.values()),
            group.group_epoch,
            "",
            members,
            group_type=group.type,
        )

    # -- offsets: the group's part ----------------------------------------------------------

    def validate_offset_commit(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        epoch: int,
        transactional: bool = False,
        api_version: int | None = None,
    ) -> Callable[[TopicPartition], KafkaError | None] | None:
        """Kafka 4.4's ``validateOffsetCommit`` of a consumer group. Raises what refuses the
        whole commit; returns None when every partition may be committed, or a check per
        partition (a commit of an older epoch goes through only for partitions the member
        was assigned at or before that epoch)."""
        if epoch < 0 and not group.members:
            return None
        if transactional and epoch == -1 and not member_id and instance_id is None:
            return None
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        if not transactional and not member.uses_classic_protocol and api_version is not None and api_version < 9:
            raise UnsupportedVersionError(
                "OffsetCommit version 9 or above must be used by members using the consumer group protocol"
            )
        if epoch == member.member_epoch:
            return None
        stale = IllegalGenerationError if member.uses_classic_protocol else StaleMemberEpochError
        what = "generation id" if member.uses_classic_protocol else "member epoch"
        if epoch > member.member_epoch:
            raise stale(f"Received {what} {epoch} is newer than current member epoch {member.member_epoch}.")
        ids = {n: t.topic_id for n, t in group.subscription_metadata.items()}

        def check(tp: TopicPartition) -> KafkaError | None:
            topic_id = ids.get(tp.topic) or (t.topic_id if (t := self.image.topic(tp.topic)) else None)
            assigned_at = member.assignment_epoch(topic_id, tp.partition) if topic_id else None
            if assigned_at is None:
                return stale(f"Partition {tp.topic}-{tp.partition} is not assigned or pending revocation for member.")
            if epoch < assigned_at:
                return stale(
                    f"Received {what} {epoch} is older than assignment epoch {assigned_at} for partition "
                    f"{tp.topic}-{tp.partition}."
                )
            return None

        return check

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None, epoch: int) -> None:
        """Kafka's ``validateOffsetFetch`` of a consumer group (OffsetFetch v9+)."""
        if member_id is None and epoch < 0:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        if epoch != member.member_epoch:
            if member.uses_classic_protocol:
                raise IllegalGenerationError(
                    f"The received generation id {epoch} does not match the expected member epoch "
                    f"{member.member_epoch}."
                )
            raise StaleMemberEpochError(
                f"The received member epoch {epoch} does not match the expected member epoch {member.member_epoch}."
            )


__all__ = ["ConsumerGroupViews"]
