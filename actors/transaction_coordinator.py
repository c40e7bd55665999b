"""The TransactionCoordinator actor: producer ids, transactional ids and their transactions.

One named, detached, restartable async actor serves the whole cluster (KIP-98).

Producer ids come in blocks from the controller (``allocate_producer_ids``, durable in its
metadata log), so no id is handed out twice, even across restarts of either actor. An
idempotent producer gets a fresh id at epoch 0; a transactional id keeps its producer id
and each ``init_producer_id`` bumps the epoch, fencing older instances (ProducerFenced).

Each transactional id has Kafka's transaction metadata (producer id and epoch, state,
partitions, timeout, start and last-update times) and moves through Kafka's state machine:

    Empty/CompleteCommit/CompleteAbort -> Ongoing -> PrepareCommit -> CompleteCommit
                                                  -> PrepareAbort  -> CompleteAbort

Every transition is a record in the compacted internal topic ``__transaction_state``
(partition = ``abs(javaHashCode(id)) % partitions``, as ``__consumer_offsets`` does for
groups), written with acks=all before it takes effect. A partition is recorded before the
producer writes data to it. Ending a transaction writes PrepareX, then a COMMIT/ABORT marker
to every partition (in parallel, retried until written), tells the group coordinator for
``__consumer_offsets`` partitions, then writes CompleteX. A restarted coordinator replays
the topic before serving (until then: CoordinatorLoadInProgressError) and completes every
PrepareCommit/PrepareAbort it finds. Markers carry the coordinator epoch: the leader epoch
of the id's ``__transaction_state`` partition. Calls for one transactional id run one at a
time (a per-id lock); a transaction open longer than its timeout is aborted with an epoch
bump, so the zombie producer is fenced.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from actors import internal_records as stored
from actors.internal_topic import Coordinator, InternalTopic
from actors.metrics import TICK_S, Recorder
from actors.names import (
    GROUP_COORDINATOR_NAME,
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    offsets_partition_for,
    transaction_partition_for,
)
from actors.protocol import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AllocateProducerIdsRequest,
    CompleteTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    MetadataRequest,
    TransactionResult,
    TransactionState,
    WriteTxnMarkersRequest,
    require,
)
from actors.types import ProducerIdAndEpoch, TopicPartition, TransactionDescription
from storage.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)


NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # producer epochs are int16
PRODUCER_ID_BLOCK_SIZE = 1000
TXN_KEY_VERSION = 0  # Kafka's TransactionLogKey version

_WRITE_TIMEOUT_S = 30.0
_LOCK_WAIT_S = 60.0  # a call waits this long for another call on the same id, then is told to retry
_MARKER_TIMEOUT_MS = 30000
_RETRY_BACKOFF_S = 0.1


def _now_ms() -> int:
    return int(time.time() * 1000)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def transaction_key(transactional_id: str) -> bytes:
    """Key of a transactional id's state record: JSON ``[0, id]``."""
    return _dumps([TXN_KEY_VERSION, transactional_id])


