"""The transaction index of one segment: the aborted transactions whose ABORT marker it holds.

As Kafka's ``TransactionIndex`` (``<20-digit base offset>.txnindex``). Each entry is 34
bytes, big-endian: version int16 (0), producerId int64, firstOffset int64 (the
transaction's first data offset), lastOffset int64 (the ABORT marker's offset) and
lastStableOffset int64 (the LSO right after the marker: the first offset of the next
transaction still open then, or lastOffset + 1). Entries are in lastOffset order.

A read_committed fetch asks for the aborted transactions overlapping the fetched range
(:meth:`collect_abortable_txns`); the consumer drops their records. The file is created
on the first aborted transaction only (most segments never get one), and the entries are
also kept in memory: the segment's owner is the only writer, and the list is short.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import NamedTuple

from storage.abstract_index import CorruptIndexError
from storage.checkpoint import fsync_path

log = logging.getLogger(__name__)

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    """One aborted transaction: its producer, first data offset, marker offset and the LSO after the marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndexSearchResult(NamedTuple):
    """The aborted transactions found in one index, and whether no later index can hold more."""

    aborted: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The ``.txnindex`` file of one segment (Kafka's TransactionIndex)."""

    def __init__(self, path: str | Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._fd: int | None = None
        self._entries: list[AbortedTxn] | None = None  # loaded on first use
        self._exists = self.path.exists()
        self._dirty = False  # written or truncated since the last flush

    # -- reading --------------------------------------------------------------------------

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            entries: list[AbortedTxn] = []
            if self._exists:
                data = self.path.read_bytes()
                usable = len(data) - len(data) % ENTRY_SIZE
                for position in range(0, usable, ENTRY_SIZE):
                    version, *fields = _ENTRY.unpack_from(data, position)
                    if version != _VERSION:
                        break
                    entries.append(AbortedTxn(*fields))
            self._entries = entries
        return self._entries

    def sanity_check(self) -> None:
        """Raise CorruptIndexError for a torn, out-of-order or unknown-version file (the segment then rebuilds it)."""
        if not self._exists:
            return
        size = self.path.stat().st_size
        if size % ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: size {size} is not a multiple of {ENTRY_SIZE}")
        data = self.path.read_bytes()
        last = -1
        for position in range(0, len(data), ENTRY_SIZE):
            version, _pid, first, last_offset, _lso = _ENTRY.unpack_from(data, position)
            if version != _VERSION or last_offset <= last or first > last_offset or last_offset < self.base_offset:
                raise CorruptIndexError(f"{self.path}: invalid entry at byte {position}")
            last = last_offset
        self._entries = None

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every aborted transaction in the index, in marker order."""
        return list(self._load())

    @property
    def last_offset(self) -> int | None:
        """The marker offset of the newest entry, or None when empty."""
        entries = self._load()
        return entries[-1].last_offset if entries else None

    def collect_abortable_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset) (Kafka's collectAbortedTxns).

        ``is_complete`` is True once an entry's last stable offset reaches the upper bound:
        every transaction overlapping the range was complete before that, so a later
        segment's index cannot add one.
        """
        out = []
        for txn in self._load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(out, True)
        return TxnIndexSearchResult(out, False)

    # -- writing --------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; marker offsets must increase."""
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(
                f"{self.path}: aborted txn ending at {txn.last_offset} does not follow {entries[-1].last_offset}"
            )
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self._exists = True
        os.write(self._fd, _ENTRY.pack(_VERSION, *txn))
        self._dirty = True
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after ``offset``."""
        entries = self._load()
        keep = sum(1 for txn in entries if txn.last_offset < offset)
        if keep == len(entries):
            return
        self._truncate(keep)

    def reset(self) -> None:
        """Remove every entry (the segment is rebuilding its index)."""
        self._load()
        if self._exists:
            self._truncate(0)
        self._entries = []

    def _truncate(self, count: int) -> None:
        assert self._entries is not None
        if self._fd is not None:
            os.ftruncate(self._fd, count * ENTRY_SIZE)
        else:
            os.truncate(self.path, count * ENTRY_SIZE)
        self._dirty = True
        del self._entries[count:]

    def flush(self) -> None:
        """fsync the file when it was written or truncated since the last flush."""
        if not self._dirty:
            return
        if self._fd is not None:
            os.fsync(self._fd)
        elif self._exists:
            fsync_path(self.path)
        self._dirty = False

    def close(self) -> None:
        """Close the file; the entries stay readable from memory."""
        if self._exists:
            self._load()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_to(self, path: str | Path) -> None:
        """Rename the file (if it exists); the open handle keeps working."""
        path = Path(path)
        if self._exists and self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        """Close and remove the file."""
        self.close()
        self.path.unlink(missing_ok=True)
        self._exists = False
        self._entries = []

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self.path)!r}, entries={len(self._load())})"


__all__ = ["ENTRY_SIZE", "AbortedTxn", "TransactionIndex", "TxnIndexSearchResult"]
