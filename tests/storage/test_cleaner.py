"""The log cleaner: compaction keeps the latest value of every key, offsets, producer state and
readers intact, and a crash at any step of a segment swap leaves the old or the new segments."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import Log, RecordBatchBuilder, build_control_batch, iter_batches
from storage.batch_header import read_header
from storage.cleaner import LogCleaner, SkimpyOffsetMap, clean, cleanable, dirty_ratio
from storage.errors import InvalidRecordError
from storage.log_files import CLEANER_CHECKPOINT_FILE
from storage.producer_state import AppendOrigin
from tests.storage.batches import abandon

# Every test here runs over both twins of the offset map, the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

DAY = 24 * 3600 * 1000


class Clock:
    def __init__(self, now: int = 100 * DAY) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(records, ts=1000, compression=0, **kwargs) -> bytes:
    """One batch of (key, value) records."""
    builder = RecordBatchBuilder(compression, **kwargs)
    for key, value in records:
        builder.append(value, key, ts)
    return builder.build()


def read_all(log: Log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from ``start`` (default the log start), by a Log.read loop."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        info = log.read(offset, 4096)
        for b in iter_batches(info.records):
            if b.is_control:
                continue
            out.extend((r.offset, r.key, r.value) for r in b if r.offset >= offset)
        assert info.next_offset > offset
        offset = info.next_offset
    return out


def latest(ops: list[tuple[bytes, bytes | None]], first_offset: int = 0) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for n, (key, value) in enumerate(ops):
        out[key] = (first_offset + n, value)
    return out


def open_log(directory, clock, **config) -> Log:
    settings_ = {"cleanup.policy": "compact", "segment.bytes": 400, "delete.retention.ms": 0, **config}
    return Log(directory, settings_, time_ms=clock)


# -- the property ----------------------------------------------------------------------------


ops_strategy = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]), st.one_of(st.none(), st.binary(min_size=0, max_size=30))
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy, batch_size=st.integers(1, 5), codec=st.sampled_from([0, 1, 3]))
def test_cleaning_keeps_exactly_the_latest_value_of_every_key(ops, batch_size, codec):
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp, open_log(Path(tmp) / "t-0", clock) as log:
        for n in range(0, len(ops), batch_size):
            log.append(batch(ops[n : n + batch_size], compression=codec))
        end = log.log_end_offset
        log.roll()
        before = read_all(log)
        stats = clean(log, force=True)
        assert stats is not None and stats.completed and stats.end_offset == end
        want = latest(ops)
        # First pass: tombstones get their delete horizon and stay.
        assert read_all(log) == sorted((o, k, v) for k, (o, v) in want.items())
        _check_every_offset_readable(log, [r[0] for r in read_all(log)], end)
        assert log.log_end_offset == end and len(before) == len(ops)
        # A second pass (some new dirty data) removes the tombstones: delete.retention.ms=0.
        log.append(batch([(b"z", b"new")]))
        log.roll()
        assert clean(log, force=True) is not None
        live = sorted((o, k, v) for k, (o, v) in want.items() if v is not None) + [(end, b"z", b"new")]
        assert read_all(log) == live
        _check_every_offset_readable(log, [r[0] for r in live], end + 1)


def _check_every_offset_readable(log: Log, surviving: list[int], end: int) -> None:
    """Reading from any offset of the original range returns the next surviving record."""
    for offset in range(log.log_start_offset, end):
        records = read_all(log, offset)
        nxt = [o for o in surviving if o >= offset]
        assert [r[0] for r in records] == nxt


def test_offsets_kept_with_holes_and_checkpoint_persists(tmp_path):
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    for n in range(30):
        log.append(batch([(b"k%d" % (n % 3), b"v%d" % n)]))
    log.roll()
    assert cleanable(log) and dirty_ratio(log) == 1.0
    stats = clean(log)
    assert stats is not None and stats.messages_read == 30 and stats.messages_written == 3
    assert [r[0] for r in read_all(log)] == [27, 28, 29]
    assert stats.ratio < 0.5 and stats.bytes_read > stats.bytes_written
    log.close()
    assert (tmp_path / "t-0" / CLEANER_CHECKPOINT_FILE).exists()
    with open_log(tmp_path / "t-0", clock) as reopened:
        assert dirty_ratio(reopened) == 0.0 and not cleanable(reopened)
        assert clean(reopened) is None
        assert [r[0] for r in read_all(reopened)] == [27, 28, 29]


def test_null_keys_are_refused_on_compacted_topics(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "c-0", clock) as log:
        with pytest.raises(InvalidRecordError):
            log.append(batch([(b"k", b"v"), (None, b"no key")]))
        assert log.log_end_offset == 0
        log.append(batch([(b"k", b"v")]))
    with Log(tmp_path / "d-0", {"cleanup.policy": "delete"}) as log:
        log.append(batch([(None, b"fine")]))
        assert clean(log, force=True) is None  # not compacted


def test_retention_applies_only_with_delete_policy(tmp_path):
    clock = Clock()
    for policy, expect in (("compact", 0), ("compact,delete", 1)):
        with open_log(tmp_path / policy, clock, **{"cleanup.policy": policy, "retention.ms": DAY}) as log:
            for n in range(10):
                log.append(batch([(b"k%d" % n, b"v" * 50)], ts=1000))
            assert (log.delete_old_segments() > 0) == bool(expect)


# -- upper bound and compaction lag ----------------------------------------------------------


def test_never_cleans_past_the_upper_bound_or_the_active_segment(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock, **{"segment.bytes": 10**6}) as log:
        for n in range(4):
            for _ in range(5):
                log.append(batch([(b"k", b"v%d" % n)]))
            log.roll()
        log.append(batch([(b"k", b"active")]))
        # Bound 12: only the segments wholly below it ([0, 5) and [5, 10)) are cleaned.
        stats = clean(log, 12, force=True)
        assert stats is not None and stats.end_offset == 10
        assert [r[0] for r in read_all(log)] == [9, *range(10, 21)]
        stats = clean(log, force=True)  # no bound: everything but the active segment
        assert stats is not None and stats.end_offset == 20
        assert [r[0] for r in read_all(log)] == [19, 20]


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock, **{"min.compaction.lag.ms": DAY, "segment.bytes": 10**6}) as log:
        for ts in (clock.now - 3 * DAY, clock.now - 2 * DAY, clock.now - DAY // 2):
            for n in range(4):
                log.append(batch([(b"k", b"%d" % n)], ts=ts))
            log.roll()
        stats = clean(log, force=True)
        assert stats is not None and stats.end_offset == 8  # the third segment is too young
        assert [r[0] for r in read_all(log)] == [7, 8, 9, 10, 11]
        clock.now += DAY
        assert clean(log, force=True) is not None
        assert [r[0] for r in read_all(log)] == [11]


def test_max_compaction_lag_makes_a_barely_dirty_log_cleanable(tmp_path):
    clock = Clock()
    config = {"min.cleanable.dirty.ratio": 0.9, "max.compaction.lag.ms": DAY, "segment.bytes": 10**6}
    with open_log(tmp_path / "t-0", clock, **config) as log:
        for n in range(20):
            log.append(batch([(b"k%d" % n, b"x" * 40)], ts=clock.now - 10 * DAY))
        log.roll()
        assert clean(log) is not None  # all dirty: ratio 1 > 0.9
        log.append(batch([(b"k0", b"y")], ts=clock.now))
        log.roll()
        assert 0 < dirty_ratio(log) < 0.9 and not cleanable(log)
        clock.now += 2 * DAY  # the dirty batch is now older than max.compaction.lag.ms
        assert cleanable(log)
        assert clean(log) is not None
        assert (0, b"k0", b"x" * 40) not in read_all(log)


def test_clean_filthiest_picks_the_highest_dirty_ratio(tmp_path):
    clock = Clock()
    logs = []
    for name, dups in (("a-0", 2), ("b-0", 10)):
        log = open_log(tmp_path / name, clock, **{"min.cleanable.dirty.ratio": 0.1})
        for n in range(20):
            log.append(batch([(b"k%d" % (n % dups), b"v" * 20)]))
        log.roll()
        logs.append(log)
    clean(logs[0], force=True)
    logs[0].append(batch([(b"k0", b"w" * 20)]))
    logs[0].roll()
    chosen = LogCleaner().clean_filthiest([(log, None) for log in logs])
    assert chosen is not None and chosen[0] is logs[1]
    for log in logs:
        log.close()


# -- hash collisions -------------------------------------------------------------------------


def test_offset_map_detects_digest_collisions():
    m = SkimpyOffsetMap(10, hash_fn=lambda key: b"\0" * 16)
    m.put(b"a", 1)
    assert m.get(b"a") == 1 and m.get(b"b") == -1  # same digest, other check value: unknown
    m.put(b"b", 2)
    assert m.collisions == 1 and m.get(b"a") == -1 and m.get(b"b") == -1 and len(m) == 1


def test_colliding_keys_never_lose_their_latest_value(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock) as log:
        for n in range(6):
            log.append(batch([(b"a" if n % 2 else b"b", b"%d" % n)]))
        log.append(batch([(b"c", b"only")]))
        log.roll()
        cleaner = LogCleaner(hash_fn=lambda key: b"\0" * 16)  # every key has one digest
        stats = cleaner.clean(log, force=True)
        assert stats is not None and stats.map_collisions == 1
        # Nothing can be told apart, so nothing is removed by key: older values stay, latest ones too.
        assert [r[2] for r in read_all(log)] == [b"0", b"1", b"2", b"3", b"4", b"5", b"only"]


def test_full_collision_behaves_as_kafka(tmp_path):
    """Digest and check value both colliding (astronomically unlikely): the keys are taken for one,
    the newer offset wins for both, and the other key's latest record, being older, is dropped."""
    clock = Clock()
    with open_log(tmp_path / "t-0", clock) as log:
        log.append(batch([(b"a", b"a1")]))
        log.append(batch([(b"b", b"b1")]))
        log.append(batch([(b"x", b"x1")]))
        log.roll()
        cleaner = LogCleaner(
            hash_fn=lambda key: b"\0" * 16 if key in (b"a", b"b") else key.ljust(16, b"_"),
            check_fn=lambda key: 7 if key in (b"a", b"b") else hash(key),
        )
        cleaner.clean(log, force=True)
        assert [(r[1], r[2]) for r in read_all(log)] == [(b"b", b"b1"), (b"x", b"x1")]


