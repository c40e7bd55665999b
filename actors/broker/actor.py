"""The host's Ray actor: a thin shell over :class:`~actors.broker.replica_manager.ReplicaManager`,
and, on the host that serves its broker's Kafka listener, over that listener too.

Each method forwards to the manager's method of the same name, written out one by one (no
dispatch by name): the lifecycle calls the controller makes (``open_replicas``,
``leader_and_isr``, ``close_replicas``, ``shutdown``, the pending ``run``), the
many-partition calls (``append_records``, ``fetch_messages``, ``write_txn_markers``,
``list_offsets``, ...) and the one-partition ``partition_*`` calls a ReplicaRef sends. What
needs Ray is here and only here: the node the actor runs on, and the links to the other hosts
and the controller, whose calls are Ray calls and whose death is Ray's ActorDiedError, turned
into Kafka's NetworkError for the host code.

The listener host (one per broker, ``actors.broker.placement``) is started with its
broker's listeners (:class:`ListenerSpec`) and serves them on its own event loop, as a Kafka
broker's SocketServer shares its process with its ReplicaManager: the shell composes the
listener (``actors.gateway.listener.KafkaListener``) with the manager, which the listener's
handlers call directly for the partitions this process holds (``actors.gateway.hosts``: no
Ray call, no pickling), and by Ray for the others. It listens from its constructor on
(retried until it has registered with the controller), so a host the controller starts again
after a death listens again by itself; ``shutdown`` stops it before the replicas close.

``actors.broker.lifecycle`` launches these actors (one per broker, K per broker or one per
replica, as ``rayqueue.broker.placement`` says) and watches them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import ray

from actors import launch
from actors.broker.links import ControllerLink, HostLink, Links
from actors.broker.replica_manager import ReplicaManager
from actors.broker.replica_ref import actor_key
from actors.clock import SYSTEM
from actors.gateway.hosts import Hosts
from actors.gateway.listener import KafkaListener
from actors.listeners import BrokerListener
from actors.names import SCHEMA_REGISTRY_NAME
from actors.protocol import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    ProduceResponse,
    WriteTxnMarkersRequest,
)
from actors.protocol_broker import FetchMessagesRequest, LeaderAndIsrRequest, OpenReplica, PartitionRequests
from actors.types import OffsetAndTimestamp
from storage.errors import NetworkError

# How long an Iceberg translation waits for the schema registry's answer.
REGISTRY_TIMEOUT_S = 10.0


async def _answer(ref: Any, what: str) -> Any:
    """A Ray call's answer; the callee's death (or a lost connection to it) as NetworkError."""
    try:
        return await ref
    except ray.exceptions.RayActorError as exc:
        raise NetworkError(f"{what} unavailable: {type(exc).__name__}") from None


class RayHostLink:
    """Another host, reached by Ray calls on its actor handle."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        """The host's fetch_messages."""
        return await _answer(self._handle.fetch_messages.remote(request), "leader host")

    def wake_replica_fetch(self, replica_id: int) -> None:
        """The host's wake_replica_fetch, not waited for."""
        self._handle.wake_replica_fetch.remote(replica_id)

    async def offsets_for_leader_epoch(self, request: PartitionRequests[Any]) -> list[Any]:
        """The host's offsets_for_leader_epoch."""
        return await _answer(self._handle.offsets_for_leader_epoch.remote(request), "leader host")

    async def list_offsets(self, request: PartitionRequests[Any]) -> list[Any]:
        """The host's list_offsets."""
        return await _answer(self._handle.list_offsets.remote(request), "leader host")

    async def inter_broker_endpoint(self) -> tuple[str, int]:
        """The host's inter_broker_endpoint."""
        return await _answer(self._handle.inter_broker_endpoint.remote(), "leader host")


class RayControllerLink:
    """The controller, reached by Ray calls on its actor handle."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """The controller's alter_partition."""
        return await _answer(self._handle.alter_partition.remote(request), "controller")

    async def scram_credential(self, user: str, mechanism: str) -> Any:
        """The controller's scram_credential."""
        return await _answer(self._handle.scram_credential.remote(user, mechanism), "controller")


