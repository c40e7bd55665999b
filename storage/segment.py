"""One log segment: a ``.log`` file of record batches plus its offset, time and transaction indexes.

As Kafka's ``LogSegment``. The segment appends batches that the log has validated and
given offsets, keeps a sparse index entry per ``index.interval.bytes`` (per batch, never
per record), serves reads of whole batches, scans and truncates itself on recovery, and
knows when it must roll. Positions are int32, as in Kafka's index format.

Files: ``<20-digit base offset>.log``, ``.index``, ``.timeindex`` and, once an aborted
transaction's marker lands in the segment, ``.txnindex`` (:mod:`storage.txn_index`). The
segment never derives transaction index entries itself: the log does, from its producer
state, and rebuilds them after a recovery scan.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from storage.abstract_index import CorruptIndexError
from storage.batch_header import (
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    scan_valid_prefix,
)
from storage.errors import KafkaStorageError
from storage.log_files import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    filename_prefix,
)
from storage.offset_index import OffsetIndex
from storage.time_index import TimeIndex
from storage.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
RECOVERY_CHUNK = 8 * 1024 * 1024  # bytes read per step when scanning a segment
_READ_AHEAD = 4096  # bytes read per step when walking batch headers


_IOV_MAX = 1024  # POSIX minimum of IOV_MAX; Linux's value


def write_fully(fd: int, parts: Sequence[bytes | bytearray | memoryview], size: int = -1) -> None:
    """``os.writev`` the parts until every byte is written (a write may be short).

    ``size``, the parts' total length when the caller knows it, lets the usual complete
    write return after its one system call.
    """
    pending = 0  # bytes written from the front of what is left
    if size >= 0 and len(parts) <= _IOV_MAX:
        pending = os.writev(fd, parts)
        if pending == size:
            return
    views = [memoryview(p) for p in parts]
    first = 0
    while True:
        while first < len(views) and pending >= views[first].nbytes:
            pending -= views[first].nbytes
            first += 1
        if first == len(views):
            return
        if pending:
            views[first] = views[first][pending:]
        pending = os.writev(fd, views[first : first + _IOV_MAX])
        if pending <= 0:
            raise OSError(errno.EIO, "write returned 0 bytes")


class LogSegment:
    """A ``.log`` file and its indexes, for offsets from ``base_offset`` on."""

    def __init__(
        self,
        directory: str | Path,
        base_offset: int,
        config: Any,
        *,
        created_ms: int,
        active: bool = True,
        file_suffix: str = "",
    ) -> None:
        # file_suffix: "" for a live segment, ".cleaned"/".swap" while the cleaner builds and swaps one in.
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.created_ms = created_ms
        self._index_interval = config.index_interval_bytes
        self._segment_ms = config.segment_ms - config.segment_jitter_ms
        prefix = self.directory / filename_prefix(base_offset)
        self.log_path = prefix.with_name(prefix.name + LOG_SUFFIX + file_suffix)
        index_path = prefix.with_name(prefix.name + INDEX_SUFFIX + file_suffix)
        time_index_path = prefix.with_name(prefix.name + TIME_INDEX_SUFFIX + file_suffix)
        self.txn_index = TransactionIndex(prefix.with_name(prefix.name + TXN_INDEX_SUFFIX + file_suffix), base_offset)
        # A segment whose index files are missing must rebuild them from its batches.
        self.indexes_missing = self.log_path.exists() and not (index_path.exists() and time_index_path.exists())
        # O_APPEND: after a truncation the next write lands at the new end by itself.
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(index_path, base_offset, config.segment_index_bytes, writable=active)
        self.time_index = TimeIndex(time_index_path, base_offset, config.segment_index_bytes, writable=active)
        self.closed = False
        # Whether the indexes are preallocated for appends (the active segment). Only then is
        # there a slot for the final time index entry: a segment loaded as it was found keeps
        # its indexes as they are.
        self._writable = active
        self._bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = base_offset
        self._next_offset = base_offset
        self._rolling_based_timestamp: int | None = None
        # Why the indexes cannot be trusted (a message naming the file), or None. The owner
        # decides whether that is news (a flushed segment) or expected (one it scans anyway).
        self.index_problem: str | None = None
        if self.indexes_missing:
            missing = index_path if not index_path.exists() else time_index_path
            self.index_problem = f"{missing} is missing"
        else:
            try:
                self.sanity_check()
            except CorruptIndexError as exc:
                self.index_problem = exc.args[0] if exc.args else str(exc)
        # Set when the indexes are missing or fail their sanity check: the owner must call recover().
        self.needs_recovery = self.index_problem is not None
        if self.needs_recovery:
            self.offset_index.reset()
            self.time_index.reset()

    # -- state ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    @property
    def next_offset(self) -> int:
        """Offset just past the last batch (``base_offset`` when empty)."""
        return self._next_offset

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp, or the file's mtime when no batch has one (as Kafka)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.stat(self.log_path).st_mtime * 1000)

    @property
    def rolling_based_timestamp(self) -> int | None:
        """maxTimestamp of the first batch (segment.ms counts from it, KIP-32), or None."""
        if self._rolling_based_timestamp is None and self._size >= HEADER_SIZE:
            self._rolling_based_timestamp = self._header_at(0).max_timestamp
        return self._rolling_based_timestamp

    # -- append ---------------------------------------------------------------------------

    def append(
        self, parts: Sequence[bytes | bytearray | memoryview], size: int, headers: Sequence[BatchHeader]
    ) -> None:
        """Append validated batches whose offsets are assigned, written from ``parts`` in order.

        ``size`` is the parts' total length and ``headers`` the batches' headers, with
        positions counted from the start of the first part. On an I/O error the file is
        cut back to its old size, no index entry is added and KafkaStorageError is raised:
        the segment stays as it was before the call.
        """
        start = self._size
        try:
            write_fully(self._fd, parts, size)
        except OSError as exc:
            self._undo_partial_write(start)
            raise KafkaStorageError(f"append to {self.log_path} failed: {exc}") from exc
        if start == 0:
            self._rolling_based_timestamp = headers[0].max_timestamp
        if len(headers) == 1:  # the usual append: _index_batches without its loop
            h = headers[0]
            last_offset = h.base_offset + h.last_offset_delta
            if h.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = h.max_timestamp
                self.offset_of_max_timestamp = last_offset
            since = self._bytes_since_last_index_entry
            if since > self._index_interval:
                self.offset_index.append(last_offset, start)
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
                since = 0
            self._bytes_since_last_index_entry = since + size
        else:
            self._index_batches(headers, start)
        self._size = start + size
        self._next_offset = headers[-1].next_offset

    def _undo_partial_write(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError:
            log.exception("could not cut %s back to %d bytes after a failed write", self.log_path, size)
            raise

    def _index_batches(self, headers: Sequence[BatchHeader], shift: int) -> None:
        """Sparse index entries for batches at ``header.position + shift`` in the file."""
        interval = self._index_interval
        since = self._bytes_since_last_index_entry
        for h in headers:
            if h.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = h.max_timestamp
                self.offset_of_max_timestamp = h.last_offset
            if since > interval:
                self.offset_index.append(h.last_offset, h.position + shift)
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
                since = 0
            since += h.batch_length + LOG_OVERHEAD
        self._bytes_since_last_index_entry = since

    def should_roll(
        self, size_in_bytes: int, max_timestamp: int, last_offset: int, now_ms: int | Callable[[], int], max_size: int
    ) -> bool:
        """Whether an append of these batches must go to a new segment (Kafka's shouldRoll).

        ``now_ms`` may be a clock, read only when the segment's first batch has no timestamp.
        """
        if self._size == 0:
            return False
        if self._size > max_size - size_in_bytes:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        if last_offset - self.base_offset > INT32_MAX or self._size + size_in_bytes > INT32_MAX:
            return True
        first = self._rolling_based_timestamp
        if first is None:
            first = self.rolling_based_timestamp  # read from the file once
        if first is not None and first >= 0:
            waited = max_timestamp - first
        else:
            waited = (now_ms() if callable(now_ms) else now_ms) - self.created_ms
        return waited > self._segment_ms

    # -- reads ----------------------------------------------------------------------------

    def _header_at(self, position: int) -> BatchHeader:
        return BatchHeader(position, *HEADER.unpack_from(os.pread(self._fd, HEADER_SIZE, position)))

    def headers_from(self, position: int, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches from ``position`` up to ``end`` (file positions), in order."""
        end = self._size if end is None else min(end, self._size)
        buf, buf_start = b"", position
        while position + HEADER_SIZE <= end:
            rel = position - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf, buf_start, rel = (
                    os.pread(self._fd, max(HEADER_SIZE, min(_READ_AHEAD, end - position)), position),
                    position,
                    0,
                )
                if len(buf) < HEADER_SIZE:
                    return
            header = BatchHeader(position, *HEADER.unpack_from(buf, rel))
            if header.batch_length < MIN_BATCH_LENGTH:
                return
            yield header
            position += header.batch_length + LOG_OVERHEAD

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= ``offset``, or None past the end."""
        _, position = self.offset_index.lookup(offset)
        for header in self.headers_from(max(position, start_position)):
            if header.last_offset >= offset:
                return header
        return None

    def _batch_end_before(self, start: int, bound: int) -> tuple[int, int]:
        """The last batch boundary in [start, bound] and the offset a read ending there continues at.

        ``bound`` is at or before the file end. Walks headers from the offset index entry
        nearest below ``bound``: at most ``index.interval.bytes`` of batches.
        """
        if bound >= self._size:
            return self._size, self._next_offset
        _, position = self.offset_index.lookup_by_position(bound)
        end = max(position, start)
        for header in self.headers_from(end):
            if header.position + header.batch_length + LOG_OVERHEAD > bound:
                return end, header.base_offset
            end = header.position + header.batch_length + LOG_OVERHEAD
        return end, self._next_offset

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_batch: bool = False
    ) -> tuple[BatchHeader, bytes, int] | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes.

        ``max_position`` bounds the read (a batch boundary). With ``min_one_batch`` the first
        batch is returned whole even when larger than ``max_size``. Returns the first
        batch's header, the bytes and the offset to read next, or None when the offset is
        past this segment. One ``pread`` of the data; no copy after it.
        """
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        limit = self._size if max_position is None else min(max_position, self._size)
        start = first.position
        if start >= limit:
            return first, b"", start_offset
        end, next_offset = self._batch_end_before(start, min(limit, start + max_size))
        if end == start:
            if not min_one_batch:
                return first, b"", start_offset
            end, next_offset = start + first.batch_length + LOG_OVERHEAD, first.next_offset
        return first, os.pread(self._fd, end - start, start), next_offset

    def read_bytes(self, position: int, size: int) -> bytes:
        """Raw bytes of the ``.log`` file."""
        return os.pread(self._fd, size, position)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after ``starting_offset`` with timestamp >= target.

        As Kafka: the time index gives the offset to start from, the offset index its
        position, then batch headers are walked until one's maxTimestamp reaches the target
        and its records are searched.
        """
        _, offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(offset, starting_offset))
        for header in self.headers_from(position):
            if header.max_timestamp >= timestamp and header.last_offset >= starting_offset:
                found = _search_batch(header, self.read_bytes(header.position, header.size), timestamp, starting_offset)
                if found is not None:
                    return found
                # A batch compaction emptied or thinned: its maxTimestamp may be a removed record's.
        return None

    # -- recovery and truncation ----------------------------------------------------------

    def recover(self) -> int:
        """Rebuild the indexes from the batches and cut the file at the first invalid one.

        A batch is invalid when it runs past the file end, fails its CRC or header checks,
        or does not follow its predecessor's offsets. Returns the bytes cut off.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_last_index_entry = 0
        self.max_timestamp_so_far, self.offset_of_max_timestamp = -1, self.base_offset
        self._rolling_based_timestamp = None
        self._next_offset = self.base_offset
        size = os.fstat(self._fd).st_size
        position, chunk = 0, RECOVERY_CHUNK
        while position < size:
            buf = os.pread(self._fd, min(chunk, size - position), position)
            headers, valid = scan_valid_prefix(buf)
            ordered = self._take_ordered(headers)
            if ordered:
                if position == 0:
                    self._rolling_based_timestamp = ordered[0].max_timestamp
                self._index_batches(ordered, position)
                self._next_offset = ordered[-1].next_offset
            if len(ordered) < len(headers):
                valid = ordered[-1].position + ordered[-1].size if ordered else 0
                position += valid
                break
            position += valid
            if valid < len(buf):
                # A batch cut by the chunk end: read again from it with room for all of it.
                if len(buf) - valid >= LOG_OVERHEAD:
                    needed = int.from_bytes(buf[valid + 8 : valid + 12], "big", signed=True) + LOG_OVERHEAD
                    if needed >= HEADER_SIZE and position + needed <= size and len(buf) - valid < needed:
                        chunk = max(chunk, needed)
                        continue
                elif position + LOG_OVERHEAD <= size and len(buf) == chunk:
                    continue
                break
        truncated = size - position
        if truncated:
            log.warning("%s: cutting %d invalid bytes at position %d", self.log_path, truncated, position)
            os.ftruncate(self._fd, position)
        self._size = position
        return truncated

    def _take_ordered(self, headers: list[BatchHeader]) -> list[BatchHeader]:
        """The headers up to the first whose offsets go backwards (garbage that passed its CRC)."""
        expected = self._next_offset
        for n, header in enumerate(headers):
            if header.base_offset < expected or header.last_offset - self.base_offset > INT32_MAX:
                return headers[:n]
            expected = header.next_offset
        return headers

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and all after it; return the bytes removed."""
        first = self.translate_offset(offset)
        if first is None:
            return 0
        position = first.position
        removed = self._size - position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(first.base_offset)
        self.txn_index.truncate_to(first.base_offset)
        os.ftruncate(self._fd, position)
        self._size = position
        if position == 0:
            self._rolling_based_timestamp = None
        self._load_tail_state()
        return removed

    def sanity_check(self) -> None:
        """Raise CorruptIndexError, naming the file, unless the indexes agree with the batches.

        Kafka's ``LogSegment.sanityCheck``, a little stricter, since a power cut can leave an
        index stale, zero-filled or short while the ``.log`` survived: every index file holds
        whole entries; the offset index strictly increases, stays inside the file, and its
        last entry names the batch at its position; the batches from there end exactly at the
        file end; the time index increases, stays inside the segment, and its last entry
        names a batch whose largest timestamp it holds; the transaction index holds whole,
        ordered entries. Loads the next offset and the largest timestamp on the way. Costs a
        few header reads plus a walk of at most ``index.interval.bytes`` of batches.
        """
        self.offset_index.sanity_check(self._size)
        if self.offset_index.entries:
            offset, position = self.offset_index.last_entry
            header = self._header_or_none(position)
            if header is None or header.magic != CURRENT_MAGIC or header.last_offset != offset:
                raise CorruptIndexError(
                    f"{self.offset_index.path}: last entry ({offset}, {position}) does not name the batch there"
                )
        try:
            self._load_tail_state()
        except CorruptIndexError as exc:
            raise CorruptIndexError(f"{self.log_path}: {exc.args[0]}") from None
        self.time_index.sanity_check(self._next_offset)
        if self.time_index.entries:
            timestamp, offset = self.time_index.last_entry
            header = self.translate_offset(offset)
            if header is None or header.base_offset > offset or header.max_timestamp != timestamp:
                raise CorruptIndexError(
                    f"{self.time_index.path}: last entry ({timestamp}, {offset}) does not match the batch there"
                )
        self.txn_index.sanity_check()

    def _header_or_none(self, position: int) -> BatchHeader | None:
        data = os.pread(self._fd, HEADER_SIZE, position)
        return BatchHeader(position, *HEADER.unpack(data)) if len(data) == HEADER_SIZE else None

    def _load_tail_state(self) -> None:
        """Next offset, largest timestamp and bytes since the last index entry, from the last entry on."""
        last_offset, position = self.offset_index.last_entry
        timestamp, ts_offset = self.time_index.last_entry
        self.max_timestamp_so_far, self.offset_of_max_timestamp = timestamp, ts_offset
        self._next_offset = last_offset + 1 if self.offset_index.entries else self.base_offset
        self._bytes_since_last_index_entry = self._size - position
        end = position
        for header in self.headers_from(position):
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
            self._next_offset = header.next_offset
            end = header.position + header.batch_length + LOG_OVERHEAD
        if end != self._size:
            # The last batch runs past the file end, or the tail is not batches: a torn file.
            raise CorruptIndexError(f"batches from position {position} end at {end}, the file at {self._size}")

    # -- transactions ---------------------------------------------------------------------

    def update_txn_index(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction whose ABORT marker this segment holds."""
        self.txn_index.append(txn)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """This segment's aborted transactions overlapping [fetch_offset, upper_bound_offset)."""
        return self.txn_index.collect_abortable_txns(fetch_offset, upper_bound_offset)

    # -- lifecycle ------------------------------------------------------------------------

    def on_becoming_inactive(self) -> None:
        """On roll: record the final largest timestamp and trim the indexes (as Kafka)."""
        self._append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._writable = False

    def _append_final_time_entry(self) -> None:
        if self._writable and self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True)

    def make_active(self) -> None:
        """Preallocate the indexes again: this segment takes appends."""
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self._writable = True

    def flush(self) -> None:
        """fsync the log file and write the index pages out."""
        os.fsync(self._fd)
        self.flush_indexes()

    def flush_indexes(self) -> None:
        """Make the indexes durable (their pages and, if it changed, their length)."""
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Record the final timestamp entry, trim the indexes and close the files."""
        if self.closed:
            return
        self.closed = True
        self._append_final_time_entry()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        os.close(self._fd)

    def close_without_trim(self) -> None:
        """Release the file handles without touching the files (a segment about to be deleted)."""
        if self.closed:
            return
        self.closed = True
        self.offset_index._unmap()
        self.time_index._unmap()
        self.txn_index.close()
        os.close(self._fd)

    def paths(self) -> list[Path]:
        """The segment's files that exist."""
        candidates = [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]
        return [p for p in candidates if p.exists()]

    def rename_to_deleted(self) -> list[Path]:
        """Rename every file with the ``.deleted`` suffix; open handles keep working."""
        existing = set(self.paths())
        renamed = []
        target = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        if self.log_path in existing:
            os.replace(self.log_path, target)
            renamed.append(target)
        self.log_path = target
        txn = self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX)
        if self.txn_index.path in existing:
            renamed.append(txn)
        self.txn_index.rename_to(txn)
        for index in (self.offset_index, self.time_index):
            target = index.path.with_name(index.path.name + DELETED_SUFFIX)
            if index.path in existing:
                renamed.append(target)
            index.rename_to(target)
        return renamed

    def change_file_suffixes(
        self, old_suffix: str, new_suffix: str, *, between: Callable[[], None] | None = None
    ) -> None:
        """Rename every file from ``...<old_suffix>`` to ``...<new_suffix>`` (Kafka's changeFileSuffixes).

        Open handles and mappings keep working. The ``.log`` file is renamed last, so its
        new name means the whole segment has it; ``between`` runs just before that rename.
        """

        def renamed(path: Path) -> Path:
            if not path.name.endswith(old_suffix):
                raise ValueError(f"{path.name} does not end with {old_suffix!r}")
            return path.with_name(path.name[: len(path.name) - len(old_suffix)] + new_suffix)

        for index in (self.offset_index, self.time_index):
            index.rename_to(renamed(index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))
        if between is not None:
            between()
        target = renamed(self.log_path)
        os.replace(self.log_path, target)
        self.log_path = target

    def delete(self) -> None:
        """Close and remove every file of the segment."""
        self.close_without_trim()
        for path in self.paths():
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size}, next_offset={self._next_offset})"


