"""The transaction state machine without Ray, on a manual clock (as Kafka tests its
TransactionStateManager and TransactionMetadata on MockTime): producer ids and epochs,
fencing, partitions, EndTxn's transitions, timeouts, expiry, the record format and replay.

The actor shell's part (writing the records and the markers) is tested end to end in
test_transaction_coordinator.py; here every transit is made durable by hand, with
``complete_transition``, as the shell does once the record is written.
"""

from __future__ import annotations

import json

import pytest

from actors.clock import ManualClock
from actors.names import OFFSETS_TOPIC
from actors.protocol import TransactionResult, TransactionState
from actors.transaction_coordinator.records import decode_key, decode_value, encode_value, transaction_key
from actors.transaction_coordinator.state_manager import TransactionStateManager, TxnTransit, completion_backoff_ms
from actors.transaction_coordinator.transaction_metadata import MAX_EPOCH, TransactionMetadata
from actors.types import ProducerIdAndEpoch, TopicPartition
from storage.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
)

TID = "tid"
PID = 1000
TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 900_000
EXPIRATION_MS = 7 * 24 * 3600 * 1000
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
OFFSETS_TP = TopicPartition(OFFSETS_TOPIC, 7)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def txns(clock: ManualClock) -> TransactionStateManager:
    return TransactionStateManager(clock, MAX_TIMEOUT_MS, EXPIRATION_MS)


def durable(txns: TransactionStateManager, transit: TxnTransit) -> TransactionMetadata:
    """What the shell does once the transit's record is written: it takes effect. The
    record is also replayed into a fresh manager, which must come out the same."""
    key, value = transit.record
    assert decode_key(key) == transit.transactional_id
    if value is not None:
        replayed = decode_value(transit.transactional_id, value, now_ms=0)
        assert replayed == transit.target
    return txns.complete_transition(transit)


def init(txns: TransactionStateManager, tid: str = TID, pid: int = PID, timeout_ms: int = TIMEOUT_MS):
    """A first InitProducerId for ``tid``."""
    txns.validate_init(tid, timeout_ms)
    return durable(txns, txns.prepare_new(tid, pid, timeout_ms))


def add(txns: TransactionStateManager, partitions, tid: str = TID) -> TransactionMetadata:
    txn = txns.get(tid)
    transit = txns.prepare_add_partitions(tid, txn.producer_id, txn.producer_epoch, partitions)
    assert transit is not None
    return durable(txns, transit)


def end(txns: TransactionStateManager, commit: bool, tid: str = TID) -> TransactionMetadata:
    """EndTxn through to CompleteCommit/CompleteAbort (the markers written in between)."""
    txn = txns.get(tid)
    plan = txns.end_txn(tid, txn.producer_id, txn.producer_epoch, commit)
    assert plan.prepare is not None and plan.complete
    durable(txns, plan.prepare)
    return durable(txns, txns.prepare_complete(tid))


def error_name(info: pytest.ExceptionInfo) -> str:
    return info.value.kafka_name


# -- InitProducerId ---------------------------------------------------------------------------


def test_a_first_init_gives_the_producer_id_at_epoch_zero(txns, clock):
    txn = init(txns)
    assert (txn.producer_id, txn.producer_epoch, txn.state) == (PID, 0, TransactionState.EMPTY)
    assert txn.last_update_ms == clock.wall_ms() and txn.timeout_ms == TIMEOUT_MS
    assert txns.describe([TID])[0].state == TransactionState.EMPTY
    # A second first-init of a known id is a race the shell's lock prevents; it is refused.
    with pytest.raises(ConcurrentTransactionsError):
        txns.prepare_new(TID, PID + 1, TIMEOUT_MS)


@pytest.mark.parametrize("timeout_ms", [0, -1, MAX_TIMEOUT_MS + 1])
def test_a_timeout_outside_the_maximum_is_invalid_transaction_timeout(txns, timeout_ms):
    with pytest.raises(InvalidTransactionTimeoutError) as info:
        txns.validate_init(TID, timeout_ms)
    assert error_name(info) == "INVALID_TRANSACTION_TIMEOUT"
    txns.validate_init(TID, MAX_TIMEOUT_MS)  # the maximum itself is allowed


