"""ProducerStateManager on its own: Kafka's sequence/epoch/transaction rules, LSO bookkeeping,
snapshots (format, CRC, fallback) and expiry."""

from __future__ import annotations

import struct

import pytest

from storage import RecordBatchBuilder, build_control_batch
from storage.batch_header import read_header
from storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.producer_state import (
    INT32_MAX,
    AppendAnalysis,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    Duplicate,
    ProducerStateEntry,
    ProducerStateManager,
    in_sequence,
    next_sequence,
    read_marker,
)

P, Q = 7, 8


def header(pid, epoch, seq, n=1, *, offset=0, txn=False, ts=1000):
    builder = RecordBatchBuilder(
        0, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn, base_offset=offset
    )
    for _ in range(n):
        builder.append(b"v", timestamp=ts)
    buf = builder.build()
    return read_header(buf), buf


def control(pid, epoch, commit, coordinator_epoch=0, *, offset=0):
    buf = bytearray(build_control_batch(commit, pid, epoch, coordinator_epoch, timestamp=1000))
    buf[0:8] = offset.to_bytes(8, "big")
    return read_header(buf), bytes(buf)


def append(psm, h_buf, origin=AppendOrigin.CLIENT):
    h, buf = h_buf
    analysis = psm.analyze([h], buf, origin)
    if isinstance(analysis, Duplicate):
        return analysis
    return psm.apply(analysis)


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(tmp_path)


def test_sequence_helpers_wrap_at_int32():
    assert next_sequence(INT32_MAX, 1) == 0 and next_sequence(INT32_MAX - 1, 3) == 1 and next_sequence(5, 2) == 7
    assert in_sequence(INT32_MAX, 0) and in_sequence(4, 5)
    assert not in_sequence(4, 6) and not in_sequence(INT32_MAX, 1)


def test_entry_keeps_the_last_five_batches_and_finds_duplicates():
    entry = ProducerStateEntry(P, 0)
    for n in range(7):
        entry.add_batch_metadata(BatchMetadata(n, n, 10 + n, 10 + n, 1000))
    assert [b.first_seq for b in entry.batches] == [2, 3, 4, 5, 6]
    assert entry.find_duplicate(0, 4, 4).first_offset == 14
    assert entry.find_duplicate(0, 1, 1) is None and entry.find_duplicate(1, 4, 4) is None
    assert entry.maybe_update_producer_epoch(1) and entry.batches == []


def test_analyze_changes_nothing_until_applied(psm):
    append(psm, header(P, 0, 0, 2, offset=0))
    h, buf = header(P, 0, 2, offset=2)
    pending = psm.analyze([h], buf, AppendOrigin.CLIENT)
    assert psm.last_entry(P).last_seq == 1  # not applied yet
    psm.apply(pending)
    assert psm.last_entry(P).last_seq == 2
    assert isinstance(psm.analyze([h], buf, AppendOrigin.CLIENT), Duplicate)


def test_rules_on_the_general_path(psm):
    append(psm, header(P, 1, 0, offset=0))
    with pytest.raises(InvalidProducerEpochError):
        psm.analyze(*_one(header(P, 0, 1, offset=1)))
    with pytest.raises(OutOfOrderSequenceError):
        psm.analyze(*_one(header(P, 2, 3, offset=1)))
    with pytest.raises(OutOfOrderSequenceError):
        psm.analyze(*_one(header(P, 1, 2, offset=1)))
    append(psm, header(P, 1, 1, txn=True, offset=1))
    assert psm.first_unstable_offset == 1 and [t.first_offset for t in psm.ongoing_txns] == [1]
    with pytest.raises(InvalidTxnStateError):
        psm.analyze(*_one(header(P, 1, 2, offset=2)))
    # Replication never refuses.
    append(psm, header(P, 0, 40, offset=2), origin=AppendOrigin.REPLICATION)
    assert psm.last_entry(P).last_seq == 40 and psm.first_unstable_offset == 1


def _one(h_buf, origin=AppendOrigin.CLIENT):
    h, buf = h_buf
    return [h], buf, origin


