"""The TransactionCoordinator actor: the thin shell around the transaction state machine.

One named, detached, restartable async actor serves the whole cluster (KIP-98). The rules
live in :class:`~actors.transaction_coordinator.state_manager.TransactionStateManager`; this
shell does the I/O it decides on: it appends each transition's record to
``__transaction_state`` with acks=all before the transition takes effect, writes the
COMMIT/ABORT markers to the partitions of a transaction (in parallel, retried until written)
and tells the group coordinator when ``__consumer_offsets`` is among them, takes producer id
blocks from the controller, runs the timeout and expiry timers, and records metrics.

Producer ids come in blocks from the controller (``allocate_producer_ids``, durable in its
metadata log), so no id is handed out twice, even across restarts of either actor. An
idempotent producer gets a fresh id at epoch 0; a transactional id keeps its producer id
and each ``init_producer_id`` bumps the epoch, fencing older instances (ProducerFenced).

Ending a transaction writes PrepareX and answers once it is durable, as Kafka answers EndTxn;
the completion then runs in the background (Kafka's TransactionMarkerChannelManager): a marker
to every partition, the group coordinator told for ``__consumer_offsets`` partitions, then
CompleteX. Calls for one transactional id run one at a time (a per-id lock, waited for up to
_LOCK_WAIT_S, then CONCURRENT_TRANSACTIONS, which clients retry); EndTxn hands its lock over
to the completion, so the id's next call (the next transaction's AddPartitionsToTxn, an
InitProducerId) waits until the markers are in. When that next call is an AddPartitionsToTxn
or AddOffsetsToTxn already waiting once the markers are in (a producer that starts its next
transaction at once), the completion leaves its CompleteX to it, and the add appends CompleteX
and its Ongoing as one batch: one replicated write where there were two in a row. A
completion that fails is tried again with backoff until it succeeds or the actor closes; a call that finds an id in a Prepare state
with no completion running starts one. An EndTxn in a Prepare state is answered at once (a
retry of the decided outcome succeeds, the other is INVALID_TXN_STATE). A restarted coordinator replays the topic before serving (until then:
CoordinatorLoadInProgressError) and completes every PrepareCommit/PrepareAbort it finds, so
no completion is lost. Markers carry the coordinator epoch: the leader epoch of the id's
``__transaction_state`` partition. A transaction open longer than its timeout is aborted with
an epoch bump, so the zombie producer is fenced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import ray

from actors import internal_records as stored
from actors import launch
from actors.acl import CLUSTER_NAME
from actors.auth_helper import CLUSTER, GROUP, TOPIC, TRANSACTIONAL_ID, AuthHelper, LazyAclView, Op, denied
from actors.clock import SYSTEM, Clock
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
from actors.protocol_broker import PartitionRequests
from actors.transaction_coordinator.state_manager import TransactionStateManager, TxnTransit, completion_backoff_ms
from actors.transaction_coordinator.transaction_metadata import TransactionMetadata
from actors.types import ProducerIdAndEpoch, TopicPartition, TransactionDescription
from storage.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidRequestError,
    KafkaError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000

_WRITE_TIMEOUT_S = 30.0
_LOCK_WAIT_S = 60.0  # a call waits this long for another call on the same id, then is told to retry
_MARKER_TIMEOUT_MS = 30000
_RETRY_BACKOFF_S = 0.1
_EXPIRY_CHECK_S = 3600.0


class TransactionCoordinator(Coordinator):
    """Producer ids and transactions of one rayqueue cluster (see the module docstring)."""

    _kind = "transaction coordinator"

    def __init__(self, namespace: str, config: dict[str, Any], clock: Clock = SYSTEM) -> None:
        super().__init__(namespace, config)
        self._clock = clock
        self._topic = InternalTopic(
            TRANSACTION_STATE_TOPIC,
            self._controller_handle,
            self._config["transaction.state.log.num.partitions"],
            self._config["transaction.state.log.replication.factor"],
            min_insync_replicas=self._config["transaction.state.log.min.isr"],
        )
        self.state = TransactionStateManager(
            clock, self._config["transaction.max.timeout.ms"], self._config["transactional.id.expiration.ms"]
        )
        self._abort_interval_s = self._config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        self._locks: dict[str, asyncio.Lock] = {}
        # Per id, the AddPartitionsToTxn/AddOffsetsToTxn calls waiting for its lock: a
        # completion that finds one leaves its CompleteX to it (see _complete).
        self._adds_waiting: dict[str, int] = {}
        self._completions: set[asyncio.Task] = set()  # background tasks, cancelled by close()
        self._closing = False
        self._group_coordinator: Any = None
        self._leaders: dict[TopicPartition, Any] = {}  # data partitions, for markers
        # Topic -> partition count, as the controller last answered (Kafka's coordinator checks
        # AddPartitionsToTxn against its broker's metadata cache, not the controller).
        self._partition_counts: dict[str, int] = {}
        self._pid_lock: asyncio.Lock | None = None
        self._next_pid = 0
        self._pid_end = 0  # the current block is [_next_pid, _pid_end)
        self._recorder = Recorder(namespace, True) if self._config["rayqueue.metrics.enabled"] else None
        self._skipped = 0  # unreadable __transaction_state records skipped by the load
        # Native clients' principals against the ACLs (loaded by the first request with one).
        self._acls = LazyAclView(self._controller_handle, self._config)
        self._auth = AuthHelper(self._acls, self._recorder, "transaction-coordinator")

    # -- lifecycle (the rest is Coordinator's) --------------------------------------------

    def _count(self) -> int:
        return len(self.state)

    async def _load(self) -> None:
        """Replay ``__transaction_state``, then complete every transaction left in a Prepare
        state. A record it cannot read is skipped, logged and counted (``skipped_records``)."""
        started = self._clock.monotonic()
        records = 0
        skipped = stored.SkippedRecords(TRANSACTION_STATE_TOPIC, self._count_skipped)
        async for p, batch, first in self._topic.replay():
            if batch.is_control:
                continue
            for record in skipped.records(p, batch, first):
                try:
                    self.state.replay(record.key, record.value)
                except stored.READ_ERRORS as exc:
                    skipped.skip(p, record.offset, exc)
                    continue
                records += 1
        self._skipped += skipped.count
        self._loaded = True
        pending = self.state.pending_completions()
        for tid in pending:
            self._start_completion(tid)
        logger.info(
            "transaction coordinator loaded %d transactional ids from %d records in %.2fs "
            "(%d to complete, %d unreadable records skipped)",
            len(self.state),
            records,
            self._clock.monotonic() - started,
            len(pending),
            skipped.count,
        )

    def _count_skipped(self, topic: str) -> None:
        if self._recorder is not None:
            self._recorder.add(self._recorder.metrics.internal_records_skipped, 1, (("topic", topic),))

    async def skipped_records(self) -> int:
        """How many unreadable ``__transaction_state`` records this actor's load skipped."""
        return self._skipped

    async def close(self) -> None:
        """Stop the background work (completions, timers) before the actor goes away. A
        completion stopped here is not lost: its PrepareX is durable, and the next
        coordinator's load completes it."""
        self._closing = True
        tasks = [t for t in (*self._completions, self._background) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._completions.add(task)
        task.add_done_callback(self._completion_done)
        return task

    def _completion_done(self, task: asyncio.Task) -> None:
        self._completions.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background transaction task failed", exc_info=task.exception())

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
        tid, timeout_ms = request.transactional_id, request.transaction_timeout_ms
        await self._check_init(request)
        if tid is None or tid == "":
            # Idempotent producers need no state here (Kafka does the same).
            self._start()
            return ProducerIdAndEpoch(await self._new_producer_id(), 0)
        self._check_loaded()
        self.state.validate_init(tid, timeout_ms)
        async with self._locked(tid):
            if self.state.get(tid) is None:
                new = await self._transition(self.state.prepare_new(tid, await self._new_producer_id(), timeout_ms))
                return ProducerIdAndEpoch(new.producer_id, new.producer_epoch)
            retried = self.state.check_init(tid, request.producer_id, request.producer_epoch)
            if retried is not None:
                return retried  # a retry of a bump that went through
            if self.state.get(tid).state == TransactionState.ONGOING:
                await self._transition(self.state.prepare_fence(tid))
            if self.state.completion_owed(tid):
                # The older instance's transaction ends first. Kafka answers CONCURRENT_TRANSACTIONS
                # until it has; completing it here (holding the lock, so no other completion
                # runs) spares the client those retries.
                await self._complete_retrying(tid)
            fresh = await self._new_producer_id() if self.state.needs_new_producer_id(tid) else None
            new = await self._transition(self.state.prepare_init(tid, timeout_ms, fresh))
            logger.info("%r: producer %d epoch %d", tid, new.producer_id, new.producer_epoch)
            return ProducerIdAndEpoch(new.producer_id, new.producer_epoch)

    async def _check_init(self, request: InitProducerIdRequest) -> None:
        """Kafka's InitProducerId rules for a native caller's principal: WRITE on the
        transactional id; without one (idempotence), IDEMPOTENT_WRITE on the cluster or
        WRITE on some topic (Kafka 3.x, KIP-679), else ClusterAuthorizationFailedError."""
        if request.principal is None:
            return
        tid = request.transactional_id
        if tid is not None and tid != "":
            await self._auth.check(request, Op.WRITE, TRANSACTIONAL_ID, tid)
        elif not await self._auth.authorized(
            request, Op.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, count=False
        ) and not await self._auth.authorized_by_resource_type(request, Op.WRITE, TOPIC):
            raise denied(request.principal, Op.IDEMPOTENT_WRITE, CLUSTER, [CLUSTER_NAME])

    async def add_partitions_to_txn(self, request: AddPartitionsToTxnRequest) -> None:
        """AddPartitionsToTxn: record the partitions in the transaction (durably) before the
        producer writes to them; starts the transaction if none is open. With
        ``verify_only`` (a partition leader, KIP-890) nothing is added: the partitions must
        be in the ongoing transaction of that producer id and epoch (``state.verify``)."""
        require(request, AddPartitionsToTxnRequest)
        if request.verify_only is True:
            # A partition leader's KIP-890 check (Kafka: CLUSTER_ACTION, broker to broker).
            await self._auth.check(request, Op.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
            self._check_loaded()
            tps = [TopicPartition(tp.topic, tp.partition) for tp in request.partitions]
            return self.state.verify(request.transactional_id, request.producer_id, request.producer_epoch, tps)
        await self._auth.check(request, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id)
        self._check_loaded()
        wanted = {TopicPartition(tp.topic, tp.partition) for tp in request.partitions}
        # Refused a topic, the transaction gains none of the partitions (Kafka answers the
        # others OPERATION_NOT_ATTEMPTED).
        await self._auth.check_all(request, Op.WRITE, TOPIC, {tp.topic for tp in wanted})
        await self._check_partitions_exist(wanted)
        await self._add(request.transactional_id, request.producer_id, request.producer_epoch, wanted)

    async def add_offsets_to_txn(self, request: AddOffsetsToTxnRequest) -> None:
        """AddOffsetsToTxn: add the group's ``__consumer_offsets`` partition to the transaction."""
        require(request, AddOffsetsToTxnRequest)
        group_id = request.group_id
        await self._auth.check(request, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id)
        await self._auth.check(request, Op.READ, GROUP, group_id)
        self._check_loaded()
        if not isinstance(group_id, str) or not group_id:
            raise InvalidRequestError("group id must be a non-empty string")
        tp = TopicPartition(OFFSETS_TOPIC, offsets_partition_for(group_id, await self._offsets_partitions()))
        await self._add(request.transactional_id, request.producer_id, request.producer_epoch, {tp})

    async def _add(self, tid: str, producer_id: int, producer_epoch: int, wanted: set[TopicPartition]) -> None:
        # Counted while it waits for the id's turn, so that the completion holding it leaves
        # its CompleteX to this call; if the wait fails, the CompleteX is not left behind.
        waiting = _IdLock(self._lock(tid), tid, waiting=self._adds_waiting, gave_up=self._resume_completion)
        async with waiting as held:
            if not self.state.markers_done(tid):
                # Still in a Prepare state with markers owed although the lock is ours: no
                # completion runs (the last one stopped); start one. The state manager answers
                # CONCURRENT_TRANSACTIONS.
                self._start_completion(tid)
            plan = self.state.plan_add(tid, producer_id, producer_epoch, wanted)
            if plan.transits:
                try:
                    await self._transitions(plan.transits)
                except BaseException:
                    if plan.complete is not None:
                        # Still PrepareX with its markers done: a completion writes the CompleteX.
                        self._start_completion(tid, held, fold=False)
                    raise
            if plan.refused is not None:
                raise plan.refused

    async def end_txn(self, request: EndTxnRequest) -> None:
        """EndTxn: commit (``committed``) or abort. Returns once PrepareCommit/PrepareAbort is
        durable; the markers and CompleteCommit/CompleteAbort follow in the background, and
        the id's next call waits for them. A retry of a decided end answers at once."""
        require(request, EndTxnRequest)
        tid = request.transactional_id
        await self._auth.check(request, Op.WRITE, TRANSACTIONAL_ID, tid)
        self._check_loaded()
        pid, epoch, commit = request.producer_id, request.producer_epoch, bool(request.committed)
        if self.state.end_txn_at_once(tid, pid, epoch, commit):
            self._start_completion(tid)  # if one is owed and none runs
            return
        async with self._locked(tid) as held:
            plan = self.state.end_txn(tid, pid, epoch, commit)
            if plan.prepare is not None:
                await self._transition(plan.prepare)
            if plan.complete:
                self._start_completion(tid, held)

    async def describe_transactions(self, request: DescribeTransactionsRequest) -> list[TransactionDescription]:
        """State of the given transactional ids (Kafka's DescribeTransactions; all of them, as
        ListTransactions, when none are given); unknown ids show as Dead."""
        require(request, DescribeTransactionsRequest)
        if request.principal is None:
            self._check_loaded()
            return self.state.describe(request.transactional_ids)
        # Kafka's DescribeTransactions: DESCRIBE on each id named; listing them all (as
        # ListTransactions) leaves out those the caller may not describe; either way a
        # transaction's partitions show only the topics the caller may describe.
        if request.transactional_ids is not None:
            await self._auth.check_all(request, Op.DESCRIBE, TRANSACTIONAL_ID, request.transactional_ids)
        self._check_loaded()
        described = self.state.describe(request.transactional_ids)
        if request.transactional_ids is None:
            shown = set(
                await self._auth.visible(
                    request, Op.DESCRIBE, TRANSACTIONAL_ID, [d.transactional_id for d in described]
                )
            )
            described = [d for d in described if d.transactional_id in shown]
        topics = set(
            await self._auth.visible(
                request, Op.DESCRIBE, TOPIC, sorted({tp.topic for d in described for tp in d.partitions})
            )
        )
        return [
            dataclasses.replace(d, partitions=tuple(tp for tp in d.partitions if tp.topic in topics)) for d in described
        ]

    async def abort_timed_out_transactions(self, now_ms: int | None = None) -> int:
        """Abort every transaction open longer than its timeout, with an epoch bump (the
        producer is fenced); returns how many. The background loop calls it every
        transaction.abort.timed.out.transaction.cleanup.interval.ms."""
        self._check_loaded()
        now = self._clock.wall_ms() if now_ms is None else now_ms

        async def abort(tid: str) -> bool:
            async with _IdLock(self._lock(tid), tid, None) as held:
                transit = self.state.prepare_timeout_abort(tid, now)
                if transit is None:
                    return False
                await self._transition(transit)
                self._start_completion(tid, held)  # the markers follow in the background
                return True

        # A call running on an id (it holds the lock) is left alone until the next turn.
        due = [tid for tid in self.state.timed_out(now) if not self._lock(tid).locked()]
        return sum(await asyncio.gather(*(abort(tid) for tid in due)))

    async def expire_transactional_ids(self, now_ms: int | None = None) -> int:
        """Forget ids with no open transaction idle for transactional.id.expiration.ms (a
        tombstone in ``__transaction_state``); returns how many."""
        self._check_loaded()
        now = self._clock.wall_ms() if now_ms is None else now_ms
        expired = 0
        for tid in self.state.expirable(now):
            if self._lock(tid).locked():
                continue
            async with self._lock(tid):
                transit = self.state.prepare_expire(tid, now)
                if transit is not None:
                    await self._transition(transit)
                    expired += 1
        return expired

    # -- carrying out transitions ---------------------------------------------------------

    async def _transition(self, transit: TxnTransit) -> TransactionMetadata:
        """Make the transit's metadata the id's state: durable (acks=all) first, then in memory."""
        return (await self._transitions((transit,)))[-1]

    async def _transitions(self, transits: tuple[TxnTransit, ...]) -> list[TransactionMetadata]:
        """Transits of one id, decided each from the one before: their records in one batch
        (one replicated write to the id's partition), then applied in order."""
        await self._topic.append(self._partition_for(transits[0].transactional_id), [t.record for t in transits])
        return [self.state.complete_transition(t) for t in transits]

    def _start_completion(self, tid: str, held: _IdLock | None = None, fold: bool = True) -> bool:
        """Complete the id's PrepareCommit/PrepareAbort in a background task, unless none is
        owed or one is claimed already (True when one started). ``held``: the caller holds the
        id's lock and hands it over; the task releases it when it ends, so the id's next call
        waits for the completion. Without, the task waits for the lock like any call.
        ``fold``: the completion may leave its CompleteX to an add waiting for the lock."""
        if self._closing or not self.state.claim_completion(tid):
            return False
        lock = held.hand_over() if held is not None else None

        def ended(_task: asyncio.Task) -> None:
            self.state.release_completion(tid)
            if lock is not None:
                lock.release()
            self._resume_completion(tid)

        self._spawn(self._run_completion(tid, lock is not None, fold)).add_done_callback(ended)
        return True

    def _resume_completion(self, tid: str) -> None:
        """A completion left the id's CompleteX to an add that is no longer waiting (it gave
        up, or it was cancelled): start one that writes it, so that no id stays in a Prepare
        state with nothing to complete it. A no-op when an add still waits (it writes the
        CompleteX, or starts a completion if it cannot) or a completion is claimed."""
        if self.state.markers_done(tid) and not self._adds_waiting.get(tid):
            self._start_completion(tid)

    async def _run_completion(self, tid: str, locked: bool, fold: bool) -> None:
        if locked:
            await self._complete_retrying(tid, fold)
            return
        async with self._lock(tid):
            await self._complete_retrying(tid, fold)

    async def _complete_retrying(self, tid: str, fold: bool = False) -> None:
        """Complete the id's Prepare state (the caller holds its lock), trying again with
        backoff after a failure until it is complete, or (``fold``) left to a waiting add;
        it stops only when the actor closes (the next coordinator's load completes it then)."""
        progress = _Progress()
        attempt = 0
        while self.state.completion_owed(tid):
            if self._closing:
                raise CoordinatorNotAvailableError("the transaction coordinator is closing")
            try:
                if await self._complete(tid, progress, fold) is None:
                    return
            except Exception as exc:  # noqa: BLE001 - retried: a completion is never dropped
                attempt += 1
                delay_ms = completion_backoff_ms(attempt)
                log = logger.warning if attempt == 1 or attempt % 20 == 0 else logger.debug
                log(
                    "%r: completing the transaction failed (attempt %d), retrying in %d ms: %r",
                    tid,
                    attempt,
                    delay_ms,
                    exc,
                )
                await asyncio.sleep(delay_ms / 1000)

    async def _complete(self, tid: str, progress: _Progress, fold: bool) -> TransactionMetadata | None:
        """PrepareX -> markers everywhere -> group coordinator told -> CompleteX, durable.
        ``progress`` keeps what an earlier attempt did, so that a retry does not repeat it.
        Markers done earlier (the state manager knows) are not written again. With ``fold``
        and an add waiting for the id's lock, the CompleteX is left to that add (None)."""
        if not self.state.markers_done(tid):
            await self._write_markers(tid, progress)
            self.state.record_markers_done(tid)
        if fold and self._adds_waiting.get(tid):
            # The next transaction's add is waiting for this lock: it appends the CompleteX
            # with its own Ongoing, one replicated write instead of two in a row.
            logger.debug("%r: markers written; the CompleteX goes with the next add", tid)
            return None
        done = await self._transition(self.state.prepare_complete(tid))
        logger.debug("%r: %s", tid, done.state)
        return done

    async def _write_markers(self, tid: str, progress: _Progress) -> None:
        """Every marker of the id's Prepare state, then the group coordinator told."""
        markers = self.state.markers(tid)
        commit = markers.result == TransactionResult.COMMIT
        state_partition = self._partition_for(tid)

        async def mark(tp: TopicPartition) -> None:
            await self._write_marker(tp, markers.producer_id, markers.producer_epoch, state_partition, commit)
            progress.marked.add(tp)

        pending = [tp for tp in markers.partitions if tp not in progress.marked]
        # First the markers of each leader's host in one call; what that did not write goes
        # through the one-partition path, which retries and knows every error.
        progress.marked |= await self._write_markers_by_host(
            pending, markers.producer_id, markers.producer_epoch, state_partition, commit
        )
        # Every marker's attempt ends before a failure is raised: a retry never races one.
        outcomes = await asyncio.gather(
            *(mark(tp) for tp in pending if tp not in progress.marked), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        if markers.touches_offsets and not progress.told:
            await self._tell_group_coordinator(markers.producer_id, commit)
            progress.told = True

    async def _write_markers_by_host(
        self, tps: list[TopicPartition], producer_id: int, producer_epoch: int, state_partition: int, commit: bool
    ) -> set[TopicPartition]:
        """One WriteTxnMarkers call per leader host, carrying the markers of every partition
        it leads (Kafka's TransactionMarkerChannelManager batches them per broker too);
        returns the partitions whose marker is in. Only partitions whose leader is
        known go this way (no lookup here: one partition without a leader must not hold the
        others); the rest, and any failure, are left to ``_write_marker``."""
        try:
            coordinator_epoch = (await self._topic.leader(state_partition)).leader_epoch
            result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
            by_host: dict[Any, tuple[Any, list[tuple[TopicPartition, WriteTxnMarkersRequest]]]] = {}
            for tp in tps:
                part = self._leaders.get(tp)
                if part is None:
                    continue
                request = WriteTxnMarkersRequest(
                    producer_id, producer_epoch, coordinator_epoch, result, part.leader_epoch, _MARKER_TIMEOUT_MS
                )
                leader = part.leader_handle
                by_host.setdefault(leader.host_key, (leader.host, []))[1].append((tp, request))
        except (KafkaError, ray.exceptions.RayActorError):
            return set()
        groups = list(by_host.values())
        answers = await asyncio.gather(
            *(
                host.write_txn_markers.remote(PartitionRequests(tuple((tp.topic, tp.partition, r) for tp, r in batch)))
                for host, batch in groups
            ),
            return_exceptions=True,
        )
        written: set[TopicPartition] = set()
        for (_, batch), answer in zip(groups, answers, strict=True):
            if isinstance(answer, BaseException):
                continue
            for (tp, _), one in zip(batch, answer, strict=True):
                if isinstance(one, BaseException):
                    self._leaders.pop(tp, None)  # the one-partition path looks it up again
                else:
                    written.add(tp)
        return written

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
        deadline = self._clock.monotonic() + _WRITE_TIMEOUT_S
        while True:
            try:
                if self._group_coordinator is None:
                    self._group_coordinator = launch.get_actor(GROUP_COORDINATOR_NAME, self._namespace)
                result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
                await self._group_coordinator.complete_txn.remote(CompleteTxnRequest(producer_id, result))
                return
            except (KafkaError, ray.exceptions.RayActorError, ValueError) as exc:
                if isinstance(exc, ValueError):
                    self._group_coordinator = None
                if self._clock.monotonic() > deadline:
                    logger.warning("group coordinator not told of producer %d's end: %r", producer_id, exc)
                    return
                await asyncio.sleep(_RETRY_BACKOFF_S)

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
        """UnknownTopicOrPartitionError unless every partition exists. Answered from the
        partition counts seen before when they cover every one (a producer adds the same
        partitions transaction after transaction); otherwise the controller is asked. A
        partition of a topic deleted since is caught later: its marker is skipped."""
        counts = self._partition_counts
        if all(0 <= tp.partition < counts.get(tp.topic, 0) for tp in wanted):
            return
        topics = tuple(sorted({tp.topic for tp in wanted}))
        md = await self._controller_handle().get_metadata.remote(MetadataRequest(topics))
        for name in topics:
            topic = md.topics.get(name)
            if topic is None:
                counts.pop(name, None)
            else:
                counts[name] = len(topic.partitions)
        for tp in wanted:
            if not 0 <= tp.partition < counts.get(tp.topic, 0):
                raise UnknownTopicOrPartitionError(f"unknown partition {tp}")

    async def _offsets_partitions(self) -> int:
        """``__consumer_offsets``' partition count (it never changes once the topic exists)."""
        count = self._partition_counts.get(OFFSETS_TOPIC)
        if count is not None:
            return count
        md = await self._controller_handle().get_metadata.remote(MetadataRequest((OFFSETS_TOPIC,)))
        meta = md.topics.get(OFFSETS_TOPIC)
        if meta is None:
            return self._config["offsets.topic.num.partitions"]
        self._partition_counts[OFFSETS_TOPIC] = len(meta.partitions)
        return len(meta.partitions)

    # -- background -----------------------------------------------------------------------

    async def _background_loop(self) -> None:
        next_expiry = self._clock.monotonic() + _EXPIRY_CHECK_S
        aborting: asyncio.Task | None = None
        if self._recorder is not None:
            # Its own loop: the abort check may run only every few seconds or minutes.
            self._spawn(self._metrics_loop())
        while True:
            await asyncio.sleep(self._abort_interval_s)
            if not self._loaded:
                continue
            try:
                # In a task of its own: an abort whose PrepareAbort cannot be written yet must
                # not hold up the next turns (its id stays locked, so it is not started twice).
                if aborting is None or aborting.done():
                    aborting = self._spawn(self.abort_timed_out_transactions())
                if self._clock.monotonic() >= next_expiry:
                    next_expiry = self._clock.monotonic() + _EXPIRY_CHECK_S
                    await self.expire_transactional_ids()
            except Exception:  # a failed turn must not stop the loop
                logger.exception("transaction coordinator background task failed")

    async def _metrics_loop(self) -> None:
        """Every TICK_S: how many transactions are open and how old the oldest is."""
        rec = self._recorder
        while True:
            await asyncio.sleep(TICK_S)
            try:
                rec.flush()  # counters summed since the last tick (skipped records)
                starts = self.state.open_transaction_starts()
                rec.metrics.transactions_open.set(len(starts), rec.tags())
                oldest = max(0, self._clock.wall_ms() - min(starts)) if starts else 0
                rec.metrics.transaction_oldest_age.set(oldest, rec.tags())
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


class _Progress:
    """What a completion has done so far: the partitions marked, the group coordinator told."""

    __slots__ = ("marked", "told")

    def __init__(self) -> None:
        self.marked: set[TopicPartition] = set()
        self.told = False


class _IdLock:
    """A transactional id's lock, waited for at most ``wait_s`` (then: retry later; None: no
    limit). Held for the ``async with`` block, unless handed over to a completion.

    ``waiting`` counts, per id, the callers waiting for the lock (from before the wait until
    the lock is theirs); ``gave_up`` is called with the id when the wait ends without it."""

    def __init__(
        self,
        lock: asyncio.Lock,
        tid: str,
        wait_s: float | None = _LOCK_WAIT_S,
        waiting: dict[str, int] | None = None,
        gave_up: Callable[[str], None] | None = None,
    ) -> None:
        self._lock = lock
        self._tid = tid
        self._wait_s = wait_s
        self._waiting = waiting
        self._gave_up = gave_up
        self._handed = False

    async def __aenter__(self) -> _IdLock:
        waiting, tid = self._waiting, self._tid
        if waiting is not None:
            waiting[tid] = waiting.get(tid, 0) + 1
        acquired = False
        try:
            await asyncio.wait_for(self._lock.acquire(), self._wait_s)
            acquired = True
        except TimeoutError:
            raise ConcurrentTransactionsError(f"{tid!r}: another call on this id is still running") from None
        finally:
            if waiting is not None:
                if waiting[tid] > 1:
                    waiting[tid] -= 1
                else:
                    del waiting[tid]
            if not acquired and self._gave_up is not None:
                self._gave_up(tid)
        return self

    def hand_over(self) -> asyncio.Lock:
        """A background task takes the held lock over: leaving the block keeps it held, and
        the task releases it."""
        self._handed = True
        return self._lock

    async def __aexit__(self, *exc: object) -> None:
        if not self._handed:
            self._lock.release()
