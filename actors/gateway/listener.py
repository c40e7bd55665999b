"""A broker's Kafka listener: its servers on the broker's listeners, run in a broker host's process.

A Kafka broker is one process: its SocketServer, its request handlers (KafkaApis) and its
ReplicaManager share memory. So does a rayqueue broker: :class:`KafkaListener` owns a
``KafkaServer`` on each of the broker's listeners (``listeners``, each with its security
protocol: ``security``) and one ``BrokerView``, and it runs on the event loop of one of the
broker's host actors (``actors.broker.actor.BrokerHost`` composes it with the host's
ReplicaManager). Every request is translated by the handler modules into calls to the
replicas and coordinators: the replicas of its own process directly, other hosts, the
coordinators and the controller by Ray (``actors.gateway.hosts``).

The host starts it (:meth:`KafkaListener.keep_started`: retried with backoff until it
listens and has registered its addresses with the controller, so a host started again by
the controller after a death listens again by itself) and stops it before it closes its
replicas. No Ray actor here: this module is the listener's plain code.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
from typing import Any

from actors import launch
from actors.acl_view import AclView
from actors.config import connection_overrides
from actors.gateway.broker_view import BrokerView, listed_brokers
from actors.gateway.credentials import ScramCredentialCache
from actors.gateway.handlers import (
    acls,
    admin,
    consumer_groups,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    sasl,
    scram,
    transactions,
)
from actors.gateway.hosts import Hosts
from actors.gateway.security import listener_security
from actors.gateway.server import KafkaServer, Limits
from actors.gateway.versions import served_apis
from actors.listeners import BrokerListener, primary_listener
from actors.metrics import TICK_S, GatewayMetrics
from actors.names import CONTROLLER_NAME, GROUP_COORDINATOR_NAME, TRANSACTION_COORDINATOR_NAME
from actors.types import ClusterMetadata

logger = logging.getLogger(__name__)

# A start that failed (the port still held by the dead predecessor's socket, the controller
# restarting) is tried again after this, doubling up to the maximum.
START_BACKOFF_S = 0.5
START_BACKOFF_MAX_S = 10.0

# The API families served.
FAMILIES = (
    metadata.APIS,
    produce.APIS,
    fetch.APIS,
    offsets.APIS,
    admin.APIS,
    groups.APIS,
    consumer_groups.APIS,
    transactions.APIS,
    sasl.APIS,
    scram.APIS,
    acls.APIS,
)


def limits_of(config: dict[str, Any]) -> Limits:
    """The connection and memory limits a broker configuration sets."""
    return Limits(
        max_request_bytes=config["socket.request.max.bytes"],
        idle_ms=config["connections.max.idle.ms"],
        max_connections=config["max.connections"],
        max_connections_per_ip=config["max.connections.per.ip"],
        max_connections_per_ip_overrides=_by_address(connection_overrides(config["max.connections.per.ip.overrides"])),
        queued_max_request_bytes=config["queued.max.request.bytes"],
        max_inflight=config["rayqueue.gateway.max.inflight.requests"],
    )


def _by_address(overrides: dict[str, int]) -> dict[str, int]:
    """Per-host overrides keyed by every address the host names resolve to (as Kafka does);
    a name that does not resolve is skipped with a warning."""
    out = {}
    for host, count in overrides.items():
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        except OSError as exc:
            logger.warning("max.connections.per.ip.overrides: %s does not resolve (%s); skipped", host, exc)
            continue
        for address in addresses:
            out[address] = count
    return out


class KafkaListener:
    """Broker ``listeners[0].broker_id``'s Kafka listeners in this process (see the module
    docstring); ``hosts`` reaches the replicas (this process's own directly)."""

    def __init__(
        self,
        namespace: str,
        config: dict[str, Any],
        listeners: BrokerListener | list[BrokerListener],
        hosts: Hosts | None = None,
    ) -> None:
        self._namespace = namespace
        self._config = dict(config)
        self._listeners = [listeners] if isinstance(listeners, BrokerListener) else list(listeners)
        self._listener = self._listeners[0]  # the broker id is every listener's
        self._hosts = hosts if hosts is not None else Hosts()
        self._servers: list[KafkaServer] = []
        self._address: tuple[str, int] | None = None
        self._starting: asyncio.Lock | None = None
        self._metrics_task: asyncio.Task | None = None
        self._keeper: asyncio.Task | None = None
        self._stopped = False

    @property
    def broker_id(self) -> int:
        """The broker whose listeners these are."""
        return self._listener.broker_id

    def keep_listening(self) -> None:
        """Start :meth:`keep_started` as a task of the running event loop (the host's)."""
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(self.keep_started())

    async def start(self) -> tuple[str, int]:
        """Listen and register the advertised address with the controller (idempotent);
        returns that address."""
        if self._starting is None:
            self._starting = asyncio.Lock()  # created in the host's event loop
        async with self._starting:
            self._stopped = False
            if self._address is None:
                self._address = await self._start()
            return self._address

    async def keep_started(self) -> None:
        """``start``, retried with backoff until it succeeds (a host started again whose port
        is still held by its predecessor's socket, or whose controller is restarting, tries
        again); ``stop`` ends it."""
        backoff = START_BACKOFF_S
        while not self._stopped:
            try:
                await self.start()
                return
            except Exception as exc:  # noqa: BLE001 - logged, then retried
                if self._stopped:
                    return
                logger.warning(
                    "the listener of broker %d could not start (%s: %s); retrying in %.1f s",
                    self.broker_id,
                    type(exc).__name__,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, START_BACKOFF_MAX_S)

    async def _start(self) -> tuple[str, int]:
        broker_id = self.broker_id
        view = BrokerView(
            broker_id,
            self._namespace,
            self._config,
            launch.find_actor(CONTROLLER_NAME, self._namespace),
            launch.find_actor(TRANSACTION_COORDINATOR_NAME, self._namespace),
            launch.find_actor(GROUP_COORDINATOR_NAME, self._namespace),
            hosts=self._hosts,
        )
        # The ACLs are loaded before the listener opens: no request is answered without them.
        acls = AclView(self._config, view.internal.controller)
        await acls.start()
        view.acls = acls
        metrics = None
        if self._config.get("rayqueue.metrics.enabled", True):
            metrics = GatewayMetrics(self._namespace, broker_id)
        controller = view.internal.controller
        view.scram_credentials = ScramCredentialCache(
            lambda user, mechanism: controller.scram_credential.remote(user, mechanism)
        )
        apis = served_apis(FAMILIES)
        servers: list[KafkaServer] = []
        endpoints: list[tuple[str, str, str, int]] = []
        try:
            for listener in self._listeners:
                security = listener_security(
                    self._config,
                    listener.name,
                    listener.protocol,
                    view.scram_credentials,
                    on_sasl_result=_recorder(metrics, listener.name),
                    on_tls_result=_tls_recorder(metrics, listener.name),
                )
                name = f"listener-{broker_id}" if len(self._listeners) == 1 else f"listener-{broker_id}-{listener.name}"
                server = KafkaServer(apis, view, limits_of(self._config), name=name, metrics=metrics, security=security)
                servers.append(server)
                _, port = await server.start(listener.bind_host, listener.bind_port)
                endpoints.append(
                    (listener.name, listener.protocol, listener.advertised_host, listener.advertised_port or port)
                )
            primary = primary_listener({e[0]: e[1] for e in endpoints})
            address = next((e[2], e[3]) for e in endpoints if e[0] == primary)
            await view.register(*address, tuple(endpoints))
        except BaseException:
            for server in servers:
                await server.close()
            acls.close()
            raise
        self._servers = servers
        if metrics is not None and self._metrics_task is None:
            self._metrics_task = asyncio.get_running_loop().create_task(self._metrics_loop())
        for name, protocol, host, port in endpoints:
            logger.info(
                "broker %d: Kafka clients reach listener %s (%s) at %s:%d", broker_id, name, protocol, host, port
            )
        return address

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            servers = self._servers
            if servers and servers[0].metrics is not None:
                try:
                    servers[0].metrics.tick(sum(len(server.connections) for server in servers))
                except Exception:  # noqa: BLE001 - metrics must never stop the listener
                    logger.exception("recording listener metrics failed")

    async def stop(self) -> None:
        """Stop listening and close every connection (a start still being retried ends; it
        listens again only when ``start`` is called)."""
        self._stopped = True
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not keeper.done() and keeper is not asyncio.current_task():
            keeper.cancel()
        metrics_task, self._metrics_task = self._metrics_task, None
        if metrics_task is not None:
            metrics_task.cancel()
        servers, self._servers = self._servers, []
        if servers:
            acls = getattr(servers[0].state, "acls", None)  # one view (and its ACLs) for every listener
            if acls is not None:
                acls.close()
        for server in servers:
            await server.close()
        self._address = None

    def stats(self) -> dict[str, Any]:
        """Process, address, open connections, requests served (and by API key and
        version) and being worked on, connections closed for bad input, request memory in
        use, and the replica calls made in this process and by Ray."""
        servers = self._servers
        served: collections.Counter[tuple[int, int]] = collections.Counter()
        for server in servers:
            served.update(server.served)
        return {
            "broker_id": self.broker_id,
            "pid": os.getpid(),
            "address": self._address,
            "listening": bool(servers),
            "connections": sum(len(s.connections) for s in servers),
            "requests": sum(s.requests for s in servers),
            "requests_in_flight": sum(s.inflight for s in servers),  # being worked on (parked ones too)
            "closed_for_errors": sum(s.closed_for_errors for s in servers),
            "served": dict(served),
            "read_ahead_hits": servers[0].state.read_ahead_hits if servers else 0,
            # queued.max.request.bytes (per listener): in use now and at most so far; requests decoded off the loop
            "request_memory": sum(s.memory.used for s in servers),
            "request_memory_peak": max((s.memory.peak for s in servers), default=0),
            "big_requests": sum(s.big_requests for s in servers),
            # Each listener's open connections by principal (who the authorizer sees).
            "principals": {
                s.security.name: dict(collections.Counter(c.principal for c in s.connections)) for s in servers
            },
            # Each listener: name -> (security protocol, connections, closed for errors).
            "listeners": {
                s.security.name: (s.security.protocol, len(s.connections), s.closed_for_errors) for s in servers
            },
            # The copy of the ACLs it authorizes with: the controller's version, and how many.
            "acl_version": acls.version if (acls := servers[0].state.acls if servers else None) else None,
            "acls": len(acls.authorizer) if acls else 0,
            # Calls to the replicas: this process's own (direct) and other hosts' (Ray).
            "local_calls": self._hosts.local_calls,
            "remote_calls": self._hosts.remote_calls,
        }


def bootstrap_servers(meta: ClusterMetadata, listener: str | None = None) -> str:
    """``host:port,...`` of the brokers' listeners, for Kafka clients' bootstrap.servers: of
    listener ``listener``, or (None) of each broker's primary listener (its first PLAINTEXT
    one, else SASL_PLAINTEXT, else its first)."""
    return ",".join(f"{b.host}:{b.port}" for b in listed_brokers(meta.brokers, listener))


def _recorder(metrics: GatewayMetrics | None, listener: str) -> Any:
    if metrics is None:
        return None
    return lambda mechanism, ok: metrics.authentication(listener, mechanism, ok)


def _tls_recorder(metrics: GatewayMetrics | None, listener: str) -> Any:
    if metrics is None:
        return None
    return lambda ok: metrics.authentication(listener, "SSL", ok)