def test_markers_complete_transactions_and_give_the_lso(psm):
    append(psm, header(P, 0, 0, txn=True, offset=0))
    append(psm, header(Q, 0, 0, txn=True, offset=1))
    done = append(psm, control(P, 0, commit=False, coordinator_epoch=2, offset=2), origin=AppendOrigin.COORDINATOR)
    assert done == [(CompletedTxn(P, 0, 2, True), 1)]  # Q's open transaction bounds the LSO
    assert psm.first_unstable_offset == 0  # P's stays until its marker is below the HW
    psm.on_high_watermark_updated(3)
    assert psm.first_unstable_offset == 1
    with pytest.raises(TransactionCoordinatorFencedError):
        psm.analyze(*_one(control(P, 0, commit=True, coordinator_epoch=1, offset=3), AppendOrigin.COORDINATOR))
    done = append(psm, control(Q, 0, commit=True, offset=3), origin=AppendOrigin.COORDINATOR)
    assert done == [(CompletedTxn(Q, 1, 3, False), 4)]
    psm.on_high_watermark_updated(4)
    assert psm.first_unstable_offset is None
    assert read_marker(control(Q, 0, commit=True, coordinator_epoch=9)[1]) == (1, 9)


def test_a_request_with_several_producers(psm):
    a, abuf = header(P, 0, 0, 2, offset=0)
    b, bbuf = header(Q, 0, 0, offset=2, txn=True)
    buf = abuf + bbuf
    b = b._replace(position=len(abuf))
    analysis = psm.analyze([a, b], buf, AppendOrigin.CLIENT)
    assert isinstance(analysis, AppendAnalysis) and len(analysis.infos) == 2
    psm.apply(analysis)
    assert psm.last_entry(P).last_seq == 1 and psm.first_unstable_offset == 2


def test_snapshot_round_trip_and_fallback(psm, tmp_path):
    for n in range(7):
        append(psm, header(P, 3, n, offset=n))
    append(psm, header(Q, 0, 0, txn=True, offset=7))
    psm.take_snapshot(8)
    assert psm.take_snapshot(8) is None  # already there
    picture = {pid: repr(e) for pid, e in psm.producers.items()}
    other = ProducerStateManager(tmp_path)
    assert other.load_latest_snapshot(100) == 8
    assert {pid: repr(e) for pid, e in other.producers.items()} == picture
    assert len(other.last_entry(P).batches) == 5 and other.first_unstable_offset == 7
    # Version, CRC: header then body; a flipped bit in the body is caught.
    raw = (tmp_path / f"{8:020d}.snapshot").read_bytes()
    assert struct.unpack_from(">h", raw)[0] == 1
    psm.clear()
    psm.take_snapshot(3)
    bad = bytearray(raw)
    bad[-1] ^= 1
    (tmp_path / f"{8:020d}.snapshot").write_bytes(bytes(bad))
    assert other.load_latest_snapshot(100) == 3  # the corrupt one is deleted, the older one used
    assert other.snapshot_offsets() == [3] and other.is_empty
    assert other.load_latest_snapshot(2) is None


@pytest.mark.parametrize("damage", ["truncated", "version", "trailing"])
def test_damaged_snapshots_are_refused(psm, tmp_path, damage):
    append(psm, header(P, 0, 0))
    path = psm.take_snapshot(1)
    raw = path.read_bytes()
    if damage == "truncated":
        raw = raw[:-5]
    elif damage == "version":
        raw = struct.pack(">h", 9) + raw[2:]
    else:
        raw = raw + b"\x00"
    path.write_bytes(raw)
    assert ProducerStateManager(tmp_path).load_latest_snapshot(10) is None


def test_expiry_spares_open_transactions_and_applies_on_load(tmp_path):
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=100)
    append(psm, header(P, 0, 0, ts=1000))
    append(psm, header(Q, 0, 0, txn=True, ts=1000, offset=1))
    psm.take_snapshot(2)
    assert psm.remove_expired_producers(1099) == 0
    assert psm.remove_expired_producers(1100) == 1 and psm.last_entry(Q) is not None
    again = ProducerStateManager(tmp_path, producer_id_expiration_ms=100)
    again.load_latest_snapshot(2, now_ms=5000)
    assert again.last_entry(P) is None and again.last_entry(Q) is not None


def test_truncate_fully_deletes_every_snapshot(psm):
    append(psm, header(P, 0, 0))
    psm.take_snapshot(1)
    psm.take_snapshot(5)
    psm.delete_snapshots_after(3)
    assert psm.snapshot_offsets() == [1]
    psm.truncate_fully_and_start_at(10)
    assert psm.snapshot_offsets() == [] and psm.is_empty
