"""The controller's metadata records: their fields, the check a replayed one passes, and the
functions that make each kind (KRaft's ``RegisterBrokerRecord``, ``TopicRecord``,
``PartitionRecord``, ``ConfigRecord``, ``RemoveTopicRecord``, ``ProducerIdsRecord``,
``AccessControlEntryRecord``, ``RemoveAccessControlEntryRecord``...).

A record is a JSON object with a ``type``; the metadata log (``actors.metadata_log``) stores
one per v2 record. Every change the managers decide is one of these, appended before it is
applied; a restarted controller replays them in order. A record that does not pass
:func:`check` (an unknown type, a field missing or of the wrong type) raises and is skipped
by the replay, never the end of a start.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from actors import internal_records as stored
from actors.acl import AclBinding

NO_LEADER = -1
T = TypeVar("T")


@dataclass(slots=True)
class ControllerResult(Generic[T]):
    """What a manager decided (Kafka's ControllerResult): the records to append to the
    metadata log, in order, and the answer to give once they are durable."""

    records: list[dict[str, Any]] = field(default_factory=list)
    response: T | None = None


# The fields of each record type as the controller writes them (a type that includes None is
# optional), and the fields that are lists of broker ids.
RECORD_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "cluster": {"cluster_id": (str,)},
    "controller_epoch": {"epoch": (int,)},
    "broker": {"broker_id": (int,), "node_id": (str,), "data_dir": (str,), "alive": (bool, type(None))},
    # endpoints: [[listener name, security protocol, host, port], ...] (absent: only host:port)
    "listener": {"broker_id": (int,), "host": (str,), "port": (int,), "endpoints": (list, type(None))},
    "topic": {"name": (str,), "configs": (dict,), "topic_id": (str, type(None))},
    "topic_id": {"name": (str,), "topic_id": (str,)},
    "topic_config": {"name": (str,), "configs": (dict,)},
    "partition": {
        "topic": (str,),
        "partition": (int,),
        "replicas": (list,),
        "leader": (int,),
        "leader_epoch": (int,),
        "isr": (list,),
        "partition_epoch": (int,),
        "target": (list, type(None)),
    },
    "delete_topic": {"name": (str,)},
    "producer_ids": {"next_producer_id": (int,)},
    # Kafka's UserScramCredentialRecord / RemoveUserScramCredentialRecord: keys are base64.
    "user_scram_credential": {
        "name": (str,),
        "mechanism": (str,),
        "salt": (str,),
        "stored_key": (str,),
        "server_key": (str,),
        "iterations": (int,),
    },
    "remove_user_scram_credential": {"name": (str,), "mechanism": (str,)},
    "acl": {
        "id": (str,),
        "resource_type": (int,),
        "resource_name": (str,),
        "pattern_type": (int,),
        "principal": (str,),
        "host": (str,),
        "operation": (int,),
        "permission_type": (int,),
    },
    "remove_acl": {"id": (str,)},
}
_INT_LISTS = {"partition": ("replicas", "isr", "target")}


def check(record: dict[str, Any]) -> str:
    """The record's type, once its fields are what the controller writes; ValueError or
    TypeError otherwise (see ``actors.internal_records``)."""
    kind = record["type"]
    fields = RECORD_FIELDS.get(kind)
    if fields is None:
        raise ValueError(f"unknown metadata record type {kind!r:.40}")
    for name, types in fields.items():
        stored.field(record, name, types, None if type(None) in types else stored.REQUIRED)
    for name in _INT_LISTS.get(kind, ()):
        if record.get(name) is not None:
            stored.items_of(record[name], int, name)
    return kind


@dataclass(slots=True)
class PartitionRegistration:
    """One partition's replicas, leader and ISR at their epochs (Kafka's PartitionRegistration)."""

    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0
    # The replica list a reassignment moves to; ``replicas`` holds target + old meanwhile.
    target: list[int] | None = None

    def changed(self, **changes: Any) -> PartitionRegistration:
        """A copy with ``changes`` at the next partition epoch (every change bumps it)."""
        values = {
            "replicas": self.replicas,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": self.isr,
            "partition_epoch": self.partition_epoch + 1,
            "target": self.target,
        }
        values.update(changes)
        return PartitionRegistration(**values)


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 from a random UUID, as Kafka's Uuid.toString()."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def new_topic_id() -> str:
    """A topic id (KIP-516) as Kafka's Uuid.randomUuid() makes one: never starting with "-",
    so that it cannot be mistaken for a command-line option."""
    while True:
        topic_id = new_cluster_id()
        if not topic_id.startswith("-"):
            return topic_id


def cluster(cluster_id: str) -> dict[str, Any]:
    """The cluster's id, written once when the metadata log is new."""
    return {"type": "cluster", "cluster_id": cluster_id}


