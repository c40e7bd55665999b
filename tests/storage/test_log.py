"""The partition log: appends, reads, offsets by time, truncation, roll, flush, locking, I/O errors."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from storage import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log, TimestampOffset
from storage.batch_header import LOG_APPEND_TIME, batch_boundaries, read_header
from storage.errors import (
    CorruptRecordError,
    InvalidRequestError,
    KafkaStorageError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from tests.storage.batches import make_batch

# Every test here runs over both twins of the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")


class Clock:
    """A settable millisecond clock for time-dependent behaviour."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def open_log(tmp_path, clock):
    logs = []

    def _open(**config):
        log = Log(tmp_path / "topic-0", config, time_ms=clock)
        logs.append(log)
        return log

    yield _open
    for log in logs:
        log.close()


def _offsets(records: bytes) -> list[tuple[int, int]]:
    out = []
    for position, _ in batch_boundaries(records):
        header = read_header(records, position)
        out.append((header.base_offset, header.last_offset))
    return out


def _all_offsets(log: Log, start: int | None = None) -> list[tuple[int, int]]:
    """(base, last) offset of every batch from ``start``, reading segment by segment."""
    out: list[tuple[int, int]] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        records = log.read(offset, 10**6).records
        assert records, f"no records at {offset} below the log end {log.log_end_offset}"
        out.extend(_offsets(records))
        assert log.read(offset, 10**6).next_offset == out[-1][1] + 1
        offset = out[-1][1] + 1
    return out


def test_append_assigns_consecutive_offsets_in_place(open_log):
    log = open_log()
    info = log.append(make_batch([b"a", b"b", b"c"], base_offset=999), leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 2, 1)
    assert info.log_append_time == -1 and info.max_timestamp == 1002
    assert info.headers[0].base_offset == 0 and info.headers[0].partition_leader_epoch == 7
    two = make_batch([b"d"]) + make_batch([b"e", b"f"])
    info = log.append(two)
    assert (info.first_offset, info.last_offset, info.batch_count, info.size_bytes) == (3, 5, 2, len(two))
    assert [h.base_offset for h in info.headers] == [3, 4]
    assert log.log_end_offset == 6
    records = log.read(0, 10**6).records
    assert _offsets(records) == [(0, 2), (3, 3), (4, 5)]
    # Only baseOffset and the epoch changed; the rest of the batch is the producer's bytes.
    original = make_batch([b"a", b"b", b"c"])
    assert records[16 : len(original)] == original[16:]


def test_append_accepts_memoryview_and_bytearray(open_log):
    log = open_log()
    data = make_batch([b"x"])
    log.append(memoryview(data))
    log.append(bytearray(data))
    assert log.log_end_offset == 2


