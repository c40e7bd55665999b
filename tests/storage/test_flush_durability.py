"""flush.messages=1: an acknowledged append is durable, and costs as few syncs as that takes."""

from __future__ import annotations

import pytest

import storage.log
from storage import Log
from storage.log_files import RECOVERY_POINT_FILE
from tests.storage.batches import make_batch
from tests.storage.power_loss import Disk

# Every test here runs over both twins of the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

CONFIG = {"segment.bytes": 600, "index.interval.bytes": 90, "flush.messages": 1}


def test_records_acknowledged_in_a_new_segment_survive_a_power_cut(tmp_path):
    """A roll creates the new segment's files; their names must be durable before a flush of
    their data can make an append durable (a flush syncs files, never the directory). Here no
    other write of the roll syncs the directory: the producer-state snapshot at the new base
    offset was already taken by the clean close before it."""
    directory = tmp_path / "live"
    disk = Disk(directory, cut_at=10**9, unsynced="drop")
    with disk.installed():
        batch = make_batch([b"x" * 80])
        with Log(directory, CONFIG) as log:
            while log.active_segment.size + len(batch) <= CONFIG["segment.bytes"]:  # then one more rolls
                log.append(batch)
        log = Log(directory, CONFIG)
        first = log.log_end_offset
        for _ in range(3):
            log.append(batch)
        assert [s.base_offset for s in log.segments][-1] == first
        acked = log.log_end_offset
        disk.cut_at = disk.events + 1
        disk.tick("acknowledged")
    disk.release()
    with Log(disk.write_image(tmp_path / "after-cut"), CONFIG) as after:
        assert after.log_end_offset == acked


def test_the_recovery_point_checkpoint_is_written_when_it_moves_to_another_segment(tmp_path, monkeypatch):
    """Recovery scans from the start of the segment holding the checkpointed recovery point, so
    rewriting the checkpoint at every flush inside one segment would buy nothing for three syncs."""
    written = []
    real = storage.log.write_offset

    def counting(path, offset):
        if path.name == RECOVERY_POINT_FILE:
            written.append(offset)
        real(path, offset)

    monkeypatch.setattr(storage.log, "write_offset", counting)
    log = Log(tmp_path / "t-0", CONFIG)
    written.clear()
    for _ in range(20):
        log.append(make_batch([b"x" * 80]))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    assert log.recovery_point == 20  # every append flushed
    # Written once per segment the recovery point moved into, and never again inside it.
    assert [max(b for b in bases if b <= offset) for offset in written] == bases[1:]
    log.close()
    assert written[-1] == 20 and storage.log.read_offset(tmp_path / "t-0" / RECOVERY_POINT_FILE) == 20
