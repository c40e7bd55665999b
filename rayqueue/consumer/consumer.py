"""The Consumer: Kafka's consumer API over partition leader actors.

Assign mode (``assign``) or group mode (``group.id`` + ``subscribe``; membership, rebalances
and commits live in ``rayqueue.consumer_coordinator``).

Each assigned partition keeps one fetch in flight to its leader (a long-poll actor call),
so fetches of several partitions proceed in parallel and the next fetch is already under
way while the application works through the previous one. Fetched batches are decoded on
the client (the broker hands out the stored bytes as they are) into columns; the records
themselves are built one at a time as the application takes them (``_Chunk``).

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
import functools
import gc
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain, islice, repeat
from operator import length_hint
from typing import Any, NamedTuple

import ray

from actors.protocol import FetchRequest, IsolationLevel, ListOffsetsRequest
from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from rayqueue.config import CONSUMER_CONFIG
from rayqueue.consumer_coordinator import ConsumerCoordinator, ConsumerRebalanceListener
from rayqueue.errors import IllegalStateError, as_kafka_error
from rayqueue.metadata import MetadataCache, call_controller
from storage.batch_header import batch_boundaries, read_header
from storage.errors import (
    CorruptRecordError,
    InvalidConfigError,
    KafkaError,
    OffsetOutOfRangeError,
)
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from storage.record_batch import RecordBatchBuilder, committed_batches, decode_columns

logger = logging.getLogger(__name__)

# In group mode poll() waits in slices this long, to act on rebalances between them.
_GROUP_WAIT_S = 0.1


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


# map(tuple.__new__, repeat(ConsumerRecord), rows) builds records in C, skipping NamedTuple's
# Python-level __new__ (measured: about 90 ns a record, against 110 with functools.partial).
_tuple_new = tuple.__new__
_RECORD_TYPE = repeat(ConsumerRecord)

# Fetches per partition, answers buffered plus under way (bounds the client's memory), and
# how many of them may be under way at once (the second at a predicted offset).
_MAX_FETCHES = 3
_MAX_IN_FLIGHT = 2

# Building more records than this into one list pauses the cyclic GC (see _Chunk.take).
_GC_PAUSE_MIN = 1000


class _Chunk:
    """The decoded records of one fetch answer, built one by one as they are taken.

    The columns are Python lists made by a few vectorized calls per fetch; ``records`` is
    a lazy ``map`` over their ``zip``, so a record tuple exists only from the moment the
    application takes it. Iterating the consumer therefore costs one C-level step per record
    and leaves the cyclic GC nothing to scan (records taken and dropped one at a time keep
    its allocation count flat); a whole fetch's worth of young tuples built at once made the
    GC rescan them on every collection.

    ``cursor`` is the iterator over ``offsets`` inside the zip: its length hint tells how
    many records are left, so the exact position is known at any moment, and clearing
    ``offsets`` stops the chunk (seek, revocation) even while the application iterates it.
    """

    __slots__ = ("offsets", "columns", "cursor", "records", "end_offset", "_meta")

    def __init__(
        self,
        tp: TopicPartition,
        leader_epoch: int,
        offsets: list[int],
        columns: tuple[Any, Any, Any, Any, Any],
        end_offset: int,
    ) -> None:
        # Each column is a list, or a repeat() when every record has the same value.
        timestamps, types, keys, values, headers = columns
        self.offsets = offsets
        self.columns = columns
        self.cursor = iter(offsets)
        self.end_offset = end_offset  # the position once every record is taken
        self._meta = (tp, leader_epoch)
        rows = zip(
            repeat(tp.topic),
            repeat(tp.partition),
            self.cursor,
            timestamps,
            types,
            keys,
            values,
            headers,
            repeat(leader_epoch),
        )
        self.records: Iterator[ConsumerRecord] = map(_tuple_new, _RECORD_TYPE, rows)

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
        columns = tuple(c[i:] if type(c) is list else c for c in self.columns)
        rest = _Chunk(*self._meta, self.offsets[i:], columns, self.end_offset)  # type: ignore[arg-type]
        self.stop()
        return rest


@functools.cache
def _warm_decoder() -> None:
    """Decode one tiny batch, once per process.

    pyarrow imports pandas lazily the first time the decoder builds its columns (about
    0.2 s here); paying that when a consumer is created keeps it off the first fetch.
    """
    builder = RecordBatchBuilder()
    builder.append(b"v", key=b"k", timestamp=0, headers=[("h", b"")])
    cols = decode_columns(builder.build(), headers=True)
    cols.value.to_pylist()
    cols.headers.to_pylist()


class ConsumerRecords:
    """The records of one poll, grouped by partition (Kafka's ConsumerRecords)."""

    def __init__(self, by_partition: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        self._by_partition = by_partition

    def __iter__(self) -> Iterator[ConsumerRecord]:
        for records in self._by_partition.values():
            yield from records

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_partition.values())

    def __bool__(self) -> bool:
        return any(self._by_partition.values())

    def count(self) -> int:
        """Number of records."""
        return len(self)

    def partitions(self) -> set[TopicPartition]:
        """Partitions with records in this poll."""
        return {tp for tp, r in self._by_partition.items() if r}

    def records(self, tp: TopicPartition) -> list[ConsumerRecord]:
        """The records of one partition, in offset order."""
        return self._by_partition.get(tp, [])


@dataclass
class _PartitionState:
    position: int | None = None  # next offset to hand to the application
    fetch_position: int | None = None  # next offset to fetch
    paused: bool = False
    buffer: collections.deque = field(default_factory=collections.deque)  # of _Chunk, not handed out yet
    active: _Chunk | None = None  # the chunk an iteration is handing out
    # Fetches under way, oldest first: (ObjectRef, fetch generation, requested offset).
    in_flight: collections.deque = field(default_factory=collections.deque)
    fetch_generation: int = 0  # bumped by seek: a fetch of an older generation is dropped
    stride: int = 0  # offsets a full answer spanned last time (0: the last answer was not full)
    readable_end: int = -1  # the HW (read_committed: the LSO) the last answer reported
    high_watermark: int = -1
    log_start_offset: int = -1
    retry_at: float = 0.0
    error: KafkaError | None = None
    # A batch that cannot be read at the position: raised by every poll until a seek.
    corrupt: CorruptRecordError | None = None


class Consumer:
    """A Kafka-style consumer. Create with ``rayqueue.Consumer(cluster, **config)``."""

    def __init__(self, cluster: Any = None, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        from rayqueue.cluster import connect

        self.config = CONSUMER_CONFIG.parse(config, **kwargs)
        cfg = self.config
        self._cluster = cluster if cluster is not None else connect()
        self._metadata = MetadataCache(self._cluster.controller, cfg["metadata.max.age.ms"])
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._abandoned: list[Any] = []  # refs of dropped fetches, read once they finish
        self._max_poll_records = cfg["max.poll.records"]
        self._fetch_args = (cfg["max.partition.fetch.bytes"], cfg["fetch.max.wait.ms"], cfg["fetch.min.bytes"])
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if cfg["isolation.level"] == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        self._reset = cfg["auto.offset.reset"]
        self._backoff = cfg["retry.backoff.ms"] / 1000
        self._timeout = cfg["default.api.timeout.ms"] / 1000
        self._key_deserializer: Callable[[bytes], Any] | None = cfg["key.deserializer"]
        self._value_deserializer: Callable[[bytes], Any] | None = cfg["value.deserializer"]
        self._check_crcs = cfg["check.crcs"]
        _warm_decoder()
        self._closed = False
        self._group: ConsumerCoordinator | None = None
        if cfg["group.id"] is not None:
            self._group = ConsumerCoordinator(self, getattr(self._cluster, "group_coordinator", None), cfg)
        elif cfg["group.instance.id"] is not None:
            raise InvalidConfigError("group.instance.id needs group.id")

    # -- group membership -----------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern | None = None,
        listener: ConsumerRebalanceListener | None = None,
        *,
        pattern: str | re.Pattern | None = None,
    ) -> None:
        """Join the consumer group for these topics (or all topics matching a regex).

        ``topics`` is a list of names, a compiled regex, or a string: a name, or a regex
        when it starts with ``^`` (librdkafka's convention). ``pattern=`` is a regex too.
        Partitions arrive with the poll that completes the rebalance.
        """
        if self._group is None:
            raise InvalidConfigError("subscribe() needs group.id; use assign() without a group")
        if self._states and not self._group.subscribed:
            raise IllegalStateError("subscribe() after assign(); call unsubscribe() first")
        names: list[str] = []
        if isinstance(topics, re.Pattern):
            pattern = topics
        elif isinstance(topics, str):
            if topics.startswith("^"):
                pattern = topics
            else:
                names = [topics]
        elif topics is not None:
            names = list(topics)
        if isinstance(pattern, re.Pattern):
            pattern = pattern.pattern
        if pattern is not None:
            re.compile(pattern)  # fail here, not in the coordinator
        if not names and pattern is None:
            self.unsubscribe()
            return
        self._group.subscribe(names, pattern, listener)

    def subscription(self) -> set[str]:
        """The subscribed topic names (a regex subscription shows what it matched)."""
        if self._group is None or not self._group.subscribed:
            return set()
        return set(self._group.topics) | {tp.topic for tp in self._states}

    def unsubscribe(self) -> None:
        """Give up every partition and leave the group."""
        if self._group is not None:
            self._group.unsubscribe()
        self._replace_states({})

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit offsets (by default the position of every assigned partition) and wait.

        Raises IllegalGenerationError / UnknownMemberIdError when this member was fenced out
        of the group (its partitions went to another member), RebalanceInProgressError while
        the group completes a rebalance.
        """
        self._require_group().commit_sync(self._commit_offsets(offsets))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None] | None = None,
    ) -> None:
        """Commit without waiting; ``callback(offsets, error)`` runs in a later poll()/commit()/close()."""
        self._require_group().commit_async(self._commit_offsets(offsets), callback)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's last committed offset of each partition (None if it has none)."""
        return self._require_group().committed(partitions)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Group id, generation, member id and instance id (what transactions need)."""
        return self._require_group().group_metadata()

    def _require_group(self) -> ConsumerCoordinator:
        if self._group is None:
            raise InvalidConfigError("this consumer has no group.id")
        return self._group

    def _commit_offsets(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return {tp: OffsetAndMetadata(p) for tp, p in self._positions(self._states).items()}
        return {
            tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om)) for tp, om in offsets.items()
        }

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Group mode: the coordinator's assignment (kept partitions keep their state)."""
        self._replace_states({tp: self._states.get(tp) or _PartitionState() for tp in sorted(partitions)})

    # -- assignment -----------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing any previous assignment)."""
        if self._group is not None and self._group.subscribed:
            raise IllegalStateError("assign() while subscribed; call unsubscribe() first")
        wanted = [TopicPartition(*tp) if not isinstance(tp, TopicPartition) else tp for tp in partitions]
        for tp in wanted:
            if not 0 <= tp.partition < self._metadata.num_partitions(tp.topic):
                raise KafkaError(f"unknown partition {tp}")
        self._replace_states({tp: self._states.get(tp, _PartitionState()) for tp in wanted})

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer."""
        return set(self._states)

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        """All partitions of ``topic``."""
        return [TopicPartition(topic, p) for p in range(self._metadata.num_partitions(topic))]

    def topics(self, pattern: str | None = None) -> list[str]:
        """Topic names on the cluster (optionally matching a regex)."""
        names = call_controller(self._cluster.controller.list_topics)
        return [n for n in names if pattern is None or re.fullmatch(pattern, n)]

    # -- polling --------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> ConsumerRecords:
        """Records fetched since the last poll, waiting up to ``timeout_ms`` for some."""
        limit = max_records or self._max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        group = self._group
        self._reclaim_active()
        last_pass = False
        while True:
            if group is not None:
                group.poll()
            self._resolve_positions()
            batch = self._drain(limit)
            self._send_fetches()
            if batch:
                return ConsumerRecords(batch)
            self._raise_partition_error()
            if last_pass:
                return ConsumerRecords({})
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # Out of time: still take the answers that are in already (poll(0) too).
                last_pass, remaining = True, 0.0
            if group is None:
                self._wait_for_fetches(remaining)
            elif not self._states:
                group.wait(min(remaining, _GROUP_WAIT_S))
            else:
                # Short slices, so that a rebalance the heartbeat thread flags is acted on soon.
                self._wait_for_fetches(min(remaining, _GROUP_WAIT_S))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Iterate records forever (break out of the loop to stop).

        ``position()`` and ``commit()`` during the loop see exactly the records handed out
        so far; ``seek``, ``pause`` and a revocation take effect at the next record.
        """
        self._reclaim_active()
        # chain() takes each fetch's lazy records in C: no generator step per record.
        return chain.from_iterable(self._iter_chunks())

    def _iter_chunks(self) -> Iterator[Iterator[ConsumerRecord]]:
        """The record iterators of fetched chunks, in turn, fetching and waiting as needed."""
        while not self._closed:
            if self._group is not None:
                self._group.poll()
            self._resolve_positions()
            self._send_fetches()  # before handing records out: the broker works meanwhile
            handed = False
            for tp, state in list(self._states.items()):
                while not state.paused and state.buffer and self._states.get(tp) is state:
                    chunk = state.buffer.popleft()
                    state.position = chunk.end_offset
                    if not chunk.remaining():
                        continue
                    state.active = chunk
                    self._send_fetch(tp, state, time.monotonic())  # room in the buffer now
                    handed = True
                    yield chunk.records
            if not handed:
                self._raise_partition_error()
                self._wait_for_fetches(1.0 if self._group is None else _GROUP_WAIT_S)

    # -- positions ------------------------------------------------------------------------

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record poll() will return for ``tp``."""
        state = self._state(tp)
        if state.position is None:
            self._resolve_positions([tp])
        return _position(state)

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The known positions of these assigned partitions (the group commits them)."""
        states = self._states
        return {tp: _position(states[tp]) for tp in partitions if tp in states and states[tp].position is not None}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make the next poll() start at ``offset`` for ``tp``."""
        if offset < 0:
            raise InvalidConfigError(f"seek offset must be >= 0, got {offset}")
        state = self._state(tp)
        self._drop_buffered(state)
        state.position = state.fetch_position = offset
        state.fetch_generation += 1
        self._abandon(state)
        state.error = None
        state.corrupt = None

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Seek to the log start offset of each partition (all assigned by default)."""
        for tp, offset in self.beginning_offsets(partitions or list(self._states)).items():
            self.seek(tp, offset)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Seek to the high watermark of each partition (all assigned by default)."""
        for tp, offset in self.end_offsets(partitions or list(self._states)).items():
            self.seek(tp, offset)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        return {tp: r.offset for tp, r in self._list_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions}).items()}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last readable record of each partition: the high watermark,
        or with read_committed the last stable offset."""
        return {tp: r.offset for tp, r in self._list_offsets({tp: LATEST_TIMESTAMP for tp in partitions}).items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is >= the given one, per partition (None if none)."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise InvalidConfigError(f"timestamp for {tp} must be >= 0, got {ts}")
        found = self._list_offsets(dict(timestamps))
        return {tp: (r if r.offset >= 0 else None) for tp, r in found.items()}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching and returning records of these partitions."""
        for tp in partitions:
            state = self._state(tp)
            state.paused = True
            self._reclaim(state)  # an iteration under way stops handing this partition out

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Resume paused partitions."""
        for tp in partitions:
            self._state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {tp for tp, s in self._states.items() if s.paused}

    def close(self) -> None:
        """Stop fetching; pending fetches are dropped. In a group: commit (auto-commit), run
        the listener's revocation and leave the group at once (dynamic members)."""
        if self._closed:
            return
        try:
            if self._group is not None:
                self._group.close()
        finally:
            self._closed = True
            for state in self._states.values():
                self._drop_buffered(state)
            self._replace_states({})
            self._reap_abandoned(wait_s=2.0)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------

    def _replace_states(self, states: dict[TopicPartition, _PartitionState]) -> None:
        for tp, state in self._states.items():
            if tp not in states:
                self._drop_buffered(state)
                self._abandon(state)
        self._states = states

    @staticmethod
    def _drop_buffered(state: _PartitionState) -> None:
        """Forget fetched records not handed out (an iteration under way stops at once)."""
        if state.active is not None:
            state.active.stop()
            state.active = None
        state.buffer.clear()

    @staticmethod
    def _reclaim(state: _PartitionState) -> None:
        """Put the records an iteration has not taken back at the head of the buffer."""
        active = state.active
        if active is None:
            return
        state.active = None
        if active.remaining():
            rest = active.rest()
            state.buffer.appendleft(rest)
            state.position = rest.offsets[0]

    def _reclaim_active(self) -> None:
        # A loop over the consumer that was left (break) must not lose what it did not take.
        for state in self._states.values():
            if state.active is not None:
                self._reclaim(state)

    def _abandon(self, state: _PartitionState) -> None:
        """Drop a partition's fetch in flight: cancel it, and keep its ref until it is reaped.

        Ray logs an "unhandled error" for every ref whose error nobody read, and a dropped
        long-poll often ends in one (NotLeader after a topic is deleted, the cancellation).
        """
        while state.in_flight:
            ref = state.in_flight.popleft()[0]
            ray.cancel(ref)
            self._abandoned.append(ref)

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

    def _state(self, tp: TopicPartition) -> _PartitionState:
        try:
            return self._states[tp]
        except KeyError:
            raise KafkaError(f"{tp} is not assigned to this consumer") from None

    def _list_offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp]:
        isolation = self._isolation  # read_committed: "latest" is the last stable offset (Kafka's ListOffsets)
        calls = {
            tp: lambda m, ts=ts: m.leader_handle.list_offsets.remote(ListOffsetsRequest(ts, m.leader_epoch, isolation))
            for tp, ts in specs.items()
        }
        return self._metadata.call_leaders(calls, self._timeout, self._backoff)

    def _resolve_positions(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        missing = [tp for tp in (partitions or self._states) if self._states[tp].position is None]
        if not missing:
            return
        if self._reset == "none":
            raise OffsetOutOfRangeError(f"no position for {missing} and auto.offset.reset=none")
        target = EARLIEST_TIMESTAMP if self._reset == "earliest" else LATEST_TIMESTAMP
        for tp, found in self._list_offsets({tp: target for tp in missing}).items():
            state = self._states[tp]
            state.position = state.fetch_position = found.offset

    def _send_fetches(self) -> None:
        now = time.monotonic()
        for tp, state in self._states.items():
            self._send_fetch(tp, state, now)

    def _send_fetch(self, tp: TopicPartition, state: _PartitionState, now: float) -> None:
        """Start the partition's next fetch unless it is paused or backing off, or enough
        records are fetched or on their way (_MAX_FETCHES answers, buffered or in flight).

        With a fetch under way, a second one is sent only when the next offset can be
        predicted: the last answer was full (the leader holds a backlog) and spanned
        ``stride`` offsets, so the one under way should end ``stride`` offsets after its
        start; and only while that stays below the readable end the leader reported, so
        the guess never long-polls or runs past the log. A wrong guess costs bytes, never
        records: an overlap is cut off on arrival, a gap drops the guess (see _take_answers).
        """
        if state.paused or state.position is None or state.retry_at > now or state.corrupt is not None:
            return
        in_flight = state.in_flight
        if len(state.buffer) + len(in_flight) >= _MAX_FETCHES:
            return
        if not in_flight:
            start = state.fetch_position
        else:
            if len(in_flight) >= _MAX_IN_FLIGHT or state.stride <= 0:
                return
            start = in_flight[-1][2] + state.stride
            if start + state.stride > state.readable_end:
                return
        try:
            leader = self._metadata.leader(tp)
            ref = leader.leader_handle.fetch.remote(
                FetchRequest(start, *self._fetch_args, self._isolation, leader.leader_epoch)
            )
        except Exception as exc:  # noqa: BLE001
            # Never raised from here: this runs after records were taken (or before an
            # answer is buffered), which an exception would lose. As in Kafka's fetcher,
            # the error waits for a poll that has no records to hand out.
            self._on_fetch_error(tp, state, as_kafka_error(exc))
            return
        in_flight.append((ref, state.fetch_generation, start))

    def _wait_for_fetches(self, timeout: float) -> None:
        self._reap_abandoned()
        # Answers are taken in the order their fetches were sent: wait on the oldest of each.
        pending = {s.in_flight[0][0]: tp for tp, s in self._states.items() if s.in_flight}
        if not pending:
            # Nothing to wait on (all paused or backing off): sleep out the shorter of the two.
            time.sleep(min(timeout, self._backoff))
            return
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
        ready += ray.wait([r for r in pending if r not in ready], num_returns=len(pending) - len(ready), timeout=0)[0]
        for ref in ready:
            tp = pending[ref]
            state = self._states.get(tp)
            if state is not None:
                self._take_answers(tp, state, ref)

    def _take_answers(self, tp: TopicPartition, state: _PartitionState, ref: Any) -> None:
        """Take the partition's oldest answer (``ref``), and the next ones already in."""
        while state.in_flight and state.in_flight[0][0] is ref:
            _, generation, start = state.in_flight.popleft()
            try:
                result = ray.get(ref)
            except Exception as exc:  # noqa: BLE001
                result, error = None, as_kafka_error(exc)
            if generation != state.fetch_generation:
                return  # a seek happened while this fetch was under way
            if start > state.fetch_position:
                # A predicted offset past where the previous answer really ended: the gap
                # would lose records. Drop this answer and the later guesses; fetch again.
                self._abandon(state)
                state.stride = 0
                return
            if result is None:
                self._abandon(state)
                self._on_fetch_error(tp, state, error)
                return
            self._on_fetch(tp, state, result)
            if not state.in_flight:
                return
            ref = state.in_flight[0][0]
            if not ray.wait([ref], timeout=0)[0]:
                return

    def _on_fetch(self, tp: TopicPartition, state: _PartitionState, result: Any) -> None:
        state.high_watermark = result.high_watermark
        state.log_start_offset = result.log_start_offset
        committed = self._isolation is IsolationLevel.READ_COMMITTED
        state.readable_end = result.last_stable_offset if committed else result.high_watermark
        data = result.records
        if not data:
            state.stride = 0
            return
        bounds = batch_boundaries(data)
        if not bounds:
            state.stride = 0
            return
        start = state.fetch_position
        last = read_header(data, bounds[-1][0]).next_offset
        end = max(start, last)
        state.fetch_position = end
        # A full answer means a backlog: its span predicts where the next one will end.
        full = len(data) * 2 >= self._fetch_args[0]
        state.stride = last - read_header(data, 0).base_offset if full else 0
        # Ask for the next range before decoding this one, so the leader reads and ships it
        # while this thread decodes.
        self._send_fetch(tp, state, time.monotonic())
        try:
            chunk = self._committed_chunk(tp, data, bounds, result, start, end)
        except CorruptRecordError as error:
            chunk = self._stop_at_corrupt_batch(tp, state, data, bounds, result, start, error)
        # Appended even when empty (markers, aborted data only): taking it moves the position.
        state.buffer.append(chunk)

    def _committed_chunk(
        self, tp: TopicPartition, data: bytes, bounds: list[tuple[int, int]], result: Any, start: int, end: int
    ) -> _Chunk:
        """The chunk of an answer's batches (``bounds`` in ``data``) from ``start``, ending at ``end``."""
        if self._isolation is IsolationLevel.READ_COMMITTED and result.aborted_transactions:
            data = committed_batches(data, bounds, result.aborted_transactions)
        return self._decode(tp, data, start, result.leader_epoch, end)

    def _stop_at_corrupt_batch(
        self,
        tp: TopicPartition,
        state: _PartitionState,
        data: bytes,
        bounds: list[tuple[int, int]],
        result: Any,
        start: int,
        error: CorruptRecordError,
    ) -> _Chunk:
        """The chunk of the batches before the first one that cannot be read; from there on
        the partition raises until a seek (Kafka's Fetcher: "seek past the record")."""
        index = 0  # the batch that failed; the whole answer if no single batch does
        for index, (position, size) in enumerate(bounds):  # noqa: B007 - used after the loop
            try:  # one batch at a time: only on this error path
                self._committed_chunk(tp, data[position : position + size], [(0, size)], result, start, start)
            except CorruptRecordError as exc:
                error = exc
                break
        else:
            index = 0
        offset = max(start, read_header(data, bounds[index][0]).base_offset)
        state.corrupt = CorruptRecordError(
            f"{tp}: the record batch at offset {offset} cannot be read ({error}); seek past it to continue"
        )
        self._abandon(state)  # the fetches sent past it
        state.fetch_position, state.stride = offset, 0
        logger.warning("%s", state.corrupt)
        prefix = bounds[:index]
        return self._committed_chunk(tp, data[: bounds[index][0]], prefix, result, start, offset)

    def _on_fetch_error(self, tp: TopicPartition, state: _PartitionState, error: BaseException) -> None:
        if isinstance(error, CorruptRecordError):
            # Retrying cannot mend stored bytes: stop here (not silently, forever) until a seek.
            state.corrupt = CorruptRecordError(
                f"{tp}: the leader cannot serve offset {state.fetch_position} ({error}); seek past it to continue"
            )
            return
        if isinstance(error, OffsetOutOfRangeError):
            if self._reset == "none":
                state.error = error
                return
            target = EARLIEST_TIMESTAMP if self._reset == "earliest" else LATEST_TIMESTAMP
            offset = self._list_offsets({tp: target})[tp].offset
            logger.info("%s: offset %s out of range; reset to %d (%s)", tp, state.fetch_position, offset, self._reset)
            self.seek(tp, offset)
            return
        if isinstance(error, KafkaError) and error.retriable:
            self._metadata.invalidate(tp.topic)
            state.retry_at = time.monotonic() + self._backoff
            return
        state.error = error if isinstance(error, KafkaError) else KafkaError(str(error))

    def _decode(self, tp: TopicPartition, data: bytes, start: int, leader_epoch: int, end: int) -> _Chunk:
        """The records from ``start`` on, as a chunk whose position ends at ``end``.

        Columns are decoded vectorized; the only per-record work is building the tuple
        when the application takes it (and the user's deserializers, if any).
        """
        cols = decode_columns(data, headers=True, check_crc=self._check_crcs, min_offset=start)
        if len(cols) == 0:
            return _Chunk(tp, leader_epoch, [], ([], [], [], [], []), end)
        keys: Any = repeat(None) if cols.key.null_count == len(cols) else cols.key.to_pylist()
        values = cols.value.to_pylist()
        if self._key_deserializer is not None and type(keys) is list:
            keys = [None if k is None else self._key_deserializer(k) for k in keys]
        if self._value_deserializer is not None:
            values = [None if v is None else self._value_deserializer(v) for v in values]
        headers: Any = repeat(())
        if cols.headers is not None and len(cols.headers.values):
            headers = [tuple((h["key"], h["value"]) for h in hs) for hs in cols.headers.to_pylist()]
        types = cols.timestamp_type
        same_type = types[0] == types[-1] and (types == types[0]).all()
        columns = (
            cols.timestamp.tolist(),
            repeat(int(types[0])) if same_type else types.tolist(),
            keys,
            values,
            headers,
        )
        return _Chunk(tp, leader_epoch, cols.offset.tolist(), columns, end)

    def _raise_partition_error(self) -> None:
        for state in self._states.values():
            if state.error is not None:
                error, state.error = state.error, None
                raise error
        for state in self._states.values():
            # Raised again on every poll (never cleared here): only a seek moves past it.
            if state.corrupt is not None and not state.paused and not state.buffer:
                raise state.corrupt

    def _drain(self, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Take up to ``limit`` buffered records, advancing positions."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, state in self._states.items():
            if state.paused:
                continue
            buffer = state.buffer
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


def _position(state: _PartitionState) -> int:
    """The offset of the next record to hand out: inside the chunk an iteration is taking."""
    active = state.active
    if active is not None and length_hint(active.cursor):
        return active.next_offset()
    return state.position
