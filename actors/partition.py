"""The PartitionReplica actor: one replica of one partition, owning its on-disk log.

The leader serves ``produce``, ``fetch``, ``list_offsets`` and ``delete_records``, each
taking its request of ``actors.protocol`` (ProduceRequest, FetchRequest, ...). Batches
travel as the same bytes from the producer to disk, to followers and back to consumers:
the leader validates headers and CRCs, walks every record of a producer's batch (Kafka's
LogValidator, in ``storage.Log.append``) and patches offsets; a follower keeps the leader's
bytes. Produce takes client batches (control batches only come from ``write_txn_marker``);
every request field is checked (the request's ``checked()``), so bad input gets a Kafka
error and never reaches the log.

Replication follows Kafka's ISR design. A follower runs a fetch loop against the
leader (``fetch`` with its ``replica_id`` and log end offset) and appends the leader's
batches unchanged. The leader learns each follower's log end offset (LEO) from those
fetches; the high watermark (HW) is the smallest LEO in the ISR, and consumers never see
past it. A follower that lags longer than replica.lag.time.max.ms leaves the ISR, one
that reaches the HW rejoins; both changes go through the controller (``alter_partition``)
with the partition epoch, so a stale leader cannot change the ISR. On a leader change a
follower cuts its divergent suffix by asking the new leader where its last epoch ended
(``offset_for_leader_epoch``, KIP-101/KIP-279), never by the HW alone.

Every request may carry the caller's ``current_leader_epoch``: an older one is fenced
(FencedLeaderEpochError), a newer one means this replica has not heard of the election
yet (UnknownLeaderEpochError); both are retriable and make the client refresh metadata.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from actors.metrics import PATH_ACTOR, TICK_S, Recorder, error_name
from actors.names import INTERNAL_TOPICS
from actors.protocol import (
    NO_EPOCH,
    AbortedTransaction,
    AlterPartitionRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    IsolationLevel,
    LeaderAndIsrRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceOrder,
    ProduceRequest,
    ProduceResponse,
    ReplicaRole,
    TransactionResult,
    WriteTxnMarkersRequest,
    checked_request,
    require,
)
from actors.types import OffsetAndTimestamp
from storage import AppendOrigin, Log, log_config
from storage.batch_header import ATTRIBUTES_OFFSET, CONTROL_MASK, BatchHeader, batch_boundaries
from storage.checkpoint import fsync_dir, read_offset, write_atomically, write_offset
from storage.cleaner import clean, cleanable, dirty_ratio
from storage.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaStorageError,
    LogDirLockedError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from storage.file_lock import FileLock
from storage.leader_epoch import UNDEFINED_EPOCH, LeaderEpochFileCache
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from storage.records.control import build_control_batch

logger = logging.getLogger(__name__)

# How often a replica of a compacted topic checks whether its log is dirty enough to clean
# (Kafka's cleaner threads poll their logs the same way, backing off when nothing is due).
CLEANER_CHECK_S = 1.0

# How long a batch that arrived ahead of its producer's previous one waits for it.
REORDER_WAIT_S = 5.0
# Producer sessions whose call order a leader remembers (the oldest are forgotten first).
MAX_ORDER_SESSIONS = 10_000
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"

# Broker settings a replica needs for replication; the controller passes its values.
DEFAULT_REPLICATION = {
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.max.bytes": 1048576,
}


def partition_dir(data_dir: str, topic: str, partition: int) -> Path:
    """Kafka's partition directory: ``<log.dir>/<topic>-<partition>``."""
    return Path(data_dir) / f"{topic}-{partition}"