def test_full_offset_map_cleans_in_several_passes(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock, **{"segment.bytes": 10**6}) as log:
        for round_ in range(3):
            for n in range(10):
                log.append(batch([(b"k%d" % (round_ * 10 + n), b"v"), (b"k%d" % (round_ * 10 + n), b"w")]))
            log.roll()
        cleaner = LogCleaner(offset_map_entries=12)
        passes = 0
        while (stats := cleaner.clean(log, force=True)) is not None:
            passes += 1
            assert stats.map_entries <= 12
        assert passes >= 3
        assert [r[2] for r in read_all(log)] == [b"w"] * 30


# -- producer state, empty batches, control batches, codecs ----------------------------------


def _headers(log: Log):
    out = []
    for segment in log.segments:
        out.extend(segment.headers_from(0))
    return out


def test_rebuilt_batches_keep_producer_metadata_offsets_and_codec(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock, **{"segment.bytes": 10**6}) as log:
        log.append(
            batch(
                [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")],
                compression="gzip",
                producer_id=42,
                producer_epoch=3,
                base_sequence=100,
            )
        )
        log.append(batch([(b"c", b"2"), (b"d", b"2")], producer_id=42, producer_epoch=3, base_sequence=103))
        log.append(batch([(b"e", b"3")]))
        log.roll()
        original = _headers(log)
        clean(log, force=True)
        cleaned = _headers(log)
        first = cleaned[0]
        assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 2)  # c at 2 removed
        assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 3, 100)
        assert first.last_sequence == original[0].last_sequence == 102
        assert first.compression == 1  # gzip again
        assert cleaned[1]._replace(position=0) == read_header(log.read(3, 10**6).records)
        assert cleaned[1].crc == original[1].crc  # copied byte for byte
        assert [(r[0], r[1]) for r in read_all(log)] == [(0, b"a"), (1, b"b"), (3, b"c"), (4, b"d"), (5, b"e")]


