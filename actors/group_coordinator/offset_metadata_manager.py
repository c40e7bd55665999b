"""Committed offsets as a plain state machine (Kafka's ``OffsetMetadataManager``).

Commits, fetches, deletions and expiry of the offsets of every group, transactional offset
commits (KIP-98/KIP-447) held pending until their transaction's marker lands, and lag.

Offsets are records of ``__consumer_offsets`` and take effect once they are durable: a call
here checks and stamps the commit and returns the records (``offset_records``); the actor
shell appends them and then applies them (``apply_commit``), as a replayed record is. A
transactional commit is a transactional batch of the producer's id and epoch in the group's
partition; it stays pending, invisible to ``fetch``, until the transaction coordinator
reports the transaction's end (after the marker is in the partition): a commit applies it,
an abort drops it. Replay does the same with the markers it reads.

Offsets of a group empty for ``offsets.retention.minutes`` expire (Kafka 2.1+: the clock
starts when the group became empty). Nothing here reads the time except through the
injected clock.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.clock import Clock
from actors.group_coordinator.classic_group import GROUP_TYPE
from actors.protocol import GroupState
from actors.types import OffsetAndMetadata, PartitionLag, TopicPartition
from storage.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InvalidRequestError,
    KafkaError,
    NonEmptyGroupError,
    UnstableOffsetCommitError,
)

Offsets = dict[TopicPartition, OffsetAndMetadata]


@dataclass(frozen=True, slots=True)
class ExpiredOffsets:
    """Offsets of one group past retention; ``whole_group`` when they are all it has (the
    group goes with them)."""

    group_id: str
    partitions: tuple[TopicPartition, ...]
    whole_group: bool


class OffsetMetadataManager:
    """The committed and pending offsets of every group (see the module docstring).

    ``groups`` finds a group of either kind (``get``, ``get_or_create``, ``remove``: the
    shard's :class:`~actors.group_coordinator.shard.Groups`);
    ``partition_for`` maps a group id to its ``__consumer_offsets`` partition.
    """

    def __init__(
        self,
        clock: Clock,
        groups: Any,
        retention_ms: int,
        partition_for: Callable[[str], int],
    ) -> None:
        self._clock = clock
        self._groups = groups
        self._retention_ms = retention_ms
        self._partition_for = partition_for
        self.offsets: dict[str, Offsets] = {}
        # Transactional offset commits not yet ended: producer id -> group -> partition -> offset.
        self.pending: dict[int, dict[str, Offsets]] = {}

    # -- commits --------------------------------------------------------------------------

    def stamp(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> Offsets:
        """A commit's offsets, checked (InvalidRequestError) and stamped with the commit time,
        as Kafka's coordinator stamps them."""
        if not isinstance(offsets, Mapping):
            raise InvalidRequestError(f"offsets must map partitions to OffsetAndMetadata, not {offsets!r:.60}")
        now = self._clock.wall_ms()
        values = {}
        for tp, om in offsets.items():
            if type(tp) is not TopicPartition or type(om) is not OffsetAndMetadata:
                raise InvalidRequestError(
                    f"offsets must map TopicPartition to OffsetAndMetadata, not {tp!r}: {om!r:.60}"
                )
            if isinstance(om.offset, bool) or not isinstance(om.offset, numbers.Integral) or om.offset < 0:
                raise InvalidRequestError(f"offset for {tp} must be an integer >= 0, got {om.offset!r}")
            values[tp] = OffsetAndMetadata(int(om.offset), str(om.metadata or ""), now, int(om.leader_epoch))
        return values

    def check_alter(self, group_id: str) -> None:
        """AlterConsumerGroupOffsets is for groups without members (NonEmptyGroupError)."""
        group = self._groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroupError(f"group {group_id!r} has {len(group.members)} members; stop them first")

    def apply_commit(self, group_id: str, values: Offsets) -> None:
        """Durable commits take effect (a committed offset creates its group, Empty)."""
        self._groups.get_or_create(group_id)
        self.offsets.setdefault(group_id, {}).update(values)

    def add_pending(self, producer_id: int, group_id: str, values: Offsets) -> None:
        """Durable transactional commits wait for their transaction's end."""
        self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(values)

    def end_pending(self, producer_id: int, committed: bool, partition: int | None = None) -> int:
        """Apply (commit) or drop (abort) a producer's pending offsets; only the groups of
        ``__consumer_offsets`` partition ``partition`` when given (a marker read on load).
        Returns how many offsets there were."""
        groups = self.pending.get(producer_id)
        if not groups:
            return 0
        done = [g for g in groups if partition is None or self._partition_for(g) == partition]
        count = 0
        for group_id in done:
            offsets = groups.pop(group_id)
            count += len(offsets)
            if committed:
                self.apply_commit(group_id, offsets)
        if not groups:
            del self.pending[producer_id]
        return count

    # -- fetches --------------------------------------------------------------------------

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, require_stable: bool = False
    ) -> Offsets:
        """Committed offsets of a group (Kafka's OffsetFetch; all, or of ``partitions``);
        partitions without one are absent. With ``require_stable`` (KIP-447) a partition with
        a transactional commit pending raises the retriable UnstableOffsetCommitError."""
        if partitions is not None:
            partitions = list(partitions)
        if require_stable:
            pending = {tp for groups in self.pending.values() for tp in groups.get(group_id, ())}
            unstable = pending if partitions is None else pending.intersection(partitions)
            if unstable:
                raise UnstableOffsetCommitError(
                    f"group {group_id!r} has transactional offset commits pending for {sorted(unstable)}"
                )
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            return dict(committed)
        return {tp: committed[tp] for tp in partitions if tp in committed}

    def committed(self, group_id: str) -> Offsets:
        """Every committed offset of the group."""
        return dict(self.offsets.get(group_id, {}))

    # -- deletions and expiry -------------------------------------------------------------

    def check_delete(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> tuple[dict[TopicPartition, KafkaError | None], list[TopicPartition]]:
        """Kafka's OffsetDelete, decided: per partition None or the error, and the partitions
        whose offsets go. GroupIdNotFoundError for a group that has none; a partition whose
        topic a member subscribes to keeps its offset (GroupSubscribedToTopicError)."""
        group = self._groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        subscribed = group.subscribed_topics()
        committed = self.offsets.get(group_id, {})
        out: dict[TopicPartition, KafkaError | None] = {}
        gone = []
        for tp in partitions:
            if tp.topic in subscribed:
                out[tp] = GroupSubscribedToTopicError(f"a member of {group_id!r} subscribes to {tp.topic!r}")
            else:
                out[tp] = None
                if tp in committed:
                    gone.append(tp)
        return out, gone

    def remove(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Deleted offsets (durably) go; a group left with nothing goes too."""
        committed = self.offsets.get(group_id)
        if committed is not None:
            for tp in partitions:
                committed.pop(tp, None)
            if not committed:
                del self.offsets[group_id]
        self.drop_if_unused(group_id)

    def remove_group(self, group_id: str) -> None:
        """A deleted group (its tombstones are durable): its offsets go (pending ones aside),
        and the group too, unless a member joined while the tombstones were written (the
        group's next metadata record, written after them, brings it back on load)."""
        self.offsets.pop(group_id, None)
        group = self._groups.get(group_id)
        if group is not None and not group.members:
            self._groups.remove(group_id)

    def drop_if_unused(self, group_id: str) -> None:
        """Forget a classic group with no members, no generation in progress and no offsets (a
        consumer group's own records keep it until it is deleted)."""
        group = self._groups.get(group_id)
        if group is not None and group.type == GROUP_TYPE and not group.members and group.state == GroupState.EMPTY:
            if not self.offsets.get(group_id):
                self._groups.remove(group_id)

    def expired(self, now_ms: int | None = None) -> list[ExpiredOffsets]:
        """Offsets of groups empty for ``offsets.retention.minutes`` (counted from the later
        of the group's last state change and the commit), at ``now_ms`` (default: now)."""
        now = self._clock.wall_ms() if now_ms is None else now_ms
        return [e for group_id in list(self.offsets) if (e := self.expired_of(group_id, now)) is not None]

    def expired_of(self, group_id: str, now_ms: int | None = None) -> ExpiredOffsets | None:
        """The group's offsets past retention at ``now_ms``, if any (asked again just before
        they are deleted: a member may have joined since :meth:`expired`)."""
        now = self._clock.wall_ms() if now_ms is None else now_ms
        group = self._groups.get(group_id)
        committed = self.offsets.get(group_id)
        if group is None or not committed or group.members or group.state != GroupState.EMPTY:
            return None
        gone = tuple(
            tp
            for tp, om in committed.items()
            if now - max(group.state_timestamp_ms, om.commit_timestamp) >= self._retention_ms
        )
        return ExpiredOffsets(group_id, gone, len(gone) == len(committed)) if gone else None

    # -- lag ------------------------------------------------------------------------------

    def lag_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions a group's lag covers: those it committed for or is assigned."""
        partitions = set(self.offsets.get(group_id, {}))
        group = self._groups.get(group_id)
        if group is not None:
            partitions.update(group.assigned_partitions())
        return partitions

    def lag(
        self, group_id: str, partitions: Iterable[TopicPartition], high_watermarks: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, PartitionLag]:
        """Lag per partition from the committed offsets and the high watermarks; a
        partition never committed counts its whole log as lag."""
        committed = self.offsets.get(group_id, {})
        out = {}
        for tp in sorted(partitions):
            end = high_watermarks.get(tp, 0)
            om = committed.get(tp)
            out[tp] = PartitionLag(om.offset if om else None, end, max(0, end - (om.offset if om else 0)))
        return out


__all__ = ["ExpiredOffsets", "OffsetMetadataManager", "Offsets"]
