"""The time index (``.timeindex``): sparse map from timestamp to offset in a segment (KIP-32).

Each 12-byte entry is (timestamp int64, offset - base offset as int32). The segment adds
an entry alongside each offset index entry, holding the largest timestamp seen so far in
the segment and the offset of the batch that carried it, and only when that timestamp
grew: timestamps in the index are strictly increasing even when the producer's are not.
"""

from __future__ import annotations

import struct

import numpy as np

from storage.abstract_index import AbstractIndex, CorruptIndexError

_ENTRY = struct.Struct(">qi")
_DTYPE = np.dtype([("timestamp", ">i8"), ("offset", ">i4")])


class TimeIndex(AbstractIndex):
    """Memory-mapped ``<base offset>.timeindex`` of one segment."""

    entry = _ENTRY

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's.

        ``skip_full_check`` lets the segment write one final entry into the slot kept free
        for it when it rolls, as Kafka does.
        """
        last = self._last if self._last is not None else self._last_fields()
        if last is not None and (timestamp <= last[0] or offset - self.base_offset < last[1]):
            return
        if skip_full_check or self._entries < self._max_entries - 1:  # not is_full
            self._append_raw(timestamp, offset - self.base_offset)

    @property
    def is_full(self) -> bool:
        """Whether the index cannot take another ordinary entry.

        One slot is kept free so the segment can record its final largest timestamp on
        roll (Kafka does the same).
        """
        return self._entries >= self._max_entries - 1

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, or (-1, base offset)."""
        slot = self._largest_lower_bound(target_timestamp, 0)
        if slot < 0:
            return -1, self.base_offset
        timestamp, relative = self.entry_at(slot)
        return timestamp, self.base_offset + relative

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        last = self._last_fields()
        if last is None:
            return -1, self.base_offset
        return last[0], self.base_offset + last[1]

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose offset is >= ``offset``."""
        n = self._entries
        while n > 0 and self.entry_at(n - 1)[1] + self.base_offset >= offset:
            n -= 1
        self._truncate_to_entries(n)

    def sanity_check(self, next_offset: int) -> None:
        """Raise CorruptIndexError unless timestamps increase and offsets lie inside the segment."""
        self._check_length()
        if not self._entries:
            return
        assert self._mmap is not None
        entries = np.frombuffer(self._mmap[: self.size_in_bytes], dtype=_DTYPE)
        stamps, offsets = entries["timestamp"], entries["offset"]
        bad = bool(offsets[0] < 0) or (
            self._entries > 1 and bool(np.any(np.diff(stamps) <= 0) or np.any(np.diff(offsets) < 0))
        )
        last = int(offsets[-1]) + self.base_offset
        if bad:
            raise CorruptIndexError(f"{self.path}: entries are not increasing")
        if last >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(f"{self.path}: points past the segment end ({last})")
