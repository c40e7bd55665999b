"""Power cuts at every point of a log's life: appends, rolls, index writes, producer-state snapshots,
checkpoints, transactions, clean and unclean shutdowns, compaction swaps, and recovery itself.

Each workload runs once to count its events (syncs, renames, unlinks, acknowledged appends:
see ``tests/storage/power_loss.py``), then once per cut point with the power going out there;
what the cut leaves on disk (synced data kept, unsynced data dropped, kept or torn, name
changes since the last directory fsync applied up to some point) is reopened as a log. The
property test also cuts the power a second time while that log recovers. It must always
open, hold nothing it was not given, and:

- with ``flush.messages=1``: every acknowledged record;
- with the defaults: a clean prefix of what was written, no gaps, no duplicates;
- indexes that agree with the batches (every offset and timestamp lookup right), with no
  index of a flushed segment needing a rebuild (that warning means a write-ordering bug),
  unless the cut hit the roll of a segment flush.messages had already synced;
- producer state that agrees with the batches that survived;
- the aborted transactions whose marker survived, and an open one for a marker that did not;
- after compaction: the latest value of every key below the log end;
- and it takes appends and reopens cleanly afterwards.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import Log, RecordBatchBuilder, build_control_batch, iter_batches
from storage.batch_header import CONTROL_MASK
from storage.cleaner import clean as clean_log
from storage.log import TimestampOffset
from tests.storage.batches import abandon
from tests.storage.power_loss import Disk

P, Q, T = 7001, 7002, 7003  # idempotent producers, and a transactional one
BASE_TS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = BASE_TS

    def __call__(self) -> int:
        return self.now


@dataclass
class Record:
    key: bytes
    value: bytes
    timestamp: int


@dataclass
class Tracker:
    """What the workload did, kept outside the simulated disk."""

    written: dict[int, Record] = field(default_factory=dict)  # offset -> record, every append attempted
    acked: int = 0  # the log end offset as of the last acknowledged append
    log: Log | None = None  # the log open when the power went out
    sequences: dict[int, int] = field(default_factory=dict)
    txns: list[Txn] = field(default_factory=list)  # every transaction begun, oldest first


@dataclass
class Txn:
    producer_id: int
    first_offset: int
    marker_offset: int | None = None  # where its marker went (or was going when the power went out)
    aborted: bool = False


def _marker_record(commit: bool, timestamp: int) -> Record:
    return Record(b"<commit>" if commit else b"<abort>", b"", timestamp)


def _batch(tracker: Tracker, first_offset: int, n: int, count: int, pid: int, keys: int, txn: bool = False) -> bytes:
    """Records number ``n``... with a producer id (idempotent) or none (pid < 0)."""
    seq = tracker.sequences.get(pid, 0) if pid >= 0 else -1
    builder = RecordBatchBuilder(
        0,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        is_transactional=txn,
    )
    for i in range(count):
        # Timestamps wander back now and then: the time index must keep the largest so far.
        record = Record(b"k%d" % ((n + i) % keys), b"v%d" % (n + i), BASE_TS + 10 * (n + i) - 25 * ((n + i) % 3 == 2))
        builder.append(record.value, record.key, record.timestamp)
        tracker.written[first_offset + i] = record
    if pid >= 0:
        tracker.sequences[pid] = seq + count
    return bytes(builder.build())


def _append(log: Log, tracker: Tracker, disk: Disk, n: int, keys: int, pid: int | None = None) -> int:
    count = 1 + n % 3
    txn = pid == T
    if pid is None:
        pid = (P, -1, Q)[n % 3]
    if txn and (not tracker.txns or tracker.txns[-1].marker_offset is not None):
        tracker.txns.append(Txn(T, log.log_end_offset))
    data = _batch(tracker, log.log_end_offset, n, count, pid, keys, txn)
    info = log.append(data)
    assert info.first_offset == log.log_end_offset - count
    tracker.acked = log.log_end_offset
    disk.tick("acknowledged")
    return count


def _end_transaction(log: Log, tracker: Tracker, disk: Disk, commit: bool, timestamp: int) -> None:
    """The coordinator's marker for the open transaction."""
    txn = tracker.txns[-1]
    txn.marker_offset, txn.aborted = log.log_end_offset, not commit
    tracker.written[log.log_end_offset] = _marker_record(commit, timestamp)
    log.append(build_control_batch(commit, T, 0, 0, timestamp=timestamp), origin="coordinator")
    tracker.acked = log.log_end_offset
    disk.tick("acknowledged marker")


