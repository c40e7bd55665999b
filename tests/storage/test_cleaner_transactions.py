"""The cleaner with transactions: aborted records go, committed ones compact normally, markers go once
their transaction's data is gone and the delete horizon passed, and nothing at or past the first
unstable offset is cleaned."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import Log, RecordBatchBuilder, build_control_batch, iter_batches
from storage.cleaner import LogCleaner, log_to_clean
from storage.cleaner import clean as clean_log
from storage.txn_index import AbortedTxn
from tests.storage.batches import abandon

# Every test here runs over both twins of the offset map, the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

P, Q = 1000, 2000
RETENTION = 500
FILLER = b"filler"


class Clock:
    def __init__(self, now: int = 10_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(records, *, pid: int = -1, seq: int = -1, txn: bool = False, epoch: int = 0) -> bytes:
    builder = RecordBatchBuilder(
        0,
        producer_id=pid,
        producer_epoch=epoch if pid >= 0 else -1,
        base_sequence=seq,
        is_transactional=txn,
    )
    for key, value in records:
        builder.append(value, key, 1000)
    return builder.build()


def end_txn(log: Log, pid: int, commit: bool, epoch: int = 0) -> int:
    return log.append(build_control_batch(commit, pid, epoch, 0, timestamp=1000), origin="coordinator").first_offset


def open_log(directory, clock, **config) -> Log:
    settings = {"cleanup.policy": "compact", "segment.bytes": 10**6, "delete.retention.ms": RETENTION, **config}
    return Log(directory, settings, time_ms=clock)


def records(log: Log) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every data record in the log."""
    out = []
    for segment in log.segments:
        for b in iter_batches(segment.read_bytes(0, segment.size)):
            if not b.is_control:
                out.extend((r.offset, r.key, r.value) for r in b if r.key != FILLER)
    return out


def markers(log: Log) -> list[tuple[int, int, bool]]:
    """(offset, records, has delete horizon) of every control batch."""
    out = []
    for segment in log.segments:
        for h in segment.headers_from(0):
            if h.is_control:
                out.append((h.base_offset, h.records_count, h.delete_horizon_ms is not None))
    return out


def clean(log: Log, clock: Clock) -> None:
    """One pass over everything but a fresh active segment (a filler record makes the log dirty)."""
    log.append(batch([(FILLER, b"x")]))
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert clean_log(log, force=True, now_ms=clock.now) is not None


def _workload(log: Log) -> dict[str, int]:
    at = {}
    log.append(batch([(b"k1", b"plain-1"), (b"k4", b"plain-4")]))  # 0-1
    log.append(batch([(b"k1", b"aborted-1"), (b"k2", b"aborted-2")], pid=P, seq=0, txn=True))  # 2-3
    at["abort"] = end_txn(log, P, commit=False)  # 4
    log.append(batch([(b"k4", b"committed-4"), (b"k3", b"committed-3")], pid=Q, seq=0, txn=True))  # 5-6
    at["commit"] = end_txn(log, Q, commit=True)  # 7
    log.append(batch([(b"k3", b"plain-3")]))  # 8: supersedes the committed k3
    log.append(batch([(b"k9", b"p-later")], pid=P, seq=2))  # 9: P's last data batch, outside any transaction
    log.append(batch([(b"q9", b"q-later")], pid=Q, seq=2))  # 10: so is Q's (a producer's last batch is kept)
    return at


def test_aborted_records_go_committed_ones_compact_normally(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock) as log:
        at = _workload(log)
        assert log.collect_aborted_transactions(0, 10) == [AbortedTxn(P, 2, 4, 5)]
        clean(log, clock)
        assert records(log) == [
            (0, b"k1", b"plain-1"),  # the aborted k1 never counted as latest
            (5, b"k4", b"committed-4"),  # the committed k4 superseded plain-4
            (8, b"k3", b"plain-3"),
            (9, b"k9", b"p-later"),
            (10, b"q9", b"q-later"),
        ]
        # The abort marker stays this pass (its data was still there) with its index entry.
        assert [m[0] for m in markers(log)] == [at["abort"], at["commit"]]
        assert log.collect_aborted_transactions(0, 10) == [AbortedTxn(P, 2, 4, 5)]
        assert log.segments[0].txn_index.entries == [AbortedTxn(P, 2, 4, 5)]