def test_a_transactional_id_that_is_not_a_string_is_an_invalid_request(txns):
    with pytest.raises(InvalidRequestError) as info:
        txns.validate_init(42, TIMEOUT_MS)
    assert error_name(info) == "INVALID_REQUEST"


def test_each_new_instance_bumps_the_epoch_and_fences_the_older(txns, clock):
    first = init(txns)
    clock.advance(5)
    assert txns.check_init(TID, -1, -1) is None  # a plain InitProducerId: go on and bump
    second = durable(txns, txns.prepare_init(TID, 30_000))
    assert (second.producer_id, second.producer_epoch) == (PID, first.producer_epoch + 1)
    assert (second.last_producer_id, second.last_producer_epoch) == (PID, 0)
    assert second.timeout_ms == 30_000 and second.last_update_ms == clock.wall_ms()
    # The first instance is fenced from everything it might still try.
    with pytest.raises(ProducerFencedError) as info:
        txns.prepare_add_partitions(TID, PID, 0, [TP0])
    assert error_name(info) == "PRODUCER_FENCED"
    with pytest.raises(ProducerFencedError):
        txns.end_txn(TID, PID, 0, True)


def test_a_retried_bump_gets_the_same_answer_and_a_stale_one_is_fenced(txns):
    init(txns)
    # KIP-360: the current producer asks for a bump naming its id and epoch.
    assert txns.check_init(TID, PID, 0) is None
    bumped = durable(txns, txns.prepare_init(TID, TIMEOUT_MS))
    # Its answer was lost: the retry names the old epoch and gets the bumped one, no second bump.
    assert txns.check_init(TID, PID, 0) == ProducerIdAndEpoch(PID, bumped.producer_epoch)
    # An epoch that is neither the current nor the last one: a newer instance took over.
    with pytest.raises(ProducerFencedError):
        txns.check_init(TID, PID, 7)
    with pytest.raises(ProducerFencedError):
        txns.check_init(TID, PID + 1, bumped.producer_epoch)


def test_an_exhausted_epoch_rotates_to_a_new_producer_id(txns):
    init(txns)
    txns.txns[TID] = TransactionMetadata(TID, PID, MAX_EPOCH - 1, TIMEOUT_MS)
    assert txns.needs_new_producer_id(TID)
    with pytest.raises(ValueError):
        txns.prepare_init(TID, TIMEOUT_MS)  # the shell must fetch a new id first
    rotated = durable(txns, txns.prepare_init(TID, TIMEOUT_MS, new_producer_id=PID + 1))
    assert (rotated.producer_id, rotated.producer_epoch) == (PID + 1, 0)
    assert (rotated.last_producer_id, rotated.last_producer_epoch) == (PID, MAX_EPOCH - 1)
    assert not txns.needs_new_producer_id(TID)


def test_init_while_a_transaction_is_open_aborts_it_under_a_bumped_epoch(txns):
    init(txns)
    add(txns, [TP0, TP1])
    # The new instance's InitProducerId: PrepareEpochFence (in memory) then PrepareAbort.
    fence = txns.prepare_fence(TID)
    assert fence.previous.state == TransactionState.ONGOING
    assert fence.target.state == TransactionState.PREPARE_ABORT and fence.target.producer_epoch == 1
    durable(txns, fence)
    markers = txns.markers(TID)
    # The ABORT markers carry the bumped epoch: they fence the zombie on every partition.
    assert (markers.producer_id, markers.producer_epoch, markers.result) == (PID, 1, TransactionResult.ABORT)
    assert markers.partitions == (TP0, TP1) and not markers.touches_offsets
    done = durable(txns, txns.prepare_complete(TID))
    assert done.state == TransactionState.COMPLETE_ABORT and done.partitions == frozenset()
    fresh = durable(txns, txns.prepare_init(TID, TIMEOUT_MS))
    assert fresh.producer_epoch == 2 and fresh.state == TransactionState.EMPTY
    with pytest.raises(ProducerFencedError):
        txns.end_txn(TID, PID, 0, True)


