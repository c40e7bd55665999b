"""The gateway's view of its broker and of the cluster, shared by every handler.

``BrokerView`` holds the broker id, the handles of the controller and the coordinators,
and a cache of topic metadata from the controller, from which it finds the leader replica
of a partition when that leader is on this broker (a Kafka broker serves only the
partitions it leads: any other answer is NOT_LEADER_OR_FOLLOWER, and the client asks for
metadata again). The replica itself has the last word: it fences stale epochs and refuses
when it no longer leads.

The handles the handlers call (``controller``, ``group_coordinator``,
``transaction_coordinator``) are :class:`ListenerHandle`: a call through them that carries
no client principal (``authorization.client(ctx)`` in a request message, or a ``principal``
keyword) is refused before it leaves the gateway. A principal-less call is a super user's,
so a listener can never make one. The gateway's own calls (the metadata cache, its listener
registration, SCRAM credentials, the ACL watch, creating an internal topic) go through
``internal``, the plain handles, as a Kafka broker reads its own metadata.

A Metadata request always asks the controller (so a client refreshing after an error sees
the newest leaders); the cache serves the data path and is refreshed when a replica says
it no longer leads, or when a partition seems to be led elsewhere (at most every
``REFRESH_BACKOFF_S`` per topic).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any

import ray

from actors import launch
from actors.auth_helper import ClientPrincipal
from actors.clock import SYSTEM, Clock
from actors.gateway.hosts import Hosts
from actors.names import GROUP_COORDINATOR_NAME, TRANSACTION_COORDINATOR_NAME
from actors.protocol import MetadataRequest
from actors.types import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from storage.errors import (
    CoordinatorNotAvailableError,
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)

REFRESH_BACKOFF_S = 0.2  # a topic's cached metadata is asked for again at most this often
MAX_AGE_S = 30.0  # cached topic metadata older than this is asked for again
CONTROLLER_RETRY_S = 10.0  # how long a controller that is restarting is waited for
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's "not requested" value
METADATA_BATCH = 5000  # topic names per controller call


def topic_uuid(topic_id: str) -> uuid.UUID | None:
    """rayqueue's topic id (Kafka's Uuid.toString(): URL-safe base64) as a UUID."""
    if not topic_id:
        return None
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))


# -- actor calls (one function each) --------------------------------------------------------------


async def _get_metadata(controller: Any, request: MetadataRequest) -> ClusterMetadata:
    """controller.get_metadata, riding through a controller restart for a while."""
    deadline = SYSTEM.monotonic() + CONTROLLER_RETRY_S
    while True:
        try:
            return await controller.get_metadata.remote(request)
        except ray.exceptions.RayActorError:  # its ActorUnavailableError too
            if SYSTEM.monotonic() > deadline:
                raise RequestTimedOutError("the controller did not answer") from None
            await asyncio.sleep(0.2)


async def _register_listener(
    controller: Any, broker_id: int, host: str, port: int, endpoints: tuple[tuple[str, str, str, int], ...]
) -> None:
    await controller.register_listener.remote(broker_id, host, port, endpoints)


# -- the handles the handlers call ---------------------------------------------------------------


class MissingPrincipalError(RuntimeError):
    """A handler called an actor without the client's principal (a bug: it is answered
    UNKNOWN_SERVER_ERROR and never reaches the actor)."""


def _carries_principal(value: Any) -> bool:
    return type(getattr(value, "principal", None)) is ClientPrincipal


class _ListenerMethod:
    __slots__ = ("_method", "_name")

    def __init__(self, method: Any, name: str) -> None:
        self._method = method
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """The actor call, when some argument carries a client principal."""
        principal = kwargs.get("principal")
        if type(principal) is not ClientPrincipal and not any(_carries_principal(a) for a in args):
            raise MissingPrincipalError(f"{self._name} called from a listener without the client's principal")
        return self._method.remote(*args, **kwargs)


class ListenerHandle:
    """An actor handle for the listener's handlers: every call must carry the client's
    principal (see the module docstring)."""

    __slots__ = ("_handle",)

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def __getattr__(self, name: str) -> _ListenerMethod:
        return _ListenerMethod(getattr(self._handle, name), name)


@dataclasses.dataclass(frozen=True, slots=True)
class InternalHandles:
    """The plain handles, for the gateway's own calls (no client behind them)."""

    controller: Any
    transaction_coordinator: Any = None
    group_coordinator: Any = None


