"""The RecordAccumulator (Kafka's name): open batches per partition, sealed and queued, drained.

``send()`` appends a record to its partition's open batch; a batch is sealed into its
partition's ready queue when it reaches ``batch.size`` or ``linger.ms`` (or on
``flush()``), and ``send_many()`` queues whole encoded batches. Sealing closes the batch's
builder for appends (its records compressed: its size is then exact) but does not build
it. The sender drains the queues: several batches of a partition per produce call up to
``max.request.size``, with idempotence at most max.in.flight (<= 5) unacknowledged batches
per partition, each given its sequence number when first drained; then each batch is
built once, producer id, epoch and sequence set first (``ProducerBatch.close``), as Kafka's
``RecordAccumulator.drain`` does: one copy of its records and one CRC per batch, and a
retried batch keeps its bytes. ``buffer.memory`` bounds the bytes held here, and a full
buffer blocks ``send()`` up to ``max.block.ms``.

A batch that failed with a retriable error goes back to the front of its queue with a
``retry_at`` time (``retry.backoff.ms`` on), and its partition stays muted while any other
call of it is in flight, so the resend keeps the partition's order. The accumulator and
the sender share one lock (``RecordAccumulator.lock``); methods said to run "with the lock
held" are the sender's, called inside it.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from actors.types import TopicPartition
from rayqueue.metadata import MetadataCache
from rayqueue.partitioner import StickyPartitioner
from rayqueue.producer.futures import FutureRecordMetadata, ProduceRequestResult, new_tuple
from rayqueue.producer.transaction_manager import TransactionManager
from storage.batch_header import with_producer_state
from storage.errors import KafkaError, KafkaTimeoutError, RecordTooLargeError
from storage.records.builder import RecordBatchBuilder

# One drained produce call: its partition, its batches, and how many in-flight slots it takes.
Drained = tuple[TopicPartition, list["ProducerBatch"], int]


class ProducerBatch:
    """A batch being filled, then sealed (closed for appends), then built and sent (possibly
    more than once: a retry sends the same bytes)."""

    __slots__ = (
        "tp",
        "builder",
        "records",
        "result",
        "data",
        "nbytes",
        "created",
        "size",
        "seq",
        "attempts",
        "base_sequence",
        "producer_state",
        "finished",
        "seal_at",
        "retry_at",
        "last_error",
    )

    _sequence = itertools.count()

    def __init__(self, tp: TopicPartition, builder: RecordBatchBuilder) -> None:
        self.tp = tp
        self.builder: RecordBatchBuilder | None = builder  # until the batch is built
        self.records = 0
        self.result = ProduceRequestResult(tp)
        self.data: bytes | None = None  # the batch's bytes, built once by close()
        self.nbytes = 0  # the size of those bytes, exact from sealing on
        self.created = time.monotonic()
        self.size = 0  # what the batch holds of buffer.memory
        self.seq = next(self._sequence)
        self.attempts = 0
        self.base_sequence = -1  # the producer sequence, given when first drained (idempotence)
        # (producer id, epoch, base sequence, transactional) that data carries, None without a sequence.
        self.producer_state: tuple[int, int, int, bool] | None = None
        self.finished = False
        self.seal_at = 0  # send() seals the open batch once its size reaches this
        self.retry_at = 0.0  # monotonic time before which a failed batch is not resent
        self.last_error: BaseException | None = None  # the retriable error of its last try, if any

    def seal(self) -> None:
        """No more records: close the builder for appends (the records compressed), so that
        ``nbytes`` is the batch's exact size (Kafka's closeForRecordAppends)."""
        self.builder.close_for_record_appends()  # type: ignore[union-attr]
        self.nbytes = self.builder.estimated_size()  # type: ignore[union-attr]

    def close(self, producer_id: int, epoch: int, transactional: bool) -> None:
        """Build the sealed batch's bytes, its producer id, epoch and base sequence set first
        (Kafka's setProducerState, then close): one copy of the records, one CRC.

        Called when the batch goes out. A retry keeps its bytes (the same sequence, the same
        CRC); only a batch given a new sequence under a new epoch (``reset_sequences``) has
        its header rewritten, as Kafka's reopenAndRewriteProducerState does.
        """
        state = (producer_id, epoch, self.base_sequence, transactional) if self.base_sequence >= 0 else None
        if self.data is None:
            builder = self.builder
            if state is not None:
                builder.set_producer_state(*state)  # type: ignore[union-attr]
            self.data = builder.build()  # type: ignore[union-attr]
            self.builder = None
        elif state is not None and state != self.producer_state:
            self.data = with_producer_state(self.data, *state)
        self.producer_state = state

    def timeout_error(self, now: float, cause: BaseException | str | None = None) -> KafkaTimeoutError:
        """The error of a batch past delivery.timeout.ms (in Kafka's words), with why it was
        not delivered: ``cause``, and the error its last try was answered with (Kafka's
        producer reports the batch's last error too), which is also the ``__cause__``."""
        waited = (now - self.created) * 1000
        reasons = [] if cause is None else [str(cause)]
        last = self.last_error
        if last is not None and last is not cause:
            reasons.append(f"last error: {last if isinstance(last, KafkaError) else f'{type(last).__name__}: {last}'}")
        reason = f" ({'; '.join(reasons)})" if reasons else ""
        error = KafkaTimeoutError(
            f"Expiring {self.records} record(s) for {self.tp}: {waited:.0f} ms has passed since batch creation{reason}"
        )
        error.__cause__ = last
        return error


class RecordAccumulator:
    """Per-partition open batches and ready queues, shared by ``send()`` and the sender."""

    def __init__(
        self,
        config: Mapping[str, Any],
        metadata: MetadataCache,
        sticky: StickyPartitioner,
        txn: TransactionManager,
        idempotent: bool,
    ) -> None:
        self._batch_size = config["batch.size"]
        self._linger = config["linger.ms"] / 1000
        self._compression = config["compression.type"]
        self._max_request = config["max.request.size"]
        self._buffer_memory = config["buffer.memory"]
        self._max_block = config["max.block.ms"] / 1000
        self._delivery_timeout = config["delivery.timeout.ms"] / 1000
        self._max_in_flight = config["max.in.flight.requests.per.connection"]
        self._transactional = config["transactional.id"] is not None
        # Null keys may be re-picked when a batch opens only without a user partitioner.
        self._plain_sticky = config["partitioner"] is None
        self._metadata = metadata
        self._sticky = sticky
        self._txn = txn
        # The sender turns it off for a cluster without a transaction coordinator.
        self.idempotent = idempotent
        self.lock = threading.Lock()
        self.wakeup = threading.Condition(self.lock)  # the sender sleeps on it
        self._space = threading.Condition(self.lock)  # send() waits on it for buffer.memory
        # Keyed by a plain (topic, partition) tuple: hashed in C on every send().
        self._open: dict[tuple[str, int], ProducerBatch] = {}
        self._topic_partitions: dict[tuple[str, int], TopicPartition] = {}
        self._ready: dict[TopicPartition, collections.deque[ProducerBatch]] = collections.defaultdict(collections.deque)
        self._in_flight: dict[TopicPartition, int] = collections.defaultdict(int)
        self._muted: set[TopicPartition] = set()
        self._unfinished: set[ProducerBatch] = set()  # queued or in flight: what flush() waits for
        self._buffered = 0
        # Idempotence: per partition, the sequenced batches from the oldest unacknowledged
        # one on, in sequence order (see _can_send; an OutOfOrderSequence answer is
        # retriable while an earlier batch is still unacknowledged), and the partitions
        # that acknowledged a batch under the current producer id and epoch.
        self._unacked: dict[TopicPartition, collections.deque[ProducerBatch]] = collections.defaultdict(
            collections.deque
        )
        self._confirmed: set[TopicPartition] = set()
        self._grow_limit = max(self._batch_size, self._max_request // 2)  # see _held()

    # -- appending (send() and send_many()) -----------------------------------------------

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]],
        size: int,
    ) -> FutureRecordMetadata:
        """Add one record to its partition's open batch; the record's future."""
        slot = (topic, partition)
        with self.lock:
            if self._buffered + size > self._buffer_memory:
                self._wait_for_space(size)
            batch = self._open.get(slot)
            if batch is None:  # once per batch: a sticky pick may predate the topic's recreation
                num_partitions = self._metadata.num_partitions(topic)
                if partition >= num_partitions and key is None and self._plain_sticky:
                    partition = self._sticky.partition(topic, num_partitions)
                    slot = (topic, partition)
                    batch = self._open.get(slot)
                if batch is None:
                    batch = self._new_open_batch(slot)
            delta = batch.builder.append(value, key, timestamp, headers)
            batch.records = delta + 1
            self._buffered += size
            batch.size += size
            if batch.size >= batch.seal_at:
                if self.idempotent and self._held(batch):
                    batch.seal_at = batch.size + self._batch_size // 4 + 1  # look again a bit later
                else:
                    self._close_batch(batch)
                    if key is None:
                        self._sticky.on_new_batch(topic, self._metadata.num_partitions(topic), partition)
        return new_tuple(FutureRecordMetadata, (batch.result, delta, timestamp))

    def append_columns(
        self, tp: TopicPartition, values: list, keys: list | None, timestamps: list | None, now: int | None
    ) -> list[tuple[ProduceRequestResult, int]]:
        """Encode records into whole batches and queue them; (result, record count) per batch."""
        # The bulk path has every record at hand, so it builds batches of half a request
        # (not batch.size): an actor call costs ~1 ms, and fewer, larger batches amortize it.
        per_batch = max(1, max(self._batch_size, self._max_request // 2) // max(1, _average_size(values) + 16))
        out = []
        for start in range(0, len(values), per_batch):
            stop = min(start + per_batch, len(values))
            chunk_ts = timestamps[start:stop] if timestamps is not None else [now] * (stop - start)
            builder = RecordBatchBuilder.from_columns(
                values[start:stop],
                keys[start:stop] if keys is not None else None,
                chunk_ts,
                compression=self._compression,
            )
            batch = ProducerBatch(tp, builder)
            batch.records = stop - start
            batch.seal()
            batch.size = batch.nbytes
            with self.lock:
                if self._buffered + batch.size > self._buffer_memory:
                    self._wait_for_space(batch.size)
                self._buffered += batch.size
                # Keep order with records queued by send(): close the open batch first.
                open_batch = self._open.get((tp.topic, tp.partition))
                if open_batch is not None:
                    self._close_batch(open_batch)
                if batch.nbytes > self._max_request:
                    self._buffered -= batch.size
                    batch.result.done(-1, -1, RecordTooLargeError(f"batch of {batch.nbytes} bytes > max.request.size"))
                else:
                    self._ready[tp].append(batch)
                    self._unfinished.add(batch)
                    self.wakeup.notify_all()
            out.append((batch.result, batch.records))
        return out

    def begin_flush(self) -> list[ProduceRequestResult]:
        """Seal every open batch; the results of every batch not yet finished."""
        with self.lock:
            for batch in list(self._open.values()):
                self._close_batch(batch)
            pending = [b.result for b in self._unfinished]
            self.wakeup.notify_all()
        return pending

    def abort_undrained(self) -> list[ProducerBatch]:
        """Take every open and queued batch out (an aborted transaction's unsent records)."""
        with self.lock:
            dropped = [b for b in self._open.values() if b.records]
            self._open.clear()
            for queue in self._ready.values():
                dropped.extend(queue)
                queue.clear()
            self.wakeup.notify_all()
        return dropped

    def deallocate(self, batch: ProducerBatch, error: BaseException | None) -> None:
        """A batch has its outcome: free its buffer space and move the idempotence window on."""
        with self.lock:
            self._buffered -= batch.size
            self._unfinished.discard(batch)
            self._space.notify_all()
            if batch.base_sequence >= 0:
                if error is None:
                    self._confirmed.add(batch.tp)
                batch.finished = True
                unacked = self._unacked[batch.tp]
                while unacked and unacked[0].finished:
                    unacked.popleft()
                if error is not None:
                    # The broker may or may not hold it: its sequence cannot simply be reused.
                    self._txn.epoch_bump_needed = True

    def _new_open_batch(self, slot: tuple[str, int]) -> ProducerBatch:
        tp = self._topic_partitions.get(slot)
        if tp is None:
            tp = self._topic_partitions[slot] = TopicPartition(*slot)
        batch = ProducerBatch(tp, RecordBatchBuilder(self._compression))
        batch.seal_at = self._batch_size
        self._open[slot] = batch
        # An idle sender sleeps until told: its linger.ms clock for this batch starts now
        # (without this, an idle producer's first record waited for the idle timeout).
        self.wakeup.notify_all()
        return batch

    def _close_batch(self, batch: ProducerBatch) -> None:
        """Move an open batch to the ready queue (with the lock held)."""
        slot = (batch.tp.topic, batch.tp.partition)
        if self._open.get(slot) is batch:
            del self._open[slot]
        if batch.records == 0:
            return
        batch.seal()
        if batch.nbytes > self._max_request:
            self._buffered -= batch.size
            batch.result.done(-1, -1, RecordTooLargeError(f"batch of {batch.nbytes} bytes > max.request.size"))
            return
        self._ready[batch.tp].append(batch)
        self._unfinished.add(batch)
        self.wakeup.notify_all()

    def _wait_for_space(self, size: int) -> None:
        deadline = time.monotonic() + self._max_block
        self.wakeup.notify_all()
        while self._buffered + size > self._buffer_memory:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"buffer.memory={self._buffer_memory} full for max.block.ms={self._max_block * 1000:.0f}"
                )
            self._space.wait(remaining)

    def _held(self, batch: ProducerBatch) -> bool:
        """Whether an open batch keeps filling past batch.size and linger.ms (idempotence only).

        An idempotent producer has at most five unacknowledged batches per partition (the
        broker's dedup window), so while a partition's window is full and a sealed batch
        already waits, sealing more small batches gains nothing: the open one grows
        instead, up to half of max.request.size, and goes as one batch when the window
        opens. This keeps acks=all throughput with small batch.size values.
        """
        if not self.idempotent or batch.size >= self._grow_limit:
            return False
        tp = batch.tp
        return len(self._unacked[tp]) >= self._max_in_flight and bool(self._ready.get(tp))

    # -- what the sender asks (with the lock held) ------------------------------------------

    def expire_lingering(self, now: float) -> None:
        """Seal the open batches that waited linger.ms (and are not held to grow)."""
        for batch in [b for b in self._open.values() if now - b.created >= self._linger and not self._held(b)]:
            self._close_batch(batch)

    def has_lingered(self, now: float) -> bool:
        """Whether an open batch is due to be sealed."""
        return any(now - b.created >= self._linger and not self._held(b) for b in self._open.values())

    def has_expired(self, now: float) -> bool:
        """Whether a queued batch passed delivery.timeout.ms."""
        return any(q and now - q[0].created > self._delivery_timeout for q in self._ready.values())

    def has_queued(self) -> bool:
        """Whether any batch waits in a ready queue."""
        return any(self._ready.values())

    def has_sendable(self, now: float, adding_partitions: bool) -> bool:
        """Whether ``drain`` would take a batch now."""
        partitions = self._txn.partitions if self._transactional else None
        return any(
            q
            and tp not in self._muted
            and q[0].retry_at <= now
            and self._can_send(tp, q)
            and (partitions is None or tp in partitions or not adding_partitions)
            for tp, q in self._ready.items()
        )

    def next_wake(self, now: float) -> float:
        """When the sender must look again without being told: the first open batch's
        linger.ms, or the first retry's backoff (held batches wait for a completion, which
        notifies the condition anyway)."""
        lingering = [b.created for b in self._open.values() if not self._held(b)]
        # Idle: new work, completions and close() all notify the condition.
        wake = min(lingering) + self._linger if lingering else now + 0.5
        for tp, queue in self._ready.items():
            if queue and now < queue[0].retry_at < wake and tp not in self._muted:
                wake = queue[0].retry_at
        return wake

    def take_expired(self, now: float) -> list[ProducerBatch]:
        """Queued batches older than delivery.timeout.ms, taken out to fail (Kafka's
        RecordAccumulator.expiredBatches). A partition's queue is in creation order (retries
        go back in sequence order), so only its head needs a look."""
        oldest = now - self._delivery_timeout
        expired = []
        for queue in self._ready.values():
            while queue and queue[0].created < oldest:
                expired.append(queue.popleft())
        return expired

    def take_queued(self) -> list[ProducerBatch]:
        """Every queued batch, taken out to fail."""
        queued = [b for queue in self._ready.values() for b in queue]
        for queue in self._ready.values():
            queue.clear()
        return queued

    def reset_sequences(self) -> None:
        """Forget every sequence (a new producer id or epoch): queued batches get new ones."""
        self._unacked.clear()
        self._confirmed.clear()
        for queue in self._ready.values():
            for batch in queue:
                batch.base_sequence = -1  # a built batch gets its header rewritten when it goes again

    def _can_send(self, tp: TopicPartition, queue: collections.deque[ProducerBatch]) -> bool:
        """Whether the first queued batch of ``tp`` may go now.

        With idempotence the broker keeps the last five batches of a producer for dedup, so
        a batch gets a sequence only while fewer than max.in.flight (<= 5) batches of its
        partition got one since the oldest unacknowledged batch (acknowledged ones after it
        count too, they are in the broker's five): a retried batch, if it was appended, is
        then always among the broker's last five and answered as a duplicate.
        """
        if not self.idempotent:
            return self._in_flight[tp] < self._max_in_flight
        if queue[0].base_sequence >= 0:  # a retry, already counted as unacknowledged
            return self._in_flight[tp] < self._max_in_flight
        return len(self._unacked[tp]) < self._window(tp)

    def _window(self, tp: TopicPartition) -> int:
        # Until the leader has acknowledged a batch of this producer id and epoch it accepts
        # any first sequence (Kafka's rule for an unknown producer), and Ray may deliver
        # concurrent calls out of order: one batch at a time until then.
        return self._max_in_flight if tp in self._confirmed else 1

    def drain(self, now: float, adding_partitions: bool) -> tuple[list[Drained], list[TopicPartition]]:
        """Take ready batches, several per partition up to max.request.size per call, and
        the partitions a transaction must add before its batches may go.

        With idempotence a partition has at most max.in.flight (<= 5) unacknowledged
        batches, each batch gets its sequence here, in order, and a batch being retried
        goes alone (the broker answers a duplicate for its whole request). A partition's
        head batch waiting out its retry backoff holds the queue behind it.
        """
        drained: list[Drained] = []
        new_partitions: list[TopicPartition] = []
        idempotent = self.idempotent
        txn = self._txn
        if idempotent:
            if not txn.has_producer_id:
                return drained, new_partitions
            if self._transactional:
                if txn.failed is not None:
                    return drained, new_partitions
            elif txn.epoch_bump_needed:
                return drained, new_partitions
        partitions = txn.partitions if self._transactional else None
        for tp, queue in self._ready.items():
            if not queue or tp in self._muted:
                continue
            if partitions is not None and tp not in partitions:
                if not adding_partitions:
                    new_partitions.append(tp)
                continue
            while queue and queue[0].retry_at <= now and self._can_send(tp, queue):
                batches, size = [], 0
                if idempotent and queue[0].base_sequence >= 0:
                    batches.append(queue.popleft())  # a retry goes alone
                else:
                    room = self._window(tp) - len(self._unacked[tp]) if idempotent else self._max_request
                    while (
                        queue
                        and len(batches) < room
                        and (not batches or size + queue[0].nbytes <= self._max_request)
                        and queue[0].base_sequence < 0
                    ):
                        batch = queue.popleft()
                        batches.append(batch)
                        size += batch.nbytes
                if idempotent:
                    unacked = self._unacked[tp]
                    for batch in batches:
                        if batch.base_sequence < 0:
                            batch.base_sequence = txn.next_sequence(tp, batch.records)
                            unacked.append(batch)
                    weight = len(batches)
                else:
                    weight = 1
                self._in_flight[tp] += weight
                drained.append((tp, batches, weight))
        if partitions is not None and not adding_partitions:
            # Kafka's client adds a partition to the transaction at its first send(), so the
            # add runs while the batch lingers rather than after it.
            for tp in self._unadded_open(partitions):
                if tp not in new_partitions:
                    new_partitions.append(tp)
        return drained, new_partitions

    def _unadded_open(self, partitions: Any) -> list[TopicPartition]:
        return [b.tp for b in self._open.values() if b.records and b.tp not in partitions]

    def has_partitions_to_add(self, adding_partitions: bool) -> bool:
        """Whether a transaction has records for a partition it has not added (nor is adding):
        the sender adds it at once (with the lock held)."""
        if not self._transactional or adding_partitions:
            return False
        txn = self._txn
        if not txn.has_producer_id or txn.failed is not None:
            return False
        return bool(self._unadded_open(txn.partitions))

    def request_done(self, tp: TopicPartition, weight: int) -> None:
        """A produce call of ``tp`` has its outcome; the last one unmutes the partition."""
        in_flight = self._in_flight[tp] - weight
        self._in_flight[tp] = in_flight
        if not in_flight and tp in self._muted:
            self._muted.discard(tp)
            self.wakeup.notify_all()

    def reenqueue(self, tp: TopicPartition, batches: list[ProducerBatch], retry_at: float) -> None:
        """Put the batches of a failed call back, in order, to go again from ``retry_at``;
        the partition is muted until its other calls have answered, so the resend keeps
        its order."""
        queue = self._ready[tp]
        for batch in reversed(batches):
            batch.retry_at = retry_at
            queue.appendleft(batch)
        self._ready[tp] = collections.deque(sorted(queue, key=lambda b: b.seq))
        if self._in_flight[tp]:
            self._muted.add(tp)

    def is_behind_unacked(self, tp: TopicPartition, batch: ProducerBatch) -> bool:
        """Whether an earlier batch of ``tp`` with a sequence is still unanswered (takes the lock)."""
        with self.lock:
            unacked = self._unacked.get(tp)
            return bool(unacked) and unacked[0] is not batch


def _average_size(values: list) -> int:
    sample = values[:64]
    return sum(len(v) for v in sample if v is not None) // max(1, len(sample))
