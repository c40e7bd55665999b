"""Index files that a power cut left stale, zero-filled, short or wrong: every segment's indexes are
sanity-checked when the log opens, after clean and unclean shutdowns alike, and one that fails is
rebuilt from the segment's batches with one warning line naming the file (Kafka's LogLoader)."""

from __future__ import annotations

import logging

import pytest

from storage import Log
from storage.log import TimestampOffset
from storage.segment import LogSegment
from tests.storage.batches import abandon, make_batch

# Every test here runs over both twins of the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

INDEX_BYTES = 12 * 64
CONFIG = {"segment.bytes": 2000, "index.interval.bytes": 150, "segment.index.bytes": INDEX_BYTES}
COUNT = 30


def _timestamp(n: int) -> int:
    # Not monotonic, so the time index holds fewer entries than the offset index.
    return 1000 + 10 * n - (25 if n % 4 == 3 else 0)


def _fill(directory, config, *, clean: bool):
    """A log of COUNT one-record batches over several segments; what a reader saw, and the index entries."""
    log = Log(directory, config)
    for n in range(COUNT):
        log.append(make_batch([bytes([n]) * 100], [_timestamp(n)]))
    seen = _picture(log)
    if clean:
        log.close()
    else:
        abandon(log)
    return seen


def _picture(log: Log):
    """Everything the indexes decide: records, per-segment index entries and largest timestamps, time lookups."""
    records = [log.read(n, 1, min_one_batch=True).records for n in range(log.log_start_offset, log.log_end_offset)]
    indexes = [
        (
            s.base_offset,
            [s.offset_index.entry_at(i) for i in range(s.offset_index.entries)],
            s.max_timestamp_so_far,
        )
        for s in log.segments
    ]
    lookups = [log.offset_for_timestamp(t) for t in range(990, _timestamp(COUNT - 1) + 2, 5)]
    return records, indexes, lookups


def _expected_lookup(ts: int) -> TimestampOffset | None:
    for n in range(COUNT):
        if _timestamp(n) >= ts:
            return TimestampOffset(_timestamp(n), n)
    return None


def _rolled(directory):
    """The files of the first (rolled and flushed) segment."""
    first = sorted(directory.glob("*.log"))[0]
    return first.with_suffix(".index"), first.with_suffix(".timeindex")


def _rewrite(path, transform) -> None:
    path.write_bytes(transform(path.read_bytes()))


def test_stale_time_index_of_a_rolled_segment_opens_after_unclean_shutdown(tmp_path, caplog):
    """The reported failure: the final time index entry written at a roll was never synced.

    With flush.messages=1 the rolled segment's data was already synced, so the roll's index
    writes were lost to the power cut; opening raised CorruptIndexError ("timeindex is full").
    """
    directory = tmp_path / "t-0"
    config = {**CONFIG, "flush.messages": 1}
    records, _, _ = _fill(directory, config, clean=False)
    _, time_index = _rolled(directory)
    _rewrite(time_index, lambda data: data[:-12])
    with Log(directory, config) as log:
        again, _, lookups = _picture(log)
        assert again == records
        assert lookups == [_expected_lookup(t) for t in range(990, _timestamp(COUNT - 1) + 2, 5)]
        assert log.append(make_batch([b"after"], [5000])).first_offset == COUNT
    with Log(directory, config) as log:  # and the clean close of that log reopens too
        assert log.log_end_offset == COUNT + 1
        assert log.offset_for_timestamp(5000) == TimestampOffset(5000, COUNT)


def _zero_filled(data: bytes) -> bytes:
    return data + bytes(INDEX_BYTES - len(data))  # the preallocated length: the roll's trim was lost


def _last_entry_moved(data: bytes) -> bytes:
    relative, position = int.from_bytes(data[-8:-4], "big"), int.from_bytes(data[-4:], "big")
    return data[:-8] + relative.to_bytes(4, "big") + (position + 1).to_bytes(4, "big")


def _last_entry_offset_later(data: bytes) -> bytes:
    relative = int.from_bytes(data[-8:-4], "big")
    return data[:-8] + (relative + 1).to_bytes(4, "big") + data[-4:]


def _last_time_entry_later(data: bytes) -> bytes:
    timestamp = int.from_bytes(data[-12:-4], "big", signed=True)
    return data[:-12] + (timestamp + 7).to_bytes(8, "big", signed=True) + data[-4:]


