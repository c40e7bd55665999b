"""The log with idempotent and transactional producers: sequence rules, duplicates, LSO, aborted
transactions, snapshots, recovery, truncation and expiry."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import Log, RecordBatchBuilder, build_control_batch
from storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.producer_state import INT32_MAX, ProducerStateManager
from storage.txn_index import AbortedTxn
from tests.storage.batches import abandon, log_bytes, make_batch

# Every test here runs over both twins of the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

P, Q = 1000, 2000


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def data(pid: int, epoch: int, seq: int, n: int = 1, *, txn: bool = False, ts: int = 1000) -> bytes:
    """A batch of ``n`` records from producer ``pid`` with sequences ``seq``...``seq + n - 1``."""
    builder = RecordBatchBuilder(0, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)
    for i in range(n):
        builder.append(b"v%d" % i, key=b"k%d" % i, timestamp=ts)
    return bytes(builder.build())


def marker(pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0, ts: int = 1000) -> bytes:
    return build_control_batch(commit, pid, epoch, coordinator_epoch, timestamp=ts)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def open_log(tmp_path, clock):
    logs = []

    def _open(**config):
        log = Log(tmp_path / "t-0", config, time_ms=clock)
        logs.append(log)
        return log

    yield _open
    for log in logs:
        log.close()


def state(log: Log) -> dict:
    """A comparable picture of the producer state."""
    return {pid: repr(e) for pid, e in sorted(log.producer_state.producers.items())}


def assert_untouched(log: Log, before: bytes, end: int) -> None:
    assert log.log_end_offset == end and log_bytes(log) == before


# -- sequence and epoch rules -------------------------------------------------------------------


def test_in_sequence_batches_are_appended_and_tracked(open_log):
    log = open_log()
    assert log.append(data(P, 0, 0, 3)).first_offset == 0
    log.append(make_batch([b"x"]))  # a non-idempotent batch in between
    info = log.append(data(P, 0, 3, 2))
    assert (info.first_offset, info.last_offset, info.duplicate) == (4, 5, False)
    entry = log.producer_state.last_entry(P)
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 0, 4, 5)
    assert len(log.producer_state) == 1  # the plain batch has no producer


def test_a_duplicate_of_each_of_the_last_five_returns_its_original_offsets(open_log):
    log = open_log()
    originals = []
    for n in range(6):
        log.append(make_batch([b"noise"]))
        info = log.append(data(P, 0, 2 * n, 2))
        originals.append((info.first_offset, info.last_offset))
    before, end = log_bytes(log), log.log_end_offset
    for n in range(1, 6):  # the last five batches
        info = log.append(data(P, 0, 2 * n, 2))
        assert info.duplicate and (info.first_offset, info.last_offset) == originals[n]
        assert info.batch_count == 0
        assert_untouched(log, before, end)
    # The sixth newest is no longer remembered: Kafka answers out of order.
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(P, 0, 0, 2))
    assert_untouched(log, before, end)
    assert not log.append(data(P, 0, 12, 1)).duplicate


def test_a_gap_is_out_of_order_and_leaves_the_log_untouched(open_log):
    log = open_log()
    log.append(data(P, 0, 0, 2))
    before, end = log_bytes(log), log.log_end_offset
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(P, 0, 3))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(P, 0, 1))  # overlaps but is not a whole earlier batch
    assert_untouched(log, before, end)
    assert log.producer_state.last_entry(P).last_seq == 1


def test_stale_epoch_is_refused_and_a_new_epoch_starts_at_zero(open_log):
    log = open_log()
    log.append(data(P, 1, 0, 2))
    before, end = log_bytes(log), log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append(data(P, 0, 2))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(P, 2, 5))  # a new epoch must start at 0
    assert_untouched(log, before, end)
    log.append(data(P, 2, 0))
    entry = log.producer_state.last_entry(P)
    assert (entry.producer_epoch, entry.last_seq, len(entry.batches)) == (2, 0, 1)  # old epoch's batches forgotten


def test_an_unknown_producer_may_start_at_any_sequence(open_log):
    log = open_log()
    log.append(data(P, 3, 41, 2))
    log.append(data(P, 3, 43))
    assert log.producer_state.last_entry(P).last_seq == 43


def test_sequence_wraps_past_int32_max(open_log):
    log = open_log()
    log.append(data(P, 0, INT32_MAX - 1, 3))  # sequences MAX-1, MAX, 0
    assert log.producer_state.last_entry(P).last_seq == 0
    log.append(data(P, 0, 1))
    log.append(data(Q, 0, INT32_MAX))
    log.append(data(Q, 0, 0, 2))
    assert log.producer_state.last_entry(Q).last_seq == 1
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(Q, 0, 0))


def test_several_batches_of_one_request_are_checked_in_order(open_log):
    log = open_log()
    info = log.append(data(P, 0, 0, 2) + data(P, 0, 2, 3) + data(Q, 5, 0))
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 5, 3)
    assert log.producer_state.last_entry(P).last_seq == 4
    before, end = log_bytes(log), log.log_end_offset
    with pytest.raises(OutOfOrderSequenceError):  # the second batch skips a sequence
        log.append(data(P, 0, 5) + data(P, 0, 7))
    assert_untouched(log, before, end)
    info = log.append(data(P, 0, 2, 3) + data(P, 0, 5))  # holds a duplicate: nothing is written
    assert info.duplicate and (info.first_offset, info.last_offset) == (2, 4)
    assert_untouched(log, before, end)


def test_client_batches_with_a_producer_id_need_a_sequence(open_log):
    log = open_log()
    with pytest.raises(InvalidRecordError):
        log.append(data(P, 0, -1))
    with pytest.raises(InvalidRequestError):
        log.append(data(P, 0, 0), origin="nobody")
    assert log.log_end_offset == 0


def test_follower_appends_update_state_without_checks(open_log, tmp_path, clock):
    leader = Log(tmp_path / "leader-0", time_ms=clock)
    try:
        leader.append(data(P, 1, 0, 2))
        leader.append(data(P, 1, 2))
        leader.append(data(Q, 0, 0, txn=True))
        records = leader.read(0, 10**6).records
    finally:
        leader.close()
    follower = open_log()
    follower.append(records, assign_offsets=False)
    assert state(follower)[P] == repr(follower.producer_state.last_entry(P))
    assert follower.producer_state.last_entry(P).last_seq == 2
    assert follower.first_unstable_offset == 3
    # Replication never refuses: a stale epoch and a gap are taken as the leader wrote them.
    stale = bytearray(data(P, 0, 9))
    stale[0:8] = (4).to_bytes(8, "big")
    follower.append(bytes(stale), assign_offsets=False)
    assert follower.log_end_offset == 5


# -- transactions ---------------------------------------------------------------------------------


def test_a_transaction_holds_the_lso_until_its_marker_is_replicated(open_log):
    log = open_log()
    log.append(data(Q, 0, 0))  # 0
    log.append(data(P, 0, 0, 2, txn=True))  # 1-2 opens P's transaction
    log.append(data(Q, 0, 1))  # 3
    assert log.first_unstable_offset == 1
    assert log.last_stable_offset(4) == 1 and log.last_stable_offset(1) == 1 and log.last_stable_offset(0) == 0
    with pytest.raises(InvalidTxnStateError):
        log.append(data(P, 0, 2))  # non-transactional while the transaction is open
    log.append(data(P, 0, 2, txn=True))  # 4
    info = log.append(marker(P, 0, commit=True), origin="coordinator")  # 5
    assert info.first_offset == 5
    assert log.producer_state.last_entry(P).current_txn_first_offset == -1
    assert log.first_unstable_offset == 1  # completed, but its marker is not below the HW yet
    log.update_high_watermark(5)
    assert log.first_unstable_offset == 1
    log.update_high_watermark(6)
    assert log.first_unstable_offset is None and log.last_stable_offset(6) == 6
    assert log.collect_aborted_transactions(0, 6) == []
    log.append(data(P, 0, 3))  # a plain batch is fine again


def test_an_abort_lands_in_the_txnindex_with_the_lso_of_other_open_transactions(open_log):
    log = open_log()
    log.append(data(P, 0, 0, txn=True))  # 0
    log.append(data(Q, 0, 0, txn=True))  # 1
    log.append(marker(P, 0, commit=False, coordinator_epoch=3), origin="coordinator")  # 2
    assert log.collect_aborted_transactions(0, 3) == [AbortedTxn(P, 0, 2, 1)]  # Q still open at 1
    log.append(marker(Q, 0, commit=False), origin="coordinator")  # 3
    txns = log.collect_aborted_transactions(0, 4)
    assert txns == [AbortedTxn(P, 0, 2, 1), AbortedTxn(Q, 1, 3, 4)]
    assert log.active_segment.txn_index.entries == txns
    assert log.collect_aborted_transactions(3, 4) == [AbortedTxn(Q, 1, 3, 4)]
    assert log.producer_state.last_entry(P).coordinator_epoch == 3


def test_markers_are_checked_against_producer_and_coordinator_epochs(open_log):
    log = open_log()
    log.append(data(P, 2, 0, txn=True))
    before, end = log_bytes(log), log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append(marker(P, 1, commit=True), origin="coordinator")
    log.append(marker(P, 2, commit=True, coordinator_epoch=5), origin="coordinator")
    before, end = log_bytes(log), log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(marker(P, 2, commit=False, coordinator_epoch=4), origin="coordinator")
    assert_untouched(log, before, end)
    # A marker for a producer without an open transaction (an empty transaction) completes nothing.
    log.append(marker(P, 3, commit=False, coordinator_epoch=5), origin="coordinator")
    assert log.collect_aborted_transactions(0, 100) == []
    assert log.producer_state.last_entry(P).producer_epoch == 3  # the marker bumped the epoch


def test_coordinator_writes_skip_sequence_checks(open_log):
    log = open_log()
    log.append(data(P, 3, -1, txn=True), origin="coordinator")  # a transactional offset commit: no sequence
    log.append(data(P, 3, -1, txn=True), origin="coordinator")  # the same sequence again is no duplicate here
    assert log.log_end_offset == 2 and log.first_unstable_offset == 0
    log.append(marker(P, 3, commit=True), origin="coordinator")
    with pytest.raises(InvalidProducerEpochError):  # epochs are still checked
        log.append(data(P, 2, -1, txn=True), origin="coordinator")


def test_collect_aborted_transactions_across_segments(open_log):
    log = open_log(**{"segment.bytes": 400})
    log.append(data(P, 0, 0, txn=True))  # P's aborted transaction starts in the first segment
    for n in range(6):
        log.append(data(Q, 0, 2 * n, 2))
    log.append(marker(P, 0, commit=False), origin="coordinator")
    p_marker = log.log_end_offset - 1
    log.append(data(P, 0, 1, txn=True))
    first_p2 = log.log_end_offset - 1
    log.append(data(Q, 0, 12))
    log.append(marker(P, 0, commit=False), origin="coordinator")
    assert len(log.segments) >= 3
    holding = [s.base_offset for s in log.segments if s.txn_index.entries]
    assert holding and all(s.txn_index.path.exists() == bool(s.txn_index.entries) for s in log.segments)
    everything = log.collect_aborted_transactions(0, log.log_end_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in everything] == [
        (P, 0, p_marker),
        (P, first_p2, log.log_end_offset - 1),
    ]
    # A fetch of the first segment only still learns of the transaction aborted later.
    assert log.collect_aborted_transactions(0, 2) == everything[:1]
    assert log.collect_aborted_transactions(p_marker + 1, log.log_end_offset) == everything[1:]


# -- snapshots, restart and recovery ----------------------------------------------------------------


def _workload(log: Log) -> None:
    log.append(data(P, 0, 0, 2))
    log.append(data(Q, 1, 0, txn=True))
    log.append(marker(Q, 1, commit=False), origin="coordinator")
    log.append(data(P, 0, 2))
    log.roll()
    log.append(data(Q, 1, 1, txn=True))
    log.append(data(P, 0, 3, 3))


def test_snapshots_at_roll_and_close_restore_the_state(open_log, tmp_path, clock):
    log = open_log()
    _workload(log)
    snaps = log.producer_state.snapshot_offsets()
    assert snaps == [log.active_segment.base_offset]
    assert (tmp_path / "t-0" / f"{snaps[0]:020d}.snapshot").exists()
    # Completed transactions are not in snapshots: as in Kafka, a restart starts with their markers replicated.
    log.update_high_watermark(log.log_end_offset)
    picture, fuo, aborted = state(log), log.first_unstable_offset, log.collect_aborted_transactions(0, 100)
    end = log.log_end_offset
    log.close()
    assert end in ProducerStateManager(tmp_path / "t-0").snapshot_offsets()
    again = open_log()
    assert state(again) == picture and again.first_unstable_offset == fuo
    assert again.collect_aborted_transactions(0, 100) == aborted
    # The five remembered batches came back: a retry after the restart is still a duplicate.
    info = again.append(data(P, 0, 2))
    assert info.duplicate and info.first_offset == 4


def test_unclean_restart_replays_the_log_and_rebuilds_the_txnindex(open_log, tmp_path, clock):
    log = open_log()
    _workload(log)
    log.append(marker(Q, 1, commit=False), origin="coordinator")
    picture, aborted = state(log), log.collect_aborted_transactions(0, 100)
    assert len(aborted) == 2
    active_index = log.active_segment.txn_index.path
    abandon(log)  # no close: no snapshot at the end, no clean-shutdown marker
    active_index.unlink()  # lost with the page cache
    again = open_log()
    assert state(again) == picture
    assert again.collect_aborted_transactions(0, 100) == aborted
    assert again.active_segment.txn_index.path.exists()


def test_unclean_restart_with_a_torn_tail(open_log, tmp_path):
    log = open_log()
    _workload(log)
    picture, end = state(log), log.log_end_offset
    torn = data(P, 0, 6, 2)
    path = log.active_segment.log_path
    abandon(log)
    with open(path, "ab") as file:
        file.write(torn[: len(torn) // 2])
    again = open_log()
    assert again.log_end_offset == end and state(again) == picture
    info = again.append(torn)  # not a duplicate: the torn copy never counted
    assert not info.duplicate and info.first_offset == end


def test_a_corrupt_snapshot_is_ignored(open_log, tmp_path):
    log = open_log()
    _workload(log)
    picture = state(log)
    log.close()
    snapshots = ProducerStateManager(tmp_path / "t-0").snapshot_offsets()
    latest = tmp_path / "t-0" / f"{snapshots[-1]:020d}.snapshot"
    raw = bytearray(latest.read_bytes())
    raw[-3] ^= 0xFF
    latest.write_bytes(bytes(raw))
    again = open_log()
    assert state(again) == picture
    again.close()
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.write_bytes(b"junk")  # every snapshot unreadable: a full replay
    third = open_log()
    assert state(third) == picture


def test_truncate_to_rebuilds_state_and_drops_later_aborts(open_log):
    log = open_log()
    log.append(data(P, 0, 0, 2))  # 0-1
    log.append(data(Q, 0, 0, txn=True))  # 2
    log.roll()
    log.append(data(P, 0, 2))  # 3
    log.append(marker(Q, 0, commit=False), origin="coordinator")  # 4
    log.append(data(P, 0, 3))  # 5
    assert log.collect_aborted_transactions(0, 10) == [AbortedTxn(Q, 2, 4, 5)]
    log.truncate_to(4)
    assert log.log_end_offset == 4
    assert log.collect_aborted_transactions(0, 10) == [] and log.active_segment.txn_index.entries == []
    assert log.producer_state.last_entry(P).last_seq == 2
    assert log.first_unstable_offset == 2  # Q's transaction is open again
    assert not log.append(data(P, 0, 3)).duplicate  # truncated away: a fresh append
    log.truncate_to(2)  # below the roll snapshot: replay from an older point or the start
    assert log.producer_state.last_entry(Q) is None and log.producer_state.last_entry(P).last_seq == 1
    assert log.first_unstable_offset is None
    log.truncate_fully_and_start_at(50)
    assert log.producer_state.is_empty and log.producer_state.snapshot_offsets() == []


def test_retention_and_delete_records_drop_old_snapshots(open_log):
    log = open_log(**{"retention.bytes": 1})
    for n in range(4):
        log.append(data(P, 0, n))
        log.roll()
    assert log.producer_state.snapshot_offsets() == [3, 4]
    log.delete_records(4)
    assert log.producer_state.snapshot_offsets() == [4]
    assert log.producer_state.last_entry(P).last_seq == 3  # producers outlive their data (until expiry)


def test_idle_producers_expire(open_log, clock):
    log = open_log(**{"producer.id.expiration.ms": 1000})
    log.append(data(P, 0, 0, ts=clock.now))
    log.append(data(Q, 0, 0, txn=True, ts=clock.now))
    clock.now += 999
    assert log.remove_expired_producers() == 0
    clock.now += 1
    assert log.remove_expired_producers() == 1  # Q has an open transaction
    assert log.producer_state.last_entry(P) is None and log.producer_state.last_entry(Q) is not None
    log.append(data(P, 0, 77))  # unknown again: any sequence


def test_snapshots_do_not_pile_up(open_log):
    log = open_log()
    for n in range(4):
        log.append(data(P, 0, n))
        log.close()
        log = open_log()
    assert len(log.producer_state.snapshot_offsets()) == 1  # restarts without a roll keep the newest only
    for n in range(4, 8):
        log.roll()
        log.append(data(P, 0, n))
    bases = [s.base_offset for s in log.segments[-2:]]
    assert log.producer_state.snapshot_offsets() == bases
    log.close()
    again = open_log()
    assert again.producer_state.snapshot_offsets() == [*bases, again.log_end_offset]
    assert again.producer_state.last_entry(P).last_seq == 7


# -- property: every way of reopening gives the state of a full replay --------------------------------

_op = st.tuples(st.sampled_from(["data", "txn", "commit", "abort", "roll", "dup"]), st.sampled_from([P, Q]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, min_size=1, max_size=30), torn=st.booleans())
def test_reopening_always_rebuilds_the_state_of_a_full_replay(tmp_path_factory, ops, torn):
    directory = tmp_path_factory.mktemp("prop") / "t-0"
    clock = Clock()
    log = Log(directory, {"segment.bytes": 600}, time_ms=clock)
    seq = {P: 0, Q: 0}
    open_txn = {P: False, Q: False}
    last: dict[int, bytes] = {}
    for kind, pid in ops:
        if kind == "roll":
            log.roll()
        elif kind == "dup" and pid in last:
            assert log.append(last[pid]).duplicate
        elif kind in ("data", "txn") and not (kind == "data" and open_txn[pid]):
            batch = data(pid, 0, seq[pid], 2, txn=kind == "txn")
            log.append(batch)
            last[pid] = batch
            seq[pid] += 2
            open_txn[pid] = open_txn[pid] or kind == "txn"
        elif kind in ("commit", "abort"):
            log.append(marker(pid, 0, commit=kind == "commit"), origin="coordinator")
            open_txn[pid] = False
    log.update_high_watermark(log.log_end_offset)
    expected = (state(log), log.first_unstable_offset, log.collect_aborted_transactions(0, 10**6))

    def picture(reopened: Log) -> tuple:
        reopened.update_high_watermark(reopened.log_end_offset)
        return state(reopened), reopened.first_unstable_offset, reopened.collect_aborted_transactions(0, 10**6)

    log.close()
    with Log(directory, time_ms=clock) as clean:
        assert picture(clean) == expected
    for path in directory.glob("*.snapshot"):
        path.unlink()
    crashed = Log(directory, time_ms=clock)
    assert picture(crashed) == expected  # a full replay
    path = crashed.active_segment.log_path
    abandon(crashed)
    if torn:
        with open(path, "ab") as file:
            file.write(data(P, 0, 999, 3)[:40])
    (directory / ".kafka_cleanshutdown").unlink(missing_ok=True)
    for index in directory.glob("*.txnindex"):
        index.unlink()  # lost with the page cache: the recovery scan must rebuild what it scans
    (directory / "recovery-point-offset-checkpoint").unlink(missing_ok=True)  # scan everything
    with Log(directory, time_ms=clock) as recovered:
        assert picture(recovered) == expected
