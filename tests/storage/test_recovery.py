"""Recovery after crashes and corruption: every batch before the fault survives byte for byte,
nothing after it is served, and appends continue at the right offset."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import Log
from storage.log_files import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE
from tests.storage.batches import abandon, make_batch

# Every test here runs over both twins of the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

CONFIG = {"segment.bytes": 2000, "index.interval.bytes": 150}


def _fill(directory, count=30, config=CONFIG):
    """A crashed log of ``count`` one-record batches; returns each batch's stored bytes."""
    log = Log(directory, config)
    for n in range(count):
        log.append(make_batch([bytes([n % 256]) * (20 + 7 * n)], [1000 + n]))
    stored = _stored_batches(log)
    abandon(log)
    return stored


def _stored_batches(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1, min_one_batch=True)
        out.append(result.records)
        offset += 1
    return out


def _check_prefix(log, stored, survivors):
    """The first ``survivors`` batches are intact, nothing else is served, appends continue."""
    assert log.log_end_offset == survivors
    assert _stored_batches(log) == stored[:survivors]
    info = log.append(make_batch([b"after"]))
    assert info.first_offset == survivors
    assert log.read(survivors, 10**6).records.endswith(b"after" + b"\x00")


def _survivors_after_cut(stored, segments, cut_segment, cut_at):
    """Batches that survive cutting segment ``cut_segment``'s file at byte ``cut_at``."""
    survivors = sum(1 for s in segments[:cut_segment] for _ in range(s[1] - s[0]))
    position = 0
    for n in range(segments[cut_segment][0], segments[cut_segment][1]):
        position += len(stored[n])
        if position > cut_at:
            break
        survivors += 1
    return survivors


