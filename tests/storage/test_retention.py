"""Retention: whole segments deleted by time (largest timestamp), size and log start offset."""

from __future__ import annotations

import pytest

from storage import Log
from storage.log_files import DELETED_SUFFIX
from tests.storage.batches import make_batch

# Every test here runs over both twins of the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

DAY = 24 * 3600 * 1000


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return Clock(10 * DAY)


def _open(tmp_path, clock, **config):
    return Log(tmp_path / "t-0", {"segment.bytes": 500, "file.delete.delay.ms": 0, **config}, time_ms=clock)


def _fill(log, timestamps):
    for ts in timestamps:
        log.append(make_batch([b"v" * 100], [ts]))


def test_retention_ms_by_largest_timestamp(tmp_path, clock):
    with _open(tmp_path, clock, **{"retention.ms": DAY}) as log:
        _fill(log, [clock.now - 3 * DAY] * 6 + [clock.now - 2 * DAY] * 3 + [clock.now] * 6)
        before = [(s.base_offset, s.largest_timestamp) for s in log.segments]
        assert len(before) >= 4
        expired = [base for base, ts in before if clock.now - ts > DAY]
        deleted = log.delete_old_segments()
        assert deleted == len(expired) > 0
        assert log.log_start_offset == log.segments[0].base_offset
        assert all(clock.now - s.largest_timestamp <= DAY for s in log.segments)
        assert not list((tmp_path / "t-0").glob("*" + DELETED_SUFFIX))
        for base in expired:
            assert not (tmp_path / "t-0" / f"{base:020d}.log").exists()
        assert log.read(log.log_start_offset, 10**6).records


def test_retention_ms_minus_one_keeps_everything(tmp_path, clock):
    with _open(tmp_path, clock, **{"retention.ms": -1}) as log:
        _fill(log, [0] * 12)
        assert log.delete_old_segments() == 0


def test_fully_expired_log_rolls_a_new_active_segment(tmp_path, clock):
    with _open(tmp_path, clock, **{"retention.ms": DAY}) as log:
        _fill(log, [clock.now - 2 * DAY] * 8)
        end = log.log_end_offset
        assert log.delete_old_segments() >= 2
        assert len(log.segments) == 1 and log.active_segment.size == 0
        assert log.log_start_offset == log.log_end_offset == end
        assert log.append(make_batch([b"x"], [clock.now])).first_offset == end
        assert log.delete_old_segments() == 0  # the fresh data is young


def test_retention_bytes(tmp_path, clock):
    with _open(tmp_path, clock, **{"retention.bytes": 1200, "retention.ms": -1}) as log:
        _fill(log, [clock.now] * 20)
        sizes = [s.size for s in log.segments]
        excess, expected = sum(sizes) - 1200, 0
        for size in sizes:  # oldest first, while what is left stays at or above the limit
            if excess < size:
                break
            excess -= size
            expected += 1
        assert log.delete_old_segments() == expected > 0
        assert 1200 <= log.size_in_bytes < 1200 + log.segments[0].size


def test_retention_never_passes_high_watermark(tmp_path, clock):
    with _open(tmp_path, clock, **{"retention.ms": DAY}) as log:
        _fill(log, [0] * 12)
        second = log.segments[1].base_offset
        assert log.delete_old_segments(high_watermark=second) == 1
        assert log.segments[0].base_offset == second


def test_log_start_offset_deletes_segments_below_it(tmp_path, clock):
    with _open(tmp_path, clock, **{"retention.ms": -1}) as log:
        _fill(log, [clock.now] * 12)
        bases = [s.base_offset for s in log.segments]
        log.delete_records(bases[2] + 1)
        assert log.segments[0].base_offset == bases[2]
        assert log.log_start_offset == bases[2] + 1


def test_compact_only_policy_ignores_time_retention(tmp_path, clock):
    with _open(tmp_path, clock, **{"retention.ms": 1, "cleanup.policy": "compact"}) as log:
        for n in range(12):  # a compacted topic takes keyed records only
            log.append(make_batch([b"v" * 100], [0], keys=[b"k%d" % n]))
        assert log.delete_old_segments() == 0


def test_file_delete_delay(tmp_path, clock):
    with _open(tmp_path, clock, **{"retention.ms": DAY, "file.delete.delay.ms": 60_000}) as log:
        _fill(log, [0] * 8 + [clock.now] * 4)
        first = log.segments[0]
        held = log.read(0, 10**6)  # a reader took a snapshot before the deletion
        assert log.delete_old_segments() > 0
        pending = list((tmp_path / "t-0").glob("*" + DELETED_SUFFIX))
        assert pending and not first.log_path.name.endswith(".log")
        assert first.read_bytes(0, 10) == held.records[:10]  # still readable through the open file
        clock.now += 59_999
        log.delete_pending_files()
        assert all(p.exists() for p in pending)
        clock.now += 1
        log.delete_pending_files()
        assert not any(p.exists() for p in pending)


def test_leftover_deleted_files_are_removed_on_open(tmp_path, clock):
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / ("00000000000000000000.log" + DELETED_SUFFIX)).write_bytes(b"old")
    with _open(tmp_path, clock) as log:
        assert log.log_end_offset == 0
    assert not list(directory.glob("*" + DELETED_SUFFIX))
