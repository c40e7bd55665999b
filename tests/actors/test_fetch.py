"""actors.fetch, the fetch path's shared core, against a fake replica (no Ray): it follows batches
across answers, handles empty answers and stops where each kind of reader stops, filters aborted
transactions for read_committed, and raises Kafka's "failed to make progress" error."""

from __future__ import annotations

import pytest

from actors.fetch import MAX_EMPTY_ANSWERS, FetchCursor
from actors.protocol import AbortedTransaction, FetchRequest, FetchResponse, IsolationLevel
from storage.batch_header import batch_boundaries, read_header
from storage.errors import KafkaError
from storage.records.builder import RecordBatchBuilder
from storage.records.columns import decode_columns
from storage.records.control import build_control_batch


def batch(base_offset: int, count: int, producer_id: int = -1, txn: bool = False) -> bytes:
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=txn,
    )
    for i in range(count):
        builder.append(b"v%d" % (base_offset + i), timestamp=1_700_000_000_000)
    return builder.build()


class FakeReplica:
    """A leader's log of ``batches``, answering FetchRequests as PartitionReplica.fetch does:
    whole batches from the one holding the offset, at least one, up to the max bytes, none at or
    past the high watermark. ``hw_steps`` raise the high watermark each time a fetch waits."""

    def __init__(self, batches: list[bytes], hw: int | None = None, hw_steps: list[int] = ()) -> None:
        self.batches = batches
        self.log_end = read_header(batches[-1]).next_offset if batches else 0
        self.hw = self.log_end if hw is None else hw
        self.hw_steps = list(hw_steps)
        self.lso: int | None = None
        self.aborted: tuple[AbortedTransaction, ...] = ()
        self.requests: list[FetchRequest] = []

    def fetch(self, request: FetchRequest) -> FetchResponse:
        self.requests.append(request)
        offset = request.fetch_offset
        if offset >= self.hw and request.max_wait_ms > 0 and self.hw_steps:
            self.hw = self.hw_steps.pop(0)  # the followers caught up while it waited
        limit = self.hw if self.lso is None else self.lso
        out: list[bytes] = []
        for data in self.batches:
            header = read_header(data)
            if header.next_offset <= offset or header.base_offset >= limit:
                continue
            if out and sum(map(len, out)) + len(data) > request.partition_max_bytes:
                break
            out.append(data)
        lso = self.hw if self.lso is None else self.lso
        return FetchResponse(b"".join(out), self.hw, lso, 0, self.log_end, 3, self.aborted)


def read_all(replica: FakeReplica, cursor: FetchCursor, limit: int = 1000) -> list[int]:
    """Offsets handed out by following the cursor until it is done."""
    offsets: list[int] = []
    for _ in range(limit):
        if cursor.done:
            return offsets
        fetched = cursor.complete(replica.fetch(cursor.request()))
        offsets += decode_columns(fetched.visible_records(), min_offset=fetched.position).offset.tolist()
    raise AssertionError("the cursor never finished")


SIZES = [3, 1, 5, 2, 4]


def log_of(sizes: list[int]) -> list[bytes]:
    out, offset = [], 0
    for size in sizes:
        out.append(batch(offset, size))
        offset += size
    return out


def test_follows_batches_across_answers_to_the_end_offset_and_never_past_it():
    replica = FakeReplica(log_of(SIZES))
    one_batch = len(replica.batches[0])
    cursor = FetchCursor(0, partition_max_bytes=one_batch, max_wait_ms=0, leader_epoch=3, end_offset=8)
    assert read_all(replica, cursor) == list(range(9))  # whole batches: the reader cuts at 8
    starts = [r.fetch_offset for r in replica.requests]
    assert starts == [0, 3, 4]  # each fetch starts where the previous answer's last batch ended
    assert cursor.position == 9 and cursor.done
    assert {(r.current_leader_epoch, r.partition_max_bytes, r.max_wait_ms) for r in replica.requests} == {
        (3, one_batch, 0)
    }


def test_a_position_inside_a_batch_keeps_only_what_follows_it():
    replica = FakeReplica(log_of(SIZES))
    cursor = FetchCursor(5, end_offset=15)
    fetched = cursor.complete(replica.fetch(cursor.request()))
    assert (fetched.position, fetched.first_offset, fetched.next_offset) == (5, 4, 15)
    assert read_header(fetched.records).base_offset == 4
    assert decode_columns(fetched.visible_records(), min_offset=5).offset.tolist() == list(range(5, 15))
    assert cursor.done


