"""The client's Fetcher: fetches assigned partitions from their leaders, ahead of the reader.

The Consumer hands out records through it, and a Ray Data read task reads its range through
it (``rayqueue/data.py``). Each answer goes through the shared core, ``actors/fetch.py``
(where the next fetch starts, how far the partition is readable, which batches read_committed
may see); around it the Fetcher keeps positions moving, fetches ahead, decodes, and turns
errors into retries, resets or errors raised to the reader (Kafka's Fetcher and
FetchCollector)::

    Consumer.poll / iteration -> Fetcher -> FetchCursor.request() -> FetchRequest
        -> PartitionReplica.fetch -> Log.read -> FetchResponse -> FetchCursor.complete()
        -> CompletedFetch -> decoded chunk -> records handed out, position moved

Fetches go to the leaders' hosts as Kafka's fetcher sends them to brokers: every partition
that wants a fetch in a round goes in one ``fetch_messages`` call to its leader's host (one
long poll for all of them), and a partition reading a backlog keeps more than one fetch under
way (pipelined calls, the later ones at predicted offsets), so the next answers are already
coming while the application works through the previous one. Fetched batches are decoded on the client (the
broker hands out the stored bytes as they are) into columns; the records themselves are
built one at a time, in C, as the application takes them (``_Chunk``). A Ray Data read
decodes into Arrow tables instead (its own ``decode``).

With ``isolation.level=read_committed`` the batches of aborted transactions are dropped as
Kafka's Fetcher does, from the aborted transactions each fetch answer lists (per batch, never
per record). Control batches (transaction markers) are never handed out, in either level;
positions move past them and past dropped batches.

A batch that cannot be read (its CRC fails, or its records do not parse) stops its partition
as in Kafka's Fetcher: the records before it are handed out, then every poll raises
CorruptRecordError naming its offset, with the position on it, until the application seeks
elsewhere. Other partitions go on.
"""

from __future__ import annotations

import collections
import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from operator import length_hint
from typing import Any, NamedTuple

import ray

from actors.fetch import CompletedFetch, FetchCursor
from actors.protocol import IsolationLevel, ListOffsetsRequest
from actors.protocol_broker import FetchMessagesRequest, FetchPartition
from actors.types import OffsetAndTimestamp, TopicPartition
from rayqueue.consumer.subscription_state import SubscriptionState, TopicPartitionState
from rayqueue.errors import as_kafka_error
from rayqueue.metadata import MetadataCache
from rayqueue.metrics import ClientMetrics
from storage.errors import CorruptRecordError, KafkaError, OffsetOutOfRangeError
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from storage.records.columns import RecordRows, decode_rows, iter_rows

logger = logging.getLogger(__name__)


