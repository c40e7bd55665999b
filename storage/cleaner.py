"""The log cleaner: key-based compaction of a partition log, as Kafka's ``LogCleaner``.

A log whose ``cleanup.policy`` includes ``compact`` keeps at least the latest record of
every key. One clean pass over a :class:`~storage.log.Log`:

1. **Range.** The *clean* section runs from the log start to the cleaner checkpoint
   (``cleaner-offset-checkpoint`` in the partition directory), the *dirty* section from
   there to the first uncleanable offset: the lowest of the active segment's base offset,
   the base of the segment holding ``upper_bound_offset`` (the high watermark / last
   stable offset: nothing at or past it is ever cleaned) and the base of the first dirty
   segment holding a record younger than ``min.compaction.lag.ms``. Only whole segments
   are cleaned. The dirty ratio is dirty bytes / (clean + dirty bytes); a log is
   cleanable when it passes ``min.cleanable.dirty.ratio`` or when its dirty part holds a
   batch older than ``max.compaction.lag.ms``.
2. **Offset map.** The dirty section is read once into a :class:`SkimpyOffsetMap`
   (16-byte key digest -> latest offset, at most ``offset_map_entries`` entries). When it
   fills up the map ends at a batch boundary and the rest waits for the next pass.
3. **Rewrite.** The segments from the log start to the map's end are read again, in
   groups that fit one segment (``segment.bytes``, the index capacity, int32 relative
   offsets). A record survives when its offset is the latest for its key; a tombstone
   (null value) also needs its delete horizon not to have passed. Surviving records keep
   their offsets; a batch losing records is rebuilt with the same codec, base offset,
   producer id/epoch, base sequence, partition leader epoch and, as v2 requires, its
   original last offset (``lastOffsetDelta``). A batch losing every record is kept as an
   empty 61-byte batch when it is its producer's last batch in the log (producer state
   rebuilt from the log needs its epoch and last sequence) and when it is the last batch
   of the group (so a cleaned segment ends exactly where the segments it replaces ended:
   recovery's "a segment ends where the next begins" check stays true, and an interrupted
   swap's offset range is known from the ``.swap`` segment alone); otherwise it goes.
   Batches whose records all survive, and need no delete horizon, are copied byte for
   byte. Records with a null key (written before the topic became compacted) are
   dropped, as Kafka's cleaner drops them; appends of such records to a compacted topic
   are refused (``InvalidRecordError``).
4. **Swap.** Each group's new segment is written as ``<base>.log.cleaned`` (+ ``.index``,
   ``.timeindex``), fsynced, and swapped in by :meth:`Log.replace_segments`: the files are
   renamed ``.cleaned`` -> ``.swap`` (indexes first, the ``.log`` last: its rename is the
   commit point), the log's segment tuple is replaced in one assignment, the old
   segments are renamed ``.deleted`` (their open files keep serving readers that hold the
   old tuple, until ``file.delete.delay.ms``) and the ``.swap`` suffix is dropped. On open,
   :func:`storage.log_loader.recover_interrupted_swap` undoes or completes an interrupted swap as Kafka's
   ``LogLoader`` does: ``.cleaned`` files are deleted, and so is every ``.swap`` file at or
   above the lowest ``.cleaned`` base offset (the swap had not committed); a remaining
   ``<base>.log.swap`` replaces the segments within its offset range.
5. **Checkpoint.** The end of the map becomes the cleaner checkpoint, so finished work is
   not redone after a restart.

Tombstones (KIP-534): the first time a batch holding a tombstone is cleaned, its
``baseTimestamp`` is set to ``now + delete.retention.ms`` and attribute bit 6 (0x40)
marks it as a delete horizon (record timestamp deltas count from it, so record
timestamps are unchanged). A later pass removes the tombstone once the horizon has
passed; with ``delete.retention.ms=0`` that is the next pass over the segment.

Transactions, as Kafka's cleaner (``CleanedTransactionMetadata``). The cleanable range
stops at the segment holding the log's first unstable offset, so every transaction in it
is decided. The aborted ones are known from the ``.txnindex`` files
(:meth:`Log.collect_aborted_transactions`): their records are left out of the offset map
and removed (the batch is dropped, or kept empty when it is its producer's last). Committed
transactional records compact like any other and enter the map. A marker stays while any
batch of its transaction is still in the log; once none is, the first pass sets the
marker batch's delete horizon (``now + delete.retention.ms``, KIP-534) and a pass after the
horizon removes it (keeping it empty when it holds its producer's latest epoch and the
producer has no data left). An ABORT marker kept because its transaction still has data
keeps its entry in the cleaned segment's ``.txnindex``.

The cleaner does per-record Python work (a digest and a dict lookup per record); it runs
in the background, off the produce and fetch paths.
"""

