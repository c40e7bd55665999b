"""KIP-890 at the log (issue 39, item 3): a transactional batch that would open a transaction
is appended only after the coordinator confirmed it (``verify``); the transaction's later
batches need no confirmation; a marker makes a pending confirmation stale; what a forged
batch leaves behind is bounded."""

from __future__ import annotations

import pytest

from storage import Log, RecordBatchBuilder, build_control_batch
from storage.errors import InvalidTxnStateError
from storage.producer_state import MAX_VERIFICATIONS, ProducerStateManager, VerificationRequired

P, Q = 1000, 2000


def data(pid: int, epoch: int, seq: int, *, txn: bool = True) -> bytes:
    builder = RecordBatchBuilder(0, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)
    builder.append(b"v", key=b"k", timestamp=1000)
    return bytes(builder.build())


def marker(pid: int, epoch: int, commit: bool) -> bytes:
    return build_control_batch(commit, pid, epoch, 0, timestamp=1000)


@pytest.fixture
def log(tmp_path):
    with Log(tmp_path / "t-0", {}) as opened:
        yield opened


def confirm(log: Log, records: bytes) -> VerificationRequired:
    """The first append: refused with a guard, which is then confirmed."""
    with pytest.raises(VerificationRequired) as raised:
        log.append(records, verify=True)
    assert log.verified(raised.value.guard)
    return raised.value


def test_a_transactions_first_batch_waits_for_the_coordinator_and_later_ones_do_not(log):
    with pytest.raises(VerificationRequired) as raised:
        log.append(data(P, 0, 0), verify=True)
    needed = raised.value
    assert (needed.producer_id, needed.producer_epoch) == (P, 0)
    assert log.log_end_offset == 0 and log.first_unstable_offset is None  # nothing written, nothing open
    assert log.verified(needed.guard)
    assert log.append(data(P, 0, 0), verify=True).first_offset == 0
    assert log.append(data(P, 0, 1), verify=True).first_offset == 1  # open here: no confirmation
    assert log.first_unstable_offset == 0
    log.append(marker(P, 0, True), origin="coordinator")
    with pytest.raises(VerificationRequired):  # the next transaction verifies again
        log.append(data(P, 0, 2), verify=True)


def test_non_transactional_batches_and_appends_without_verify_are_not_verified(log):
    log.append(data(P, 0, 0, txn=False), verify=True)
    log.append(data(Q, 0, 0))  # verify off: a follower's, a test's, a broker with it disabled
    assert log.first_unstable_offset == 1


def test_a_marker_between_the_confirmation_and_the_append_makes_it_stale(log):
    with pytest.raises(VerificationRequired) as raised:
        log.append(data(P, 0, 0), verify=True)
    log.append(marker(P, 0, False), origin="coordinator")  # the coordinator aborted meanwhile
    assert not log.verified(raised.value.guard)
    with pytest.raises(VerificationRequired):
        log.append(data(P, 0, 0), verify=True)
    assert log.first_unstable_offset is None


def test_a_confirmation_is_for_its_epoch_only(log):
    confirm(log, data(P, 0, 0))
    with pytest.raises(InvalidTxnStateError, match="epoch 1 was not verified"):
        log.append(data(P, 1, 0), verify=True)
    assert log.log_end_offset == 0


def test_a_refused_verification_is_forgotten_and_what_forgeries_leave_is_bounded(tmp_path):
    state = ProducerStateManager(tmp_path)
    guard = state.verification(P, 0, 0)
    state.forget_verification(guard)
    assert not state.verified(guard)
    for pid in range(MAX_VERIFICATIONS + 50):
        state.verification(pid, 0, 0)
    assert len(state._verifications) == MAX_VERIFICATIONS
    assert state.remove_expired_producers(state.producer_id_expiration_ms) == 0
    assert state._verifications == {}  # unconfirmed ones expire with idle producers
