"""ReplicaManager: the replicas one host holds, and everything it does for all of them at once
(Kafka's ReplicaManager).

A host is the process a broker's replicas live in: by default one per broker, as a Kafka
broker's process holds its partitions; ``rayqueue.broker.placement`` may spread a broker's
replicas over several hosts or give each replica a host of its own (``actors.broker.placement``).
Whatever the placement, a host runs this class, and the Ray actor around it
(``actors.broker.actor.BrokerHost``) only forwards its calls.

What it does for all its replicas at once:

- the calls carry many partitions, as Kafka's ``appendRecords`` and ``fetchMessages`` do:
  :meth:`append_records` (partitions to batches, one answer per partition),
  :meth:`fetch_messages` (many partitions read, one wait for all of them: followers' fetches
  and consumers' alike), :meth:`write_txn_markers`, :meth:`list_offsets`,
  :meth:`offsets_for_leader_epoch`, :meth:`delete_records`; and from the controller
  :meth:`leader_and_isr` (every partition of this host whose state changed), and
  :meth:`open_replicas` / :meth:`close_replicas`. The ``partition_*`` calls are the same for
  one partition (what a ReplicaRef sends), its error raised;
- one background tick (:meth:`tick`): ISR expiry (Kafka's "isr-expiration" task), high-watermark
  checkpoints every
  ``replica.high.watermark.checkpoint.interval.ms`` written together in one worker thread,
  retention every ``log.retention.check.interval.ms``, one cleaner pass at a time on the
  dirtiest compacted log (Kafka's default of one cleaner thread), the flushes
  ``flush.ms`` asks for, and the metrics;
- one copy of the cluster's ACLs (loaded when a native client's principal first needs it)
  and one metrics recorder, shared by its replicas;
- one replica fetcher per leader host (``actors.broker.replica_fetcher``), whose fetches go
  over Kafka's protocol to the leader host's inter-broker listener
  (``actors.broker.inter_broker``), and this host's own such listener for its followers
  (``actors.broker.inter_broker_server``, opened when a follower first asks for it).

The replica's own rules (appends, reads, epochs, the ISR and the high watermark) stay in the
replica (``actors.broker.partition``). Nothing here imports Ray: other hosts and the
controller are reached through links (``actors.broker.links``), so tests drive several
hosts' objects by hand in one process, and a listener in the host's own process can call
these methods directly.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from actors.auth_helper import TOPIC, AuthHelper, Caller, LazyAclView, Op
from actors.broker import delayed_fetch
from actors.broker.iceberg import HostIceberg
from actors.broker.inter_broker import SETTINGS_KEY, InterBrokerLinks, InterBrokerSettings
from actors.broker.inter_broker_server import InterBrokerServer
from actors.broker.links import Links
from actors.broker.partition import DEFAULT_REPLICATION, HostServices, PartitionReplica
from actors.broker.replica_fetcher import ReplicaFetchers
from actors.broker.waiters import PartitionWaiters
from actors.clock import SYSTEM, Clock
from actors.metrics import TICK_S, Recorder
from actors.protocol import (
    INT32_MAX,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    IsolationLevel,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    ProduceResponse,
    WriteTxnMarkersRequest,
    int_field,
    require,
)
from actors.protocol_broker import (
    FetchMessagesRequest,
    FetchPartition,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    OpenReplica,
    PartitionRequests,
    entries_field,
    only_answer,
    partition_entry,
)
from actors.types import OffsetAndTimestamp
from storage.errors import InvalidRequestError, KafkaError, NotLeaderOrFollowerError

logger = logging.getLogger(__name__)

# The tick's period: the finest schedule of its steps (flush.ms checks).
TICK_INTERVAL_S = 0.1
# How often the dirtiest compacted log is looked for (Kafka's cleaner backs off likewise).
CLEANER_CHECK_S = 1.0
# The longest a follower's fetch may long-poll (Kafka bounds replica.fetch.wait.max.ms by
# replica.lag.time.max.ms; this bounds what a hostile caller can park here).
MAX_REPLICA_FETCH_WAIT_MS = 60000
# The longest a consumer's fetch may park here, whatever its caller asks (the gateway bounds
# it lower: rayqueue.fetch.wait.max.ms).
MAX_FETCH_WAIT_MS = 60000

Key = tuple[str, int]


class ReplicaManager:
    """The replicas of broker ``broker_id`` that this host holds (see the module docstring).

    ``links`` reaches other hosts and the controller (by default: the objects themselves);
    ``node_id`` is the Ray node the host runs on, as ``describe`` reports it; ``name`` what
    logs and ``describe_host`` call this host; ``node_ip`` the node's address, where the
    inter-broker listener listens when its listener names no host.
    """

    def __init__(
        self,
        broker_id: int,
        namespace: str = "",
        metrics_enabled: bool = True,
        clock: Clock = SYSTEM,
        links: Links | None = None,
        node_id: str = "",
        name: str = "",
        node_ip: str = "",
    ) -> None:
        self.broker_id = broker_id
        self.name = name or f"broker {broker_id}"
        self.node_ip = node_ip
        self._clock = clock
        self._links = InterBrokerLinks(links if links is not None else Links(), self._inter_broker_settings)
        self._inter_broker: InterBrokerServer | None = None
        self._inter_broker_lock: asyncio.Lock | None = None
        self._recorder = Recorder(namespace, True) if metrics_enabled else None
        # One copy of the ACLs for every replica here (native clients' principals).
        self._acls = LazyAclView(self._controller_for_acls)
        auth = AuthHelper(self._acls, self._recorder, str(broker_id))
        self._auth = auth
        self._fetchers = ReplicaFetchers(broker_id, self._links, clock)
        self._services = HostServices(
            broker_id, clock, self._fetchers, self._links, auth, self._recorder, node_id=node_id, namespace=namespace
        )
        # Iceberg topics: each leader's translation into its topic's table (actors.iceberg).
        self._iceberg = HostIceberg(broker_id, self._recorder, clock, self._links.schema_registry(namespace))
        self._replicas: dict[Key, PartitionReplica] = {}
        # Replicas being closed: a replica opened again in the same directory (a topic deleted
        # and created again) waits until the old one has closed (and deleted its files).
        self._closing: dict[Key, asyncio.Future] = {}
        # Long-polling fetches, watched by partition: followers' here, consumers' parked in the
        # purgatory (actors.broker.delayed_fetch).
        self._waiters = PartitionWaiters()
        self._purgatory = delayed_fetch.FetchPurgatory()
        self._calls_in_flight = 0  # data calls under way (consumers' parked fetches too)
        self._wakes: dict[int, int] = {}  # follower broker -> wake_replica_fetch calls so far
        self._wakes_taken: dict[int, int] = {}  # follower broker -> the wakes its fetches answered
        self._retention_check_ms = 300000
        self._ticking: asyncio.Task | None = None
        self._cleaning: asyncio.Task | None = None
        self._last_run: dict[str, float] = {}  # tick step -> when it last ran (the clock's monotonic)
        self._stopped: asyncio.Future | None = None  # done when the host shuts down
        self._stats = {
            "replica_fetches_served": 0,
            "most_partitions_per_fetch": 0,
            "most_markers_per_call": 0,
            "most_partitions_per_append": 0,
            "leader_and_isr_calls": 0,
            "most_partitions_per_leader_and_isr": 0,
        }

    # -- replicas: opened and closed by the controller ---------------------------------------

    async def open_replicas(self, replicas: list[OpenReplica] | tuple[OpenReplica, ...]) -> list[Any]:
        """Open (recover) each replica's log unless it is open here; answers, in order, whether
        each was opened now (False: it was open) or its error. A replica open here under another
        topic id (a deleted topic's) is closed first."""
        self._ensure_ticking()
        answers: list[Any] = []
        for spec in entries_field(replicas):
            try:
                if type(spec) is not OpenReplica:
                    raise InvalidRequestError(f"expected an OpenReplica, not {spec!r:.80}")
                answers.append(await self._open(spec))
            except Exception as exc:  # noqa: BLE001 - each replica's error goes back in its answer
                logger.exception("%s: opening %r failed", self.name, spec)
                answers.append(exc)
        return answers

    async def _open(self, spec: OpenReplica) -> bool:
        key = (spec.topic, spec.partition)
        open_now = self._replicas.get(key)
        if open_now is not None:
            if spec.topic_id is None or open_now.topic_id in (None, spec.topic_id):
                return False
            await self._close(key, False)
        closing = self._closing.get(key)
        if closing is not None:
            await asyncio.shield(closing)
        if key in self._replicas:  # opened by a concurrent call meanwhile
            return False
        self._replicas[key] = PartitionReplica(
            spec.topic,
            spec.partition,
            spec.data_dir,
            dict(spec.config),
            spec.topic_id,
            self._services,
            on_change=lambda: self._changed(key),
        )
        return True

    async def close_replicas(self, partitions: list[Key] | tuple[Key, ...], delete: bool = False) -> None:
        """Close the replicas cleanly (and delete their data if asked), together; a replica not
        open here is a no-op. Each close runs to its end even if this call is cancelled."""
        keys = [_key(entry) for entry in entries_field(partitions)]
        await asyncio.gather(*(self._close(key, delete) for key in keys))

    async def _close(self, key: Key, delete: bool) -> None:
        replica = self._replicas.pop(key, None)
        if replica is None:
            closing = self._closing.get(key)
            if closing is not None:
                await asyncio.shield(closing)
            return
        closing = self._closing[key] = asyncio.ensure_future(replica.close(delete))
        closing.add_done_callback(lambda _: self._closing.pop(key, None) if self._closing.get(key) is closing else None)
        await asyncio.shield(closing)
        if self._recorder is not None:  # the closed replica's last counts
            self._recorder.flush()

    async def leader_and_isr(self, request: LeaderAndIsrRequest) -> list[Any]:
        """The controller's LeaderAndIsr for this host: take its settings, then each partition's
        state (leader or follower). Answers per partition: the leader's log end offset, a
        follower's True (False: an older epoch, ignored), or its error."""
        require(request, LeaderAndIsrRequest)
        if request.controller is not None:
            self._services.controller = request.controller
        if request.replication:
            self._services.replication.update(request.replication)
        self._retention_check_ms = int_field("retention_check_ms", request.retention_check_ms, 1, 2**63 - 1)
        entries = entries_field(request.partitions)
        self._stats["leader_and_isr_calls"] += 1
        self._most("most_partitions_per_leader_and_isr", len(entries))
        answers: list[Any] = []
        for entry in entries:
            try:
                topic, partition, state = partition_entry(entry, LeaderAndIsrPartitionState)
                replica = self._replica(topic, partition)
                if state.leader == self.broker_id:
                    answers.append(await replica.become_leader(state, request.replication))
                else:
                    answers.append(await replica.become_follower(state, request.replication))
            except Exception as exc:  # noqa: BLE001 - each partition's error goes back in its answer
                answers.append(exc)
        return answers

    async def update_topic_config(self, topic: str, config: dict[str, Any]) -> int:
        """Apply a topic's new effective config to its replicas here; answers how many."""
        if type(topic) is not str or not isinstance(config, dict):
            raise InvalidRequestError("update_topic_config takes a topic name and its config")
        replicas = [r for (t, _), r in list(self._replicas.items()) if t == topic]
        for replica in replicas:
            await replica.update_config(config)
        return len(replicas)

    # -- the data path: many partitions per call ---------------------------------------------

    async def append_records(self, request: PartitionRequests[ProduceRequest]) -> list[Any]:
        """Kafka's appendRecords: each partition's ProduceRequest appended by its replica
        (acks=all ones waiting for their ISR), together; answers, in order, each partition's
        ProduceResponse or its error."""
        require(request, PartitionRequests)
        entries = entries_field(request.entries)
        self._most("most_partitions_per_append", len(entries))
        return await self._each(entries, ProduceRequest, lambda replica, r: replica.produce(r))

    async def write_txn_markers(self, request: PartitionRequests[WriteTxnMarkersRequest]) -> list[Any]:
        """The transaction coordinator's markers for partitions this host leads, in one call
        (Kafka's WriteTxnMarkers); answers, in order, each marker's ProduceResponse or its
        error. They are written together, each acks=all."""
        require(request, PartitionRequests)
        entries = entries_field(request.entries)
        self._most("most_markers_per_call", len(entries))
        return await self._each(entries, WriteTxnMarkersRequest, lambda replica, r: replica.write_txn_marker(r))

    async def list_offsets(self, request: PartitionRequests[ListOffsetsRequest]) -> list[Any]:
        """ListOffsets for some partitions: each one's OffsetAndTimestamp or its error."""
        require(request, PartitionRequests)
        return await self._each(entries_field(request.entries), ListOffsetsRequest, lambda r, q: r.list_offsets(q))

    async def offsets_for_leader_epoch(self, request: PartitionRequests[OffsetForLeaderEpochRequest]) -> list[Any]:
        """OffsetForLeaderEpoch for some partitions: each one's EpochEndOffset or its error."""
        require(request, PartitionRequests)
        return await self._each(
            entries_field(request.entries), OffsetForLeaderEpochRequest, lambda r, q: r.offset_for_leader_epoch(q)
        )

    async def delete_records(self, request: PartitionRequests[DeleteRecordsRequest]) -> list[Any]:
        """DeleteRecords for some partitions: each one's DeleteRecordsResponse or its error."""
        require(request, PartitionRequests)
        return await self._each(entries_field(request.entries), DeleteRecordsRequest, lambda r, q: r.delete_records(q))

    async def _each(
        self, entries: tuple[Any, ...], kind: type, call: Callable[[PartitionReplica, Any], Awaitable[Any]]
    ) -> list[Any]:
        """``call`` on each entry's replica, together; each answer or error in its place."""

        async def one(entry: Any) -> Any:
            try:
                topic, partition, request = partition_entry(entry, kind)
                return await call(self._replica(topic, partition), request)
            except Exception as exc:  # noqa: BLE001 - each partition's error goes back in its answer
                return exc

        self._calls_in_flight += 1
        try:
            if len(entries) == 1:
                return [await one(entries[0])]
            return list(await asyncio.gather(*(one(entry) for entry in entries)))
        finally:
            self._calls_in_flight -= 1

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        """Kafka's fetchMessages: read every partition, then, unless enough is there, wait once
        for all of them (see FetchMessagesRequest). Answers, in order, each partition's
        FetchResponse, its error, or (a follower's fetch past ``max_bytes``) None for a
        partition with data left for the next round."""
        require(request, FetchMessagesRequest)
        request = request.checked()
        if request.replica_id >= 0:
            return await self._follower_fetch(request)
        self._calls_in_flight += 1
        try:
            return await self._consumer_fetch(request)
        finally:
            self._calls_in_flight -= 1

    async def _follower_fetch(self, request: FetchMessagesRequest) -> list[Any]:
        """A follower broker's fetch (its fetcher's round for every partition it follows from
        here): answered at once when a partition has data or an error, else once one has (or
        its leader epoch changed, or the follower's broker asks to be answered:
        ``wake_replica_fetch``), at most ``max_wait_ms`` later; the answer carries the newest
        high watermarks either way."""
        replica_id = request.replica_id
        max_wait_ms = min(request.max_wait_ms, MAX_REPLICA_FETCH_WAIT_MS)
        self._stats["replica_fetches_served"] += 1
        self._most("most_partitions_per_fetch", len(request.partitions))
        started = self._clock.monotonic()
        fetch = _Fetch(request, True)
        answers: list[Any] = [None] * len(request.partitions)
        await self._resolve(fetch, answers)
        self._read_all(fetch, answers)
        # A wake that came before this fetch (Ray may run a caller's calls out of order) is
        # not lost: the fetch answers at once when one is not taken yet.
        woken = self._wakes.get(replica_id, 0) != self._wakes_taken.get(replica_id, 0)
        watched = [(r, p.fetch_offset, r.leader_epoch, r.log_end_offset) for p, r in fetch.live()]
        if max_wait_ms > 0 and watched and not woken and not fetch.done(answers):
            wakes = self._wakes.get(replica_id, 0)
            await self._waiters.wait(
                [(p.topic, p.partition) for p, _ in fetch.live()],
                lambda: (
                    self._wakes.get(replica_id, 0) != wakes
                    or any(r.follower_fetch_ready(o, e, end) for r, o, e, end in watched)
                ),
                started + max_wait_ms / 1000 - self._clock.monotonic(),
            )
            self._read_all(fetch, answers)
        self._wakes_taken[replica_id] = self._wakes.get(replica_id, 0)
        fetch.record(answers, started)
        return answers

    async def _consumer_fetch(self, request: FetchMessagesRequest) -> list[Any]:
        """A consumer's fetch: its partitions checked here, then read and, when short of
        ``min_bytes``, parked as one operation in the purgatory (``delayed_fetch``)."""
        started = self._clock.monotonic()
        fetch = _Fetch(request, False)
        answers: list[Any] = [None] * len(request.partitions)
        await self._resolve(fetch, answers)
        reads = [
            (
                part.topic,
                part.partition,
                FetchRequest(
                    part.fetch_offset,
                    part.partition_max_bytes,
                    0,
                    1,
                    request.isolation_level,
                    part.current_leader_epoch,
                ),
            )
            for _, part, _ in fetch.parts
        ]
        # A partition answered with its error already: the answer goes at once (DelayedFetch).
        max_wait_ms = 0 if any(a is not None for a in answers) else min(max(0, request.max_wait_ms), MAX_FETCH_WAIT_MS)
        if reads:
            got = await delayed_fetch.fetch_messages(
                self._lookup,
                self._purgatory,
                reads,
                max_wait_ms,
                max(0, request.min_bytes),
                request.max_bytes,
                self._clock,
            )
            for (i, _, _), answer in zip(fetch.parts, got, strict=True):
                answers[i] = answer
        fetch.record(answers, started)
        return answers

    def _lookup(self, entry: tuple[str, int, FetchRequest]) -> tuple[PartitionReplica, FetchRequest]:
        """A consumer fetch's (topic, partition, request): its replica here, and the request."""
        topic, partition, request = entry
        return self._replica(topic, partition), request

    def _changed(self, key: Key) -> None:
        """A replica's log, high watermark or role changed: wake the fetches waiting on it."""
        self._waiters.notify(key)
        self._purgatory.changed(key)

    async def _resolve(self, fetch: _Fetch, answers: list[Any]) -> None:
        """Each partition's replica (its error in its answer when it has none here, when it is
        asked twice, or when the caller's principal may not READ its topic)."""
        seen: set[Key] = set()
        refusals: dict[str, BaseException | None] = {}  # topic -> its refusal (None: may READ)
        principal = fetch.request.principal
        for i, part in enumerate(fetch.request.partitions):
            try:
                if type(part) is not FetchPartition:
                    raise InvalidRequestError(f"a fetch names FetchPartitions, not {part!r:.80}")
                part = part.checked()
                key = (part.topic, part.partition)
                if key in seen:
                    raise InvalidRequestError(f"{part.topic}-{part.partition} asked twice in one fetch")
                seen.add(key)
                replica = self._replica(part.topic, part.partition)
                if principal is not None and not fetch.follower:
                    if part.topic not in refusals:
                        try:
                            await self._auth.check(Caller(principal, "Fetch"), Op.READ, TOPIC, part.topic)
                            refusals[part.topic] = None
                        except KafkaError as exc:  # every partition of the topic answers it
                            refusals[part.topic] = exc
                    refusal = refusals[part.topic]
                    if refusal is not None:
                        raise refusal
                fetch.parts.append((i, part, replica))
            except Exception as exc:  # noqa: BLE001 - the partition's error, in its answer
                answers[i] = exc

    def _read_all(self, fetch: _Fetch, answers: list[Any]) -> None:
        """Read every live partition of a follower's fetch within its byte budget (Kafka's
        replica.fetch.response.max.bytes: each partition's first batch comes whole while the
        budget lasts; past it a partition with data is left out, None, while a caught-up one
        is still read, which tells the leader its log end); answers in place."""
        request = fetch.request
        budget = request.max_bytes
        for i, part, replica in fetch.parts:
            if fetch.failed(i):
                continue
            try:
                if budget <= 0 and replica.log_end_offset > part.fetch_offset:
                    answers[i] = None  # its data goes in a later round
                    continue
                read = FetchRequest(
                    part.fetch_offset,
                    part.partition_max_bytes,
                    0,
                    1,
                    IsolationLevel.READ_UNCOMMITTED,
                    part.current_leader_epoch,
                    request.replica_id,
                )
                answer = replica.read(read, max(0, min(part.partition_max_bytes, budget)), budget > 0)
            except Exception as exc:  # noqa: BLE001 - the partition's error, in its answer
                answers[i] = exc
                fetch.fail(i)
                continue
            budget -= len(answer.records)
            answers[i] = answer

    # -- one partition (what a ReplicaRef sends), its error raised ----------------------------

    async def partition_produce(self, topic: str, partition: int, request: ProduceRequest) -> ProduceResponse:
        """One partition's append (see PartitionReplica.produce)."""
        return only_answer(await self.append_records(PartitionRequests(((topic, partition, request),))))

    async def partition_fetch(self, topic: str, partition: int, request: FetchRequest) -> FetchResponse:
        """One partition's fetch, long-polling as ``request`` says (``max_wait_ms``,
        ``min_bytes``); see fetch_messages."""
        require(request, FetchRequest)
        request = request.checked()
        part = FetchPartition(
            topic, partition, request.fetch_offset, request.partition_max_bytes, request.current_leader_epoch
        )
        many = FetchMessagesRequest(
            (part,),
            request.max_wait_ms,
            request.min_bytes,
            INT32_MAX,
            request.isolation_level,
            request.replica_id,
            request.principal,
        )
        return only_answer(await self.fetch_messages(many))

    async def partition_list_offsets(
        self, topic: str, partition: int, request: ListOffsetsRequest
    ) -> OffsetAndTimestamp:
        """One partition's ListOffsets (see PartitionReplica.list_offsets)."""
        return only_answer(await self.list_offsets(PartitionRequests(((topic, partition, request),))))

    async def partition_offset_for_leader_epoch(
        self, topic: str, partition: int, request: OffsetForLeaderEpochRequest
    ) -> EpochEndOffset:
        """One partition's OffsetForLeaderEpoch."""
        return only_answer(await self.offsets_for_leader_epoch(PartitionRequests(((topic, partition, request),))))

    async def partition_delete_records(
        self, topic: str, partition: int, request: DeleteRecordsRequest
    ) -> DeleteRecordsResponse:
        """One partition's DeleteRecords."""
        return only_answer(await self.delete_records(PartitionRequests(((topic, partition, request),))))

    async def partition_write_txn_marker(
        self, topic: str, partition: int, request: WriteTxnMarkersRequest
    ) -> ProduceResponse:
        """One partition's transaction marker."""
        return only_answer(await self.write_txn_markers(PartitionRequests(((topic, partition, request),))))

    async def partition_describe(self, topic: str, partition: int, principal: str | None = None) -> dict[str, Any]:
        """One replica's offsets, role, epochs and ISR (see PartitionReplica.describe), and its
        Iceberg translation when this host translates it (``iceberg``; else None)."""
        answer = await self._replica(topic, partition).describe(principal)
        answer["iceberg"] = self._iceberg.describe(topic, partition)
        return answer

    async def partition_read_local(
        self, topic: str, partition: int, offset: int, max_bytes: int = 1048576
    ) -> tuple[bytes, int]:
        """One replica's own batches, whatever its role (for tests and tools)."""
        return await self._replica(topic, partition).read_local(offset, max_bytes)

    async def partition_clean_now(self, topic: str, partition: int, force: bool = False) -> dict[str, Any] | None:
        """One cleaner pass on one replica's log now; its stats (None: nothing to do)."""
        return await self._replica(topic, partition).clean_now(force)

    async def partition_pause_fetching(self, topic: str, partition: int, paused: bool) -> None:
        """Fault injection: a follower cut off from its leader (or not any more)."""
        await self._replica(topic, partition).pause_fetching(paused)

    async def partition_delay_fetching(self, topic: str, partition: int, delay_ms: float) -> None:
        """Fault injection: the leader's answers reach this follower ``delay_ms`` late."""
        await self._replica(topic, partition).delay_fetching(delay_ms)

    # -- followers' hosts -------------------------------------------------------------------

    def _inter_broker_settings(self) -> InterBrokerSettings | None:
        """The inter-broker settings the controller sent (None before its first LeaderAndIsr)."""
        return self._services.replication.get(SETTINGS_KEY)

    async def inter_broker_endpoint(self) -> tuple[str, int]:
        """Where this host's followers fetch from it over Kafka's protocol (its inter-broker
        listener, opened on the first call with the settings of the latest LeaderAndIsr)."""
        if self._inter_broker_lock is None:
            self._inter_broker_lock = asyncio.Lock()
        async with self._inter_broker_lock:
            settings = self._inter_broker_settings() or InterBrokerSettings()
            server = self._inter_broker
            if server is not None and server.settings != settings:
                await server.close()  # the settings changed: listen anew with the new ones
                server = None
            if server is None:
                server = self._inter_broker = InterBrokerServer(
                    self.broker_id,
                    settings,
                    self.fetch_messages,
                    self._controller_for_acls,
                    self._scram_credential,
                    self.node_ip,
                )
        return await server.endpoint()

    async def _scram_credential(self, user: str, mechanism: str) -> Any:
        """The controller's SCRAM credential (for the inter-broker listener's logins)."""
        controller = self._services.links.controller(self._controller_for_acls())
        return await controller.scram_credential(user, mechanism)

    def wake_replica_fetch(self, replica_id: int) -> None:
        """Answer follower broker ``replica_id``'s waiting fetch now (its fetcher took a new
        partition, which must not wait for the long poll to end)."""
        replica_id = int_field("replica_id", replica_id, 0, INT32_MAX)
        self._wakes[replica_id] = self._wakes.get(replica_id, 0) + 1
        self._waiters.notify_all()

    # -- the broker-wide tick ----------------------------------------------------------------

    def _ensure_ticking(self) -> None:
        if self._ticking is None or self._ticking.done():
            self._ticking = asyncio.get_running_loop().create_task(self._tick_loop())

    async def _tick_loop(self) -> None:
        while self._stopped is None or not self._stopped.done():
            await asyncio.sleep(TICK_INTERVAL_S)
            try:
                await self.tick()
            except Exception:  # a background error must not stop the tick
                logger.exception("%s: tick failed", self.name)

    async def tick(self) -> None:
        """One turn of the background work, each step on its own schedule (tests on a manual
        clock call it by hand): flushes and ISR expiry on every turn, the cleaner, retention,
        the metrics and the high-watermark checkpoints on their own periods."""
        replicas = list(self._replicas.values())
        for replica in replicas:
            self._step(replica, replica.maybe_flush)
            # ISR expiry: each leader's own replica.lag.time.max.ms decides.
            self._step(replica, replica.maybe_shrink_isr)
        replication = self._services.replication
        try:
            self._iceberg.tick(replicas, replication)
        except Exception:  # the translation's trouble must not stop the tick's other steps
            logger.exception("%s: Iceberg translation tick failed", self.name)
        if self._due_now("cleaner", CLEANER_CHECK_S):
            self._maybe_start_cleaning(replicas)
        if self._due_now("retention", self._retention_check_ms / 1000):
            for replica in replicas:
                self._step(replica, replica.apply_retention)
        if self._recorder is not None and self._due_now("metrics", TICK_S):
            for replica in replicas:
                self._step(replica, replica.tick_metrics)
            self._iceberg.record()
            self._recorder.flush()
        if self._due_now("checkpoint", replication["replica.high.watermark.checkpoint.interval.ms"] / 1000):
            await self._checkpoint(replicas)

    def _due_now(self, step: str, every_s: float) -> bool:
        """Whether ``step`` is due: ``every_s`` since it last ran (or since the host's first
        tick). Read against its last run, so a period the controller shortens applies at once."""
        now = self._clock.monotonic()
        last = self._last_run.get(step)
        if last is None:
            self._last_run[step] = now
            return False
        if now - last < every_s:
            return False
        self._last_run[step] = now
        return True

    def _step(self, replica: PartitionReplica, step: Callable[[], None]) -> None:
        if replica.closed:
            return
        try:
            step()
        except Exception:  # one replica's failure must not stop the others'
            logger.exception("%s-%d: %s failed", replica.topic, replica.partition, step.__name__)

    def _maybe_start_cleaning(self, replicas: list[PartitionReplica]) -> None:
        """Start one cleaner pass on the dirtiest compacted log, unless one runs here."""
        if self._cleaning is not None and not self._cleaning.done():
            return
        dirtiest, ratio = None, -1.0
        for replica in replicas:
            if replica.closed:
                continue
            try:
                due = replica.cleaning_due()
            except Exception:  # a log being replaced under the check: the next turn looks again
                logger.exception("%s-%d: cleaner check failed", replica.topic, replica.partition)
                continue
            if due is not None and due > ratio:
                dirtiest, ratio = replica, due
        if dirtiest is not None:
            self._cleaning = dirtiest.start_cleaning()

    async def _checkpoint(self, replicas: list[PartitionReplica]) -> None:
        """Write every changed high watermark in one worker thread (requests go on meanwhile)."""
        due = [
            (replica, hw) for replica in replicas if not replica.closed and (hw := replica.checkpoint_due()) is not None
        ]
        if not due:
            return
        writing = asyncio.ensure_future(asyncio.to_thread(_write_checkpoints, due))
        for replica, _ in due:
            # Cleared when the thread is done: close() must not write the same file meanwhile.
            replica.checkpointing = writing
        writing.add_done_callback(lambda _: [setattr(r, "checkpointing", None) for r, _ in due])
        written = await asyncio.shield(writing)
        for replica, hw in written:
            replica.checkpointed(hw)

    # -- lifecycle and introspection --------------------------------------------------------

    async def run(self) -> None:
        """Pending for the host's life: the controller watches the host through this call (it
        fails when the host's process dies) and learns of a clean shutdown when it returns."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
        self._ensure_ticking()
        await asyncio.shield(self._stopped)

    async def ping(self) -> int:
        """Liveness probe; returns the broker id."""
        return self.broker_id

    async def describe_host(self) -> dict[str, Any]:
        """The replicas open here, the fetchers (their partitions and rounds), counts of the
        calls served, and the calls under way and parked now (for tests and tools)."""
        return {
            "broker_id": self.broker_id,
            "name": self.name,
            "replicas": sorted(self._replicas),
            "fetchers": self._fetchers.describe(),
            **self._stats,
            # Data calls under way (consumers' parked fetches included) and the consumers'
            # fetches parked now.
            "replica_calls_in_flight": self._calls_in_flight,
            "parked_fetches": len(self._purgatory),
            # Followers' fetches this host's inter-broker listener served, and the connections
            # its fetchers opened to other hosts' listeners.
            "inter_broker_fetches_served": self._inter_broker.fetches if self._inter_broker is not None else 0,
            "inter_broker_connects": self._links.connects(),
            "pid": os.getpid(),
        }

    async def shutdown(self, delete: bool = False) -> None:
        """Close every replica (the controller's shutdown of this host); ``run`` then returns."""
        self._fetchers.stop()
        self._links.close()
        if self._inter_broker is not None:
            await self._inter_broker.close()
        self._acls.close()
        await self._iceberg.close()
        for key in list(self._replicas):
            try:
                await self._close(key, delete)
            except Exception:  # one replica's failure must not keep the others open
                logger.exception("%s: closing %s-%d failed", self.name, *key)
        if self._cleaning is not None:
            self._cleaning.cancel()
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
        if not self._stopped.done():
            self._stopped.set_result(None)
        if self._ticking is not None:
            self._ticking.cancel()

    # -- helpers ----------------------------------------------------------------------------

    def _replica(self, topic: str, partition: int) -> PartitionReplica:
        """The replica open here; NotLeaderOrFollowerError when there is none (moved, deleted,
        or its host restarted and has not opened it yet), as Kafka answers for a partition it
        does not host."""
        if type(topic) is not str or type(partition) is not int:
            raise InvalidRequestError(f"a partition is named by its topic (str) and index (int), not {topic!r:.60}")
        replica = self._replicas.get((topic, partition))
        if replica is None:
            raise NotLeaderOrFollowerError(f"{self.name} does not host {topic}-{partition}")
        return replica

    def _controller_for_acls(self) -> Any:
        """The controller, for the first load of the ACLs (the host learns it with the first
        LeaderAndIsr)."""
        if self._services.controller is None:
            raise NotLeaderOrFollowerError(f"{self.name} has not heard from the controller yet")
        return self._services.controller

    def _most(self, stat: str, count: int) -> None:
        if count > self._stats[stat]:
            self._stats[stat] = count


class _Fetch:
    """One fetch_messages call under way: its request, the partitions it reads (index,
    checked partition, replica), and which failed for good."""

    __slots__ = ("request", "follower", "parts", "_failed")

    def __init__(self, request: FetchMessagesRequest, follower: bool) -> None:
        self.request = request
        self.follower = follower
        self.parts: list[tuple[int, FetchPartition, PartitionReplica]] = []
        self._failed: set[int] = set()

    def fail(self, index: int) -> None:
        """The partition at ``index`` answered with an error: the answer goes as it is."""
        self._failed.add(index)

    def failed(self, index: int) -> bool:
        """Whether the partition at ``index`` has its error already."""
        return index in self._failed

    def live(self) -> list[tuple[FetchPartition, PartitionReplica]]:
        """The partitions still worth waiting for."""
        return [(part, replica) for i, part, replica in self.parts if i not in self._failed]

    def done(self, answers: list[Any]) -> bool:
        """Whether a follower's fetch answers now: an error, or any data."""
        return any(isinstance(a, BaseException) or (a is not None and a.records) for a in answers)

    def record(self, answers: list[Any], started: float) -> None:
        """Each partition's fetch into its replica's metrics."""
        by_index = {i: replica for i, _, replica in self.parts}
        for i, answer in enumerate(answers):
            replica = by_index.get(i)
            if replica is None or not replica.metrics.enabled or answer is None:
                continue
            if isinstance(answer, BaseException):
                replica.metrics.fetch_failed(self.follower, answer, started)
            else:
                replica.metrics.fetched(self.follower, len(answer.records), started)


def _write_checkpoints(due: list[tuple[PartitionReplica, int]]) -> list[tuple[PartitionReplica, int]]:
    """Write each replica's high watermark (in a worker thread); returns those written."""
    written = []
    for replica, hw in due:
        try:
            replica.write_checkpoint(hw)
            written.append((replica, hw))
        except OSError:  # its directory deleted meanwhile: the close writes the last one
            logger.warning("%s-%d: high watermark checkpoint failed", replica.topic, replica.partition, exc_info=True)
    return written


def _key(entry: Any) -> Key:
    if type(entry) is not tuple or len(entry) != 2 or type(entry[0]) is not str or type(entry[1]) is not int:
        raise InvalidRequestError(f"a partition is named (topic, index), not {entry!r:.80}")
    return entry


__all__ = ["DEFAULT_REPLICATION", "MAX_FETCH_WAIT_MS", "MAX_REPLICA_FETCH_WAIT_MS", "ReplicaManager"]