CORRUPTIONS = {
    "timeindex zero-filled": (1, _zero_filled),
    "timeindex all zeros": (1, lambda data: bytes(len(data))),
    "timeindex torn": (1, lambda data: data[:-5]),
    "timeindex last entry wrong": (1, _last_time_entry_later),
    "index zero-filled": (0, _zero_filled),
    "index torn": (0, lambda data: data[:-3]),
    "index points inside a batch": (0, _last_entry_moved),
    "index names the wrong offset": (0, _last_entry_offset_later),
}


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_bad_index_of_a_flushed_segment_is_rebuilt_with_one_warning(tmp_path, caplog, corruption, clean):
    directory = tmp_path / "t-0"
    records, indexes, lookups = _fill(directory, CONFIG, clean=clean)
    which, transform = CORRUPTIONS[corruption]
    victim = _rolled(directory)[which]
    _rewrite(victim, transform)
    caplog.set_level(logging.WARNING, logger="storage")
    with Log(directory, CONFIG) as log:
        assert _picture(log) == (records, indexes, lookups)
        assert lookups == [_expected_lookup(t) for t in range(990, _timestamp(COUNT - 1) + 2, 5)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(victim) in warnings[0] and "rebuilding" in warnings[0]
    # Rebuilt and trimmed: the next open finds nothing to repair.
    caplog.clear()
    with Log(directory, CONFIG) as log:
        assert _picture(log) == (records, indexes, lookups)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_intact_indexes_open_without_a_warning_after_either_shutdown(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="storage")
    for clean in (True, False):
        directory = tmp_path / f"t-{int(clean)}"
        _fill(directory, CONFIG, clean=clean)
        with Log(directory, CONFIG):
            pass
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_segment_sanity_check_names_the_file(tmp_path):
    directory = tmp_path / "t-0"
    _fill(directory, CONFIG, clean=True)
    index, time_index = _rolled(directory)
    _rewrite(time_index, _last_time_entry_later)
    segment = LogSegment(directory, 0, _config(), created_ms=0, active=False)
    try:
        assert segment.needs_recovery
        assert segment.index_problem.startswith(str(time_index))
        segment.make_active()
        segment.recover()
        segment.sanity_check()  # rebuilt: passes
    finally:
        segment.close()
    _rewrite(index, _last_entry_moved)
    segment = LogSegment(directory, 0, _config(), created_ms=0, active=False)
    try:
        assert segment.index_problem.startswith(str(index))
    finally:
        segment.close_without_trim()


def _config():
    from storage.config import log_config

    return log_config(CONFIG)


def test_a_bad_index_of_an_interrupted_swap_is_rebuilt_with_one_warning(tmp_path, caplog):
    """The cleaner synced the new segment before committing its swap; if its index is damaged
    anyway when the swap is completed on open, that is worth the same one line."""
    from storage import RecordBatchBuilder
    from storage.cleaner import LogCleaner

    class Crash(Exception):
        pass

    def crash_after_commit(at: str) -> None:
        if at == "swap:committed":
            raise Crash(at)

    config = {
        "cleanup.policy": "compact",
        "segment.bytes": 10**6,
        "index.interval.bytes": 50,
        "file.delete.delay.ms": 0,
    }
    directory = tmp_path / "t-0"
    log = Log(directory, config)
    for n in range(24):
        builder = RecordBatchBuilder(0)
        builder.append(b"v%d" % n + bytes(60), b"k%d" % (n % 4), 1000 + n)
        log.append(builder.build())
        if n % 8 == 7:
            log.roll()
    with pytest.raises(Crash):
        LogCleaner(step=crash_after_commit).clean(log, force=True)
    abandon(log)
    victim = directory / f"{0:020d}.timeindex.swap"
    _rewrite(victim, lambda data: bytes(len(data)))
    caplog.set_level(logging.WARNING, logger="storage")
    with Log(directory, config) as reopened:
        offsets = [reopened.read(o, 1, min_one_batch=True).first_offset for o in (20, 21, 22, 23)]
        assert offsets == [20, 21, 22, 23]
        assert reopened.offset_for_timestamp(1000).offset == 20  # the older values of each key are gone
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(victim) in warnings[0], warnings