def _lives(directory: Path, config: dict, tracker: Tracker, ends: str, life: Callable[[Log, int, Clock], None]) -> None:
    """Open the log once per letter of ``ends`` and run ``life(log, number, clock)`` on it, then
    close it ("c") or let the process die ("x": the page cache keeps every write)."""
    clock = Clock()
    for number, end in enumerate(ends):
        log = tracker.log = Log(directory, config, time_ms=clock)
        life(log, number, clock)
        if end == "x":
            abandon(log)
        else:
            log.close()
        tracker.log = None


def _appending(
    directory: Path, config: dict, tracker: Tracker, disk: Disk, *, keys: int, per_life: int, ends: str, clean: int
) -> None:
    n = 0

    def life(log: Log, _number: int, clock: Clock) -> None:
        nonlocal n
        for step in range(per_life):
            n += _append(log, tracker, disk, n, keys=keys)
            clock.now += 10
            if clean and step % clean == clean - 1:
                clean_log(log, force=True, now_ms=clock.now)
                disk.tick("cleaned")

    _lives(directory, config, tracker, ends, life)


def appends(directory: Path, config: dict, tracker: Tracker, disk: Disk) -> None:
    """Appends and rolls over three lives: a clean shutdown, then a process crash, then a clean shutdown."""
    _appending(directory, config, tracker, disk, keys=1000, per_life=9, ends="cxc", clean=0)


def compaction(directory: Path, config: dict, tracker: Tracker, disk: Disk) -> None:
    """Keyed appends with compaction passes (segment swaps) between them, and a process crash."""
    _appending(directory, config, tracker, disk, keys=4, per_life=12, ends="xc", clean=4)


def transactions(directory: Path, config: dict, tracker: Tracker, disk: Disk) -> None:
    """Transactions committed and aborted among idempotent appends; one is open when the process
    crashes and aborted after the restart (its state came back from a snapshot and the log)."""
    n = 0

    def life(log: Log, number: int, clock: Clock) -> None:
        nonlocal n
        if number == 1:
            _end_transaction(log, tracker, disk, False, clock.now)
        for step in range(4):
            n += _append(log, tracker, disk, n, keys=1000, pid=T)
            n += _append(log, tracker, disk, n, keys=1000, pid=P)
            n += _append(log, tracker, disk, n, keys=1000, pid=T)
            clock.now += 10
            if number == 0 and step == 3:
                return  # left open
            _end_transaction(log, tracker, disk, step % 2 == 0, clock.now)

    _lives(directory, config, tracker, "xc", life)


DEFAULTS = {
    "segment.bytes": 700,
    "index.interval.bytes": 90,
    "segment.index.bytes": 12 * 5,  # a full time index rolls the segment too
    "file.delete.delay.ms": 0,
}
FLUSH_EACH = {**DEFAULTS, "flush.messages": 1}
COMPACT = {**DEFAULTS, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}


# -- the checks ---------------------------------------------------------------------------------


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _open_watched(directory: Path, config: dict) -> tuple[Log, list[str]]:
    handler = _Warnings()
    logger = logging.getLogger("storage")
    logger.addHandler(handler)
    try:
        log = Log(directory, config, time_ms=Clock())
    finally:
        logger.removeHandler(handler)
    return log, handler.messages


def _records(log: Log) -> dict[int, tuple[Record, int]]:
    """offset -> (record, producer id) of every record and marker, by a read loop as a consumer does."""
    out: dict[int, tuple[Record, int]] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 4096)
        assert info.next_offset > offset, f"read stuck at {offset}"
        for batch in iter_batches(info.records):
            if batch.is_control:
                if batch.header.base_offset >= offset:
                    marker = _marker_record(batch.control_record().type == 1, batch.header.max_timestamp)
                    out[batch.header.base_offset] = (marker, batch.header.producer_id)
                continue
            for r in batch:
                if r.offset >= offset:
                    assert r.offset not in out, f"offset {r.offset} served twice"
                    out[r.offset] = (Record(r.key, r.value, r.timestamp), batch.header.producer_id)
        offset = info.next_offset
    return out


def _check_indexes(log: Log) -> None:
    """Every index entry names the batch it should, and every timestamp lookup finds the right record."""
    for segment in log.segments:
        headers = list(segment.headers_from(0))
        at = {h.position: h for h in headers}
        for i in range(segment.offset_index.entries):
            relative, position = segment.offset_index.entry_at(i)
            assert position in at and at[position].last_offset == segment.base_offset + relative, (
                f"{segment.offset_index.path} entry {i} ({relative}, {position}) names no batch"
            )
        best = -1
        maxima = {}
        for h in headers:
            best = max(best, h.max_timestamp)
            maxima[h.last_offset] = best
        for i in range(segment.time_index.entries):
            timestamp, relative = segment.time_index.entry_at(i)
            offset = segment.base_offset + relative
            holder = next(h for h in headers if h.base_offset <= offset <= h.last_offset)
            assert holder.max_timestamp == timestamp and maxima[holder.last_offset] == timestamp, (
                f"{segment.time_index.path} entry {i} ({timestamp}, {offset}) is not the largest timestamp there"
            )
        assert segment.max_timestamp_so_far == best
        assert segment.next_offset == (headers[-1].next_offset if headers else segment.base_offset)


