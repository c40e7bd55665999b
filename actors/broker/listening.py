"""The brokers' Kafka listeners, seen from a driver: wait until they listen, stop them, read
their figures.

Each broker's listener is served by one of its host actors (``HostPlacement.listener_host``),
which the controller starts with the broker's listeners (``actors.broker.lifecycle``); the
host listens by itself and registers its addresses with the controller. A driver launching
the cluster waits here until every listener answers (:func:`start_listeners`: a listener
that cannot start fails the launch with its reason), and stops them first on shutdown
(:func:`stop_listeners`), before the coordinators stop. Tests and tools read a listener's
figures with :func:`listener_stats`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import ray

from actors import launch
from actors.broker.placement import HostPlacement

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0


def listener_host_name(config: Mapping[str, Any], broker_id: int) -> str:
    """The Ray actor name of the host serving broker ``broker_id``'s listener."""
    return HostPlacement.from_config(dict(config)).listener_host(broker_id).name


def listener_hosts(namespace: str, config: Mapping[str, Any], broker_ids: Iterable[int]) -> dict[int, Any]:
    """The live listener hosts of ``broker_ids`` (those that run), by broker id."""
    out = {}
    for broker_id in broker_ids:
        handle = launch.find_actor(listener_host_name(config, broker_id), namespace)
        if handle is not None:
            out[broker_id] = handle
    return out


def start_listeners(namespace: str, config: Mapping[str, Any], broker_ids: Iterable[int], timeout_s: float) -> None:
    """Wait until the listener of every broker of ``broker_ids`` that has a listener host
    listens and has registered its addresses; the first error of a listener that cannot start
    (a port taken, a key file that cannot be read) is raised."""
    hosts = listener_hosts(namespace, config, broker_ids)
    ray.get([host.start_listener.remote() for host in hosts.values()], timeout=timeout_s)


def stop_listeners(namespace: str, config: Mapping[str, Any], broker_ids: Iterable[int]) -> None:
    """Stop the listeners of ``broker_ids`` (those that run): no client request is served
    after this, while their replicas stay open."""
    hosts = listener_hosts(namespace, config, broker_ids)
    if not hosts:
        return
    try:
        ray.get([host.stop_listener.remote() for host in hosts.values()], timeout=STOP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - their hosts are shut down next all the same
        logger.warning("a listener did not stop cleanly", exc_info=True)


def listener_stats(namespace: str, config: Mapping[str, Any], broker_id: int, timeout_s: float = 30.0) -> dict | None:
    """Broker ``broker_id``'s listener figures (``KafkaListener.stats``); None when its
    listener host does not run."""
    host = launch.find_actor(listener_host_name(config, broker_id), namespace)
    if host is None:
        return None
    return ray.get(host.listener_stats.remote(), timeout=timeout_s)


__all__ = ["listener_host_name", "listener_hosts", "listener_stats", "start_listeners", "stop_listeners"]
