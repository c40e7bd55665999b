"""The brokers of the cluster: their registration, listeners and liveness (Kafka's
``ClusterControlManager``), plus the cluster id and the controller epoch.

A broker is a logical id bound to a Ray node and a data dir. It is running (``alive``) or
stopped by ``stop_broker``; it is usable when it runs and its node is alive. Node liveness
is the shell's to ask Ray; every method here takes the live nodes it needs as an argument.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from actors.controller import records
from actors.controller.records import ControllerResult
from actors.types import BrokerMetadata
from storage.errors import InvalidReplicationFactorError, InvalidRequestError

logger = logging.getLogger(__name__)


class ClusterControlManager:
    """Brokers, the cluster id and the controller epoch, rebuilt by :meth:`replay`."""

    def __init__(self, root: str | Path) -> None:
        self._root = Path(root)
        self.cluster_id = ""
        self.controller_epoch = 0
        self.brokers: dict[int, BrokerMetadata] = {}

    # -- replay ---------------------------------------------------------------------------

    def replay(self, record: dict[str, Any]) -> None:
        """Apply a checked ``cluster``, ``controller_epoch``, ``broker`` or ``listener`` record
        (KeyError: a listener of a broker never registered; nothing changes then)."""
        kind = record["type"]
        if kind == "cluster":
            self.cluster_id = record["cluster_id"]
        elif kind == "controller_epoch":
            self.controller_epoch = record["epoch"]
        elif kind == "broker":
            known = self.brokers.get(record["broker_id"])
            self.brokers[record["broker_id"]] = BrokerMetadata(
                record["broker_id"],
                record["node_id"],
                record["data_dir"],
                record.get("alive", True),
                # A broker stopped or moved keeps its listener until its gateway registers again.
                known.host if known is not None else "",
                known.port if known is not None else -1,
                known.endpoints if known is not None else (),
            )
        elif kind == "listener":
            # Kafka's RegisterBrokerRecord endpoints: where the broker's gateway is reached.
            known = self.brokers[record["broker_id"]]
            endpoints = _endpoints(record.get("endpoints"))
            self.brokers[record["broker_id"]] = replace(
                known, host=record["host"], port=record["port"], endpoints=endpoints
            )
        else:
            raise ValueError(f"not a cluster record: {kind!r:.40}")

    # -- changes --------------------------------------------------------------------------

    def activate(self, new_cluster_id: str) -> ControllerResult[int]:
        """A controller start: the cluster's id if it has none yet, and the next controller
        epoch (the answer)."""
        out: list[dict[str, Any]] = []
        if not self.cluster_id:
            out.append(records.cluster(new_cluster_id))
        epoch = self.controller_epoch + 1
        out.append(records.controller_epoch(epoch))
        return ControllerResult(out, epoch)

    def register_brokers(self, node_ids: list[str], num_brokers: int) -> ControllerResult[None]:
        """Bind brokers 0..num_brokers-1 to ``node_ids`` round-robin, all running; a broker's
        data dir follows its id, so a relaunch on the same data finds it. Listeners of the last
        run are forgotten (a launch starts the gateways anew)."""
        if not node_ids:
            raise InvalidRequestError("no Ray node to bind the brokers to")
        out = []
        for broker_id in range(num_brokers):
            node = node_ids[broker_id % len(node_ids)]
            known = self.brokers.get(broker_id)
            if known is None or known.node_id != node or not known.alive:
                out.append(records.broker(broker_id, node, self.data_dir_of(broker_id), alive=True))
            if known is not None and known.host:
                out.append(records.listener(broker_id, "", -1))
        return ControllerResult(out)

    def set_alive(self, broker_id: int, alive: bool) -> ControllerResult[None]:
        """A broker stopped (``stop_broker``) or started again."""
        broker = self.require(broker_id)
        return ControllerResult([records.broker(broker_id, broker.node_id, broker.data_dir, alive)])

    def add_broker(self, node_id: str, broker_id: int | None, node_alive: bool) -> ControllerResult[int]:
        """Register a new broker on a live Ray node; the answer is its id (the next free one
        unless ``broker_id`` is given)."""
        if not node_alive:
            raise InvalidRequestError(f"Ray node {node_id} is not alive")
        if broker_id is None:
            broker_id = max(self.brokers, default=-1) + 1
        elif type(broker_id) is not int or broker_id < 0:
            raise InvalidRequestError(f"a broker id is a non-negative integer, got {broker_id!r}")
        elif broker_id in self.brokers:
            raise InvalidRequestError(f"broker {broker_id} already exists")
        return ControllerResult([records.broker(broker_id, node_id, self.data_dir_of(broker_id), True)], broker_id)

    def register_listener(
        self, broker_id: int, host: str, port: int, endpoints: tuple[tuple[str, str, str, int], ...] = ()
    ) -> ControllerResult[None]:
        """Where broker ``broker_id``'s gateway is reached: its primary address and every
        listener's (no record when it is known already)."""
        broker = self.require(broker_id)
        endpoints = _endpoints(list(endpoints))
        if (broker.host, broker.port, broker.endpoints) == (host, port, endpoints):
            return ControllerResult()
        return ControllerResult([records.listener(broker_id, host, port, list(endpoints) if endpoints else None)])

    # -- queries --------------------------------------------------------------------------

    def data_dir_of(self, broker_id: int) -> str:
        """The data dir a broker gets: ``<log.dirs>/broker-<id>``."""
        return str(self._root / f"broker-{broker_id}")

    def require(self, broker_id: int) -> BrokerMetadata:
        """The broker, or INVALID_REQUEST for an unknown one."""
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise InvalidRequestError(f"unknown broker {broker_id}")
        return broker

    def usable(self, broker_id: int, alive_nodes: Collection[str]) -> bool:
        """Whether the broker runs and its node is alive (its replicas can run)."""
        broker = self.brokers.get(broker_id)
        return broker is not None and broker.alive and broker.node_id in alive_nodes

    def live_brokers(self, alive_nodes: Collection[str]) -> list[int]:
        """The usable brokers, sorted; INVALID_REPLICATION_FACTOR when there are none (nothing
        can be placed)."""
        live = sorted(b for b in self.brokers if self.usable(b, alive_nodes))
        if not live:
            raise InvalidReplicationFactorError("no live brokers")
        return live


def _endpoints(value: list | None) -> tuple[tuple[str, str, str, int], ...]:
    """A listener record's endpoints, checked (TypeError/ValueError: not what the controller writes)."""
    if value is None:
        return ()
    out = []
    for item in value:
        name, protocol, host, port = item
        if not (isinstance(name, str) and isinstance(protocol, str) and isinstance(host, str)):
            raise TypeError(f"a listener endpoint is (name, protocol, host, port), got {item!r:.80}")
        if type(port) is not int:
            raise TypeError(f"a listener endpoint's port is an int, got {port!r:.40}")
        out.append((name, protocol, host, port))
    return tuple(out)