@dataclass
class TransactionMetadata:
    """What the coordinator keeps per transactional id (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = field(default_factory=_now_ms)
    # The id and epoch before the last rotation or bump, to recognise a retried InitProducerId.
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def to_record(self) -> dict[str, Any]:
        """The JSON value written to ``__transaction_state``."""
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_id": self.last_producer_id,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state,
            "partitions": sorted([tp.topic, tp.partition] for tp in self.partitions),
            "start_ms": self.start_ms,
            "last_update_ms": self.last_update_ms,
        }

    @classmethod
    def from_record(cls, transactional_id: str, d: dict[str, Any]) -> TransactionMetadata:
        """Inverse of :meth:`to_record`; ValueError/TypeError/KeyError for a record that is not one."""
        return cls(
            transactional_id,
            stored.field(d, "producer_id", int),
            stored.field(d, "producer_epoch", int),
            stored.field(d, "timeout_ms", int),
            TransactionState(stored.field(d, "state", str)),
            {TopicPartition(t, p) for t, p in stored.topic_partitions(d.get("partitions", []), "partitions")},
            stored.field(d, "start_ms", int, -1),
            stored.field(d, "last_update_ms", int, _now_ms()),
            stored.field(d, "last_producer_id", int, NO_PRODUCER_ID),
            stored.field(d, "last_producer_epoch", int, NO_PRODUCER_EPOCH),
        )

    def copy(self, **changes: Any) -> TransactionMetadata:
        """A copy with ``changes`` (the next state, before it is durable)."""
        values = {**self.__dict__, "partitions": set(self.partitions), **changes}
        return TransactionMetadata(**values)

    def describe(self) -> TransactionDescription:
        """As DescribeTransactions shows it."""
        return TransactionDescription(
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            self.state,
            self.timeout_ms,
            self.start_ms,
            tuple(sorted(self.partitions)),
        )


class TransactionCoordinator(Coordinator):
    """Producer ids and transactions of one rayqueue cluster (see the module docstring)."""

    _kind = "transaction coordinator"

    def __init__(self, namespace: str, config: dict[str, Any]) -> None:
        super().__init__(namespace, config)
        self._topic = InternalTopic(
            TRANSACTION_STATE_TOPIC,
            self._controller_handle,
            self._config["transaction.state.log.num.partitions"],
            self._config["transaction.state.log.replication.factor"],
            min_insync_replicas=self._config["transaction.state.log.min.isr"],
        )
        self._max_timeout_ms = self._config["transaction.max.timeout.ms"]
        self._abort_interval_s = self._config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        self._id_expiration_ms = self._config["transactional.id.expiration.ms"]
        self._txns: dict[str, TransactionMetadata] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._completions: set[asyncio.Task] = set()
        self._group_coordinator: Any = None
        self._leaders: dict[TopicPartition, Any] = {}  # data partitions, for markers
        self._pid_lock: asyncio.Lock | None = None
        self._next_pid = 0
        self._pid_end = 0  # the current block is [_next_pid, _pid_end)
        self._recorder = Recorder(namespace, True) if self._config["rayqueue.metrics.enabled"] else None
        self._skipped = 0  # unreadable __transaction_state records skipped by the load

    # -- lifecycle (the rest is Coordinator's) --------------------------------------------

    def _count(self) -> int:
        return len(self._txns)

    async def _load(self) -> None:
        """Replay ``__transaction_state``, then complete every transaction left in a Prepare
        state. A record it cannot read is skipped, logged and counted (``skipped_records``)."""
        started = time.monotonic()
        records = 0
        skipped = stored.SkippedRecords(TRANSACTION_STATE_TOPIC, self._count_skipped)
        async for p, batch, first in self._topic.replay():
            if batch.is_control:
                continue
            for record in skipped.records(p, batch, first):
                try:
                    self._apply(record.key, record.value)
                except stored.READ_ERRORS as exc:
                    skipped.skip(p, record.offset, exc)
                    continue
                records += 1
        self._skipped += skipped.count
        self._loaded = True
        pending = [
            t
            for t in self._txns.values()
            if t.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
        ]
        for txn in pending:
            self._spawn(self._complete_after_load(txn.transactional_id))
        logger.info(
            "transaction coordinator loaded %d transactional ids from %d records in %.2fs "
            "(%d to complete, %d unreadable records skipped)",
            len(self._txns),
            records,
            time.monotonic() - started,
            len(pending),
            skipped.count,
        )

    def _count_skipped(self, topic: str) -> None:
        if self._recorder is not None:
            self._recorder.add(self._recorder.metrics.internal_records_skipped, 1, (("topic", topic),))

    async def skipped_records(self) -> int:
        """How many unreadable ``__transaction_state`` records this actor's load skipped."""
        return self._skipped

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one ``__transaction_state`` record (replay); one that is not what the
        coordinator writes raises ValueError/TypeError/KeyError and changes nothing."""
        k = stored.loads(key, "key")
        if not isinstance(k, list) or len(k) != 2 or type(k[0]) is not int or k[0] != TXN_KEY_VERSION:
            raise ValueError(f"the key is {k!r:.60}, not [{TXN_KEY_VERSION}, transactional id]")
        if not isinstance(k[1], str):
            raise ValueError(f"the key is {k!r:.60}, not [{TXN_KEY_VERSION}, transactional id]")
        tid = k[1]
        if value is None:
            self._txns.pop(tid, None)
        else:
            self._txns[tid] = TransactionMetadata.from_record(tid, stored.json_object(value))

    async def _complete_after_load(self, tid: str) -> None:
        async with self._lock(tid):
            txn = self._txns.get(tid)
            if txn is not None and txn.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                logger.info("completing %s of %r found on load", txn.state, tid)
                await self._complete(txn)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._completions.add(task)
        task.add_done_callback(self._completion_done)

    def _completion_done(self, task: asyncio.Task) -> None:
        self._completions.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background transaction completion failed", exc_info=task.exception())

    # -- producer ids ---------------------------------------------------------------------

    async def _new_producer_id(self) -> int:
        if self._pid_lock is None:
            self._pid_lock = asyncio.Lock()
        async with self._pid_lock:
            if self._next_pid >= self._pid_end:
                block = await self._controller_handle().allocate_producer_ids.remote(
                    AllocateProducerIdsRequest(PRODUCER_ID_BLOCK_SIZE)
                )
                self._next_pid = block.producer_id_start
                self._pid_end = block.producer_id_start + block.producer_id_len
            pid = self._next_pid
            self._next_pid += 1
            return pid

    # -- the transactional API ------------------------------------------------------------

    async def init_producer_id(self, request: InitProducerIdRequest) -> ProducerIdAndEpoch:
        """InitProducerId: a fresh id (epoch 0) for an idempotent producer (no transactional
        id), or the transactional id's producer id with a bumped epoch, which fences older
        instances.

        An open transaction of an older instance is aborted first, a PrepareCommit or
        PrepareAbort completed first. ``producer_id``/``producer_epoch`` (KIP-360) are the
        caller's current ones when it asks for a bump after an error; a mismatch means a
        newer instance took over (ProducerFencedError).
        """
        require(request, InitProducerIdRequest)
        transactional_id, transaction_timeout_ms = request.transactional_id, request.transaction_timeout_ms
        producer_id, producer_epoch = request.producer_id, request.producer_epoch
        if transactional_id is None or transactional_id == "":
            # Idempotent producers need no state here (Kafka does the same).
            self._start()
            return ProducerIdAndEpoch(await self._new_producer_id(), 0)
        self._check_loaded()
        if not isinstance(transactional_id, str):
            raise InvalidRequestError("transactional id must be a string")
        if not 0 < transaction_timeout_ms <= self._max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={transaction_timeout_ms} is outside (0, "
                f"transaction.max.timeout.ms={self._max_timeout_ms}]"
            )
        async with self._locked(transactional_id):
            txn = self._txns.get(transactional_id)
            if txn is None:
                new = TransactionMetadata(transactional_id, await self._new_producer_id(), 0, transaction_timeout_ms)
                await self._write(new)
                return ProducerIdAndEpoch(new.producer_id, new.producer_epoch)
            if producer_id != NO_PRODUCER_ID:
                current = (txn.producer_id, txn.producer_epoch)
                if (producer_id, producer_epoch) == (txn.last_producer_id, txn.last_producer_epoch) and (
                    txn.state == TransactionState.EMPTY
                ):
                    return ProducerIdAndEpoch(*current)  # a retry of a bump that went through
                if (producer_id, producer_epoch) != current:
                    raise ProducerFencedError(
                        f"{transactional_id!r}: producer {producer_id} epoch {producer_epoch} is not the current "
                        f"{current[0]} epoch {current[1]}"
                    )
            if txn.state == TransactionState.ONGOING:
                # An older instance left a transaction open: abort it under a bumped epoch,
                # so that its zombie can neither write more nor commit.
                txn = await self._prepare_end(txn, commit=False, bump=True)
            if txn.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                txn = await self._complete(txn)
            if txn.producer_epoch >= MAX_EPOCH - 1:
                # The epoch would overflow int16: a new producer id starts at epoch 0.
                new = txn.copy(
                    producer_id=await self._new_producer_id(),
                    producer_epoch=0,
                    last_producer_id=txn.producer_id,
                    last_producer_epoch=txn.producer_epoch,
                )
            else:
                new = txn.copy(
                    producer_epoch=txn.producer_epoch + 1,
                    last_producer_id=txn.producer_id,
                    last_producer_epoch=txn.producer_epoch,
                )
            new = new.copy(
                state=TransactionState.EMPTY,
                partitions=set(),
                start_ms=-1,
                timeout_ms=transaction_timeout_ms,
                last_update_ms=_now_ms(),
            )
            await self._write(new)
            logger.info("%r: producer %d epoch %d", transactional_id, new.producer_id, new.producer_epoch)
            return ProducerIdAndEpoch(new.producer_id, new.producer_epoch)

    async def add_partitions_to_txn(self, request: AddPartitionsToTxnRequest) -> None:
        """AddPartitionsToTxn: record the partitions in the transaction (durably) before the
        producer writes to them; starts the transaction if none is open."""
        require(request, AddPartitionsToTxnRequest)
        self._check_loaded()
        wanted = {TopicPartition(tp.topic, tp.partition) for tp in request.partitions}
        await self._check_partitions_exist(wanted)
        await self._add(request.transactional_id, request.producer_id, request.producer_epoch, wanted)

    async def add_offsets_to_txn(self, request: AddOffsetsToTxnRequest) -> None:
        """AddOffsetsToTxn: add the group's ``__consumer_offsets`` partition to the transaction."""
        require(request, AddOffsetsToTxnRequest)
        group_id = request.group_id
        self._check_loaded()
        if not isinstance(group_id, str) or not group_id:
            raise InvalidRequestError("group id must be a non-empty string")
        tp = TopicPartition(OFFSETS_TOPIC, offsets_partition_for(group_id, await self._offsets_partitions()))
        await self._add(request.transactional_id, request.producer_id, request.producer_epoch, {tp})

    async def end_txn(self, request: EndTxnRequest) -> None:
        """EndTxn: commit (``committed``) or abort. Returns once every marker is written and
        the state is CompleteCommit/CompleteAbort; a retry of a completed end answers at once."""
        require(request, EndTxnRequest)
        transactional_id, producer_id, producer_epoch = (
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
        )
        commit = bool(request.committed)
        self._check_loaded()
        async with self._locked(transactional_id):
            txn = self._owned(transactional_id, producer_id, producer_epoch)
            wanted = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
            if txn.state == TransactionState.ONGOING:
                txn = await self._prepare_end(txn, commit, bump=False)
            elif txn.state == wanted:
                return  # a retry of an end that completed
            elif txn.state == (TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT):
                pass  # an earlier end did not finish: finish it now
            else:
                raise InvalidTxnStateError(
                    f"{transactional_id!r}: cannot {'commit' if commit else 'abort'} in state {txn.state}"
                )
            await self._complete(txn)

    async def describe_transactions(self, request: DescribeTransactionsRequest) -> list[TransactionDescription]:
        """State of the given transactional ids (Kafka's DescribeTransactions; all of them, as
        ListTransactions, when none are given); unknown ids show as Dead."""
        require(request, DescribeTransactionsRequest)
        transactional_ids = request.transactional_ids
        self._check_loaded()
        if transactional_ids is None:
            return [self._txns[t].describe() for t in sorted(self._txns)]
        out = []
        for tid in transactional_ids:
            txn = self._txns.get(tid)
            out.append(
                txn.describe()
                if txn is not None
                else TransactionDescription(tid, -1, -1, TransactionState.DEAD, 0, -1, ())
            )
        return out

    async def abort_timed_out_transactions(self, now_ms: int | None = None) -> int:
        """Abort every transaction open longer than its timeout, with an epoch bump (the
        producer is fenced); returns how many. The background loop calls it every
        transaction.abort.timed.out.transaction.cleanup.interval.ms."""
        self._check_loaded()
        now = _now_ms() if now_ms is None else now_ms

        def timed_out(txn: TransactionMetadata | None) -> bool:
            return txn is not None and txn.state == TransactionState.ONGOING and now >= txn.start_ms + txn.timeout_ms

        async def abort(tid: str) -> bool:
            async with self._lock(tid):
                txn = self._txns.get(tid)
                if not timed_out(txn):
                    return False
                logger.info("%r: transaction open for more than %d ms; aborting", tid, txn.timeout_ms)
                await self._complete(await self._prepare_end(txn, commit=False, bump=True))
                return True

        # A call running on an id (it holds the lock) is left alone until the next turn.
        due = [tid for tid, txn in self._txns.items() if timed_out(txn) and not self._lock(tid).locked()]
        return sum(await asyncio.gather(*(abort(tid) for tid in due)))

    async def expire_transactional_ids(self, now_ms: int | None = None) -> int:
        """Forget ids with no open transaction idle for transactional.id.expiration.ms (a
        tombstone in ``__transaction_state``); returns how many."""
        self._check_loaded()
        now = _now_ms() if now_ms is None else now_ms
        expired = 0
        for tid, txn in list(self._txns.items()):
            if txn.state not in (
                TransactionState.EMPTY,
                TransactionState.COMPLETE_COMMIT,
                TransactionState.COMPLETE_ABORT,
            ):
                continue
            if now - txn.last_update_ms < self._id_expiration_ms or self._lock(tid).locked():
                continue
            async with self._lock(tid):
                txn = self._txns.get(tid)
                if txn is None or txn.state not in (
                    TransactionState.EMPTY,
                    TransactionState.COMPLETE_COMMIT,
                    TransactionState.COMPLETE_ABORT,
                ):
                    continue
                await self._topic.append(self._partition_for(tid), [(transaction_key(tid), None)])
                self._txns.pop(tid, None)
                expired += 1
        return expired

    # -- transitions ----------------------------------------------------------------------

    async def _add(self, tid: str, producer_id: int, producer_epoch: int, wanted: set[TopicPartition]) -> None:
        async with self._locked(tid):
            txn = self._owned(tid, producer_id, producer_epoch)
            if txn.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                raise ConcurrentTransactionsError(f"{tid!r}: the previous transaction is still completing")
            if txn.state == TransactionState.DEAD:
                raise InvalidTxnStateError(f"{tid!r} is dead")
            if txn.state == TransactionState.ONGOING and wanted <= txn.partitions:
                return
            now = _now_ms()
            start = txn.start_ms if txn.state == TransactionState.ONGOING else now
            await self._write(
                txn.copy(
                    state=TransactionState.ONGOING,
                    partitions=txn.partitions | wanted,
                    start_ms=start,
                    last_update_ms=now,
                )
            )

    def _owned(self, tid: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        """The id's metadata, if ``producer_id``/``producer_epoch`` are its current ones."""
        txn = self._txns.get(tid)
        if txn is None or txn.producer_id != producer_id:
            raise InvalidProducerIdMappingError(f"producer {producer_id} is not the producer of {tid!r}")
        if producer_epoch != txn.producer_epoch:
            raise ProducerFencedError(
                f"{tid!r}: epoch {producer_epoch} is not the current {txn.producer_epoch}; a newer producer "
                "took over or the transaction timed out"
            )
        return txn

    async def _prepare_end(self, txn: TransactionMetadata, commit: bool, bump: bool) -> TransactionMetadata:
        """Ongoing -> PrepareCommit/PrepareAbort, durable. ``bump`` (fencing, timeouts) raises
        the epoch so that the markers fence the current producer."""
        epoch = min(txn.producer_epoch + 1, MAX_EPOCH) if bump else txn.producer_epoch
        prepared = txn.copy(
            state=TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT,
            producer_epoch=epoch,
            last_producer_epoch=txn.producer_epoch if bump else txn.last_producer_epoch,
            last_update_ms=_now_ms(),
        )
        await self._write(prepared)
        return prepared

    async def _complete(self, txn: TransactionMetadata) -> TransactionMetadata:
        """PrepareX -> markers everywhere -> group coordinator told -> CompleteX, durable."""
        commit = txn.state == TransactionState.PREPARE_COMMIT
        state_partition = self._partition_for(txn.transactional_id)
        await asyncio.gather(
            *(
                self._write_marker(tp, txn.producer_id, txn.producer_epoch, state_partition, commit)
                for tp in sorted(txn.partitions)
            )
        )
        if any(tp.topic == OFFSETS_TOPIC for tp in txn.partitions):
            await self._tell_group_coordinator(txn.producer_id, commit)
        done = txn.copy(
            state=TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT,
            partitions=set(),
            last_update_ms=_now_ms(),
        )
        await self._write(done)
        logger.debug("%r: %s", txn.transactional_id, done.state)
        return done

    async def _write_marker(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, state_partition: int, commit: bool
    ) -> None:
        """Write one marker, retrying through leader moves and replica restarts until it is
        in; a partition whose topic is gone is skipped. The coordinator epoch is the leader
        epoch of the transactional id's ``__transaction_state`` partition."""
        attempt = 0
        fenced_at = -1
        while True:
            attempt += 1
            try:
                coordinator_epoch = (await self._topic.leader(state_partition)).leader_epoch
                part = await self._data_leader(tp)
                if part is None:
                    logger.info("marker for %s skipped: the topic no longer exists", tp)
                    return
                await part.leader_handle.write_txn_marker.remote(
                    WriteTxnMarkersRequest(
                        producer_id,
                        producer_epoch,
                        coordinator_epoch,
                        TransactionResult.COMMIT if commit else TransactionResult.ABORT,
                        part.leader_epoch,
                        _MARKER_TIMEOUT_MS,
                    )
                )
                return
            except TransactionCoordinatorFencedError as exc:
                # Our idea of the coordinator epoch is stale: look it up again, once per epoch.
                if coordinator_epoch <= fenced_at:
                    logger.error("marker for %s (producer %d) fenced: %s; dropped", tp, producer_id, exc)
                    return
                fenced_at = coordinator_epoch
                self._topic.forget(state_partition)
            except (InvalidProducerEpochError, ProducerFencedError) as exc:
                # The partition already saw a newer epoch of this producer: this marker is moot.
                logger.warning("marker for %s (producer %d) refused: %s", tp, producer_id, exc)
                return
            except (KafkaError, ray.exceptions.RayActorError) as exc:
                self._leaders.pop(tp, None)
                if isinstance(exc, KafkaError) and not exc.retriable:
                    logger.error("marker for %s (producer %d) failed: %r; retrying", tp, producer_id, exc)
                elif attempt % 50 == 0:
                    logger.warning("marker for %s still not written after %d attempts: %r", tp, attempt, exc)
                await asyncio.sleep(min(1.0, _RETRY_BACKOFF_S * attempt))

    async def _tell_group_coordinator(self, producer_id: int, commit: bool) -> None:
        # A restarted group coordinator replays the markers itself, so giving up is safe.
        deadline = time.monotonic() + _WRITE_TIMEOUT_S
        while True:
            try:
                if self._group_coordinator is None:
                    self._group_coordinator = ray.get_actor(GROUP_COORDINATOR_NAME, namespace=self._namespace)
                result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
                await self._group_coordinator.complete_txn.remote(CompleteTxnRequest(producer_id, result))
                return
            except (KafkaError, ray.exceptions.RayActorError, ValueError) as exc:
                if isinstance(exc, ValueError):
                    self._group_coordinator = None
                if time.monotonic() > deadline:
                    logger.warning("group coordinator not told of producer %d's end: %r", producer_id, exc)
                    return
                await asyncio.sleep(_RETRY_BACKOFF_S)

    # -- __transaction_state --------------------------------------------------------------

    async def _write(self, txn: TransactionMetadata) -> None:
        """Make ``txn`` the id's state: durable (acks=all) first, then in memory."""
        tid = txn.transactional_id
        await self._topic.append(self._partition_for(tid), [(transaction_key(tid), _dumps(txn.to_record()))])
        self._txns[tid] = txn

    def _partition_for(self, tid: str) -> int:
        return transaction_partition_for(tid, self._topic.num_partitions)

    # -- data partitions ------------------------------------------------------------------

    async def _data_leader(self, tp: TopicPartition) -> Any | None:
        """The partition's leader metadata (waiting for one), or None when the topic is gone."""
        part = self._leaders.get(tp)
        if part is not None:
            return part
        md = await self._controller_handle().get_metadata.remote(MetadataRequest((tp.topic,)))
        topic = md.topics.get(tp.topic)
        if topic is None or tp.partition >= len(topic.partitions):
            return None
        try:
            part = await self._controller_handle().wait_online.remote(tp, _WRITE_TIMEOUT_S)
        except UnknownTopicOrPartitionError:
            return None
        self._leaders[tp] = part
        return part

    async def _check_partitions_exist(self, wanted: set[TopicPartition]) -> None:
        md = await self._controller_handle().get_metadata.remote(
            MetadataRequest(tuple(sorted({tp.topic for tp in wanted})))
        )
        for tp in wanted:
            topic = md.topics.get(tp.topic)
            if topic is None or not 0 <= tp.partition < len(topic.partitions):
                raise UnknownTopicOrPartitionError(f"unknown partition {tp}")

    async def _offsets_partitions(self) -> int:
        md = await self._controller_handle().get_metadata.remote(MetadataRequest((OFFSETS_TOPIC,)))
        meta = md.topics.get(OFFSETS_TOPIC)
        return len(meta.partitions) if meta is not None else self._config["offsets.topic.num.partitions"]

    # -- background -----------------------------------------------------------------------

    async def _background_loop(self) -> None:
        next_expiry = time.monotonic() + 3600
        aborting: asyncio.Task | None = None
        if self._recorder is not None:
            # Its own loop: the abort check may run only every few seconds or minutes.
            metrics = asyncio.get_running_loop().create_task(self._metrics_loop())
            self._completions.add(metrics)
        while True:
            await asyncio.sleep(self._abort_interval_s)
            if not self._loaded:
                continue
            try:
                # In a task of its own: an abort whose markers cannot be written yet must not
                # hold up the next turns (its id stays locked, so it is not started twice).
                if aborting is None or aborting.done():
                    aborting = asyncio.get_running_loop().create_task(self.abort_timed_out_transactions())
                    aborting.add_done_callback(self._completion_done)
                if time.monotonic() >= next_expiry:
                    next_expiry = time.monotonic() + 3600
                    await self.expire_transactional_ids()
            except Exception:  # a failed turn must not stop the loop
                logger.exception("transaction coordinator background task failed")

    async def _metrics_loop(self) -> None:
        """Every TICK_S: how many transactions are open and how old the oldest is."""
        open_states = (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
        rec = self._recorder
        while True:
            await asyncio.sleep(TICK_S)
            try:
                rec.flush()  # counters summed since the last tick (skipped records)
                now = _now_ms()
                starts = [t.start_ms for t in self._txns.values() if t.state in open_states]
                rec.metrics.transactions_open.set(len(starts), rec.tags())
                rec.metrics.transaction_oldest_age.set(max(0, now - min(starts)) if starts else 0, rec.tags())
            except Exception:  # noqa: BLE001 - metrics must never stop the coordinator
                logger.exception("recording transaction metrics failed")

    # -- helpers --------------------------------------------------------------------------

    def _lock(self, tid: str) -> asyncio.Lock:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = asyncio.Lock()
        return lock

    def _locked(self, tid: str) -> _IdLock:
        return _IdLock(self._lock(tid), tid)


class _IdLock:
    """A transactional id's lock, waited for at most _LOCK_WAIT_S (then: retry later)."""

    def __init__(self, lock: asyncio.Lock, tid: str) -> None:
        self._lock = lock
        self._tid = tid

    async def __aenter__(self) -> None:
        try:
            await asyncio.wait_for(self._lock.acquire(), _LOCK_WAIT_S)
        except TimeoutError:
            raise ConcurrentTransactionsError(f"{self._tid!r}: another call on this id is still running") from None

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()
