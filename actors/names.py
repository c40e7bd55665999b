"""Every name the cluster's parts find each other by, in one light module (no Ray import).

Actor names (unique within the cluster's Ray namespace), the internal topics, and the
functions that map a key to an internal topic's partition. Clients, the listeners, the CLI
and the actors import these from here rather than from the heavy modules that define the
actors.
"""

from __future__ import annotations

# -- actors --------------------------------------------------------------------------------

CONTROLLER_NAME = "controller"
GROUP_COORDINATOR_NAME = "group_coordinator"
TRANSACTION_COORDINATOR_NAME = "transaction_coordinator"
SCHEMA_REGISTRY_NAME = "schema_registry"


def broker_actor_name(broker_id: int) -> str:
    """The Ray actor name of a broker's one host (the actor holding all of its replicas, the
    default placement)."""
    return f"broker|{broker_id}"


def host_actor_name(broker_id: int, slot: str = "") -> str:
    """The Ray actor name of one of a broker's hosts: ``broker|<id>`` for its only one,
    ``broker|<id>|host|<k>`` for one of K, ``broker|<id>|replica|<topic>-<partition>`` for a
    replica's own (``actors.broker.placement``)."""
    if not slot:
        return broker_actor_name(broker_id)
    kind = "host" if slot.isdigit() else "replica"
    return f"broker|{broker_id}|{kind}|{slot}"


def host_broker_id(name: str) -> int | None:
    """The broker a host actor's name (``host_actor_name``) belongs to; None for another name."""
    kind, _, rest = name.partition("|")
    broker = rest.partition("|")[0]
    return int(broker) if kind == "broker" and broker.isdigit() else None


# -- internal topics -----------------------------------------------------------------------

# Written only by the coordinators (Kafka's Topic.INTERNAL_TOPICS): a client's produce to one
# is refused with INVALID_TOPIC_EXCEPTION, whatever path it comes by.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
# The controller's metadata log, as skipped-record logs and metrics name it (KRaft's topic).
METADATA_TOPIC = "__cluster_metadata"


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``Utils.abs(hash) % n``."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions


def transaction_partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (Kafka's
    ``TransactionStateManager.partitionFor``: the same hash as the groups')."""
    return offsets_partition_for(transactional_id, num_partitions)