def test_empty_batch_kept_only_when_producer_state_needs_it(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock, **{"segment.bytes": 10**6}) as log:
        log.append(batch([(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0))  # offset 0
        log.append(batch([(b"b", b"1")], producer_id=7, producer_epoch=0, base_sequence=1))  # 1: pid 7's last
        log.append(batch([(b"a", b"2"), (b"b", b"2")]))  # 2, 3 supersede both
        log.append(batch([(b"c", b"3")]))  # 4
        log.append(build_control_batch(True, 9, 1, timestamp=1000), origin=AppendOrigin.COORDINATOR)  # 5: a marker
        log.append(batch([(b"z", b"4")]))  # 6
        log.roll()
        clean(log, force=True)
        hs = _headers(log)
        assert [(h.base_offset, h.records_count) for h in hs] == [(1, 0), (2, 2), (4, 1), (5, 1), (6, 1)]
        empty = hs[0]
        assert (empty.producer_id, empty.producer_epoch, empty.base_sequence, empty.last_offset) == (7, 0, 1, 1)
        assert empty.size == 61 and hs[3].is_control
        assert [r[0] for r in read_all(log)] == [2, 3, 4, 6]


def test_a_cleaned_segment_ends_where_the_replaced_ones_did(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock, **{"segment.bytes": 10**6}) as log:
        for n in range(5):
            log.append(batch([(b"k", b"%d" % n)]))
        log.roll()
        log.append(batch([(b"k", b"last")]))
        log.roll()
        clean(log, force=True)
        assert log.segments[0].next_offset == log.segments[1].base_offset == 6


# -- crashes during the swap -----------------------------------------------------------------


class Crash(Exception):
    pass


STEPS = ["write", "swap:start", "swap:indexes_renamed", "swap:committed", "swap:old_renamed",
         "swap:final_indexes_renamed", "swap:done"]  # fmt: skip


def _crash_at(name: str):
    def step(at: str) -> None:
        if at == name:
            raise Crash(at)

    return step


@pytest.mark.parametrize("step", STEPS)
def test_crash_at_each_swap_step_leaves_old_or_new(tmp_path, monkeypatch, step):
    clock = Clock()
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, **{"segment.bytes": 10**6})
    ops = [(b"k%d" % (n % 4), b"v%d" % n) for n in range(24)]
    for n in range(0, 24, 2):
        log.append(batch(ops[n : n + 2]))
        if n % 8 == 6:
            log.roll()
    log.append(batch([(b"active", b"x")]))
    old = read_all(log)
    new = sorted((o, k, v) for k, (o, v) in latest(ops).items()) + [old[-1]]
    if step == "write":
        import storage.cleaner

        real = storage.cleaner._Pass._write_cleaned

        def torn(self, group, cleaned, last):
            real(self, group, cleaned, last)
            raise Crash("write")

        monkeypatch.setattr(storage.cleaner._Pass, "_write_cleaned", torn)
    with pytest.raises(Crash):
        LogCleaner(step=_crash_at(step)).clean(log, force=True)
    abandon(log)  # the process dies here
    monkeypatch.undo()
    with open_log(directory, clock, **{"segment.bytes": 10**6}) as reopened:
        after = read_all(reopened)
        expected = old if step in ("write", "swap:start", "swap:indexes_renamed") else new
        assert after == expected
        assert not [p for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
        reopened.append(batch([(b"k0", b"again")]))
        reopened.roll()
        clean(reopened, force=True)
        assert {k: v for _, k, v in read_all(reopened)}[b"k0"] == b"again"


def test_crash_during_the_final_rename_is_completed_on_open(tmp_path):
    """Process death after the commit, with the .log still .swap and its index already renamed."""
    clock = Clock()
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, **{"segment.bytes": 10**6})
    for n in range(12):
        log.append(batch([(b"k%d" % (n % 3), b"v%d" % n)]))
        if n % 4 == 3:
            log.roll()
    with pytest.raises(Crash):
        LogCleaner(step=_crash_at("swap:final_indexes_renamed")).clean(log, force=True)
    abandon(log)
    assert (directory / f"{0:020d}.log.swap").exists() and (directory / f"{0:020d}.index").exists()
    with open_log(directory, clock, **{"segment.bytes": 10**6}) as reopened:
        assert [r[0] for r in read_all(reopened)] == [9, 10, 11]


# -- readers ---------------------------------------------------------------------------------


def test_reader_sees_old_or_new_at_every_step(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock, **{"segment.bytes": 10**6}) as log:
        ops = [(b"k%d" % (n % 5), b"v%d" % n) for n in range(40)]
        for n in range(0, 40, 4):
            log.append(batch(ops[n : n + 4]))
            log.roll()
        old = read_all(log)
        new = sorted((o, k, v) for k, (o, v) in latest(ops).items())
        seen = []

        def step(at: str) -> None:
            records = read_all(log)
            assert records in (old, new)
            seen.append((at, records == new))

        LogCleaner(step=step).clean(log, force=True)
        assert read_all(log) == new
        assert [s for s, is_new in seen if is_new] == [
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:old_renamed",
            "swap:final_indexes_renamed",
            "swap:done",
        ]


def test_concurrent_reader_appender_and_cleaner(tmp_path):
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 2000})
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                values: dict[bytes, int] = {}
                previous = -1
                for offset, key, value in read_all(log):
                    assert offset > previous
                    previous = offset
                    n = int(value)
                    # Per key the values increase with offsets, whatever was cleaned away.
                    assert n > values.get(key, -1)
                    values[key] = n
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        counter = 0
        for _ in range(15):
            for _ in range(40):
                log.append(batch([(b"k%d" % (counter % 7), b"%d" % counter)]))
                counter += 1
            log.roll()
            clean(log, log.log_end_offset - 5, force=True)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors[0]
    final = {k: int(v) for _, k, v in read_all(log)}
    assert final == {b"k%d" % (n % 7): n for n in range(counter - 7, counter)}
    log.close()


def test_truncation_during_a_pass_stops_the_swap(tmp_path, monkeypatch):
    import storage.cleaner

    clock = Clock()
    with open_log(tmp_path / "t-0", clock, **{"segment.bytes": 10**6}) as log:
        for n in range(12):
            log.append(batch([(b"k", b"%d" % n)]))
            if n % 4 == 3:
                log.roll()
        real = storage.cleaner._Pass._write_cleaned

        def truncating(self, group, cleaned, last):
            real(self, group, cleaned, last)
            log.truncate_to(6)  # a follower truncating while the cleaner works

        monkeypatch.setattr(storage.cleaner._Pass, "_write_cleaned", truncating)
        stats = clean(log, force=True)
        assert stats is not None and not stats.completed and stats.segments_written == 0
        assert [r[0] for r in read_all(log)] == list(range(6))
        assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith((".cleaned", ".swap"))]
        monkeypatch.undo()
        log.roll()
        assert clean(log, force=True).completed
        assert [r[0] for r in read_all(log)] == [5]
