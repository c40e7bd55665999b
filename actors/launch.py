"""The one module that launches rayqueue's Ray actors and finds them again.

Every actor is named in the cluster's namespace, detached (it outlives the driver that
launched it), takes no CPU (``num_cpus=0``: a 2-core machine hosts dozens) and serves many
calls at once. What differs by role is written here once:

- the cluster actors (controller, group and transaction coordinators) are restarted by Ray
  for ever (each rebuilds its state from its log) and placed on the launching node when
  it can be (soft affinity);
- a host (an actor holding some or all of one broker's partition replicas, as
  ``rayqueue.broker.placement`` says, and, for one host per broker, serving the broker's
  Kafka listener) is never restarted by Ray (the controller starts it again and reopens its
  replicas, as followers, once it has moved leadership away) and runs on its broker's node
  only (hard affinity: its disk is there, and its listener's address).

Lookups, kills and the live nodes go through here as well. The actor classes are passed in
(this module imports none of them), so every actor module may use it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.clock import SYSTEM

logger = logging.getLogger(__name__)

# Concurrent calls an actor serves: long-poll fetches and acks=all produces wait inside it.
MAX_CONCURRENCY = 1000
# A host serves them for every partition it holds.
BROKER_MAX_CONCURRENCY = 20000


@dataclass(frozen=True, slots=True)
class Role:
    """How actors of one kind run: Ray restarts (-1: for ever), whether their node is a
    preference (soft) or a must (hard), and the calls they serve at once."""

    max_restarts: int
    soft_placement: bool
    max_concurrency: int = MAX_CONCURRENCY


CLUSTER_ACTOR = Role(max_restarts=-1, soft_placement=True)
BROKER = Role(max_restarts=0, soft_placement=False, max_concurrency=BROKER_MAX_CONCURRENCY)


def actor_options(role: Role, name: str, namespace: str, node_id: str) -> dict[str, Any]:
    """The Ray options of an actor of ``role`` named ``name`` on node ``node_id``."""
    return {
        "name": name,
        "namespace": namespace,
        "lifetime": "detached",
        "num_cpus": 0,
        "max_concurrency": role.max_concurrency,
        "max_restarts": role.max_restarts,
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=role.soft_placement),
    }


def launch(cls: type, role: Role, name: str, namespace: str, node_id: str, *args: Any) -> Any:
    """Create an actor of class ``cls``, constructed with ``args``; returns its handle.
    ValueError when the name is taken (a dead actor's name is released asynchronously)."""
    return ray.remote(cls).options(**actor_options(role, name, namespace, node_id)).remote(*args)


def get_actor(name: str, namespace: str) -> Any:
    """The handle of the actor ``name``; ValueError when there is none (as Ray's)."""
    return ray.get_actor(name, namespace=namespace)


def find_actor(name: str, namespace: str) -> Any | None:
    """The handle of the actor ``name``, or None when there is none."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def named_actors(namespace: str, prefix: str) -> dict[str, Any]:
    """The handles of the live actors of ``namespace`` whose name starts with ``prefix``, by name."""
    out = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == namespace and entry["name"].startswith(prefix):
            handle = find_actor(entry["name"], namespace)
            if handle is not None:
                out[entry["name"]] = handle
    return out


def wait_for_actor(name: str, namespace: str, timeout_s: float) -> Any | None:
    """The handle of the actor ``name`` once it is registered, or None after ``timeout_s``."""
    deadline = SYSTEM.monotonic() + timeout_s
    while True:
        handle = find_actor(name, namespace)
        if handle is not None or SYSTEM.monotonic() > deadline:
            return handle
        time.sleep(0.2)


def wait_name_free(name: str, namespace: str, timeout_s: float = 10.0) -> bool:
    """Wait until no actor holds ``name`` (a killed one releases it asynchronously); False
    if one still does after ``timeout_s``."""
    deadline = SYSTEM.monotonic() + timeout_s
    while find_actor(name, namespace) is not None:
        if SYSTEM.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def kill(handle: Any) -> None:
    """Kill an actor for good (Ray does not restart it)."""
    ray.kill(handle, no_restart=True)


def alive_nodes() -> set[str]:
    """The ids (hex) of the Ray nodes that are alive."""
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def node_addresses(alive_only: bool = True) -> dict[str, str]:
    """Node id -> the node's IP address (its raylet's), for the live nodes or all of them."""
    return {n["NodeID"]: n.get("NodeManagerAddress", "") for n in ray.nodes() if n.get("Alive") or not alive_only}


@functools.cache
def _task(fn: Callable[..., Any]) -> Any:
    # One remote function per plain function: Ray exports each remote function once.
    return ray.remote(num_cpus=0, max_retries=0)(fn)


def run_on_node(fn: Callable[..., Any], node_id: str, *args: Any) -> Any:
    """Run ``fn(*args)`` as a Ray task on node ``node_id`` (where a broker's disk is); returns
    the task's ObjectRef. Not retried: the caller decides what a failure means."""
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return _task(fn).options(scheduling_strategy=strategy).remote(*args)