class ConsumerRecord(NamedTuple):
    """One record as the application sees it (Kafka's ConsumerRecord).

    A named tuple rather than a dataclass: the consumer creates millions per second and
    tuple creation is several times cheaper; it is just as immutable.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int


# Fetches per partition, answers buffered plus under way (bounds the client's memory), and
# how many of them may be under way at once by default (the later ones at predicted offsets).
_MAX_FETCHES = 4
_MAX_IN_FLIGHT = 3

# Building more records than this into one list pauses the cyclic GC (see _Chunk.take).
_GC_PAUSE_MIN = 1000


class _Chunk:
    """The decoded records of one fetch answer, built one by one as they are taken.

    The fetch is decoded into row columns over its bytes (``decode_rows``: one pass in C
    per fetch); ``records`` builds each ConsumerRecord from them in C at the moment the
    application takes it (``iter_rows``): its offset from ``offsets``, its key and value
    copied out of the fetched bytes. Iterating the consumer therefore costs one C-level
    step per record and leaves the cyclic GC nothing to scan (records taken and dropped one
    at a time keep its allocation count flat); a whole fetch's worth of young tuples built
    at once made the GC rescan them on every collection.

    ``cursor`` counts the records left (its ``length_hint``), so the exact position is known
    at any moment; clearing ``offsets`` stops the chunk (seek, revocation) even while the
    application iterates it.
    """

    __slots__ = ("offsets", "rows", "start", "keys", "values", "cursor", "records", "end_offset", "_meta")

    def __init__(
        self,
        tp: TopicPartition,
        leader_epoch: int,
        rows: RecordRows | None,
        start: int,
        offsets: list[int],
        keys: list[Any] | None,
        values: list[Any] | None,
        end_offset: int,
    ) -> None:
        self.offsets = offsets
        self.rows = rows
        self.start = start  # the row of rows that offsets[0] is
        self.keys = keys  # deserialized, aligned with offsets (None: the raw bytes)
        self.values = values
        self.end_offset = end_offset  # the position once every record is taken
        self._meta = (tp, leader_epoch)
        if rows is None:
            self.records, self.cursor = iter(()), iter(())
        else:
            self.records, self.cursor = iter_rows(
                rows, ConsumerRecord, (tp.topic, tp.partition), (leader_epoch,), offsets, start, keys, values
            )

    def remaining(self) -> int:
        """Records not taken yet."""
        return length_hint(self.cursor)

    def next_offset(self) -> int:
        """The offset of the next record to take (past the chunk when all are taken)."""
        left = length_hint(self.cursor)
        return self.offsets[-left] if left else self.end_offset

    def take(self, count: int) -> list[ConsumerRecord]:
        """The next ``count`` records as a list."""
        if count < _GC_PAUSE_MIN:
            return list(islice(self.records, count))
        # The cyclic GC would rescan every young tuple several times while a fetch's worth
        # of records is built into a list (measured: 1M/s with it, 6M/s without); records
        # hold no cycles, so pause it for this one loop.
        paused = gc.isenabled()
        gc.disable()
        try:
            return list(islice(self.records, count))
        finally:
            if paused:
                gc.enable()

    def stop(self) -> None:
        """Hand out nothing more (an iteration under way ends this chunk at once)."""
        self.offsets.clear()

    def rest(self) -> _Chunk:
        """A new chunk of the records not taken yet; this one stops."""
        left = length_hint(self.cursor)
        i = len(self.offsets) - left
        keys = None if self.keys is None else self.keys[i:]
        values = None if self.values is None else self.values[i:]
        rest = _Chunk(*self._meta, self.rows, self.start + i, self.offsets[i:], keys, values, self.end_offset)
        self.stop()
        return rest


class RecordDecoder:
    """Decodes fetched batches into chunks of ConsumerRecords (the Consumer's decoder).

    One pass in C per fetch finds every record's fields; the only per-record work is
    building the ConsumerRecord when the application takes it (and the user's
    deserializers, if any, applied to the whole fetch).
    """

    def __init__(
        self,
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        check_crcs: bool = True,
    ) -> None:
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._check_crcs = check_crcs

    def __call__(self, tp: TopicPartition, fetched: CompletedFetch, end_offset: int) -> _Chunk:
        """The records ``fetched`` holds from its position on, as a chunk whose position ends
        at ``end_offset``; CorruptRecordError when a batch cannot be read."""
        data = fetched.visible_records()
        leader_epoch = fetched.response.leader_epoch
        rows = decode_rows(data, check_crc=self._check_crcs, min_offset=fetched.position)
        if len(rows) == 0:
            return _Chunk(tp, leader_epoch, None, 0, [], None, None, end_offset)
        keys = values = None
        if self._key_deserializer is not None:
            deserialize = self._key_deserializer
            keys = [None if k is None else deserialize(k) for k in rows.keys()]
        if self._value_deserializer is not None:
            deserialize = self._value_deserializer
            values = [None if v is None else deserialize(v) for v in rows.values()]
        return _Chunk(tp, leader_epoch, rows, 0, rows.offset.tolist(), keys, values, end_offset)


Decoder = Callable[[TopicPartition, CompletedFetch, int], Any]
"""``decode(tp, fetched, end_offset)``: a chunk of what ``fetched`` holds from its position on,
with an ``end_offset`` attribute (the position once it is handed out); raises
CorruptRecordError when a batch cannot be read."""


class _Call:
    """One ``fetch_messages`` call to a leader host: its ObjectRef, how many partitions still
    wait on it, and its answers once read (one per partition, in order)."""

    __slots__ = ("ref", "waiting", "_answers")

    def __init__(self, ref: Any, partitions: int) -> None:
        self.ref = ref
        self.waiting = partitions
        self._answers: list[Any] | BaseException | None = None

    def answer(self, index: int) -> Any:
        """Partition ``index``'s answer (a FetchResponse or its error); the call's own error
        (its host died, ...) is every partition's."""
        if self._answers is None:
            try:
                answers = ray.get(self.ref)
                if type(answers) is not list:
                    raise KafkaError(f"a fetch_messages call answered {answers!r:.80}")
                self._answers = answers
            except Exception as exc:  # noqa: BLE001 - every partition's error
                self._answers = exc
        if isinstance(self._answers, BaseException):
            return self._answers
        return self._answers[index]

    def release(self) -> bool:
        """One partition is done with this call; True when none waits on it any more."""
        self.waiting -= 1
        return self.waiting <= 0


@dataclass
class _PartitionFetch:
    """The Fetcher's side of one assigned partition, for one seek generation of it."""

    state: TopicPartitionState  # the assignment entry it serves: another one means reassigned
    generation: int  # the entry's seek_generation when this was made: another one means seeked
    cursor: FetchCursor
    buffer: collections.deque = field(default_factory=collections.deque)  # chunks not handed out yet
    active: _Chunk | None = None  # the chunk an iteration is handing out
    # Fetches under way, oldest first: (call, index in it, requested offset, monotonic time sent).
    in_flight: collections.deque = field(default_factory=collections.deque)
    stride: int = 0  # offsets a full answer spanned last time (0: the last answer was not full)
    readable_end: int = -1  # the HW (read_committed: the LSO) the last answer reported
    retry_at: float = 0.0
    failing_since: float | None = None  # the first of the retriable errors in a row
    error: KafkaError | None = None
    # A batch that cannot be read at the position: raised by every poll until a seek.
    corrupt: CorruptRecordError | None = None


class Fetcher:
    """Fetches the assigned partitions of ``subscriptions`` ahead of the reader and hands out
    what it fetched, moving their positions (Kafka's Fetcher).

    ``config`` is a parsed consumer config (the fetch.*, isolation.level, check.crcs,
    retry.backoff.ms, default.api.timeout.ms and deserializer keys are read). ``decode``
    replaces the record decoder (the Ray Data source decodes into Arrow tables; it takes
    chunks with :meth:`take_fetched`). ``end_offsets`` stops fetching a partition there.
    ``retry_timeout_s`` turns retriable errors that last that long into the partition's
    error (by default they are retried for as long as the reader goes on, as Kafka's
    consumer does). ``max_in_flight``: fetches of a partition under way at once; a second
    one pays off where the reader's work per answer outweighs the leader's (building Python
    records), not where both compete for the same cores (decoding into Arrow: one is faster).
    ``metrics`` (the Consumer's) is told of each fetch answer: its records, bytes, latency
    and the lag it leaves.
    """

    def __init__(
        self,
        subscriptions: SubscriptionState,
        metadata: MetadataCache,
        config: Mapping[str, Any],
        *,
        decode: Decoder | None = None,
        end_offsets: Mapping[TopicPartition, int] | None = None,
        retry_timeout_s: float | None = None,
        max_in_flight: int = _MAX_IN_FLIGHT,
        metrics: ClientMetrics | None = None,
    ) -> None:
        self._metrics = metrics
        self.principal: str | None = None  # the consumer's, sent with each fetch (None: a super user)
        self._subscriptions = subscriptions
        self._metadata = metadata
        self._fetches: dict[TopicPartition, _PartitionFetch] = {}
        self._abandoned: list[Any] = []  # refs of dropped fetches, read once they finish
        self._max_bytes = config["max.partition.fetch.bytes"]
        self._fetch_max_bytes = config["fetch.max.bytes"]
        self._rotation = 0  # where the next round's partition order starts (see send_fetches)
        self._max_wait_ms = config["fetch.max.wait.ms"]
        self._min_bytes = config["fetch.min.bytes"]
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if config["isolation.level"] == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        self._backoff = config["retry.backoff.ms"] / 1000
        self._timeout = config["default.api.timeout.ms"] / 1000
        self._decode: Decoder = decode or RecordDecoder(
            config["key.deserializer"], config["value.deserializer"], config["check.crcs"]
        )
        self._end_offsets = dict(end_offsets or {})
        self._retry_timeout = retry_timeout_s
        self._max_in_flight = max_in_flight

    # -- the partitions' fetch states -----------------------------------------------------

    def _fetch(self, tp: TopicPartition, state: TopicPartitionState) -> _PartitionFetch | None:
        """The partition's fetch state, made anew (and the old one dropped) after a seek or a
        reassignment; None while the partition has no position."""
        fetch = self._fetches.get(tp)
        if fetch is not None and fetch.state is state and fetch.generation == state.seek_generation:
            return fetch
        if fetch is not None:
            self._discard(self._fetches.pop(tp))
        if state.position is None:
            return None
        cursor = FetchCursor(
            state.position,
            partition_max_bytes=self._max_bytes,
            max_wait_ms=self._max_wait_ms,
            min_bytes=self._min_bytes,
            isolation_level=self._isolation,
            end_offset=self._end_offsets.get(tp),
            principal=self.principal,
        )
        fetch = self._fetches[tp] = _PartitionFetch(state, state.seek_generation, cursor)
        return fetch

    def drop_unassigned(self) -> None:
        """Drop what was fetched for partitions no longer assigned (or assigned anew)."""
        assignment = self._subscriptions.assignment
        for tp in [tp for tp, fetch in self._fetches.items() if assignment.get(tp) is not fetch.state]:
            self._discard(self._fetches.pop(tp))

    def _fetchable(self) -> Iterator[tuple[TopicPartition, TopicPartitionState, _PartitionFetch]]:
        """The assigned partitions with a position, with their fetch states (made anew where
        needed, and those of partitions no longer assigned dropped first)."""
        self.drop_unassigned()
        for tp, state in list(self._subscriptions.assignment.items()):
            fetch = self._fetch(tp, state)
            if fetch is not None:
                yield tp, state, fetch

    def discard_fetched(self, tp: TopicPartition) -> None:
        """Drop what was fetched for ``tp`` now (after a seek, or when it is unassigned): an
        iteration under way stops handing it out at the next record."""
        fetch = self._fetches.pop(tp, None)
        if fetch is not None:
            self._discard(fetch)

    def _discard(self, fetch: _PartitionFetch) -> None:
        if fetch.active is not None:
            fetch.active.stop()
            fetch.active = None
        fetch.buffer.clear()
        self._abandon(fetch)

    def _abandon(self, fetch: _PartitionFetch) -> None:
        """Drop a partition's fetches in flight: cancel them, and keep their refs until reaped.

        Ray logs an "unhandled error" for every ref whose error nobody read, and a dropped
        long-poll often ends in one (NotLeader after a topic is deleted, the cancellation).
        """
        while fetch.in_flight:
            call = fetch.in_flight.popleft()[0]
            if call.release():  # no other partition waits on it
                ray.cancel(call.ref)
                self._abandoned.append(call.ref)

    def _reap_abandoned(self, wait_s: float = 0.0) -> None:
        if not self._abandoned:
            return
        done, pending = ray.wait(self._abandoned, num_returns=len(self._abandoned), timeout=wait_s)
        for ref in done:
            try:
                ray.get(ref)
            except Exception:  # noqa: BLE001 - the result was dropped on purpose
                pass
        self._abandoned = pending

    def fetches_in_flight(self, tp: TopicPartition) -> int:
        """How many fetches of ``tp`` are under way."""
        fetch = self._fetches.get(tp)
        return len(fetch.in_flight) if fetch is not None else 0

    def close(self) -> None:
        """Drop everything fetched and in flight (waiting briefly for the dropped calls)."""
        for fetch in self._fetches.values():
            self._discard(fetch)
        self._fetches.clear()
        self._reap_abandoned(wait_s=2.0)

    # -- positions ------------------------------------------------------------------------

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record to hand out: inside the chunk an iteration is taking."""
        state = self._subscriptions.state(tp)
        fetch = self._fetches.get(tp)
        if fetch is not None and fetch.state is state:
            active = fetch.active
            if active is not None and length_hint(active.cursor):
                return active.next_offset()
        return state.position

    def positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The positions of those of ``partitions`` that are assigned and have one."""
        assignment = self._subscriptions.assignment
        out = {}
        for tp in partitions:
            if tp in assignment:
                position = self.position(tp)
                if position is not None:
                    out[tp] = position
        return out

    def reclaim(self, tp: TopicPartition) -> None:
        """Put the records an iteration has not taken back at the head of the buffer (a
        paused partition, a loop the application left)."""
        fetch = self._fetches.get(tp)
        if fetch is None or fetch.active is None:
            return
        active, fetch.active = fetch.active, None
        if active.remaining():
            rest = active.rest()
            fetch.buffer.appendleft(rest)
            fetch.state.position = rest.offsets[0]

    def reclaim_all(self) -> None:
        """:meth:`reclaim` every partition: positions are exact afterwards."""
        for tp in list(self._fetches):
            self.reclaim(tp)

    def list_offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp]:
        """ListOffsets on each partition's leader: -2 earliest, -1 latest, or a timestamp."""
        isolation = self._isolation  # read_committed: "latest" is the last stable offset (Kafka's ListOffsets)
        calls = {
            tp: lambda m, ts=ts: m.leader_handle.list_offsets.remote(
                ListOffsetsRequest(ts, m.leader_epoch, isolation, self.principal)
            )
            for tp, ts in specs.items()
        }
        return self._metadata.call_leaders(calls, self._timeout, self._backoff)

    def reset_positions(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Give the partitions without a position one, by ``auto.offset.reset``."""
        subscriptions = self._subscriptions
        missing = subscriptions.missing_positions(partitions)
        if not missing:
            return
        strategy = subscriptions.reset_strategy
        if strategy == "none":
            raise OffsetOutOfRangeError(f"no position for {missing} and auto.offset.reset=none")
        target = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        for tp, found in self.list_offsets({tp: target for tp in missing}).items():
            subscriptions.seek(tp, found.offset)

    # -- fetching -------------------------------------------------------------------------

    def send_fetches(self) -> None:
        """Start the next fetch of every partition that wants one: one call per leader host."""
        now = time.monotonic()
        wanted = []
        for tp, _, fetch in self._fetchable():
            start = self._next_start(tp, fetch, now)
            if start is not None:
                wanted.append((tp, fetch, start))
        if len(wanted) > 1:
            # Rotated each round, as Kafka's fetcher does: when fetch.max.bytes cannot hold
            # every partition's answer, the ones left out come first next time.
            self._rotation = (self._rotation + 1) % len(wanted)
            wanted = wanted[self._rotation :] + wanted[: self._rotation]
        self._send(wanted, now)

    def _send_fetch(self, tp: TopicPartition, fetch: _PartitionFetch, now: float) -> None:
        """Start the partition's next fetch, if it wants one (see _next_start)."""
        start = self._next_start(tp, fetch, now)
        if start is not None:
            self._send([(tp, fetch, start)], now)

    def _next_start(self, tp: TopicPartition, fetch: _PartitionFetch, now: float) -> int | None:
        """Where the partition's next fetch starts, or None when it wants none: it is paused,
        backing off or done, or enough records are fetched or on their way (_MAX_FETCHES
        answers, buffered or in flight).

        With fetches under way, another one is sent only when the next offset can be
        predicted: the last answer was full (the leader holds a backlog) and spanned
        ``stride`` offsets, so each one under way should end ``stride`` offsets after its
        start; and only while that stays below the readable end the leader reported, so
        the guess never long-polls or runs past the log. A wrong guess costs bytes, never
        records: an overlap is cut off on arrival, a gap drops the guess (see _take_answers).
        """
        if fetch.state.paused or fetch.retry_at > now or fetch.corrupt is not None or fetch.error is not None:
            return None
        cursor, in_flight = fetch.cursor, fetch.in_flight
        if cursor.done or len(fetch.buffer) + len(in_flight) >= _MAX_FETCHES:
            return None
        if not in_flight:
            return cursor.position
        if len(in_flight) >= self._max_in_flight or fetch.stride <= 0:
            return None
        start = in_flight[-1][2] + fetch.stride
        end = self._end_offsets.get(tp)
        if start + fetch.stride > fetch.readable_end or (end is not None and start >= end):
            return None
        return start

    def _send(self, wanted: list[tuple[TopicPartition, _PartitionFetch, int]], now: float) -> None:
        """Send the fetches ``wanted`` (partition, its state, start offset): every partition
        whose leader is on one host in one ``fetch_messages`` call to it."""
        by_host: dict[Any, tuple[Any, list[tuple[TopicPartition, _PartitionFetch, int, Any]]]] = {}
        for tp, fetch, start in wanted:
            try:
                leader = self._metadata.leader(tp)
                fetch.cursor.leader_epoch = leader.leader_epoch
                request = fetch.cursor.request(start)
            except Exception as exc:  # noqa: BLE001
                # Never raised from here: this runs after records were taken (or before an
                # answer is buffered), which an exception would lose. As in Kafka's fetcher,
                # the error waits for a poll that has no records to hand out.
                self._on_fetch_error(tp, fetch, as_kafka_error(exc))
                continue
            ref = leader.leader_handle
            by_host.setdefault(ref.host_key, (ref.host, []))[1].append((tp, fetch, start, request))
        for host, group in by_host.values():
            requests = [request for _, _, _, request in group]
            asked = FetchMessagesRequest(
                tuple(
                    FetchPartition(
                        tp.topic, tp.partition, r.fetch_offset, r.partition_max_bytes, r.current_leader_epoch
                    )
                    for (tp, _, _, _), r in zip(group, requests, strict=True)
                ),
                # One wait for the call: a partition with data (or a guess below the readable
                # end) answers it at once.
                min(r.max_wait_ms for r in requests),
                min(r.min_bytes for r in requests),
                # fetch.max.bytes over the call, never below one partition's own limit.
                max(self._fetch_max_bytes, *(r.partition_max_bytes for r in requests)),
                self._isolation,
                principal=self.principal,
            )
            try:
                call = _Call(host.fetch_messages.remote(asked), len(group))
            except Exception as exc:  # noqa: BLE001 - as a failed call: each partition's error
                for tp, fetch, _, _ in group:
                    self._on_fetch_error(tp, fetch, as_kafka_error(exc))
                continue
            for i, (_, fetch, start, _) in enumerate(group):
                fetch.in_flight.append((call, i, start, now))

    def wait_for_fetches(self, timeout: float) -> None:
        """Wait up to ``timeout`` for an answer, and take every answer that is in."""
        self._reap_abandoned()
        # Answers are taken in the order their fetches were sent: wait on the oldest of each
        # partition (a call carrying several partitions is waited on once).
        pending: dict[Any, list[tuple[TopicPartition, _PartitionFetch, _Call]]] = {}
        for tp, _, f in self._fetchable():
            if f.in_flight:
                call = f.in_flight[0][0]
                pending.setdefault(call.ref, []).append((tp, f, call))
        if not pending:
            # Nothing to wait on (all paused or backing off): sleep out the shorter of the two.
            time.sleep(min(timeout, self._backoff))
            return
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
        ready += ray.wait([r for r in pending if r not in ready], num_returns=len(pending) - len(ready), timeout=0)[0]
        for ref in ready:
            for tp, fetch, call in pending[ref]:
                if self._fetches.get(tp) is fetch:
                    self._take_answers(tp, fetch, call)

    def _take_answers(self, tp: TopicPartition, fetch: _PartitionFetch, call: _Call) -> None:
        """Take the partition's oldest answer (in ``call``), and the next ones already in."""
        while fetch.in_flight and fetch.in_flight[0][0] is call:
            _, index, start, sent = fetch.in_flight.popleft()
            call.release()
            answer = call.answer(index)
            if isinstance(answer, BaseException):
                response, error = None, as_kafka_error(answer)
            else:
                response = answer
            if self._fetches.get(tp) is not fetch:
                return  # a seek or a reassignment while this fetch was under way
            if start > fetch.cursor.position:
                # A predicted offset past where the previous answer really ended: the gap
                # would lose records. Drop this answer and the later guesses; fetch again.
                self._abandon(fetch)
                fetch.stride = 0
                return
            if response is None:
                self._abandon(fetch)
                self._on_fetch_error(tp, fetch, error)
                return
            self._on_fetch(tp, fetch, response, sent)
            if not fetch.in_flight:
                return
            call = fetch.in_flight[0][0]
            if not ray.wait([call.ref], timeout=0)[0]:
                return

    def _on_fetch(self, tp: TopicPartition, fetch: _PartitionFetch, response: Any, sent: float) -> None:
        state = fetch.state
        state.high_watermark = response.high_watermark
        state.log_start_offset = response.log_start_offset
        state.last_stable_offset = response.last_stable_offset
        try:
            fetched = fetch.cursor.complete(response)
        except KafkaError as error:
            self._abandon(fetch)
            self._on_fetch_error(tp, fetch, error)
            return
        if fetch.cursor.done:
            self._abandon(fetch)  # guesses past the end offset
        fetch.failing_since = None
        fetch.readable_end = fetched.readable_end
        if not fetched.bounds:
            fetch.stride = 0
            if self._metrics is not None:
                self._record(fetched, 0, sent)
            return
        # A full answer means a backlog: its span predicts where the next one will end.
        full = len(fetched.records) * 2 >= self._max_bytes
        fetch.stride = fetched.next_offset - fetched.first_offset if full else 0
        # Ask for the next range before decoding this one, so the leader reads and ships it
        # while this thread decodes.
        self._send_fetch(tp, fetch, time.monotonic())
        try:
            chunk = self._decode(tp, fetched, fetched.next_offset)
        except CorruptRecordError as error:
            chunk = self._stop_at_corrupt_batch(tp, fetch, fetched, error)
        if self._metrics is not None:
            self._record(fetched, chunk.remaining(), sent)
        # Buffered even when empty (markers, aborted data only): taking it moves the position.
        fetch.buffer.append(chunk)

    def _record(self, fetched: CompletedFetch, records: int, sent: float) -> None:
        """One fetch answer's metrics: per answer, never per record. The lag is Kafka's
        records-lag, the readable end (HW, or LSO with read_committed) minus the position."""
        now = time.monotonic()
        lag = max(0, fetched.readable_end - fetched.next_offset)
        self._metrics.fetched(records, len(fetched.records), now - sent, lag, now)

    def _stop_at_corrupt_batch(
        self, tp: TopicPartition, fetch: _PartitionFetch, fetched: CompletedFetch, error: CorruptRecordError
    ) -> Any:
        """The chunk of the batches before the first one that cannot be read; from there on
        the partition raises until a seek (Kafka's Fetcher: "seek past the record")."""
        index = 0  # the batch that failed; the whole answer if no single batch does
        for index in range(len(fetched.bounds)):  # noqa: B007 - used after the loop
            try:  # one batch at a time: only on this error path
                self._decode(tp, fetched.batches(index, index + 1), fetched.position)
            except CorruptRecordError as exc:
                error = exc
                break
        else:
            index = 0
        offset = max(fetched.position, fetched.batch_offset(index))
        fetch.corrupt = CorruptRecordError(
            f"{tp}: the record batch at offset {offset} cannot be read ({error}); seek past it to continue"
        )
        self._abandon(fetch)  # the fetches sent past it
        fetch.cursor.seek(offset)
        fetch.stride = 0
        logger.warning("%s", fetch.corrupt)
        return self._decode(tp, fetched.batches(0, index), offset)

    def _on_fetch_error(self, tp: TopicPartition, fetch: _PartitionFetch, error: BaseException) -> None:
        if isinstance(error, CorruptRecordError):
            # Retrying cannot mend stored bytes: stop here (not silently, forever) until a seek.
            fetch.corrupt = CorruptRecordError(
                f"{tp}: the leader cannot serve offset {fetch.cursor.position} ({error}); seek past it to continue"
            )
            return
        if isinstance(error, OffsetOutOfRangeError):
            strategy = self._subscriptions.reset_strategy
            if strategy == "none":
                fetch.error = error
                return
            target = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
            offset = self.list_offsets({tp: target})[tp].offset
            logger.info("%s: offset %s out of range; reset to %d (%s)", tp, fetch.cursor.position, offset, strategy)
            self._subscriptions.seek(tp, offset)
            self.discard_fetched(tp)
            return
        if isinstance(error, KafkaError) and error.retriable:
            now = time.monotonic()
            if fetch.failing_since is None:
                fetch.failing_since = now
            elif self._retry_timeout is not None and now - fetch.failing_since > self._retry_timeout:
                fetch.error = error
                return
            self._metadata.invalidate(tp.topic)
            fetch.retry_at = now + self._backoff
            return
        fetch.error = error if isinstance(error, KafkaError) else KafkaError(str(error))

    def raise_partition_error(self) -> None:
        """Raise a partition's error, if one has any (once; a corrupt batch on every call)."""
        for fetch in self._fetches.values():
            if fetch.error is not None:
                error, fetch.error = fetch.error, None
                raise error
        for fetch in self._fetches.values():
            # Raised again on every poll (never cleared here): only a seek moves past it.
            if fetch.corrupt is not None and not fetch.state.paused and not fetch.buffer:
                raise fetch.corrupt

    # -- handing out ----------------------------------------------------------------------

    def drain(self, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Take up to ``limit`` fetched records, moving positions."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, state, fetch in self._fetchable():
            if state.paused:
                continue
            buffer = fetch.buffer
            while buffer:
                chunk = buffer[0]
                left = chunk.remaining()
                if left > limit:
                    if limit <= 0:
                        break
                    taken = chunk.take(limit)
                    state.position = chunk.next_offset()
                else:
                    taken = chunk.take(left) if left else []
                    buffer.popleft()
                    state.position = chunk.end_offset
                if taken:
                    limit -= len(taken)
                    out.setdefault(tp, []).extend(taken)
            if limit <= 0:
                break
        return out

    def iter_fetched(self) -> Iterator[Iterator[ConsumerRecord]]:
        """The record iterators of the fetched chunks, one pass over the partitions; each
        chunk's records move its partition's position as the application takes them."""
        subscriptions = self._subscriptions
        for tp, state, fetch in list(self._fetchable()):
            buffer = fetch.buffer
            # Each time round: the application may have sought, paused or unsubscribed meanwhile.
            while (
                not state.paused
                and buffer
                and self._fetches.get(tp) is fetch
                and subscriptions.assignment.get(tp) is state
            ):
                chunk = buffer.popleft()
                state.position = chunk.end_offset
                if not chunk.remaining():
                    continue
                fetch.active = chunk
                self._send_fetch(tp, fetch, time.monotonic())  # room in the buffer now
                yield chunk.records

    def take_fetched(self, tp: TopicPartition) -> list[Any]:
        """Every chunk fetched for ``tp`` so far, in order, its position moved past them."""
        state = self._subscriptions.state(tp)
        fetch = self._fetch(tp, state)
        if fetch is None:
            return []
        chunks = list(fetch.buffer)
        fetch.buffer.clear()
        if chunks:
            state.position = chunks[-1].end_offset
            self._send_fetch(tp, fetch, time.monotonic())
        return chunks

    def exhausted(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` was fetched to its end offset and all of it taken."""
        fetch = self._fetch(tp, self._subscriptions.state(tp))
        return fetch is not None and fetch.cursor.done and not fetch.buffer and not fetch.in_flight


__all__ = ["ConsumerRecord", "Decoder", "Fetcher", "RecordDecoder"]
