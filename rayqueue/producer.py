"""The Producer: Kafka's producer semantics over partition leader actors.

``send()`` appends a record to its partition's open batch (the accumulator) and returns
a future at once. A background sender thread ships batches that are full (``batch.size``)
or old enough (``linger.ms``) to the partition leader, several batches per actor call up
to ``max.request.size`` since an actor call costs about a millisecond. Results come back
through Ray futures; retriable errors refresh metadata and resend within
``delivery.timeout.ms``. The leader bounds its own waits by ``request.timeout.ms`` and
Ray reports every call's end (an answer, or the actor's death), so a call is never
resent while it may still be appended; a call still unanswered when its oldest batch
reaches ``delivery.timeout.ms`` fails its batches then (Kafka's expiry of in-flight
batches, KIP-91) and its late answer is ignored. ``send_many()`` is the bulk path: it
encodes whole batches from a list or Arrow array in one go.

Ordering: batches of one partition are sent in order, and a partition whose batch failed
is muted until its in-flight calls have all answered, then resent in order. Failures of
a replica actor are sticky (it died, or lost leadership), so this keeps per-partition
order across retries.

Idempotence (on by default, as in Kafka 3.x): the sender gets a producer id and epoch
from the transaction coordinator when it starts, and stamps every batch, when it is first
drained, with them and the partition's next sequence number (the header patch and CRC
cost about a microsecond per batch; send() does no per-record work for it). The broker
answers a duplicate with the original offsets, so a retried batch goes alone in its
request, and at most five batches per partition are unacknowledged (the broker remembers
the last five). With a ``transactional.id`` the producer is transactional: see
``init_transactions()``; the state machine lives in ``rayqueue.transaction_manager``.
"""

from __future__ import annotations

import collections
import itertools
import logging
import struct
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c as _crc32c
import ray

from actors.protocol import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AppendOrigin,
    EndTxnRequest,
    ProduceOrder,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from rayqueue.config import PRODUCER_CONFIG, producer_config
from rayqueue.errors import TransactionAbortedError, as_kafka_error
from rayqueue.metadata import MetadataCache
from rayqueue.partitioner import StickyPartitioner, partition_for_key, partitions_for_keys
from rayqueue.transaction_manager import TransactionManager, coordinator_call
from storage import RecordBatchBuilder
from storage.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, PRODUCER_ID_OFFSET, TRANSACTIONAL_MASK
from storage.errors import (
    CoordinatorNotAvailableError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)

_ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
# (session, request number, oldest unanswered number) of a call without idempotence; see Producer._drain.
Order = ProduceOrder
# The outcome _complete gets for a call that passed delivery.timeout.ms unanswered.
_EXPIRED_IN_FLIGHT = KafkaTimeoutError("delivery.timeout.ms passed while the produce call was in flight")


class _Request:
    """One produce call in flight: its batches, and when the sender stops waiting for it
    (its oldest batch's delivery.timeout.ms)."""

    __slots__ = ("batches", "weight", "order", "deadline", "answered")

    def __init__(self, batches: list[_Batch], weight: int, order: Order | None, deadline: float) -> None:
        self.batches, self.weight, self.order, self.deadline = batches, weight, order, deadline
        self.answered = False  # the first outcome (answer or expiry) wins; a later one is dropped


