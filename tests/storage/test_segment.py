"""LogSegment: append, sparse indexes, reads of whole batches, recovery, truncation, roll."""

from __future__ import annotations

import pytest

from storage.batch_header import check_batches
from storage.config import log_config
from storage.log_files import filename_prefix
from storage.segment import LogSegment
from tests.storage.batches import make_batch

# Every test here runs over both twins of the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")


def _segment(tmp_path, base=0, **overrides):
    config = log_config({"index.interval.bytes": 4096, **overrides})
    return LogSegment(tmp_path, base, config, created_ms=0)


def _append(segment, offset, values, timestamps=None):
    data = make_batch(values, timestamps, base_offset=offset)
    segment.append([data], len(data), check_batches(data))
    return data


def test_file_names_are_twenty_digit_base_offsets(tmp_path):
    segment = _segment(tmp_path, base=42)
    assert segment.log_path.name == "00000000000000000042.log"
    assert segment.offset_index.path.name == "00000000000000000042.index"
    assert segment.time_index.path.name == "00000000000000000042.timeindex"
    assert filename_prefix(2**40) == "00000001099511627776"


def test_append_and_read_whole_batches(tmp_path):
    segment = _segment(tmp_path)
    batches = [_append(segment, 3 * n, [b"a", b"b", b"c"]) for n in range(5)]
    assert segment.next_offset == 15 and segment.size == sum(map(len, batches))
    header, data, next_offset = segment.read(4, 10**6)
    assert header.base_offset == 3 and data == b"".join(batches[1:]) and next_offset == 15
    header, data, next_offset = segment.read(4, len(batches[1]) + len(batches[2]) - 1)
    assert data == batches[1] and next_offset == 6  # cut at a batch boundary, never mid-batch
    assert segment.read(4, 10)[1:] == (b"", 4)
    header, data, next_offset = segment.read(4, 10, min_one_batch=True)
    assert data == batches[1] and next_offset == 6
    assert segment.read(15, 100) is None
    position = len(batches[0]) + len(batches[1]) + len(batches[2])
    _, data, next_offset = segment.read(0, 10**6, max_position=position)
    assert data == b"".join(batches[:3]) and next_offset == 9


def test_sparse_index_one_entry_per_interval_not_per_batch(tmp_path):
    segment = _segment(tmp_path, **{"index.interval.bytes": 1000})
    sizes = [len(_append(segment, n, [b"x" * 200])) for n in range(40)]
    total = sum(sizes)
    assert 0 < segment.offset_index.entries < 40
    assert segment.offset_index.entries >= total // (1000 + max(sizes)) - 1
    for n in range(40):
        assert segment.translate_offset(n).base_offset == n


def test_time_index_tracks_max_timestamp(tmp_path):
    segment = _segment(tmp_path, **{"index.interval.bytes": 0})
    for n, ts in enumerate([100, 300, 200, 400, 400]):
        _append(segment, n, [b"v"], [ts])
    assert segment.max_timestamp_so_far == 400 and segment.offset_of_max_timestamp == 3
    assert segment.find_offset_by_timestamp(250, 0) == (300, 1)
    assert segment.find_offset_by_timestamp(400, 0) == (400, 3)
    assert segment.find_offset_by_timestamp(401, 0) is None
    assert segment.find_offset_by_timestamp(50, 2) == (200, 2)


def test_recover_rebuilds_indexes_and_cuts_garbage(tmp_path):
    segment = _segment(tmp_path, **{"index.interval.bytes": 100})
    batches = [_append(segment, n * 2, [b"k" * 50, b"l" * 50]) for n in range(20)]
    entries = [segment.offset_index.entry_at(i) for i in range(segment.offset_index.entries)]
    with open(segment.log_path, "ab") as file:
        file.write(b"\x00garbage" * 10)
    segment._size += 80
    assert segment.recover() == 80
    assert [segment.offset_index.entry_at(i) for i in range(segment.offset_index.entries)] == entries
    assert segment.size == sum(map(len, batches)) and segment.next_offset == 40
    assert segment.log_path.read_bytes() == b"".join(batches)


def test_recover_across_chunk_boundaries(tmp_path, monkeypatch):
    import storage.segment as segment_module

    monkeypatch.setattr(segment_module, "RECOVERY_CHUNK", 1000)
    segment = _segment(tmp_path)
    batches = [_append(segment, n, [bytes([n]) * (300 + 170 * n)]) for n in range(12)]
    assert segment.recover() == 0
    assert segment.next_offset == 12 and segment.size == sum(map(len, batches))


def test_truncate_to_removes_batch_holding_offset_and_after(tmp_path):
    segment = _segment(tmp_path, **{"index.interval.bytes": 0})
    batches = [_append(segment, 3 * n, [b"a", b"b", b"c"], [10 * n] * 3) for n in range(6)]
    removed = segment.truncate_to(7)  # inside the batch 6..8
    assert removed == sum(map(len, batches[2:]))
    assert segment.next_offset == 6 and segment.size == len(batches[0]) + len(batches[1])
    assert segment.max_timestamp_so_far == 10
    assert segment.offset_index.last_entry[0] < 6
    _append(segment, 6, [b"z"])
    assert segment.translate_offset(6).base_offset == 6


def test_should_roll_conditions(tmp_path):
    segment = _segment(tmp_path, **{"segment.ms": 1000})
    assert not segment.should_roll(10**9, 0, 0, 0, max_size=10)  # an empty segment never rolls
    data = _append(segment, 0, [b"x"], [5000])
    assert segment.should_roll(100, 5000, 1, 0, max_size=len(data) + 99)  # size
    assert not segment.should_roll(100, 5000, 1, 0, max_size=len(data) + 100)
    assert segment.should_roll(1, 6001, 1, 0, max_size=10**6)  # segment.ms from the first batch's timestamp
    assert not segment.should_roll(1, 6000, 1, 0, max_size=10**6)
    assert segment.should_roll(1, 5000, 2**31, 0, max_size=10**6)  # relative offset overflow


def test_should_roll_when_index_full(tmp_path):
    segment = _segment(tmp_path, **{"index.interval.bytes": 0, "segment.index.bytes": 8 * 3})
    for n in range(4):
        _append(segment, n, [b"x"])
    assert segment.offset_index.is_full
    assert segment.should_roll(1, 0, 5, 0, max_size=10**6)


def test_close_trims_indexes_and_reopen_restores_state(tmp_path):
    segment = _segment(tmp_path, **{"index.interval.bytes": 0})
    for n in range(5):
        _append(segment, n, [b"x"], [n * 100])
    segment.close()
    assert segment.offset_index.path.stat().st_size == 8 * 4
    reopened = LogSegment(tmp_path, 0, log_config(), created_ms=0, active=False)
    assert not reopened.needs_recovery
    assert reopened.next_offset == 5 and reopened.max_timestamp_so_far == 400
    assert reopened.rolling_based_timestamp == 0
    reopened.close()
