"""The fetch path's shared core: read one partition from its leader, answer after answer.

Every reader of a partition's records goes through here: the Consumer (through its Fetcher,
``rayqueue/consumer/fetcher.py``), the Ray Data source (``rayqueue/data.py``) and the
coordinators replaying their internal topics (``actors/internal_topic.py``)::

    reader -> FetchCursor.request() -> FetchRequest -> PartitionReplica.fetch -> Log.read
    reader <- FetchCursor.complete(FetchResponse) -> CompletedFetch

It does no I/O. Each reader sends the request its own way (the Consumer keeps several Ray
ObjectRefs in flight and waits on them together, a Ray Data task calls ``ray.get``, a
coordinator awaits inside its actor's event loop) and hands the answer back. What they all
need the same way is here: where the next fetch starts (past the answer's last whole batch;
the first batch may begin before the position, and at least one batch comes back however
large, KIP-74), how far the partition is readable (the high watermark, or with read_committed
the last stable offset), which batches a read_committed reader may see (Kafka's client-side
abort filtering), when a read is done, and which answers mean the leader cannot serve the
position (Kafka's "failed to make progress").
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.protocol import NO_EPOCH, FetchRequest, FetchResponse, IsolationLevel
from storage.batch_header import batch_boundaries, read_header
from storage.errors import KafkaError
from storage.records.reader import committed_batches

# Empty answers in a row, from below the readable end, that a read lets pass before it gives up. A leader
# answers at once with records whenever the position is below its readable end, so an empty
# answer there only comes from a race (the end moved after the leader read); many in a row
# mean it cannot serve the position.
MAX_EMPTY_ANSWERS = 100


@dataclass(frozen=True, slots=True)
class CompletedFetch:
    """One fetch answer, read against the position it continues (Kafka's CompletedFetch).

    ``records`` are the whole batches the leader sent (``bounds``: their position and size);
    the reader wants the records from ``position`` on, which may lie inside the first batch.
    """

    position: int
    next_offset: int  # where the next fetch starts: past the last whole batch (``position`` if none)
    records: bytes
    bounds: list[tuple[int, int]]
    response: FetchResponse
    isolation_level: IsolationLevel

    @property
    def readable_end(self) -> int:
        """How far the partition was readable: the high watermark, or with read_committed
        the last stable offset."""
        if self.isolation_level is IsolationLevel.READ_COMMITTED:
            return self.response.last_stable_offset
        return self.response.high_watermark

    @property
    def first_offset(self) -> int:
        """The base offset of the first batch (``position`` when there is none)."""
        return read_header(self.records, 0).base_offset if self.bounds else self.position

    def batch_offset(self, index: int) -> int:
        """The base offset of batch ``index``."""
        return read_header(self.records, self.bounds[index][0]).base_offset

    def visible_records(self) -> bytes | memoryview:
        """The batches a reader at this isolation level may see, as consecutive batches.

        Every batch with read_uncommitted; with read_committed the batches of aborted
        transactions and the transaction markers are dropped, per batch, from the aborted
        transactions the answer lists (Kafka's Fetcher). Raises CorruptRecordError when a
        marker it has to read cannot be read.
        """
        aborted = self.response.aborted_transactions
        if self.isolation_level is IsolationLevel.READ_COMMITTED and aborted:
            return committed_batches(self.records, self.bounds, aborted)
        return self.records

    def batches(self, start: int, stop: int) -> CompletedFetch:
        """This answer cut to its batches ``[start, stop)`` (to tell which batch cannot be read)."""
        bounds = self.bounds[start:stop]
        if not bounds:
            return CompletedFetch(self.position, self.position, b"", [], self.response, self.isolation_level)
        begin, end = bounds[0][0], bounds[-1][0] + bounds[-1][1]
        records = self.records[begin:end]
        rebased = [(position - begin, size) for position, size in bounds]
        next_offset = max(self.position, read_header(records, rebased[-1][0]).next_offset)
        return CompletedFetch(self.position, next_offset, records, rebased, self.response, self.isolation_level)


class FetchCursor:
    """Where a read of one partition stands, and the FetchRequest that continues it.

    ``end_offset``: the read is done once the position reaches it, or once the partition is
    readable no further than the position (a Ray Data range resolved past what a new
    leader, or a truncated log, can serve). ``to_log_end``: the read is done once the
    position reaches the log end offset the leader reports, long-polling ``max_wait_ms``
    for the high watermark to get there after an answer that stopped short of it (a
    coordinator's replay: a newly elected leader's high watermark can lag records it already
    holds acknowledged). Neither: the read goes on for as long as the reader wants (the
    Consumer), each fetch long-polling ``max_wait_ms``.
    """

    def __init__(
        self,
        position: int,
        *,
        partition_max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        leader_epoch: int = NO_EPOCH,
        end_offset: int | None = None,
        to_log_end: bool = False,
        principal: str | None = None,
    ) -> None:
        self.position = position
        self.principal = principal  # a native consumer's, checked by the leader (None: a super user)
        self.leader_epoch = leader_epoch  # the reader sets it anew when it finds a new leader
        self.partition_max_bytes = partition_max_bytes
        self.isolation_level = IsolationLevel(isolation_level)
        self._max_wait_ms = max_wait_ms
        self._min_bytes = min_bytes
        self._end_offset = end_offset
        self._to_log_end = to_log_end
        self._catching_up = False  # to_log_end: the last answer stopped below the log end
        self._empty_answers = 0
        self.done = end_offset is not None and position >= end_offset

    def request(self, offset: int | None = None) -> FetchRequest:
        """The FetchRequest from ``offset``: the position by default (the Consumer also asks
        ahead of it)."""
        # A replay long-polls only to let the high watermark catch up: a partition it has
        # read to the end answers at once, and the replay ends.
        wait = self._max_wait_ms if not self._to_log_end or self._catching_up else 0
        return FetchRequest(
            self.position if offset is None else offset,
            self.partition_max_bytes,
            wait,
            self._min_bytes,
            self.isolation_level,
            self.leader_epoch,
            principal=self.principal,
        )

    def seek(self, position: int) -> None:
        """Read from ``position`` next."""
        self.position = position
        self._empty_answers = 0
        self.done = self._end_offset is not None and position >= self._end_offset

    def complete(self, response: FetchResponse) -> CompletedFetch:
        """Read the answer to a fetch from the position, and move the position past its batches.

        Raises KafkaError when the answer holds bytes but no whole batch, or when more than
        MAX_EMPTY_ANSWERS in a row came back empty from below the readable end: the leader
        cannot serve the position, and asking again would only repeat that.
        """
        records = response.records
        bounds = batch_boundaries(records)
        position = self.position
        if bounds:
            next_offset = max(position, read_header(records, bounds[-1][0]).next_offset)
        elif records:
            # Kafka's FetchCollector, for a broker that follows KIP-74.
            raise KafkaError(
                f"failed to make progress reading at offset {position}: a non-empty fetch answer "
                f"({len(records)} bytes) holds no complete record batch"
            )
        else:
            next_offset = position
        fetched = CompletedFetch(position, next_offset, records, bounds, response, self.isolation_level)
        readable_end = fetched.readable_end
        if bounds or readable_end <= position:
            self._empty_answers = 0
        else:
            self._empty_answers += 1
            if self._empty_answers > MAX_EMPTY_ANSWERS:
                raise KafkaError(
                    f"no records at offset {position} below the readable end {readable_end} "
                    f"in {self._empty_answers} fetches"
                )
        self.position = next_offset
        if self._to_log_end:
            self.done = next_offset >= response.log_end_offset
            self._catching_up = not self.done and not bounds
        elif self._end_offset is not None:
            self.done = next_offset >= self._end_offset or (not bounds and readable_end <= next_offset)
        return fetched


__all__ = ["MAX_EMPTY_ANSWERS", "CompletedFetch", "FetchCursor"]
