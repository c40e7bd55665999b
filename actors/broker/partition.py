"""PartitionReplica: one replica of one partition, owning its on-disk log, held by a host
(``actors.broker.replica_manager.ReplicaManager``) with the other replicas placed there.

The leader serves ``produce``, ``read`` (fetches), ``list_offsets`` and ``delete_records``,
each taking its request of ``actors.protocol`` (ProduceRequest, FetchRequest, ...). Batches
travel as the same bytes from the producer to disk, to followers and back to consumers:
the leader validates headers and CRCs, walks every record of a producer's batch (Kafka's
LogValidator, in ``storage.Log.append``) and patches offsets; a follower keeps the leader's
bytes. Produce takes client batches (control batches only come from ``write_txn_marker``);
every request field is checked (the request's ``checked()``), so bad input gets a Kafka
error and never reaches the log.

Replication follows Kafka's ISR design. A follower is fetched by its host's fetcher for the
leader's host (``actors.broker.replica_fetcher``), with every partition it follows from
there, in one call per round (the leader host's ``fetch_messages`` with the follower's
``replica_id`` and each partition's log end offset), and appends the leader's batches
unchanged. The leader learns each follower's log end offset (LEO) from those fetches; the
high watermark (HW) is the smallest LEO in the ISR, and consumers never see past it. A
follower that lags longer than replica.lag.time.max.ms leaves the ISR, one that reaches the
HW rejoins; both changes go through the controller (``alter_partition``) with the partition
epoch, so a stale leader cannot change the ISR. On a leader change a follower cuts its
divergent suffix by asking the new leader where its last epoch ended
(``offsets_for_leader_epoch``, KIP-101/KIP-279), never by the HW alone.

Every request may carry the caller's ``current_leader_epoch``: an older one is fenced
(FencedLeaderEpochError), a newer one means this replica has not heard of the election
yet (UnknownLeaderEpochError); both are retriable and make the client refresh metadata.

What runs on a schedule (ISR expiry, high-watermark checkpoints, retention, the cleaner, the
metrics) is the host's one tick over all of its replicas; a replica offers the steps
(``maybe_shrink_isr``, ``checkpoint_due``, ``apply_retention``, ``cleaning_due``, ...).
Long-polling fetches wait in the host as well (one wait for many partitions): a replica
reads (``read``) and tells its host of every change (``on_change``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.auth_helper import TOPIC, AuthHelper, Caller, Op
from actors.authorizer import StandardAuthorizer
from actors.broker.links import HostLink, Links
from actors.broker.partition_files import partition_dir, read_topic_id, remove_stray, write_topic_id
from actors.broker.replica_fetcher import ReplicaFetchers
from actors.broker.replica_metrics import ReplicaMetrics
from actors.broker.replica_state import ReplicaState
from actors.broker.waiters import Waiters
from actors.clock import SYSTEM, Clock
from actors.metrics import Recorder
from actors.names import INTERNAL_TOPICS
from actors.protocol import (
    AbortedTransaction,
    AlterPartitionRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    IsolationLevel,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceOrder,
    ProduceRequest,
    ProduceResponse,
    ReplicaRole,
    TransactionResult,
    WriteTxnMarkersRequest,
    checked_request,
    require,
)
from actors.protocol_broker import LeaderAndIsrPartitionState, PartitionRequests, only_answer
from actors.txn_verification import VERIFICATION_KEY, TransactionVerifier
from actors.types import OffsetAndTimestamp
from storage import AppendOrigin, Log, log_config
from storage.batch_header import BatchHeader, has_control_batch
from storage.checkpoint import read_offset, write_offset
from storage.cleaner import clean, cleanable, dirty_ratio
from storage.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaStorageError,
    NetworkError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownLeaderEpochError,
)
from storage.leader_epoch import UNDEFINED_EPOCH, LeaderEpochFileCache
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from storage.records.control import build_control_batch

logger = logging.getLogger(__name__)

# How long a follower's OffsetForLeaderEpoch at an epoch the leader has not taken yet waits
# for the leader's own LeaderAndIsr (sent at the same time).
EPOCH_WAIT_S = 0.5
# How long a batch that arrived ahead of its producer's previous one waits for it.
REORDER_WAIT_S = 5.0
# Producer sessions whose call order a leader remembers (the oldest are forgotten first).
MAX_ORDER_SESSIONS = 10_000
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"

# Broker settings a replica needs for replication; the controller passes its values.
DEFAULT_REPLICATION = {
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.max.bytes": 1048576,
    "replica.fetch.response.max.bytes": 10485760,
    "replica.high.watermark.checkpoint.interval.ms": 5000,
    VERIFICATION_KEY: True,  # KIP-890: a transaction's first batch here is verified (actors.txn_verification)
}


@dataclass(slots=True, eq=False)
class HostServices:
    """What a host shares with every replica it holds: its broker id and clock, its replica
    fetchers, how it reaches other hosts and the controller (``links``; ``controller`` is
    the controller's handle from the latest LeaderAndIsr, None before one), the check of
    native clients' principals against its one ACL view (``auth``), its metrics recorder,
    the broker's replication settings, the Ray node it runs on (for ``describe``) and the
    cluster's namespace."""

    broker_id: int
    clock: Clock
    fetchers: ReplicaFetchers
    links: Links
    auth: AuthHelper
    recorder: Recorder | None = None
    replication: dict[str, Any] = dataclasses.field(default_factory=lambda: dict(DEFAULT_REPLICATION))
    controller: Any = None
    node_id: str = ""
    namespace: str = ""  # the cluster's Ray namespace (where the transaction coordinator is)

    @classmethod
    def alone(cls, broker_id: int, clock: Clock = SYSTEM) -> HostServices:
        """Services for a replica opened by hand (tools, tests): no metrics, no authorizer,
        peers reached as they are."""
        links = Links()
        allow_all = StandardAuthorizer(enabled=False)

        async def authorizer() -> StandardAuthorizer:
            return allow_all

        return cls(broker_id, clock, ReplicaFetchers(broker_id, links, clock), links, AuthHelper(authorizer))


class PartitionReplica:
    """One replica of a partition, opened by its host when the controller places it there."""

    def __init__(
        self,
        topic: str,
        partition: int,
        data_dir: str,
        config: dict[str, Any],
        topic_id: str | None,
        services: HostServices,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id = services.broker_id
        self.topic_id = topic_id
        self._services = services
        self._config = log_config(config)
        self._dir = partition_dir(data_dir, topic, partition)
        # A topic deleted while this broker was down left its directory here (KIP-516).
        remove_stray(self._dir, topic_id)
        # Opening recovers the log: indexes rebuilt, torn tail cut.
        self._log = Log(self._dir, self._config)
        if topic_id is not None and read_topic_id(self._dir) != topic_id:
            write_topic_id(self._dir, topic_id)
        self._epochs = LeaderEpochFileCache(self._dir)
        # Recovery may have cut a torn tail that the epoch cache still covers.
        self._epochs.truncate_from_end(self._log.log_end_offset)
        hw = min(read_offset(self._dir / HIGH_WATERMARK_FILE) or 0, self._log.log_end_offset)
        self._clock = clock = services.clock
        # Role, epochs, ISR, follower lag and the HW: the rules live in ReplicaState.
        self._state = ReplicaState(f"{topic}-{partition}", broker_id, hw, clock)
        # The broker's replication settings as its host has them; a LeaderAndIsr may change
        # them for this replica.
        self._replication = dict(services.replication)
        self._state.lag_time_max_ms = self._replication["replica.lag.time.max.ms"]
        self._hw_checkpointed = hw
        # The host's checkpoint write in its thread that covers this replica, while it runs.
        self.checkpointing: asyncio.Future | None = None
        self._log.update_high_watermark(hw)
        self._leader_handle: Any = None  # the leader's ReplicaRef a follower fetches from
        # KIP-890: a transaction's first batch here is verified with the transaction coordinator.
        self._txn = TransactionVerifier(topic, partition, services.namespace, self._replication)
        self._fetcher: asyncio.Task | None = None  # as a follower: truncation, then its host's fetcher
        self.fetch_paused = False
        self.fetch_delay_s = 0.0  # fault injection: a slow network to the leader
        # acks=all produces and reordered calls wait here; the host's waiting fetches are
        # told of every change through on_change.
        self._waiters = Waiters()
        self._on_change = on_change
        self._next_turns: dict[str, int] = {}  # producer session -> its next call number here
        self._cleaning: asyncio.Task | None = None
        self.metrics = ReplicaMetrics(topic, partition, broker_id, services.recorder, clock)
        self._auth = services.auth
        logger.info("replica %s-%d on broker %d opened at %s", topic, partition, broker_id, self._dir)

    # -- role changes (driven by the controller) ------------------------------------------

    async def become_leader(self, state: LeaderAndIsrPartitionState, replication: dict[str, Any] | None = None) -> int:
        """Take leadership at the state's leader epoch (or take a new ISR/replica list at the
        same epoch); ``state.leader`` must be this broker. ``replication``: the controller's
        replica.* settings.

        Returns the log end offset. An older epoch than this replica's is ignored.
        """
        if type(state) is not LeaderAndIsrPartitionState or state.leader != self.broker_id:
            raise InvalidRequestError(f"broker {self.broker_id} cannot lead on {state!r:.200}")
        leader_epoch, partition_epoch = state.leader_epoch, state.partition_epoch
        replicas, isr = state.replicas, state.isr
        if leader_epoch < self._state.leader_epoch:
            return self._log.log_end_offset
        self._take_replication(replication)
        if self._state.role == ReplicaRole.LEADER and leader_epoch == self._state.leader_epoch:
            # Same term: the controller changed the ISR or the replica set.
            if partition_epoch >= self._state.partition_epoch:
                self._state.set_membership(replicas, isr, partition_epoch)
            self._advance_hw()
            self._notify()
            return self._log.log_end_offset
        self._stop_fetcher()
        self._leader_handle = None
        # The epoch starts here even before its first append: followers asking where their
        # older epoch ended get this offset (Kafka assigns it on becoming leader, too).
        self._state.lead(leader_epoch, partition_epoch, replicas, isr, self._log.log_end_offset)
        self._epochs.assign(leader_epoch, self._state.epoch_start_offset)
        self._advance_hw()
        self._notify()
        logger.info(
            "%s-%d: broker %d leads at epoch %d (LEO %d, HW %d, ISR %s)", self.topic, self.partition,
            self.broker_id, leader_epoch, self._log.log_end_offset, self._state.hw, self._state.isr,
        )  # fmt: skip
        return self._log.log_end_offset

    async def become_follower(
        self, state: LeaderAndIsrPartitionState, replication: dict[str, Any] | None = None
    ) -> bool:
        """Follow ``state.leader`` (its replica: ``state.leader_handle``) at the state's
        leader epoch: truncate the divergent suffix, then fetch. ``replication``: the
        controller's replica.* settings.

        Returns False (and changes nothing) for an epoch older than this replica's.
        """
        if type(state) is not LeaderAndIsrPartitionState or state.leader_handle is None:
            raise InvalidRequestError(f"broker {self.broker_id} cannot follow on {state!r:.200}")
        leader_epoch, leader_id, leader = state.leader_epoch, state.leader, state.leader_handle
        if leader_epoch < self._state.leader_epoch:
            return False
        self._take_replication(replication)
        current = self._state
        current.replicas, current.isr, current.partition_epoch = (
            tuple(state.replicas),
            tuple(state.isr),
            state.partition_epoch,
        )
        if (
            current.role == ReplicaRole.FOLLOWER
            and leader_epoch == current.leader_epoch
            and leader_id == current.leader_id
            # The same leader at the same epoch may be in a new host (recreated after it died).
            and leader == self._leader_handle
            and self._fetcher is not None
            and not self._fetcher.done()
        ):
            return True
        self._stop_fetcher()
        current.follow(leader_epoch, leader_id, state.replicas, state.isr, state.partition_epoch)
        self._leader_handle = leader
        self._fetcher = asyncio.get_running_loop().create_task(self._follow(leader, leader_epoch))
        # Wake produce calls waiting here as leader: they now fail with NotLeader.
        self._notify()
        logger.info(
            "%s-%d: broker %d follows %d at epoch %d", self.topic, self.partition, self.broker_id,
            leader_id, leader_epoch,
        )  # fmt: skip
        return True

    def _take_replication(self, replication: dict[str, Any] | None) -> None:
        """The controller's replication settings (replica.lag.time.max.ms, fetch sizes)."""
        if replication:
            self._replication.update(replication)
            self._state.lag_time_max_ms = self._replication["replica.lag.time.max.ms"]

    async def update_config(self, config: dict[str, Any]) -> None:
        """Apply new topic-level config overrides (alter configs)."""
        new_config = log_config(config)
        await self._finish_cleaning()
        self._config = new_config
        # Reopening is cheap after a clean close (no recovery scan), and nothing runs in
        # between: there is no await from here to the reopen.
        self._log.close()
        self._log = Log(self._dir, self._config)
        self._log.update_high_watermark(self._state.hw)

    async def produce(self, request: ProduceRequest) -> ProduceResponse:
        """Append whole record batches; returns where the first one landed.

        ``acks`` is 0, 1 or -1 (all). With -1 the call returns once every ISR member has
        the batches (the HW passed them), and refuses up front when the ISR is smaller
        than min.insync.replicas (NotEnoughReplicasError). ``origin`` is AppendOrigin.CLIENT
        (producer data: every record validated, epoch and sequence checks) or COORDINATOR
        (transactional offset commits: epoch checks only), or its value. Control batches
        are refused from either (InvalidRecordError): transaction markers are written only
        by ``write_txn_marker``. An internal topic (``__consumer_offsets``,
        ``__transaction_state``) takes only the coordinators' appends: a CLIENT one is
        InvalidTopicError, as Kafka's ReplicaManager refuses appends to internal topics
        unless ``internalTopicsAllowed``. A retried batch the log already holds appends nothing
        and is answered with its original offsets (for acks=-1 once the HW covers them).
        A bad request is InvalidRequestError (InvalidRequiredAcksError for ``acks``) and
        leaves the log as it was.

        ``order`` comes with the calls of a producer without idempotence, numbered per
        partition: call ``number`` is appended after the session's calls from ``oldest``
        (the oldest it has unanswered) to ``number - 1``, waiting up to REORDER_WAIT_S for
        them. Kafka gets that order from its TCP connection; Ray may start an async actor's
        calls out of order (a call whose arguments arrive first runs first).
        """
        require(request, ProduceRequest)
        order = request.checked_order()
        try:
            request = request.checked()
            if request.principal is not None:  # the data path: no await without one
                await self._auth.check(request, Op.WRITE, TOPIC, self.topic)
            if request.origin is AppendOrigin.CLIENT and self.topic in INTERNAL_TOPICS:
                # Only the coordinators write their state: one client record there could
                # stop the next start (Kafka: InvalidTopicException, internalTopicsAllowed).
                raise InvalidTopicError(f"cannot append to internal topic {self.topic}")
            if request.origin is AppendOrigin.COORDINATOR and has_control_batch(request.records):
                # The coordinators' markers go through write_txn_marker, which builds them itself.
                raise InvalidRecordError("control batches are written by write_txn_marker only")
        except (InvalidRequestError, InvalidRecordError, InvalidTopicError, TopicAuthorizationFailedError) as exc:
            if order is not None:  # refused: the session's next call must not wait for it
                self._end_turn(order)
                self._notify()
            self.metrics.produce_failed(request.acks, exc)
            raise
        if not self.metrics.enabled:
            return await self._produce(request)
        started = self._clock.monotonic()
        try:
            result = await self._produce(request)
        except BaseException as exc:
            self.metrics.produce_failed(request.acks, exc, started)
            raise
        self.metrics.request_done("Produce", request.acks, started)
        return result

    async def _produce(self, request: ProduceRequest, count: bool = True) -> ProduceResponse:
        """``produce`` of a checked request; also the marker path's (``count`` false: markers
        are not messages in)."""
        records, acks, timeout_ms = request.records, request.acks, request.timeout_ms
        leader_epoch, origin, order = request.current_leader_epoch, request.origin, request.order
        if order is not None:
            await self._wait_for_turn(order, min(timeout_ms / 1000, REORDER_WAIT_S))
        try:
            self._check_leader(leader_epoch)
            min_isr = self._config["min.insync.replicas"]
            if acks == -1 and len(self._state.isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"{self.topic}-{self.partition}: ISR {list(self._state.isr)} is smaller than min.insync.replicas={min_isr}"
                )
            try:
                info = await self._txn.append(self._log, request, lambda: self._state.leader_epoch, self._check_leader)
            except OutOfOrderSequenceError:
                if origin is not AppendOrigin.CLIENT:
                    raise
                info = await self._append_in_order(
                    records, origin, leader_epoch, min(timeout_ms / 1000, REORDER_WAIT_S)
                )
            except OSError as exc:  # the log turns OSError into KafkaStorageError; be safe anyway
                raise KafkaStorageError(f"{self.topic}-{self.partition}: {exc}") from None
        except BaseException:
            if order is not None:  # refused: the session's next call must not wait for it
                self._end_turn(order)
                self._notify()
            raise
        if order is not None:
            self._end_turn(order)  # the notify below wakes the session's next call
        if count and not info.duplicate:
            self.metrics.appended(info, len(records))
        if not info.duplicate or order is not None:
            self._advance_hw()
            self._notify()
        result = ProduceResponse(info.first_offset, info.log_append_time, info.log_start_offset, info.last_offset)
        if acks != -1:
            return result
        required, epoch = info.last_offset + 1, self._state.leader_epoch
        replicated = await self._wait_until(
            lambda: not self._state.is_leading(epoch) or self._state.hw >= required,
            timeout_ms / 1000,
        )
        if not replicated:
            raise RequestTimedOutError(
                f"{self.topic}-{self.partition}: offset {info.last_offset} not replicated to ISR "
                f"{list(self._state.isr)} within {timeout_ms} ms"
            )
        if not self._state.is_leading(epoch):
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.partition}: leadership moved before replication")
        if len(self._state.isr) < min_isr:
            raise NotEnoughReplicasAfterAppendError(
                f"{self.topic}-{self.partition}: ISR shrank to {list(self._state.isr)} below min.insync.replicas={min_isr}"
            )
        return result

    async def _wait_for_turn(self, order: ProduceOrder, timeout_s: float) -> None:
        """Wait until the calls of ``order``'s session numbered below its own were appended
        (or failed), at most ``timeout_s``: after that it goes ahead, as a call after a lost
        one would in Kafka."""
        session, n, oldest = order.session, order.number, order.oldest
        turns = self._next_turns
        expected = max(turns.pop(session, oldest), oldest)
        turns[session] = expected  # re-inserted: the dict's order is least recently used first
        if len(turns) > MAX_ORDER_SESSIONS:
            del turns[next(iter(turns))]
        if n > expected:
            await self._wait_until(lambda: self._state.closed or self._next_turns.get(session, n) >= n, timeout_s)

    def _end_turn(self, order: ProduceOrder) -> None:
        """Call ``order`` is done (appended or refused); the caller notifies its successors."""
        if self._next_turns.get(order.session, -1) <= order.number:
            self._next_turns[order.session] = order.number + 1

    async def _append_in_order(self, records: bytes, origin: AppendOrigin, leader_epoch: int, timeout_s: float) -> Any:
        """Append a batch that came ahead of its producer's previous one.

        An async Ray actor runs calls out of order (a call whose arguments arrive first runs
        first), so a producer's in-flight batches may reach the log swapped, which Kafka's
        TCP connection never does. Wait for the log to grow (the missing batch) and try
        again, until ``timeout_s``; then the OutOfOrderSequenceError stands.
        """
        deadline = self._clock.monotonic() + timeout_s
        while True:
            end = self._log.log_end_offset
            grew = await self._wait_until(
                lambda end=end: (
                    self._state.closed or self._state.role != ReplicaRole.LEADER or self._log.log_end_offset != end
                ),
                deadline - self._clock.monotonic(),
            )
            self._check_leader(leader_epoch)
            try:
                return self._txn.retry(self._log, records, origin, self._state.leader_epoch)
            except OutOfOrderSequenceError:
                if not grew or self._clock.monotonic() >= deadline:
                    raise

    async def write_txn_marker(self, request: WriteTxnMarkersRequest) -> ProduceResponse:
        """Write a transaction's COMMIT or ABORT marker (WriteTxnMarkers); answers the
        marker's append (its offset is ``base_offset``).

        Written as the transaction coordinator's (epoch checks, no sequence), acks=all: it
        returns once the ISR has it, so the last stable offset can pass the transaction.
        """
        request = checked_request(request, WriteTxnMarkersRequest)
        marker = build_control_batch(
            request.transaction_result is TransactionResult.COMMIT,
            request.producer_id,
            request.producer_epoch,
            request.coordinator_epoch,
        )
        return await self._produce(
            ProduceRequest(marker, -1, request.timeout_ms, request.current_leader_epoch, AppendOrigin.COORDINATOR),
            count=False,
        )

    # -- reads (the host's fetch_messages waits; a replica answers what is there now) -----

    def read(self, request: FetchRequest, limit: int, min_one_batch: bool = True) -> FetchResponse:
        """Whole batches from ``request.fetch_offset``, up to ``limit`` bytes (at least one
        batch with ``min_one_batch``, KIP-74), without waiting; ``request`` is checked
        (``checked()``) and its principal authorized by the host.

        A consumer (``replica_id`` -1) reads up to the high watermark, or with READ_COMMITTED
        up to the last stable offset, and then also gets the aborted transactions in the
        returned range. A follower (its broker id) reads up to the log end and its
        ``fetch_offset`` tells the leader its LEO. Raises OffsetOutOfRangeError outside
        [log start, log end] and the leader's epoch errors.
        """
        self._check_leader(request.current_leader_epoch)
        follower = request.replica_id >= 0
        if follower:
            self._on_follower_fetch(request.replica_id, request.fetch_offset)
        committed = request.isolation_level is IsolationLevel.READ_COMMITTED and not follower
        return self._read(request.fetch_offset, limit, follower, committed, min_one_batch)

    @property
    def leader_epoch(self) -> int:
        """The leader epoch this replica knows."""
        return self._state.leader_epoch

    def follower_fetch_ready(self, offset: int, seen_epoch: int, end: int) -> bool:
        """Whether a follower's fetch waiting at ``offset`` (which saw leader epoch
        ``seen_epoch`` and the log end at ``end``) should read again: this replica closed or
        its epoch changed, or its log end moved past ``offset`` and past ``end``."""
        state = self._state
        if state.closed or state.leader_epoch != seen_epoch:
            return True
        now = self._log.log_end_offset
        return now > offset and now != end

    async def offset_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> EpochEndOffset:
        """OffsetForLeaderEpoch: the largest epoch not above ``leader_epoch`` and where it
        ended in this log.

        (-1, -1) when this log holds no epoch that old. Followers use it to find where
        their log diverges from the leader's. A follower that names a newer epoch than this
        replica knows heard of the election first (the controller tells every host at once):
        the call waits up to EPOCH_WAIT_S for this replica's LeaderAndIsr before it answers.
        """
        request = checked_request(request, OffsetForLeaderEpochRequest)
        asked = request.current_leader_epoch
        if asked > self._state.leader_epoch:
            await self._wait_until(lambda: self._state.closed or self._state.leader_epoch >= asked, EPOCH_WAIT_S)
        self._check_leader(asked)
        return EpochEndOffset(*self._epochs.end_offset_for(request.leader_epoch, self._log.log_end_offset))

    async def list_offsets(self, request: ListOffsetsRequest) -> OffsetAndTimestamp:
        """Earliest (-2), latest (-1: the high watermark, or the last stable offset with
        READ_COMMITTED), the record with the largest timestamp (-3, KIP-734), or the first
        offset with timestamp >= ``timestamp``.

        A timestamp past every record answers offset -1, as Kafka does. Another negative
        timestamp, a non-integer or an isolation level other than 0 or 1 is
        InvalidRequestError.
        """
        request = checked_request(request, ListOffsetsRequest)
        await self._auth.check(request, Op.DESCRIBE, TOPIC, self.topic)
        timestamp = request.timestamp
        self._check_leader(request.current_leader_epoch)
        if timestamp != EARLIEST_TIMESTAMP and self._state.epoch_start_offset > self._state.hw:
            # Kafka's rule: a new leader whose HW has not yet reached the start of its epoch
            # (its followers have not fetched yet) would answer an end offset that is too low.
            raise OffsetNotAvailableError(
                f"{self.topic}-{self.partition}: the new leader's high watermark {self._state.hw} has not reached "
                f"its epoch start {self._state.epoch_start_offset} yet"
            )
        limit = self._lso() if request.isolation_level is IsolationLevel.READ_COMMITTED else self._state.hw
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(limit, -1, self._state.leader_epoch)
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetAndTimestamp(self._log.log_start_offset, -1, self._state.leader_epoch)
        found = self._log.offset_for_timestamp(timestamp)  # a time, or MAX_TIMESTAMP
        if found is None or found.offset >= limit:
            return OffsetAndTimestamp(-1, -1, self._state.leader_epoch)
        return OffsetAndTimestamp(found.offset, found.timestamp, self._state.leader_epoch)

    async def delete_records(self, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        """Advance the log start offset to ``offset`` (-1: the high watermark); answers the
        new log start offset.

        Followers follow the leader's log start offset from fetch answers. Another negative
        ``offset`` is OffsetOutOfRangeError, as in Kafka's DeleteRecords. A native caller's
        principal needs DELETE on the topic.
        """
        request = checked_request(request, DeleteRecordsRequest)
        await self._auth.check(request, Op.DELETE, TOPIC, self.topic)
        offset = request.offset
        self._check_leader(request.current_leader_epoch)
        if offset < -1:
            raise OffsetOutOfRangeError(f"delete_records({offset}): use an offset >= 0, or -1 for the high watermark")
        target = self._state.hw if offset == -1 else offset
        if target > self._state.hw:
            raise OffsetOutOfRangeError(f"delete_records({offset}) past the high watermark {self._state.hw}")
        return DeleteRecordsResponse(self._log.delete_records(target, high_watermark=self._state.hw))

    # -- leader side of replication -------------------------------------------------------

    def _on_follower_fetch(self, replica_id: int, offset: int) -> None:
        """A follower's fetch tells its LEO: update its lag, maybe the ISR and the HW."""
        expansion = self._state.follower_fetched(replica_id, offset, self._log.log_end_offset)
        if expansion is not None:
            self._propose_isr(expansion)
        self._advance_hw()

    def _advance_hw(self) -> None:
        if self._state.advance_hw(self._log.log_end_offset):
            self._log.update_high_watermark(self._state.hw)
            self._notify()

    def maybe_shrink_isr(self) -> None:
        """ISR expiry (the host's tick): as leader, propose the ISR without the followers
        that lagged longer than replica.lag.time.max.ms."""
        shrunk = self._state.isr_shrink()
        if shrunk is not None:
            logger.info(
                "%s-%d: replicas %s lag more than %.1fs; shrinking the ISR",
                self.topic,
                self.partition,
                [b for b in self._state.isr if b not in shrunk],
                self._state.lag_time_max_ms / 1000,
            )
            self._propose_isr(shrunk)

    def _propose_isr(self, isr: tuple[int, ...]) -> None:
        """Ask the controller for a new ISR (one change in flight at a time)."""
        if self._services.controller is None or self._state.pending_isr is not None:
            return
        self._state.pending_isr = tuple(isr)
        asyncio.get_running_loop().create_task(self._alter_partition(tuple(isr)))

    async def _alter_partition(self, isr: tuple[int, ...]) -> None:
        epoch = self._state.leader_epoch
        try:
            controller = self._services.links.controller(self._services.controller)
            answer = await controller.alter_partition(
                AlterPartitionRequest(
                    self.topic, self.partition, self.broker_id, epoch, self._state.partition_epoch, isr
                )
            )
            self._state.isr_changed(answer.leader_epoch, answer.partition_epoch, answer.isr)
        except Exception:  # controller restarting: the next ISR expiry or fetch proposes again
            logger.warning("%s-%d: ISR change to %s failed", self.topic, self.partition, list(isr), exc_info=True)
        finally:
            self._state.pending_isr = None
        self._advance_hw()
        self._notify()

    # -- follower side of replication -----------------------------------------------------

    async def _follow(self, leader: Any, epoch: int) -> None:
        """Follow ``leader`` (a ReplicaRef) until the role or epoch changes (the host cancels
        this task): cut the divergent suffix, then let this host's fetcher for the leader's
        host fetch, until it hands back an error only this replica can handle."""
        link = self._services.links.host(leader.host)
        while not self._state.closed and self._state.role == ReplicaRole.FOLLOWER and self._state.leader_epoch == epoch:
            try:
                if self.fetch_paused:
                    await asyncio.sleep(0.02)
                    continue
                await self._truncate_to_leader(link, epoch)
                raise await self._services.fetchers.follow(self, leader, epoch)
            except asyncio.CancelledError:
                raise
            except OffsetOutOfRangeError:
                await self._reset_below_log_start(link, epoch)
            except (InvalidRequestError, CorruptRecordError):
                # Our log and the leader's disagree on batch boundaries: find the divergence again.
                logger.warning(
                    "%s-%d: follower append refused; re-truncating", self.topic, self.partition, exc_info=True
                )
                await asyncio.sleep(0.05)
            except UnknownLeaderEpochError:
                # The leader's host has not taken this epoch yet (its LeaderAndIsr went out
                # with ours): ask again shortly.
                await asyncio.sleep(0.005)
            except (NotLeaderOrFollowerError, FencedLeaderEpochError, NetworkError):
                # The leader moved or its host died; the controller will tell us the new one.
                await asyncio.sleep(0.05)
            except Exception:
                logger.exception("%s-%d: follower fetch failed", self.topic, self.partition)
                await asyncio.sleep(0.2)

    def apply_fetched(self, result: FetchResponse, epoch: int) -> None:
        """Append what the fetcher got from the leader at ``epoch`` (the leader's bytes, its
        offsets), then take the leader's HW and log start. An answer for an older term or a
        closed replica is dropped. InvalidRequestError/CorruptRecordError when the log
        refuses the batches (the logs disagree: the fetcher hands it back to ``_follow``)."""
        state = self._state
        if state.closed or state.role != ReplicaRole.FOLLOWER or state.leader_epoch != epoch:
            return
        if result.records:
            info = self._log.append(result.records, assign_offsets=False)
            self._assign_epochs(info.headers)
        leo = self._log.log_end_offset
        hw = min(result.high_watermark, leo)
        if hw > state.hw:
            self._set_hw(hw)
        if result.log_start_offset > self._log.log_start_offset:
            self._log.delete_records(min(result.log_start_offset, leo), high_watermark=leo)

    def fetch_position(self, committed: bool) -> tuple[int, int, int, bool]:
        """A parked consumer fetch's watch (``actors.broker.delayed_fetch``): the readable end
        (the LSO if ``committed``, else the HW; -1 when closed), the log's bytes, the leader
        epoch, and whether it is closed."""
        s = self._state
        return -1 if s.closed else self._lso() if committed else s.hw, self._log.size_in_bytes, s.leader_epoch, s.closed

    @property
    def replication(self) -> dict[str, Any]:
        """The broker's replication settings this replica has (fetch sizes and waits)."""
        return self._replication

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._log.log_end_offset

    async def _truncate_to_leader(self, leader: HostLink, epoch: int) -> None:
        """Cut the suffix that differs from the leader's log (KIP-279's epoch walk)."""
        while True:
            mine, leo = self._epochs.latest_epoch, self._log.log_end_offset
            if mine == UNDEFINED_EPOCH:
                # No epoch history (an empty log, or one written before the cache existed).
                self._truncate(self._state.hw)
                return
            asked = OffsetForLeaderEpochRequest(mine, epoch)
            theirs = only_answer(
                await leader.offsets_for_leader_epoch(PartitionRequests(((self.topic, self.partition, asked),)))
            )
            their_epoch, their_end = theirs.leader_epoch, theirs.end_offset
            if self._state.role != ReplicaRole.FOLLOWER or self._state.leader_epoch != epoch:
                return
            if their_epoch == UNDEFINED_EPOCH:
                self._truncate(self._state.hw)
                return
            if their_epoch == mine:
                self._truncate(min(their_end, leo))
                return
            # The leader never had our last epoch: keep at most where its last common epoch
            # ended in both logs, then ask again about our (now older) last epoch.
            my_end = self._epochs.end_offset_for(their_epoch, leo)[1]
            target = min(their_end, my_end) if my_end >= 0 else self._state.hw
            self._truncate(target)
            if self._epochs.latest_epoch >= mine:  # no progress possible: stop rather than spin
                return

    def _truncate(self, offset: int) -> None:
        if offset < self._log.log_end_offset:
            logger.info(
                "%s-%d: broker %d truncates %d -> %d", self.topic, self.partition, self.broker_id,
                self._log.log_end_offset, offset,
            )  # fmt: skip
            self._log.truncate_to(offset)
        leo = self._log.log_end_offset
        self._epochs.truncate_from_end(leo)
        self._set_hw(min(self._state.hw, leo))

    def _assign_epochs(self, headers: list[BatchHeader]) -> None:
        latest = self._epochs.latest_epoch
        for h in headers:
            if h.partition_leader_epoch > latest:
                self._epochs.assign(h.partition_leader_epoch, h.base_offset)
                latest = h.partition_leader_epoch

    def _stop_fetcher(self) -> None:
        if self._fetcher is not None:
            self._fetcher.cancel()
            self._fetcher = None

    async def _reset_below_log_start(self, leader: HostLink, epoch: int) -> None:
        asked = ListOffsetsRequest(EARLIEST_TIMESTAMP, epoch)
        start = only_answer(await leader.list_offsets(PartitionRequests(((self.topic, self.partition, asked),))))
        if self._log.log_end_offset < start.offset:
            # Everything we hold is older than the leader's log start: start over there.
            self._log.truncate_fully_and_start_at(start.offset)
            self._epochs.clear()
            self._set_hw(start.offset)

    # -- the host's scheduled steps -------------------------------------------------------

    def maybe_flush(self) -> None:
        """flush.ms / flush.messages: fsync the log when its settings say it is due."""
        self._log.maybe_flush()

    def checkpoint_due(self) -> int | None:
        """The high watermark to checkpoint (Kafka's replica.high.watermark.checkpoint.interval.ms),
        or None when the file already has it."""
        hw = self._state.hw
        return None if hw == self._hw_checkpointed or self._log.closed else hw

    def write_checkpoint(self, hw: int) -> None:
        """Write and fsync ``hw`` to the checkpoint file (the host calls it in a worker thread,
        so no request waits while the disk syncs). A checkpoint behind the log is safe: a
        reopened replica starts from a lower high watermark, which only grows."""
        write_offset(self._checkpoint_path, hw)

    def checkpointed(self, hw: int) -> None:
        """``hw`` is on disk."""
        self._hw_checkpointed = hw

    @property
    def _checkpoint_path(self) -> Path:
        return self._dir / HIGH_WATERMARK_FILE

    def apply_retention(self) -> None:
        """log.retention.check.interval.ms: forget idle producers (producer.id.expiration.ms),
        delete the segments retention.ms / retention.bytes let go, and the files left for
        deletion."""
        self._log.remove_expired_producers()
        deleted = self._log.delete_old_segments(high_watermark=self._state.hw)
        self._log.delete_pending_files()
        if deleted:
            self._epochs.truncate_from_start(self._log.log_start_offset)
            logger.info("%s-%d: retention deleted %d segments", self.topic, self.partition, deleted)

    def cleaning_due(self) -> float | None:
        """How dirty the log is when cleanup.policy has compact, it is dirty enough to clean
        and no cleaner pass runs here; else None. Every replica cleans its own log (as each
        Kafka broker does), never past the last stable offset."""
        if "compact" not in self._config["cleanup.policy"] or self._log.closed:
            return None
        if self._cleaning is not None and not self._cleaning.done():
            return None
        lso = self._lso()
        return dirty_ratio(self._log, lso) if cleanable(self._log, lso) else None

    def start_cleaning(self) -> asyncio.Task:
        """Start a cleaner pass in a worker thread (the cleaner swaps segments under the log's
        lock, so produce and fetch go on meanwhile); returns its task."""
        self._cleaning = asyncio.get_running_loop().create_task(self.clean_now())
        return self._cleaning

    async def _finish_cleaning(self) -> None:
        """Let a cleaner pass in its thread finish before the log is closed under it."""
        if self._cleaning is not None and not self._cleaning.done():
            try:
                await self._cleaning
            except Exception:  # its failure was logged; closing must go on
                logger.exception("%s-%d: cleaner pass failed", self.topic, self.partition)

    async def clean_now(self, force: bool = False) -> dict[str, Any] | None:
        """Run one cleaner pass up to the last stable offset (never into an open transaction);
        returns its stats (None: nothing to do)."""
        stats = await asyncio.to_thread(clean, self._log, self._lso(), force=force)
        if stats is None:
            return None
        self.metrics.cleaned(stats)
        logger.info("%s-%d: cleaned %s", self.topic, self.partition, stats)
        return dataclasses.asdict(stats)

    def tick_metrics(self) -> None:
        """The log's gauges (the host flushes the counters once for all its replicas)."""
        leader_hw = self._state.hw if self._state.role == ReplicaRole.LEADER else None
        self.metrics.tick(self._log, leader_hw, "compact" in self._config["cleanup.policy"], self._lso)

    # -- introspection, fault injection, closing ------------------------------------------

    async def describe(self, principal: str | None = None) -> dict[str, Any]:
        """Offsets, role, epochs, ISR as this replica sees it, and size (a native caller's
        ``principal`` needs DESCRIBE on the topic)."""
        await self._auth.check(Caller(principal, "DescribePartition"), Op.DESCRIBE, TOPIC, self.topic)
        return {
            "topic": self.topic,
            "partition": self.partition,
            "broker_id": self.broker_id,
            "topic_id": self.topic_id,
            "role": self._state.role,
            "leader_id": self._state.leader_id,
            "leader_epoch": self._state.leader_epoch,
            "partition_epoch": self._state.partition_epoch,
            "replicas": list(self._state.replicas),
            "isr": list(self._state.isr),
            "follower_leos": {b: s.leo for b, s in self._state.followers.items()},
            "epochs": self._epochs.entries,
            "log_start_offset": self._log.log_start_offset,
            "log_end_offset": self._log.log_end_offset,
            "high_watermark": self._state.hw,
            "last_stable_offset": self._lso(),
            "first_unstable_offset": self._log.first_unstable_offset,
            "size_bytes": self._log.size_in_bytes,
            "segments": len(self._log.segments),
            "pid": os.getpid(),
            "node_id": self._services.node_id,
        }

    async def read_local(self, offset: int, max_bytes: int = 1048576) -> tuple[bytes, int]:
        """This replica's own batches from ``offset`` up to its log end, whatever its role.

        For tests and tools comparing replicas; returns (records, next offset).
        """
        data = self._log.read(offset, max_bytes)
        return data.records, data.next_offset

    async def pause_fetching(self, paused: bool) -> None:
        """Fault injection for tests: a paused follower stops fetching, as if cut off from its
        leader, while staying alive (and in the ISR until replica.lag.time.max.ms passes)."""
        self.fetch_paused = paused

    async def delay_fetching(self, delay_ms: float) -> None:
        """Fault injection for tests: every answer of the leader's host reaches this follower's
        host ``delay_ms`` (0 to 60,000) late, as over a slow network; 0: no delay."""
        self.fetch_delay_s = min(max(0.0, float(delay_ms)), 60000.0) / 1000  # NaN: no delay

    @property
    def closed(self) -> bool:
        """Closed: every request is NotLeaderOrFollower."""
        return self._state.closed

    async def close(self, delete: bool = False) -> None:
        """Close the log cleanly (writes the clean-shutdown marker); optionally delete it."""
        self._stop_fetcher()
        self._state.close()
        self._notify()
        await self._finish_cleaning()
        if self.checkpointing is not None:  # the host's periodic write ends before the last one
            await asyncio.wait([self.checkpointing])
        if not self._log.closed:
            if self.checkpoint_due() is not None:
                hw = self._state.hw
                self.write_checkpoint(hw)
                self.checkpointed(hw)
            self.tick_metrics()  # the log's gauges while it can still be read
            self._log.close()
        if delete:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """Consumers never read past this: every ISR member has the records below it."""
        return self._state.hw

    @property
    def role(self) -> ReplicaRole:
        """Leader, follower or offline (not told yet, or closed)."""
        return self._state.role

    def _set_hw(self, hw: int) -> None:
        # The log needs every HW move: a completed transaction stays unstable until its
        # marker is below the HW.
        self._state.hw = hw
        self._log.update_high_watermark(hw)

    def _lso(self) -> int:
        """The last stable offset: read_committed consumers never read past it."""
        return self._log.last_stable_offset(self._state.hw)

    def _read(
        self, offset: int, max_bytes: int, follower: bool, committed: bool, min_one_batch: bool = True
    ) -> FetchResponse:
        hw = self._state.hw
        if follower:
            lso = hw  # followers replicate everything; they ignore the LSO
            data = self._log.read(offset, max_bytes, min_one_batch=min_one_batch)
        else:
            lso = self._log.last_stable_offset(hw)
            data = self._log.read(offset, max_bytes, max_offset=lso if committed else hw, min_one_batch=min_one_batch)
        aborted: tuple[AbortedTransaction, ...] = ()
        if committed and data.records:
            # Kafka's bound: the aborted transactions that overlap the returned batches.
            aborted = tuple(
                AbortedTransaction(txn.producer_id, txn.first_offset)
                for txn in self._log.collect_aborted_transactions(data.first_offset, data.next_offset)
            )
        return FetchResponse(
            data.records,
            hw,
            lso,
            self._log.log_start_offset,
            self._log.log_end_offset,
            self._state.leader_epoch,
            aborted,
        )

    def _check_leader(self, leader_epoch: int) -> None:
        self._state.check_leader(leader_epoch)

    async def _wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate`` holds (checked now and on every notify); False on timeout."""
        return await self._waiters.wait(predicate, timeout_s)

    def _notify(self) -> None:
        """The log, the high watermark or the role changed: wake the waits that can go on."""
        self._waiters.notify()
        if self._on_change is not None:
            self._on_change()
