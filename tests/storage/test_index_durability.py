"""Index writes are made durable before anything that lets the next open trust them: a power cut
that drops every unsynced write must leave no index of a flushed segment to rebuild."""

from __future__ import annotations

import logging

from storage import Log
from tests.storage.batches import make_batch
from tests.storage.power_loss import Disk

CONFIG = {"segment.bytes": 600, "index.interval.bytes": 90, "segment.index.bytes": 12 * 8}


def _power_cut_after(tmp_path, config, workload):
    """Run ``workload(log)`` on a watched disk, then cut the power with every unsynced write dropped."""
    disk = Disk(tmp_path / "live", cut_at=10**9, unsynced="drop")
    with disk.installed():
        workload(Log(tmp_path / "live", config))
        disk.cut_at = disk.events + 1
        disk.tick("after the workload")
    disk.release()
    return disk.write_image(tmp_path / "after-cut")


def _open_warnings(directory, config, caplog):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="storage"), Log(directory, config) as log:
        end = log.log_end_offset
    return end, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_clean_close_makes_the_trim_of_an_empty_index_durable(tmp_path, caplog):
    """The active segment held one small batch, so its index had no entry: the close flushed it
    preallocated, then trimmed it to nothing and never synced that (no map left to flush). After
    the cut, the clean-shutdown marker vouched for a zero-filled index."""

    def workload(log):
        for n in range(12):
            log.append(make_batch([bytes([n]) * 80]))
        log.roll()
        log.append(make_batch([b"small"]))
        log.close()

    directory = _power_cut_after(tmp_path, CONFIG, workload)
    end, warnings = _open_warnings(directory, CONFIG, caplog)
    assert end == 13
    assert not warnings, warnings


def test_a_roll_makes_the_rolled_segments_index_writes_durable_under_flush_messages_1(tmp_path, caplog):
    """With flush.messages=1 the rolled segment's data was already synced, so the flush at the roll
    skipped it, and its final time index entry and trimmed indexes never reached the disk."""
    config = {**CONFIG, "flush.messages": 1}

    def workload(log):
        for n in range(12):
            log.append(make_batch([bytes([n]) * 80], [1000 + n]))
        assert len(log.segments) >= 3
        # The process then dies without closing: the next open is an unclean one.

    directory = _power_cut_after(tmp_path, config, workload)
    end, warnings = _open_warnings(directory, config, caplog)
    assert end == 12  # every acknowledged record
    assert not warnings, warnings


def test_a_transaction_index_rebuilt_by_recovery_is_durable_before_the_recovery_point_passes_it(tmp_path, caplog):
    """Recovery rebuilt a lost .txnindex from the log, then checkpointed the recovery point past
    its segment without syncing it: after a second power cut the segment was no longer scanned,
    and read_committed consumers would have read the aborted records as committed."""
    from storage import RecordBatchBuilder, build_control_batch

    directory = tmp_path / "live"
    log = Log(directory, CONFIG)
    builder = RecordBatchBuilder(0, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    builder.append(b"aborted", b"k", 1000)
    log.append(builder.build())
    log.append(build_control_batch(False, 9, 0, 0, timestamp=1000), origin="coordinator")
    log.roll()
    log.append(make_batch([b"after"]))
    log.close()
    # An earlier power cut took the transaction index and the recovery point, and the log was
    # not shut down cleanly: the next open scans every segment and rebuilds the index.
    for name in ("00000000000000000000.txnindex", "recovery-point-offset-checkpoint", ".kafka_cleanshutdown"):
        (directory / name).unlink()

    def recovery(log):
        assert [a.last_offset for a in log.collect_aborted_transactions(0, 3)] == [1]
        assert log.recovery_point == 3
        # The process dies right after the recovery: its writes are in the page cache only.

    after = _power_cut_after(tmp_path, CONFIG, recovery)
    with Log(after, CONFIG) as reopened:
        assert reopened.log_end_offset == 3
        aborted = reopened.collect_aborted_transactions(0, 3)
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(9, 0, 1)]
