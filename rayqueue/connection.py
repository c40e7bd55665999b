"""How a client reaches a running rayqueue cluster: Ray joined or started, and the handle.

:class:`ClusterHandle` is what every client (Producer, Consumer, Admin, the Ray Data source)
needs from a cluster: its Ray namespace, the controller and coordinator actors and the broker
config. :func:`connect` finds them by name in a running Ray. This module imports no client,
so every client can import it; ``rayqueue.cluster`` (``launch()``, ``Cluster.producer()`` ...)
sits above the clients.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
from collections.abc import Iterator
from typing import Any

import ray

from actors import launch
from actors.config import BROKER_CONFIG
from actors.names import CONTROLLER_NAME, GROUP_COORDINATOR_NAME, TRANSACTION_COORDINATOR_NAME
from actors.protocol import MetadataRequest
from actors.types import ClusterMetadata
from rayqueue.metadata import call_controller
from storage.config import Config
from storage.errors import InvalidConfigError, KafkaTimeoutError

logger = logging.getLogger(__name__)

# An embedded Ray on a small machine gets more logical CPUs than cores so that Spark
# executors and Ray Data tasks never wait forever for a CPU slot (STACK.md).
EMBEDDED_NUM_CPUS = 8
# Every broker, gateway and coordinator is an actor, and every actor a worker process of its
# own (num_cpus=0, mostly waiting on I/O), besides Spark's executors and Ray Data's tasks.
# Ray's raylet sends every driver a warning once its node holds 4x as many worker processes
# as its "maximum startup concurrency", which defaults to the core count: on a 2-core machine
# a 3-broker cluster with its gateways, coordinators and a Spark session passes 8, and the
# warning would print on every run. For the Ray it starts itself rayqueue lets 16 workers
# start at once, so Ray warns past 64 worker processes (some 4.5 GB of actors), where it
# means something on a small machine.
EMBEDDED_WORKER_STARTUP_CONCURRENCY = 16
# Ray's own logger for its token-authentication notices (Ray 2.60).
_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def one_line(text: str) -> str:
    """``text`` with its whitespace runs (newlines included) folded to single spaces."""
    return " ".join(text.split())


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or ``localhost``) is reachable from this machine alone."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def _ray_node_on_loopback() -> Iterator[None]:
    """Have ``ray.init`` keep 127.0.0.1 as it is: as this node's address when it starts a
    Ray, as the address it connects to when it joins one; and have every process of a Ray
    started here keep it too.

    Ray's metrics agent listens on loopback when the node's address is loopback and on every
    interface otherwise (Ray 2.60, ``ReporterAgent``: ``address=get_localhost_ip() if
    is_localhost(ip) else ""``); it has no setting of its own for the bind address. Ray turns
    ``127.0.0.1`` (a node address asked for, or the address a driver is told to join) into the
    machine's outward address, except in its single-machine mode
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the default on Windows and macOS), which keeps
    loopback as loopback. Each process reads that switch once, when it imports Ray: in this
    one it is set for the one ``ray.init`` call (once started or joined, the node's address
    is the node's). The processes a Ray started here runs (its raylet, the workers the raylet
    starts, and what they start) take their environment from this process as it is during
    ``ray.init``, so the switch is in the environment for that call too. Without it, a
    process that joins this Ray by its address (``127.0.0.1:<port>``) from inside it is sent
    to the machine's outward address, where nothing listens, and waits for ever: RayDP's
    Dataset-to-DataFrame conversion does exactly that from Spark's Python workers, which an
    executor (a Ray actor) starts, so every ``rayqueue.spark.read`` stalled.
    """
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    saved_env = os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR)
    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved
        if saved_env is None:
            os.environ.pop(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, None)
        else:
            os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = saved_env


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Hide one logger's warnings for the duration (errors still show)."""
    target = logging.getLogger(logger_name)
    level = target.level
    target.setLevel(logging.ERROR)
    try:
        yield
    finally:
        target.setLevel(level)