def _search_batch(header: BatchHeader, batch: bytes, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record in ``batch`` with timestamp >= target, or None.

    None when no record qualifies: compaction keeps a producer's last batch even with no
    record left, and keeps a batch's header when it drops some of its records. A batch
    holding every offset of its range (as written) and stamped LogAppendTime answers
    without decoding; otherwise the records are decoded with the codec. Should decoding
    fail, the batch's first eligible offset is returned, which never skips a matching record.
    """
    first_eligible = max(header.base_offset, starting_offset)
    if header.timestamp_type == LOG_APPEND_TIME and header.records_count == header.last_offset_delta + 1:
        return header.max_timestamp, first_eligible
    records = _record_offsets_and_timestamps(batch)
    if records is None:
        return header.max_timestamp, first_eligible
    for record_offset, record_timestamp in records:
        if record_timestamp >= timestamp and record_offset >= starting_offset:
            return record_timestamp, record_offset
    return None


def _record_offsets_and_timestamps(batch: bytes) -> list[tuple[int, int]] | None:
    """The records' (offset, timestamp), or None when the batch cannot be decoded."""
    from storage.records.reader import RecordBatch  # the codec: only timestamp lookups need it

    try:
        decoded = RecordBatch(batch)
        return [(record.offset, record.timestamp) for record in decoded]
    except Exception:  # a codec failure must not fail a timestamp lookup; fall back to the batch
        log.debug("could not decode batch for a timestamp lookup", exc_info=True)
        return None


__all__ = [
    "CorruptIndexError",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "LogSegment",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "filename_prefix",
]