def test_markers_go_after_their_data_and_the_delete_horizon(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock) as log:
        at = _workload(log)
        clean(log, clock)  # pass 1: aborted data removed, marker kept
        log.append(batch([(b"k4", b"plain-4b")]))  # supersedes the committed k4: the commit marker's data goes
        clean(log, clock)  # pass 2: no aborted data seen -> the abort marker gets a horizon; k4 committed goes
        assert (at["abort"], 1, True) in markers(log)
        assert log.collect_aborted_transactions(0, 100) == []  # no data left to filter
        clean(log, clock)  # pass 3: the commit marker's data is gone -> it gets a horizon too
        assert {m[0]: m[2] for m in markers(log)} == {at["abort"]: True, at["commit"]: True}
        clock.now += RETENTION - 1
        clean(log, clock)  # before the horizon: kept
        assert [m[0] for m in markers(log)] == [at["abort"], at["commit"]]
        clock.now += 1
        clean(log, clock)  # the horizon passed: both markers removed
        assert markers(log) == []
        assert [r[2] for r in records(log)] == [b"plain-1", b"plain-3", b"p-later", b"q-later", b"plain-4b"]
    # Reopened, the state replays from what is left: nothing open, nothing aborted.
    with open_log(tmp_path / "t-0", clock) as log:
        assert log.first_unstable_offset is None
        assert log.collect_aborted_transactions(0, 100) == []
        assert log.append(batch([(b"k9", b"again")], pid=P, seq=2)).duplicate


def test_cleaning_stops_at_the_first_unstable_offset(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock) as log:
        log.append(batch([(b"a", b"1")]))
        log.append(batch([(b"a", b"2")]))
        log.roll()
        open_at = log.append(batch([(b"a", b"txn")], pid=P, seq=0, txn=True)).first_offset
        log.append(batch([(b"a", b"3")]))
        log.roll()
        log.append(batch([(b"a", b"4")]))
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        assert log.first_unstable_offset == open_at
        todo = log_to_clean(log, log.log_end_offset, clock.now)
        assert todo.first_uncleanable_offset == open_at  # the open transaction's segment
        clean_log(log, force=True, now_ms=clock.now)
        assert [r[2] for r in records(log)] == [b"2", b"txn", b"3", b"4"]  # only the first segment was cleaned
        end_txn(log, P, commit=False)
        log.update_high_watermark(log.log_end_offset)
        assert log.first_unstable_offset is None
        clean(log, clock)
        assert [r[2] for r in records(log)] == [b"4"]  # "txn" aborted, the rest superseded


def test_a_committed_transactional_record_supersedes_an_older_one(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock) as log:
        log.append(batch([(b"k", b"old"), (b"j", b"keep")]))
        log.append(batch([(b"k", b"new")], pid=Q, seq=0, txn=True))
        end_txn(log, Q, commit=True)
        clean(log, clock)
        assert [(r[1], r[2]) for r in records(log)] == [(b"j", b"keep"), (b"k", b"new")]


def test_an_aborted_batch_that_is_its_producers_last_is_kept_empty(tmp_path):
    clock = Clock()
    with open_log(tmp_path / "t-0", clock) as log:
        log.append(batch([(b"k", b"aborted")], pid=P, seq=0, txn=True))
        end_txn(log, P, commit=False)
        log.append(batch([(b"z", b"1")]))
        clean(log, clock)
        headers = [h for s in log.segments for h in s.headers_from(0)]
        first = headers[0]
        assert (first.producer_id, first.records_count, first.last_sequence) == (P, 0, 0)
        assert records(log) == [(2, b"z", b"1")]
    with open_log(tmp_path / "t-0", clock) as log:
        assert log.producer_state.last_entry(P).last_seq == 0  # sequence state survived cleaning