class RegistrySchemas:
    """The cluster's schema registry (its actor), for Iceberg topics' typed values: schemas by
    id as its REST API answers them. Called from the translation's worker thread, so the calls
    wait with ``ray.get``; a registry's "not found" (40401-40403) is SchemaNotFoundError."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def _call(self, method: str, *args: Any) -> dict[str, Any]:
        from actors.iceberg.values import SchemaNotFoundError
        from actors.schema_registry.errors import RegistryError

        handle = launch.find_actor(SCHEMA_REGISTRY_NAME, self._namespace)
        if handle is None:
            raise RuntimeError("the cluster's schema registry is not running")
        try:
            return ray.get(getattr(handle, method).remote(*args), timeout=REGISTRY_TIMEOUT_S)
        except RegistryError as exc:
            if exc.error_code in (40401, 40402, 40403):
                raise SchemaNotFoundError(str(exc)) from None
            raise

    def schema(self, schema_id: int) -> dict[str, Any]:
        """``GET /schemas/ids/{id}``."""
        return self._call("schema", schema_id)

    def version(self, subject: Any, version: Any) -> dict[str, Any]:
        """``GET /subjects/{subject}/versions/{version}`` (a reference's schema)."""
        return self._call("get_version", subject, version)


class RayLinks(Links):
    """Peers as Ray actors (one link per host, kept)."""

    def __init__(self) -> None:
        self._hosts: dict[Hashable, RayHostLink] = {}

    def host(self, handle: Any) -> HostLink:
        """The link to the host actor ``handle``."""
        key = actor_key(handle)
        link = self._hosts.get(key)
        if link is None:
            link = self._hosts[key] = RayHostLink(handle)
        return link

    def controller(self, handle: Any) -> ControllerLink:
        """The link to the controller actor ``handle``."""
        return RayControllerLink(handle)

    def schema_registry(self, namespace: str) -> Any:
        """The cluster's schema registry actor, looked up at each call (it may restart)."""
        return RegistrySchemas(namespace)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """What a listener host serves: its broker's listeners (``listeners`` and
    ``advertised.listeners`` resolved for its node) and the broker configuration."""

    config: dict[str, Any]
    listeners: tuple[BrokerListener, ...]


class BrokerHost:
    """Host ``name`` of broker ``broker_id`` as a Ray actor (see the module docstring); with
    ``listener``, the host serving the broker's Kafka listeners as well."""

    def __init__(
        self,
        broker_id: int,
        namespace: str = "",
        metrics_enabled: bool = True,
        name: str = "",
        listener: ListenerSpec | None = None,
    ) -> None:
        context = ray.get_runtime_context()
        node_id = context.get_node_id() or ""
        node_ip = ray.util.get_node_ip_address()
        self._manager = ReplicaManager(
            broker_id, namespace, metrics_enabled, SYSTEM, RayLinks(), node_id, name, node_ip
        )
        self._listener: KafkaListener | None = None
        if listener is not None:
            # ReplicaRefs to this actor carry its key: those calls stay in this process.
            hosts = Hosts(self._manager, actor_key(context.current_actor))
            self._listener = KafkaListener(namespace, listener.config, list(listener.listeners), hosts)
            # An async actor's constructor runs in the actor's event loop: listen from here
            # (a task of that loop), not from a remote call to itself, which Ray fails
            # (ACTOR_UNAVAILABLE) while this actor is still being created.
            self._listener.keep_listening()

    @property
    def replica_manager(self) -> ReplicaManager:
        """The host code, for a caller in this process."""
        return self._manager

    # -- the Kafka listener (the listener host only) -----------------------------------------

    async def start_listener(self) -> tuple[str, int] | None:
        """Wait until the listener listens and has registered; its primary address (None: this
        host serves no listener). A start that fails raises its error (and is retried)."""
        if self._listener is None:
            return None
        return await self._listener.start()

    async def stop_listener(self) -> None:
        """Stop listening and close every client connection (the cluster's shutdown, before
        the coordinators stop)."""
        if self._listener is not None:
            await self._listener.stop()

    async def listener_stats(self) -> dict[str, Any] | None:
        """The listener's connections, requests and calls (see KafkaListener.stats); None when
        this host serves no listener."""
        return self._listener.stats() if self._listener is not None else None

    # -- lifecycle (the controller) ---------------------------------------------------------

    async def open_replicas(self, replicas: list[OpenReplica]) -> list[Any]:
        """See ReplicaManager.open_replicas."""
        return await self._manager.open_replicas(replicas)

    async def close_replicas(self, partitions: list[tuple[str, int]], delete: bool = False) -> None:
        """See ReplicaManager.close_replicas."""
        await self._manager.close_replicas(partitions, delete)

    async def leader_and_isr(self, request: LeaderAndIsrRequest) -> list[Any]:
        """See ReplicaManager.leader_and_isr."""
        return await self._manager.leader_and_isr(request)

    async def update_topic_config(self, topic: str, config: dict[str, Any]) -> int:
        """See ReplicaManager.update_topic_config."""
        return await self._manager.update_topic_config(topic, config)

    async def run(self) -> None:
        """See ReplicaManager.run."""
        await self._manager.run()

    async def ping(self) -> int:
        """See ReplicaManager.ping."""
        return await self._manager.ping()

    async def describe_host(self) -> dict[str, Any]:
        """See ReplicaManager.describe_host."""
        return await self._manager.describe_host()

    async def shutdown(self, delete: bool = False) -> None:
        """Stop the listener (no more client requests), then see ReplicaManager.shutdown."""
        if self._listener is not None:
            await self._listener.stop()
        await self._manager.shutdown(delete)

    # -- many partitions per call -------------------------------------------------------------

    async def append_records(self, request: PartitionRequests[ProduceRequest]) -> list[Any]:
        """See ReplicaManager.append_records."""
        return await self._manager.append_records(request)

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        """See ReplicaManager.fetch_messages."""
        return await self._manager.fetch_messages(request)

    async def write_txn_markers(self, request: PartitionRequests[WriteTxnMarkersRequest]) -> list[Any]:
        """See ReplicaManager.write_txn_markers."""
        return await self._manager.write_txn_markers(request)

    async def list_offsets(self, request: PartitionRequests[ListOffsetsRequest]) -> list[Any]:
        """See ReplicaManager.list_offsets."""
        return await self._manager.list_offsets(request)

    async def offsets_for_leader_epoch(self, request: PartitionRequests[OffsetForLeaderEpochRequest]) -> list[Any]:
        """See ReplicaManager.offsets_for_leader_epoch."""
        return await self._manager.offsets_for_leader_epoch(request)

    async def delete_records(self, request: PartitionRequests[DeleteRecordsRequest]) -> list[Any]:
        """See ReplicaManager.delete_records."""
        return await self._manager.delete_records(request)

    async def wake_replica_fetch(self, replica_id: int) -> None:
        """See ReplicaManager.wake_replica_fetch."""
        self._manager.wake_replica_fetch(replica_id)

    async def inter_broker_endpoint(self) -> tuple[str, int]:
        """See ReplicaManager.inter_broker_endpoint."""
        return await self._manager.inter_broker_endpoint()

    # -- one partition (a ReplicaRef's calls) -------------------------------------------------

    async def partition_produce(self, topic: str, partition: int, request: ProduceRequest) -> ProduceResponse:
        """See ReplicaManager.partition_produce."""
        return await self._manager.partition_produce(topic, partition, request)

    async def partition_fetch(self, topic: str, partition: int, request: FetchRequest) -> FetchResponse:
        """See ReplicaManager.partition_fetch."""
        return await self._manager.partition_fetch(topic, partition, request)

    async def partition_list_offsets(
        self, topic: str, partition: int, request: ListOffsetsRequest
    ) -> OffsetAndTimestamp:
        """See ReplicaManager.partition_list_offsets."""
        return await self._manager.partition_list_offsets(topic, partition, request)

    async def partition_offset_for_leader_epoch(
        self, topic: str, partition: int, request: OffsetForLeaderEpochRequest
    ) -> EpochEndOffset:
        """See ReplicaManager.partition_offset_for_leader_epoch."""
        return await self._manager.partition_offset_for_leader_epoch(topic, partition, request)

    async def partition_delete_records(
        self, topic: str, partition: int, request: DeleteRecordsRequest
    ) -> DeleteRecordsResponse:
        """See ReplicaManager.partition_delete_records."""
        return await self._manager.partition_delete_records(topic, partition, request)

    async def partition_write_txn_marker(
        self, topic: str, partition: int, request: WriteTxnMarkersRequest
    ) -> ProduceResponse:
        """See ReplicaManager.partition_write_txn_marker."""
        return await self._manager.partition_write_txn_marker(topic, partition, request)

    async def partition_describe(self, topic: str, partition: int, principal: str | None = None) -> dict[str, Any]:
        """See ReplicaManager.partition_describe."""
        return await self._manager.partition_describe(topic, partition, principal)

    async def partition_read_local(
        self, topic: str, partition: int, offset: int, max_bytes: int = 1048576
    ) -> tuple[bytes, int]:
        """See ReplicaManager.partition_read_local."""
        return await self._manager.partition_read_local(topic, partition, offset, max_bytes)

    async def partition_clean_now(self, topic: str, partition: int, force: bool = False) -> dict[str, Any] | None:
        """See ReplicaManager.partition_clean_now."""
        return await self._manager.partition_clean_now(topic, partition, force)

    async def partition_pause_fetching(self, topic: str, partition: int, paused: bool) -> None:
        """See ReplicaManager.partition_pause_fetching."""
        await self._manager.partition_pause_fetching(topic, partition, paused)

    async def partition_delay_fetching(self, topic: str, partition: int, delay_ms: float) -> None:
        """See ReplicaManager.partition_delay_fetching."""
        await self._manager.partition_delay_fetching(topic, partition, delay_ms)
