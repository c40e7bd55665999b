"""The Sender (Kafka's name): the producer's background thread that ships batches to leaders.

Each turn it drains the accumulator's ready batches, makes each partition's one
``ProduceRequest`` (``actors/protocol.py``; several batches up to ``max.request.size``), and
sends every partition a host leads in one call to that host (``append_records``: Kafka's
sender makes one ProduceRequest per broker per drain), since an actor call costs about a
millisecond whatever it carries. Answers come back through Ray futures, one answer per
partition, and are handled on this thread: a success completes the batches' futures; a retriable error refreshes metadata and puts
the batches back with a ``retry_at`` of ``retry.backoff.ms`` on, as long as
``can_retry()`` (``retries`` and ``delivery.timeout.ms``), else they fail. The thread
sleeps until told, or until the next linger, retry or expiry time: nothing else wakes it.

The leader bounds its own waits by ``request.timeout.ms`` and Ray reports every call's
end (an answer, or the actor's death), so a call is never resent while it may still be
appended; a call still unanswered when its oldest batch reaches ``delivery.timeout.ms``
fails its batches then (Kafka's expiry of in-flight batches, KIP-91) and its late answer
is ignored. Ordering: a partition whose call failed is muted until its other calls have
answered, then resent in order. Failures of a leader are sticky (its broker died, or it lost
leadership), so this keeps per-partition order across retries.

Idempotence: the sender gets a producer id and epoch from the transaction coordinator
when it starts, builds each batch when it first goes out with the producer id, epoch and
sequence set first (``ProducerBatch.close``: one build and one CRC per batch; a retry
sends the same bytes), and restarts the sequences under a new epoch once nothing is in
flight after a sequenced batch failed (KIP-360). The broker answers a duplicate with the
original offsets, so a retried batch goes alone in its request. Without idempotence each
call of a partition carries its number (``ProduceOrder``, from ``ProduceTurns``) so that
the leader appends concurrent calls in send order.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from actors.protocol import AddPartitionsToTxnRequest, AppendOrigin, ProduceOrder, ProduceRequest, ProduceTurns
from actors.protocol_broker import PartitionRequests
from actors.types import TopicPartition
from rayqueue.errors import as_kafka_error
from rayqueue.metadata import MetadataCache
from rayqueue.metrics import ClientMetrics
from rayqueue.producer.accumulator import ProducerBatch, RecordAccumulator
from rayqueue.producer.transaction_manager import TransactionManager, retry_backoff
from storage.errors import (
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceError,
    ProducerFencedError,
)

logger = logging.getLogger(__name__)

_ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}
# The outcome _complete gets for a call that passed delivery.timeout.ms unanswered.
_EXPIRED_IN_FLIGHT = KafkaTimeoutError("delivery.timeout.ms passed while the produce call was in flight")
_NEVER = float("inf")


class InFlightRequest:
    """One partition's request in flight (in its host's call): its batches, and when the
    sender stops waiting for it (its oldest batch's delivery.timeout.ms)."""

    __slots__ = ("batches", "weight", "order", "deadline", "answered", "sent")

    def __init__(self, batches: list[ProducerBatch], weight: int, order: ProduceOrder | None, deadline: float) -> None:
        self.batches, self.weight, self.order, self.deadline = batches, weight, order, deadline
        self.sent = time.monotonic()  # for request-latency
        self.answered = False  # the first outcome (answer or expiry) wins; a later one is dropped


class Sender:
    """The thread that drains the accumulator, sends produce calls and handles their outcomes."""

    def __init__(
        self,
        config: Mapping[str, Any],
        accumulator: RecordAccumulator,
        metadata: MetadataCache,
        txn: TransactionManager,
        idempotence_explicit: bool,
        metrics: ClientMetrics,
    ) -> None:
        self._acc = accumulator
        self._metrics = metrics
        # The producer's principal, checked by the leaders against the ACLs (None: a super user).
        self.principal: str | None = None
        self._lock = accumulator.lock  # one lock for the accumulator and the sender
        self._wakeup = accumulator.wakeup
        self._metadata = metadata
        self._txn = txn
        self._acks = _ACKS[config["acks"]]
        self._request_timeout_ms = config["request.timeout.ms"]
        self._retries = config["retries"]
        self._backoff = config["retry.backoff.ms"] / 1000
        self._delivery_timeout = config["delivery.timeout.ms"] / 1000
        self._max_block = config["max.block.ms"] / 1000
        self._transactional = config["transactional.id"] is not None
        self._idempotence_explicit = idempotence_explicit
        # Without idempotence nothing on the broker orders a partition's concurrent calls
        # (Kafka has its TCP connection; Ray may start an async actor's calls in any order).
        # Each call carries (session, its number, the oldest number still unanswered), and
        # the replica appends them in number order (see PartitionReplica.produce).
        self._turns = ProduceTurns(uuid.uuid4().hex)
        self._completions: collections.deque[tuple[list[ProducerBatch], int, ProduceOrder | None, Any]] = (
            collections.deque()
        )
        self._requests_in_flight = 0
        self._awaiting: set[InFlightRequest] = set()  # calls sent and neither answered nor expired
        # Calls whose Ray future has not resolved, expired or not: an expired call may still
        # be appended, so sequences restart under a new epoch (and a transaction aborts) only
        # once this is 0.
        self._unresolved = 0
        self._next_deadline = _NEVER  # no earlier than the earliest deadline in _awaiting
        self._adding_partitions = False  # an add_partitions_to_txn call is under way (or waits to retry)
        self._partitions_retry: list[TopicPartition] | None = None  # refused ones, sent again at _partitions_retry_at
        self._partitions_retry_at = _NEVER
        self._closed = False
        self._thread = threading.Thread(target=self.run, name=f"{config['client.id']}-sender", daemon=True)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sender thread."""
        self._thread.start()

    def initiate_close(self) -> None:
        """Let the thread end once nothing is left to complete."""
        with self._lock:
            self._closed = True
            self._wakeup.notify_all()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end."""
        self._thread.join(timeout=timeout)

    def can_retry(self, batch: ProducerBatch, now: float) -> bool:
        """Whether a batch that failed with a retriable error may go again: it has retries
        left and is within delivery.timeout.ms of its creation (Kafka's Sender.canRetry)."""
        return now - batch.created <= self._delivery_timeout and batch.attempts <= self._retries

    # -- the thread -----------------------------------------------------------------------

    def run(self) -> None:
        """The sender loop: wait for work, then complete, expire, drain and send."""
        acc = self._acc
        if acc.idempotent and not self._transactional:
            self._fetch_producer_id()  # at once, as Kafka's sender does: the first send need not wait
        while True:
            with self._lock:
                while not self._has_work():
                    if (
                        self._closed
                        and not self._completions
                        and not self._requests_in_flight
                        and self._partitions_retry is None
                    ):
                        return
                    self._wakeup.wait(self._next_wait())
                    acc.expire_lingering(time.monotonic())
                now = time.monotonic()
                acc.expire_lingering(now)
                self._expire_calls(now)
                completions = list(self._completions)
                self._completions.clear()
                doomed, doom_error = self._take_doomed()
                expired = acc.take_expired(now)
                need_producer_id = self._maybe_bump_epoch() or (
                    acc.idempotent and not self._transactional and not self._txn.has_producer_id and acc.has_queued()
                )
                retry_partitions = None
                if now >= self._partitions_retry_at:
                    retry_partitions, self._partitions_retry = self._partitions_retry, None
                    self._partitions_retry_at = _NEVER
                requests, new_partitions = self._drain(now)
            for batches, weight, order, outcome in completions:
                self._complete(batches, weight, order, outcome)
            for batch in doomed:
                self.finish(batch, -1, -1, doom_error)
            for batch in expired:
                self.finish(batch, -1, -1, batch.timeout_error(time.monotonic()))
            if need_producer_id:
                self._fetch_producer_id()
            if retry_partitions:
                self._add_partitions_to_txn(retry_partitions)
            if new_partitions:
                self._add_partitions_to_txn(new_partitions)
            if requests:
                self._send(requests)

    def _has_work(self) -> bool:
        if self._completions:
            return True
        now = time.monotonic()
        if now >= self._next_deadline or now >= self._partitions_retry_at:
            return True  # to expire a call, or to add partitions again
        acc = self._acc
        if acc.has_expired(now) or acc.has_lingered(now):
            return True
        if acc.idempotent:
            txn = self._txn
            if txn.failed is not None and self._transactional:
                return acc.has_queued()  # to fail them
            if not txn.has_producer_id:
                return not self._transactional and acc.has_queued()
            if txn.epoch_bump_needed and not self._transactional:
                return not self._requests_in_flight and not self._unresolved
        return acc.has_sendable(now, self._adding_partitions) or acc.has_partitions_to_add(self._adding_partitions)

    def _next_wait(self) -> float:
        now = time.monotonic()
        wake = min(self._acc.next_wake(now), self._next_deadline, self._partitions_retry_at)
        return max(0.0005, wake - now)

    def _take_doomed(self) -> tuple[list[ProducerBatch], BaseException | None]:
        """Queued batches of a transaction in an error state (or being aborted): they fail."""
        if not self._transactional:
            return [], None
        error = self._txn.failed
        if error is None:
            return [], None
        return self._acc.take_queued(), error

    def _maybe_bump_epoch(self) -> bool:
        """An idempotent producer restarts its sequences under a new epoch once nothing is in
        flight after a sequenced batch failed; True when a new producer id is needed."""
        txn = self._txn
        if not (self._acc.idempotent and not self._transactional and txn.epoch_bump_needed):
            return False
        if self._requests_in_flight or self._unresolved:
            return False
        bumped = txn.bump_idempotent_epoch()
        self._acc.reset_sequences()
        logger.info("producer %d: sequences restart under epoch %d", txn.producer_id, txn.epoch)
        return not bumped

    def _drain(
        self, now: float
    ) -> tuple[list[tuple[TopicPartition, list[ProducerBatch], int, ProduceOrder | None]], list[TopicPartition]]:
        """The accumulator's drain, each call numbered for its partition when there is no
        idempotence (caller holds the lock)."""
        drained, new_partitions = self._acc.drain(now, self._adding_partitions)
        requests = []
        idempotent = self._acc.idempotent
        for tp, batches, weight in drained:
            order = None
            if not idempotent:
                order = self._turns.take(tp)
            requests.append((tp, batches, weight, order))
        self._requests_in_flight += len(requests)
        if new_partitions:
            self._adding_partitions = True
        return requests, new_partitions

    # -- producer ids and transactions ----------------------------------------------------

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
                    self._acc.idempotent = False
                    self._wakeup.notify_all()
                return
            txn.init_producer_id()
        except Exception as exc:  # noqa: BLE001 - reported on the batches
            error = as_kafka_error(exc)
            logger.warning("could not get a producer id: %s", error)
            with self._lock:
                failed = self._acc.take_queued()
            for batch in failed:
                self.finish(batch, -1, -1, error)
            return
        with self._lock:
            self._wakeup.notify_all()

    def _add_partitions_to_txn(self, partitions: list[TopicPartition]) -> None:
        """One add_partitions_to_txn call for every partition new to the transaction."""
        txn = self._txn
        try:
            ref = txn.coordinator().add_partitions_to_txn.remote(
                AddPartitionsToTxnRequest(
                    txn.transactional_id, txn.producer_id, txn.epoch, tuple(partitions), txn.principal
                )
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
                with self._lock:  # still adding: the sender sends them again after the backoff
                    self._partitions_retry = partitions
                    self._partitions_retry_at = time.monotonic() + retry_backoff(error, self._backoff)
                    self._wakeup.notify_all()
                return
            self._txn.handle_failed_call(error)
        with self._lock:
            self._adding_partitions = False
            self._wakeup.notify_all()

    def wait_for_partition_additions(self) -> None:
        """Wait (max.block.ms) until no add_partitions_to_txn call is under way."""
        deadline = time.monotonic() + self._max_block
        with self._lock:
            while self._adding_partitions:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError("partitions were not added to the transaction within max.block.ms")
                self._wakeup.wait(remaining)

    def wait_until_idle(self) -> None:
        """Wait (max.block.ms) until no produce call (an expired one included: it may still be
        appended) and no add_partitions_to_txn call is in flight."""
        deadline = time.monotonic() + self._max_block
        with self._lock:
            while self._requests_in_flight or self._unresolved or self._adding_partitions or self._completions:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError("in-flight batches did not finish within max.block.ms")
                self._wakeup.wait(min(remaining, 0.1))

    # -- produce calls --------------------------------------------------------------------

    def _send(self, requests: list[tuple[TopicPartition, list[ProducerBatch], int, ProduceOrder | None]]) -> None:
        """Send the drained partitions' requests: one call per leader host, carrying every
        partition it leads."""
        txn = self._txn
        by_host: dict[Any, tuple[Any, list[InFlightRequest], list[tuple[str, int, ProduceRequest]]]] = {}
        for tp, batches, weight, order in requests:
            for batch in batches:
                batch.attempts += 1
                batch.close(txn.producer_id, txn.epoch, self._transactional)
            request = InFlightRequest(batches, weight, order, min(b.created for b in batches) + self._delivery_timeout)
            self._metrics.batches_sent(batches, request.sent)  # once per call and batch, never per record
            try:
                leader = self._metadata.leader(tp)
                data = batches[0].data if len(batches) == 1 else b"".join(b.data for b in batches)
                produce = self.produce_request(leader.leader_epoch, data, order)
            except Exception as exc:  # metadata errors: treat like a failed call
                self._push_completion(request, exc)
                continue
            ref = leader.leader_handle
            host = by_host.setdefault(ref.host_key, (ref.host, [], []))
            host[1].append(request)
            host[2].append((tp.topic, tp.partition, produce))
        for handle, in_flight, entries in by_host.values():
            self._send_to_host(handle, in_flight, PartitionRequests(tuple(entries)))

    def _send_to_host(self, host: Any, in_flight: list[InFlightRequest], request: PartitionRequests) -> None:
        try:
            ref = self.append_records(host, request)
        except Exception as exc:  # noqa: BLE001 - a call that could not be made: every partition's error
            for partition_request in in_flight:
                self._push_completion(partition_request, exc)
            return
        with self._lock:
            for partition_request in in_flight:
                self._awaiting.add(partition_request)
                if partition_request.deadline < self._next_deadline:
                    self._next_deadline = partition_request.deadline
            self._unresolved += 1
        ref.future().add_done_callback(lambda fut, r=in_flight: self._on_resolved(r, fut))

    def produce_request(self, leader_epoch: int, data: bytes, order: ProduceOrder | None = None) -> ProduceRequest:
        """One partition's ProduceRequest of ``data`` (its batches) for a leader of ``leader_epoch``."""
        return ProduceRequest(
            data,
            self._acks,
            self._request_timeout_ms,
            leader_epoch,
            AppendOrigin.CLIENT,
            order,
            self.principal,
            # The leader verifies a transaction's first batch with the coordinator (KIP-890).
            self._txn.transactional_id if self._transactional else None,
        )

    def append_records(self, host: Any, request: PartitionRequests) -> Any:
        """One call to a leader host carrying its partitions' requests (an ObjectRef of one
        answer per partition); tests replace it to lose answers."""
        return host.append_records.remote(request)

    def _on_resolved(self, requests: list[InFlightRequest], future: Any) -> None:
        """A host's call ended: each partition's answer (or the call's error) to its request."""
        now = time.monotonic()
        self._metrics.request_answered(now - requests[0].sent, now)
        try:
            answers = future.result()
            if type(answers) is not list or len(answers) != len(requests):
                raise KafkaError(f"a host answered {len(requests)} partitions with {answers!r:.80}")
        except BaseException as exc:  # noqa: BLE001 - every partition's outcome (sorted in _complete)
            answers = [exc] * len(requests)
        with self._lock:
            self._unresolved -= 1
            if not self._unresolved:
                self._wakeup.notify_all()  # an epoch bump or an abort may wait for this
        for request, answer in zip(requests, answers, strict=True):
            self._push_completion(request, answer)

    def _push_completion(self, request: InFlightRequest, outcome: Any) -> None:
        with self._lock:
            if request.answered:
                return  # expired already: this late answer changes nothing
            request.answered = True
            self._awaiting.discard(request)
            self._completions.append((request.batches, request.weight, request.order, outcome))
            self._wakeup.notify_all()

    def _expire_calls(self, now: float) -> None:
        """Fail the calls whose oldest batch passed delivery.timeout.ms while in flight, every
        batch of the call with it (Kafka's in-flight expiry, KIP-91). Caller holds the lock."""
        if now < self._next_deadline:
            return
        next_deadline = _NEVER
        for request in list(self._awaiting):
            if request.deadline <= now:
                request.answered = True
                self._awaiting.discard(request)
                self._completions.append((request.batches, request.weight, request.order, _EXPIRED_IN_FLIGHT))
            elif request.deadline < next_deadline:
                next_deadline = request.deadline
        self._next_deadline = next_deadline

    def _complete(self, batches: list[ProducerBatch], weight: int, order: ProduceOrder | None, outcome: Any) -> None:
        """A partition's request ended with ``outcome``: its ProduceResponse, or an error."""
        tp = batches[0].tp
        error: BaseException | None
        if isinstance(outcome, BaseException):
            error, result = outcome, None
        else:
            result, error = outcome, None
        with self._lock:
            self._acc.request_done(tp, weight)
            self._requests_in_flight -= 1
            if order is not None:
                self._turns.done(tp, order.number)
            if not self._requests_in_flight:
                self._wakeup.notify_all()
        if outcome is _EXPIRED_IN_FLIGHT:
            now = time.monotonic()
            for batch in batches:
                self.finish(batch, -1, -1, batch.timeout_error(now, "no answer from the leader yet"))
            return
        if error is None:
            offset = result.base_offset
            for batch in batches:
                self.finish(batch, offset, result.log_append_time_ms, None)
                offset += batch.records
            return
        error = as_kafka_error(error)
        if self._transactional and isinstance(error, InvalidProducerEpochError):
            # As Kafka's sender: a stale epoch means a newer instance fenced this one.
            error = ProducerFencedError(f"{tp}: this producer was fenced by a newer instance: {error}")
        retry = isinstance(error, KafkaError) and error.retriable
        if isinstance(error, OutOfOrderSequenceError) and batches[0].base_sequence >= 0:
            # A gap because an earlier batch is being retried: resend after it, in order.
            retry = self._acc.is_behind_unacked(tp, batches[0])
        if retry:
            self._metadata.invalidate(tp.topic)
        now = time.monotonic()
        failed = batches
        if retry:
            again, failed = [], []
            with self._lock:
                for batch in batches:
                    batch.last_error = error  # told if the batch expires (Kafka: the batch's last error)
                    (again if self.can_retry(batch, now) else failed).append(batch)
                self._acc.reenqueue(tp, again, now + self._backoff)
            if again:
                # Once per failed call, as Kafka's Sender logs each retry.
                logger.warning(
                    "Got error produce response on topic-partition %s, retrying (%d attempts left). Error: %s",
                    tp,
                    max(0, self._retries - max(b.attempts for b in again) + 1),
                    error,
                )
        for batch in failed:
            final = error  # a retriable error after the last retry, as Kafka reports it
            if retry and now - batch.created > self._delivery_timeout:
                final = batch.timeout_error(now, error)
            self.finish(batch, -1, -1, final)

    def finish(self, batch: ProducerBatch, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        """Give a batch its outcome: free its place in the accumulator, tell the transaction
        of an error, complete the records' futures."""
        self._acc.deallocate(batch, error)
        if error is not None:
            self._metrics.records_failed(batch.records, time.monotonic())
            if self._transactional:
                self._txn.on_error(error)
        batch.result.done(base_offset, log_append_time, error)