def use_ray_token() -> bool:
    """Use Ray's authentication token, if there is one, when joining a Ray cluster; True if on.

    Ray 2.60's rule for a cluster found on this machine (``ray start --head``, and
    ``ray.init(address="auto")``): with RAY_AUTH_MODE unset and a token in RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, token authentication is on. Ray applies it to
    "auto" only, but ``ray start --head`` turns tokens on whenever the head has one, so a
    driver given the head's address explicitly needs the same rule. An explicit
    RAY_AUTH_MODE always wins.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return False
    # Its notice ("enabled for this Ray cluster ... set RAY_AUTH_MODE=disabled to opt out")
    # speaks to whoever starts a cluster, not to a client joining one.
    with _quiet(_RAY_AUTH_LOGGER):
        return bool(maybe_enable_token_auth_if_token_available(warn_if_disabled=False))


def _check_ray_reachable(address: str, token_on: bool) -> None:
    """Ask the cluster's GCS once before ray.init, which retries an authentication failure
    for 20 s (a line a second) and then names neither the cause nor the fix."""
    try:
        from ray._raylet import GcsClient
    except ImportError:
        return
    try:
        GcsClient(address=address)
    except ray.exceptions.AuthenticationError:
        if token_on:
            fix = "this machine's token is not the cluster's: use the head node's ~/.ray/auth_token"
        elif os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
            fix = "unset RAY_AUTH_MODE (it is 'disabled') and copy the head node's ~/.ray/auth_token here"
        else:
            fix = "copy the head node's ~/.ray/auth_token here, or set RAY_AUTH_TOKEN to `ray get-auth-token` run there"
        raise ConnectionError(f"the Ray cluster at {address} uses token authentication; {fix}") from None
    except ray.exceptions.RpcError as exc:
        raise ConnectionError(f"no Ray cluster answers at {address}: {exc}") from None


def _joins_loopback(address: str) -> bool:
    """Whether ``address`` ("auto": RAY_ADDRESS, else the Ray started last on this machine)
    names a loopback address, as written (Ray would turn it into the outward one)."""
    from ray._private import services

    if "://" in address:  # a Ray Client address: Ray does not rewrite those
        return False
    with _ray_node_on_loopback():
        try:
            resolved = services.canonicalize_bootstrap_address(address)
        except Exception:  # noqa: BLE001 - no Ray found: ray.init says so in its own words
            return False
    return resolved is not None and is_loopback(resolved.rsplit(":", 1)[0])


def join_ray(address: str) -> None:
    """Connect this process to the running Ray cluster at ``address`` ("auto": the one on this
    machine), with its authentication token found as Ray's own tools find it.

    A Ray on loopback (``rayqueue start`` on loopback listeners) is joined at its loopback
    address, which plain ``ray.init`` would replace by the machine's outward one."""
    token_on = use_ray_token()
    if address != "auto" and "://" not in address:
        _check_ray_reachable(address, token_on)
    on_loopback = _ray_node_on_loopback() if _joins_loopback(address) else contextlib.nullcontext()
    with on_loopback:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)


def start_embedded_ray(
    num_cpus: int | None = None, metrics_export_port: int | None = None, loopback: bool = False
) -> None:
    """Start a Ray of this process's own, quietly: Ray's defaults (token authentication on,
    unless RAY_AUTH_MODE says otherwise), its logs in its session directory, and a worker
    start-up concurrency fit for many small actors (EMBEDDED_WORKER_STARTUP_CONCURRENCY).

    ``metrics_export_port``: where Ray's metrics agent serves Prometheus (``/metrics``);
    None lets Ray pick a free port. With ``loopback`` the node's address is 127.0.0.1: its
    metrics agent, GCS, raylet and workers listen on loopback only, and no other machine can
    join this Ray or scrape it, and the processes it runs join it at loopback (Spark's Python
    workers under RayDP among them); without, the metrics agent listens on every interface.
    """
    extra: dict[str, Any] = {}
    if metrics_export_port:
        extra["_metrics_export_port"] = metrics_export_port
    if loopback:
        extra["_node_ip_address"] = "127.0.0.1"
    on_loopback = _ray_node_on_loopback() if loopback else contextlib.nullcontext()
    with _quiet(_RAY_AUTH_LOGGER), on_loopback:
        # "local": never a Ray that `ray start` runs (or left behind in /tmp/ray) on this machine.
        ray.init(
            address="local",
            num_cpus=num_cpus or EMBEDDED_NUM_CPUS,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
            _system_config={"worker_maximum_startup_concurrency": EMBEDDED_WORKER_STARTUP_CONCURRENCY},
            **extra,
        )