def test_prepare_epoch_fence_is_never_written(txns):
    init(txns)
    add(txns, [TP0])
    fenced = txns.get(TID).prepare_fence_epoch()
    assert fenced.state == TransactionState.PREPARE_EPOCH_FENCE and fenced.producer_epoch == 1
    with pytest.raises(ValueError):
        encode_value(fenced)
    # Nor is it read back, should a record ever hold it.
    value = json.dumps({"producer_id": PID, "producer_epoch": 1, "timeout_ms": 1, "state": fenced.state}).encode()
    with pytest.raises(ValueError):
        decode_value(TID, value, now_ms=0)


# -- AddPartitionsToTxn -------------------------------------------------------------------------


def test_adding_partitions_starts_the_transaction_once(txns, clock):
    init(txns)
    clock.advance(100)
    started = clock.wall_ms()
    txn = add(txns, [TP0])
    assert txn.state == TransactionState.ONGOING and txn.partitions == {TP0} and txn.start_ms == started
    # Partitions already in it: nothing to write.
    assert txns.prepare_add_partitions(TID, PID, 0, [TP0]) is None
    clock.advance(100)
    txn = add(txns, [TP1, OFFSETS_TP])
    assert txn.partitions == {TP0, TP1, OFFSETS_TP} and txn.start_ms == started  # the start stays
    assert txn.last_update_ms == clock.wall_ms()


def test_add_partitions_fences_a_wrong_producer(txns):
    init(txns)
    with pytest.raises(InvalidProducerIdMappingError) as info:
        txns.prepare_add_partitions(TID, PID + 1, 0, [TP0])
    assert error_name(info) == "INVALID_PRODUCER_ID_MAPPING"
    with pytest.raises(InvalidProducerIdMappingError):
        txns.prepare_add_partitions("unknown", PID, 0, [TP0])
    with pytest.raises(ProducerFencedError):
        txns.prepare_add_partitions(TID, PID, 1, [TP0])


def test_add_partitions_while_the_previous_transaction_completes_is_concurrent_transactions(txns):
    init(txns)
    add(txns, [TP0])
    durable(txns, txns.end_txn(TID, PID, 0, True).prepare)
    with pytest.raises(ConcurrentTransactionsError) as info:
        txns.prepare_add_partitions(TID, PID, 0, [TP1])
    assert error_name(info) == "CONCURRENT_TRANSACTIONS" and info.value.retriable


# -- EndTxn -------------------------------------------------------------------------------------


def test_commit_goes_through_prepare_commit_to_complete_commit(txns, clock):
    init(txns)
    add(txns, [TP1, OFFSETS_TP, TP0])
    plan = txns.end_txn(TID, PID, 0, True)
    assert plan.prepare.target.state == TransactionState.PREPARE_COMMIT and plan.complete
    durable(txns, plan.prepare)
    markers = txns.markers(TID)
    assert markers.result == TransactionResult.COMMIT and markers.partitions == (OFFSETS_TP, TP0, TP1)
    assert markers.touches_offsets  # the group coordinator must hear of it
    clock.advance(10)
    done = durable(txns, txns.prepare_complete(TID))
    assert done.state == TransactionState.COMPLETE_COMMIT and not done.partitions
    assert done.last_update_ms == clock.wall_ms() and done.producer_epoch == 0
    # A retry of the same EndTxn (its answer was lost) is answered at once.
    retry = txns.end_txn(TID, PID, 0, True)
    assert retry.prepare is None and not retry.complete
    # The next transaction starts from CompleteCommit.
    assert add(txns, [TP0]).state == TransactionState.ONGOING


def test_abort_goes_through_prepare_abort_to_complete_abort(txns):
    init(txns)
    add(txns, [TP0])
    plan = txns.end_txn(TID, PID, 0, False)
    assert plan.prepare.target.state == TransactionState.PREPARE_ABORT
    durable(txns, plan.prepare)
    assert txns.markers(TID).result == TransactionResult.ABORT
    # An EndTxn retried while the markers are still being written finishes the same end.
    again = txns.end_txn(TID, PID, 0, False)
    assert again.prepare is None and again.complete
    assert durable(txns, txns.prepare_complete(TID)).state == TransactionState.COMPLETE_ABORT


