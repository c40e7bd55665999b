"""What the offset index and the time index share: a preallocated, memory-mapped file.

As Kafka's ``AbstractIndex``: fixed-size big-endian entries sorted by their key, appended
only at the end. The active segment's index file is preallocated to
``segment.index.bytes`` and mapped whole; on roll or close it is trimmed to the entries
it holds, so an index read back from disk is exactly ``entries * entry_size`` bytes.
Lookups are a binary search over the mapped entries.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from pathlib import Path

from storage.checkpoint import fsync_path
from storage.errors import CorruptRecordError

log = logging.getLogger(__name__)


class CorruptIndexError(CorruptRecordError):
    """CORRUPT_MESSAGE: an index file failed its sanity check (the segment rebuilds it)."""


class AbstractIndex:
    """A sorted file of fixed-size entries, memory-mapped for lookups and appends."""

    entry: struct.Struct  # set by subclasses

    def __init__(self, path: str | Path, base_offset: int, max_index_size: int, writable: bool = True) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.entry.size
        self._mmap: mmap.mmap | None = None
        self._last: tuple[int, ...] | None = None  # fields of the last entry, read once per append
        # Whether the file's length changed since the last flush: msync writes the mapped
        # pages, but only an fsync makes a trim or a preallocation durable.
        self._length_dirty = False
        existed = self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size if existed else 0
            self._file_length = length
            # A file whose length is not a whole number of entries is caught by sanity_check.
            self._length_on_open = length
            self._entries = length // self.entry_size
            self._max_index_size = max_index_size
            size = self._rounded(max_index_size) if writable else self._entries * self.entry_size
            self._map(fd, max(size, self._entries * self.entry_size))
        finally:
            os.close(fd)

    # -- mapping -------------------------------------------------------------------------

    def _rounded(self, size: int) -> int:
        return max(self.entry_size, size - size % self.entry_size)

    def _map(self, fd: int, size: int) -> None:
        if size != self._file_length:
            os.ftruncate(fd, size)
            self._file_length = size
            self._length_dirty = True
        self._mmap = mmap.mmap(fd, size) if size > 0 else None
        self._max_entries = size // self.entry_size

    def resize(self, new_size: int) -> None:
        """Remap the file at ``new_size`` bytes (rounded to whole entries, never below the entries held)."""
        size = max(self._rounded(new_size) if new_size > 0 else 0, self._entries * self.entry_size)
        self._unmap()
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._map(fd, size)
        finally:
            os.close(fd)

    def trim_to_valid_size(self) -> None:
        """Shrink the file to the entries it holds (on roll and close)."""
        self.resize(self._entries * self.entry_size)

    def make_writable(self) -> None:
        """Preallocate to segment.index.bytes again (the segment became the active one)."""
        self.resize(self._max_index_size)

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    # -- state ----------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        """Number of entries held."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """Entries that fit in the mapped file."""
        return self._max_entries

    @property
    def is_full(self) -> bool:
        """Whether no entry can be appended (the segment must roll)."""
        return self._entries >= self._max_entries

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the entries held (not of the preallocated file)."""
        return self._entries * self.entry_size

    def entry_at(self, n: int) -> tuple[int, int]:
        """The raw fields of entry ``n``."""
        assert self._mmap is not None
        return self.entry.unpack_from(self._mmap, n * self.entry_size)

    def _append_raw(self, *fields: int) -> None:
        entries = self._entries
        if entries >= self._max_entries:
            raise CorruptIndexError(f"{self.path}: full ({entries} entries)")
        self.entry.pack_into(self._mmap, entries * self.entry_size, *fields)  # type: ignore[arg-type]
        self._entries = entries + 1
        self._last = fields

    def _last_fields(self) -> tuple[int, ...] | None:
        """The raw fields of the last entry, or None when empty."""
        if self._last is None and self._entries:
            self._last = self.entry_at(self._entries - 1)
        return self._last

    def _largest_lower_bound(self, key: int, field: int = 0) -> int:
        """Slot of the largest entry whose ``field`` is <= ``key``, or -1 if none."""
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        unpack, size, buf = self.entry.unpack_from, self.entry_size, self._mmap
        if unpack(buf, 0)[field] > key:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(buf, mid * size)[field] <= key:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _truncate_to_entries(self, n: int) -> None:
        n = max(0, min(n, self._entries))
        self._last = None
        if self._mmap is not None and n < self._entries:
            # Zero the dropped tail so a later crash cannot resurrect stale entries.
            start = n * self.entry_size
            self._mmap[start : self._entries * self.entry_size] = bytes((self._entries - n) * self.entry_size)
        self._entries = n

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate_to_entries(0)

    def flush(self) -> None:
        """Write the mapped pages, and the file's length if it changed, to disk."""
        if self._mmap is not None:
            self._mmap.flush()
        if self._length_dirty:
            fsync_path(self.path)
            self._length_dirty = False

    def close(self) -> None:
        """Trim to the entries held and unmap."""
        if self._mmap is not None:
            self.trim_to_valid_size()
            self.flush()
        self._unmap()

    def delete(self) -> None:
        """Unmap and remove the file."""
        self._unmap()
        self.path.unlink(missing_ok=True)

    def rename_to(self, path: Path) -> None:
        """Rename the file (the mapping stays valid)."""
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def _check_length(self) -> None:
        if self._length_on_open % self.entry_size:
            raise CorruptIndexError(
                f"{self.path}: length {self._length_on_open} is not a multiple of {self.entry_size}"
            )
