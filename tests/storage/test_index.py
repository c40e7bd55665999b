"""Offset index and time index: append, lookup, truncation, trimming, sanity checks."""

from __future__ import annotations

import pytest

from storage.abstract_index import CorruptIndexError
from storage.offset_index import OffsetIndex
from storage.time_index import TimeIndex


def test_offset_index_lookup_finds_largest_entry_at_or_below(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 8 * 64)
    for n in range(10):
        index.append(100 + 10 * n, 1000 * n)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(100) == (100, 0)
    assert index.lookup(125) == (120, 2000)
    assert index.lookup(190) == (190, 9000)
    assert index.lookup(10**9) == (190, 9000)
    assert index.lookup_by_position(4500) == (140, 4000)
    assert index.lookup_by_position(0) == (100, 0)
    assert index.last_entry == (190, 9000)


def test_empty_offset_index_lookup_returns_base(tmp_path):
    index = OffsetIndex(tmp_path / "5.index", 5, 80)
    assert index.lookup(1000) == (5, 0)
    assert index.entries == 0


def test_offset_index_rejects_non_increasing_entries(tmp_path):
    index = OffsetIndex(tmp_path / "0.index", 0, 80)
    index.append(10, 100)
    with pytest.raises(CorruptIndexError):
        index.append(10, 200)
    with pytest.raises(CorruptIndexError):
        index.append(11, 100)


def test_offset_index_is_preallocated_full_and_trimmed(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 8 * 4 + 3)  # rounded down to whole entries
    assert path.stat().st_size == 32
    for n in range(4):
        index.append(n, n * 10)
    assert index.is_full
    with pytest.raises(CorruptIndexError):
        index.append(9, 90)
    index.truncate_to(2)
    assert index.entries == 2 and index.last_entry == (1, 10)
    index.close()
    assert path.stat().st_size == 16
    reopened = OffsetIndex(path, 0, 64, writable=False)
    assert reopened.entries == 2 and reopened.lookup(5) == (1, 10)
    reopened.sanity_check(log_size=100)


def test_offset_index_truncate_to_position(tmp_path):
    index = OffsetIndex(tmp_path / "0.index", 0, 800)
    for n in range(5):
        index.append(n * 3 + 2, n * 100)
    index.truncate_to_position(250)
    assert index.entries == 3 and index.last_entry == (8, 200)


def test_offset_index_sanity_check_catches_corruption(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 80)
    index.append(1, 100)
    index.append(2, 200)
    index.close()
    with pytest.raises(CorruptIndexError):  # points past the end of a 150-byte log
        OffsetIndex(path, 0, 80, writable=False).sanity_check(log_size=150)
    data = bytearray(path.read_bytes())
    data[8:16] = data[0:8]  # a repeated entry: not strictly increasing
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 80, writable=False).sanity_check(log_size=1000)
    path.write_bytes(bytes(data[:13]))  # not a whole number of entries
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 80, writable=False).sanity_check(log_size=1000)


def test_preallocated_index_left_by_a_crash_fails_sanity_check(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 80)
    index.append(3, 100)
    index.append(7, 200)
    index.flush()
    index._unmap()  # a crash: the file keeps its preallocated zero tail
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 80).sanity_check(log_size=1000)


def test_time_index_appends_only_growing_timestamps(tmp_path):
    index = TimeIndex(tmp_path / "10.timeindex", 10, 12 * 10)
    index.maybe_append(1000, 12)
    index.maybe_append(900, 15)  # older: ignored
    index.maybe_append(1000, 16)  # equal: ignored
    index.maybe_append(2000, 20)
    assert index.entries == 2
    assert index.lookup(999) == (-1, 10)
    assert index.lookup(1000) == (1000, 12)
    assert index.lookup(1999) == (1000, 12)
    assert index.lookup(5000) == (2000, 20)
    assert index.last_entry == (2000, 20)
    index.truncate_to(20)
    assert index.last_entry == (1000, 12)


def test_time_index_keeps_one_slot_for_the_roll_entry(tmp_path):
    index = TimeIndex(tmp_path / "0.timeindex", 0, 12 * 3)
    index.maybe_append(1, 1)
    index.maybe_append(2, 2)
    assert index.is_full
    index.maybe_append(3, 3)
    assert index.entries == 2
    index.maybe_append(3, 3, skip_full_check=True)
    assert index.entries == 3 and index.last_entry == (3, 3)


def test_time_index_sanity_check(tmp_path):
    path = tmp_path / "0.timeindex"
    index = TimeIndex(path, 0, 120)
    index.maybe_append(100, 5)
    index.maybe_append(200, 9)
    index.close()
    TimeIndex(path, 0, 120, writable=False).sanity_check(next_offset=10)
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, 0, 120, writable=False).sanity_check(next_offset=9)
    data = bytearray(path.read_bytes())
    data[12:20] = (50).to_bytes(8, "big")
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, 0, 120, writable=False).sanity_check(next_offset=10)