@pytest.mark.parametrize(
    "setup, commit",
    [
        ("empty", True),  # nothing open to commit
        ("empty", False),
        ("complete_commit", False),  # the other outcome was decided
        ("complete_abort", True),
        ("prepare_commit", False),
        ("prepare_abort", True),
    ],
)
def test_end_txn_in_the_wrong_state_is_invalid_txn_state(txns, setup, commit):
    init(txns)
    if setup != "empty":
        add(txns, [TP0])
        decided = setup.endswith("commit")
        durable(txns, txns.end_txn(TID, PID, 0, decided).prepare)
        if setup.startswith("complete"):
            durable(txns, txns.prepare_complete(TID))
    with pytest.raises(InvalidTxnStateError) as info:
        txns.end_txn(TID, PID, 0, commit)
    assert error_name(info) == "INVALID_TXN_STATE" and not info.value.retriable


def test_end_txn_is_decided_without_waiting_once_the_outcome_is(txns):
    init(txns)
    add(txns, [TP0])
    # Ongoing: not decided yet, so the EndTxn takes its turn (and prepares).
    assert not txns.end_txn_at_once(TID, PID, 0, True)
    durable(txns, txns.end_txn(TID, PID, 0, True).prepare)
    # PrepareCommit is durable: a retried commit is answered at once (Kafka: a retry in
    # PrepareCommit succeeds) while its completion is still owed; the other outcome and a
    # stale producer are refused at once, as they would be in turn.
    assert txns.end_txn_at_once(TID, PID, 0, True) and txns.completion_owed(TID)
    with pytest.raises(InvalidTxnStateError):
        txns.end_txn_at_once(TID, PID, 0, False)
    with pytest.raises(ProducerFencedError):
        txns.end_txn_at_once(TID, PID, 1, True)
    with pytest.raises(InvalidProducerIdMappingError):
        txns.end_txn_at_once(TID, PID + 1, 0, True)
    assert not txns.end_txn_at_once("unknown", PID, 0, True)
    durable(txns, txns.prepare_complete(TID))
    # CompleteCommit: the retry still succeeds at once; anything else takes its turn.
    assert txns.end_txn_at_once(TID, PID, 0, True) and not txns.completion_owed(TID)
    assert not txns.end_txn_at_once(TID, PID, 0, False)
    assert not txns.end_txn_at_once(TID, PID, 1, True)


def test_one_completion_is_claimed_per_prepare_state(txns):
    init(txns)
    assert not txns.claim_completion(TID)  # Empty: nothing owed
    add(txns, [TP0])
    assert not txns.claim_completion(TID)  # Ongoing: nothing owed yet
    durable(txns, txns.end_txn(TID, PID, 0, False).prepare)
    assert txns.completion_owed(TID)
    assert txns.claim_completion(TID) and txns.completing(TID)
    assert not txns.claim_completion(TID)  # never two at once for one id
    # The claimed one stopped before completing (it failed, or the actor closes): the next
    # call that finds the id in PrepareAbort claims it again, so none is lost.
    txns.release_completion(TID)
    assert not txns.completing(TID) and txns.claim_completion(TID)
    durable(txns, txns.prepare_complete(TID))
    txns.release_completion(TID)
    assert not txns.completion_owed(TID) and not txns.claim_completion(TID)
    assert not txns.claim_completion("unknown")


def test_a_loaded_prepare_state_is_owed_a_completion(txns, clock):
    init(txns)
    add(txns, [TP0])
    prepare = txns.end_txn(TID, PID, 0, True).prepare
    durable(txns, prepare)
    loaded = TransactionStateManager(clock, MAX_TIMEOUT_MS, EXPIRATION_MS)
    for transit in (txns.prepare_new("other", PID + 1, TIMEOUT_MS), prepare):
        loaded.replay(*transit.record)
    assert loaded.pending_completions() == [TID]
    assert loaded.claim_completion(TID) and not loaded.claim_completion("other")


# -- CompleteX folded into the next transaction's first record ------------------------------------


def prepared(txns: TransactionStateManager, commit: bool, partitions=(TP0,)) -> TransactionMetadata:
    """A transaction on ``partitions`` ended: its PrepareX durable, its markers not yet written."""
    add(txns, partitions)
    return durable(txns, txns.end_txn(TID, PID, 0, commit).prepare)


