"""Which host actor holds a replica: ``rayqueue.broker.placement``.

- ``broker`` (the default): one host per broker, holding all of its replicas, as a Kafka
  broker's process holds its partitions;
- ``hosts``: ``rayqueue.broker.num.hosts`` hosts per broker, a broker's partitions spread over
  them by a stable hash of (topic, partition), the hash Kafka spreads partitions over its
  ``num.replica.fetchers`` with, so that a broker on a big node uses more than one core (one
  Python process is one GIL);
- ``replica``: one host per replica, each a Ray actor owning its partition's segments.

Every host runs the same code (``actors.broker.replica_manager``); only how many there are
differs. One host of each broker also serves the broker's Kafka listener
(:meth:`HostPlacement.listener_host`): the broker's one host, the first of its K, or, with
``replica``, a host of its own holding no replica. A host is named after its broker and its slot (``actors.names.host_actor_name``), so
``ray list actors`` shows the placement.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from actors.names import host_actor_name, java_string_hash

PLACEMENT_KEY = "rayqueue.broker.placement"
NUM_HOSTS_KEY = "rayqueue.broker.num.hosts"


class Placement(enum.StrEnum):
    """The values of ``rayqueue.broker.placement``."""

    BROKER = "broker"
    HOSTS = "hosts"
    REPLICA = "replica"


@dataclass(frozen=True, slots=True, order=True)
class HostId:
    """One host actor: its broker and its slot there ("" for the broker's one host, the
    index for one of K, ``<topic>-<partition>`` for a replica's own)."""

    broker_id: int
    slot: str = ""

    @property
    def name(self) -> str:
        """The host's Ray actor name."""
        return host_actor_name(self.broker_id, self.slot)

    def __str__(self) -> str:
        return f"broker {self.broker_id}" + (f" host {self.slot}" if self.slot else "")


def fetcher_id(topic: str, partition: int, count: int) -> int:
    """Kafka's AbstractFetcherManager.getFetcherId: ``abs(31 * topic.hashCode() + partition) %
    count``, in Java's 32-bit arithmetic, so a partition's slot is stable across restarts."""
    value = (31 * java_string_hash(topic) + partition) & 0xFFFFFFFF
    return (value & 0x7FFFFFFF) % count


@dataclass(frozen=True, slots=True)
class HostPlacement:
    """A cluster's placement setting: ``placement`` and, for ``hosts``, ``num_hosts``."""

    placement: Placement = Placement.BROKER
    num_hosts: int = 1

    @classmethod
    def from_config(cls, config: dict) -> HostPlacement:
        """The setting of a broker configuration (``rayqueue.broker.placement`` and
        ``rayqueue.broker.num.hosts``)."""
        placement = Placement(config.get(PLACEMENT_KEY, Placement.BROKER))
        return cls(placement, int(config.get(NUM_HOSTS_KEY, 1)) if placement is Placement.HOSTS else 1)

    def host_for(self, broker_id: int, topic: str, partition: int) -> HostId:
        """The host that holds broker ``broker_id``'s replica of ``topic``-``partition``."""
        if self.placement is Placement.REPLICA:
            return HostId(broker_id, f"{topic}-{partition}")
        if self.placement is Placement.HOSTS:
            return HostId(broker_id, str(fetcher_id(topic, partition, self.num_hosts)))
        return HostId(broker_id)

    def listener_host(self, broker_id: int) -> HostId:
        """The host that serves broker ``broker_id``'s Kafka listener: its one host (``broker``),
        its first of K (``hosts``), or a host of its own that holds no replica (``replica``:
        ``broker|<id>``, a name no replica's host takes)."""
        if self.placement is Placement.HOSTS:
            return HostId(broker_id, "0")
        return HostId(broker_id)

    def __str__(self) -> str:
        return f"{self.placement}" + (f" ({self.num_hosts} per broker)" if self.placement is Placement.HOSTS else "")
