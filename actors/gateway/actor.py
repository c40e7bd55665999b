"""The Gateway actor: one per broker, on the broker's node, serving Kafka's protocol.

It owns a ``KafkaServer`` on each of the broker's listeners (``listeners``, each with its
security protocol: ``security``) and one ``BrokerView``; every request is
translated by the handler modules into calls to the replicas and coordinators. Named
``gateway|<broker id>`` in the cluster's namespace, detached, restarted by Ray if its
process dies (it then listens and registers again by itself: its constructor starts the
listener as a task of the actor's own event loop, retried with backoff until it listens;
not as a remote call to itself, which Ray fails with ACTOR_UNAVAILABLE when it is submitted
while the restarted actor is still being created). ``start_gateways`` / ``stop_gateways``
are what the cluster launch and shutdown call.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
from typing import Any

import ray

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
from actors.gateway.security import check_listener_security, listener_security
from actors.gateway.server import KafkaServer, Limits
from actors.gateway.versions import served_apis
from actors.listeners import BrokerListener, broker_endpoints, listener_protocols, primary_listener
from actors.metrics import TICK_S, GatewayMetrics
from actors.names import CONTROLLER_NAME, GROUP_COORDINATOR_NAME, TRANSACTION_COORDINATOR_NAME, gateway_actor_name
from actors.types import ClusterMetadata

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0
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


class Gateway:
    """A broker's Kafka protocol endpoint (see the module docstring)."""

    def __init__(
        self, namespace: str, config: dict[str, Any], listeners: BrokerListener | list[BrokerListener]
    ) -> None:
        self._namespace = namespace
        self._config = dict(config)
        self._listeners = [listeners] if isinstance(listeners, BrokerListener) else list(listeners)
        self._listener = self._listeners[0]  # the broker id is every listener's
        self._servers: list[KafkaServer] = []
        self._address: tuple[str, int] | None = None
        self._starting: asyncio.Lock | None = None
        self._metrics_task: asyncio.Task | None = None
        self._keeper: asyncio.Task | None = None
        if ray.get_runtime_context().get_actor_id() is not None:
            # Listen without waiting to be asked: after a restart by Ray nobody asks (the
            # launch's own call finds it started, or starting). An async actor's constructor
            # runs in the actor's event loop, so the start is a task of that loop; a remote
            # call to itself from here would be failed by Ray (ACTOR_UNAVAILABLE, no retries)
            # whenever Ray tells this new process that the actor is still RESTARTING.
            self._keeper = asyncio.get_running_loop().create_task(self.keep_started())

    async def start(self) -> tuple[str, int]:
        """Listen and register the advertised address with the controller (idempotent);
        returns that address."""
        if self._starting is None:
            self._starting = asyncio.Lock()  # created in the actor's event loop
        async with self._starting:
            if self._address is None:
                self._address = await self._start()
            return self._address

    async def keep_started(self) -> None:
        """``start``, retried with backoff until it succeeds (a restarted gateway whose port
        is still held by its predecessor's socket, or whose controller is restarting, tries
        again); ``stop`` ends it."""
        backoff = START_BACKOFF_S
        while True:
            try:
                await self.start()
                return
            except Exception as exc:  # noqa: BLE001 - logged, then retried
                logger.warning(
                    "gateway of broker %d could not start (%s: %s); retrying in %.1f s",
                    self._listener.broker_id,
                    type(exc).__name__,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, START_BACKOFF_MAX_S)

    async def _start(self) -> tuple[str, int]:
        broker_id = self._listener.broker_id
        view = BrokerView(
            broker_id,
            self._namespace,
            self._config,
            launch.find_actor(CONTROLLER_NAME, self._namespace),
            launch.find_actor(TRANSACTION_COORDINATOR_NAME, self._namespace),
            launch.find_actor(GROUP_COORDINATOR_NAME, self._namespace),
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
                name = f"gateway-{broker_id}" if len(self._listeners) == 1 else f"gateway-{broker_id}-{listener.name}"
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
                except Exception:  # noqa: BLE001 - metrics must never stop the gateway
                    logger.exception("recording gateway metrics failed")

    async def stop(self) -> None:
        """Stop listening and close every connection (a start still being retried ends)."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not keeper.done() and keeper is not asyncio.current_task():
            keeper.cancel()
        servers, self._servers = self._servers, []
        if servers:
            acls = getattr(servers[0].state, "acls", None)  # one view (and its ACLs) for every listener
            if acls is not None:
                acls.close()
        for server in servers:
            await server.close()
        self._address = None

    async def stats(self) -> dict[str, Any]:
        """Process, address, open connections, requests served (and by API key and
        version) and being worked on, connections closed for bad input, request memory in use."""
        servers = self._servers
        served: collections.Counter[tuple[int, int]] = collections.Counter()
        for server in servers:
            served.update(server.served)
        return {
            "broker_id": self._listener.broker_id,
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
        }

    async def ping(self) -> int:
        """Liveness probe; returns the broker id."""
        return self._listener.broker_id


def start_gateways(namespace: str, config: dict[str, Any], meta: ClusterMetadata, timeout_s: float) -> str:
    """Start one gateway per broker on the broker's node when ``listeners`` is set; returns
    the bootstrap servers (``host:port,...``), empty without listeners."""
    node_ips = launch.node_addresses()
    brokers = {b.broker_id: b for b in meta.brokers}
    plan = broker_endpoints(
        config["listeners"],
        config["advertised.listeners"],
        [(b.broker_id, node_ips.get(b.node_id) or "127.0.0.1") for b in brokers.values()],
        config["listener.security.protocol.map"],
    )
    if not plan:
        return ""
    # A key file that cannot be read or a SASL setting no client could use fails the launch
    # here, with its reason, rather than every gateway's start over and over.
    check_listener_security(config, listener_protocols(config["listeners"], config["listener.security.protocol.map"]))
    handles = []
    for broker_id, listeners in plan.items():
        listener = listeners[0]
        name = gateway_actor_name(broker_id)
        stale = launch.find_actor(name, namespace)
        if stale is not None:  # left by a cluster that died without shutting down
            launch.kill(stale)
            launch.wait_name_free(name, namespace)
        node_id = brokers[listener.broker_id].node_id
        handles.append(
            launch.launch(Gateway, launch.GATEWAY, name, namespace, node_id, namespace, dict(config), listeners)
        )
    try:
        addresses = ray.get([h.start.remote() for h in handles], timeout=timeout_s)
    except Exception:
        for handle in handles:
            launch.kill(handle)
        raise
    return ",".join(f"{host}:{port}" for host, port in addresses)


def stop_gateways(namespace: str, broker_ids: list[int]) -> None:
    """Stop and remove the gateways of ``broker_ids`` (those that run)."""
    handles = [h for h in (launch.find_actor(gateway_actor_name(b), namespace) for b in broker_ids) if h is not None]
    if not handles:
        return
    try:
        ray.get([h.stop.remote() for h in handles], timeout=STOP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - killed below all the same
        logger.warning("a gateway did not stop cleanly", exc_info=True)
    for handle in handles:
        launch.kill(handle)


def bootstrap_servers(meta: ClusterMetadata, listener: str | None = None) -> str:
    """``host:port,...`` of the brokers' gateways, for Kafka clients' bootstrap.servers: of
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
