"""The group coordinator's whole state (Kafka's ``GroupCoordinatorShard``): membership and
offsets together, and the replay of ``__consumer_offsets`` into them.

A restarted coordinator rebuilds this from the topic: offset commits and group metadata
records in order, transactional commits pending until the marker that ends them (a marker
applies only the groups of its own partition). A record that cannot be read is skipped and
counted, never applied in part. No Ray, no clock of its own: the injected one is passed on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from actors import internal_records as stored
from actors.clock import Clock
from actors.group_coordinator.group_metadata_manager import GroupMetadataManager
from actors.group_coordinator.offset_metadata_manager import OffsetMetadataManager
from actors.group_coordinator.records import OFFSET_KEY_VERSION, decode_group, decode_key, decode_offset
from actors.types import TopicPartition
from storage.errors import GroupIdNotFoundError, KafkaError, NonEmptyGroupError
from storage.records.control import CONTROL_ABORT, CONTROL_COMMIT
from storage.records.reader import RecordBatch


class GroupCoordinatorShard:
    """Membership (:attr:`groups`) and offsets (:attr:`offsets`) of every group.

    ``partition_for`` maps a group id to its ``__consumer_offsets`` partition (the topic's
    partition count may change when it is created).
    """

    def __init__(
        self,
        clock: Clock,
        partition_for: Callable[[str], int],
        retention_ms: int,
        initial_rebalance_delay_ms: int = 0,
    ) -> None:
        self.clock = clock
        self.groups = GroupMetadataManager(clock, initial_rebalance_delay_ms)
        self.offsets = OffsetMetadataManager(clock, self.groups, retention_ms, partition_for)

    def __len__(self) -> int:
        return len(self.groups.groups)

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
        k = decode_key(key)
        if k[0] == OFFSET_KEY_VERSION:
            _, group_id, topic, partition = k
            tp = TopicPartition(topic, partition)
            if value is None:
                if self.groups.get(group_id) is not None:
                    self.offsets.remove(group_id, [tp])
            else:
                self.offsets.apply_commit(group_id, {tp: decode_offset(value)})
            return
        group_id = k[1]
        if value is None:
            if self.groups.get(group_id) is not None:
                self.groups.replay(group_id, None)
                self.offsets.drop_if_unused(group_id)
        else:
            # Every field is checked before the group is replaced.
            self.groups.replay(group_id, decode_group(group_id, value, self.clock.wall_ms()))

    def replay_pending(self, producer_id: int, key: bytes | None, value: bytes | None) -> None:
        """A transactional offset commit read on load: pending until its marker."""
        k = decode_key(key)
        if k[0] != OFFSET_KEY_VERSION:
            raise ValueError(f"a transactional batch holds a group record (key {k!r:.60})")
        _, group_id, topic, partition = k
        self.offsets.add_pending(producer_id, group_id, {TopicPartition(topic, partition): decode_offset(value)})

    def loaded(self) -> None:
        """The replay is done: members' sessions count from now."""
        self.groups.start_sessions()

    # -- across both managers -------------------------------------------------------------

    def check_delete_groups(self, group_ids: list[str]) -> dict[str, KafkaError | None]:
        """Kafka's DeleteGroups, decided: per group None (it may go) or the error (unknown,
        or still with members)."""
        out: dict[str, KafkaError | None] = {}
        for gid in group_ids:
            group = self.groups.get(gid)
            if group is None:
                out[gid] = GroupIdNotFoundError(f"group {gid!r} does not exist")
            elif group.members:
                out[gid] = NonEmptyGroupError(f"group {gid!r} has {len(group.members)} members")
            else:
                out[gid] = None
        return out


__all__ = ["GroupCoordinatorShard"]