def test_clean_shutdown_skips_scan_and_reopens(tmp_path, monkeypatch):
    log = Log(tmp_path / "t-0", CONFIG)
    for n in range(30):
        log.append(make_batch([bytes([n]) * 50]))
    stored = _stored_batches(log)
    log.close()
    assert (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()
    import storage.segment

    calls = []
    real = storage.segment.LogSegment.recover
    monkeypatch.setattr(storage.segment.LogSegment, "recover", lambda self: calls.append(self) or real(self))
    with Log(tmp_path / "t-0", CONFIG) as reopened:
        assert not calls
        assert not (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
        _check_prefix(reopened, stored, 30)


def test_crash_without_close_recovers_everything_written(tmp_path):
    stored = _fill(tmp_path / "t-0")
    assert not (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()
    with Log(tmp_path / "t-0", CONFIG) as log:
        _check_prefix(log, stored, 30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_truncated_at_any_byte(tmp_path_factory, data):
    directory = tmp_path_factory.mktemp("cut") / "t-0"
    stored = _fill(directory)
    files = sorted(directory.glob("*.log"))
    bounds = []
    for path in files:
        base = int(path.stem)
        bounds.append(base)
    bounds.append(30)
    segments = list(zip(bounds, bounds[1:], strict=False))
    victim = data.draw(st.integers(0, len(files) - 1), label="segment")
    size = files[victim].stat().st_size
    cut_at = data.draw(st.integers(0, size - 1), label="cut at")  # cutting at the full size cuts nothing
    os.truncate(files[victim], cut_at)
    (directory / RECOVERY_POINT_FILE).unlink()  # nothing was flushed: every segment is scanned
    expected = _survivors_after_cut(stored, segments, victim, cut_at)
    with Log(directory, CONFIG) as log:
        _check_prefix(log, stored, expected)
        assert all(s.base_offset <= expected for s in log.segments)


def test_truncated_at_random_positions_of_the_last_segment(tmp_path):
    rng = random.Random(7)
    for trial in range(15):
        directory = tmp_path / f"t-{trial}"
        stored = _fill(directory)
        last = sorted(directory.glob("*.log"))[-1]
        base = int(last.stem)
        cut_at = rng.randrange(last.stat().st_size + 1)
        os.truncate(last, cut_at)
        position, survivors = 0, base
        for batch in stored[base:]:
            position += len(batch)
            if position > cut_at:
                break
            survivors += 1
        with Log(directory, CONFIG) as log:
            _check_prefix(log, stored, survivors)


def test_garbage_appended(tmp_path):
    stored = _fill(tmp_path / "t-0")
    last = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    with open(last, "ab") as file:
        file.write(os.urandom(5000))
    with Log(tmp_path / "t-0", CONFIG) as log:
        _check_prefix(log, stored, 30)


def test_valid_but_stale_batch_appended_is_cut(tmp_path):
    # A copy of an earlier batch passes its CRC; its offsets going backwards end the log.
    stored = _fill(tmp_path / "t-0")
    last = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    with open(last, "ab") as file:
        file.write(stored[0])
    with Log(tmp_path / "t-0", CONFIG) as log:
        _check_prefix(log, stored, 30)


def test_bits_flipped_in_last_batch(tmp_path):
    rng = random.Random(3)
    for trial in range(10):
        directory = tmp_path / f"t-{trial}"
        stored = _fill(directory)
        last = sorted(directory.glob("*.log"))[-1]
        data = bytearray(last.read_bytes())
        # Any byte the CRC covers, or the length/magic; not baseOffset/epoch (not covered).
        start = len(data) - len(stored[-1])
        position = start + rng.choice([rng.randrange(16, len(stored[-1])), 8, 11])
        data[position] ^= 1 << rng.randrange(8)
        last.write_bytes(bytes(data))
        with Log(directory, CONFIG) as log:
            _check_prefix(log, stored, 29)


def test_corruption_in_middle_segment_deletes_later_segments(tmp_path):
    stored = _fill(tmp_path / "t-0")
    files = sorted((tmp_path / "t-0").glob("*.log"))
    assert len(files) >= 3
    victim = files[1]
    base = int(victim.stem)
    data = bytearray(victim.read_bytes())
    data[len(stored[base]) + 30] ^= 0xFF  # the segment's second batch
    victim.write_bytes(bytes(data))
    (tmp_path / "t-0" / RECOVERY_POINT_FILE).unlink()  # the checkpoint was lost too: scan everything
    with Log(tmp_path / "t-0", CONFIG) as log:
        _check_prefix(log, stored, base + 1)
        assert [s.base_offset for s in log.segments][-1] == base
    assert not any(int(p.stem) > base for p in (tmp_path / "t-0").glob("*.log"))


def test_missing_and_corrupt_indexes_are_rebuilt_after_clean_shutdown(tmp_path):
    directory = tmp_path / "t-0"
    with Log(directory, CONFIG) as log:
        for n in range(30):
            log.append(make_batch([bytes([n]) * 100], [1000 + n]))
        stored = _stored_batches(log)
        assert len(log.segments) >= 3
        expected_entries = [s.offset_index.entries for s in log.segments]
    indexes = sorted(directory.glob("*.index"))
    time_indexes = sorted(directory.glob("*.timeindex"))
    indexes[0].unlink()
    time_indexes[1].unlink()
    data = bytearray(indexes[1].read_bytes())
    data[:8] = b"\xff" * 8
    indexes[1].write_bytes(bytes(data))
    indexes[2].write_bytes(indexes[2].read_bytes()[:-3])  # not whole entries
    with Log(directory, CONFIG) as log:
        assert [s.offset_index.entries for s in log.segments] == expected_entries
        assert log.offset_for_timestamp(1015).offset == 15
        _check_prefix(log, stored, 30)
    assert indexes[0].exists() and time_indexes[1].exists()


def test_recovery_point_bounds_the_scan(tmp_path, monkeypatch):
    directory = tmp_path / "t-0"
    log = Log(directory, CONFIG)
    for n in range(30):
        log.append(make_batch([bytes([n]) * 50]))
    log.flush(20)
    abandon(log)
    import storage.segment

    scanned = []
    real = storage.segment.LogSegment.recover
    monkeypatch.setattr(
        storage.segment.LogSegment, "recover", lambda self: scanned.append(self.base_offset) or real(self)
    )
    with Log(directory, CONFIG) as reopened:
        assert reopened.log_end_offset == 30
        bases = [s.base_offset for s in reopened.segments]
    assert scanned and min(scanned) == max(b for b in bases if b <= 20)


def test_crashed_process_releases_lock_and_log_recovers(tmp_path):
    directory = tmp_path / "t-0"
    script = textwrap.dedent(
        f"""
        import os
        from storage import Log
        from tests.storage.batches import make_batch
        log = Log({str(directory)!r}, {CONFIG!r})
        for n in range(25):
            log.append(make_batch([bytes([n]) * 40]))
        os._exit(0)  # dies holding the lock, without close()
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=os.getcwd(), timeout=120)
    with Log(directory, CONFIG) as log:
        assert log.log_end_offset == 25
        assert log.append(make_batch([b"next"])).first_offset == 25