class Crash(Exception):
    pass


@pytest.mark.parametrize(
    "step", ["swap:start", "swap:indexes_renamed", "swap:committed", "swap:old_renamed", "swap:final_indexes_renamed"]
)
def test_a_crash_mid_swap_keeps_the_aborted_index(tmp_path, step):
    clock = Clock()
    directory = tmp_path / "t-0"
    log = open_log(directory, clock)
    _workload(log)
    log.roll()
    log.update_high_watermark(log.log_end_offset)

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        LogCleaner(step=crash).clean(log, force=True, now_ms=clock.now)
    abandon(log)
    with open_log(directory, clock) as reopened:
        aborted = reopened.collect_aborted_transactions(0, 100)
        if step == "swap:final_indexes_renamed":
            # The cleaned segment lost its renamed indexes to the swap recovery and was rebuilt by
            # replay: the aborted data is gone, so no entry is needed (nor rebuilt).
            assert aborted in ([], [AbortedTxn(P, 2, 4, 5)])
        else:
            assert aborted == [AbortedTxn(P, 2, 4, 5)]
        assert not [p for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
        values = [r[2] for r in records(reopened)]
        assert b"committed-4" in values and (b"aborted-1" in values) == (step in ("swap:start", "swap:indexes_renamed"))


# -- property: cleaning never changes what read_committed sees (latest value per key) -----------------

_ops = st.lists(
    st.tuples(
        st.sampled_from(["plain", "data", "txn", "commit", "abort", "roll"]),
        st.sampled_from([P, Q]),
        st.sampled_from([b"a", b"b", b"c", b"d"]),
    ),
    min_size=1,
    max_size=40,
)


def committed_view(log: Log) -> list[tuple[int, bytes, bytes]]:
    """Records a read_committed consumer keeps: aborted transactions' records dropped via the index."""
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    out = []
    for segment in log.segments:
        for b in iter_batches(segment.read_bytes(0, segment.size)):
            if b.is_control:
                continue
            for r in b:
                if b.is_transactional and any(
                    t.producer_id == b.producer_id and t.first_offset <= r.offset <= t.last_offset for t in aborted
                ):
                    continue
                out.append((r.offset, r.key, r.value))
    return out


def latest_values(view: list[tuple[int, bytes, bytes]]) -> dict[bytes, bytes]:
    return {k: v for _, k, v in view if k != FILLER}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, passes=st.integers(1, 3))
def test_cleaning_preserves_the_committed_latest_values(tmp_path_factory, ops, passes):
    clock = Clock()
    log = open_log(tmp_path_factory.mktemp("prop") / "t-0", clock, **{"segment.bytes": 500, "delete.retention.ms": 0})
    try:
        seq = {P: 0, Q: 0}
        in_txn = {P: False, Q: False}
        for n, (kind, pid, key) in enumerate(ops):
            value = b"%s%d" % (kind.encode(), n)
            if kind == "roll":
                log.roll()
            elif kind == "plain":
                log.append(batch([(key, value)]))
            elif kind in ("data", "txn"):
                if kind == "data" and in_txn[pid]:
                    continue
                log.append(batch([(key, value)], pid=pid, seq=seq[pid], txn=kind == "txn"))
                seq[pid] += 1
                in_txn[pid] = in_txn[pid] or kind == "txn"
            elif in_txn[pid]:
                end_txn(log, pid, commit=kind == "commit")
                in_txn[pid] = False
        for pid in (P, Q):
            if in_txn[pid]:
                end_txn(log, pid, commit=False)
        log.update_high_watermark(log.log_end_offset)
        expected = latest_values(committed_view(log))
        for _ in range(passes):
            clean(log, clock)
            clock.now += 1
            assert latest_values(committed_view(log)) == expected
        # Everything but the fresh active segment was cleaned: no aborted record is left anywhere.
        assert latest_values(records(log)) == expected
    finally:
        log.close()
