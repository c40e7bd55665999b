"""Launch a rayqueue cluster on Ray, or connect to one that is running.

``launch()`` starts the controller actor, binds the logical brokers to Ray nodes and
brings up every replica. It runs on the Ray cluster the driver is connected to
(``ray.init(address=...)`` or ``RAY_ADDRESS``), or starts an embedded local Ray when
there is none. ``connect()`` attaches any other driver on the same Ray cluster by name.
A :class:`Cluster` is a :class:`rayqueue.connection.ClusterHandle` that also makes clients
(``cluster.producer()`` ...) and shuts the cluster down: this module sits above the clients.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ray

from actors import launch as actor_launch
from actors.broker.inter_broker import cluster_settings
from actors.broker.listening import start_listeners, stop_listeners
from actors.config import broker_config, load_toml
from actors.controller import Controller
from actors.gateway.listener import bootstrap_servers
from actors.gateway.security import check_listener_security
from actors.group_coordinator import GroupCoordinator
from actors.listeners import listener_protocols, parse_listeners
from actors.names import CONTROLLER_NAME, GROUP_COORDINATOR_NAME, SCHEMA_REGISTRY_NAME, TRANSACTION_COORDINATOR_NAME
from actors.schema_registry.actor import start_schema_registry, stop_schema_registry
from actors.transaction_coordinator import TransactionCoordinator
from rayqueue import connection
from rayqueue.admin import Admin
from rayqueue.connection import (
    EMBEDDED_NUM_CPUS,
    EMBEDDED_WORKER_STARTUP_CONCURRENCY,
    ClusterHandle,
    ensure_ray,
    is_loopback,
    join_ray,
    start_embedded_ray,
    use_ray_token,
)
from rayqueue.consumer import Consumer
from rayqueue.producer import Producer
from storage.config import Config
from storage.errors import InvalidConfigError

logger = logging.getLogger(__name__)


# What an operator may ask of the metrics endpoint's interface besides a loopback address.
EVERY_INTERFACE = ("0.0.0.0", "::", "*")


def metrics_on_loopback(listeners: Sequence[str] | str, metrics_host: str | None = None) -> bool:
    """Whether an embedded Ray keeps its metrics endpoint (and so its node) on loopback.

    ``metrics_host`` decides when given: a loopback address, or 0.0.0.0 / :: / * for every
    interface; Ray's metrics agent knows no other choice, so any other address is an
    InvalidConfigError. Otherwise the metrics bind where the Kafka listeners do: loopback
    when every listener binds a loopback address (or there is none), else every interface.
    """
    if metrics_host is not None:
        if is_loopback(metrics_host):
            return True
        if metrics_host.strip("[]") in EVERY_INTERFACE:
            return False
        raise InvalidConfigError(
            f"the metrics endpoint cannot listen on {metrics_host} alone: Ray's metrics agent listens on"
            " loopback (127.0.0.1) or on every interface (0.0.0.0)"
        )
    return all(is_loopback(listener.host) for listener in parse_listeners(listeners))


class Cluster(ClusterHandle):
    """A handle to a running rayqueue cluster that also makes its clients and shuts it down."""

    def __init__(
        self,
        namespace: str,
        controller: Any,
        config: Config,
        owns_ray: bool = False,
        group_coordinator: Any = None,
        transaction_coordinator: Any = None,
    ) -> None:
        super().__init__(namespace, controller, config, group_coordinator, transaction_coordinator)
        self._owns_ray = owns_ray

    @classmethod
    def of(cls, handle: ClusterHandle) -> Cluster:
        """The Cluster for a handle found by :func:`rayqueue.connection.connect`."""
        return cls(
            handle.namespace,
            handle.controller,
            handle.config,
            group_coordinator=handle.group_coordinator,
            transaction_coordinator=handle.transaction_coordinator,
        )

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of the brokers' Kafka listeners, for Kafka clients'
        ``bootstrap.servers`` (empty when the cluster was launched without ``listeners``)."""
        return bootstrap_servers(self.metadata([]))

    def listener_bootstrap_servers(self, listener: str) -> str:
        """``host:port,...`` of the brokers' listener named ``listener`` (``EXTERNAL``...):
        what clients of that listener's security protocol bootstrap from."""
        return bootstrap_servers(self.metadata([]), listener.upper())

    @property
    def schema_registry_url(self) -> str | None:
        """The URL of the cluster's schema registry (Confluent's REST API), None when it runs
        none (``schema.registry.listeners`` empty)."""
        handle = actor_launch.find_actor(SCHEMA_REGISTRY_NAME, self.namespace)
        if handle is None:
            return None
        urls = ray.get(handle.urls.remote(), timeout=30)
        return urls[0] if urls else None

    def producer(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> Producer:
        """A Producer bound to this cluster."""
        return Producer(self, config, **kwargs)

    def consumer(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> Consumer:
        """A Consumer bound to this cluster."""
        return Consumer(self, config, **kwargs)

    def admin(self, principal: str | None = None) -> Admin:
        """An Admin client bound to this cluster, acting as ``principal`` (``User:alice``;
        None: a super user) under the cluster's ACLs."""
        return Admin(self, principal)

    def shutdown(self, delete_data: bool = False) -> None:
        """Stop every replica cleanly and the controller; stop an embedded Ray started by launch."""
        # The listeners first (no more client requests), then the coordinators, so that they
        # write nothing more to their internal topics (markers, offsets) while the replicas close.
        stop_schema_registry(self.namespace)
        try:
            stop_listeners(self.namespace, self.config, [b.broker_id for b in self.metadata([]).brokers])
        except Exception:  # noqa: BLE001 - a controller gone already: nothing to look up
            logger.warning("could not stop the listeners", exc_info=True)
        if self.transaction_coordinator is not None:
            try:
                # Its background completions stop before the kill (the next load resumes them).
                ray.get(self.transaction_coordinator.close.remote(), timeout=10)
            except Exception:  # noqa: BLE001 - it is killed below all the same
                logger.warning("could not close the transaction coordinator", exc_info=True)
        for coordinator in (self.transaction_coordinator, self.group_coordinator):
            if coordinator is not None:
                actor_launch.kill(coordinator)
        try:
            ray.get(self.controller.shutdown.remote(delete_data), timeout=120)
        except ray.exceptions.RayActorError:
            pass
        actor_launch.kill(self.controller)
        if self._owns_ray:
            _stop_spark_on_ray()
            ray.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _stop_spark_on_ray() -> None:
    """Stop a Spark session RayDP runs on the Ray about to be stopped. RayDP's exit handler
    would otherwise try at exit, find its actors gone with Ray, and print a traceback."""
    raydp = sys.modules.get("raydp")
    if raydp is None:  # never imported: no Spark on Ray in this process
        return
    try:
        raydp.stop_spark()
    except Exception:  # noqa: BLE001 - Ray is stopped next whatever Spark's state
        logger.warning("could not stop Spark on Ray", exc_info=True)


def _load_config(config: str | Path | Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
    if config is None:
        values: dict[str, Any] = {}
    elif isinstance(config, (str, Path)):
        values = load_toml(config)
    else:
        values = dict(config)
    values.pop("topics", None)
    values.update(overrides)
    return values


def launch(
    config: str | Path | Mapping[str, Any] | None = None,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    timeout_s: float = 120.0,
    create_topics: bool = True,
    metrics_export_port: int | None = None,
    metrics_host: str | None = None,
    **overrides: Any,
) -> Cluster:
    """Start a rayqueue cluster and return a handle to it.

    ``config`` is a TOML file (Kafka's broker keys; see configs/local.toml) or a dict;
    keyword overrides use Kafka's keys in Python form (``log_dirs=...``,
    ``rayqueue_num_brokers=3``). Topics listed under ``[topics.<name>]`` in the TOML are
    created (unless ``create_topics`` is false). With ``listeners`` (e.g.
    ``listeners="PLAINTEXT://127.0.0.1:0"``: free ports) every broker serves Kafka's protocol
    there, in its own process; ``cluster.bootstrap_servers`` names them. With ``schema.registry.listeners``
    (e.g. ``schema_registry_listeners="http://127.0.0.1:0"``) the cluster serves a schema
    registry there; ``cluster.schema_registry_url`` names it. Raises InvalidConfigError if a
    cluster already runs in the namespace.

    An embedded Ray started here serves the cluster's metrics to Prometheus on
    ``metrics_export_port`` (``http://<node>:<port>/metrics``) when given; otherwise on a
    port of Ray's choosing. It listens where the Kafka listeners do (:func:`metrics_on_loopback`:
    loopback unless a listener binds another address; ``metrics_host`` says otherwise). On a
    Ray the driver joined, metrics are wherever it exports them.
    ``rayqueue.metrics.enabled=False`` records none.
    """
    values = _load_config(config, overrides)
    cfg = broker_config(values)
    cluster_settings(cfg)  # an inter-broker listener that cannot work fails the launch, with its reason
    owns_ray = ensure_ray(address, num_cpus, metrics_export_port, metrics_on_loopback(cfg["listeners"], metrics_host))
    namespace = cfg["rayqueue.namespace"]
    if actor_launch.find_actor(CONTROLLER_NAME, namespace) is not None:
        raise InvalidConfigError(f"a rayqueue cluster already runs in namespace {namespace!r}; use rayqueue.connect()")
    if cfg["listeners"]:
        # A key file that cannot be read or a SASL setting no client could use fails the launch
        # here, with its reason, before any broker starts.
        check_listener_security(cfg, listener_protocols(cfg["listeners"], cfg["listener.security.protocol.map"]))
    Path(cfg["log.dirs"]).mkdir(parents=True, exist_ok=True)
    here = ray.get_runtime_context().get_node_id()
    controller = _start_singleton(Controller, CONTROLLER_NAME, namespace, cfg, here)
    nodes = sorted(actor_launch.alive_nodes())
    # The driver's node first, so that one-node clusters and broker 0 stay local.
    nodes.remove(here)
    nodes.insert(0, here)
    # Every broker's hosts start here; the one serving its Kafka listener (if ``listeners``
    # is set) listens and registers by itself.
    meta = ray.get(controller.register_brokers.remote(nodes), timeout=timeout_s)
    coordinator = _start_singleton(GroupCoordinator, GROUP_COORDINATOR_NAME, namespace, cfg, here)
    txn_coordinator = _start_singleton(TransactionCoordinator, TRANSACTION_COORDINATOR_NAME, namespace, cfg, here)
    # Each loads its internal topic, creating it on a new cluster, so that the first group or
    # transaction finds it created and led rather than waiting for it. Together, and while
    # the listeners start: opening the topics' replicas and electing their leaders is much of a launch.
    loads = [coordinator.start.remote(), txn_coordinator.start.remote()]
    cluster = Cluster(namespace, controller, cfg, owns_ray, coordinator, txn_coordinator)
    if cfg["listeners"]:  # Kafka's own clients reach the brokers through these
        try:
            start_listeners(namespace, cfg, [b.broker_id for b in meta.brokers if b.alive], timeout_s)
        except BaseException:
            cluster.shutdown()
            raise
    ray.get(loads, timeout=timeout_s)
    if cfg["schema.registry.listeners"]:  # Confluent's REST API, state in _schemas
        start_schema_registry(namespace, dict(cfg), here, timeout_s)
    topics = load_toml(config).get("topics", {}) if create_topics and isinstance(config, (str, Path)) else {}
    if topics:
        admin = cluster.admin()
        existing = set(admin.list_topics())
        for name, spec in topics.items():
            if name not in existing:
                spec = dict(spec)
                admin.create_topic(
                    name, spec.pop("partitions", None), spec.pop("replication.factor", None), configs=spec
                )
    return cluster


def _start_singleton(cls: type, name: str, namespace: str, cfg: Config, node_id: str) -> Any:
    """A cluster-wide actor (controller, group and transaction coordinators): named, detached, restarted by Ray
    (each rebuilds its state from its log), placed on ``node_id`` when it can be."""
    return actor_launch.launch(cls, actor_launch.CLUSTER_ACTOR, name, namespace, node_id, namespace, dict(cfg))


def connect(name: str = "rayqueue", *, address: str | None = None, timeout_s: float = 30.0) -> Cluster:
    """Attach to the rayqueue cluster running in Ray namespace ``name``."""
    return Cluster.of(connection.connect(name, address=address, timeout_s=timeout_s))


__all__ = [
    "EMBEDDED_NUM_CPUS",
    "EMBEDDED_WORKER_STARTUP_CONCURRENCY",
    "Cluster",
    "connect",
    "ensure_ray",
    "is_loopback",
    "join_ray",
    "launch",
    "metrics_on_loopback",
    "start_embedded_ray",
    "use_ray_token",
]