def read_topic_id(directory: Path) -> str | None:
    """The topic id in the directory's ``partition.metadata`` (Kafka's PartitionMetadataFile),
    or None when there is none (a new directory, or one written before topic ids)."""
    try:
        text = (directory / PARTITION_METADATA_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    if fields.get("version") != "0" or not fields.get("topic_id"):
        raise KafkaStorageError(f"malformed {directory / PARTITION_METADATA_FILE}: {text!r}")
    return fields["topic_id"]


def write_topic_id(directory: Path, topic_id: str) -> None:
    """Write ``partition.metadata`` atomically."""
    write_atomically(directory / PARTITION_METADATA_FILE, f"version: 0\ntopic_id: {topic_id}\n".encode())


def remove_stray(directory: Path, topic_id: str | None) -> bool:
    """Delete ``directory`` if it belongs to a deleted topic of the same name (its topic id is
    not ``topic_id``); True if it did. Renamed first (Kafka's ``-stray`` suffix) so that a crash
    midway never leaves half of the old log where the new topic's replica would open it."""
    for leftover in directory.parent.glob(f"{directory.name}.*-stray"):
        shutil.rmtree(leftover, ignore_errors=True)  # an earlier removal cut short
    if topic_id is None or not directory.exists():
        return False
    found = read_topic_id(directory)
    if found is None or found == topic_id:
        return False
    stray = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-stray")
    os.replace(directory, stray)
    fsync_dir(directory.parent)
    shutil.rmtree(stray, ignore_errors=True)
    logger.warning("%s held topic id %s, not %s: a deleted topic's stray replica, removed", directory, found, topic_id)
    return True


def remove_stray_partitions(data_dir: str | Path, hosted: set[str]) -> list[str]:
    """Delete the partition directories in a broker's ``data_dir`` that it no longer hosts
    (``hosted``: the ``<topic>-<partition>`` names assigned to it), as Kafka's broker does
    with stray logs when it starts: a topic deleted, or a replica moved away, while this
    broker was down. Returns the names removed.

    Only directories that are partition logs (a ``<topic>-<n>`` name holding a segment or
    ``partition.metadata``) are touched; one whose lock a live replica holds is left (and
    logged). Each is renamed ``-stray`` before it is deleted, and leftovers of a removal cut
    short are deleted too.
    """
    root = Path(data_dir)
    if not root.is_dir():
        return []
    removed = []
    for entry in sorted(root.iterdir()):
        try:
            if _remove_if_stray(root, entry, hosted):
                removed.append(entry.name)
        except OSError as exc:  # one entry's trouble does not stop the sweep
            logger.warning("could not check or remove %s: %s", entry, exc)
    return removed


def _remove_if_stray(root: Path, entry: Path, hosted: set[str]) -> bool:
    """remove_stray_partitions for one entry of ``root``; True if it was removed."""
    if not entry.is_dir() or entry.name in hosted:
        return False
    if entry.name.endswith("-stray"):
        shutil.rmtree(entry, ignore_errors=True)  # an earlier removal cut short
        return False
    topic, _, number = entry.name.rpartition("-")
    if not topic or not number.isdigit():
        return False
    if not (entry / PARTITION_METADATA_FILE).exists() and not any(entry.glob("*.log")):
        return False
    lock = FileLock(entry)
    try:
        lock.acquire()
    except LogDirLockedError as exc:
        logger.warning("%s is not assigned to this broker but is open: left as it is (%s)", entry, exc)
        return False
    try:
        stray = entry.with_name(f"{entry.name}.{uuid.uuid4().hex}-stray")
        os.replace(entry, stray)
        fsync_dir(root)
    finally:
        lock.release()
    shutil.rmtree(stray, ignore_errors=True)
    logger.warning("%s: a replica this broker no longer hosts (topic deleted or moved), removed", entry)
    return True


@dataclass(slots=True)
class _Follower:
    """What the leader knows of one follower (Kafka's Replica state)."""

    leo: int = -1  # unknown until it fetches: an unknown LEO holds the HW back
    caught_up_at: float = 0.0
    last_fetch_at: float = 0.0
    leader_leo_at_last_fetch: int = -1


class PartitionReplica:
    """One replica of a partition. Created by the controller, pinned to its broker's node."""

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        data_dir: str,
        config: dict[str, Any],
        topic_id: str | None = None,
        metrics_enabled: bool = True,
        namespace: str = "",
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.topic_id = topic_id
        self._config = log_config(config)
        self._dir = partition_dir(data_dir, topic, partition)
        # A topic deleted while this broker was down left its directory here (KIP-516).
        remove_stray(self._dir, topic_id)
        # Opening recovers the log: indexes rebuilt, torn tail cut.
        self._log = Log(self._dir, self._config)
        if topic_id is not None and read_topic_id(self._dir) != topic_id:
            write_topic_id(self._dir, topic_id)
        self._epochs = LeaderEpochFileCache(self._dir)
        # Recovery may have cut a torn tail that the epoch cache still covers.
        self._epochs.truncate_from_end(self._log.log_end_offset)
        self._hw = min(read_offset(self._dir / HIGH_WATERMARK_FILE) or 0, self._log.log_end_offset)
        self._hw_checkpointed = self._hw
        self._log.update_high_watermark(self._hw)
        self._role = ReplicaRole.OFFLINE
        self._leader_epoch = NO_EPOCH
        self._partition_epoch = 0
        self._leader_id = -1
        self._leader_handle: Any = None  # the leader actor a follower fetches from
        self._replicas: tuple[int, ...] = (broker_id,)
        self._isr: tuple[int, ...] = (broker_id,)
        self._pending_isr: tuple[int, ...] | None = None
        self._followers: dict[int, _Follower] = {}
        self._epoch_start_offset = 0
        self._controller: Any = None
        self._replication = dict(DEFAULT_REPLICATION)
        self._fetcher: asyncio.Task | None = None
        self._fetch_paused = False
        self._data_arrived: asyncio.Condition | None = None
        self._next_turns: dict[str, int] = {}  # producer session -> its next call number here
        self._closed = False
        self._cleaning: asyncio.Task | None = None
        self._background: asyncio.Task | None = None
        self._retention_check_ms = 300000
        self._metrics = _ReplicaMetrics(self, metrics_enabled, namespace)
        logger.info("replica %s-%d on broker %d opened at %s", topic, partition, broker_id, self._dir)

    # -- role changes (driven by the controller) ------------------------------------------

    async def become_leader(self, request: LeaderAndIsrRequest) -> int:
        """Take leadership at the request's leader epoch (or take a new ISR/replica list at
        the same epoch); ``request.leader`` must be this broker.

        Returns the log end offset. An older epoch than this replica's is ignored.
        """
        if type(request) is not LeaderAndIsrRequest or request.leader != self.broker_id:
            raise InvalidRequestError(f"broker {self.broker_id} cannot lead on {request!r:.200}")
        leader_epoch, partition_epoch = request.leader_epoch, request.partition_epoch
        replicas, isr = request.replicas, request.isr
        if leader_epoch < self._leader_epoch:
            return self._log.log_end_offset
        self._retention_check_ms = request.retention_check_ms
        if request.controller is not None:
            self._controller = request.controller
        if request.replication:
            self._replication.update(request.replication)
        if self._role == ReplicaRole.LEADER and leader_epoch == self._leader_epoch:
            # Same term: the controller changed the ISR or the replica set.
            if partition_epoch >= self._partition_epoch:
                self._set_membership(replicas, isr, partition_epoch)
            await self._advance_hw()
            await self._notify()
            return self._log.log_end_offset
        self._stop_fetcher()
        self._role = ReplicaRole.LEADER
        self._leader_epoch = leader_epoch
        self._leader_id = self.broker_id
        self._leader_handle = None
        self._partition_epoch = partition_epoch
        self._pending_isr = None
        self._followers = {}
        self._set_membership(replicas, isr, partition_epoch)
        # The epoch starts here even before its first append: followers asking where their
        # older epoch ended get this offset (Kafka assigns it on becoming leader, too).
        self._epoch_start_offset = self._log.log_end_offset
        self._epochs.assign(leader_epoch, self._epoch_start_offset)
        await self._advance_hw()
        await self._notify()
        logger.info(
            "%s-%d: broker %d leads at epoch %d (LEO %d, HW %d, ISR %s)",
            self.topic,
            self.partition,
            self.broker_id,
            leader_epoch,
            self._log.log_end_offset,
            self._hw,
            self._isr,
        )
        return self._log.log_end_offset

    async def become_follower(self, request: LeaderAndIsrRequest) -> bool:
        """Follow ``request.leader`` (its actor: ``request.leader_handle``) at the request's
        leader epoch: truncate the divergent suffix, then fetch.

        Returns False (and changes nothing) for an epoch older than this replica's.
        """
        if type(request) is not LeaderAndIsrRequest or request.leader_handle is None:
            raise InvalidRequestError(f"broker {self.broker_id} cannot follow on {request!r:.200}")
        leader_epoch, leader_id, leader = request.leader_epoch, request.leader, request.leader_handle
        if leader_epoch < self._leader_epoch:
            return False
        self._retention_check_ms = request.retention_check_ms
        if request.replication:
            self._replication.update(request.replication)
        self._replicas, self._isr = tuple(request.replicas), tuple(request.isr)
        self._partition_epoch = request.partition_epoch
        if (
            self._role == ReplicaRole.FOLLOWER
            and leader_epoch == self._leader_epoch
            and leader_id == self._leader_id
            # The same leader at the same epoch may be a new actor (recreated after it died).
            and leader == self._leader_handle
            and self._fetcher is not None
            and not self._fetcher.done()
        ):
            return True
        self._stop_fetcher()
        self._role = ReplicaRole.FOLLOWER
        self._leader_epoch = leader_epoch
        self._leader_id = leader_id
        self._leader_handle = leader
        self._pending_isr = None
        self._followers = {}
        self._fetcher = asyncio.get_running_loop().create_task(self._follow(leader, leader_epoch))
        # Wake produce and fetch calls waiting here as leader: they now fail with NotLeader.
        await self._notify()
        logger.info(
            "%s-%d: broker %d follows %d at epoch %d",
            self.topic,
            self.partition,
            self.broker_id,
            leader_id,
            leader_epoch,
        )
        return True

    async def update_config(self, config: dict[str, Any]) -> None:
        """Apply new topic-level config overrides (alter configs)."""
        new_config = log_config(config)
        await self._finish_cleaning()
        self._config = new_config
        # Reopening is cheap after a clean close (no recovery scan), and nothing runs in
        # between: there is no await from here to the reopen.
        self._log.close()
        self._log = Log(self._dir, self._config)
        self._log.update_high_watermark(self._hw)

    # -- the data path --------------------------------------------------------------------

    async def produce(self, request: ProduceRequest) -> ProduceResponse:
        """Append whole record batches; returns where the first one landed.

        ``acks`` is 0, 1 or -1 (all). With -1 the call returns once every ISR member has
        the batches (the HW passed them), and refuses up front when the ISR is smaller
        than min.insync.replicas (NotEnoughReplicasError). ``origin`` is AppendOrigin.CLIENT
        (producer data: every record validated, epoch and sequence checks) or COORDINATOR
        (transactional offset commits: epoch checks only), or its value. Control batches
        are refused from either (InvalidRecordError): transaction markers are written only
        by ``write_txn_marker``. An internal topic (``__consumer_offsets``,
        ``__transaction_state``) takes only the coordinators' appends: a CLIENT one is
        InvalidTopicError, as Kafka's ReplicaManager refuses appends to internal topics
        unless ``internalTopicsAllowed``. A retried batch the log already holds appends nothing
        and is answered with its original offsets (for acks=-1 once the HW covers them).
        A bad request is InvalidRequestError (InvalidRequiredAcksError for ``acks``) and
        leaves the log as it was.

        ``order`` comes with the calls of a producer without idempotence, numbered per
        partition: call ``number`` is appended after the session's calls from ``oldest``
        (the oldest it has unanswered) to ``number - 1``, waiting up to REORDER_WAIT_S for
        them. Kafka gets that order from its TCP connection; Ray may start an async actor's
        calls out of order (a call whose arguments arrive first runs first).
        """
        require(request, ProduceRequest)
        order = request.checked_order()
        try:
            request = request.checked()
            if request.origin is AppendOrigin.CLIENT and self.topic in INTERNAL_TOPICS:
                # Only the coordinators write their state: one client record there could
                # stop the next start (Kafka: InvalidTopicException, internalTopicsAllowed).
                raise InvalidTopicError(f"cannot append to internal topic {self.topic}")
            if request.origin is AppendOrigin.COORDINATOR and _has_control_batch(request.records):
                # The coordinators' markers go through write_txn_marker, which builds them itself.
                raise InvalidRecordError("control batches are written by write_txn_marker only")
        except (InvalidRequestError, InvalidRecordError, InvalidTopicError) as exc:
            if order is not None:  # refused: the session's next call must not wait for it
                self._end_turn(order)
                await self._notify()
            self._metrics.produce_failed(request.acks, exc)
            raise
        if not self._metrics.enabled:
            return await self._produce(request)
        started = time.perf_counter()
        try:
            result = await self._produce(request)
        except BaseException as exc:
            self._metrics.produce_failed(request.acks, exc, started)
            raise
        self._metrics.request_done("Produce", request.acks, started)
        return result

    async def _produce(self, request: ProduceRequest, count: bool = True) -> ProduceResponse:
        """``produce`` of a checked request; also the marker path's (``count`` false: markers
        are not messages in)."""
        records, acks, timeout_ms = request.records, request.acks, request.timeout_ms
        leader_epoch, origin, order = request.current_leader_epoch, request.origin, request.order
        if order is not None:
            await self._wait_for_turn(order, min(timeout_ms / 1000, REORDER_WAIT_S))
        try:
            self._check_leader(leader_epoch)
            min_isr = self._config["min.insync.replicas"]
            if acks == -1 and len(self._isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"{self.topic}-{self.partition}: ISR {list(self._isr)} is smaller than min.insync.replicas={min_isr}"
                )
            try:
                info = self._log.append(records, leader_epoch=self._leader_epoch, origin=origin)
            except OutOfOrderSequenceError:
                if origin is not AppendOrigin.CLIENT:
                    raise
                info = await self._append_in_order(
                    records, origin, leader_epoch, min(timeout_ms / 1000, REORDER_WAIT_S)
                )
            except OSError as exc:  # the log turns OSError into KafkaStorageError; be safe anyway
                raise KafkaStorageError(f"{self.topic}-{self.partition}: {exc}") from None
        except BaseException:
            if order is not None:  # refused: the session's next call must not wait for it
                self._end_turn(order)
                await self._notify()
            raise
        if order is not None:
            self._end_turn(order)  # the notify below wakes the session's next call
        if count and not info.duplicate:
            self._metrics.appended(info, len(records))
        if not info.duplicate or order is not None:
            await self._advance_hw()
            await self._notify()
        result = ProduceResponse(info.first_offset, info.log_append_time, info.log_start_offset, info.last_offset)
        if acks != -1:
            return result
        required, epoch = info.last_offset + 1, self._leader_epoch
        replicated = await self._wait_until(
            lambda: (
                self._closed or self._role != ReplicaRole.LEADER or self._leader_epoch != epoch or self._hw >= required
            ),
            timeout_ms / 1000,
        )
        if not replicated:
            raise RequestTimedOutError(
                f"{self.topic}-{self.partition}: offset {info.last_offset} not replicated to ISR "
                f"{list(self._isr)} within {timeout_ms} ms"
            )
        if self._closed or self._role != ReplicaRole.LEADER or self._leader_epoch != epoch:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.partition}: leadership moved before replication")
        if len(self._isr) < min_isr:
            raise NotEnoughReplicasAfterAppendError(
                f"{self.topic}-{self.partition}: ISR shrank to {list(self._isr)} below min.insync.replicas={min_isr}"
            )
        return result

    async def _wait_for_turn(self, order: ProduceOrder, timeout_s: float) -> None:
        """Wait until the calls of ``order``'s session numbered below its own were appended
        (or failed), at most ``timeout_s``: after that it goes ahead, as a call after a lost
        one would in Kafka."""
        session, n, oldest = order.session, order.number, order.oldest
        turns = self._next_turns
        expected = max(turns.pop(session, oldest), oldest)
        turns[session] = expected  # re-inserted: the dict's order is least recently used first
        if len(turns) > MAX_ORDER_SESSIONS:
            del turns[next(iter(turns))]
        if n > expected:
            await self._wait_until(lambda: self._closed or self._next_turns.get(session, n) >= n, timeout_s)

    def _end_turn(self, order: ProduceOrder) -> None:
        """Call ``order`` is done (appended or refused); the caller notifies its successors."""
        if self._next_turns.get(order.session, -1) <= order.number:
            self._next_turns[order.session] = order.number + 1

    async def _append_in_order(self, records: bytes, origin: AppendOrigin, leader_epoch: int, timeout_s: float) -> Any:
        """Append a batch that came ahead of its producer's previous one.

        An async Ray actor runs calls out of order (a call whose arguments arrive first runs
        first), so a producer's in-flight batches may reach the log swapped, which Kafka's
        TCP connection never does. Wait for the log to grow (the missing batch) and try
        again, until ``timeout_s``; then the OutOfOrderSequenceError stands.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            end = self._log.log_end_offset
            grew = await self._wait_until(
                lambda end=end: self._closed or self._role != ReplicaRole.LEADER or self._log.log_end_offset != end,
                deadline - time.monotonic(),
            )
            self._check_leader(leader_epoch)
            try:
                return self._log.append(records, leader_epoch=self._leader_epoch, origin=origin)
            except OutOfOrderSequenceError:
                if not grew or time.monotonic() >= deadline:
                    raise

    async def write_txn_marker(self, request: WriteTxnMarkersRequest) -> ProduceResponse:
        """Write a transaction's COMMIT or ABORT marker (WriteTxnMarkers); answers the
        marker's append (its offset is ``base_offset``).

        Written as the transaction coordinator's (epoch checks, no sequence), acks=all: it
        returns once the ISR has it, so the last stable offset can pass the transaction.
        """
        request = checked_request(request, WriteTxnMarkersRequest)
        marker = build_control_batch(
            request.transaction_result is TransactionResult.COMMIT,
            request.producer_id,
            request.producer_epoch,
            request.coordinator_epoch,
        )
        return await self._produce(
            ProduceRequest(marker, -1, request.timeout_ms, request.current_leader_epoch, AppendOrigin.COORDINATOR),
            count=False,
        )

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        """Whole batches from ``fetch_offset``, long-polling for data.

        A consumer (``replica_id`` -1) reads up to the high watermark, or with
        READ_COMMITTED up to the last stable offset, and then also gets the aborted
        transactions in the returned range. A follower (its broker id) reads up to the log
        end and its ``fetch_offset`` tells the leader its LEO. Waits up to ``max_wait_ms``
        until at least ``min_bytes`` are available past the offset; answers at once when
        they are. Raises OffsetOutOfRangeError outside [log start, log end],
        InvalidFetchSizeError for a ``partition_max_bytes`` outside [0, 2**31 - 1] and
        InvalidRequestError for other bad fields (a non-integer, an isolation level other
        than 0 or 1).
        """
        request = checked_request(request, FetchRequest)
        if not self._metrics.enabled:
            return await self._fetch(request)
        started = time.perf_counter()
        follower = request.replica_id >= 0
        try:
            result = await self._fetch(request)
        except BaseException as exc:
            self._metrics.fetch_failed(follower, exc, started)
            raise
        self._metrics.fetched(follower, len(result.records), started)
        return result

    async def _fetch(self, request: FetchRequest) -> FetchResponse:
        offset, max_bytes, max_wait_ms, min_bytes = (
            request.fetch_offset,
            request.partition_max_bytes,
            request.max_wait_ms,
            request.min_bytes,
        )
        leader_epoch, replica_id = request.current_leader_epoch, request.replica_id
        self._check_leader(leader_epoch)
        follower = replica_id >= 0
        committed = request.isolation_level is IsolationLevel.READ_COMMITTED and not follower
        if follower:
            await self._on_follower_fetch(replica_id, offset)
        result = self._read(offset, max_bytes, follower, committed)
        if len(result.records) >= min_bytes or max_wait_ms <= 0:
            return result
        deadline = time.monotonic() + max_wait_ms / 1000
        epoch = self._leader_epoch
        limit = self._log_end if follower else self._lso if committed else self._hw_value
        while True:
            # Woken when data became readable and either the readable end moved or enough
            # bytes were appended; a read then tells whether min_bytes are readable (bytes
            # above the high watermark do not count, as in Kafka's DelayedFetch).
            seen, start_size, already = limit(), self._log.size_in_bytes, len(result.records)
            await self._wait_until(
                lambda seen=seen, start_size=start_size, already=already: (
                    self._closed
                    or self._leader_epoch != epoch
                    or self._worth_reading(limit(), seen, offset, start_size, already, min_bytes)
                ),
                deadline - time.monotonic(),
            )
            self._check_leader(leader_epoch)
            result = self._read(offset, max_bytes, follower, committed)
            if (
                len(result.records) >= min_bytes
                or self._closed
                or self._leader_epoch != epoch
                or time.monotonic() >= deadline
            ):
                return result

    async def offset_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> EpochEndOffset:
        """OffsetForLeaderEpoch: the largest epoch not above ``leader_epoch`` and where it
        ended in this log.

        (-1, -1) when this log holds no epoch that old. Followers use it to find where
        their log diverges from the leader's.
        """
        request = checked_request(request, OffsetForLeaderEpochRequest)
        self._check_leader(request.current_leader_epoch)
        return EpochEndOffset(*self._epochs.end_offset_for(request.leader_epoch, self._log.log_end_offset))

    async def list_offsets(self, request: ListOffsetsRequest) -> OffsetAndTimestamp:
        """Earliest (-2), latest (-1: the high watermark, or the last stable offset with
        READ_COMMITTED), the record with the largest timestamp (-3, KIP-734), or the first
        offset with timestamp >= ``timestamp``.

        A timestamp past every record answers offset -1, as Kafka does. Another negative
        timestamp, a non-integer or an isolation level other than 0 or 1 is
        InvalidRequestError.
        """
        request = checked_request(request, ListOffsetsRequest)
        timestamp = request.timestamp
        self._check_leader(request.current_leader_epoch)
        if timestamp != EARLIEST_TIMESTAMP and self._epoch_start_offset > self._hw:
            # Kafka's rule: a new leader whose HW has not yet reached the start of its epoch
            # (its followers have not fetched yet) would answer an end offset that is too low.
            raise OffsetNotAvailableError(
                f"{self.topic}-{self.partition}: the new leader's high watermark {self._hw} has not reached "
                f"its epoch start {self._epoch_start_offset} yet"
            )
        limit = self._lso() if request.isolation_level is IsolationLevel.READ_COMMITTED else self._hw
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(limit, -1, self._leader_epoch)
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetAndTimestamp(self._log.log_start_offset, -1, self._leader_epoch)
        found = self._log.offset_for_timestamp(timestamp)  # a time, or MAX_TIMESTAMP
        if found is None or found.offset >= limit:
            return OffsetAndTimestamp(-1, -1, self._leader_epoch)
        return OffsetAndTimestamp(found.offset, found.timestamp, self._leader_epoch)

    async def delete_records(self, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        """Advance the log start offset to ``offset`` (-1: the high watermark); answers the
        new log start offset.

        Followers follow the leader's log start offset from fetch answers. Another negative
        ``offset`` is OffsetOutOfRangeError, as in Kafka's DeleteRecords.
        """
        request = checked_request(request, DeleteRecordsRequest)
        offset = request.offset
        self._check_leader(request.current_leader_epoch)
        if offset < -1:
            raise OffsetOutOfRangeError(f"delete_records({offset}): use an offset >= 0, or -1 for the high watermark")
        target = self._hw if offset == -1 else offset
        if target > self._hw:
            raise OffsetOutOfRangeError(f"delete_records({offset}) past the high watermark {self._hw}")
        return DeleteRecordsResponse(self._log.delete_records(target, high_watermark=self._hw))

    # -- leader side of replication -------------------------------------------------------

    async def _on_follower_fetch(self, replica_id: int, offset: int) -> None:
        """A follower's fetch tells its LEO: update its lag, maybe the ISR and the HW."""
        state = self._followers.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.topic}-{self.partition} {list(self._replicas)}"
            )
        now, leo = time.monotonic(), self._log.log_end_offset
        # Kafka's rule: caught up now if it reached our LEO; caught up as of its previous
        # fetch if it reached the LEO we had then.
        if offset >= leo:
            state.caught_up_at = now
        elif offset >= state.leader_leo_at_last_fetch:
            state.caught_up_at = max(state.caught_up_at, state.last_fetch_at)
        state.leader_leo_at_last_fetch, state.last_fetch_at, state.leo = leo, now, offset
        if (
            replica_id not in self._maximal_isr()
            and offset >= self._hw
            and offset >= self._epoch_start_offset
            and self._pending_isr is None
        ):
            self._propose_isr([b for b in self._replicas if b in self._isr or b == replica_id])
        await self._advance_hw()

    def _maximal_isr(self) -> set[int]:
        # KIP-497: while an expansion is in flight the new member already counts for the HW,
        # so the HW never passes a replica the controller may already consider in sync.
        return set(self._isr) | set(self._pending_isr or ())

    async def _advance_hw(self) -> None:
        if self._role != ReplicaRole.LEADER:
            return
        hw = self._log.log_end_offset
        for b in self._maximal_isr():
            if b != self.broker_id:
                state = self._followers.get(b)
                hw = min(hw, state.leo if state is not None else -1)
        if hw > self._hw:  # never backwards
            self._set_hw(hw)
            await self._notify()

    def _maybe_shrink_isr(self) -> None:
        if self._role != ReplicaRole.LEADER or self._pending_isr is not None:
            return
        lag = self._replication["replica.lag.time.max.ms"] / 1000
        now = time.monotonic()
        out = [
            b for b in self._isr if b != self.broker_id and now - self._followers.get(b, _Follower()).caught_up_at > lag
        ]
        if out:
            logger.info(
                "%s-%d: replicas %s lag more than %.1fs; shrinking the ISR", self.topic, self.partition, out, lag
            )
            self._propose_isr([b for b in self._isr if b not in out])

    def _propose_isr(self, isr: list[int]) -> None:
        """Ask the controller for a new ISR (one change in flight at a time)."""
        if self._controller is None or self._pending_isr is not None:
            return
        self._pending_isr = tuple(isr)
        asyncio.get_running_loop().create_task(self._alter_partition(tuple(isr)))

    async def _alter_partition(self, isr: tuple[int, ...]) -> None:
        epoch = self._leader_epoch
        try:
            answer = await self._controller.alter_partition.remote(
                AlterPartitionRequest(self.topic, self.partition, self.broker_id, epoch, self._partition_epoch, isr)
            )
            if (
                self._role == ReplicaRole.LEADER
                and answer.leader_epoch == self._leader_epoch
                and answer.partition_epoch >= self._partition_epoch
            ):
                self._set_membership(self._replicas, answer.isr, answer.partition_epoch)
        except Exception:  # controller restarting: the next background turn proposes again
            logger.warning("%s-%d: ISR change to %s failed", self.topic, self.partition, list(isr), exc_info=True)
        finally:
            self._pending_isr = None
        await self._advance_hw()
        await self._notify()

    def _set_membership(
        self, replicas: list[int] | tuple[int, ...], isr: list[int] | tuple[int, ...], partition_epoch: int
    ) -> None:
        self._replicas, self._isr, self._partition_epoch = tuple(replicas), tuple(isr), partition_epoch
        now = time.monotonic()
        for b in self._replicas:
            # ISR members get a full lag period to show up before they can be dropped.
            if b != self.broker_id and b not in self._followers:
                self._followers[b] = _Follower(caught_up_at=now if b in self._isr else 0.0)
        for b in list(self._followers):
            if b not in self._replicas:
                del self._followers[b]

    # -- follower side of replication -----------------------------------------------------

    async def _follow(self, leader: Any, epoch: int) -> None:
        """Fetch from ``leader`` until the role or epoch changes (the controller cancels this task)."""
        truncated = False
        while not self._closed and self._role == ReplicaRole.FOLLOWER and self._leader_epoch == epoch:
            try:
                if self._fetch_paused:
                    await asyncio.sleep(0.02)
                    continue
                if not truncated:
                    await self._truncate_to_leader(leader, epoch)
                    truncated = True
                result = await leader.fetch.remote(
                    FetchRequest(
                        self._log.log_end_offset,
                        self._replication["replica.fetch.max.bytes"],
                        self._replication["replica.fetch.wait.max.ms"],
                        current_leader_epoch=epoch,
                        replica_id=self.broker_id,
                    )
                )
                if self._closed or self._role != ReplicaRole.FOLLOWER or self._leader_epoch != epoch:
                    return
                if self._fetch_paused:  # an answer that arrives after the cut is lost with it
                    continue
                if result.records:
                    info = self._log.append(result.records, assign_offsets=False)
                    self._assign_epochs(info.headers)
                leo = self._log.log_end_offset
                hw = min(result.high_watermark, leo)
                if hw > self._hw:
                    self._set_hw(hw)
                if result.log_start_offset > self._log.log_start_offset:
                    self._log.delete_records(min(result.log_start_offset, leo), high_watermark=leo)
            except asyncio.CancelledError:
                raise
            except OffsetOutOfRangeError:
                await self._reset_below_log_start(leader, epoch)
                truncated = False
            except (InvalidRequestError, CorruptRecordError):
                # Our log and the leader's disagree on batch boundaries: find the divergence again.
                logger.warning(
                    "%s-%d: follower append refused; re-truncating", self.topic, self.partition, exc_info=True
                )
                truncated = False
                await asyncio.sleep(0.05)
            except (
                NotLeaderOrFollowerError,
                FencedLeaderEpochError,
                UnknownLeaderEpochError,
                ray.exceptions.RayActorError,
            ):
                # The leader moved or died; the controller will tell us the new one.
                await asyncio.sleep(0.05)
            except Exception:
                logger.exception("%s-%d: follower fetch failed", self.topic, self.partition)
                await asyncio.sleep(0.2)

    async def _truncate_to_leader(self, leader: Any, epoch: int) -> None:
        """Cut the suffix that differs from the leader's log (KIP-279's epoch walk)."""
        while True:
            mine, leo = self._epochs.latest_epoch, self._log.log_end_offset
            if mine == UNDEFINED_EPOCH:
                # No epoch history (an empty log, or one written before the cache existed).
                self._truncate(self._hw)
                return
            theirs = await leader.offset_for_leader_epoch.remote(OffsetForLeaderEpochRequest(mine, epoch))
            their_epoch, their_end = theirs.leader_epoch, theirs.end_offset
            if self._role != ReplicaRole.FOLLOWER or self._leader_epoch != epoch:
                return
            if their_epoch == UNDEFINED_EPOCH:
                self._truncate(self._hw)
                return
            if their_epoch == mine:
                self._truncate(min(their_end, leo))
                return
            # The leader never had our last epoch: keep at most where its last common epoch
            # ended in both logs, then ask again about our (now older) last epoch.
            my_end = self._epochs.end_offset_for(their_epoch, leo)[1]
            target = min(their_end, my_end) if my_end >= 0 else self._hw
            self._truncate(target)
            if self._epochs.latest_epoch >= mine:  # no progress possible: stop rather than spin
                return

    def _truncate(self, offset: int) -> None:
        if offset < self._log.log_end_offset:
            logger.info(
                "%s-%d: broker %d truncates %d -> %d",
                self.topic,
                self.partition,
                self.broker_id,
                self._log.log_end_offset,
                offset,
            )
            self._log.truncate_to(offset)
        leo = self._log.log_end_offset
        self._epochs.truncate_from_end(leo)
        self._set_hw(min(self._hw, leo))

    async def _reset_below_log_start(self, leader: Any, epoch: int) -> None:
        start = (await leader.list_offsets.remote(ListOffsetsRequest(EARLIEST_TIMESTAMP, epoch))).offset
        if self._log.log_end_offset < start:
            # Everything we hold is older than the leader's log start: start over there.
            self._log.truncate_fully_and_start_at(start)
            self._epochs.clear()
            self._set_hw(start)

    def _assign_epochs(self, headers: list[BatchHeader]) -> None:
        latest = self._epochs.latest_epoch
        for h in headers:
            if h.partition_leader_epoch > latest:
                self._epochs.assign(h.partition_leader_epoch, h.base_offset)
                latest = h.partition_leader_epoch

    def _stop_fetcher(self) -> None:
        if self._fetcher is not None:
            self._fetcher.cancel()
            self._fetcher = None

    # -- background work and introspection ------------------------------------------------

    async def run(self) -> None:
        """Run the background loop (ISR shrink, retention, flush, HW checkpoint) until the replica closes.

        The controller calls it after creating the replica and keeps the call pending: when
        the actor dies the call fails, which is how the controller watches replicas. A
        second call (a restarted controller re-attaching) joins the loop already running.
        """
        if self._background is None:
            self._background = asyncio.get_running_loop().create_task(self._background_loop())
        await asyncio.shield(self._background)

    async def _background_loop(self) -> None:
        # The interval is read on every turn: become_leader may change it after the loop starts.
        last_retention = last_clean_check = last_metrics = time.monotonic()
        while not self._closed:
            await asyncio.sleep(0.1)
            try:
                if time.monotonic() - last_metrics >= TICK_S:
                    last_metrics = time.monotonic()
                    self._metrics.tick()
                if time.monotonic() - last_clean_check >= CLEANER_CHECK_S:
                    last_clean_check = time.monotonic()
                    self._maybe_start_cleaning()
                self._maybe_shrink_isr()
                self._checkpoint_hw()
                self._log.maybe_flush()
                if time.monotonic() - last_retention >= self._retention_check_ms / 1000:
                    last_retention = time.monotonic()
                    # producer.id.expiration.ms: forget idle producers (their snapshots shrink).
                    self._log.remove_expired_producers()
                    deleted = self._log.delete_old_segments(high_watermark=self._hw)
                    self._log.delete_pending_files()
                    if deleted:
                        self._epochs.truncate_from_start(self._log.log_start_offset)
                        logger.info("%s-%d: retention deleted %d segments", self.topic, self.partition, deleted)
            except Exception:  # a background error must not kill the replica
                logger.exception("%s-%d: background task failed", self.topic, self.partition)

    def _maybe_start_cleaning(self) -> None:
        """Compact the log in a worker thread when cleanup.policy has compact and it is dirty enough.

        Every replica cleans its own log (as each Kafka broker does), never past the high
        watermark. The cleaner swaps segments under the log's lock, so produce and fetch
        go on while it works; the thread keeps the actor's event loop free.
        """
        if "compact" not in self._config["cleanup.policy"]:
            return
        if self._cleaning is not None and not self._cleaning.done():
            return
        if cleanable(self._log, self._lso()):
            self._cleaning = asyncio.get_running_loop().create_task(self.clean_now())

    async def _finish_cleaning(self) -> None:
        """Let a cleaner pass in its thread finish before the log is closed under it."""
        if self._cleaning is not None and not self._cleaning.done():
            try:
                await self._cleaning
            except Exception:  # its failure was logged; closing must go on
                logger.exception("%s-%d: cleaner pass failed", self.topic, self.partition)

    async def clean_now(self, force: bool = False) -> dict[str, Any] | None:
        """Run one cleaner pass up to the last stable offset (never into an open transaction);
        returns its stats (None: nothing to do)."""
        stats = await asyncio.to_thread(clean, self._log, self._lso(), force=force)
        if stats is None:
            return None
        self._metrics.cleaned(stats)
        logger.info("%s-%d: cleaned %s", self.topic, self.partition, stats)
        return dataclasses.asdict(stats)

    def _checkpoint_hw(self) -> None:
        if self._hw != self._hw_checkpointed and not self._log.closed:
            write_offset(self._dir / HIGH_WATERMARK_FILE, self._hw)
            self._hw_checkpointed = self._hw

    async def describe(self) -> dict[str, Any]:
        """Offsets, role, epochs, ISR as this replica sees it, and size."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "broker_id": self.broker_id,
            "topic_id": self.topic_id,
            "role": self._role,
            "leader_id": self._leader_id,
            "leader_epoch": self._leader_epoch,
            "partition_epoch": self._partition_epoch,
            "replicas": list(self._replicas),
            "isr": list(self._isr),
            "follower_leos": {b: s.leo for b, s in self._followers.items()},
            "epochs": self._epochs.entries,
            "log_start_offset": self._log.log_start_offset,
            "log_end_offset": self._log.log_end_offset,
            "high_watermark": self._hw,
            "last_stable_offset": self._lso(),
            "first_unstable_offset": self._log.first_unstable_offset,
            "size_bytes": self._log.size_in_bytes,
            "segments": len(self._log.segments),
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    async def read_local(self, offset: int, max_bytes: int = 1048576) -> tuple[bytes, int]:
        """This replica's own batches from ``offset`` up to its log end, whatever its role.

        For tests and tools comparing replicas; returns (records, next offset).
        """
        data = self._log.read(offset, max_bytes)
        return data.records, data.next_offset

    async def pause_fetching(self, paused: bool) -> None:
        """Fault injection for tests: a paused follower stops fetching, as if cut off from its
        leader, while staying alive (and in the ISR until replica.lag.time.max.ms passes)."""
        self._fetch_paused = paused

    async def ping(self) -> int:
        """Liveness probe; returns the broker id."""
        return self.broker_id

    async def close(self, delete: bool = False) -> None:
        """Close the log cleanly (writes the clean-shutdown marker); optionally delete it."""
        self._stop_fetcher()
        self._closed = True
        self._role = ReplicaRole.OFFLINE
        await self._notify()
        await self._finish_cleaning()
        if not self._log.closed:
            self._checkpoint_hw()
            self._metrics.tick()  # the last counts; the log's gauges while it can still be read
            self._log.close()
        if delete:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """Consumers never read past this: every ISR member has the records below it."""
        return self._hw

    def _hw_value(self) -> int:
        return self._hw

    def _set_hw(self, hw: int) -> None:
        # The log needs every HW move: a completed transaction stays unstable until its
        # marker is below the HW.
        self._hw = hw
        self._log.update_high_watermark(hw)

    def _lso(self) -> int:
        """The last stable offset: read_committed consumers never read past it."""
        return self._log.last_stable_offset(self._hw)

    def _log_end(self) -> int:
        return self._log.log_end_offset

    def _read(self, offset: int, max_bytes: int, follower: bool = False, committed: bool = False) -> FetchResponse:
        hw = self._hw
        if follower:
            lso = hw  # followers replicate everything; they ignore the LSO
            data = self._log.read(offset, max_bytes)
        else:
            lso = self._log.last_stable_offset(hw)
            data = self._log.read(offset, max_bytes, max_offset=lso if committed else hw)
        aborted: tuple[AbortedTransaction, ...] = ()
        if committed and data.records:
            # Kafka's bound: the aborted transactions that overlap the returned batches.
            aborted = tuple(
                AbortedTransaction(txn.producer_id, txn.first_offset)
                for txn in self._log.collect_aborted_transactions(data.first_offset, data.next_offset)
            )
        return FetchResponse(
            data.records,
            hw,
            lso,
            self._log.log_start_offset,
            self._log.log_end_offset,
            self._leader_epoch,
            aborted,
        )

    def _worth_reading(self, limit: int, seen: int, offset: int, start_size: int, already: int, min_bytes: int) -> bool:
        """Whether a fetch waiting at ``offset`` should read again: something is readable and
        the readable end moved past ``seen`` or enough bytes were appended since ``start_size``."""
        if limit <= offset:
            return False
        return limit != seen or already + self._log.size_in_bytes - start_size >= max(min_bytes, 1)

    def _check_leader(self, leader_epoch: int) -> None:
        if self._closed or self._role != ReplicaRole.LEADER:
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

    async def _wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate`` holds (re-checked on every notify); False on timeout."""
        cond = self._condition()
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(predicate), max(0.0, timeout_s))
                return True
            except TimeoutError:
                return False

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()


