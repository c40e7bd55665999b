"""The offset index (``.index``): sparse map from offset to file position in a segment.

Each 8-byte entry is (offset - base offset as int32, position int32), sorted by both
fields. The segment adds one entry per ``index.interval.bytes`` of batches, keyed by the
last offset of the batch it points at, as Kafka does; a lookup returns the largest
entry at or below the target and the segment scans batch headers forward from there.
"""

from __future__ import annotations

import struct

import numpy as np

from storage.abstract_index import AbstractIndex, CorruptIndexError

_ENTRY = struct.Struct(">ii")
_DTYPE = np.dtype([("offset", ">i4"), ("position", ">i4")])


class OffsetIndex(AbstractIndex):
    """Memory-mapped ``<base offset>.index`` of one segment."""

    entry = _ENTRY

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); both must be larger than the last entry's."""
        relative = offset - self.base_offset
        last = self._last if self._last is not None else self._last_fields()
        if last is not None and (relative <= last[0] or position <= last[1]):
            raise CorruptIndexError(
                f"index entry ({offset}, {position}) is not after the last one "
                f"({last[0] + self.base_offset}, {last[1]})"
            )
        self._append_raw(relative, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, or (base offset, 0)."""
        slot = self._largest_lower_bound(target_offset - self.base_offset, 0)
        if slot < 0:
            return self.base_offset, 0
        relative, position = self.entry_at(slot)
        return self.base_offset + relative, position

    def lookup_by_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with position <= ``position``, or (base offset, 0)."""
        slot = self._largest_lower_bound(position, 1)
        if slot < 0:
            return self.base_offset, 0
        relative, found = self.entry_at(slot)
        return self.base_offset + relative, found

    @property
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base offset, 0) when empty."""
        last = self._last_fields()
        if last is None:
            return self.base_offset, 0
        return self.base_offset + last[0], last[1]

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose offset is >= ``offset``."""
        self._truncate_to_entries(self._largest_lower_bound(offset - self.base_offset - 1, 0) + 1)

    def truncate_to_position(self, position: int) -> None:
        """Remove the entries pointing at ``position`` or later (the log is cut there)."""
        self._truncate_to_entries(self._largest_lower_bound(position - 1, 1) + 1)

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless the entries are strictly increasing and inside the log."""
        self._check_length()
        if not self._entries:
            return
        assert self._mmap is not None
        entries = np.frombuffer(self._mmap[: self.size_in_bytes], dtype=_DTYPE)
        offsets, positions = entries["offset"], entries["position"]
        if offsets[0] < 0 or positions[0] < 0:
            raise CorruptIndexError(f"{self.path}: starts with a negative entry")
        if self._entries > 1 and (np.any(np.diff(offsets) <= 0) or np.any(np.diff(positions) <= 0)):
            raise CorruptIndexError(f"{self.path}: entries are not strictly increasing")
        if int(positions[-1]) >= max(log_size, 1):
            raise CorruptIndexError(f"{self.path}: points past the log end ({positions[-1]} >= {log_size})")