@pytest.mark.parametrize("commit", [True, False])
def test_once_the_markers_are_done_the_next_add_writes_complete_x_and_ongoing_together(txns, clock, commit):
    init(txns)
    before = prepared(txns, commit, (TP0, OFFSETS_TP))
    assert not txns.markers_done(TID)
    assert txns.record_markers_done(TID) and txns.markers_done(TID)
    assert txns.completion_owed(TID)  # in memory only: the CompleteX is still owed
    clock.advance(25)
    plan = txns.plan_add(TID, PID, 0, [TP1])
    assert plan.refused is None and plan.transits == (plan.complete, plan.add)
    # The CompleteX is decided from the PrepareX, the add from that CompleteX (not yet applied).
    done = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
    assert plan.complete.previous is before and plan.complete.target.state == done
    assert plan.add.previous is plan.complete.target
    assert plan.add.target.state == TransactionState.ONGOING and plan.add.target.partitions == {TP1}
    assert plan.add.target.start_ms == clock.wall_ms() and plan.add.target.producer_epoch == 0
    assert txns.get(TID) is before  # nothing applied before the append is durable
    # Applied in order once the one append is durable; a replay of the two records agrees.
    records = [t.record for t in plan.transits]
    assert [json.loads(v)["state"] for _, v in records] == [done, TransactionState.ONGOING]
    for transit in plan.transits:
        durable(txns, transit)
    assert txns.get(TID) == plan.add.target and not txns.markers_done(TID)
    replayed = TransactionStateManager(ManualClock(), MAX_TIMEOUT_MS, EXPIRATION_MS)
    for key, value in [(transaction_key(TID), encode_value(before)), *records]:
        replayed.replay(key, value)
    assert replayed.get(TID) == txns.get(TID) and replayed.pending_completions() == []


def test_without_the_markers_done_an_add_in_a_prepare_state_is_concurrent_transactions(txns):
    init(txns)
    assert not txns.record_markers_done(TID)  # Empty: no markers owed
    add(txns, [TP0])
    assert not txns.record_markers_done(TID) and not txns.markers_done(TID)  # Ongoing
    assert not txns.record_markers_done("unknown")
    durable(txns, txns.end_txn(TID, PID, 0, True).prepare)
    with pytest.raises(ConcurrentTransactionsError):
        txns.plan_add(TID, PID, 0, [TP1])
    # Nothing to fold in: the add alone, as prepare_add_partitions decides it.
    durable(txns, txns.prepare_complete(TID))
    plan = txns.plan_add(TID, PID, 0, [TP1])
    assert plan.complete is None and plan.refused is None and plan.transits == (plan.add,)
    assert plan.add.target.state == TransactionState.ONGOING


@pytest.mark.parametrize(
    "pid, epoch, error",
    [(PID, 1, ProducerFencedError), (PID, -1, ProducerFencedError), (PID + 1, 0, InvalidProducerIdMappingError)],
)
def test_a_refused_add_still_yields_the_complete_x(txns, pid, epoch, error):
    init(txns)
    prepared(txns, True)
    txns.record_markers_done(TID)
    plan = txns.plan_add(TID, pid, epoch, [TP1])
    assert isinstance(plan.refused, error) and plan.add is None
    assert plan.transits == (plan.complete,) and plan.complete.target.state == TransactionState.COMPLETE_COMMIT
    assert durable(txns, plan.complete).state == TransactionState.COMPLETE_COMMIT
    assert not txns.markers_done(TID) and not txns.completion_owed(TID)


def test_markers_done_is_cleared_by_every_transition_and_by_replay(txns, clock):
    init(txns)
    prepared(txns, True)
    # The completion wrote the CompleteX itself (no add was waiting).
    txns.record_markers_done(TID)
    durable(txns, txns.prepare_complete(TID))
    assert not txns.markers_done(TID)
    # The next transaction's PrepareX owes its markers again.
    prepared(txns, False)
    assert not txns.markers_done(TID)
    # InitProducerId in PrepareX: the completion writes only the CompleteX, then the bump.
    txns.record_markers_done(TID)
    durable(txns, txns.prepare_complete(TID))
    durable(txns, txns.prepare_init(TID, TIMEOUT_MS))
    assert not txns.markers_done(TID)
    # A replayed record (a reload) owes the markers again: they are written again.
    txns.complete_transition(txns.plan_add(TID, PID, 1, [TP0]).add)
    txns.complete_transition(txns.end_txn(TID, PID, 1, True).prepare)
    txns.record_markers_done(TID)
    txns.replay(*TxnTransit(None, txns.get(TID)).record)
    assert not txns.markers_done(TID) and txns.pending_completions() == [TID]