def _check_time_lookups(log: Log, records: dict[int, tuple[Record, int]]) -> None:
    stamps = sorted({r.timestamp for r, _ in records.values()})
    for target in [stamps[0] - 1, *stamps[:: max(1, len(stamps) // 12)], stamps[-1], stamps[-1] + 1] if stamps else []:
        expected = next(
            (TimestampOffset(r.timestamp, o) for o, (r, _) in sorted(records.items()) if r.timestamp >= target), None
        )
        assert log.offset_for_timestamp(target) == expected, f"timestamp {target}"


def _check_producer_state(log: Log) -> None:
    last: dict[int, tuple[int, int]] = {}  # producer id -> (last sequence, last offset) of its last batch
    for segment in log.segments:
        for h in segment.headers_from(0):
            if h.producer_id >= 0 and not h.attributes & CONTROL_MASK:
                last[h.producer_id] = (h.base_sequence + h.last_offset_delta, h.last_offset)
    entries = log.producer_state.producers
    assert set(entries) == set(last), f"producers {sorted(entries)} but batches of {sorted(last)}"
    for pid, (seq, offset) in last.items():
        batch = entries[pid].batches[-1]
        assert (batch.last_seq, batch.last_offset) == (seq, offset), f"producer {pid}"


def _check_transactions(log: Log, tracker: Tracker, end: int) -> None:
    """Aborted transactions are the ones whose ABORT marker survived; one without its marker is open."""
    aborted = [
        (t.producer_id, t.first_offset, t.marker_offset) for t in tracker.txns if t.aborted and t.marker_offset < end
    ]
    found = [(a.producer_id, a.first_offset, a.last_offset) for a in log.collect_aborted_transactions(0, end)]
    assert found == aborted, f"aborted transactions {found}, expected {aborted}"
    open_firsts = [
        t.first_offset
        for t in tracker.txns
        if t.first_offset < end and (t.marker_offset is None or t.marker_offset >= end)
    ]
    log.update_high_watermark(end)  # every completed transaction is replicated: only open ones hold the LSO
    assert log.first_unstable_offset == (min(open_firsts) if open_firsts else None)


def check_recovered(
    directory: Path, config: dict, tracker: Tracker, *, durable: bool, compacted: bool, rebuild_allowed: bool = False
) -> None:
    """Open what the cut left and check it (see the module docstring).

    ``rebuild_allowed``: the cut interrupted a roll whose segment flush.messages had already
    synced, so the recovery point is past it while the roll's index writes (final entry,
    trim) were in flight: that index may need its rebuild.
    """
    log, warnings = _open_watched(directory, config)
    try:
        rebuilt = [w for w in warnings if "rebuilding" in w]
        assert not rebuilt or (rebuild_allowed and len(rebuilt) == 1), warnings
        end = log.log_end_offset
        assert log.log_start_offset == 0
        assert end <= len(tracker.written)
        if durable:
            assert end >= tracker.acked, f"acknowledged records lost: log ends at {end}, {tracker.acked} were acked"
        records = _records(log)
        for offset, (record, _) in records.items():
            assert offset < end and tracker.written[offset] == record, f"offset {offset} holds {record}"
        if compacted:
            latest = {tracker.written[o].key: o for o in range(end)}
            missing = sorted(o for o in latest.values() if o not in records)
            assert not missing, f"the latest value of a key is gone at offsets {missing}"
        else:
            assert sorted(records) == list(range(end)), "a gap or a duplicate"
        _check_indexes(log)
        _check_time_lookups(log, records)
        _check_producer_state(log)
        _check_transactions(log, tracker, end)
        # It takes appends, and a clean reopen gives the same log plus the new record.
        builder = RecordBatchBuilder(0)
        builder.append(b"after", b"k-after", BASE_TS)
        assert log.append(builder.build()).first_offset == end
    finally:
        log.close()
    log, warnings = _open_watched(directory, config)
    try:
        assert not warnings, warnings
        assert log.log_end_offset == end + 1
        again = _records(log)
        assert {o: r for o, r in again.items() if o < end} == records
        _check_indexes(log)
    finally:
        log.close()


# -- running a workload with a cut --------------------------------------------------------------

Workload = Callable[[Path, dict, Tracker, Disk], None]


def _run(root: Path, workload: Workload, config: dict, cut_at: int | None, seed: object) -> tuple[Disk, Tracker]:
    directory = root / "live"
    disk = Disk(directory, cut_at=cut_at, seed=seed)
    tracker = Tracker()
    with disk.installed():
        workload(directory, config, tracker, disk)
    if tracker.log is not None:
        abandon_quietly(tracker.log)
    disk.release()
    return disk, tracker


def abandon_quietly(log: Log) -> None:
    """Let go of a log the cut left mid-call (its state may be half-updated)."""
    try:
        abandon(log)
    except Exception:  # noqa: BLE001 - whatever it was doing, the process is gone
        log._file_lock.release()


def count_events(tmp_path: Path, workload: Workload, config: dict) -> int:
    disk, _ = _run(tmp_path / "count", workload, config, None, 0)
    return disk.events


def _open_and_close(directory: Path, config: dict, disk: Disk) -> None:
    """Recovery as a workload: the log opens (and repairs what it finds), then closes."""
    opened: list[Log] = []
    with disk.installed():
        opened.append(Log(directory, config, time_ms=Clock()))
        opened[-1].close()
    if opened:
        abandon_quietly(opened[-1])
    disk.release()


def _cut_the_recovery(root: Path, crashed: Path, config: dict, where: float, seed: object) -> tuple[Path, Disk]:
    """A second power cut, while the log recovers from the first one: the image it leaves."""
    counting = root / "recovery-count"
    shutil.copytree(crashed, counting)
    dry = Disk(counting)
    _open_and_close(counting, config, dry)
    again = root / "recovering"
    shutil.copytree(crashed, again)
    disk = Disk(again, cut_at=1 + int(where * max(dry.events - 1, 0)), seed=(seed, "again"))
    _open_and_close(again, config, disk)
    assert disk.image is not None
    return disk.write_image(root / "crashed-twice"), disk


def cut_and_check(
    root: Path,
    workload: Workload,
    config: dict,
    cut_at: int,
    seed: object,
    *,
    durable: bool,
    compacted: bool,
    second_cut: float | None = None,
) -> None:
    """Cut the power at event ``cut_at`` of the workload and check what it left.

    ``second_cut``: also cut it again that far (0..1) into the recovery from the first cut,
    and check what that leaves.
    """
    root.mkdir()
    try:
        disk, tracker = _run(root, workload, config, cut_at, seed)
        assert disk.image is not None, f"no event {cut_at}"
        crashed = disk.write_image(root / "crashed")
        # The first recovery may rebuild an index only when the cut hit a roll the data of
        # which flush.messages had synced (see check_recovered); a second cut during that
        # rebuild leaves it to do again.
        rebuild_allowed = durable and "_roll_locked" in disk.cut_in
        images = [(crashed, f"power cut at event {cut_at} ({disk.cut_during}), seed {seed!r}")]
        if second_cut is not None:
            twice, again = _cut_the_recovery(root, crashed, config, second_cut, seed)
            images.append((twice, f"{images[0][1]}, then at event {again.events} of the recovery ({again.cut_during})"))
        for image, where in images:
            try:
                check_recovered(
                    image, config, tracker, durable=durable, compacted=compacted, rebuild_allowed=rebuild_allowed
                )
            except BaseException as exc:
                exc.add_note(where)
                raise
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def scratch(tmp_path):
    """A directory in memory when the machine has one (/dev/shm): the simulation decides what is
    durable, so real fsyncs only cost time (about 1 ms each on disk, thousands per test)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="rq-power-loss-", dir=shm))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


CASES = {
    "appends, defaults": (appends, DEFAULTS, False, False),
    "appends, flush.messages=1": (appends, FLUSH_EACH, True, False),
    "compaction, defaults": (compaction, COMPACT, False, True),
    "compaction, flush.messages=1": (compaction, {**COMPACT, "flush.messages": 1}, True, True),
    "transactions, defaults": (transactions, DEFAULTS, False, False),
    "transactions, flush.messages=1": (transactions, FLUSH_EACH, True, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_power_cut_at_every_event(scratch, case):
    workload, config, durable, compacted = CASES[case]
    events = count_events(scratch, workload, config)
    assert events > 30
    for cut_at in range(1, events + 1):
        cut_and_check(
            scratch / f"cut-{cut_at}", workload, config, cut_at, (case, cut_at), durable=durable, compacted=compacted
        )


@settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    case=st.sampled_from(sorted(CASES)),
    where=st.floats(0, 1),
    seed=st.integers(0, 2**32),
    second_cut=st.none() | st.floats(0, 1),
)
def test_power_cut_anywhere_and_again_during_recovery(scratch, case, where, seed, second_cut):
    workload, config, durable, compacted = CASES[case]
    root = Path(tempfile.mkdtemp(dir=scratch))
    try:
        events = count_events(root, workload, config)
        cut_at = 1 + int(where * (events - 1))
        cut_and_check(
            root / "run", workload, config, cut_at, seed, durable=durable, compacted=compacted, second_cut=second_cut
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