def test_bad_input_leaves_log_untouched(open_log):
    log = open_log(**{"max.message.bytes": 500})
    log.append(make_batch([b"ok"]))
    before = (log.log_end_offset, log.size_in_bytes)
    good = make_batch([b"v"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(good + bytes(corrupt))  # second batch fails its CRC: nothing is appended
    with pytest.raises(CorruptRecordError):
        log.append(good[:-3])
    with pytest.raises(CorruptRecordError):
        log.append(b"")
    with pytest.raises(RecordTooLargeError):
        log.append(make_batch([b"x" * 600]))
    assert (log.log_end_offset, log.size_in_bytes) == before


def test_log_append_time_stamps_batches(open_log, clock):
    log = open_log(**{"message.timestamp.type": "LogAppendTime"})
    clock.now = 5_555_555
    info = log.append(make_batch([b"a", b"b"], [1, 2]))
    assert info.log_append_time == 5_555_555 and info.max_timestamp == 5_555_555
    header = read_header(log.read(0, 1000).records)
    assert header.timestamp_type == LOG_APPEND_TIME and header.max_timestamp == 5_555_555
    assert log.offset_for_timestamp(5_555_555) == TimestampOffset(5_555_555, 0)
    # The CRC was recomputed: the stored batch passes validation on reopen.
    log.close()
    reopened = open_log(**{"message.timestamp.type": "LogAppendTime"})
    assert reopened.log_end_offset == 2


def test_read_max_bytes_and_min_one_batch(open_log):
    log = open_log()
    batches = [make_batch([bytes([n]) * 100]) for n in range(10)]
    for batch in batches:
        log.append(batch)
    size = len(log.read(0, 10**6).records) // 10
    assert len(log.read(0, 3 * size + 5).records) == 3 * size
    assert len(log.read(2, size - 1).records) == size  # one whole batch even if too big
    assert log.read(2, size - 1, min_one_batch=False).records == b""
    result = log.read(4, 2 * size)
    assert result.first_offset == 4 and _offsets(result.records) == [(4, 4), (5, 5)]
    assert result.next_offset == 6 and result.fetch_offset == 4


def test_read_stops_before_max_offset(open_log):
    log = open_log()
    for _ in range(5):
        log.append(make_batch([b"a", b"b"]))
    assert _offsets(log.read(0, 10**6, max_offset=6).records) == [(0, 1), (2, 3), (4, 5)]
    assert _offsets(log.read(0, 10**6, max_offset=5).records) == [(0, 1), (2, 3), (4, 5)]
    assert log.read(6, 10**6, max_offset=6).records == b""
    assert log.read(0, 10**6, max_offset=0).records == b""


def test_read_out_of_range(open_log):
    log = open_log()
    log.append(make_batch([b"a", b"b"]))
    assert log.read(2, 100).records == b""  # exactly the log end: empty
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    log.delete_records(1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.read(1, 100).first_offset == 0  # the batch holding offset 1


def test_reads_span_segments(open_log):
    log = open_log(**{"segment.bytes": 400})
    for n in range(20):
        log.append(make_batch([bytes([n]) * 50]))
    assert len(log.segments) > 3
    seen = []
    offset = 0
    while offset < log.log_end_offset:
        records = log.read(offset, 250).records
        assert records
        seen.extend(_offsets(records))
        offset = seen[-1][1] + 1
    assert seen == [(n, n) for n in range(20)]


def test_roll_by_size_time_and_explicit(open_log):
    log = open_log(**{"segment.bytes": 1000, "segment.ms": 60_000})
    batch = make_batch([b"x" * 100], [0])
    size = len(batch)
    for _ in range(1000 // size):
        log.append(batch)
    assert len(log.segments) == 1
    log.append(batch)
    assert len(log.segments) == 2 and log.segments[1].base_offset == 1000 // size
    log.roll()
    assert len(log.segments) == 3
    log.roll()  # the active segment is empty: no new segment
    assert len(log.segments) == 3
    log.append(make_batch([b"t"], [10_000]))
    log.append(make_batch([b"t"], [70_000]))  # 60 s after the segment's first timestamp: not yet
    assert len(log.segments) == 3
    log.append(make_batch([b"t"], [70_001]))
    assert len(log.segments) == 4 and log.segments[-1].base_offset == log.log_end_offset - 1
    assert _all_offsets(log) == [(n, n) for n in range(log.log_end_offset)]


def test_roll_when_index_full(open_log):
    # 48 bytes: 6 offset index entries, 4 time index entries (one slot kept for the roll).
    log = open_log(**{"segment.index.bytes": 48, "index.interval.bytes": 0})
    for n in range(20):
        log.append(make_batch([b"i"], [n]))
    assert len(log.segments) > 3
    for segment in log.segments[:-1]:
        assert segment.time_index.entries <= 4 and segment.offset_index.entries <= 6
    assert _all_offsets(log) == [(n, n) for n in range(20)]


def test_offset_for_timestamp(open_log):
    log = open_log(**{"segment.bytes": 300, "index.interval.bytes": 0})
    stamps = [100, 200, 150, 300, 300, 500, 400]
    for ts in stamps:
        log.append(make_batch([b"v" * 40], [ts]))
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == TimestampOffset(100, 0)
    assert log.offset_for_timestamp(150) == TimestampOffset(200, 1)
    assert log.offset_for_timestamp(201) == TimestampOffset(300, 3)
    assert log.offset_for_timestamp(450) == TimestampOffset(500, 5)
    assert log.offset_for_timestamp(501) is None
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == TimestampOffset(-1, 0)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == TimestampOffset(-1, 7)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampOffset(500, 5)
    log.delete_records(2)
    assert log.offset_for_timestamp(0).offset == 2


def test_offset_for_timestamp_inside_a_batch(open_log):
    log = open_log()
    log.append(make_batch([b"a", b"b", b"c", b"d"], [10, 20, 30, 40]))
    # Record level: the codec decodes the batch the headers point at.
    assert log.offset_for_timestamp(25) == TimestampOffset(30, 2)
    assert log.offset_for_timestamp(40) == TimestampOffset(40, 3)
    assert log.offset_for_timestamp(5) == TimestampOffset(10, 0)


def test_offset_for_timestamp_compressed_batches(open_log):
    log = open_log(**{"index.interval.bytes": 0})
    for n in range(5):
        log.append(make_batch([b"v" * 50] * 4, [n * 100 + d for d in (0, 10, 20, 30)], compression=1))
    assert log.offset_for_timestamp(215) == TimestampOffset(220, 10)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampOffset(430, 19)


def test_follower_append_keeps_offsets(open_log):
    log = open_log()
    info = log.append(make_batch([b"a", b"b"], base_offset=0) + make_batch([b"c"], base_offset=2), assign_offsets=False)
    assert (info.first_offset, info.last_offset) == (0, 2)
    log.append(make_batch([b"d"], base_offset=10), assign_offsets=False)  # a gap is allowed (compaction)
    assert log.log_end_offset == 11
    with pytest.raises(InvalidRequestError):
        log.append(make_batch([b"old"], base_offset=5), assign_offsets=False)
    with pytest.raises(CorruptRecordError):
        log.append(make_batch([b"x"], base_offset=20) + make_batch([b"y"], base_offset=15), assign_offsets=False)
    assert log.log_end_offset == 11
    assert _offsets(log.read(0, 10**6).records) == [(0, 1), (2, 2), (10, 10)]


def test_truncate_to_and_fully(open_log):
    log = open_log(**{"segment.bytes": 300})
    for n in range(12):
        log.append(make_batch([bytes([n]) * 40, bytes([n]) * 40]))
    assert len(log.segments) > 3
    assert not log.truncate_to(24)
    assert log.truncate_to(10)
    assert log.log_end_offset == 10 and log.recovery_point <= 10
    assert _all_offsets(log) == [(n, n + 1) for n in range(0, 10, 2)]
    assert all(s.base_offset <= 10 for s in log.segments)
    info = log.append(make_batch([b"new"]))
    assert info.first_offset == 10
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (100, 100, 1)
    assert log.append(make_batch([b"n"])).first_offset == 100


def test_delete_records_survives_restart(tmp_path, clock):
    with Log(tmp_path / "t-0", {"segment.bytes": 300}, time_ms=clock) as log:
        for n in range(10):
            log.append(make_batch([bytes([n]) * 60]))
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_records(11)
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_records(8, high_watermark=7)
        assert log.delete_records(7) == 7
        assert log.segments[0].base_offset <= 7 < log.segments[0].next_offset
    with Log(tmp_path / "t-0", {"segment.bytes": 300}, time_ms=clock) as log:
        assert log.log_start_offset == 7
        with pytest.raises(OffsetOutOfRangeError):
            log.read(6, 100)


def test_flush_messages_policy_advances_recovery_point(open_log):
    log = open_log(**{"flush.messages": 3})
    log.append(make_batch([b"a"]))
    log.append(make_batch([b"b"]))
    assert log.recovery_point == 0
    log.append(make_batch([b"c"]))
    assert log.recovery_point == 3


def test_flush_ms_policy(open_log, clock):
    log = open_log(**{"flush.ms": 1000})
    log.append(make_batch([b"a"]))
    assert log.recovery_point == 0
    clock.now += 1000
    log.maybe_flush()
    assert log.recovery_point == 1


def test_second_owner_in_process_is_refused(open_log, tmp_path):
    open_log()
    with pytest.raises(LogDirLockedError, match=f"pid={os.getpid()}"):
        Log(tmp_path / "topic-0")


def test_lock_held_by_another_process(tmp_path):
    directory = tmp_path / "t-0"
    script = textwrap.dedent(
        f"""
        import sys
        from storage import Log
        log = Log({str(directory)!r})
        print("locked", flush=True)
        sys.stdin.readline()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=os.getcwd(), text=True
    )
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(LogDirLockedError) as caught:
            Log(directory)
        assert f"pid={child.pid}" in str(caught.value) and "host=" in str(caught.value)
    finally:
        child.kill()
        child.wait(timeout=30)
    # The kernel dropped the lock with the dead process: the directory opens now.
    with Log(directory) as log:
        assert log.log_end_offset == 0


def test_io_error_on_append_leaves_log_consistent(open_log, monkeypatch):
    log = open_log()
    first = make_batch([b"a", b"b"])
    log.append(first)
    real_writev = os.writev

    def failing_writev(fd, parts):
        data = b"".join(bytes(p) for p in parts)
        os.write(fd, data[: len(data) // 2])  # a torn write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", failing_writev)
    with pytest.raises(KafkaStorageError):
        log.append(make_batch([b"c" * 1000]))
    with pytest.raises(KafkaStorageError):  # the follower path too
        log.append(make_batch([b"d" * 1000], base_offset=2), assign_offsets=False)
    monkeypatch.setattr(os, "writev", real_writev)
    assert log.log_end_offset == 2 and log.size_in_bytes == len(first)
    assert log.active_segment.offset_index.entries == 0
    assert _offsets(log.read(0, 10**6).records) == [(0, 1)]
    assert log.append(make_batch([b"c"])).first_offset == 2
    assert _offsets(log.read(0, 10**6).records) == [(0, 1), (2, 2)]


@pytest.mark.parametrize("chunk", [1, 7, 61, 62, 200])
def test_short_writes_are_continued_until_the_batch_is_whole(open_log, monkeypatch, chunk):
    """A write may take fewer bytes than asked without an error; the rest follows, once."""
    log = open_log()
    real_writev = os.writev
    calls = []

    def short_writev(fd, parts):
        data = b"".join(bytes(p) for p in parts)
        calls.append(len(data))
        return real_writev(fd, [data[:chunk]])

    monkeypatch.setattr(os, "writev", short_writev)
    batches = [make_batch([b"x" * 300, b"y"]), make_batch([b"z" * 40])]
    for batch in batches:
        log.append(batch)
    monkeypatch.undo()
    assert len(calls) > 2 and log.size_in_bytes == sum(len(b) for b in batches)
    assert _offsets(log.read(0, 10**6).records) == [(0, 1), (2, 2)]


def test_io_error_on_flush(open_log, monkeypatch):
    log = open_log()
    log.append(make_batch([b"a"]))

    def failing_fsync(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(KafkaStorageError):
        log.flush()
    monkeypatch.undo()
    assert log.recovery_point == 0


def test_legacy_message_set_is_upconverted(open_log):
    legacy = pytest.importorskip("storage.legacy")
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=2**20)
    builder.append(0, timestamp=1234, key=None, value=b"old")
    data = bytes(builder.build())
    assert hasattr(legacy, "upconvert")
    info = open_log().append(data)
    assert info.first_offset == 0 and info.headers[0].magic == 2


def test_closed_log_refuses_writes(open_log):
    log = open_log()
    log.close()
    with pytest.raises(KafkaStorageError):
        log.append(make_batch([b"a"]))