from __future__ import annotations

import heapq
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage.batch_header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_MASK,
    BatchHeader,
    crc32c,
)
from storage.checkpoint import read_offset, write_offset
from storage.errors import CorruptRecordError
from storage.extensions import load, pick
from storage.log import Log
from storage.log_files import CLEANED_SUFFIX, CLEANER_CHECKPOINT_FILE, INDEX_SUFFIXES, LOG_SUFFIX
from storage.offset_map import DEFAULT_OFFSET_MAP_ENTRIES, CheckFn, HashFn, OffsetMapFullError, md5_digest
from storage.records.builder import RecordBatchBuilder
from storage.records.control import CONTROL_ABORT, CONTROL_COMMIT
from storage.records.reader import RecordBatch
from storage.segment import LogSegment
from storage.txn_index import AbortedTxn, TransactionIndex

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_READ_CHUNK = 4 * 1024 * 1024
_WRITE_CHUNK = 1024 * 1024
_MASK64 = 2**64 - 1


# ---------------------------------------------------------------------------------------
# The offset map
# ---------------------------------------------------------------------------------------


class SkimpyOffsetMap:
    """Key -> latest offset with bounded memory: keys are stored as 16-byte digests.

    At most ``max_entries`` distinct digests are held (about 150 bytes each in CPython),
    whatever the key sizes. ``put`` is called in offset order, so an entry holds the
    latest offset of its key.

    Hash collisions. Kafka's map keys on the MD5 digest alone: two keys with one digest
    share an entry holding the newer offset of the two, and the older key's latest record
    is then dropped. Here each entry also keeps a 64-bit check value of the key from an
    independent hash (``check_fn``, by default Python's keyed SipHash), which makes the
    cleaner conservative:

    * two keys of the dirty section with one digest but different check values mark the
      entry *collided*; ``get`` answers -1 (unknown) for every key of that digest from
      then on, so none of their records is removed by key (older values are kept; the
      latest value of each key always is);
    * a key whose digest matches an entry with another check value (for instance a key
      of the clean section only) gets -1 as well: kept;
    * only when both the digest and the check value collide are the two keys taken for
      one, as in Kafka: the newer offset wins for both, and the other key's latest record,
      if older, is dropped. With MD5 and a per-process SipHash key this needs about
      2**-192 luck; a crafted MD5 collision (MD5 is broken for that) only marks its entry
      collided, so the cleaner keeps more, and the SipHash key is not known outside the
      process.
    """

    __slots__ = ("max_entries", "_hash", "_check", "_entries", "_collided", "latest_offset", "puts")

    def __init__(
        self,
        max_entries: int = DEFAULT_OFFSET_MAP_ENTRIES,
        hash_fn: HashFn | None = None,
        check_fn: CheckFn | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("the offset map needs room for at least one entry")
        self.max_entries = max_entries
        self._hash: HashFn = hash_fn or md5_digest
        self._check: CheckFn = check_fn or hash
        self._entries: dict[bytes, int] = {}  # digest -> offset << 64 | check value
        self._collided: set[bytes] = set()
        self.latest_offset = -1
        self.puts = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def collisions(self) -> int:
        """Digests found shared by keys with different check values (their records are all kept)."""
        return len(self._collided)

    @property
    def utilization(self) -> float:
        """Entries held / max entries."""
        return len(self._entries) / self.max_entries

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` as the latest for ``key``; raise OffsetMapFullError when a new key has no room."""
        digest = self._hash(key)
        check = self._check(key) & _MASK64
        entries = self._entries
        previous = entries.get(digest)
        if previous is None:
            if len(entries) >= self.max_entries:
                raise OffsetMapFullError(f"offset map full at {self.max_entries} entries")
        elif previous & _MASK64 != check:
            self._collided.add(digest)
        entries[digest] = offset << 64 | check
        self.puts += 1
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 when unknown or its digest is collided."""
        digest = self._hash(key)
        value = self._entries.get(digest)
        if value is None or value & _MASK64 != self._check(key) & _MASK64:
            return -1
        if self._collided and digest in self._collided:
            return -1
        return value >> 64

    def put_many(self, keys: Sequence[bytes | None], offsets: Sequence[int]) -> None:
        """``put`` each (key, offset) in order; null keys are skipped (a batch's columns)."""
        put = self.put
        for key, offset in zip(keys, offsets, strict=True):
            if key is not None:
                put(key, offset)

    def get_many(self, keys: Sequence[bytes | None]) -> list[int]:
        """``get`` of each key, -1 for a null one (a batch's column)."""
        get = self.get
        return [-1 if key is None else get(key) for key in keys]

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()
        self._collided.clear()
        self.latest_offset = -1
        self.puts = 0


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogToClean:
    """What a clean pass would work on (Kafka's LogToClean)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool

    @property
    def dirty_ratio(self) -> float:
        """dirty bytes / (clean + dirty bytes); 0 for an empty range."""
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """What one clean pass did."""

    first_dirty_offset: int
    end_offset: int  # the new cleaner checkpoint
    segments_read: int
    segments_written: int
    bytes_read: int
    bytes_written: int
    messages_read: int
    messages_written: int
    map_bytes_read: int
    map_messages_read: int
    map_entries: int
    map_collisions: int
    duration_s: float
    completed: bool  # False when the log changed under the pass (truncation, retention) and it stopped

    @property
    def ratio(self) -> float:
        """bytes written / bytes read (1 - the size reduction)."""
        return self.bytes_written / self.bytes_read if self.bytes_read else 1.0

    @property
    def mb_per_s(self) -> float:
        """Megabytes (10**6) of log rewritten per second."""
        return self.bytes_read / 1e6 / self.duration_s if self.duration_s > 0 else 0.0


# ---------------------------------------------------------------------------------------
# The cleanable range
# ---------------------------------------------------------------------------------------


def cleaner_checkpoint_path(log: Log) -> Path:
    """The per-partition file holding the cleaner checkpoint."""
    return log.dir / CLEANER_CHECKPOINT_FILE


def _segment_ends(segments: Sequence[LogSegment], log_end: int) -> list[int]:
    return [segments[n + 1].base_offset if n + 1 < len(segments) else log_end for n in range(len(segments))]


def log_to_clean(log: Log, upper_bound_offset: int | None = None, now_ms: int | None = None) -> LogToClean:
    """The clean and dirty sections of ``log`` and whether max.compaction.lag.ms is breached."""
    segments = log.segments
    start, end = log.log_start_offset, log.log_end_offset
    now = log.time_ms() if now_ms is None else now_ms
    checkpoint = read_offset(cleaner_checkpoint_path(log))
    # Below the log start (retention moved it) or past the end (truncation): start over.
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= end else start
    ends = _segment_ends(segments, end)
    active = segments[-1]
    candidates = [active.base_offset]
    # Never at or past the first unstable offset: transactions there are not decided yet.
    unstable = log.first_unstable_offset
    for bound in (upper_bound_offset, unstable):
        if bound is not None:
            # Whole segments only: the first segment that does not end at or below the bound.
            candidates.extend(s.base_offset for s, e in zip(segments, ends, strict=True) if e > bound)
    min_lag = log.config.min_compaction_lag_ms
    max_lag = log.config.max_compaction_lag_ms
    dirty_inactive = [s for s, e in zip(segments[:-1], ends[:-1], strict=True) if e > first_dirty]
    if min_lag > 0:
        candidates.extend(s.base_offset for s in dirty_inactive if s.largest_timestamp > now - min_lag)
    first_uncleanable = max(first_dirty, min(candidates))
    clean_bytes = dirty_bytes = 0
    for segment, seg_end in zip(segments, ends, strict=True):
        if seg_end <= start:
            continue
        if seg_end <= first_dirty:
            clean_bytes += segment.size
        elif segment.base_offset < first_uncleanable:
            dirty_bytes += segment.size
    needs_now = False
    if max_lag < now:  # the default (LONG_MAX) never triggers
        firsts = [s.rolling_based_timestamp for s in dirty_inactive]
        stamps = [t for t in firsts if t is not None and t > 0]
        needs_now = bool(stamps) and min(stamps) < now - max_lag
    return LogToClean(first_dirty, first_uncleanable, clean_bytes, dirty_bytes, needs_now)


# ---------------------------------------------------------------------------------------
# The cleaner
# ---------------------------------------------------------------------------------------


class LogCleaner:
    """Cleans compacted logs (Kafka's LogCleaner, one thread's worth, called by the owner).

    ``offset_map_entries`` bounds the memory of the key map; ``hash_fn``/``check_fn``
    replace the map's hash functions (tests inject colliding ones). The replica (in its
    broker's actor) calls :meth:`clean_filthiest` (or :func:`clean`) periodically.
    """

    def __init__(
        self,
        offset_map_entries: int = DEFAULT_OFFSET_MAP_ENTRIES,
        *,
        hash_fn: HashFn | None = None,
        check_fn: CheckFn | None = None,
        step: Callable[[str], None] | None = None,
    ) -> None:
        self.offset_map_entries = offset_map_entries
        self._hash_fn = hash_fn
        self._check_fn = check_fn
        self._step = step  # fault injection between the steps of a swap (tests)

    # -- choosing --------------------------------------------------------------------------

    @staticmethod
    def is_cleanable(log: Log, upper_bound_offset: int | None = None, now_ms: int | None = None) -> bool:
        """Whether ``log`` is compacted and its dirty ratio or compaction lag asks for a pass."""
        if "compact" not in log.config.cleanup_policy or log.closed:
            return False
        todo = log_to_clean(log, upper_bound_offset, now_ms)
        if todo.dirty_bytes == 0:
            return False
        return todo.needs_compaction_now or todo.dirty_ratio > log.config.min_cleanable_dirty_ratio

    def clean_filthiest(
        self, candidates: Iterable[tuple[Log, int | None]], *, now_ms: int | None = None
    ) -> tuple[Log, CleanerStats] | None:
        """Clean the cleanable log with the highest dirty ratio among (log, upper bound) pairs.

        Logs whose max.compaction.lag.ms is breached qualify whatever their ratio. Returns
        the log and the pass's stats, or None when no log is cleanable.
        """
        best: tuple[float, Log, int | None] | None = None
        for log, bound in candidates:
            if not self.is_cleanable(log, bound, now_ms):
                continue
            ratio = log_to_clean(log, bound, now_ms).dirty_ratio
            if best is None or ratio > best[0]:
                best = (ratio, log, bound)
        if best is None:
            return None
        stats = self.clean(best[1], best[2], now_ms=now_ms, force=True)
        return (best[1], stats) if stats is not None else None

    # -- one pass --------------------------------------------------------------------------

    def clean(
        self, log: Log, upper_bound_offset: int | None = None, *, now_ms: int | None = None, force: bool = False
    ) -> CleanerStats | None:
        """One clean pass over ``log``; None when there is nothing to do.

        Without ``force`` the log must be cleanable (:meth:`is_cleanable`); with it any
        dirty data is enough. Only one pass per log runs at a time; appends and reads go
        on meanwhile.
        """
        if "compact" not in log.config.cleanup_policy:
            return None
        with log.cleaning_lock:
            if log.closed:
                return None
            now = log.time_ms() if now_ms is None else now_ms
            if not force and not self.is_cleanable(log, upper_bound_offset, now):
                return None
            todo = log_to_clean(log, upper_bound_offset, now)
            if todo.dirty_bytes == 0:
                return None
            return _Pass(self, log, todo, now).run()


def _iter_batches(segment: LogSegment, end: int | None = None) -> Iterator[RecordBatch]:
    """The batches of a (non-active) segment's file, read in large chunks."""
    end = segment.size if end is None else end
    position = 0
    while position < end:
        buf = segment.read_bytes(position, min(_READ_CHUNK, end - position))
        at = 0
        while len(buf) - at >= HEADER_SIZE:
            size = int.from_bytes(buf[at + 8 : at + 12], "big", signed=True) + LOG_OVERHEAD
            if at + size > len(buf):
                break
            yield RecordBatch(buf, at)
            at += size
        if at == 0:  # one batch larger than the chunk
            size = int.from_bytes(buf[8:12], "big", signed=True) + LOG_OVERHEAD
            buf = segment.read_bytes(position, size)
            yield RecordBatch(buf, 0)
            at = size
        position += at


def _empty_batch(h: BatchHeader) -> bytes:
    """A header-only batch with ``h``'s offsets and producer fields (Kafka's writeEmptyHeader)."""
    attributes = h.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    head = bytearray(
        HEADER.pack(
            h.base_offset,
            MIN_BATCH_LENGTH,
            h.partition_leader_epoch,
            CURRENT_MAGIC,
            0,
            attributes,
            h.last_offset_delta,
            h.max_timestamp,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            0,
        )
    )
    struct.pack_into(">I", head, 17, crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    return bytes(head)


def _with_delete_horizon(batch: RecordBatch, horizon: int) -> bytes:
    """The control batch rebuilt with a KIP-534 delete horizon (its records and offsets unchanged)."""
    h = batch.header
    builder = RecordBatchBuilder(
        h.compression,
        timestamp_type=h.timestamp_type,
        base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=True,
        delete_horizon_ms=horizon,
    )
    for record in batch:
        builder.append(
            record.value, record.key, record.timestamp, record.headers, offset_delta=record.offset - h.base_offset
        )
    builder.override_last_offset(h.last_offset)
    return builder.build()


class _TxnState:
    """Which batches belong to aborted transactions and which markers may go (Kafka's CleanedTransactionMetadata).

    Fed the aborted transactions overlapping the segments being read, then every batch in
    offset order. ``cleaned_index`` receives the entries of ABORT markers that must stay.
    """

    def __init__(self, cleaned_index: TransactionIndex | None = None) -> None:
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seen: set[AbortedTxn] = set()
        self._aborted: dict[int, list] = {}  # producer id -> [AbortedTxn, last offset of a batch seen or -1]
        self._committed: set[int] = set()  # producers with a batch of an ongoing committed transaction seen
        self.cleaned_index = cleaned_index

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            if txn not in self._seen:
                self._seen.add(txn)
                heapq.heappush(self._pending, (txn.first_offset, txn.last_offset, txn))

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[2]
            self._aborted.setdefault(txn.producer_id, [txn, -1])

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch was read; True when it belongs to an aborted transaction (its records go)."""
        if self._pending:
            self._consume_up_to(h.last_offset)
        if not h.attributes & TRANSACTIONAL_MASK:
            return False
        aborted = self._aborted.get(h.producer_id)
        if aborted is not None:
            aborted[1] = h.last_offset
            return True
        self._committed.add(h.producer_id)
        return False

    def on_control_batch(self, h: BatchHeader, control_type: int | None) -> bool:
        """A marker was read (``control_type`` None for an emptied one); True when it may be discarded."""
        if self._pending:
            self._consume_up_to(h.last_offset)
        pid = h.producer_id
        if control_type is None:
            return True
        if control_type == CONTROL_ABORT:
            aborted = self._aborted.pop(pid, None)
            if aborted is not None and aborted[1] >= 0:
                # Data of the transaction is still in the log: keep the marker and its index entry.
                if self.cleaned_index is not None:
                    self.cleaned_index.append(aborted[0])
                return False
            return True
        if control_type == CONTROL_COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False


def _control_type(batch: RecordBatch) -> int | None:
    """The marker type of a control batch (CONTROL_ABORT or CONTROL_COMMIT), None when it holds no record."""
    if batch.header.records_count == 0:
        return None
    try:
        return batch.control_record().type
    except CorruptRecordError:
        return -1  # unreadable: never discarded


class _Pass:
    """The state of one clean pass over one log."""

    def __init__(self, cleaner: LogCleaner, log: Log, todo: LogToClean, now: int) -> None:
        self.cleaner = cleaner
        self.log = log
        self.todo = todo
        self.now = now
        self.config = log.config
        self.map = SkimpyOffsetMap(cleaner.offset_map_entries, cleaner._hash_fn, cleaner._check_fn)
        self.truncations = log.truncations
        self.counts = dict.fromkeys(
            ("segments_read", "segments_written", "bytes_read", "bytes_written", "messages_read", "messages_written"),
            0,
        )
        self.map_bytes = self.map_messages = 0

    def run(self) -> CleanerStats:
        started = time.perf_counter()
        segments = self.log.segments
        map_end = self._build_offset_map(segments)
        last_of_producer = self._active_producers()
        ends = _segment_ends(segments, self.log.log_end_offset)
        to_clean = [s for s, e in zip(segments[:-1], ends[:-1], strict=True) if s.base_offset < map_end and s.size > 0]
        completed = True
        for group in self._group(to_clean):
            if not self._clean_group(group, last_of_producer):
                completed = False
                break
        if completed:
            write_offset(cleaner_checkpoint_path(self.log), map_end)
        stats = CleanerStats(
            first_dirty_offset=self.todo.first_dirty_offset,
            end_offset=map_end if completed else self.todo.first_dirty_offset,
            map_bytes_read=self.map_bytes,
            map_messages_read=self.map_messages,
            map_entries=len(self.map),
            map_collisions=self.map.collisions,
            duration_s=time.perf_counter() - started,
            completed=completed,
            **self.counts,
        )
        log.info(
            "%s: cleaned %d segments up to offset %d: %d -> %d bytes (%.1f%%), %d -> %d messages in %.3f s",
            self.log.dir,
            stats.segments_read,
            stats.end_offset,
            stats.bytes_read,
            stats.bytes_written,
            100 * stats.ratio,
            stats.messages_read,
            stats.messages_written,
            stats.duration_s,
        )
        return stats

    # -- the map ---------------------------------------------------------------------------

    def _build_offset_map(self, segments: Sequence[LogSegment]) -> int:
        """Fill the map from the dirty section; return the offset it covers up to (exclusive)."""
        first, bound = self.todo.first_dirty_offset, self.todo.first_uncleanable_offset
        ends = _segment_ends(segments, self.log.log_end_offset)
        room = self.map.max_entries
        map_end = first
        txns = _TxnState()
        txns.add_aborted(self.log.collect_aborted_transactions(first, bound))
        for segment, seg_end in zip(segments, ends, strict=True):
            if seg_end <= first or segment.base_offset >= bound:
                continue
            for batch in _iter_batches(segment):
                h = batch.header
                if h.last_offset < first:
                    continue
                if len(self.map) + h.records_count > room:
                    if map_end == first:
                        raise ValueError(
                            f"offset map of {room} entries cannot hold the {h.records_count} records of one batch"
                        )
                    # Stop at a batch boundary; the rest of the dirty section waits for the next pass.
                    log.info("%s: offset map full; this pass ends at offset %d", self.log.dir, map_end)
                    return map_end
                self.map_bytes += h.size
                self.map_messages += h.records_count
                # Control batches hold no data; aborted transactions' records never count as latest.
                if h.is_control:
                    txns.on_control_batch(h, _control_type(batch))
                elif not txns.on_batch(h):
                    offsets, _, keys, _, _ = batch._decode()  # lists: no Record objects on this path
                    self.map.put_many(keys, offsets)
                map_end = h.next_offset
            map_end = seg_end  # the whole segment is mapped, a hole at its end included
        return map_end

    def _active_producers(self) -> dict[int, tuple[int, int]]:
        """producer id -> (last data offset or -1, epoch) of every producer the log's state keeps.

        As Kafka's lastRecordsOfActiveProducers: the batch holding a producer's last data
        offset is kept (empty if need be) so its sequence and epoch survive; a producer with
        no data in its current epoch keeps its marker of that epoch.
        """
        return self.log.last_records_of_active_producers()

    # -- grouping --------------------------------------------------------------------------

    def _group(self, segments: list[LogSegment]) -> Iterator[list[LogSegment]]:
        """Consecutive segments whose cleaned form fits one segment (Kafka's groupSegmentsBySize)."""
        max_size = self.config.segment_bytes
        max_index_entries = self.config.segment_index_bytes // 8 - 2
        max_time_entries = self.config.segment_index_bytes // 12 - 2
        n = 0
        while n < len(segments):
            group = [segments[n]]
            size = segments[n].size
            entries = segments[n].offset_index.entries + 1
            time_entries = segments[n].time_index.entries + 1
            n += 1
            while n < len(segments):
                s = segments[n]
                last_offset = s.next_offset - 1
                if (
                    size + s.size > max_size
                    or entries + s.offset_index.entries + 1 > max_index_entries
                    or time_entries + s.time_index.entries + 1 > max_time_entries
                    or last_offset - group[0].base_offset > _INT32_MAX
                ):
                    break
                group.append(s)
                size += s.size
                entries += s.offset_index.entries + 1
                time_entries += s.time_index.entries + 1
                n += 1
            yield group

    # -- rewriting -------------------------------------------------------------------------

    def _clean_group(self, group: list[LogSegment], last_of_producer: dict[int, tuple[int, int]]) -> bool:
        """Write the group's cleaned segment and swap it in; False if the log changed meanwhile."""
        directory = self.log.dir
        base = group[0].base_offset
        for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):  # left by a failed attempt of this process
            (directory / f"{base:020d}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
        cleaned = LogSegment(directory, base, self.config, created_ms=self.now, active=True, file_suffix=CLEANED_SUFFIX)
        try:
            self._write_cleaned(group, cleaned, last_of_producer)
            cleaned.on_becoming_inactive()
            cleaned.flush()
            mtime = os.stat(group[-1].log_path).st_mtime_ns
            os.utime(cleaned.log_path, ns=(mtime, mtime))  # as Kafka: keep the replaced files' mtime
            replaced = self.log.replace_segments(cleaned, group, truncations=self.truncations, step=self.cleaner._step)
        except BaseException:
            if cleaned.log_path.name.endswith(CLEANED_SUFFIX):  # not committed: throw the new files away
                cleaned.delete()
            raise
        if not replaced:
            cleaned.delete()
            log.info("%s: the log changed during cleaning; the pass stops at offset %d", directory, base)
            return False
        self.counts["segments_read"] += len(group)
        self.counts["segments_written"] += 1
        self.counts["bytes_read"] += sum(s.size for s in group)
        self.counts["bytes_written"] += cleaned.size
        return True

    def _write_cleaned(
        self, group: list[LogSegment], cleaned: LogSegment, last_of_producer: dict[int, tuple[int, int]]
    ) -> None:
        parts: list[bytes] = []
        headers: list[BatchHeader] = []
        pending = 0
        last_segment = group[-1]
        txns = _TxnState(cleaned.txn_index)
        segments, end = self.log.segments, self.log.log_end_offset
        for segment in group:
            # All aborted transactions overlapping the segment: the cleaned index is rebuilt whole.
            n = next((i for i, s in enumerate(segments) if s is segment), None)
            upper = segments[n + 1].base_offset if n is not None and n + 1 < len(segments) else end
            txns.add_aborted(self.log.collect_aborted_transactions(segment.base_offset, upper))
            batches = _iter_batches(segment)
            batch = next(batches, None)
            while batch is not None:
                following = next(batches, None)
                is_last = following is None and segment is last_segment
                out = self._filter(batch, last_of_producer, is_last, txns)
                if out:
                    headers.append(BatchHeader(pending, *HEADER.unpack_from(out)))
                    parts.append(out)
                    pending += len(out)
                    if pending >= _WRITE_CHUNK:
                        cleaned.append(parts, pending, headers)
                        parts, headers, pending = [], [], 0
                batch = following
        if parts:
            cleaned.append(parts, pending, headers)

    def _filter(
        self, batch: RecordBatch, last_of_producer: dict[int, tuple[int, int]], is_last: bool, txns: _TxnState
    ) -> bytes:
        """The batch as it should be after cleaning: itself, rebuilt, empty, or b"" (dropped)."""
        h = batch.header
        self.counts["messages_read"] += h.records_count
        raw = batch._buf[h.position : h.position + h.size]
        last = last_of_producer.get(h.producer_id) if h.producer_id >= 0 else None
        if h.is_control:
            discardable = txns.on_control_batch(h, _control_type(batch))
            # Kept (empty) when the producer has no data left and this is a marker of its epoch: fencing.
            keep_empty = is_last or (last is not None and last[0] < 0 and last[1] == h.producer_epoch)
            if h.records_count == 0:  # emptied by an earlier pass
                return bytes(raw) if keep_empty else b""
            horizon = h.delete_horizon_ms
            if discardable and horizon is not None and horizon <= self.now:
                return _empty_batch(h) if keep_empty else b""
            self.counts["messages_written"] += h.records_count
            if discardable and horizon is None:
                return _with_delete_horizon(batch, self.now + self.config.delete_retention_ms)
            return bytes(raw)
        needed = is_last or (last is not None and last[0] == h.last_offset)
        if txns.on_batch(h):  # an aborted transaction's batch: every record goes
            return (_empty_batch(h) if h.records_count else bytes(raw)) if needed else b""
        if h.records_count == 0:  # an empty batch kept by an earlier pass: still needed?
            return bytes(raw) if needed else b""
        horizon = h.delete_horizon_ms
        retain_deletes = horizon is None or self.now < horizon
        kept = []
        tombstones = False
        offsets, timestamps, keys, values, headers = batch._decode()
        latest = self.map.get_many(keys)
        for n, key in enumerate(keys):
            if key is None or offsets[n] < latest[n]:
                continue
            if values[n] is None:
                if not retain_deletes:
                    continue
                tombstones = True
            kept.append(n)
        self.counts["messages_written"] += len(kept)
        set_horizon = tombstones and horizon is None
        if len(kept) == len(keys) and not set_horizon:
            return bytes(raw)
        if kept:
            if set_horizon:
                horizon = self.now + self.config.delete_retention_ms
            builder = RecordBatchBuilder(
                h.compression,
                timestamp_type=h.timestamp_type,
                base_offset=h.base_offset,
                partition_leader_epoch=h.partition_leader_epoch,
                producer_id=h.producer_id,
                producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence,
                is_transactional=h.is_transactional,
                delete_horizon_ms=horizon,
            )
            base = h.base_offset
            for n in kept:
                builder.append(values[n], keys[n], timestamps[n], headers[n], offset_delta=offsets[n] - base)
            builder.override_last_offset(h.last_offset)
            return builder.build()
        if needed:
            return _empty_batch(h)
        return b""


def clean(
    log: Log,
    upper_bound_offset: int | None = None,
    *,
    now_ms: int | None = None,
    offset_map_entries: int = DEFAULT_OFFSET_MAP_ENTRIES,
    force: bool = False,
) -> CleanerStats | None:
    """Compact ``log`` if :func:`cleanable` (any dirty data with ``force``); None if nothing was done.

    Nothing at or past ``upper_bound_offset`` (the high watermark or last stable offset;
    default the active segment) is cleaned. Runs alongside appends and reads.
    """
    return LogCleaner(offset_map_entries).clean(log, upper_bound_offset, now_ms=now_ms, force=force)


def cleanable(log: Log, upper_bound_offset: int | None = None, now_ms: int | None = None) -> bool:
    """Whether the policy includes compact and min.cleanable.dirty.ratio or max.compaction.lag.ms asks for a pass."""
    return LogCleaner.is_cleanable(log, upper_bound_offset, now_ms)


def dirty_ratio(log: Log, upper_bound_offset: int | None = None, now_ms: int | None = None) -> float:
    """Bytes after the cleaner checkpoint that a pass could clean / bytes from the log start to there."""
    return log_to_clean(log, upper_bound_offset, now_ms).dirty_ratio


__all__ = [
    "clean",
    "cleanable",
    "dirty_ratio",
    "CleanerStats",
    "LogCleaner",
    "LogToClean",
    "OffsetMapFullError",
    "SkimpyOffsetMap",
    "md5_digest",
    "log_to_clean",
]


# The offset map: the compiled class (storage/_compiled/cleaner.pyx) when built, else the
# pure one above; chosen here, once.
SkimpyOffsetMap = pick(  # type: ignore[misc]
    __name__, "SkimpyOffsetMap", SkimpyOffsetMap, load(__name__, "storage._compiled.cleaner")
)