# Guards _BatchResult.callbacks between add_callback and completion (held for a few
# instructions; shared by every batch, so a record's future stays a plain tuple).
_callbacks_lock = threading.Lock()
_ATTRIBUTES_LOW_BYTE = ATTRIBUTES_OFFSET + 1  # attributes is a big-endian int16
_new_tuple = tuple.__new__  # builds a tuple subclass in C, without a Python __init__


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed (Kafka's RecordMetadata)."""

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        """The record's TopicPartition."""
        return TopicPartition(self.topic, self.partition)


class _BatchResult:
    """The shared outcome of one batch; every record future is a view on it."""

    __slots__ = ("tp", "event", "base_offset", "log_append_time", "error", "callbacks")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.event = threading.Event()
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.callbacks: list[tuple[Callable[..., Any], int, int]] | None = None

    def done(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        self.base_offset, self.log_append_time, self.error = base_offset, log_append_time, error
        with _callbacks_lock:  # a callback added meanwhile is either taken here or runs at once
            self.event.set()
            callbacks, self.callbacks = self.callbacks, None
        for callback, delta, timestamp in callbacks or ():
            self.call(callback, delta, timestamp)

    def call(self, callback: Callable[..., Any], delta: int, timestamp: int) -> None:
        """Run one record's callback with the batch's outcome."""
        try:
            if self.error is None:
                callback(self.metadata(delta, timestamp), None)
            else:
                callback(None, self.error)
        except Exception:  # a user callback must not kill the sender
            logger.exception("producer callback failed")

    def metadata(self, delta: int, timestamp: int) -> RecordMetadata:
        """The record at ``delta`` in the batch, created at ``timestamp`` (unless the log stamped it)."""
        if self.log_append_time >= 0:
            timestamp = self.log_append_time
        return RecordMetadata(self.tp.topic, self.tp.partition, self.base_offset + delta, timestamp)


class FutureRecordMetadata(tuple):
    """The future of one record: a view on its batch's outcome, cheap to create (as Kafka's).

    A tuple of the batch result, the record's offset delta in the batch and its create
    timestamp, built by ``send()`` with ``tuple.__new__`` (no Python-level ``__init__`` on
    the hot path); ``FutureRecordMetadata.of`` builds one by name.
    """

    __slots__ = ()

    @classmethod
    def of(cls, batch: _BatchResult, delta: int, timestamp: int) -> FutureRecordMetadata:
        """The future of the record at ``delta`` of ``batch``, created at ``timestamp``."""
        return _new_tuple(cls, (batch, delta, timestamp))

    @property
    def _batch(self) -> _BatchResult:
        return self[0]

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the record's batch; return its RecordMetadata or raise its error."""
        if not self._batch.event.wait(timeout):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout}s")
        if self._batch.error is not None:
            raise self._batch.error
        return self._batch.metadata(self[1], self[2])

    def done(self) -> bool:
        """Whether the batch has an outcome."""
        return self._batch.event.is_set()

    def exception(self) -> BaseException | None:
        """The batch's error, if it failed (None while pending or on success)."""
        return self._batch.error

    def add_callback(self, callback: Callable[[RecordMetadata | None, BaseException | None], Any]) -> None:
        """Call ``callback(metadata, None)`` on success or ``callback(None, error)`` on failure."""
        batch, delta, timestamp = self
        with _callbacks_lock:
            if not batch.event.is_set():
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((callback, delta, timestamp))
                return
        batch.call(callback, delta, timestamp)


class _Batch:
    """A batch being filled, then sent (possibly more than once)."""

    __slots__ = (
        "tp",
        "builder",
        "records",
        "result",
        "data",
        "created",
        "size",
        "seq",
        "attempts",
        "base_sequence",
        "stamped",
        "finished",
        "seal_at",
    )

    _sequence = itertools.count()

    def __init__(self, tp: TopicPartition, builder: RecordBatchBuilder | None, data: bytes | None = None) -> None:
        self.tp = tp
        self.builder = builder
        self.records = 0
        self.result = _BatchResult(tp)
        self.data = data
        self.created = time.monotonic()
        self.size = len(data) if data is not None else 0
        self.seq = next(self._sequence)
        self.attempts = 0
        self.base_sequence = -1  # the producer sequence, given when first drained (idempotence)
        self.stamped = False  # whether data carries the producer id, epoch and base_sequence
        self.finished = False
        self.seal_at = 0  # send() seals the open batch once its size reaches this


class Producer:
    """A thread-safe Kafka-style producer. Create with ``rayqueue.Producer(cluster, **config)``."""

    def __init__(self, cluster: Any = None, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        from rayqueue.cluster import connect

        self.config = producer_config(config, **kwargs)
        self._cluster = cluster if cluster is not None else connect()
        cfg = self.config
        self._acks = _ACKS[cfg["acks"]]
        self._batch_size = cfg["batch.size"]
        self._linger = cfg["linger.ms"] / 1000
        self._compression = cfg["compression.type"]
        self._max_request = cfg["max.request.size"]
        self._buffer_memory = cfg["buffer.memory"]
        self._max_block = cfg["max.block.ms"] / 1000
        self._delivery_timeout = cfg["delivery.timeout.ms"] / 1000
        self._request_timeout_ms = cfg["request.timeout.ms"]
        self._retries = cfg["retries"]
        self._backoff = cfg["retry.backoff.ms"] / 1000
        self._max_in_flight = cfg["max.in.flight.requests.per.connection"]
        self._key_serializer = cfg["key.serializer"]
        self._value_serializer = cfg["value.serializer"]
        self._user_partitioner = cfg["partitioner"]
        self._ignore_keys = cfg["partitioner.ignore.keys"]
        self._metadata = MetadataCache(self._cluster.controller, cfg["metadata.max.age.ms"], auto_create=True)
        self._sticky = StickyPartitioner()
        self._sticky_current = self._sticky.current_by_topic
        # send()'s checks, precomputed: one size limit, and whether null keys go sticky
        # without a user partitioner (the usual case, decided without a method call).
        self._max_record_size = min(self._max_request, self._buffer_memory)
        self._plain_sticky = self._user_partitioner is None
        self._serializing = self._key_serializer is not None or self._value_serializer is not None
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        # Keyed by a plain (topic, partition) tuple: hashed in C on every send().
        self._open: dict[tuple[str, int], _Batch] = {}
        self._topic_partitions: dict[tuple[str, int], TopicPartition] = {}
        self._ready: dict[TopicPartition, collections.deque[_Batch]] = collections.defaultdict(collections.deque)
        self._in_flight: dict[TopicPartition, int] = collections.defaultdict(int)
        # Without idempotence nothing on the broker orders a partition's concurrent calls
        # (Kafka has its TCP connection; Ray may start an async actor's calls in any order).
        # Each call carries (session, its number, the oldest number still unanswered), and
        # the replica appends them in number order (see PartitionReplica.produce).
        self._session = uuid.uuid4().hex
        self._next_turn: dict[TopicPartition, int] = collections.defaultdict(int)
        self._open_turns: dict[TopicPartition, collections.deque[int]] = collections.defaultdict(collections.deque)
        self._muted: set[TopicPartition] = set()
        self._completions: collections.deque[tuple[list[_Batch], int, Order | None, Any]] = collections.deque()
        self._unfinished: set[_Batch] = set()  # queued or in flight: what flush() waits for
        self._requests_in_flight = 0
        self._awaiting: set[_Request] = set()  # calls sent and neither answered nor expired
        # Calls whose Ray future has not resolved, expired or not: an expired call may still
        # be appended, so sequences restart under a new epoch (and a transaction aborts) only
        # once this is 0.
        self._unresolved = 0
        self._next_deadline = float("inf")  # no earlier than the earliest deadline in _awaiting
        self._buffered = 0
        self._closed = False
        # Idempotence and transactions (see rayqueue.transaction_manager).
        self._idempotent = cfg["enable.idempotence"]
        self._idempotence_explicit = (
            "enable.idempotence" in {PRODUCER_CONFIG.canonical(k) for k in {**(config or {}), **kwargs}}
            or cfg["transactional.id"] is not None
        )
        self._transactional = cfg["transactional.id"] is not None
        self._guarded = self._transactional  # send() checks state: closed, or a transaction open
        self._txn = TransactionManager(
            self._cluster, cfg["transactional.id"], cfg["transaction.timeout.ms"], self._backoff, self._max_block
        )
        # Per partition, the sequenced batches from the oldest unacknowledged one on, in
        # sequence order (see _can_send); an OutOfOrderSequence answer is retriable while an
        # earlier batch is still unacknowledged.
        self._unacked: dict[TopicPartition, collections.deque[_Batch]] = collections.defaultdict(collections.deque)
        self._confirmed: set[TopicPartition] = set()  # partitions that acknowledged our epoch
        self._adding_partitions = False  # an add_partitions_to_txn call is under way
        self._grow_limit = max(self._batch_size, self._max_request // 2)  # see _held()
        self._sender = threading.Thread(target=self._run_sender, name=f"{cfg['client.id']}-sender", daemon=True)
        self._sender.start()

    # -- the user API ---------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        callback: Callable[[RecordMetadata | None, BaseException | None], Any] | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; returns a future of its RecordMetadata."""
        if self._guarded:  # one check on the hot path for both
            self._check_can_send()
        if self._serializing:
            if self._key_serializer is not None and key is not None:
                key = self._key_serializer(key)
            if self._value_serializer is not None and value is not None:
                value = self._value_serializer(value)
        if partition is None:
            if key is None and self._plain_sticky:
                partition = self._sticky_current.get(topic)  # StickyPartitioner.current, inline
            if partition is None:
                partition = self._partition(topic, key, value)
        elif not 0 <= partition < self._metadata.num_partitions(topic):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0) + 16
        if size > self._max_record_size:
            raise RecordTooLargeError(
                f"record of {size} bytes exceeds max.request.size={self._max_request} or buffer.memory={self._buffer_memory}"
            )
        slot = (topic, partition)
        with self._lock:
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
            delta = batch.builder.append(value, key, timestamp, headers or ())
            batch.records = delta + 1
            self._buffered += size
            batch.size += size
            if batch.size >= batch.seal_at:
                if self._idempotent and self._held(batch):
                    batch.seal_at = batch.size + self._batch_size // 4 + 1  # look again a bit later
                else:
                    self._close_batch(batch)
                    if key is None:
                        self._sticky.on_new_batch(topic, self._metadata.num_partitions(topic), partition)
        future = _new_tuple(FutureRecordMetadata, (batch.result, delta, timestamp))
        if callback is not None:
            future.add_callback(callback)
        return future

    def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None] | Any,
        keys: Sequence[bytes | None] | Any | None = None,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> BulkSendResult:
        """Produce many values at once (a list of bytes or an Arrow binary array).

        Records are grouped by partition (``partition``, else murmur2 of each key, else
        sticky chunks of ``batch.size`` spread over the partitions) and encoded as whole
        batches without per-record futures. Returns a BulkSendResult to wait on.
        """
        if self._guarded:
            self._check_can_send()
        values = _as_list(values)
        keys = _as_list(keys) if keys is not None else None
        n = len(values)
        if keys is not None and len(keys) != n:
            raise InvalidConfigError("keys and values must have the same length")
        timestamps = list(timestamps) if timestamps is not None else None
        if timestamps is None:
            now = int(time.time() * 1000)
        num_partitions = self._metadata.num_partitions(topic)
        groups = self._group_by_partition(topic, values, keys, partition, num_partitions)
        results = []
        for p, index in groups:
            part_values = values if index is None else [values[i] for i in index]
            part_keys = None if keys is None else (keys if index is None else [keys[i] for i in index])
            part_ts = None
            if timestamps is not None:
                part_ts = timestamps if index is None else [timestamps[i] for i in index]
            results.extend(
                self._enqueue_columns(
                    TopicPartition(topic, p), part_values, part_keys, part_ts, now if timestamps is None else None
                )
            )
        return BulkSendResult(results)

    def _check_can_send(self) -> None:
        if self._closed:
            raise KafkaError("producer is closed")
        if self._transactional:
            self._txn.check_send()

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until it is acknowledged (or failed)."""
        with self._lock:
            for batch in list(self._open.values()):
                self._close_batch(batch)
            pending = [b.result for b in self._unfinished]
            self._wakeup.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for result in pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result.event.wait(remaining):
                raise KafkaTimeoutError(f"flush did not finish within {timeout}s")

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` (creating it when auto-creation is on)."""
        return list(range(self._metadata.num_partitions(topic)))

    def close(self, timeout: float | None = None) -> None:
        """Flush and stop the sender thread."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = self._guarded = True
                self._wakeup.notify_all()
            self._sender.join(timeout=10)

    # -- transactions ---------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Register the transactional.id with the coordinator and get this instance's epoch.

        Fences older producers with the same id (their next call raises ProducerFencedError)
        and completes or aborts a transaction they left open. Call once, before the first
        transaction; after a KafkaTimeoutError it may be called again.
        """
        txn = self._txn
        txn.require_transactional("init_transactions")
        txn.begin_init()
        try:
            txn.init_producer_id()
        except KafkaTimeoutError:
            raise
        except Exception as exc:
            txn.on_fatal(as_kafka_error(exc))
            raise
        txn.complete_init()

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        self._txn.require_transactional("begin_transaction")
        self._txn.begin_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit a consumer group's offsets as part of the current transaction.

        ``group_metadata`` is ``consumer.group_metadata()`` (or a bare group id, without
        the member fencing it gives). The offsets are the next ones to read, as for
        ``Consumer.commit``; they become the group's committed offsets only if the
        transaction commits.
        """
        txn = self._txn
        txn.require_transactional("send_offsets_to_transaction")
        txn.check_in_transaction("send_offsets_to_transaction")
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata, -1, "", None)
        group_id = group_metadata.group_id
        converted = {
            tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om)) for tp, om in offsets.items()
        }
        try:
            if group_id not in txn.groups:
                add = AddOffsetsToTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, group_id)
                txn.call("add_offsets_to_txn", add)
                txn.groups.add(group_id)
            commit = TxnOffsetCommitRequest(
                txn.transactional_id,
                txn.producer_id,
                txn.epoch,
                group_id,
                converted,
                group_metadata.member_id,
                group_metadata.group_instance_id,
                group_metadata.generation_id,
            )
            coordinator_call(
                self._group_coordinator,
                "txn_offset_commit",
                commit,
                timeout_s=self._max_block,
                backoff_s=max(self._backoff, 0.01),
                what=f"txn_offset_commit({group_id!r})",
            )
        except KafkaTimeoutError:
            raise  # nothing changed; the call may be repeated
        except Exception as exc:
            self._transaction_call_failed(exc)
            raise

    def commit_transaction(self) -> None:
        """Send every record of the transaction, then commit it.

        Raises the error if any record of the transaction failed; the transaction must
        then be aborted. After a KafkaTimeoutError the call may be repeated.
        """
        txn = self._txn
        txn.require_transactional("commit_transaction")
        txn.begin_commit()
        self.flush()
        txn.raise_if_failed()
        self._wait_for_partition_additions()
        self._end_transaction(commit=True)
        txn.complete_transaction()

    def abort_transaction(self) -> None:
        """Abort the current transaction: unsent records fail with TransactionAbortedError,
        records already sent are discarded by read_committed consumers."""
        txn = self._txn
        txn.require_transactional("abort_transaction")
        txn.begin_abort()
        aborted = TransactionAbortedError("the transaction was aborted before this record was sent")
        with self._lock:
            dropped = [b for b in self._open.values() if b.records]
            self._open.clear()
            for queue in self._ready.values():
                dropped.extend(queue)
                queue.clear()
            self._wakeup.notify_all()
        for batch in dropped:
            self._finish(batch, -1, -1, aborted)
        self._wait_until_idle()
        self._end_transaction(commit=False)
        if txn.epoch_bump_needed:
            # A batch of the aborted transaction may or may not have been written: restart
            # every sequence under a new epoch (KIP-360) before the next transaction.
            try:
                txn.init_producer_id()
            except Exception as exc:
                txn.on_fatal(as_kafka_error(exc))
                raise
            with self._lock:
                self._unacked.clear()
                self._confirmed.clear()
        txn.complete_transaction()

    def _end_transaction(self, commit: bool) -> None:
        """EndTxn at the coordinator, when the transaction holds anything; a failure other
        than a timeout (which may be retried) is fatal for this producer."""
        txn = self._txn
        if not txn.started:
            return
        try:
            txn.call("end_txn", EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, commit))
        except KafkaTimeoutError:
            raise
        except Exception as exc:
            self._transaction_call_failed(exc, fatal=True)
            raise

    def _transaction_call_failed(self, exc: BaseException, fatal: bool = False) -> None:
        error = as_kafka_error(exc)
        if fatal or isinstance(error, (ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError)):
            self._txn.on_fatal(error)
        else:
            self._txn.on_error(error)

    def _group_coordinator(self) -> Any:
        handle = self._cluster.group_coordinator
        if handle is None:
            from actors.group_coordinator import GROUP_COORDINATOR_NAME

            try:
                handle = ray.get_actor(GROUP_COORDINATOR_NAME, namespace=self._cluster.namespace)
            except ValueError:
                raise CoordinatorNotAvailableError("this cluster has no group coordinator") from None
        return handle

    def _wait_for_partition_additions(self) -> None:
        deadline = time.monotonic() + self._max_block
        with self._lock:
            while self._adding_partitions:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError("partitions were not added to the transaction within max.block.ms")
                self._wakeup.wait(remaining)

    def _wait_until_idle(self) -> None:
        """Wait (max.block.ms) until no produce call (an expired one included: it may still be
        appended) and no add_partitions_to_txn call is in flight."""
        deadline = time.monotonic() + self._max_block
        with self._lock:
            while self._requests_in_flight or self._unresolved or self._adding_partitions or self._completions:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError("in-flight batches did not finish within max.block.ms")
                self._wakeup.wait(min(remaining, 0.1))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- accumulator ----------------------------------------------------------------------

    def _partition(self, topic: str, key: bytes | None, value: bytes | None) -> int:
        if (key is None or self._ignore_keys) and self._user_partitioner is None:
            current = self._sticky.current(topic)
            if current is not None:  # the common case, without a metadata lookup
                return current
        num_partitions = self._metadata.num_partitions(topic)
        if self._user_partitioner is not None:
            return int(self._user_partitioner(topic, key, num_partitions))
        if key is None or self._ignore_keys:
            return self._sticky.partition(topic, num_partitions)
        return partition_for_key(key, num_partitions)

    def _new_open_batch(self, slot: tuple[str, int]) -> _Batch:
        tp = self._topic_partitions.get(slot)
        if tp is None:
            tp = self._topic_partitions[slot] = TopicPartition(*slot)
        batch = _Batch(tp, RecordBatchBuilder(self._compression))
        batch.seal_at = self._batch_size
        self._open[slot] = batch
        # An idle sender sleeps until told: its linger.ms clock for this batch starts now
        # (without this, an idle producer's first record waited for the idle timeout).
        self._wakeup.notify_all()
        return batch

    def _close_batch(self, batch: _Batch) -> None:
        """Move an open batch to the ready queue (called with the lock held)."""
        slot = (batch.tp.topic, batch.tp.partition)
        if self._open.get(slot) is batch:
            del self._open[slot]
        if batch.records == 0:
            return
        batch.data = batch.builder.build()
        batch.builder = None
        if len(batch.data) > self._max_request:
            self._buffered -= batch.size
            batch.result.done(-1, -1, RecordTooLargeError(f"batch of {len(batch.data)} bytes > max.request.size"))
            return
        self._ready[batch.tp].append(batch)
        self._unfinished.add(batch)
        self._wakeup.notify_all()

    def _wait_for_space(self, size: int) -> None:
        deadline = time.monotonic() + self._max_block
        self._wakeup.notify_all()
        while self._buffered + size > self._buffer_memory:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"buffer.memory={self._buffer_memory} full for max.block.ms={self._max_block * 1000:.0f}"
                )
            self._space.wait(remaining)

    def _group_by_partition(
        self, topic: str, values: list, keys: list | None, partition: int | None, num_partitions: int
    ) -> list[tuple[int, list[int] | None]]:
        if partition is not None:
            if not 0 <= partition < num_partitions:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
            return [(partition, None)]
        if keys is not None and not self._ignore_keys and self._user_partitioner is None:
            parts = partitions_for_keys([k if k is not None else b"" for k in keys], num_partitions)
            null_keys = [i for i, k in enumerate(keys) if k is None]
            sticky = self._sticky.partition(topic, num_partitions)
            for i in null_keys:
                parts[i] = sticky
            groups: dict[int, list[int]] = collections.defaultdict(list)
            for i, p in enumerate(parts.tolist()):
                groups[p].append(i)
            return sorted(groups.items())
        if self._user_partitioner is not None:
            groups = collections.defaultdict(list)
            for i in range(len(values)):
                groups[int(self._user_partitioner(topic, keys[i] if keys else None, num_partitions))].append(i)
            return sorted(groups.items())
        # Null keys: one partition per request-sized chunk, moving on like the sticky partitioner.
        average = max(1, sum(len(v) for v in values[:100] if v is not None) // max(1, min(len(values), 100)))
        chunk = max(1, self._max_request // (average + 16) // 2)
        out = []
        current = self._sticky.partition(topic, num_partitions)
        for start in range(0, len(values), chunk):
            out.append((current, list(range(start, min(start + chunk, len(values))))))
            current = self._sticky.on_new_batch(topic, num_partitions, current)
        return out

    def _enqueue_columns(
        self, tp: TopicPartition, values: list, keys: list | None, timestamps: list | None, now: int | None
    ) -> list[tuple[_BatchResult, int]]:
        """Encode records into batches of about batch.size and queue them; (result, count) each."""
        # The bulk path has every record at hand, so it builds batches of half a request
        # (not batch.size): an actor call costs ~1 ms, and fewer, larger batches amortize it.
        per_batch = max(1, max(self._batch_size, self._max_request // 2) // max(1, _average_size(values) + 16))
        out = []
        for start in range(0, len(values), per_batch):
            stop = min(start + per_batch, len(values))
            chunk_ts = timestamps[start:stop] if timestamps is not None else [now] * (stop - start)
            data = RecordBatchBuilder.from_columns(
                values[start:stop],
                keys[start:stop] if keys is not None else None,
                chunk_ts,
                compression=self._compression,
            ).build()
            batch = _Batch(tp, None, data)
            batch.records = stop - start
            with self._lock:
                if self._buffered + batch.size > self._buffer_memory:
                    self._wait_for_space(batch.size)
                self._buffered += batch.size
                # Keep order with records queued by send(): close the open batch first.
                open_batch = self._open.get((tp.topic, tp.partition))
                if open_batch is not None:
                    self._close_batch(open_batch)
                if len(data) > self._max_request:
                    self._buffered -= batch.size
                    batch.result.done(-1, -1, RecordTooLargeError(f"batch of {len(data)} bytes > max.request.size"))
                else:
                    self._ready[tp].append(batch)
                    self._unfinished.add(batch)
                    self._wakeup.notify_all()
            out.append((batch.result, batch.records))
        return out

    # -- the sender thread ----------------------------------------------------------------

    def _run_sender(self) -> None:
        if self._idempotent and not self._transactional:
            self._fetch_producer_id()  # at once, as Kafka's sender does: the first send need not wait
        while True:
            with self._lock:
                while not self._has_work():
                    if self._closed and not self._completions and not self._requests_in_flight:
                        return
                    self._wakeup.wait(self._next_linger_wait())
                    self._expire_lingering()
                self._expire_lingering()
                self._expire_calls()
                completions = list(self._completions)
                self._completions.clear()
                doomed, doom_error = self._take_doomed()
                expired = self._take_expired()
                need_producer_id = self._maybe_bump_epoch() or (
                    self._idempotent
                    and not self._transactional
                    and not self._txn.has_producer_id
                    and any(self._ready.values())
                )
                requests, new_partitions = self._drain()
            for batches, weight, order, outcome in completions:
                self._complete(batches, weight, order, outcome)
            for batch in doomed:
                self._finish(batch, -1, -1, doom_error)
            for batch in expired:
                self._finish(batch, -1, -1, _expired(batch, time.monotonic()))
            if need_producer_id:
                self._fetch_producer_id()
            if new_partitions:
                self._add_partitions_to_txn(new_partitions)
            for tp, batches, weight, order in requests:
                self._send(tp, batches, weight, order)

    def _has_work(self) -> bool:
        if self._completions:
            return True
        now = time.monotonic()
        if now >= self._next_deadline:
            return True  # to expire a call
        if any(q and now - q[0].created > self._delivery_timeout for q in self._ready.values()):
            return True  # to expire it
        if any(now - b.created >= self._linger and not self._held(b) for b in self._open.values()):
            return True
        if self._idempotent:
            txn = self._txn
            if txn.failed is not None and self._transactional:
                return any(self._ready.values())  # to fail them
            if not txn.has_producer_id:
                return not self._transactional and any(self._ready.values())
            if txn.epoch_bump_needed and not self._transactional:
                return not self._requests_in_flight and not self._unresolved
        adding = self._adding_partitions
        partitions = self._txn.partitions if self._transactional else None
        return any(
            q
            and tp not in self._muted
            and self._can_send(tp, q)
            and (partitions is None or tp in partitions or not adding)
            for tp, q in self._ready.items()
        )

    def _can_send(self, tp: TopicPartition, queue: collections.deque[_Batch]) -> bool:
        """Whether the first queued batch of ``tp`` may go now.

        With idempotence the broker keeps the last five batches of a producer for dedup, so
        a batch gets a sequence only while fewer than max.in.flight (<= 5) batches of its
        partition got one since the oldest unacknowledged batch (acknowledged ones after it
        count too, they are in the broker's five): a retried batch, if it was appended, is
        then always among the broker's last five and answered as a duplicate.
        """
        if not self._idempotent:
            return self._in_flight[tp] < self._max_in_flight
        if queue[0].base_sequence >= 0:  # a retry, already counted as unacknowledged
            return self._in_flight[tp] < self._max_in_flight
        return len(self._unacked[tp]) < self._window(tp)

    def _window(self, tp: TopicPartition) -> int:
        # Until the leader has acknowledged a batch of this producer id and epoch it accepts
        # any first sequence (Kafka's rule for an unknown producer), and Ray may deliver
        # concurrent calls out of order: one batch at a time until then.
        return self._max_in_flight if tp in self._confirmed else 1

    def _next_linger_wait(self) -> float | None:
        # Held batches wait for a completion, which notifies the condition anyway.
        lingering = [b.created for b in self._open.values() if not self._held(b)]
        now = time.monotonic()
        # Idle: new work, completions and close() all notify the condition.
        wake = min(lingering) + self._linger if lingering else now + 0.5
        return max(0.0005, min(wake, self._next_deadline) - now)

    def _expire_lingering(self) -> None:
        now = time.monotonic()
        for batch in [b for b in self._open.values() if now - b.created >= self._linger and not self._held(b)]:
            self._close_batch(batch)

    def _held(self, batch: _Batch) -> bool:
        """Whether an open batch keeps filling past batch.size and linger.ms (idempotence only).

        An idempotent producer has at most five unacknowledged batches per partition (the
        broker's dedup window), so while a partition's window is full and a sealed batch
        already waits, sealing more small batches gains nothing: the open one grows
        instead, up to half of max.request.size, and goes as one batch when the window
        opens. This keeps acks=all throughput with small batch.size values.
        """
        if not self._idempotent or batch.size >= self._grow_limit:
            return False
        tp = batch.tp
        return len(self._unacked[tp]) >= self._max_in_flight and bool(self._ready.get(tp))

    def _take_expired(self) -> list[_Batch]:
        """Queued batches older than delivery.timeout.ms, taken out to fail (Kafka's
        RecordAccumulator.expiredBatches). A partition's queue is in creation order (retries
        go back in sequence order), so only its head needs a look."""
        oldest = time.monotonic() - self._delivery_timeout
        expired = []
        for queue in self._ready.values():
            while queue and queue[0].created < oldest:
                expired.append(queue.popleft())
        return expired

    def _take_doomed(self) -> tuple[list[_Batch], BaseException | None]:
        """Queued batches of a transaction in an error state (or being aborted): they fail."""
        if not self._transactional:
            return [], None
        error = self._txn.failed
        if error is None:
            return [], None
        doomed = []
        for queue in self._ready.values():
            doomed.extend(queue)
            queue.clear()
        return doomed, error

    def _maybe_bump_epoch(self) -> bool:
        """An idempotent producer restarts its sequences under a new epoch once nothing is in
        flight after a sequenced batch failed; True when a new producer id is needed."""
        txn = self._txn
        if not (self._idempotent and not self._transactional and txn.epoch_bump_needed):
            return False
        if self._requests_in_flight or self._unresolved:
            return False
        bumped = txn.bump_idempotent_epoch()
        self._unacked.clear()
        self._confirmed.clear()
        for queue in self._ready.values():
            for batch in queue:
                batch.base_sequence = -1
                batch.stamped = False
        logger.info("producer %d: sequences restart under epoch %d", txn.producer_id, txn.epoch)
        return not bumped

    def _drain(self) -> tuple[list[tuple[TopicPartition, list[_Batch], int, Order | None]], list[TopicPartition]]:
        """Take ready batches, several per partition up to max.request.size per call.

        With idempotence a partition has at most max.in.flight (<= 5) unacknowledged
        batches, each batch gets its sequence here, in order, and a batch being retried
        goes alone (the broker answers a duplicate for its whole request).
        """
        requests: list[tuple[TopicPartition, list[_Batch], int, Order | None]] = []
        new_partitions: list[TopicPartition] = []
        idempotent = self._idempotent
        txn = self._txn
        if idempotent:
            if not txn.has_producer_id:
                return requests, new_partitions
            if self._transactional:
                if txn.failed is not None:
                    return requests, new_partitions
            elif txn.epoch_bump_needed:
                return requests, new_partitions
        partitions = txn.partitions if self._transactional else None
        for tp, queue in self._ready.items():
            if not queue or tp in self._muted:
                continue
            if partitions is not None and tp not in partitions:
                if not self._adding_partitions:
                    new_partitions.append(tp)
                continue
            while queue and self._can_send(tp, queue):
                batches, size = [], 0
                if idempotent and queue[0].base_sequence >= 0:
                    batches.append(queue.popleft())  # a retry goes alone
                else:
                    room = self._window(tp) - len(self._unacked[tp]) if idempotent else self._max_request
                    while (
                        queue
                        and len(batches) < room
                        and (not batches or size + len(queue[0].data) <= self._max_request)
                        and queue[0].base_sequence < 0
                    ):
                        batch = queue.popleft()
                        batches.append(batch)
                        size += len(batch.data)
                if idempotent:
                    unacked = self._unacked[tp]
                    for batch in batches:
                        if batch.base_sequence < 0:
                            batch.base_sequence = txn.next_sequence(tp, batch.records)
                            batch.stamped = False
                            unacked.append(batch)
                    weight, order = len(batches), None
                else:
                    weight = 1
                    turn = self._next_turn[tp]
                    self._next_turn[tp] = turn + 1
                    open_turns = self._open_turns[tp]
                    open_turns.append(turn)
                    order = ProduceOrder(self._session, turn, open_turns[0])
                self._in_flight[tp] += weight
                self._requests_in_flight += 1
                requests.append((tp, batches, weight, order))
        if new_partitions:
            self._adding_partitions = True
        return requests, new_partitions

    def _fetch_producer_id(self) -> None:
        """Get the idempotent producer's id and epoch; on failure the queued batches fail."""
        txn = self._txn
        try:
            try:
                txn.coordinator()
            except CoordinatorNotAvailableError:
                if self._idempotence_explicit:
                    raise
                # A cluster launched before transactions existed: carry on without.
                logger.warning("no transaction coordinator in this cluster: idempotence is off for this producer")
                with self._lock:
                    self._idempotent = False
                    self._wakeup.notify_all()
                return
            txn.init_producer_id()
        except Exception as exc:  # noqa: BLE001 - reported on the batches
            error = as_kafka_error(exc)
            logger.warning("could not get a producer id: %s", error)
            with self._lock:
                failed = [b for queue in self._ready.values() for b in queue]
                for queue in self._ready.values():
                    queue.clear()
            for batch in failed:
                self._finish(batch, -1, -1, error)
            return
        with self._lock:
            self._wakeup.notify_all()

    def _add_partitions_to_txn(self, partitions: list[TopicPartition]) -> None:
        """One add_partitions_to_txn call for every partition new to the transaction."""
        txn = self._txn
        try:
            ref = txn.coordinator().add_partitions_to_txn.remote(
                AddPartitionsToTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, tuple(partitions))
            )
        except Exception as exc:  # noqa: BLE001 - handled like a failed call
            self._on_partitions_added(partitions, exc)
            return
        ref.future().add_done_callback(lambda fut, p=partitions: self._on_partitions_added(p, fut))

    def _on_partitions_added(self, partitions: list[TopicPartition], outcome: Any) -> None:
        error: BaseException | None = None
        if isinstance(outcome, BaseException):
            error = outcome
        else:
            try:
                outcome.result()
            except BaseException as exc:  # noqa: BLE001 - sorted below
                error = exc
        if error is None:
            self._txn.add_partitions(partitions)
        else:
            error = as_kafka_error(error)
            if isinstance(error, KafkaError) and error.retriable and self._txn.failed is None:
                logger.debug("add_partitions_to_txn %s: retrying after %s", partitions, error)
                threading.Timer(self._backoff, self._add_partitions_to_txn, args=(partitions,)).start()
                return
            self._transaction_call_failed(error)
        with self._lock:
            self._adding_partitions = False
            self._wakeup.notify_all()

    def _send(self, tp: TopicPartition, batches: list[_Batch], weight: int, order: Order | None) -> None:
        txn = self._txn
        for batch in batches:
            batch.attempts += 1
            if batch.base_sequence >= 0 and not batch.stamped:
                batch.data = _stamp(batch.data, txn.producer_id, txn.epoch, batch.base_sequence, self._transactional)
                batch.stamped = True
        request = _Request(batches, weight, order, min(b.created for b in batches) + self._delivery_timeout)
        try:
            leader = self._metadata.leader(tp)
            data = batches[0].data if len(batches) == 1 else b"".join(b.data for b in batches)
            ref = self._produce(leader, data, order)
        except Exception as exc:  # metadata errors: treat like a failed call
            self._push_completion(request, exc)
            return
        with self._lock:
            self._awaiting.add(request)
            self._unresolved += 1
            if request.deadline < self._next_deadline:
                self._next_deadline = request.deadline
        ref.future().add_done_callback(lambda fut, r=request: self._on_resolved(r, fut))

    def _produce(self, leader: Any, data: bytes, order: Order | None = None) -> Any:
        """One produce call to a partition leader (an ObjectRef); tests wrap it to lose answers."""
        return leader.leader_handle.produce.remote(
            ProduceRequest(data, self._acks, self._request_timeout_ms, leader.leader_epoch, AppendOrigin.CLIENT, order)
        )

    def _on_resolved(self, request: _Request, future: Any) -> None:
        with self._lock:
            self._unresolved -= 1
            if not self._unresolved:
                self._wakeup.notify_all()  # an epoch bump or an abort may wait for this
        self._push_completion(request, future)

    def _push_completion(self, request: _Request, outcome: Any) -> None:
        with self._lock:
            if request.answered:
                return  # expired already: this late answer changes nothing
            request.answered = True
            self._awaiting.discard(request)
            self._completions.append((request.batches, request.weight, request.order, outcome))
            self._wakeup.notify_all()

    def _expire_calls(self) -> None:
        """Fail the calls whose oldest batch passed delivery.timeout.ms while in flight, every
        batch of the call with it (Kafka's in-flight expiry, KIP-91). Caller holds the lock."""
        now = time.monotonic()
        if now < self._next_deadline:
            return
        next_deadline = float("inf")
        for request in list(self._awaiting):
            if request.deadline <= now:
                request.answered = True
                self._awaiting.discard(request)
                self._completions.append((request.batches, request.weight, request.order, _EXPIRED_IN_FLIGHT))
            elif request.deadline < next_deadline:
                next_deadline = request.deadline
        self._next_deadline = next_deadline

    def _complete(self, batches: list[_Batch], weight: int, order: Order | None, outcome: Any) -> None:
        tp = batches[0].tp
        error: BaseException | None
        if isinstance(outcome, BaseException):
            error, result = outcome, None
        else:
            try:
                result, error = outcome.result(), None
            except BaseException as exc:  # noqa: BLE001 - Ray errors are re-raised below
                result, error = None, exc
        with self._lock:
            self._in_flight[tp] -= weight
            self._requests_in_flight -= 1
            if order is not None:
                self._open_turns[tp].remove(order.number)
            if not self._requests_in_flight:
                self._wakeup.notify_all()
        if outcome is _EXPIRED_IN_FLIGHT:
            now = time.monotonic()
            for batch in batches:
                self._finish(batch, -1, -1, _expired(batch, now, "no answer from the leader yet"))
            return
        if error is None:
            offset = result.base_offset
            for batch in batches:
                self._finish(batch, offset, result.log_append_time_ms, None)
                offset += batch.records
            return
        error = as_kafka_error(error)
        if self._transactional and isinstance(error, InvalidProducerEpochError):
            # As Kafka's sender: a stale epoch means a newer instance fenced this one.
            error = ProducerFencedError(f"{tp}: this producer was fenced by a newer instance: {error}")
        retry = isinstance(error, KafkaError) and error.retriable
        if isinstance(error, OutOfOrderSequenceError) and batches[0].base_sequence >= 0:
            # A gap because an earlier batch is being retried: resend after it, in order.
            with self._lock:
                unacked = self._unacked.get(tp)
                retry = bool(unacked) and unacked[0] is not batches[0]
        if retry:
            self._metadata.invalidate(tp.topic)
        now = time.monotonic()
        failed = []
        with self._lock:
            for batch in reversed(batches):
                if retry and now - batch.created <= self._delivery_timeout and batch.attempts <= self._retries:
                    self._ready[tp].appendleft(batch)
                else:
                    failed.append(batch)
            if retry:
                # Hold the partition until its other calls answer, then resend in order.
                self._muted.add(tp)
                ordered = sorted(self._ready[tp], key=lambda b: b.seq)
                self._ready[tp] = collections.deque(ordered)
        for batch in reversed(failed):
            final = error  # a retriable error after the last retry, as Kafka reports it
            if retry and now - batch.created > self._delivery_timeout:
                final = _expired(batch, now, error)
            self._finish(batch, -1, -1, final)
        if retry:
            threading.Timer(self._backoff, self._unmute, args=(tp,)).start()

    def _unmute(self, tp: TopicPartition) -> None:
        with self._lock:
            if self._in_flight[tp] > 0:
                threading.Timer(self._backoff, self._unmute, args=(tp,)).start()
                return
            self._muted.discard(tp)
            self._wakeup.notify_all()

    def _finish(self, batch: _Batch, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        with self._lock:
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
        if error is not None and self._transactional:
            self._txn.on_error(error)
        batch.result.done(base_offset, log_append_time, error)


def _expired(batch: _Batch, now: float, cause: BaseException | str | None = None) -> KafkaTimeoutError:
    """The error of a batch past delivery.timeout.ms (in Kafka's words)."""
    waited = (now - batch.created) * 1000
    reason = f" ({cause})" if cause is not None else ""
    return KafkaTimeoutError(
        f"Expiring {batch.records} record(s) for {batch.tp}: {waited:.0f} ms has passed since batch creation{reason}"
    )


def _stamp(data: bytes, producer_id: int, epoch: int, base_sequence: int, transactional: bool) -> bytes:
    """The batch with its producer id, epoch and base sequence (and transactional flag) set
    and its CRC recomputed: one header patch per batch, never per record."""
    buf = bytearray(data)
    _PRODUCER_FIELDS.pack_into(buf, PRODUCER_ID_OFFSET, producer_id, epoch, base_sequence)
    if transactional:
        buf[_ATTRIBUTES_LOW_BYTE] |= TRANSACTIONAL_MASK
    struct.pack_into(">I", buf, CRC_OFFSET, _crc32c.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


class BulkSendResult:
    """The outcome of ``send_many``: one entry per batch, in order."""

    def __init__(self, batches: list[tuple[_BatchResult, int]]) -> None:
        self._batches = batches

    def __len__(self) -> int:
        return sum(count for _, count in self._batches)

    def get(self, timeout: float | None = None) -> list[tuple[TopicPartition, int, int]]:
        """Wait for every batch; returns (partition, base offset, record count) per batch."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for result, count in self._batches:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result.event.wait(remaining):
                raise KafkaTimeoutError(f"bulk send not acknowledged within {timeout}s")
            if result.error is not None:
                raise result.error
            out.append((result.tp, result.base_offset, count))
        return out

    def done(self) -> bool:
        """Whether every batch has an outcome."""
        return all(result.event.is_set() for result, _ in self._batches)


def _as_list(values: Any) -> list:
    if isinstance(values, list):
        return values
    if hasattr(values, "to_pylist"):  # pyarrow arrays and chunked arrays
        return values.to_pylist()
    return list(values)


def _average_size(values: list) -> int:
    sample = values[:64]
    return sum(len(v) for v in sample if v is not None) // max(1, len(sample))