def ensure_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    metrics_export_port: int | None = None,
    loopback: bool = False,
) -> bool:
    """Connect to Ray (``address``/RAY_ADDRESS; "local" starts one) or start an embedded one
    (serving Prometheus metrics on ``metrics_export_port`` when given, on loopback only with
    ``loopback``: :func:`start_embedded_ray`); True if started here.

    A Ray that runs already keeps exporting wherever it does.
    """
    if ray.is_initialized():
        if metrics_export_port:
            logger.warning("Ray already runs: its metrics stay where it exports them, not on %d", metrics_export_port)
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address and address != "local":
        join_ray(address)
        return False
    start_embedded_ray(num_cpus, metrics_export_port, loopback)
    return True


class ClusterHandle:
    """A running rayqueue cluster as its clients see it: namespace, controller, coordinators, config."""

    def __init__(
        self,
        namespace: str,
        controller: Any,
        config: Config,
        group_coordinator: Any = None,
        transaction_coordinator: Any = None,
    ) -> None:
        self.namespace = namespace
        self.controller = controller
        self.config = config
        self.group_coordinator = group_coordinator
        self.transaction_coordinator = transaction_coordinator

    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        """A fresh metadata snapshot from the controller."""
        return call_controller(self.controller.get_metadata, MetadataRequest(None if topics is None else tuple(topics)))

    def describe(self) -> dict[str, Any]:
        """Cluster id, controller epoch, brokers and counts."""
        return call_controller(self.controller.describe_cluster)


def connect(name: str = "rayqueue", *, address: str | None = None, timeout_s: float = 30.0) -> ClusterHandle:
    """Attach to the rayqueue cluster running in Ray namespace ``name``.

    In a process that runs Ray already, that Ray is searched. Otherwise ``address`` (a Ray
    address, ``host:port``), else RAY_ADDRESS, else the Ray started last on this machine
    (Ray's "auto": ``rayqueue start`` or ``ray start``) is joined. A namespace without a
    cluster is a KafkaTimeoutError naming the Ray that was searched.
    """
    if not ray.is_initialized():
        given = address or os.environ.get("RAY_ADDRESS")
        if given == "local":
            raise InvalidConfigError("connect() joins a running Ray; address='local' would start an empty one")
        try:
            join_ray(given or "auto")
        except ConnectionError as exc:
            if given:
                raise
            raise ConnectionError(
                f"no running Ray found on this machine ({one_line(str(exc))}); start a cluster with"
                " `rayqueue start`, or name its Ray with address= / --address or RAY_ADDRESS"
            ) from None
    controller = launch.wait_for_actor(CONTROLLER_NAME, name, timeout_s)
    if controller is None:
        where = ray.get_runtime_context().gcs_address
        raise KafkaTimeoutError(
            f"no rayqueue cluster in Ray namespace {name!r} of the Ray at {where} (searched for {timeout_s:g} s);"
            " the address `rayqueue start` prints names its Ray: pass it as --address / address=, or set"
            " RAY_ADDRESS to it"
        )
    # The configuration the cluster was launched with, as the controller holds it.
    cfg = BROKER_CONFIG.parse(call_controller(controller.broker_config))
    # None in a cluster launched before groups or transactions existed: their calls will say so.
    coordinator = launch.find_actor(GROUP_COORDINATOR_NAME, name)
    txn_coordinator = launch.find_actor(TRANSACTION_COORDINATOR_NAME, name)
    return ClusterHandle(name, controller, cfg, group_coordinator=coordinator, transaction_coordinator=txn_coordinator)