def _has_control_batch(records: Any) -> bool:
    """Whether any whole batch in ``records`` has the control attribute (headers only)."""
    if not isinstance(records, bytes | bytearray | memoryview):
        return False  # refused as it is by the append
    return any(records[p + ATTRIBUTES_OFFSET + 1] & CONTROL_MASK for p, _ in batch_boundaries(records))


class _ReplicaMetrics:
    """What a replica records (``actors.metrics``): per request and per append, summed
    until its tick; the log's gauges on the tick. Never per record."""

    def __init__(self, replica: PartitionReplica, enabled: bool, namespace: str) -> None:
        self.enabled = enabled
        self._replica = replica
        if not enabled:
            return
        self._rec = rec = Recorder(namespace, enabled)
        self._m = rec.metrics
        topic, partition, broker = replica.topic, str(replica.partition), str(replica.broker_id)
        self._topic_tags = (("topic", topic), ("broker", broker))
        self._replica_tags = rec.tags(topic=topic, partition=partition, broker=broker)
        self._partition_tags = rec.tags(topic=topic, partition=partition)
        self._clean_tags = (("topic", topic), ("broker", broker))
        self._request_tags: dict[tuple[str, str], dict[str, str]] = {}
        self._broker_tags = rec.tags(broker=broker)
        self._last_clean = time.monotonic()

    def _request(self, request: str, acks: Any) -> dict[str, str]:
        # Tags only ever take Kafka's acks values: a hostile request must not mint series.
        acks = str(acks) if acks in (-1, 0, 1) and type(acks) is int else ("" if acks is None else "invalid")
        key = (request, acks)
        tags = self._request_tags.get(key)
        if tags is None:
            broker = str(self._replica.broker_id)
            tags = self._request_tags[key] = self._rec.tags(broker=broker, path=PATH_ACTOR, request=request, acks=acks)
        return tags

    def appended(self, info: Any, size: int) -> None:
        """A client's batches were appended (not a duplicate): records and bytes in."""
        if self.enabled:
            rec, m = self._rec, self._m
            rec.add(m.messages_in, info.last_offset - info.first_offset + 1, self._topic_tags)
            rec.add(m.bytes_in, size, self._topic_tags)

    def request_done(self, request: str, acks: Any, started: float) -> None:
        rec, m = self._rec, self._m
        rec.add(m.produce_requests if request == "Produce" else m.fetch_requests, 1, self._topic_tags)
        rec.observe_ms(m.request_time, started, self._request(request, acks))

    def produce_failed(self, acks: Any, exc: BaseException, started: float | None = None) -> None:
        if self.enabled:
            self._failed("Produce", acks, exc, started)

    def _failed(self, request: str, acks: Any, exc: BaseException, started: float | None) -> None:
        rec, m = self._rec, self._m
        failed = m.failed_produce if request == "Produce" else m.failed_fetch
        rec.add(failed, 1, self._topic_tags)
        tags = self._request(request, acks)
        rec.add(m.request_errors, 1, (*tags.items(), ("error", error_name(exc))))
        if started is not None:
            rec.observe_ms(m.request_time, started, tags)

    def fetched(self, follower: bool, size: int, started: float) -> None:
        rec, m = self._rec, self._m
        if follower:
            rec.add(m.replication_bytes_out, size, self._topic_tags)
            rec.observe_ms(m.request_time, started, self._request("FetchFollower", None))
        else:
            rec.add(m.bytes_out, size, self._topic_tags)
            rec.add(m.fetch_requests, 1, self._topic_tags)
            rec.observe_ms(m.request_time, started, self._request("FetchConsumer", None))

    def fetch_failed(self, follower: bool, exc: BaseException, started: float) -> None:
        self._failed("FetchFollower" if follower else "FetchConsumer", None, exc, started)

    def cleaned(self, stats: Any) -> None:
        self._last_clean = time.monotonic()
        if self.enabled:
            self._rec.add(self._m.cleaner_bytes_read, stats.bytes_read, self._clean_tags)
            self._rec.add(self._m.cleaner_bytes_written, stats.bytes_written, self._clean_tags)

    def tick(self) -> None:
        """Counters to Ray; the log's gauges (and the flushes since the last tick)."""
        if not self.enabled:
            return
        replica, m, tags = self._replica, self._m, self._replica_tags
        self._rec.flush()
        log = replica._log
        if log.closed:
            return
        m.log_size.set(log.size_in_bytes, tags)
        m.log_segments.set(len(log.segments), tags)
        m.log_start_offset.set(log.log_start_offset, tags)
        m.log_end_offset.set(log.log_end_offset, tags)
        if replica._role == ReplicaRole.LEADER:
            m.high_watermark.set(replica._hw, self._partition_tags)
        flushes = log.flush_times_ms
        while flushes:
            m.flush_time.observe(flushes.popleft(), self._broker_tags)
        if "compact" in replica._config["cleanup.policy"]:
            m.cleaner_dirty_ratio.set(dirty_ratio(log, replica._lso()), tags)
            m.cleaner_time_since_last_run.set((time.monotonic() - self._last_clean) * 1000.0, tags)
