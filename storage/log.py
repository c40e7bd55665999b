"""The log of one partition: a directory of segments with appends, reads, recovery and retention.

As Kafka's ``UnifiedLog``/``LocalLog`` for ``<log.dir>/<topic>-<partition>/``:

- appends validate each batch header and CRC, patch offsets (and LogAppendTime) and
  write the same bytes; a leader append first walks every record (``storage.log_validator``,
  Kafka's LogValidator: the one per-record step), a follower's keeps the leader's bytes;
- reads return whole batches from the one holding the fetch offset;
- the segment list is an immutable tuple replaced on change (copy-on-write), so a reader
  holding a snapshot never sees a half-updated list; writers serialise on a lock;
- recovery on open is ``storage.log_loader``'s (Kafka's LogLoader): every segment's
  indexes are sanity-checked and one that fails is rebuilt (one warning naming the
  file); a clean-shutdown marker skips the scan; otherwise the segments from the
  recovery point on are scanned batch by batch and the log is cut at the first invalid
  batch (later segments are deleted); file names come from ``storage.log_files``;
- retention deletes whole segments by time (largest timestamp, KIP-32), size and log
  start offset, renaming their files ``.deleted`` before removing them;
- one owner per directory, enforced by an advisory file lock;
- compaction (``cleanup.policy`` with ``compact``) is ``storage.cleaner``'s, which works on
  a Log (``clean(log)``, ``cleanable(log)``, ``dirty_ratio(log)``); the log does not know
  the cleaner: it exposes what a pass needs (its clock, a cleaning lock, its truncation
  count, the last records of active producers) and :meth:`Log.replace_segments` to swap
  cleaned segments in; opening a log finishes or undoes an interrupted swap;
- idempotence and transactions (``storage.producer_state``): every batch with a producer
  id is checked before anything is written (epoch, sequence, duplicate of one of the
  producer's last five batches, transaction state) and the state updated after the
  write; ABORT markers go to the active segment's ``.txnindex``; open and unreplicated
  transactions give the first unstable offset (the LSO is min(it, high watermark)).
  Producer-state snapshots are taken at roll and clean close; opening and truncation load
  the newest one at or below where they start and replay the log after it (rebuilding
  the ``.txnindex`` of every segment a recovery scanned).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from storage import batch_header, log_validator
from storage.batch_header import (
    CONTROL_MASK,
    CREATE_TIME,
    MAGIC_OFFSET,
    TRANSACTIONAL_MASK,
    BatchHeader,
    read_header,
)
from storage.checkpoint import fsync_dir, read_offset, write_offset
from storage.config import LONG_MAX, Config, log_config
from storage.errors import (
    CorruptRecordError,
    InvalidRequestError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from storage.file_lock import FileLock
from storage.log_files import (
    CLEAN_SHUTDOWN_FILE,
    CLEANED_SUFFIX,
    CLEANER_CHECKPOINT_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    SWAP_SUFFIX,
)
from storage.log_loader import load_segments
from storage.log_results import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    LogAppendInfo,
    TimestampOffset,
)
from storage.log_validator import decompressed_limit
from storage.producer_state import (
    Analysis,
    AppendOrigin,
    CompletedTxn,
    Duplicate,
    ProducerStateManager,
    VerificationGuard,
    read_marker,
)
from storage.segment import LogSegment
from storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

_View = tuple[tuple[LogSegment, ...], tuple[int, ...]]


class Log:
    """The segmented log of one partition directory, owned exclusively by this object."""

    def __init__(
        self,
        dir: str | os.PathLike[str],
        config: Config | Mapping[str, Any] | None = None,
        *,
        time_ms: Callable[[], int] | None = None,
    ) -> None:
        self.dir = Path(dir)
        self.config: Config = config if isinstance(config, Config) else log_config(config)
        self._time = time_ms or (lambda: time.time_ns() // 1_000_000)
        self._write_lock = threading.RLock()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False
        self._offline = False
        # Read on every append: plain attributes, not Config lookups.
        self._max_message_bytes: int = self.config.max_message_bytes
        self._segment_bytes: int = self.config.segment_bytes
        self._log_append_time = self.config.message_timestamp_type == "LogAppendTime"
        self._flush_messages: int = self.config.flush_messages
        self._flush_ms_set = self.config.flush_ms < LONG_MAX
        # Kafka's LogValidator refuses keyless records on compacted topics.
        self._compacted = "compact" in self.config.cleanup_policy
        self._max_decompressed = decompressed_limit(self._max_message_bytes)
        self._cleaning = threading.Lock()  # one clean pass at a time
        self._truncations = 0  # bumped by truncation: a clean pass started before it must not swap
        self._producer_state = ProducerStateManager(self.dir, self.config.producer_id_expiration_ms)
        self._high_watermark = 0  # as last told by update_high_watermark
        self._checkpointed_recovery_point = -1  # the recovery point as its checkpoint file holds it
        self.dir.mkdir(parents=True, exist_ok=True)
        self._file_lock = FileLock(self.dir)
        self._file_lock.acquire()
        try:
            self._load()
        except BaseException:
            self._file_lock.release()
            raise

    # -- loading and recovery -------------------------------------------------------------

    def _load(self) -> None:
        """Open the segments (:func:`storage.log_loader.load_segments`: every index checked,
        a torn tail recovered), then rebuild the producer state and checkpoint."""
        now = self._time()
        loaded = load_segments(self.dir, self.config, now)
        kept = loaded.segments
        self._set_segments(kept)
        self._log_end_offset = kept[-1].next_offset
        self._log_start_offset = max(loaded.log_start_checkpoint or 0, kept[0].base_offset)
        self._recovery_point = self._log_end_offset
        self._last_flush_ms = now
        # The durations (ms) of recent flushes that synced something, for the owner's metrics
        # (Kafka's LogFlushRateAndTimeMs); bounded, so nobody reading them costs nothing.
        self.flush_times_ms: deque[float] = deque(maxlen=1024)
        if self._log_start_offset > self._log_end_offset:
            self._truncate_fully_locked(self._log_start_offset)
        else:
            self._rebuild_producer_state(self._log_end_offset, [s for s in loaded.recovered if s in kept])
        self._write_recovery_point()
        fsync_dir(self.dir)

    def _set_segments(self, segments: tuple[LogSegment, ...]) -> None:
        # One attribute assignment: a reader sees the old or the new pair, never a mix.
        self._view: _View = (segments, tuple(s.base_offset for s in segments))

    # -- properties -----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset a reader may fetch."""
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Offsets below this are fsynced and need no scan after a crash."""
        return self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """An immutable snapshot of the segments, oldest first."""
        return self._view[0]

    @property
    def active_segment(self) -> LogSegment:
        """The segment taking appends."""
        return self._view[0][-1]

    @property
    def size_in_bytes(self) -> int:
        """Bytes in all segments' ``.log`` files."""
        return sum(s.size for s in self._view[0])

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -- append ---------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = -1,
        assign_offsets: bool = True,
        origin: AppendOrigin | str = AppendOrigin.CLIENT,
        verify: bool = False,
    ) -> LogAppendInfo:
        """Append complete record batches and return where they went.

        As leader (``assign_offsets=True``) batches get consecutive offsets from the log end
        and ``leader_epoch``; batches larger than max.message.bytes are rejected, and every
        record is validated first (:mod:`storage.log_validator`, Kafka's LogValidator:
        unreadable records are CorruptRecordError; a control batch from ``origin`` CLIENT,
        offset deltas other than 0..n-1 and, on a compacted topic, keyless records are
        InvalidRecordError). As follower (``assign_offsets=False``, origin REPLICATION
        implied) the leader's offsets are kept and must start at or after the log end.
        Invalid input raises (CorruptRecordError, InvalidRecordError, RecordTooLargeError,
        InvalidRequestError) and leaves the log untouched; an I/O error raises
        KafkaStorageError and leaves the log as it was before the call.

        Batches with a producer id are checked against the producer state first (see
        :mod:`storage.producer_state`): ``origin`` CLIENT (producer data) gets the epoch,
        sequence, duplicate and transaction checks, COORDINATOR (markers, transactional
        offset commits) the epoch checks only, and a follower append (REPLICATION) none.
        ``origin`` may also be given as its value ("client", "coordinator"). A refused batch raises
        InvalidProducerEpochError, OutOfOrderSequenceError, InvalidTxnStateError,
        TransactionCoordinatorFencedError or InvalidRecordError, with nothing written. A
        request repeating one of its producer's last five batches appends nothing and
        returns that batch's original offsets with ``duplicate=True``.

        ``verify`` (a leader's CLIENT append, KIP-890): a transactional batch that would open
        a transaction here needs the coordinator's confirmation first; without one the
        append raises VerificationRequired and writes nothing (see
        :mod:`storage.producer_state` and :meth:`verified`).
        """
        if len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] < batch_header.CURRENT_MAGIC:
            from storage.legacy import upconvert  # magic 0/1 message sets; imported only when met

            records = upconvert(records)
        view = memoryview(records)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if not assign_offsets:
            origin = AppendOrigin.REPLICATION
        elif type(origin) is not AppendOrigin or origin is AppendOrigin.REPLICATION:
            origin = _leader_origin(origin)
        # Before the lock: validation is the costly part of an append and reads only the request.
        headers, fixes = log_validator.check_request(
            view,
            self._max_message_bytes if assign_offsets else 2**31 - 1,
            assign_offsets,
            origin,
            self._compacted,
            self._max_decompressed,
            BatchHeader,
        )
        size = len(view)
        if size > self._segment_bytes:
            raise RecordListTooLargeError(f"{size} bytes do not fit in a segment of {self._segment_bytes}")
        with self._write_lock:
            if self._closed or self._offline:
                self._check_writable()
            log_append_time = -1
            source: memoryview | bytearray = view  # where the batch bodies are, at the headers' positions
            if not assign_offsets:
                first_offset, next_offset = headers[0].base_offset, headers[-1].next_offset
                self._check_follower_offsets(headers)
                parts: list[memoryview | bytearray] = [view]  # the leader's bytes as they are
            elif self._log_append_time:
                # The timestamp is covered by the CRC, which spans the body: patch a copy.
                first_offset = self._log_end_offset
                buf = bytearray(view)
                next_offset = batch_header.assign_offsets(buf, headers, first_offset, leader_epoch)
                log_append_time = self._time()
                batch_header.set_log_append_time(buf, headers, log_append_time)
                headers = [read_header(buf, h.position) for h in headers]
                parts = [buf]
                source = buf
            elif fixes:
                # Headers that disagree with their records (Kafka rewrites them): patch a copy.
                first_offset = self._log_end_offset
                buf = bytearray(view)
                next_offset = batch_header.assign_offsets(buf, headers, first_offset, leader_epoch)
                for index, max_timestamp in fixes:
                    batch_header.set_max_timestamp(buf, headers[index], CREATE_TIME, max_timestamp)
                headers = [read_header(buf, h.position) for h in headers]
                parts = [buf]
                source = buf
            else:
                first_offset = self._log_end_offset
                parts, headers, next_offset = log_validator.patch_headers(view, headers, first_offset, leader_epoch)
            first = headers[0]
            single = len(headers) == 1
            max_timestamp = first.max_timestamp if single else max(h.max_timestamp for h in headers)
            analysis: Analysis | None = None
            if first.producer_id >= 0 or not single or first.attributes & _TXN_OR_CONTROL:
                # Checked before anything is written: a refused batch leaves the log untouched.
                verify_at = self._time() if verify and origin is AppendOrigin.CLIENT else None
                analysis = self._producer_state.analyze(headers, source, origin, verify_at)
                if type(analysis) is Duplicate:
                    return self._duplicate_info(analysis)
            segment = self.active_segment
            if segment.should_roll(size, max_timestamp, next_offset - 1, self._time, self._segment_bytes):
                segment = self._roll_locked(max(first_offset, self._log_end_offset))
            try:
                segment.append(parts, size, headers)
            except KafkaStorageError:
                raise
            except OSError as exc:  # the partial write could not be undone: stop taking writes
                self._offline = True
                raise KafkaStorageError(f"{self.dir} went offline: {exc}") from exc
            self._log_end_offset = next_offset
            if analysis is not None:
                completed = self._producer_state.apply(analysis)
                if completed:
                    self._index_aborted(completed, segment)
            if next_offset - self._recovery_point >= self._flush_messages or self._flush_ms_set:
                self._maybe_flush()
            # Positional, without NamedTuple's Python-level __new__ (a third of the cost):
            # first/last offset, log append time, log start offset, max timestamp, batch
            # count, size, headers, duplicate.
            return _new_tuple(
                LogAppendInfo,
                (first_offset, next_offset - 1, log_append_time, self._log_start_offset, max_timestamp,
                 len(headers), size, headers, False),
            )  # fmt: skip

    def _duplicate_info(self, duplicate: Duplicate) -> LogAppendInfo:
        batch = duplicate.batch
        return LogAppendInfo(
            first_offset=batch.first_offset,
            last_offset=batch.last_offset,
            log_append_time=batch.timestamp if self._log_append_time else -1,
            log_start_offset=self._log_start_offset,
            max_timestamp=batch.timestamp,
            batch_count=0,
            size_bytes=0,
            headers=[],
            duplicate=True,
        )

    def _index_aborted(self, completed: Sequence[tuple[CompletedTxn, int]], segment: LogSegment) -> None:
        for txn, lso in completed:
            if txn.is_aborted:
                try:
                    segment.update_txn_index(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
                except OSError as exc:
                    self._offline = True
                    raise KafkaStorageError(f"{self.dir} went offline writing its transaction index: {exc}") from exc

    def _check_writable(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.dir} is closed")
        if self._offline:
            raise KafkaStorageError(f"log {self.dir} is offline after an I/O error")

    def _check_follower_offsets(self, headers: list[BatchHeader]) -> None:
        if headers[0].base_offset < self._log_end_offset:
            raise InvalidRequestError(
                f"follower append at offset {headers[0].base_offset} is below the log end {self._log_end_offset}"
            )
        expected = headers[0].base_offset
        for h in headers:
            if h.base_offset < expected:
                raise CorruptRecordError(f"batch offsets go backwards: {h.base_offset} after {expected - 1}")
            expected = h.next_offset

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op when the active one is empty)."""
        with self._write_lock:
            self._check_writable()
            return self._roll_locked(self._log_end_offset)

    def _roll_locked(self, base_offset: int) -> LogSegment:
        old = self.active_segment
        if old.size == 0:
            if old.base_offset == base_offset:
                return old
            # An empty active segment at another offset (a follower jumping ahead): replace it.
            segments = self.segments[:-1]
            old.delete()
        else:
            segments = self.segments
            old.on_becoming_inactive()
        try:
            new = LogSegment(self.dir, base_offset, self.config, created_ms=self._time(), active=True)
            # The new files' names are durable before anything written to them can be: a
            # flush syncs their data, never the directory (as Kafka's flushParentDir on roll).
            fsync_dir(self.dir)
        except OSError as exc:
            raise KafkaStorageError(f"could not roll {self.dir}: {exc}") from exc
        self._set_segments((*segments, new))
        log.info("%s: rolled new segment at offset %d", self.dir, base_offset)
        if old.size:
            # As Kafka, the finished segment is made durable now; the log is recoverable up to it.
            # Its indexes first, always: the roll just wrote their final entry and trimmed them,
            # and when flush.messages had already synced its data the flush below skips it.
            try:
                old.flush_indexes()
            except OSError as exc:
                raise KafkaStorageError(f"flush of {old.log_path} failed: {exc}") from exc
            self._flush_locked(base_offset)
        # The producer state as of the new segment: recovery and truncation replay from here.
        self._take_producer_snapshot(base_offset)
        return new

    def _take_producer_snapshot(self, offset: int) -> None:
        """Snapshot the producer state at ``offset`` and prune the older snapshots.

        Kept, as Kafka keeps them: the snapshots at the bases of the last two segments
        (recovery scans from the recovery point's segment, rolled and flushed together)
        and the newest one; deeper truncation replays from the log start.
        """
        state = self._producer_state
        try:
            state.take_snapshot(offset)
            segments = self.segments
            bases = {s.base_offset for s in segments[-2:]}
            offsets = state.snapshot_offsets()
            for old in offsets[:-1]:
                if old not in bases:
                    state.snapshot_path(old).unlink(missing_ok=True)
        except OSError as exc:  # not fatal: the next recovery replays more of the log
            log.warning("%s: could not write the producer state snapshot at %d: %s", self.dir, offset, exc)

    # -- flush ----------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync the segments holding offsets below ``offset`` (default: everything): the new recovery point."""
        with self._write_lock:
            self._flush_locked(self._log_end_offset if offset is None else min(offset, self._log_end_offset))

    def maybe_flush(self) -> None:
        """Flush if flush.messages or flush.ms says so (call periodically for flush.ms)."""
        with self._write_lock:
            if not self._closed:
                self._maybe_flush()

    def _maybe_flush(self) -> None:
        unflushed = self._log_end_offset - self._recovery_point
        if unflushed <= 0:
            return
        if unflushed >= self.config.flush_messages or self._time() - self._last_flush_ms >= self.config.flush_ms:
            self._flush_locked(self._log_end_offset)

    def _flush_locked(self, offset: int) -> None:
        if offset <= self._recovery_point:
            return
        started = time.perf_counter()
        try:
            for segment in self.segments:
                if segment.base_offset < offset and segment.next_offset > self._recovery_point:
                    segment.flush()
            self._recovery_point = offset
            # After a crash recovery scans from the start of the segment holding the checkpointed
            # recovery point, so moving it within that segment buys nothing: with flush.messages=1
            # it would cost three more syncs per append (file, rename, directory).
            if self._segment_base(offset) != self._segment_base(self._checkpointed_recovery_point):
                self._write_recovery_point()
        except OSError as exc:
            raise KafkaStorageError(f"flush of {self.dir} failed: {exc}") from exc
        self._last_flush_ms = self._time()
        self.flush_times_ms.append((time.perf_counter() - started) * 1000.0)

    def _segment_base(self, offset: int) -> int | None:
        """Base offset of the segment holding ``offset`` (the last one for the log end), or None."""
        bases = self._view[1]
        n = bisect.bisect_right(bases, offset) - 1
        return bases[n] if n >= 0 else None

    def _write_recovery_point(self) -> None:
        write_offset(self.dir / RECOVERY_POINT_FILE, self._recovery_point)
        self._checkpointed_recovery_point = self._recovery_point

    # -- reads ----------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``offset``, about ``max_bytes`` at most.

        Batches whose base offset is >= ``max_offset`` (the high watermark) are left out.
        With ``min_one_batch`` the first batch is returned even if larger than
        ``max_bytes``. Raises OffsetOutOfRangeError outside [log start, log end]; at the
        log end the records are empty.
        """
        segments, bases = self._view
        start, end = self._log_start_offset, self._log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {end}] of {self.dir.name}")
        empty = FetchDataInfo(b"", offset, offset, offset, start, end)
        if offset == end or (max_offset is not None and offset >= max_offset):
            return empty
        n = max(0, bisect.bisect_right(bases, offset) - 1)
        while n < len(segments):
            segment = segments[n]
            try:
                max_position = self._position_limit(segment, max_offset)
                result = segment.read(offset, max_bytes, max_position, min_one_batch)
            except (OSError, ValueError) as exc:  # the segment was deleted under this snapshot
                if offset < self._log_start_offset:
                    raise OffsetOutOfRangeError(f"offset {offset} was deleted while being read") from exc
                raise KafkaStorageError(f"read of {segment.log_path} failed: {exc}") from exc
            if result is not None:
                first, records, next_offset = result
                if not records:
                    return empty
                return FetchDataInfo(
                    records, offset, first.base_offset, next_offset, start, end, segment.base_offset, first.position
                )
            n += 1  # the offset lies past this segment's last batch
        return empty

    @staticmethod
    def _position_limit(segment: LogSegment, max_offset: int | None) -> int | None:
        """File position of the first batch in ``segment`` whose base offset is >= ``max_offset``."""
        if max_offset is None or max_offset >= segment.next_offset:
            return None
        header = segment.translate_offset(max_offset)
        if header is None:
            return None
        return header.position if header.base_offset >= max_offset else header.position + header.size

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """ListOffsets: the first offset whose record timestamp is >= ``timestamp``.

        EARLIEST_TIMESTAMP / LATEST_TIMESTAMP give the log start / end offset,
        MAX_TIMESTAMP the record with the largest timestamp. None when no record is that
        recent.
        """
        start, end = self._log_start_offset, self._log_end_offset
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, end)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, start)
        segments = [s for s in self.segments if s.next_offset > start and s.size > 0]
        if timestamp == MAX_TIMESTAMP:
            if not segments:
                return None
            best = max(segments, key=lambda s: s.max_timestamp_so_far)
            if best.max_timestamp_so_far < 0:
                return None
            found = best.find_offset_by_timestamp(best.max_timestamp_so_far, start)
            return TimestampOffset(*found) if found else None
        for segment in segments:
            # Segments are in offset order; the first whose largest timestamp reaches the target holds it.
            if segment.max_timestamp_so_far >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return TimestampOffset(*found)
        return None

    # -- truncation and log start ---------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything from ``offset`` on (a follower diverged); return whether anything was removed.

        The batch holding ``offset`` goes whole, so the new log end is the first offset of
        that batch (followers truncate at batch boundaries, where the two agree).
        """
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot truncate to negative offset {offset}")
        with self._write_lock:
            self._check_writable()
            if offset >= self._log_end_offset:
                return False
            segments = self.segments
            if offset < segments[0].base_offset:
                self._truncate_fully_locked(offset)
                return True
            keep = tuple(s for s in segments if s.base_offset <= offset)
            dropped = [s for s in segments if s.base_offset > offset]
            active = keep[-1]
            self._truncate_cleaner_checkpoint(offset)
            try:
                if offset < self._checkpointed_recovery_point:
                    # On disk before any file changes: a power cut in the middle then has the
                    # truncated segment scanned, which finds where it now ends and drops the
                    # segments after it. Checkpointed later, the segment would be trusted as
                    # flushed, and those segments served after a gap.
                    self._recovery_point = min(self._recovery_point, offset)
                    self._write_recovery_point()
                active.truncate_to(offset)
                active.make_active()
            except OSError as exc:
                self._offline = True
                raise KafkaStorageError(f"truncation of {self.dir} failed: {exc}") from exc
            self._set_segments(keep)
            self._schedule_delete(dropped)
            self._log_end_offset = active.next_offset
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._write_checkpoints()
            self._rebuild_producer_state(self._log_end_offset)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset``."""
        with self._write_lock:
            self._check_writable()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        self._truncate_cleaner_checkpoint(offset)
        old = self.segments
        for segment in old:
            segment.rename_to_deleted()
        new = LogSegment(self.dir, offset, self.config, created_ms=self._time(), active=True)
        self._set_segments((new,))
        self._schedule_delete(list(old), renamed=True)
        self._log_end_offset = self._log_start_offset = self._recovery_point = offset
        self._write_checkpoints()
        self._producer_state.truncate_fully_and_start_at(offset)

    def delete_records(self, offset: int, *, high_watermark: int | None = None) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); return the new log start.

        The offset must not pass the high watermark (default: the log end). The new start
        is checkpointed so it survives a restart, and segments wholly below it are deleted.
        """
        with self._write_lock:
            self._check_writable()
            limit = self._log_end_offset if high_watermark is None else high_watermark
            if offset > limit or offset < 0:
                raise OffsetOutOfRangeError(f"cannot delete records up to {offset}: the limit is {limit}")
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                write_offset(self.dir / LOG_START_OFFSET_FILE, offset)
                self._delete_log_start_breached(limit)
                self._producer_state.on_log_start_offset_incremented(self._log_start_offset)
            return self._log_start_offset

    def _truncate_cleaner_checkpoint(self, offset: int) -> None:
        """Offsets from ``offset`` on are going: they are dirty again (Kafka's maybeTruncateCheckpoint)."""
        self._truncations += 1
        path = self.dir / CLEANER_CHECKPOINT_FILE
        checkpoint = read_offset(path)
        if checkpoint is not None and checkpoint > offset:
            write_offset(path, offset)

    def _write_checkpoints(self) -> None:
        write_offset(self.dir / LOG_START_OFFSET_FILE, self._log_start_offset)
        self._write_recovery_point()

    # -- retention ------------------------------------------------------------------------

    def delete_old_segments(self, *, high_watermark: int | None = None) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; return segments deleted.

        Whole segments only, oldest first, never past ``high_watermark`` (default: the log
        end). If every segment expires, a new empty active segment is rolled first.
        """
        with self._write_lock:
            self._check_writable()
            self.delete_pending_files()
            limit = self._log_end_offset if high_watermark is None else high_watermark
            deleted = self._delete_log_start_breached(limit)
            if "delete" in self.config.cleanup_policy:
                deleted += self._delete_retention_ms_breached(limit)
                deleted += self._delete_retention_size_breached(limit)
            return deleted

    def _delete_retention_ms_breached(self, limit: int) -> int:
        retention = self.config.retention_ms
        if retention < 0:
            return 0
        now = self._time()
        return self._delete_while(lambda s, nxt: now - s.largest_timestamp > retention, limit, "retention.ms")

    def _delete_retention_size_breached(self, limit: int) -> int:
        retention = self.config.retention_bytes
        excess = self.size_in_bytes - retention
        if retention < 0 or excess <= 0:
            return 0

        def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size < 0:
                return False
            excess -= segment.size
            return True

        return self._delete_while(breached, limit, "retention.bytes")

    def _delete_log_start_breached(self, limit: int) -> int:
        start, end = self._log_start_offset, self._log_end_offset

        def breached(segment: LogSegment, nxt: LogSegment | None) -> bool:
            return nxt.base_offset <= start if nxt is not None else start >= end

        return self._delete_while(breached, limit, "log start offset")

    def _delete_while(self, predicate: Callable[[LogSegment, LogSegment | None], bool], limit: int, reason: str) -> int:
        segments = self.segments
        deletable: list[LogSegment] = []
        for n, segment in enumerate(segments):
            nxt = segments[n + 1] if n + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            if nxt is None and segment.size == 0:
                break
            if upper > limit or not predicate(segment, nxt):
                break
            deletable.append(segment)
        if not deletable:
            return 0
        if len(deletable) == len(segments):
            self._roll_locked(self._log_end_offset)  # keep an active segment to append to
        remaining = tuple(s for s in self.segments if s not in deletable)
        self._set_segments(remaining)
        self._schedule_delete(deletable)
        log.info("%s: deleting %d segments by %s", self.dir, len(deletable), reason)
        if remaining[0].base_offset > self._log_start_offset:
            self._log_start_offset = remaining[0].base_offset
            write_offset(self.dir / LOG_START_OFFSET_FILE, self._log_start_offset)
            self._producer_state.on_log_start_offset_incremented(self._log_start_offset)
        return len(deletable)

    def _schedule_delete(self, segments: list[LogSegment], renamed: bool = False) -> None:
        """Rename the files ``.deleted`` now; remove them after file.delete.delay.ms.

        The delay lets readers holding an older snapshot finish with the open files.
        """
        deadline = self._time() + self.config.file_delete_delay_ms
        for segment in segments:
            if not renamed:
                segment.rename_to_deleted()
            self._pending_deletes.append((deadline, segment))
        if self.config.file_delete_delay_ms == 0:
            self.delete_pending_files()

    def delete_pending_files(self, force: bool = False) -> None:
        """Remove the files of deleted segments whose file.delete.delay.ms has passed."""
        now = self._time()
        due = [entry for entry in self._pending_deletes if force or entry[0] <= now]
        for entry in due:
            self._pending_deletes.remove(entry)
            entry[1].delete()

    # -- producer state and transactions ---------------------------------------------------

    @property
    def producer_state(self) -> ProducerStateManager:
        """The producer entries and transactions of this log (for describe and tests)."""
        return self._producer_state

    @property
    def first_unstable_offset(self) -> int | None:
        """The lowest first offset of an open transaction, or of a completed one whose marker
        the high watermark has not passed; None when there is none."""
        fuo = self._producer_state.first_unstable_offset
        if fuo is None:
            return None
        return max(fuo, self._log_start_offset)

    def verified(self, guard: VerificationGuard) -> bool:
        """The transaction coordinator confirmed ``guard`` (from VerificationRequired): the
        append may be tried again. False when the guard went stale meanwhile."""
        with self._write_lock:
            return self._producer_state.verified(guard)

    def forget_verification(self, guard: VerificationGuard) -> None:
        """The coordinator refused ``guard``'s transaction: drop the verification."""
        with self._write_lock:
            self._producer_state.forget_verification(guard)

    def update_high_watermark(self, high_watermark: int) -> None:
        """The replica's high watermark moved: completed transactions below it stop holding the LSO."""
        with self._write_lock:
            self._high_watermark = high_watermark
            self._producer_state.on_high_watermark_updated(high_watermark)

    def last_stable_offset(self, high_watermark: int) -> int:
        """min(first unstable offset, ``high_watermark``): read_committed consumers read below it."""
        fuo = self.first_unstable_offset
        return high_watermark if fuo is None or fuo >= high_watermark else fuo

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with last offset >= ``start_offset`` and first offset < ``upper_bound_offset``.

        As Kafka: the segments from the one holding ``start_offset`` on, until an entry's
        last stable offset reaches the upper bound.
        """
        segments, bases = self._view
        n = max(0, bisect.bisect_right(bases, start_offset) - 1)
        out: list[AbortedTxn] = []
        for segment in segments[n:]:
            found, complete = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            out.extend(found)
            if complete:
                break
        return out

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for producer.id.expiration.ms without an open transaction; return how many."""
        with self._write_lock:
            return self._producer_state.remove_expired_producers(self._time() if now_ms is None else now_ms)

    def _rebuild_producer_state(self, end: int, rebuild: Sequence[LogSegment] = ()) -> None:
        """Load the newest usable snapshot and replay the log from it to ``end`` (Kafka's rebuildProducerState).

        The ``.txnindex`` of each segment in ``rebuild`` (scanned by recovery) is rebuilt
        from the replay, which then starts at or below its base offset.
        """
        state = self._producer_state
        state.delete_snapshots_after(end)
        state.delete_snapshots_before(self._log_start_offset)
        limit = min([end, *(s.base_offset for s in rebuild)])
        snapshot = state.load_latest_snapshot(limit, self._time())
        start = max(snapshot if snapshot is not None else self._log_start_offset, self._log_start_offset)
        for segment in rebuild:
            segment.txn_index.reset()
        rebuilding = {id(s) for s in rebuild}
        replayed = loaded = 0
        for segment in self.segments:
            if segment.next_offset <= start or segment.base_offset >= end or segment.size == 0:
                continue
            position = 0
            if segment.base_offset < start:
                header = segment.translate_offset(start)
                if header is None:
                    continue
                position = header.position
            index = id(segment) in rebuilding
            for h in segment.headers_from(position):
                if h.base_offset >= end:
                    break
                replayed += 1
                if h.producer_id < 0 or h.last_offset < start:
                    continue
                loaded += 1
                marker = None
                if h.attributes & CONTROL_MASK:
                    try:
                        marker = read_marker(segment.read_bytes(h.position, h.size))
                    except (CorruptRecordError, ValueError) as exc:
                        log.warning("%s: unreadable control batch at offset %d: %s", self.dir, h.base_offset, exc)
                        continue
                done = state.load_batch(h, marker)
                if done is not None and index and done[0].is_aborted:
                    txn, lso = done
                    segment.update_txn_index(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
        state.on_high_watermark_updated(min(self._high_watermark, end))
        for segment in rebuild:
            # Durable before the recovery point passes the segment: it is not scanned again.
            segment.txn_index.flush()
        if loaded or replayed > _REPLAY_WITHOUT_SNAPSHOT:
            self._take_producer_snapshot(end)

    # -- what the cleaner uses (storage.cleaner works on a Log; the log does not know it) ---

    def time_ms(self) -> int:
        """The log's clock, in milliseconds (a test may give the log its own)."""
        return self._time()

    @property
    def cleaning_lock(self) -> threading.Lock:
        """Held by a clean pass: one at a time per log."""
        return self._cleaning

    @property
    def truncations(self) -> int:
        """Truncations so far: a clean pass that started before one must not swap its result in."""
        return self._truncations

    def last_records_of_active_producers(self) -> dict[int, tuple[int, int]]:
        """producer id -> (last data offset or -1, epoch) of every producer the log's state keeps
        (Kafka's lastRecordsOfActiveProducers: the cleaner keeps the batches holding them)."""
        with self._write_lock:
            return {pid: (e.last_data_offset, e.producer_epoch) for pid, e in self._producer_state.producers.items()}

    def replace_segments(
        self,
        new: LogSegment,
        old: Sequence[LogSegment],
        *,
        truncations: int | None = None,
        step: Callable[[str], None] | None = None,
    ) -> bool:
        """Swap ``new`` (files suffixed ``.cleaned``) in for the consecutive segments ``old`` (Kafka's replaceSegments).

        Refused (False, nothing renamed) when ``old`` are no longer consecutive inactive
        segments of the log, or when the log was truncated since ``truncations`` was read.
        Crash-safe: ``.cleaned`` -> ``.swap`` (indexes, then the ``.log``: the commit point),
        the segment tuple replaced, the old files renamed ``.deleted`` (deleted after
        file.delete.delay.ms, so readers holding the old tuple finish), ``.swap`` -> final
        names. ``step`` is called between these steps (fault injection in tests).
        """
        at = step or _no_step
        with self._write_lock:
            self._check_writable()
            if truncations is not None and truncations != self._truncations:
                return False
            current = self.segments
            first = next((n for n, s in enumerate(current) if s is old[0]), None)
            if first is None or first + len(old) >= len(current):
                return False  # gone (retention, truncation), or would include the active segment
            if any(current[first + n] is not s for n, s in enumerate(old)):
                return False
            try:
                at("swap:start")
                new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX, between=lambda: at("swap:indexes_renamed"))
                fsync_dir(self.dir)
                at("swap:committed")
            except OSError as exc:
                raise KafkaStorageError(f"swap in {self.dir} failed before committing: {exc}") from exc
            try:
                self._set_segments((*current[:first], new, *current[first + len(old) :]))
                for segment in old:
                    segment.rename_to_deleted()
                    at("swap:old_renamed")
                fsync_dir(self.dir)
                new.change_file_suffixes(SWAP_SUFFIX, "", between=lambda: at("swap:final_indexes_renamed"))
                fsync_dir(self.dir)
                at("swap:done")
            except OSError as exc:
                # Committed on disk; reopening completes the swap. Until then, take no writes.
                self._offline = True
                raise KafkaStorageError(f"{self.dir} went offline during a segment swap: {exc}") from exc
            self._schedule_delete(list(old), renamed=True)
            return True

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, trim the indexes, write the clean-shutdown marker and release the directory."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            try:
                if not self._offline:
                    self._flush_locked(self._log_end_offset)
                    self._write_checkpoints()
                    self._take_producer_snapshot(self._log_end_offset)
                for segment in self.segments:
                    segment.close()
                self.delete_pending_files(force=True)
                if not self._offline:
                    with open(self.dir / CLEAN_SHUTDOWN_FILE, "wb") as marker:
                        os.fsync(marker.fileno())
                    fsync_dir(self.dir)
            finally:
                self._file_lock.release()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({str(self.dir)!r}, start={self._log_start_offset}, end={self._log_end_offset}, "
            f"segments={len(self.segments)})"
        )


_new_tuple = tuple.__new__
_TXN_OR_CONTROL = TRANSACTIONAL_MASK | CONTROL_MASK
# A replay that met no producer batch writes no snapshot (an fsync) unless it walked this many headers.
_REPLAY_WITHOUT_SNAPSHOT = 10_000


def _no_step(_name: str) -> None:
    """The default of replace_segments' fault-injection hook."""


def _leader_origin(origin: object) -> AppendOrigin:
    """The AppendOrigin of a leader append given as the enum or its value; REPLICATION and
    anything unknown are InvalidRequestError (only a follower append, which keeps the
    leader's offsets, is a replication)."""
    try:
        found = AppendOrigin(origin)
    except ValueError:
        found = None
    if found is None or found is AppendOrigin.REPLICATION:
        allowed = ", ".join(o.value for o in AppendOrigin if o is not AppendOrigin.REPLICATION)
        raise InvalidRequestError(f"append origin {origin!r} cannot assign offsets; use one of {allowed}")
    return found
