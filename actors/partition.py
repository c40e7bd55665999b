"""The PartitionReplica actor: one replica of one partition, owning its on-disk log.

The leader serves ``produce``, ``fetch``, ``list_offsets`` and ``delete_records``. Batches
travel as the same bytes from the producer to disk and back to consumers: the replica
validates headers and CRCs and patches offsets (``storage.Log.append``), it never looks
at a record.

Every request may carry the caller's ``leader_epoch``: an older one is fenced
(FencedLeaderEpochError), a newer one means this replica has not heard of the election
yet (UnknownLeaderEpochError); both are retriable and make the client refresh metadata.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import ray

from actors.types import FetchResult, OffsetAndTimestamp, ProduceResult
from storage import Log, log_config
from storage.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

logger = logging.getLogger(__name__)

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"
NO_EPOCH = -1


def partition_dir(data_dir: str, topic: str, partition: int) -> Path:
    """Kafka's partition directory: ``<log.dir>/<topic>-<partition>``."""
    return Path(data_dir) / f"{topic}-{partition}"


class PartitionReplica:
    """One replica of a partition. Created by the controller, pinned to its broker's node."""

    def __init__(self, topic: str, partition: int, broker_id: int, data_dir: str, config: dict[str, Any]) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self._config = log_config(config)
        self._dir = partition_dir(data_dir, topic, partition)
        # Opening recovers the log: indexes rebuilt, torn tail cut.
        self._log = Log(self._dir, self._config)
        self._role = OFFLINE
        self._leader_epoch = NO_EPOCH
        self._replicas: tuple[int, ...] = (broker_id,)
        self._isr: tuple[int, ...] = (broker_id,)
        self._data_arrived: asyncio.Condition | None = None
        self._closed = False
        self._background: asyncio.Task | None = None
        self._retention_check_ms = 300000
        logger.info("replica %s-%d on broker %d opened at %s", topic, partition, broker_id, self._dir)

    # -- role changes (driven by the controller) ------------------------------------------

    async def become_leader(
        self, leader_epoch: int, replicas: list[int], isr: list[int], retention_check_ms: int = 300000
    ) -> int:
        """Take leadership at ``leader_epoch``; returns the log end offset."""
        self._role = LEADER
        self._leader_epoch = leader_epoch
        self._replicas = tuple(replicas)
        self._isr = tuple(isr)
        self._retention_check_ms = retention_check_ms
        await self._notify()
        return self._log.log_end_offset

    async def update_config(self, config: dict[str, Any]) -> None:
        """Apply new topic-level config overrides (alter configs)."""
        self._config = log_config(config)
        # Reopening is cheap after a clean close (no recovery scan) and nothing can run in
        # between: the actor's event loop does not switch tasks inside this method.
        self._log.close()
        self._log = Log(self._dir, self._config)

    # -- the data path --------------------------------------------------------------------

    async def produce(
        self, records: bytes, acks: int = 1, timeout_ms: int = 30000, leader_epoch: int = NO_EPOCH
    ) -> ProduceResult:
        """Append whole record batches; returns where the first one landed.

        ``acks`` is 0, 1 or -1 (all). With one replica, 1 and all are the same.
        """
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks={acks}; use 0, 1 or -1 (all)")
        if not isinstance(records, (bytes, bytearray, memoryview)):
            raise InvalidRequestError(f"produce takes record batch bytes, not {type(records).__name__}")
        self._check_leader(leader_epoch)
        try:
            info = self._log.append(records, leader_epoch=self._leader_epoch)
        except OSError as exc:  # the log turns OSError into KafkaStorageError; be safe anyway
            raise KafkaStorageError(f"{self.topic}-{self.partition}: {exc}") from None
        await self._notify()
        return ProduceResult(info.first_offset, info.log_append_time, info.log_start_offset, info.last_offset)

    async def fetch(
        self,
        offset: int,
        max_bytes: int = 1048576,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        isolation_level: int = 0,
        leader_epoch: int = NO_EPOCH,
        replica_id: int = -1,
    ) -> FetchResult:
        """Whole batches from ``offset`` up to the high watermark, long-polling for data.

        Waits up to ``max_wait_ms`` until at least ``min_bytes`` are available past
        ``offset``; answers at once when they are. Raises OffsetOutOfRangeError outside
        [log start, log end].
        """
        self._check_leader(leader_epoch)
        result = self._read(offset, max_bytes)
        if len(result.records) >= min_bytes or max_wait_ms <= 0:
            return result
        deadline = time.monotonic() + max_wait_ms / 1000
        start_size = self._log.size_in_bytes
        cond = self._condition()
        async with cond:
            try:
                await asyncio.wait_for(
                    cond.wait_for(lambda: self._closed or self._has_bytes(offset, start_size, len(result.records), min_bytes)),
                    max(0.0, deadline - time.monotonic()),
                )
            except TimeoutError:
                pass
        self._check_leader(leader_epoch)
        return self._read(offset, max_bytes)

    async def list_offsets(self, timestamp: int, leader_epoch: int = NO_EPOCH) -> OffsetAndTimestamp:
        """Earliest (-2), latest (-1), or the first offset with timestamp >= ``timestamp``.

        A timestamp past every record answers offset -1, as Kafka does.
        """
        self._check_leader(leader_epoch)
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(self.high_watermark, -1, self._leader_epoch)
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetAndTimestamp(self._log.log_start_offset, -1, self._leader_epoch)
        if timestamp < 0:
            raise OffsetNotAvailableError(f"unsupported list_offsets timestamp {timestamp}")
        found = self._log.offset_for_timestamp(timestamp)
        if found is None or found.offset >= self.high_watermark:
            return OffsetAndTimestamp(-1, -1, self._leader_epoch)
        return OffsetAndTimestamp(found.offset, found.timestamp, self._leader_epoch)

    async def delete_records(self, offset: int, leader_epoch: int = NO_EPOCH) -> int:
        """Advance the log start offset to ``offset`` (-1: the high watermark); returns it."""
        self._check_leader(leader_epoch)
        target = self.high_watermark if offset == -1 else offset
        if target > self.high_watermark:
            raise OffsetOutOfRangeError(f"delete_records({offset}) past the high watermark {self.high_watermark}")
        return self._log.delete_records(target, high_watermark=self.high_watermark)

    # -- background work and introspection ------------------------------------------------

    async def run(self) -> None:
        """Run the background loop (retention, time-based flush) until the replica closes.

        The controller calls it after creating the replica and keeps the call pending: when
        the actor dies the call fails, which is how the controller watches replicas. A
        second call (a restarted controller re-attaching) joins the loop already running.
        """
        if self._background is None:
            self._background = asyncio.get_running_loop().create_task(self._background_loop())
        await asyncio.shield(self._background)

    async def _background_loop(self) -> None:
        # The interval is read on every turn: become_leader may change it after the loop starts.
        last_retention = time.monotonic()
        while not self._closed:
            await asyncio.sleep(0.2)
            try:
                self._log.maybe_flush()
                if time.monotonic() - last_retention >= self._retention_check_ms / 1000:
                    last_retention = time.monotonic()
                    deleted = self._log.delete_old_segments(high_watermark=self.high_watermark)
                    self._log.delete_pending_files()
                    if deleted:
                        logger.info("%s-%d: retention deleted %d segments", self.topic, self.partition, deleted)
            except Exception:  # a background error must not kill the replica
                logger.exception("%s-%d: background task failed", self.topic, self.partition)

    async def apply_retention(self) -> int:
        """Apply retention now; returns the number of segments deleted."""
        deleted = self._log.delete_old_segments(high_watermark=self.high_watermark)
        self._log.delete_pending_files()
        return deleted

    async def describe(self) -> dict[str, Any]:
        """Offsets, role, epoch and size of this replica."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "broker_id": self.broker_id,
            "role": self._role,
            "leader_epoch": self._leader_epoch,
            "log_start_offset": self._log.log_start_offset,
            "log_end_offset": self._log.log_end_offset,
            "high_watermark": self.high_watermark,
            "size_bytes": self._log.size_in_bytes,
            "segments": len(self._log.segments),
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    async def ping(self) -> int:
        """Liveness probe; returns the broker id."""
        return self.broker_id

    async def close(self, delete: bool = False) -> None:
        """Close the log cleanly (writes the clean-shutdown marker); optionally delete it."""
        self._closed = True
        self._role = OFFLINE
        await self._notify()
        self._log.close()
        if delete:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """Consumers never read past this. With one replica it is the log end offset."""
        return self._log.log_end_offset

    def _read(self, offset: int, max_bytes: int) -> FetchResult:
        hw = self.high_watermark
        data = self._log.read(offset, max_bytes, max_offset=hw)
        return FetchResult(data.records, hw, hw, self._log.log_start_offset, self._log.log_end_offset, self._leader_epoch)

    def _has_bytes(self, offset: int, start_size: int, already: int, min_bytes: int) -> bool:
        if self.high_watermark <= offset:
            return False
        if min_bytes <= 1:
            return True
        return already + self._log.size_in_bytes - start_size >= min_bytes

    def _check_leader(self, leader_epoch: int) -> None:
        if self._closed or self._role != LEADER:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}"
            )
        if leader_epoch != NO_EPOCH:
            if leader_epoch < self._leader_epoch:
                raise FencedLeaderEpochError(
                    f"{self.topic}-{self.partition}: epoch {leader_epoch} < current {self._leader_epoch}"
                )
            if leader_epoch > self._leader_epoch:
                raise UnknownLeaderEpochError(
                    f"{self.topic}-{self.partition}: epoch {leader_epoch} > current {self._leader_epoch}"
                )

    def _condition(self) -> asyncio.Condition:
        # Created lazily: it must belong to the actor's event loop, not __init__'s thread.
        if self._data_arrived is None:
            self._data_arrived = asyncio.Condition()
        return self._data_arrived

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()

