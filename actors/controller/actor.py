"""The Controller actor: the Ray shell over :class:`QuorumController`.

Every decision (placement, elections, ISR changes, reassignment, configs) is made by the
plain managers under :mod:`actors.controller.quorum_controller`, written to the metadata log
before it takes effect. This shell does what needs Ray and an event loop: it has the host
actors started, watched, reopened and stopped (``actors.broker.lifecycle``: the replicas'
hosts, placed as ``rayqueue.broker.placement`` says), tells the replicas their roles (one
LeaderAndIsr per host), serves requests one change at a time (an asyncio lock), and runs the
periodic work (preferred-leader rebalance, reassignment completion, metrics, listener probes).

A controller restarted by Ray replays the metadata log and re-attaches to (or reopens)
every replica. A host's death (its pending ``run`` call fails) takes its replicas out of
their ISRs and elects new leaders where they led, every partition of it in one step (one
metadata-log write, one LeaderAndIsr per live host); then the host is started again and
reopens its replicas as followers. It never sits on the data path: clients ask it for
metadata (leaders' ReplicaRefs and epochs) and talk to leaders directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import ray

from actors import launch
from actors.acl import CLUSTER_NAME, AclBinding, AclBindingFilter
from actors.auth_helper import CLUSTER, TOPIC, AuthHelper, Caller, Op, denied
from actors.authorizer import StandardAuthorizer
from actors.broker.inter_broker import SETTINGS_KEY, cluster_settings
from actors.broker.lifecycle import BrokerHosts
from actors.broker.partition import DEFAULT_REPLICATION
from actors.broker.placement import HostId
from actors.broker.probe import probe_brokers, probe_targets
from actors.clock import SYSTEM, Clock
from actors.config import ICEBERG_BROKER_KEYS, broker_config
from actors.controller.quorum_controller import QuorumController
from actors.controller.records import NO_LEADER
from actors.controller.replication_control import NewPartitions, PartitionChange, Replica
from actors.listeners import BrokerListener, broker_endpoints
from actors.metrics import TICK_S, Recorder
from actors.names import INTERNAL_TOPICS, METADATA_TOPIC
from actors.protocol import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    AlterPartitionResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
    require,
)
from actors.protocol_broker import LeaderAndIsrPartitionState, OpenReplica
from actors.protocol_security import (
    AclsSnapshot,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
    ScramCredential,
    UserScramCredentialsResult,
)
from actors.types import ClusterMetadata, PartitionMetadata, TopicMetadata, TopicPartition
from storage.errors import (
    ElectionNotNeededError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    LeaderNotAvailableError,
    PreferredLeaderNotAvailableError,
    TopicAlreadyExistsError,
)

logger = logging.getLogger(__name__)

# How often the controller checks that each listed broker's listener answers (the
# listener-up gauge): an ApiVersions round trip each, bounded by the probe's timeout.
LISTENER_PROBE_INTERVAL_S = 5.0
REASSIGNMENT_CHECK_S = 0.1
ACL_WATCH_S = 30.0  # the longest a gateway's watch_acls call waits for a change
_ATTACHED, _STARTED = "attached", "started"


def _checked_binding(binding: Any) -> AclBinding | KafkaError:
    """An ACL to create, checked again here (a caller may build an AclBinding by hand)."""
    if isinstance(binding, KafkaError):
        return binding
    if type(binding) is not AclBinding:
        raise InvalidRequestError(f"an ACL must be an AclBinding, not {type(binding).__name__}")
    try:
        return AclBinding.of(*(getattr(binding, name) for name in AclBinding.__slots__))
    except KafkaError as exc:
        return exc


def _checked_filter(selector: Any) -> AclBindingFilter:
    if type(selector) is not AclBindingFilter:
        raise InvalidRequestError(f"an ACL filter must be an AclBindingFilter, not {type(selector).__name__}")
    return AclBindingFilter.of(*(getattr(selector, name) for name in AclBindingFilter.__slots__))


def _restarted_by_ray() -> bool:
    """True inside an actor that Ray has restarted (False outside any actor)."""
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return False
    return bool(context.was_current_actor_reconstructed)


class Controller:
    """Owns cluster metadata; has the host actors started and watched, and their replicas
    opened, reopened and told their roles."""

    def __init__(self, namespace: str, config: dict[str, Any], clock: Clock = SYSTEM) -> None:
        self._namespace = namespace
        self._clock = clock
        self._config = broker_config(config)
        self._metrics_enabled = self._config["rayqueue.metrics.enabled"]
        self._recorder = Recorder(namespace, True) if self._metrics_enabled else None
        self._quorum = QuorumController(self._config, on_partition_change=self._count_change)
        self._cluster = self._quorum.cluster
        self._replication = self._quorum.replication
        self._configuration = self._quorum.configuration
        self._skipped_reported = 0  # of the skipped metadata records, handed to the metric so far
        self._handles: dict[Replica, Any] = {}  # the open replicas' ReplicaRefs
        self._hosts = BrokerHosts(namespace, self._config, self._on_host_death, clock, self._listener_plan)
        # How hosts fetch from each other (Kafka's inter-broker listener), sent with LeaderAndIsr.
        self._inter_broker = cluster_settings(self._config)
        self._lock: asyncio.Lock | None = None
        self._reassignments: dict[tuple[str, int], asyncio.Task] = {}
        self._rebalancer: asyncio.Task | None = None
        self._metrics_task: asyncio.Task | None = None
        self._listener_task: asyncio.Task | None = None
        self._listeners_down: dict[int, str] = {}  # broker id -> why its listener did not answer
        self._probed: set[int] = set()  # brokers whose listener-up gauge was set
        self._exported_topics: set[str] = set()
        self._started = False
        self._stopping = False
        self._restart_task: asyncio.Task | None = None
        self._acl_watch: asyncio.Event | None = None  # set (and replaced) when the ACLs change
        auth = StandardAuthorizer.from_config(self._config)
        self._authorizer_settings = (auth.enabled, tuple(sorted(auth.super_users)), auth.allow_everyone_if_no_acl_found)
        # Native clients' principals are checked against the ACLs this controller owns.
        self._authorizer = auth
        self._authorizer_version: tuple[int, int] | None = None
        self._auth = AuthHelper(self._own_acls, self._recorder, "controller")
        if _restarted_by_ray():
            # Leaders call alter_partition and replicas die whether or not a client calls us:
            # a restarted controller brings itself up. A task of the actor's own event loop
            # (where an async actor's constructor runs), not a remote call to itself: Ray
            # fails that call (ACTOR_UNAVAILABLE) when it is told, before the constructor
            # returns, that the actor is still restarting.
            # (A first start waits for register_brokers, which binds brokers to live nodes.)
            self._restart_task = asyncio.get_running_loop().create_task(self.start())

    # -- lifecycle ------------------------------------------------------------------------

    async def register_brokers(self, node_ids: list[str]) -> ClusterMetadata:
        """Bind the brokers to Ray nodes (round-robin) and bring every replica up.

        Called by ``rayqueue.launch``. Broker ids and data dirs persist with the data; a
        relaunch on the same data binds them to the current nodes.
        """
        async with self._mutex():
            self._quorum.commit(self._cluster.register_brokers(node_ids, self._config["rayqueue.num.brokers"]))
            self._started = False
        await self._ensure_started()
        return await self.get_metadata(MetadataRequest())

    async def start(self) -> None:
        """Bring a (re)started controller up (idempotent): attach to or create every replica,
        watch them, run the leader rebalance loop. A failed attempt is retried."""
        while not self._started and not self._stopping:
            try:
                await self._ensure_started()
            except Exception:
                logger.exception("controller start failed; retrying")
                await asyncio.sleep(1.0)

    async def _ensure_started(self) -> None:
        """After a (re)start, attach to or create every replica and watch it."""
        if self._started:
            return
        async with self._mutex():
            if self._started:
                return
            outcomes = await self._attach_or_start(self._replication.replicas())
            recreated = {key for key, outcome in outcomes.items() if outcome == _STARTED}
            partitions = self._replication.partitions()
            # A leader that died unseen and was recreated starts a new term: a new epoch
            # makes its followers re-truncate and fetch from the new actor. A replica that
            # could not come back (node gone, broker stopped) is no longer in sync, as if
            # its death had been seen.
            bump = {(t, p) for t, p in partitions if (t, p, self._quorum.partition(t, p).leader) in recreated}
            await self._elect(partitions, bump, drop_offline=True)
            for topic, p in self._replication.reassigning():
                self._track_reassignment(topic, p)
            await self._remove_strays(list(self._cluster.brokers))
            await self._ensure_listeners(list(self._cluster.brokers))
            loop = asyncio.get_running_loop()
            if self._rebalancer is None:
                self._rebalancer = loop.create_task(self._rebalance_loop())
            if self._metrics_task is None and self._recorder is not None:
                self._metrics_task = loop.create_task(self._metrics_loop())
                self._listener_task = loop.create_task(self._listener_loop())
            self._started = True

    async def shutdown(self, delete_data: bool = False) -> None:
        """Close every replica cleanly (clean-shutdown markers) and stop watching."""
        self._stopping = True
        tasks = [self._rebalancer, self._metrics_task, self._listener_task, self._restart_task]
        for task in [*self._reassignments.values(), *tasks]:
            if task is not None:
                task.cancel()
        # Every host a broker may have, those this controller never attached to too.
        others = {
            host for b in self._cluster.brokers for host in self._hosts.host_ids(b, self._replication.partitions_on(b))
        }
        await self._hosts.shutdown(delete_data, others)
        self._handles.clear()
        self._quorum.close()

    # -- topics ---------------------------------------------------------------------------

    async def create_topic(self, request: CreateTopicsRequest) -> TopicMetadata:
        """Create a topic (one of Kafka's CreateTopics) and start its replicas; see
        ``ReplicationControlManager.create_topic`` for the rules and ``validate_only``."""
        require(request, CreateTopicsRequest)
        if not await self._auth.authorized(request, Op.CREATE, CLUSTER, CLUSTER_NAME, count=False):
            await self._auth.check(request, Op.CREATE, TOPIC, request.name)
        await self._ensure_started()
        async with self._mutex():
            new = self._quorum.commit(self._replication.create_topic(request, launch.alive_nodes()))
            if new.planned is not None:
                return new.planned
            await self._bring_up(new)
        logger.info("created topic %s with %d partitions", request.name, len(new.assignment))
        return self._replication.topic_metadata(request.name, self._handles)

    async def delete_topic(self, request: DeleteTopicsRequest) -> None:
        """Delete a topic (one of Kafka's DeleteTopics), its replicas and their data."""
        require(request, DeleteTopicsRequest)
        await self._auth.check(request, Op.DELETE, TOPIC, request.name)
        await self._ensure_started()
        async with self._mutex():
            allowed = (self._config["delete.topic.enable"], request.internal_topics_allowed is True)
            replicas = self._quorum.commit(self._replication.delete_topic(request.name, *allowed))
            # Closed under the controller's lock: a topic created again next opens new replicas.
            await self._stop_replicas(replicas, delete=True)

    async def create_partitions(self, request: CreatePartitionsRequest) -> TopicMetadata:
        """Grow a topic to ``count`` partitions (one of Kafka's CreatePartitions; Kafka never
        shrinks one). With ``validate_only`` every check runs and the topic stays as it is."""
        require(request, CreatePartitionsRequest)
        await self._auth.check(request, Op.ALTER, TOPIC, request.name)
        await self._ensure_started()
        async with self._mutex():
            new = self._quorum.commit(self._replication.create_partitions(request, launch.alive_nodes()))
            if not request.validate_only:
                await self._bring_up(new)
            return self._replication.topic_metadata(request.name, self._handles)

    async def _bring_up(self, new: NewPartitions) -> None:
        """Start the new partitions' replicas, then give each partition its leader."""
        await self._attach_or_start(new.replicas())
        await self._elect([(new.topic, p) for p in new.partitions()], bump=True, drop_offline=True)

    async def list_topics(self, include_internal: bool = False, principal: str | None = None) -> list[str]:
        """Topic names, sorted (those a native caller's ``principal`` may DESCRIBE)."""
        names = self._quorum.list_topics(include_internal)
        return await self._auth.visible(Caller(principal, "Metadata"), Op.DESCRIBE, TOPIC, names)

    async def describe_configs(self, request: DescribeConfigsRequest) -> dict[str, tuple[Any, str]]:
        """The topic's configs (all, or ``configuration_keys``) with value and source
        (DEFAULT, STATIC_BROKER, DYNAMIC_TOPIC); one resource of Kafka's DescribeConfigs."""
        require(request, DescribeConfigsRequest)
        await self._auth.check(request, Op.DESCRIBE_CONFIGS, TOPIC, request.resource_name)
        self._replication.require_topic(request.resource_name)
        return self._configuration.describe(request.resource_name, request.configuration_keys)

    async def alter_configs(self, request: IncrementalAlterConfigsRequest) -> dict[str, Any]:
        """Change topic config overrides (one resource of Kafka's IncrementalAlterConfigs):
        SET, DELETE (back to the default), and APPEND / SUBTRACT on list configs. Every key
        and value is checked before anything changes: one bad entry refuses the whole request
        (INVALID_CONFIG) and leaves the topic's configs as they were. Returns the topic's
        overrides after it (with ``validate_only``: the ones it would leave; nothing changes)."""
        require(request, IncrementalAlterConfigsRequest)
        name = request.resource_name
        await self._auth.check(request, Op.ALTER_CONFIGS, TOPIC, name)
        await self._ensure_started()
        async with self._mutex():
            topic = self._replication.require_topic(name)
            merged = self._quorum.commit(self._configuration.alter(name, request.configs, request.validate_only))
            if request.validate_only:
                return merged
            effective = self._configuration.effective(name)
            refs = [handle for (t, _, _), handle in self._handles.items() if t == name]
            await self._hosts.update_topic_config(refs, name, effective)
            if effective["unclean.leader.election.enable"]:
                # As Kafka does when the setting is turned on: offline partitions elect at once.
                offline = [
                    (name, p) for p, part in enumerate(topic.partitions) if (name, p, part.leader) not in self._handles
                ]
                await self._elect(offline, bump=False)
            return merged

    async def register_listener(
        self, broker_id: int, host: str, port: int, endpoints: tuple[tuple[str, str, str, int], ...] = ()
    ) -> None:
        """Record where broker ``broker_id``'s Kafka protocol gateway is reached (its
        primary advertised address, and every listener's as (name, security protocol, host,
        port)), as a Kafka broker registers its endpoints; Metadata answers name them.
        Durable, so a restarted controller still knows it."""
        async with self._mutex():
            self._quorum.commit(self._cluster.register_listener(broker_id, host, port, tuple(endpoints)))
        logger.info("broker %d's gateway listens at %s:%d %s", broker_id, host, port, list(endpoints) or "")

    # -- SCRAM users ----------------------------------------------------------------------

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> list[UserScramCredentialsResult]:
        """Kafka's AlterUserScramCredentials: the credentials are in the metadata log (salted,
        never the password) before the answer, one result per user named."""
        require(request, AlterUserScramCredentialsRequest)
        await self._auth.check_cluster(request, Op.ALTER)
        async with self._mutex():
            results = self._quorum.commit(self._quorum.scram.alter(request))
        changed = [r.user for r in results or () if r.error_code == 0]
        if changed:
            logger.info("SCRAM credentials changed for %s", ", ".join(changed))
        return results or []

    async def describe_user_scram_credentials(
        self, request: DescribeUserScramCredentialsRequest
    ) -> list[UserScramCredentialsResult]:
        """Kafka's DescribeUserScramCredentials: each user's mechanisms and iterations."""
        require(request, DescribeUserScramCredentialsRequest)
        await self._auth.check_cluster(request, Op.DESCRIBE)
        return self._quorum.scram.describe(request.users)

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential a gateway checks a SCRAM client with (None: no such user or
        mechanism)."""
        if not isinstance(user, str) or not isinstance(mechanism, str):
            return None
        return self._quorum.scram.credential(user, mechanism)

    # -- producer ids ---------------------------------------------------------------------

    async def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
        """Hand out a block of ``count`` producer ids (Kafka's AllocateProducerIds). The block
        is in the metadata log before it is answered, so a restarted controller never hands
        an id out twice."""
        require(request, AllocateProducerIdsRequest)
        async with self._mutex():
            block = self._quorum.commit(self._quorum.producer_ids.generate(request.count))
        first = block.producer_id_start
        logger.info("allocated producer ids [%d, %d)", first, first + block.producer_id_len)
        return block

    # -- ACLs -------------------------------------------------------------------------------

    async def create_acls(self, request: CreateAclsRequest) -> list[KafkaError | None]:
        """Kafka's CreateAcls: durable in the metadata log before it is answered; per entry
        None or its error (INVALID_REQUEST for an ACL that is not one)."""
        require(request, CreateAclsRequest)
        await self._auth.check_cluster(request, Op.ALTER)
        creations = [_checked_binding(b) for b in request.creations]
        async with self._mutex():
            out = self._quorum.commit(self._quorum.acls.create_acls(creations))
        self._acls_changed()
        return out  # type: ignore[return-value]

    async def delete_acls(self, request: DeleteAclsRequest) -> list[list[AclBinding]]:
        """Kafka's DeleteAcls: per filter, the ACLs it matched, all removed durably."""
        require(request, DeleteAclsRequest)
        await self._auth.check_cluster(request, Op.ALTER)
        filters = [_checked_filter(f) for f in request.filters]
        async with self._mutex():
            out = self._quorum.commit(self._quorum.acls.delete_acls(filters))
        self._acls_changed()
        return out  # type: ignore[return-value]

    async def describe_acls(self, request: DescribeAclsRequest) -> list[AclBinding]:
        """Kafka's DescribeAcls: the ACLs the filter matches."""
        require(request, DescribeAclsRequest)
        await self._auth.check_cluster(request, Op.DESCRIBE)
        return self._quorum.acls.describe(_checked_filter(request.filter))

    async def watch_acls(self, known: tuple[int, int] | None, timeout_s: float = ACL_WATCH_S) -> AclsSnapshot:
        """Every ACL, as soon as it differs from version ``known`` (at once when it does
        already), else after ``timeout_s``: the gateways' long poll for their copy."""
        if self._acl_version() == known:
            event = self._acl_event()
            try:
                await asyncio.wait_for(event.wait(), min(max(0.0, float(timeout_s)), ACL_WATCH_S))
            except TimeoutError:
                pass
        return AclsSnapshot(self._acl_version(), dict(self._quorum.acls.acls), self._authorizer_settings)

    def _acl_version(self) -> tuple[int, int]:
        return (self._cluster.controller_epoch, self._quorum.acls.version)

    async def _own_acls(self, _at_least: tuple[int, int] | None = None) -> StandardAuthorizer:
        """The authorizer native principals are checked with: this controller's ACLs, taken
        again when they changed."""
        version = self._acl_version()
        if version != self._authorizer_version:
            self._authorizer.replace(self._quorum.acls.acls)
            self._authorizer_version = version
        return self._authorizer

    def _acl_event(self) -> asyncio.Event:
        # Created lazily so it belongs to the actor's event loop.
        if self._acl_watch is None:
            self._acl_watch = asyncio.Event()
        return self._acl_watch

    def _acls_changed(self) -> None:
        """Wake the gateways waiting in watch_acls."""
        event, self._acl_watch = self._acl_watch, None
        if event is not None:
            event.set()

    # -- metadata -------------------------------------------------------------------------

    async def get_metadata(self, request: MetadataRequest) -> ClusterMetadata:
        """A snapshot of brokers and topics with leader handles, for clients to cache (Kafka's
        Metadata).

        With ``allow_auto_topic_creation`` (and auto.create.topics.enable), unknown topics are
        created with num.partitions and default.replication.factor, as a Kafka broker does.

        A native caller's ``principal``, as Kafka's Metadata: named topics it may not DESCRIBE
        are TopicAuthorizationFailedError (neither looked up nor created); asked for all, those
        are left out; auto-creation needs CREATE on the cluster or the topic (a missing topic
        it may not create is TopicAuthorizationFailedError).
        """
        require(request, MetadataRequest)
        await self._ensure_started()
        names = None if request.topics is None else list(request.topics)
        for name in names or ():
            if not isinstance(name, str):
                raise InvalidTopicError(f"a topic name is a string, got {type(name).__name__}")
        if names:
            await self._auth.check_all(request, Op.DESCRIBE, TOPIC, names)
        if names and request.allow_auto_topic_creation and self._config["auto.create.topics.enable"]:
            cluster_create = await self._auth.authorized(request, Op.CREATE, CLUSTER, CLUSTER_NAME, count=False)
            refused = []
            for name in names:
                if name not in self._replication.topics and name not in INTERNAL_TOPICS:
                    if not cluster_create and not await self._auth.authorized(request, Op.CREATE, TOPIC, name):
                        refused.append(name)
                        continue
                    try:
                        await self.create_topic(CreateTopicsRequest(name))
                    except TopicAlreadyExistsError:
                        pass
            if refused:
                raise denied(request.principal, Op.CREATE, TOPIC, refused)
        metadata = self._quorum.metadata(names, self._handles)
        if names is None and request.principal is not None:
            shown = await self._auth.visible(request, Op.DESCRIBE, TOPIC, list(metadata.topics))
            metadata = dataclasses.replace(metadata, topics={n: metadata.topics[n] for n in shown})
        return metadata

    async def describe_cluster(self, request: DescribeClusterRequest | None = None) -> dict[str, Any]:
        """Cluster id, controller epoch, brokers and counts (a native caller's principal
        needs DESCRIBE on the cluster)."""
        if request is not None:
            require(request, DescribeClusterRequest)
            await self._auth.check_cluster(request, Op.DESCRIBE)
        await self._ensure_started()
        return {**self._quorum.describe(), "replicas_open": len(self._handles), **self._hosts.describe()}

    async def broker_config(self) -> dict[str, Any]:
        """The broker configuration the cluster was launched with (what a driver attaching
        to the cluster works with: its listeners' TLS keys for the listener probe, ...)."""
        return dict(self._config)

    async def replica_handles(self, tp: TopicPartition, principal: str | None = None) -> dict[int, Any]:
        """The ReplicaRefs of every live replica of a partition, by broker id (for tests/tools).
        A handle calls the replica without any principal, so a native caller's needs
        CLUSTER_ACTION on the cluster (Kafka's operation for what brokers do among themselves)."""
        await self._auth.check_cluster(Caller(principal, "ReplicaHandles"), Op.CLUSTER_ACTION)
        return {b: h for (t, p, b), h in self._handles.items() if t == tp.topic and p == tp.partition}

    async def wait_online(self, tp: TopicPartition, timeout_s: float = 60.0) -> PartitionMetadata:
        """Wait until the partition has a live leader; returns its metadata."""
        topic, partition = tp.topic, tp.partition
        deadline = self._clock.monotonic() + timeout_s
        while True:
            await self._ensure_started()
            self._replication.require_partition(topic, partition)
            meta = self._replication.partition_metadata(topic, partition, self._handles)
            if meta.leader_handle is not None:
                return meta
            if self._clock.monotonic() > deadline:
                raise LeaderNotAvailableError(f"{topic}-{partition} has no leader after {timeout_s}s")
            await asyncio.sleep(0.05)

    # -- replicas: start, watch, restart, stop (the hosts' side is actors.broker.lifecycle) --

    async def _attach_or_start(self, replicas: list[Replica]) -> dict[Replica, str | None]:
        """Attach to each replica open in its host, or open it there (starting the host if
        needed), one call per host; answers per replica _ATTACHED, _STARTED or None (its
        broker is stopped or its node is down)."""
        out: dict[Replica, str | None] = {}
        wanted = []
        for topic, partition, broker_id in replicas:
            spec = self._quorum.replica_spec(topic, partition, broker_id)
            if spec is None:
                out[(topic, partition, broker_id)] = None  # stopped with stop_broker
                continue
            opening = OpenReplica(topic, partition, spec.data_dir, spec.config, spec.topic_id)
            wanted.append(((topic, partition, broker_id), spec.node_id, opening))
        for replica, opened in (await self._hosts.open(wanted)).items():
            if opened is None:
                out[replica] = None
                continue
            self._handles[replica], now = opened
            out[replica] = _STARTED if now else _ATTACHED
        return out

    async def _remove_strays(self, broker_ids: list[int]) -> None:
        """On each running broker's node, delete the partition directories it no longer hosts
        (topics deleted or replicas moved while it was down; see remove_stray_partitions)."""
        hosted = self._replication.hosted(broker_ids)
        alive = launch.alive_nodes()
        dirs = {}
        for b in broker_ids:
            if self._cluster.usable(b, alive):
                broker = self._cluster.brokers[b]
                dirs[b] = (broker.node_id, broker.data_dir, hosted[b])
        await self._hosts.remove_strays(dirs)

    async def _ensure_listeners(self, broker_ids: list[int]) -> None:
        """Start (or attach to) the host serving each running broker's Kafka listener, on its
        node (a broker holding no replica has one all the same); it registers its addresses
        itself once it listens. A broker whose node is down is left without one."""
        alive = launch.alive_nodes()
        usable = [b for b in broker_ids if self._cluster.usable(b, alive)]
        if not usable or not self._hosts.serves_listeners:
            return
        await asyncio.gather(*(self._hosts.ensure_listener(b, self._cluster.brokers[b].node_id) for b in usable))

    def _listener_plan(self, broker_id: int) -> list[BrokerListener] | None:
        """Broker ``broker_id``'s listeners on its node (``listeners`` and ``advertised.listeners``
        resolved with every broker's node address: brokers sharing a node take consecutive
        ports); None without listeners."""
        if not self._config["listeners"]:
            return None
        ips = launch.node_addresses(alive_only=False)
        brokers = [(b, ips.get(broker.node_id) or "127.0.0.1") for b, broker in self._cluster.brokers.items()]
        plan = broker_endpoints(
            self._config["listeners"],
            self._config["advertised.listeners"],
            brokers,
            self._config["listener.security.protocol.map"],
        )
        return plan.get(broker_id)

    async def _on_host_death(self, host: HostId, actor: Any) -> None:
        """A host actor died: its partitions elect without its replicas, all in one step; then
        its replicas are reopened (as followers). When it served its broker's Kafka listener,
        the broker is listed no more (Metadata names it again once a new host has registered
        its listener), as Kafka fences a broker whose process is gone."""
        async with self._mutex():
            if self._hosts.is_listener_host(host):
                self._quorum.commit(self._cluster.register_listener(host.broker_id, "", -1))
            dead = self._hosts.hosted_by(self._handles, actor)
            for key in dead:
                self._handles.pop(key, None)
            # Before reopening: failover must not wait for a host to start.
            live = [(t, p) for t, p, _ in dead if self._replication.has_partition(t, p)]
            await self._elect(live, bump=False, down=host.broker_id)
        self._hosts.reopen(host, lambda: self._reopen_pass(host))

    async def _reopen_pass(self, host: HostId) -> bool | None:
        """Reopen a dead host's closed replicas (as followers): True when none is left, None
        when its broker is stopped or its node is down (start_broker then), False to try
        again after a backoff."""
        async with self._mutex():
            b = host.broker_id
            if self._hosts.is_listener_host(host):
                try:
                    await self._ensure_listeners([b])
                except Exception:  # the next pass tries again
                    logger.exception("starting the listener host %s again failed", host)
                    return False
            on = [(t, p) for t, p in self._replication.partitions_on(b) if self._hosts.host_id(t, p, b) == host]
            missing = [(t, p, b) for t, p in on if (t, p, b) not in self._handles]
            if not missing:
                return True
            try:
                outcomes = await self._attach_or_start(missing)
                opened = [(t, p) for (t, p, _), outcome in outcomes.items() if outcome is not None]
                await self._elect(opened, bump=False)
            except Exception:  # the next pass tries again
                logger.exception("reopening the replicas of %s failed", host)
                opened = []
            if len(opened) == len(missing):
                return True
            broker = self._cluster.brokers.get(b)
            if broker is None or not broker.alive or broker.node_id not in launch.alive_nodes():
                return None  # stopped, or its node is down
            return False

    async def _stop_replicas(self, replicas: list[Replica], delete: bool) -> None:
        """Close replicas (and delete their data if asked); closed and forgotten by their hosts
        before this returns, so a replica opened next for the same partition (a topic deleted
        and created again) is a new one."""
        refs = [ref for replica in replicas if (ref := self._handles.pop(replica, None)) is not None]
        await self._hosts.close(refs, delete)

    async def _elect(
        self, partitions: list[tuple[str, int]], bump: bool | set[tuple[str, int]], drop_offline: bool = False,
        down: int | None = None,
    ) -> None:  # fmt: skip
        """Elect the partitions' leaders in one step (ReplicationControlManager.elect_all: one
        metadata-log write for them all, ``down``'s replicas out of their ISRs, with
        ``drop_offline`` every replica without a live host), then tell every live replica its
        role: one LeaderAndIsr per host."""
        if not partitions:
            return
        elections = self._quorum.commit(
            self._replication.elect_all(partitions, self._handles, bump, drop_offline, down)
        )
        if self._recorder is not None:
            for (topic, _), election in elections.items():
                if election.unclean:
                    self._recorder.add(self._recorder.metrics.unclean_elections, 1, (("topic", topic),))
        await self._push([tp for tp, election in elections.items() if election.leader != NO_LEADER])

    async def _push(self, partitions: list[tuple[str, int]]) -> None:
        """Send the partitions' state to their live replicas: one LeaderAndIsr per host,
        carrying every partition of it, all hosts at once."""
        entries = []
        for topic, partition in partitions:
            part = self._quorum.partition(topic, partition)
            leader = self._handles.get((topic, partition, part.leader)) if part.leader != NO_LEADER else None
            if leader is None:
                continue
            state = LeaderAndIsrPartitionState(
                part.leader,
                part.leader_epoch,
                tuple(part.replicas),
                tuple(part.isr),
                part.partition_epoch,
                leader_handle=leader,
            )
            for b in part.replicas:
                ref = self._handles.get((topic, partition, b))
                if ref is not None:
                    entries.append((ref, state))
        if entries:
            await self._hosts.leader_and_isr(
                entries,
                ray.get_runtime_context().current_actor,
                {
                    **{k: self._config[k] for k in (*DEFAULT_REPLICATION, *ICEBERG_BROKER_KEYS)},
                    SETTINGS_KEY: self._inter_broker,
                },
                self._config["log.retention.check.interval.ms"],
            )

    # -- replication: ISR changes, brokers, elections, reassignment -------------------------

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """A leader's ISR change (Kafka's AlterPartition); answers the partition's state as
        committed (see ReplicationControlManager.alter_partition)."""
        require(request, AlterPartitionRequest)
        # A leader may call before any client does after a controller restart: the live
        # replicas must be known before an expansion is judged.
        await self._ensure_started()
        async with self._mutex():
            return self._quorum.commit(self._replication.alter_partition(request, self._handles))

    async def stop_broker(self, broker_id: int, principal: str | None = None) -> None:
        """Shut one broker down cleanly: its replicas close, leave the ISRs and give up
        leadership (a native caller's ``principal`` needs ALTER on the cluster)."""
        await self._auth.check_cluster(Caller(principal, "StopBroker"), Op.ALTER)
        await self._ensure_started()
        async with self._mutex():
            self._quorum.commit(self._cluster.set_alive(broker_id, False))
            on = self._replication.partitions_on(broker_id)
            # Close first, so that nothing more is appended to the old leaders, then elect.
            await self._stop_replicas([(t, p, broker_id) for t, p in on], delete=False)
            await self._elect(on, bump=False, down=broker_id)
            await self._hosts.stop_hosts(self._hosts.host_ids(broker_id, on))
        logger.info("broker %d stopped", broker_id)

    async def start_broker(self, broker_id: int, principal: str | None = None) -> None:
        """Start a stopped broker: its replicas recover from disk, follow their leaders and
        catch up (a native caller's ``principal`` needs ALTER on the cluster)."""
        await self._auth.check_cluster(Caller(principal, "StartBroker"), Op.ALTER)
        await self._ensure_started()
        async with self._mutex():
            self._quorum.commit(self._cluster.set_alive(broker_id, True))
            on = self._replication.partitions_on(broker_id)
            await self._attach_or_start([(t, p, broker_id) for t, p in on])
            await self._elect(on, bump=False)
            await self._remove_strays([broker_id])
            await self._ensure_listeners([broker_id])
        logger.info("broker %d started", broker_id)

    async def add_broker(self, node_id: str, broker_id: int | None = None, principal: str | None = None) -> int:
        """Register a new broker on Ray node ``node_id`` (hex id); returns its id. It holds no
        replicas until partitions are reassigned to it (a native caller's ``principal`` needs
        ALTER on the cluster)."""
        await self._auth.check_cluster(Caller(principal, "AddBroker"), Op.ALTER)
        async with self._mutex():
            alive = node_id in launch.alive_nodes()
            added = self._quorum.commit(self._cluster.add_broker(node_id, broker_id, alive))
            await self._ensure_listeners([added])
            return added

    async def elect_leaders(self, request: ElectLeadersRequest) -> dict[TopicPartition, str | None]:
        """Preferred leader election (Kafka's ElectLeaders): move leadership to each
        partition's first replica.

        Answers None per partition that moved, else the reason (ElectionNotNeeded,
        PreferredLeaderNotAvailable) as the error's class name.
        """
        require(request, ElectLeadersRequest)
        await self._auth.check_cluster(request, Op.ALTER)
        await self._ensure_started()
        out: dict[TopicPartition, str | None] = {}
        async with self._mutex():
            if request.topic_partitions is None:
                wanted = self._replication.partitions()
            else:
                wanted = [(tp.topic, tp.partition) for tp in request.topic_partitions]
            for topic, p in wanted:
                self._replication.require_partition(topic, p)
                try:
                    await self._elect_preferred(topic, p)
                    out[TopicPartition(topic, p)] = None
                except (ElectionNotNeededError, PreferredLeaderNotAvailableError) as exc:
                    out[TopicPartition(topic, p)] = type(exc).__name__
        return out

    async def _elect_preferred(self, topic: str, p: int) -> None:
        self._quorum.commit(self._replication.elect_preferred(topic, p, self._handles))
        await self._push([(topic, p)])

    async def _rebalance_loop(self) -> None:
        """auto.leader.rebalance.enable: periodically give leadership back to preferred replicas."""
        while not self._stopping:
            await asyncio.sleep(self._config["leader.imbalance.check.interval.seconds"])
            if not self._config["auto.leader.rebalance.enable"]:
                continue
            try:
                async with self._mutex():
                    for topic, p in self._replication.partitions():
                        try:
                            await self._elect_preferred(topic, p)
                        except (ElectionNotNeededError, PreferredLeaderNotAvailableError):
                            pass
            except Exception:  # the next turn tries again
                logger.exception("leader rebalance failed")

    async def alter_partition_reassignments(self, request: AlterPartitionReassignmentsRequest) -> None:
        """Move partitions to new replica lists (Kafka's AlterPartitionReassignments).

        The new replicas start as followers and catch up; once all of them are in the ISR
        leadership moves into the new list if needed and the old replicas are removed with
        their data. Returns at once; ``list_partition_reassignments`` shows what is ongoing.
        """
        require(request, AlterPartitionReassignmentsRequest)
        await self._auth.check_cluster(request, Op.ALTER)
        await self._ensure_started()
        async with self._mutex():
            for tp, target in request.reassignments.items():
                topic, p = tp.topic, tp.partition
                adding = self._quorum.commit(self._replication.reassign(topic, p, target))
                await self._attach_or_start([(topic, p, b) for b in adding])
                await self._elect([(topic, p)], bump=False)
                self._track_reassignment(topic, p)

    async def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest | None = None
    ) -> dict[tuple[str, int], dict[str, list[int]]]:
        """Ongoing reassignments: replicas, adding and removing, per partition (a native
        caller's principal needs DESCRIBE on the cluster)."""
        if request is not None:
            require(request, ListPartitionReassignmentsRequest)
            await self._auth.check_cluster(request, Op.DESCRIBE)
        # Under the mutex: a reassignment being completed (old replicas stopping) still counts.
        async with self._mutex():
            return self._replication.reassignments()

    def _track_reassignment(self, topic: str, p: int) -> None:
        task = self._reassignments.get((topic, p))
        if task is None or task.done():
            self._reassignments[(topic, p)] = asyncio.get_running_loop().create_task(
                self._complete_reassignment(topic, p)
            )

    async def _complete_reassignment(self, topic: str, p: int) -> None:
        """Wait until the partition's new replicas are all in the ISR, then finish the move."""
        while not self._stopping:
            await asyncio.sleep(REASSIGNMENT_CHECK_S)
            if not self._replication.has_partition(topic, p):
                return
            part = self._quorum.partition(topic, p)
            if part.target is None:
                return
            if not all(b in part.isr for b in part.target):
                continue
            async with self._mutex():
                done = self._quorum.commit(self._replication.complete_reassignment(topic, p, self._handles))
                if done is None:
                    continue
                await self._push([(topic, p)])
                await self._stop_replicas([(topic, p, b) for b in done.removing], delete=True)
                if done.leader == NO_LEADER:
                    await self._elect([(topic, p)], bump=False)
            return

    # -- helpers --------------------------------------------------------------------------

    def _mutex(self) -> asyncio.Lock:
        # Created lazily so it belongs to the actor's event loop.
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    # -- metrics --------------------------------------------------------------------------

    def _count_change(self, topic: str, partition: int, change: PartitionChange) -> None:
        """Count what a partition change is: ISR shrink or expansion, leader election."""
        rec = self._recorder
        if rec is None:
            return
        tags = (("topic", topic),)
        if change.isr_shrink:
            rec.add(rec.metrics.isr_shrinks, 1, tags)
        elif change.isr_expand:
            rec.add(rec.metrics.isr_expands, 1, tags)
        if change.leader_elected:
            rec.add(rec.metrics.leader_elections, 1, tags)

    async def _metrics_loop(self) -> None:
        """Every TICK_S: the summed counters to Ray, and the replication gauges from the state."""
        while not self._stopping:
            await asyncio.sleep(TICK_S)
            try:
                self._record_state()
            except Exception:  # metrics must never take the controller down
                logger.exception("recording controller metrics failed")

    async def _listener_loop(self) -> None:
        """Every LISTENER_PROBE_INTERVAL_S: is each listed broker's listener serving?"""
        while not self._stopping:
            await asyncio.sleep(LISTENER_PROBE_INTERVAL_S)
            try:
                await self._probe_listeners()
            except Exception:  # metrics must never take the controller down
                logger.exception("probing the brokers' listeners failed")

    async def _probe_listeners(self) -> None:
        """Set the listener-up gauge of every broker Metadata names (alive, with a registered
        listener) from an ApiVersions round trip to its advertised address and a ping of its
        host actors; a broker no longer named reads 0. A change of state is logged once."""
        rec = self._recorder
        listed = probe_targets(
            [b for b in self._cluster.brokers.values() if b.alive and b.host and b.port > 0], self._config
        )
        reasons = await probe_brokers(listed, self._hosts.by_broker())
        for broker_id, host, port, _ in listed:
            reason = reasons[broker_id]
            if reason is not None and broker_id not in self._listeners_down:
                logger.warning("broker %d's listener %s:%d does not answer: %s", broker_id, host, port, reason)
            elif reason is None and broker_id in self._listeners_down:
                logger.info("broker %d's listener %s:%d answers again", broker_id, host, port)
            if reason is None:
                self._listeners_down.pop(broker_id, None)
            else:
                self._listeners_down[broker_id] = reason
        for broker_id in self._probed | set(reasons):
            up = reasons.get(broker_id, "not listed") is None
            rec.metrics.listener_up.set(1 if up else 0, rec.tags(broker=broker_id))
        self._probed |= set(reasons)

    def _record_state(self) -> None:
        rec = self._recorder
        m = rec.metrics
        skipped = self._quorum.skipped.count
        if skipped > self._skipped_reported:
            # Skipped while the metadata log was replayed, before there was a recorder.
            rec.add(m.internal_records_skipped, skipped - self._skipped_reported, (("topic", METADATA_TOPIC),))
            self._skipped_reported = skipped
        rec.flush()
        stats = self._replication.stats()
        for name in stats.under_replicated:
            m.under_replicated.set(stats.under_replicated[name], rec.tags(topic=name))
            m.under_min_isr.set(stats.under_min_isr[name], rec.tags(topic=name))
        # A deleted topic's series drop to zero rather than keep their last value.
        for name in self._exported_topics - set(stats.under_replicated):
            m.under_replicated.set(0, rec.tags(topic=name))
            m.under_min_isr.set(0, rec.tags(topic=name))
        self._exported_topics = set(stats.under_replicated)
        m.offline.set(stats.offline, rec.tags())
        m.active_controller.set(1, rec.tags())
        for b in stats.leaders:
            m.leader_count.set(stats.leaders[b], rec.tags(broker=b))
            m.partition_count.set(stats.hosted[b], rec.tags(broker=b))