def test_a_folded_plan_decided_from_a_state_that_moved_on_is_refused(txns):
    init(txns)
    prepared(txns, True)
    txns.record_markers_done(TID)
    plan = txns.plan_add(TID, PID, 0, [TP1])
    durable(txns, txns.prepare_complete(TID))  # something else wrote the CompleteX meanwhile
    with pytest.raises(ConcurrentTransactionsError):
        txns.complete_transition(plan.complete)
    assert txns.get(TID).state == TransactionState.COMPLETE_COMMIT


def test_a_failed_completion_backs_off_exponentially_up_to_a_cap():
    waits = [completion_backoff_ms(attempt) for attempt in range(1, 12)]
    assert waits[:4] == [100, 200, 400, 800]
    assert waits == sorted(waits) and max(waits) == 5000 == waits[-1]
    assert completion_backoff_ms(10**6) == 5000  # no overflow however long it fails


def test_no_markers_are_owed_outside_a_prepare_state(txns):
    init(txns)
    with pytest.raises(InvalidTxnStateError):
        txns.markers(TID)
    add(txns, [TP0])
    with pytest.raises(InvalidTxnStateError):
        txns.markers(TID)


@pytest.mark.parametrize(
    "state, step",
    [
        (TransactionState.EMPTY, lambda t: t.prepare_abort_or_commit(True, 0)),
        (TransactionState.EMPTY, lambda t: t.prepare_complete(0)),
        (TransactionState.EMPTY, lambda t: t.prepare_fence_epoch()),
        (TransactionState.ONGOING, lambda t: t.prepare_complete(0)),
        (TransactionState.ONGOING, lambda t: t.prepare_increment_epoch(TIMEOUT_MS, 0)),
        (TransactionState.ONGOING, lambda t: t.prepare_dead()),
        (TransactionState.PREPARE_COMMIT, lambda t: t.prepare_add_partitions(frozenset({TP0}), 0)),
        (TransactionState.PREPARE_COMMIT, lambda t: t.prepare_abort_or_commit(False, 0)),
        (TransactionState.PREPARE_ABORT, lambda t: t.prepare_dead()),
        (TransactionState.COMPLETE_COMMIT, lambda t: t.prepare_complete(0)),
        (TransactionState.COMPLETE_ABORT, lambda t: t.prepare_abort_or_commit(False, 0)),
    ],
)
def test_kafkas_invalid_transitions_are_refused(state, step):
    txn = TransactionMetadata(TID, PID, 0, TIMEOUT_MS, state)
    with pytest.raises(InvalidTxnStateError) as info:
        step(txn)
    assert error_name(info) == "INVALID_TXN_STATE"
    assert txn.state == state  # metadata is immutable: nothing changed


def test_a_transit_decided_from_a_state_that_moved_on_is_refused(txns):
    init(txns)
    stale = txns.prepare_add_partitions(TID, PID, 0, [TP0])
    add(txns, [TP1])  # another transit went first
    with pytest.raises(ConcurrentTransactionsError):
        txns.complete_transition(stale)
    assert txns.get(TID).partitions == {TP1}


# -- timeouts and expiry ------------------------------------------------------------------------


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(txns, clock):
    init(txns, timeout_ms=1000)
    add(txns, [TP0])
    clock.advance(999)
    assert txns.timed_out() == [] and txns.prepare_timeout_abort(TID) is None
    clock.advance(1)
    assert txns.timed_out() == [TID]
    transit = txns.prepare_timeout_abort(TID)
    assert transit.target.state == TransactionState.PREPARE_ABORT and transit.target.producer_epoch == 1
    durable(txns, transit)
    assert txns.timed_out() == []  # no longer Ongoing: not aborted twice
    markers = txns.markers(TID)
    assert (markers.producer_epoch, markers.result) == (1, TransactionResult.ABORT)
    durable(txns, txns.prepare_complete(TID))
    # The producer that left it open is fenced: it can neither commit nor carry on.
    with pytest.raises(ProducerFencedError):
        txns.end_txn(TID, PID, 0, True)
    with pytest.raises(ProducerFencedError):
        txns.prepare_add_partitions(TID, PID, 0, [TP0])