class _Internal:
    """A BrokerView's plain handles (as InternalHandles), the coordinators found when asked for."""

    __slots__ = ("_view",)

    def __init__(self, view: BrokerView) -> None:
        self._view = view

    @property
    def controller(self) -> Any:
        """The controller's handle."""
        return self._view._controller

    @property
    def transaction_coordinator(self) -> Any:
        """The transaction coordinator's handle."""
        return self._view._coordinator(TRANSACTION_COORDINATOR_NAME)

    @property
    def group_coordinator(self) -> Any:
        """The group coordinator's handle."""
        return self._view._coordinator(GROUP_COORDINATOR_NAME)


# -- the broker's view ----------------------------------------------------------------------


class BrokerView:
    """One gateway's broker: ids, actor handles, and cached topic metadata."""

    def __init__(
        self,
        broker_id: int,
        namespace: str,
        config: dict[str, Any],
        controller: Any,
        transaction_coordinator: Any = None,
        group_coordinator: Any = None,
        clock: Clock = SYSTEM,
        hosts: Hosts | None = None,
    ) -> None:
        self.broker_id = broker_id
        # The hosts holding the partitions: this process's own by direct calls, others by Ray.
        self.hosts = hosts if hosts is not None else Hosts()
        self.clock = clock  # the metadata cache's ages
        self.namespace = namespace
        self.config = config
        self._controller = controller
        self.controller = ListenerHandle(controller)
        # The coordinators, found by name in ``namespace`` when first needed when not given
        # (a listener may start before them: its broker's host starts with the cluster).
        self._coordinators: dict[str, Any] = {
            TRANSACTION_COORDINATOR_NAME: transaction_coordinator,
            GROUP_COORDINATOR_NAME: group_coordinator,
        }
        self._listener_handles: dict[str, ListenerHandle] = {}
        self.cluster_id = ""
        self.read_ahead_hits = 0  # Fetch answers taken from a read-ahead (fetch.py)
        # The gateway's copy of the ACLs (actors.gateway.authorization.AclView); None: no checks.
        self.acls: Any = None
        self._topics: dict[str, TopicMetadata] = {}
        self._fetched_at: dict[str, float] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._refreshing: dict[str, asyncio.Future] = {}
        # The gateway's cache of SCRAM credentials (actors.gateway.credentials), when it has one.
        self.scram_credentials: Any = None

    def _coordinator(self, name: str) -> Any:
        handle = self._coordinators[name]
        if handle is None:
            handle = self._coordinators[name] = launch.find_actor(name, self.namespace)
            if handle is None:
                raise CoordinatorNotAvailableError(f"the {name.replace('_', ' ')} is not running yet")
        return handle

    @property
    def internal(self) -> _Internal:
        """The plain handles, for the listener's own calls."""
        return _Internal(self)

    @property
    def transaction_coordinator(self) -> ListenerHandle:
        """The transaction coordinator, for calls carrying the client's principal."""
        return self._listener_handle(TRANSACTION_COORDINATOR_NAME)

    @property
    def group_coordinator(self) -> ListenerHandle:
        """The group coordinator, for calls carrying the client's principal."""
        return self._listener_handle(GROUP_COORDINATOR_NAME)

    def _listener_handle(self, name: str) -> ListenerHandle:
        handle = self._listener_handles.get(name)
        if handle is None:
            handle = self._listener_handles[name] = ListenerHandle(self._coordinator(name))
        return handle

    async def register(self, host: str, port: int, endpoints: tuple[tuple[str, str, str, int], ...] = ()) -> None:
        """Tell the controller where this broker's gateway is reached: its primary address
        and every listener's (name, security protocol, host, port)."""
        await _register_listener(self.internal.controller, self.broker_id, host, port, endpoints)

    async def cluster(
        self, topics: list[str] | None, auto_create: bool = False, principal: ClientPrincipal | None = None
    ) -> ClusterMetadata:
        """Fresh metadata from the controller (``None``: every topic); refreshes the cache.
        Many names are asked in batches: one call's arguments are pickled on the event loop.
        An auto-creation is the client's act: it carries the client's ``principal``."""
        if auto_create and type(principal) is not ClientPrincipal:
            raise MissingPrincipalError("auto-creating topics without the client's principal")
        if topics is not None and len(topics) > METADATA_BATCH:
            parts = [
                await self.cluster(topics[i : i + METADATA_BATCH], auto_create, principal)
                for i in range(0, len(topics), METADATA_BATCH)
            ]
            merged: dict[str, TopicMetadata] = {}
            for part in parts:
                merged.update(part.topics)
            return dataclasses.replace(parts[-1], topics=merged)
        request = MetadataRequest(
            None if topics is None else tuple(topics), auto_create, principal if auto_create else None
        )
        snapshot = await _get_metadata(self.internal.controller, request)
        self._remember(snapshot, topics)
        return snapshot

    def _remember(self, snapshot: ClusterMetadata, asked: list[str] | None) -> None:
        now = self.clock.monotonic()
        self.cluster_id = snapshot.cluster_id
        for name, meta in snapshot.topics.items():
            old = self._topics.get(name)
            if old is not None and old.topic_id != meta.topic_id:
                self._by_id.pop(topic_uuid(old.topic_id), None)  # type: ignore[arg-type]
            self._topics[name] = meta
            self._fetched_at[name] = now
            tid = topic_uuid(meta.topic_id)
            if tid is not None:
                self._by_id[tid] = name
        # Forget the cached topics the controller no longer has (only cached ones: a Metadata
        # request may name 100,000 topics that do not exist; a loop over those would hold the event loop).
        known = self._fetched_at.keys() if asked is None else self._fetched_at.keys() & set(asked)
        for name in known - snapshot.topics.keys():
            self.invalidate(name)

    async def topic(self, name: str, refresh: bool = False) -> TopicMetadata | None:
        """A topic's metadata from the cache (asked for when missing, stale, or ``refresh``
        and not asked for in the last REFRESH_BACKOFF_S); None when it does not exist."""
        now = self.clock.monotonic()
        fetched = self._fetched_at.get(name)
        fresh_enough = fetched is not None and now - fetched < (REFRESH_BACKOFF_S if refresh else MAX_AGE_S)
        if name in self._topics and fresh_enough:
            return self._topics[name]
        if fetched is not None and now - fetched < REFRESH_BACKOFF_S and name not in self._topics:
            return None  # asked a moment ago: it does not exist
        pending = self._refreshing.get(name)
        if pending is None:
            pending = asyncio.ensure_future(self._refresh(name))
            self._refreshing[name] = pending
        await asyncio.shield(pending)
        return self._topics.get(name)

    async def _refresh(self, name: str) -> None:
        try:
            await self.cluster([name])
            self._fetched_at[name] = self.clock.monotonic()
        finally:
            self._refreshing.pop(name, None)

    async def leader(self, topic: str, partition: int) -> PartitionMetadata:
        """The partition's metadata when its leader is this broker's replica, with a live
        handle; else UnknownTopicOrPartition, LeaderNotAvailable or NotLeaderOrFollower."""
        refresh = False
        while True:
            meta = await self.topic(topic, refresh)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
            if not 0 <= partition < len(meta.partitions):
                if not refresh:  # partitions may have been added since
                    refresh = True
                    continue
                raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition}")
            part = meta.partitions[partition]
            if part.leader == self.broker_id and part.leader_handle is not None:
                return part
            if not refresh:
                refresh = True
                continue
            if part.leader < 0:
                raise LeaderNotAvailableError(f"{topic}-{partition} has no leader")
            raise NotLeaderOrFollowerError(f"{topic}-{partition} is led by broker {part.leader}, not {self.broker_id}")

    async def refusals(self, topic: str, partitions: list[int]) -> Callable[[int], int | None]:
        """For a request naming partitions of ``topic``: a function giving the error code of
        a partition this broker does not lead (None: led here). One metadata refresh at most
        when some are not led here, however many partitions are named (a refresh per
        partition asked the controller once per unknown partition)."""
        meta = await self.topic(topic)
        if not set(partitions) <= self._led_here(meta):
            meta = await self.topic(topic, refresh=True)
        led = self._led_here(meta)
        count = len(meta.partitions) if meta is not None else 0

        def refusal(index: int) -> int | None:
            if index in led:
                return None
            if meta is None or not 0 <= index < count:
                return UnknownTopicOrPartitionError.code
            if meta.partitions[index].leader < 0:
                return LeaderNotAvailableError.code
            return NotLeaderOrFollowerError.code

        return refusal

    def _led_here(self, meta: TopicMetadata | None) -> set[int]:
        if meta is None:
            return set()
        return {p.partition for p in meta.partitions if p.leader == self.broker_id and p.leader_handle is not None}

    def topic_name(self, topic_id: uuid.UUID | None) -> str:
        """The name of a cached topic id; UnknownTopicIdError when none is cached."""
        name = self._by_id.get(topic_id) if topic_id is not None else None
        if name is None:
            raise UnknownTopicIdError(f"unknown topic id {topic_id}")
        return name

    async def resolve_ids(self, topic_ids: list[uuid.UUID | None]) -> None:
        """Make sure the given topic ids are cached (one controller call when some are not)."""
        if any(t is not None and t not in self._by_id for t in topic_ids):
            await self.cluster(None)

    def uuid_of(self, name: str) -> uuid.UUID | None:
        """A cached topic's id as a UUID."""
        meta = self._topics.get(name)
        return topic_uuid(meta.topic_id) if meta is not None else None

    def invalidate(self, topic: str) -> None:
        """Forget ``topic``: its next use asks the controller."""
        meta = self._topics.pop(topic, None)
        self._fetched_at.pop(topic, None)
        if meta is not None:
            self._by_id.pop(topic_uuid(meta.topic_id), None)  # type: ignore[arg-type]

    def on_partition_error(self, topic: str, code: int) -> None:
        """A partition's call failed with ``code``: forget what may be stale."""
        if code in _STALE_METADATA:
            self.invalidate(topic)


_STALE_METADATA = frozenset(
    {
        NotLeaderOrFollowerError.code,
        LeaderNotAvailableError.code,
        UnknownTopicOrPartitionError.code,
        FencedLeaderEpochError.code,
        UnknownLeaderEpochError.code,
    }
)


def listed_brokers(brokers: tuple[BrokerMetadata, ...], listener: str | None = None) -> list[BrokerMetadata]:
    """The brokers Metadata names: live ones whose gateway has registered a listener, with
    ``host``/``port`` of listener ``listener`` (as Kafka answers each client with the
    addresses of the listener it came in on; a broker without that listener is left out);
    ``None``: the primary addresses."""
    out = []
    for b in brokers:
        if not b.alive:
            continue
        address = b.endpoint(listener)
        if address is None or not address[0] or address[1] <= 0:
            continue
        if address != (b.host, b.port):
            b = dataclasses.replace(b, host=address[0], port=address[1])
        out.append(b)
    return sorted(out, key=lambda b: b.broker_id)


def listener_of(ctx: Any) -> str:
    """The name of the listener a request came in on (``ctx``: a server.RequestContext)."""
    return ctx.connection.server.security.name
