"""The Producer: Kafka's producer API over partition leader actors.

``send()`` serializes and partitions a record (murmur2 of the key as Kafka's Java client,
sticky partitioning for null keys) and appends it to its partition's open batch in the
accumulator (``accumulator.py``), returning a future (``futures.py``) at once.
``send_many()`` is the bulk path: it encodes whole batches from a list or Arrow array in
one go. A background sender thread (``sender.py``) ships sealed batches to the partition
leaders as ProduceRequests and completes the futures, retrying within
``delivery.timeout.ms``.

Idempotence is on by default, as in Kafka 3.x: batches carry a producer id, epoch and
per-partition sequence numbers, so that retries never duplicate nor reorder. With a
``transactional.id`` the producer is transactional: see ``init_transactions()``; the
state machine lives in ``transaction_manager.py``.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from actors.protocol import AddOffsetsToTxnRequest, EndTxnRequest, TxnOffsetCommitRequest, principal_field
from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from rayqueue.config import PRODUCER_CONFIG, producer_config
from rayqueue.connection import ClusterHandle, connect
from rayqueue.errors import TransactionAbortedError, as_kafka_error
from rayqueue.metadata import MetadataCache
from rayqueue.metrics import ClientMetrics
from rayqueue.partitioner import StickyPartitioner, partition_for_key, partitions_for_keys
from rayqueue.producer.accumulator import RecordAccumulator
from rayqueue.producer.futures import BulkSendResult, FutureRecordMetadata, RecordMetadata
from rayqueue.producer.sender import Sender
from rayqueue.producer.transaction_manager import TransactionManager, coordinator_call
from storage.errors import (
    CoordinatorNotAvailableError,
    InvalidConfigError,
    KafkaError,
    KafkaTimeoutError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)


class Producer:
    """A thread-safe Kafka-style producer. Create with ``rayqueue.Producer(cluster, **config)``."""

    def __init__(
        self,
        cluster: ClusterHandle | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        principal: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = producer_config(config, **kwargs)
        self._cluster = cluster if cluster is not None else connect()
        cfg = self.config
        self._max_request = cfg["max.request.size"]
        self._buffer_memory = cfg["buffer.memory"]
        self._max_block = cfg["max.block.ms"] / 1000
        self._backoff = cfg["retry.backoff.ms"] / 1000
        self._key_serializer = cfg["key.serializer"]
        self._value_serializer = cfg["value.serializer"]
        self._user_partitioner = cfg["partitioner"]
        self._ignore_keys = cfg["partitioner.ignore.keys"]
        # ``principal`` (``User:alice``): every request carries it and the actors check it
        # against the cluster's ACLs with Kafka's rules (WRITE on the topic to produce,
        # CREATE to auto-create it, the transactional id's and the cluster's for
        # transactions and idempotence); without one, a super user.
        principal = principal_field(principal)
        self._metadata = MetadataCache(
            self._cluster.controller, cfg["metadata.max.age.ms"], auto_create=True, principal=principal
        )
        self._sticky = StickyPartitioner()
        self._sticky_current = self._sticky.current_by_topic
        # send()'s checks, precomputed: one size limit, and whether null keys go sticky
        # without a user partitioner (the usual case, decided without a method call).
        self._max_record_size = min(self._max_request, self._buffer_memory)
        self._plain_sticky = self._user_partitioner is None
        self._serializing = self._key_serializer is not None or self._value_serializer is not None
        self._closed = False
        # Idempotence and transactions (see transaction_manager.py).
        idempotence_explicit = (
            "enable.idempotence" in {PRODUCER_CONFIG.canonical(k) for k in {**(config or {}), **kwargs}}
            or cfg["transactional.id"] is not None
        )
        self._transactional = cfg["transactional.id"] is not None
        self._guarded = self._transactional  # send() checks state: closed, or a transaction open
        self._txn = TransactionManager(
            self._cluster, cfg["transactional.id"], cfg["transaction.timeout.ms"], self._backoff, self._max_block
        )
        self._txn.principal = principal
        self._accumulator = RecordAccumulator(cfg, self._metadata, self._sticky, self._txn, cfg["enable.idempotence"])
        self._append = self._accumulator.append  # bound once: send() calls it for every record
        self._metrics = ClientMetrics(
            "producer", cfg, self._cluster.namespace, self._cluster.config.get("rayqueue.metrics.enabled", True)
        )
        self._sender = Sender(cfg, self._accumulator, self._metadata, self._txn, idempotence_explicit, self._metrics)
        self._sender.principal = principal
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
        future = self._append(topic, partition, key, value, timestamp, headers or (), size)
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
                self._accumulator.append_columns(
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
        pending = self._accumulator.begin_flush()
        deadline = None if timeout is None else time.monotonic() + timeout
        for result in pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result.event.wait(remaining):
                raise KafkaTimeoutError(f"flush did not finish within {timeout}s")

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` (creating it when auto-creation is on)."""
        return list(range(self._metadata.num_partitions(topic)))

    def metrics(self) -> dict[str, float]:
        """Kafka's ``producer-metrics`` of this producer, by name (``record-send-total``,
        ``batch-size-avg``, ``request-latency-max``, ...: ``rayqueue.metrics.PRODUCER_METRICS``)."""
        return self._metrics.snapshot()

    def close(self, timeout: float | None = None) -> None:
        """Flush and stop the sender thread."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = self._guarded = True
            self._sender.initiate_close()
            self._sender.join(timeout=10)
            self._metrics.close()

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
                add = AddOffsetsToTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, group_id, txn.principal)
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
                txn.principal,
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
            txn.handle_failed_call(exc)
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
        self._sender.wait_for_partition_additions()
        self._end_transaction(commit=True)
        txn.complete_transaction()

    def abort_transaction(self) -> None:
        """Abort the current transaction: unsent records fail with TransactionAbortedError,
        records already sent are discarded by read_committed consumers."""
        txn = self._txn
        txn.require_transactional("abort_transaction")
        txn.begin_abort()
        aborted = TransactionAbortedError("the transaction was aborted before this record was sent")
        for batch in self._accumulator.abort_undrained():
            self._sender.finish(batch, -1, -1, aborted)
        self._sender.wait_until_idle()
        self._end_transaction(commit=False)
        if txn.epoch_bump_needed:
            # A batch of the aborted transaction may or may not have been written: restart
            # every sequence under a new epoch (KIP-360) before the next transaction.
            try:
                txn.init_producer_id()
            except Exception as exc:
                txn.on_fatal(as_kafka_error(exc))
                raise
            with self._accumulator.lock:
                self._accumulator.reset_sequences()
        txn.complete_transaction()

    def _end_transaction(self, commit: bool) -> None:
        """EndTxn at the coordinator, when the transaction holds anything; a failure other
        than a timeout (which may be retried) is fatal for this producer."""
        txn = self._txn
        if not txn.started:
            return
        try:
            txn.call("end_txn", EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, commit, txn.principal))
        except KafkaTimeoutError:
            raise
        except Exception as exc:
            txn.handle_failed_call(exc, fatal=True)
            raise

    def _group_coordinator(self) -> Any:
        handle = self._cluster.group_coordinator
        if handle is None:
            from actors.launch import find_actor
            from actors.names import GROUP_COORDINATOR_NAME

            handle = find_actor(GROUP_COORDINATOR_NAME, self._cluster.namespace)
            if handle is None:
                raise CoordinatorNotAvailableError("this cluster has no group coordinator")
        return handle

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- partitioning ---------------------------------------------------------------------

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


def _as_list(values: Any) -> list:
    if isinstance(values, list):
        return values
    if hasattr(values, "to_pylist"):  # pyarrow arrays and chunked arrays
        return values.to_pylist()
    return list(values)
