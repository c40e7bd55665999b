"""TransactionIndex: 34-byte entries, lazy file, collect/truncate/reset, and the segment carrying it."""

from __future__ import annotations

import struct

import pytest

from storage.abstract_index import CorruptIndexError
from storage.config import log_config
from storage.segment import LogSegment
from storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex


def test_entries_are_kafkas_34_bytes_and_reload(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0)
    assert not path.exists()  # created lazily
    assert index.entries == [] and index.last_offset is None
    index.append(AbortedTxn(7, 0, 10, 11))
    index.append(AbortedTxn(8, 5, 20, 21))
    index.flush()
    data = path.read_bytes()
    assert ENTRY_SIZE == 34 and len(data) == 68
    assert struct.unpack(">hqqqq", data[:34]) == (0, 7, 0, 10, 11)
    index.close()
    again = TransactionIndex(path, 0)
    again.sanity_check()
    assert again.entries == [AbortedTxn(7, 0, 10, 11), AbortedTxn(8, 5, 20, 21)]
    assert again.last_offset == 20


def test_append_out_of_order_is_refused(tmp_path):
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    index.append(AbortedTxn(1, 0, 10, 11))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 3, 10, 11))
    assert len(index.entries) == 1


def test_collect_abortable_txns_and_completeness(tmp_path):
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    index.append(AbortedTxn(1, 0, 10, 5))  # another txn was open at 5 when this aborted
    index.append(AbortedTxn(2, 5, 20, 21))
    index.append(AbortedTxn(3, 30, 40, 41))
    found, complete = index.collect_abortable_txns(11, 25)
    assert found == [AbortedTxn(2, 5, 20, 21)] and complete  # entry 3 (LSO 41) ends the search
    found, complete = index.collect_abortable_txns(0, 8)
    assert [t.producer_id for t in found] == [1, 2] and complete  # entry 2's LSO 21 >= 8
    found, complete = index.collect_abortable_txns(41, 100)
    assert found == [] and not complete


def test_truncate_reset_rename_delete(tmp_path):
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(path, 100)
    for n in range(5):
        index.append(AbortedTxn(n, 100 + 10 * n, 105 + 10 * n, 106 + 10 * n))
    index.truncate_to(125)  # markers at 125 and later go
    assert [t.last_offset for t in index.entries] == [105, 115]
    assert path.stat().st_size == 2 * ENTRY_SIZE
    moved = tmp_path / "00000000000000000100.txnindex.deleted"
    index.rename_to(moved)
    assert moved.exists() and not path.exists()
    index.append(AbortedTxn(9, 120, 130, 131))  # the open handle follows the rename
    assert TransactionIndex(moved, 100).entries[-1] == AbortedTxn(9, 120, 130, 131)
    index.reset()
    assert index.entries == [] and moved.stat().st_size == 0
    index.delete()
    assert not moved.exists()


@pytest.mark.parametrize(
    "garbage",
    [b"\x00" * 10, struct.pack(">hqqqq", 1, 1, 0, 10, 11), struct.pack(">hqqqq", 0, 1, 0, 10, 11) * 2],
    ids=["torn", "unknown-version", "not-increasing"],
)
def test_sanity_check_catches_corruption(tmp_path, garbage):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(garbage)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 0).sanity_check()


def test_segment_carries_the_index_through_rename_and_delete(tmp_path):
    config = log_config()
    segment = LogSegment(tmp_path, 0, config, created_ms=0)
    assert not segment.txn_index.path.exists()
    segment.update_txn_index(AbortedTxn(4, 0, 3, 4))
    assert segment.txn_index.path.exists()
    assert segment.collect_aborted_txns(0, 10).aborted == [AbortedTxn(4, 0, 3, 4)]
    assert segment.txn_index.path in segment.paths()
    segment.change_file_suffixes("", ".swap")
    assert segment.txn_index.path.name == "00000000000000000000.txnindex.swap"
    assert segment.txn_index.path.exists()
    segment.change_file_suffixes(".swap", "")
    renamed = segment.rename_to_deleted()
    assert tmp_path / "00000000000000000000.txnindex.deleted" in renamed
    segment.delete()
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_index_makes_the_segment_recover(tmp_path):
    config = log_config()
    segment = LogSegment(tmp_path, 0, config, created_ms=0)
    segment.update_txn_index(AbortedTxn(4, 0, 3, 4))
    segment.close()
    with open(segment.txn_index.path, "ab") as file:
        file.write(b"\x01\x02")
    again = LogSegment(tmp_path, 0, config, created_ms=0, active=False)
    assert again.needs_recovery
    again.close()
