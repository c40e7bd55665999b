"""A power cut in the middle of a truncation (a follower cutting its diverged tail) must not leave
a gap: the truncated segment followed by the segments the truncation was removing."""

from __future__ import annotations

import storage.segment
from storage import Log
from tests.storage.batches import make_batch
from tests.storage.power_loss import Disk

# No sparse index entry and no timestamp: the indexes stay empty, so nothing but the recovery
# point decides whether the truncated segment is scanned.
CONFIG = {"segment.bytes": 400, "index.interval.bytes": 10**6, "flush.messages": 1}


def test_a_power_cut_during_a_truncation_leaves_no_gap(tmp_path, monkeypatch):
    directory = tmp_path / "live"
    with Log(directory, CONFIG) as log:
        while len(log.segments) < 3:
            log.append(make_batch([b"x" * 60], [-1]))
        end = log.log_end_offset
    # The truncated .log file reached the disk; the renames of the segments it drops did not.
    disk = Disk(
        directory, cut_at=10**9, unsynced=lambda name: "keep" if name.endswith(".log") else "drop", names="drop"
    )
    real = storage.segment.LogSegment.rename_to_deleted

    def cut_at_the_rename(segment):
        disk.cut_at = disk.events + 1
        return real(segment)

    with disk.installed():
        log = Log(directory, CONFIG)
        monkeypatch.setattr(storage.segment.LogSegment, "rename_to_deleted", cut_at_the_rename)
        log.truncate_to(2)
    monkeypatch.undo()
    disk.release()
    with Log(disk.write_image(tmp_path / "after-cut"), CONFIG) as after:
        offsets = []
        offset = after.log_start_offset
        while offset < after.log_end_offset:
            info = after.read(offset, 10**6)
            offsets.append((info.first_offset, info.next_offset))
            offset = info.next_offset
        # The truncation happened (the log ends at 2) or did not (it ends where it did): no gap.
        assert after.log_end_offset in (2, end)
        assert [o for pair in offsets for o in pair][1:-1:2] == [o for pair in offsets for o in pair][2::2]
        assert sum(b - a for a, b in offsets) == after.log_end_offset