def test_a_timeout_counts_from_the_transactions_first_partition(txns, clock):
    init(txns, timeout_ms=1000)
    clock.advance(5000)  # idle Empty ids never time out
    assert txns.timed_out() == []
    add(txns, [TP0])
    clock.advance(800)
    add(txns, [TP1])  # more partitions do not restart the clock
    clock.advance(200)
    assert txns.timed_out() == [TID]
    # The shell passes the time it read when it decided.
    assert txns.prepare_timeout_abort(TID, now_ms=clock.wall_ms() - 1) is None


def test_idle_ids_expire_after_the_expiration_time(txns, clock):
    init(txns)
    init(txns, tid="busy", pid=PID + 1)
    add(txns, [TP0], tid="busy")
    clock.advance(EXPIRATION_MS - 1)
    assert txns.expirable() == []
    clock.advance(1)
    assert txns.expirable() == [TID]  # an open transaction keeps its id
    transit = txns.prepare_expire(TID)
    assert transit.target.state == TransactionState.DEAD
    assert transit.record == (transaction_key(TID), None)  # a tombstone
    durable(txns, transit)
    assert txns.get(TID) is None and txns.describe([TID])[0].state == TransactionState.DEAD
    assert txns.prepare_expire("busy") is None


# -- the log ------------------------------------------------------------------------------------


def test_replay_rebuilds_the_ids_and_finds_the_transactions_to_complete(txns, clock):
    records = []

    def written(transit: TxnTransit) -> None:
        records.append(transit.record)
        txns.complete_transition(transit)

    written(txns.prepare_new("a", 1, TIMEOUT_MS))
    written(txns.prepare_add_partitions("a", 1, 0, [TP0]))
    written(txns.end_txn("a", 1, 0, True).prepare)  # PrepareCommit: the markers are owed
    written(txns.prepare_new("b", 2, TIMEOUT_MS))
    written(txns.prepare_new("gone", 3, TIMEOUT_MS))
    clock.advance(EXPIRATION_MS)
    written(txns.prepare_expire("gone"))

    restarted = TransactionStateManager(ManualClock(), MAX_TIMEOUT_MS, EXPIRATION_MS)
    for key, value in records:
        restarted.replay(key, value)
    assert restarted.txns == txns.txns
    assert restarted.pending_completions() == ["a"]
    assert restarted.markers("a").result == TransactionResult.COMMIT


@pytest.mark.parametrize(
    "key, value",
    [
        (b'[1, "tid"]', b"{}"),  # an unknown key version
        (b"[0, 5]", b"{}"),
        (b"not json", b"{}"),
        (transaction_key(TID), b"[]"),
        (transaction_key(TID), b'{"producer_id": 1, "producer_epoch": 0, "timeout_ms": 1, "state": "Bogus"}'),
        (transaction_key(TID), b'{"producer_id": "1", "producer_epoch": 0, "timeout_ms": 1, "state": "Empty"}'),
    ],
)
def test_replay_refuses_a_record_it_cannot_read_and_changes_nothing(txns, key, value):
    init(txns)
    before = dict(txns.txns)
    with pytest.raises((ValueError, TypeError, KeyError)):
        txns.replay(key, value)
    assert txns.txns == before


def test_describe_lists_every_id_and_shows_unknown_ones_as_dead(txns):
    init(txns, tid="b", pid=2)
    init(txns, tid="a", pid=1)
    add(txns, [TP1, TP0], tid="a")
    assert [d.transactional_id for d in txns.describe(None)] == ["a", "b"]
    a, unknown = txns.describe(["a", "nope"])
    assert a.state == TransactionState.ONGOING and a.partitions == (TP0, TP1)
    assert (unknown.state, unknown.producer_id) == (TransactionState.DEAD, -1)
    assert txns.open_transaction_starts() == [txns.get("a").start_ms]