def controller_epoch(epoch: int) -> dict[str, Any]:
    """A controller start: every start takes the next epoch."""
    return {"type": "controller_epoch", "epoch": epoch}


def broker(broker_id: int, node_id: str, data_dir: str, alive: bool) -> dict[str, Any]:
    """A broker bound to a Ray node and a data dir, running or stopped."""
    return {"type": "broker", "broker_id": broker_id, "node_id": node_id, "data_dir": data_dir, "alive": alive}


def listener(
    broker_id: int, host: str, port: int, endpoints: list[tuple[str, str, str, int]] | None = None
) -> dict[str, Any]:
    """Where a broker's gateway is reached (``""`` and -1: none): its primary address and
    every listener's (name, security protocol, host, port)."""
    record: dict[str, Any] = {"type": "listener", "broker_id": broker_id, "host": host, "port": port}
    if endpoints is not None:
        record["endpoints"] = [list(e) for e in endpoints]
    return record


def topic(name: str, configs: dict[str, Any], topic_id: str) -> dict[str, Any]:
    """A new topic with its config overrides and id."""
    return {"type": "topic", "name": name, "configs": configs, "topic_id": topic_id}


def topic_id(name: str, topic_id: str) -> dict[str, Any]:
    """An id for a topic created before topic ids (KIP-516)."""
    return {"type": "topic_id", "name": name, "topic_id": topic_id}


def topic_config(name: str, configs: dict[str, Any]) -> dict[str, Any]:
    """A topic's config overrides, all of them, after a change."""
    return {"type": "topic_config", "name": name, "configs": configs}


def partition(topic: str, partition: int, registration: PartitionRegistration) -> dict[str, Any]:
    """A partition's registration, new or changed (appended as the next partition when new)."""
    return {
        "type": "partition",
        "topic": topic,
        "partition": partition,
        "replicas": list(registration.replicas),
        "leader": registration.leader,
        "leader_epoch": registration.leader_epoch,
        "isr": list(registration.isr),
        "partition_epoch": registration.partition_epoch,
        "target": None if registration.target is None else list(registration.target),
    }


def registration_of(record: dict[str, Any]) -> PartitionRegistration:
    """The registration a checked ``partition`` record carries."""
    return PartitionRegistration(
        record["replicas"],
        record["leader"],
        record["leader_epoch"],
        record["isr"],
        record["partition_epoch"],
        record.get("target"),
    )


def delete_topic(name: str) -> dict[str, Any]:
    """A topic deleted with its partitions."""
    return {"type": "delete_topic", "name": name}


def producer_ids(next_producer_id: int) -> dict[str, Any]:
    """The first producer id not yet handed out."""
    return {"type": "producer_ids", "next_producer_id": next_producer_id}


def user_scram_credential(
    name: str, mechanism: str, salt: str, stored_key: str, server_key: str, iterations: int
) -> dict[str, Any]:
    """A user's SCRAM credential for one mechanism (base64 keys), new or replaced."""
    return {
        "type": "user_scram_credential",
        "name": name,
        "mechanism": mechanism,
        "salt": salt,
        "stored_key": stored_key,
        "server_key": server_key,
        "iterations": iterations,
    }


def remove_user_scram_credential(name: str, mechanism: str) -> dict[str, Any]:
    """A user's SCRAM credential for one mechanism, removed."""
    return {"type": "remove_user_scram_credential", "name": name, "mechanism": mechanism}


def acl(acl_id: str, binding: AclBinding) -> dict[str, Any]:
    """An ACL created, with its id (Kafka's AccessControlEntryRecord)."""
    return {"type": "acl", "id": acl_id, **binding.to_record()}


def remove_acl(acl_id: str) -> dict[str, Any]:
    """An ACL deleted (Kafka's RemoveAccessControlEntryRecord)."""
    return {"type": "remove_acl", "id": acl_id}
