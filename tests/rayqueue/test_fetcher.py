"""The client's Fetcher as the Ray Data source uses it (``data.read_range``), against a fake
leader that answers from prepared batches: the range comes out exactly, nothing is fetched
past its end, aborted transactions are dropped, and a batch that cannot be read ends the read
with CorruptRecordError after the records before it."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from actors.protocol import IsolationLevel
from rayqueue import data
from rayqueue.errors import CorruptRecordError
from storage import batch_header as bh
from tests.rayqueue.test_consumer_read_committed import FakeLeader, Log, interleaved_log

TOPIC = "t"


def uneven_log(end: int) -> Log:
    log = Log()
    sizes = itertools.cycle([1, 7, 2, 30, 3, 11, 5])
    while log.next_offset < end:
        log.data([b"%05d" % (log.next_offset + i) for i in range(next(sizes))])
    return log


def read(log: Log, start: int, end: int, **options) -> tuple[list[int], FakeLeader]:
    leader = FakeLeader(log)
    r = data.OffsetRange(TOPIC, 0, start, end)
    # With the leader given, the read needs no controller (none is there to ask).
    tables = list(data.read_range(None, r, leader=(leader, 0), **options))
    offsets = pa.concat_tables(tables).column("offset").to_pylist() if tables else []
    return offsets, leader


def test_a_range_starting_and_ending_inside_batches_comes_out_exactly(ray_session):
    offsets, leader = read(uneven_log(3000), 17, 2500, fetch_max_bytes=700, target_block_bytes=4000)
    assert offsets == list(range(17, 2500))
    assert leader.isolation_levels == {IsolationLevel.READ_UNCOMMITTED}


def test_fetches_stay_below_the_end_offset(ray_session):
    log = Log()
    for _ in range(300):
        log.data([b"x" * 20] * 10)
    leader = FakeLeader(log)
    starts: list[int] = []
    fetch = leader.fetch.remote

    def counting(request):
        starts.append(request.fetch_offset)
        return fetch(request)

    leader.fetch.remote = counting
    r = data.OffsetRange(TOPIC, 0, 0, 1000)
    tables = list(data.read_range(None, r, leader=(leader, 0), fetch_max_bytes=2000))
    assert pa.concat_tables(tables).column("offset").to_pylist() == list(range(1000))
    # Each range fetched once, in order, and never from the end offset on.
    assert starts == sorted(set(starts)) and max(starts) < 1000


def test_read_committed_drops_aborted_transactions(ray_session):
    log, visible, everything = interleaved_log()
    committed, leader = read(log, 0, log.next_offset, isolation_level=IsolationLevel.READ_COMMITTED)
    assert committed == visible
    assert leader.isolation_levels == {IsolationLevel.READ_COMMITTED}
    assert read(log, 0, log.next_offset)[0] == everything


def test_a_batch_that_cannot_be_read_ends_the_read_after_the_records_before_it(ray_session):
    log = Log()
    for i in range(3):
        log.data([b"%d-%d" % (i, j) for j in range(4)])  # offsets 0-3, 4-7, 8-11
    damaged = bytearray(log.batches[1])
    damaged[bh.HEADER_SIZE] ^= 0xFF  # a record byte: the CRC no longer matches
    log.batches[1] = bytes(damaged)
    r = data.OffsetRange(TOPIC, 0, 0, 12)
    got: list[int] = []
    with pytest.raises(CorruptRecordError, match="offset 4"):
        # One batch per fetch, and one block per fetch: what precedes the damage comes out first.
        for table in data.read_range(None, r, leader=(FakeLeader(log), 0), fetch_max_bytes=1, target_block_bytes=1):
            got += table.column("offset").to_pylist()
    assert got == [0, 1, 2, 3]