def test_an_empty_answer_at_the_readable_end():
    replica = FakeReplica(log_of([2, 2]), hw=4)
    # An open read (the Consumer's): nothing new yet, the position stays and it goes on.
    cursor = FetchCursor(4)
    fetched = cursor.complete(replica.fetch(cursor.request()))
    assert fetched.records == b"" and fetched.bounds == [] and fetched.next_offset == 4
    assert cursor.position == 4 and not cursor.done
    # A range resolved past what the partition serves (a new leader, a truncated log) ends there.
    ranged = FetchCursor(2, end_offset=10)
    assert read_all(replica, ranged) == [2, 3]
    assert ranged.done and ranged.position == 4


def test_empty_answers_below_the_readable_end_are_retried_then_raise():
    replica = FakeReplica(log_of([2, 2]))
    silent = FetchResponse(b"", 4, 4, 0, 4, 0)
    cursor = FetchCursor(0, partition_max_bytes=1, end_offset=4)
    for _ in range(MAX_EMPTY_ANSWERS):  # a race with a write: asked again, from the same place
        assert cursor.complete(silent).next_offset == 0
    assert not cursor.done
    cursor.complete(replica.fetch(cursor.request()))  # progress resets the count
    for _ in range(MAX_EMPTY_ANSWERS):
        cursor.complete(silent)
    with pytest.raises(KafkaError, match="no records at offset 2 below the readable end 4"):
        cursor.complete(silent)


def test_bytes_without_a_whole_batch_fail_to_make_progress():
    whole = batch(0, 3)
    cursor = FetchCursor(0)
    with pytest.raises(KafkaError, match="failed to make progress reading at offset 0") as raised:
        cursor.complete(FetchResponse(whole[:-1], 3, 3, 0, 3, 0))
    assert type(raised.value) is KafkaError and cursor.position == 0
    # A partial batch after whole ones is a read cut at the max bytes: left for the next fetch.
    fetched = cursor.complete(FetchResponse(whole + batch(3, 2)[:20], 5, 5, 0, 5, 0))
    assert fetched.bounds == [(0, len(whole))] and cursor.position == 3


def test_to_the_log_end_long_polls_only_while_the_high_watermark_lags():
    # A new leader: its log holds offsets 0-9, its high watermark is still at 4.
    replica = FakeReplica(log_of([2, 2, 3, 3]), hw=4, hw_steps=[7, 10])
    cursor = FetchCursor(0, max_wait_ms=500, to_log_end=True)
    assert read_all(replica, cursor) == list(range(10))
    assert [(r.fetch_offset, r.max_wait_ms) for r in replica.requests] == [(0, 0), (4, 0), (4, 500), (7, 0), (7, 500)]
    # A partition read to its end (or empty) ends after one fetch that does not wait.
    empty = FakeReplica([])
    assert read_all(empty, FetchCursor(0, max_wait_ms=500, to_log_end=True)) == []
    assert [r.max_wait_ms for r in empty.requests] == [0]


def test_read_committed_stops_at_the_last_stable_offset_and_drops_aborted_batches():
    batches = [
        batch(0, 2, producer_id=1, txn=True),  # aborted
        batch(2, 1),
        build_control_batch(False, 1, 0, 0, timestamp=0, base_offset=3),  # ABORT of producer 1
        batch(4, 2, producer_id=2, txn=True),  # still open: past the LSO
    ]
    replica = FakeReplica(batches)
    replica.lso, replica.aborted = 4, (AbortedTransaction(1, 0),)
    cursor = FetchCursor(0, isolation_level=IsolationLevel.READ_COMMITTED, end_offset=6)
    fetched = cursor.complete(replica.fetch(cursor.request()))
    assert fetched.readable_end == 4 and fetched.next_offset == 4
    assert decode_columns(fetched.visible_records()).offset.tolist() == [2]
    assert cursor.request().isolation_level is IsolationLevel.READ_COMMITTED
    # read_uncommitted sees the aborted records too (the decoder skips only the marker).
    plain = FetchCursor(0, end_offset=6)
    assert decode_columns(plain.complete(replica.fetch(plain.request())).visible_records()).offset.tolist() == [0, 1, 2]


def test_batches_cuts_an_answer_to_some_of_its_batches():
    replica = FakeReplica(log_of(SIZES))
    cursor = FetchCursor(1)
    fetched = cursor.complete(replica.fetch(cursor.request()))
    middle = fetched.batches(1, 3)
    assert [size for _, size in middle.bounds] == [size for _, size in fetched.bounds[1:3]]
    assert batch_boundaries(middle.records) == middle.bounds
    assert (middle.position, middle.first_offset, middle.next_offset) == (1, 3, 9)
    assert fetched.batch_offset(2) == 4
    none = fetched.batches(0, 0)
    assert none.records == b"" and none.next_offset == 1
