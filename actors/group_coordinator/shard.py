"""The group coordinator's whole state (Kafka's ``GroupCoordinatorShard``): classic groups,
consumer groups (KIP-848) and offsets together, and the replay of ``__consumer_offsets``.

A group id names one group of one kind at a time: the calls of either protocol are routed
here to the group of that id (a classic member's JoinGroup to a consumer group is served by
the consumer group, a ConsumerGroupHeartbeat to a classic group converts it or is refused,
as Kafka 4 does).

A restarted coordinator rebuilds this from the topic: offset commits and group records in
order, transactional commits pending until the marker that ends them (a marker applies only
the groups of its own partition). A record that cannot be read is skipped and counted, never
applied in part. No Ray, no clock of its own: the injected one is passed on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from actors import internal_records as stored
from actors.clock import Clock
from actors.consumer_group_config import ConsumerGroupSettings
from actors.group_coordinator.consumer_group_manager import ConsumerGroupManager
from actors.group_coordinator.consumer_records import CONSUMER_KEYS, decode_any_key
from actors.group_coordinator.group_metadata_manager import GroupMetadataManager
from actors.group_coordinator.offset_metadata_manager import OffsetMetadataManager
from actors.group_coordinator.records import OFFSET_KEY_VERSION, decode_group, decode_offset
from actors.group_coordinator.results import GroupResult
from actors.protocol import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from actors.protocol_consumer_groups import ConsumerGroupDescription, ConsumerGroupHeartbeatRequest
from actors.types import GroupDescription, TopicPartition
from storage.errors import GroupIdNotFoundError, KafkaError, NonEmptyGroupError, UnknownMemberIdError
from storage.records.control import CONTROL_ABORT, CONTROL_COMMIT
from storage.records.reader import RecordBatch


class Groups:
    """Groups of both kinds by id, as the offset manager finds them (a consumer group first:
    an id names one kind at a time)."""

    def __init__(self, classic: GroupMetadataManager, consumer: ConsumerGroupManager) -> None:
        self._classic = classic
        self._consumer = consumer

    def get(self, group_id: str) -> Any:
        """The group of that id, of either kind."""
        group = self._consumer.get(group_id)
        return group if group is not None else self._classic.get(group_id)

    def get_or_create(self, group_id: str) -> Any:
        """The group, or a new empty classic group (an offset commit creates one, as Kafka)."""
        group = self._consumer.get(group_id)
        return group if group is not None else self._classic.get_or_create(group_id)

    def remove(self, group_id: str) -> None:
        """Forget the group (deleted: its tombstones are durable)."""
        if self._consumer.get(group_id) is not None:
            self._consumer.remove(group_id)
        else:
            self._classic.remove(group_id)


class GroupCoordinatorShard:
    """Classic groups (:attr:`groups`), consumer groups (:attr:`consumer`) and offsets
    (:attr:`offsets`) of every group.

    ``partition_for`` maps a group id to its ``__consumer_offsets`` partition (the topic's
    partition count may change when it is created).
    """

    def __init__(
        self,
        clock: Clock,
        partition_for: Callable[[str], int],
        retention_ms: int,
        initial_rebalance_delay_ms: int = 0,
        consumer_settings: ConsumerGroupSettings | None = None,
    ) -> None:
        self.clock = clock
        self.groups = GroupMetadataManager(clock, initial_rebalance_delay_ms)
        self.consumer = ConsumerGroupManager(clock, self.groups, consumer_settings)
        self.directory = Groups(self.groups, self.consumer)
        self.offsets = OffsetMetadataManager(clock, self.directory, retention_ms, partition_for)

    def __len__(self) -> int:
        return len(self.groups.groups) + len(self.consumer.groups)

    # -- replay ---------------------------------------------------------------------------

    def replay_batch(self, p: int, batch: RecordBatch, first: int, skipped: stored.SkippedRecords) -> int:
        """Apply one batch of partition ``p`` read on load, from offset ``first``; returns how
        many records it held. What cannot be read is skipped (``skipped``)."""
        if batch.is_control:
            if batch.base_offset < first:
                return 0
            try:
                marker = batch.control_record()
            except Exception as exc:  # noqa: BLE001 - an unreadable marker is skipped like any record
                skipped.skip(p, batch.base_offset, exc)
                return 0
            if marker.type in (CONTROL_ABORT, CONTROL_COMMIT):
                self.offsets.end_pending(batch.producer_id, marker.is_commit, partition=p)
            return 0
        apply = functools.partial(self.replay_pending, batch.producer_id) if batch.is_transactional else self.replay
        count = 0
        for record in skipped.records(p, batch, first):
            try:
                apply(record.key, record.value)
            except stored.READ_ERRORS as exc:
                skipped.skip(p, record.offset, exc)
                continue
            count += 1
        return count

    def replay(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one ``__consumer_offsets`` record. A record that is not one the coordinator
        writes raises ValueError/TypeError/KeyError and changes nothing."""
        k = decode_any_key(key)
        if k[0] == OFFSET_KEY_VERSION:
            _, group_id, topic, partition = k
            tp = TopicPartition(topic, partition)
            if value is None:
                if self.directory.get(group_id) is not None:
                    self.offsets.remove(group_id, [tp])
            else:
                self.offsets.apply_commit(group_id, {tp: decode_offset(value)})
            return
        if k[0] in CONSUMER_KEYS:
            self.consumer.replay(k, value)
            return
        group_id = k[1]
        if value is None:
            if self.groups.get(group_id) is not None:
                self.groups.replay(group_id, None)
                self.offsets.drop_if_unused(group_id)
        else:
            # Every field is checked before the group is replaced.
            group = decode_group(group_id, value, self.clock.wall_ms())
            self.consumer.remove(group_id)  # a downgraded group: the classic kind from here on
            self.groups.replay(group_id, group)

    def replay_pending(self, producer_id: int, key: bytes | None, value: bytes | None) -> None:
        """A transactional offset commit read on load: pending until its marker."""
        k = decode_any_key(key)
        if k[0] != OFFSET_KEY_VERSION:
            raise ValueError(f"a transactional batch holds a group record (key {k!r:.60})")
        _, group_id, topic, partition = k
        self.offsets.add_pending(producer_id, group_id, {TopicPartition(topic, partition): decode_offset(value)})

    def loaded(self) -> None:
        """The replay is done: members' sessions count from now."""
        self.groups.start_sessions()
        self.consumer.start_sessions()

    # -- the classic protocol's calls, to a group of either kind -----------------------------

    def join_group(self, request: JoinGroupRequest) -> GroupResult:
        """JoinGroup: a non-empty consumer group serves it as a classic member's; an empty one
        gives way to a classic group, as Kafka's ``classicGroupJoin``."""
        self.groups.validate_join(request)
        group = self.consumer.get(request.group_id)
        if group is not None and group.members:
            return self.consumer.classic_join(group, request)
        out = GroupResult()
        if group is not None:
            self.consumer.delete_empty(request.group_id, out)
        result = self.groups.join_group(request)
        out.merge(result)  # the consumer group's tombstones go first
        out.response = result.response
        return out

    def sync_group(self, request: SyncGroupRequest) -> GroupResult:
        """SyncGroup (an empty consumer group: UNKNOWN_MEMBER_ID)."""
        group = self.consumer.get(request.group_id)
        if group is None:
            return self.groups.sync_group(request)
        if not group.members:
            raise UnknownMemberIdError(f"unknown member {request.member_id!r} of group {request.group_id!r}")
        return self.consumer.classic_sync(group, request)

    def heartbeat(self, request: HeartbeatRequest) -> None:
        """Heartbeat of a classic member, in a group of either kind."""
        group = self.consumer.get(request.group_id)
        if group is None:
            self.groups.heartbeat(request)
        else:
            self.consumer.classic_heartbeat(group, request)

    def leave_group(self, request: LeaveGroupRequest) -> GroupResult:
        """LeaveGroup of a classic member, in a group of either kind."""
        group = self.consumer.get(request.group_id)
        if group is None:
            return self.groups.leave_group(request)
        return self.consumer.classic_leave(group, request)

    # -- KIP-848's calls --------------------------------------------------------------------

    def consumer_group_heartbeat(self, request: ConsumerGroupHeartbeatRequest) -> GroupResult:
        """ConsumerGroupHeartbeat."""
        return self.consumer.heartbeat(request)

    def consumer_group_describe(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe."""
        return self.consumer.describe(group_ids)

    # -- offsets: the group's part ----------------------------------------------------------

    def validate_offset_commit(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        api_version: int | None = None,
    ) -> Callable[[TopicPartition], KafkaError | None] | None:
        """An OffsetCommit's member and generation (or member epoch) checked; None, or a
        check per partition (a consumer group's commit of an earlier epoch)."""
        group = self.consumer.get(group_id)
        if group is None:
            self.groups.validate_offset_commit(group_id, member_id, instance_id, generation_id)
            return None
        return self.consumer.validate_offset_commit(
            group, member_id, instance_id, generation_id, api_version=api_version
        )

    def validate_txn_offset_commit(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> Callable[[TopicPartition], KafkaError | None] | None:
        """A TxnOffsetCommit's member and generation checked (KIP-447)."""
        group = self.consumer.get(group_id)
        if group is None:
            self.groups.validate_txn_offset_commit(group_id, member_id, instance_id, generation_id)
            return None
        return self.consumer.validate_offset_commit(group, member_id, instance_id, generation_id, transactional=True)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        """OffsetFetch v9+'s member and epoch, for a consumer group (classic groups: none, as Kafka)."""
        group = self.consumer.get(group_id)
        if group is not None:
            self.consumer.validate_offset_fetch(group, member_id, member_epoch)

    # -- describing and deleting ------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, state, protocol type, group type) of every group."""
        return sorted(self.groups.list_groups() + self.consumer.list_groups())

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """rayqueue's DescribeGroups over both kinds (a consumer group in the classic shape,
        with ``group_type`` "consumer")."""
        out = []
        for gid in group_ids:
            if self.consumer.get(gid) is not None:
                out.append(self.consumer.describe_as_classic(gid))
            else:
                out.extend(self.groups.describe([gid]))
        return out

    def check_delete_groups(self, group_ids: list[str]) -> dict[str, KafkaError | None]:
        """Kafka's DeleteGroups, decided: per group None (it may go) or the error (unknown,
        or still with members)."""
        out: dict[str, KafkaError | None] = {}
        for gid in group_ids:
            group = self.directory.get(gid)
            if group is None:
                out[gid] = GroupIdNotFoundError(f"group {gid!r} does not exist")
            elif group.members:
                out[gid] = NonEmptyGroupError(f"group {gid!r} has {len(group.members)} members")
            else:
                out[gid] = None
        return out


__all__ = ["GroupCoordinatorShard", "Groups"]
