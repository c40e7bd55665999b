"""The controller's state and its metadata log, without Ray (Kafka's ``QuorumController``
with its single-voter log).

The managers decide (:mod:`.cluster_control`, :mod:`.replication_control`,
:mod:`.configuration_control`, :mod:`.producer_id_control`, :mod:`.scram_control`, :mod:`.acl_control`): each change is a list of
records (a :class:`ControllerResult`). :meth:`QuorumController.commit` appends them to the
metadata log, fsynced, and only then replays them into the managers, so what the controller
acts on is always what a restarted controller rebuilds. A start replays the log; a record
that cannot be read or applied is skipped, logged and counted, as Kafka's loaders skip
theirs: one bad record must not keep the cluster down.

The actor shell (:mod:`.actor`) has the replicas' host actors run, tells the replicas
their roles and serves the requests; it calls in here for every decision.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from actors import internal_records as stored
from actors.config import broker_config
from actors.controller import records
from actors.controller.acl_control import AclControlManager
from actors.controller.cluster_control import ClusterControlManager
from actors.controller.configuration_control import ConfigurationControlManager
from actors.controller.producer_id_control import ProducerIdControlManager
from actors.controller.records import ControllerResult, PartitionRegistration
from actors.controller.replication_control import (
    PartitionChange,
    Replica,
    ReplicationControlManager,
    classify_change,
)
from actors.controller.scram_control import ScramControlManager
from actors.metadata_log import MetadataLog
from actors.names import INTERNAL_TOPICS, METADATA_TOPIC
from actors.types import ClusterMetadata
from storage.errors import InvalidTopicError

logger = logging.getLogger(__name__)

T = TypeVar("T")
# Told of every partition change before it applies: (topic, partition, what it changes).
PartitionListener = Callable[[str, int, PartitionChange], None]

_REPLICATION = frozenset({"topic", "topic_id", "partition", "delete_topic"})
_CONFIGURATION = frozenset({"topic", "topic_config", "delete_topic"})
_CLUSTER = frozenset({"cluster", "controller_epoch", "broker", "listener"})
_SCRAM = frozenset({"user_scram_credential", "remove_user_scram_credential"})
_ACL = frozenset({"acl", "remove_acl"})


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """What a replica is opened with: its broker's node and data dir, the topic's
    effective config and id."""

    node_id: str
    data_dir: str
    config: dict[str, Any]
    topic_id: str


class QuorumController:
    """Cluster metadata: the managers, rebuilt from the metadata log under ``log.dirs``."""

    def __init__(
        self,
        config: Mapping[str, Any],
        rng: random.Random | None = None,
        on_partition_change: PartitionListener | None = None,
    ) -> None:
        self.config = broker_config(config)
        self.root = Path(self.config["log.dirs"])
        self.cluster = ClusterControlManager(self.root)
        self.configuration = ConfigurationControlManager(self.config)
        self.replication = ReplicationControlManager(self.config, self.cluster, self.configuration, rng)
        self.producer_ids = ProducerIdControlManager()
        self.scram = ScramControlManager()
        self.acls = AclControlManager()
        self.on_partition_change = on_partition_change
        self._log = MetadataLog(self.root / f"{METADATA_TOPIC}-0")
        self.skipped = stored.SkippedRecords(METADATA_TOPIC)
        for offset, record in self._log.entries(self.skipped):
            try:
                self.replay(record)
            except stored.READ_ERRORS as exc:
                self.skipped.skip(0, offset, exc)
        self.commit(self.cluster.activate(records.new_cluster_id()))
        self.commit(self.replication.assign_missing_topic_ids())
        logger.info(
            "controller epoch %d for cluster %s (%d topics)",
            self.cluster.controller_epoch,
            self.cluster.cluster_id,
            len(self.replication.topics),
        )

    def replay(self, record: dict[str, Any]) -> None:
        """Apply one metadata record to the managers it concerns. One that is not what the
        controller writes (an unknown type, a field missing or of the wrong type, a topic or
        broker it does not know) raises ValueError/TypeError/KeyError and changes nothing."""
        kind = records.check(record)
        if kind in _CLUSTER:
            self.cluster.replay(record)
        elif kind == "producer_ids":
            self.producer_ids.replay(record)
        elif kind in _SCRAM:
            self.scram.replay(record)
        elif kind in _ACL:
            self.acls.replay(record)
        else:
            # Replication first: it refuses a record about an unknown topic before the
            # configuration manager changes anything.
            if kind in _REPLICATION:
                self.replication.replay(record)
            if kind in _CONFIGURATION:
                self.configuration.replay(record)

    def commit(self, result: ControllerResult[T]) -> T | None:
        """Append the result's records durably (one batch, one fsync), then apply them;
        returns its answer."""
        if result.records:
            self._log.append_all(result.records)
        for record in result.records:
            if record["type"] == "partition" and self.on_partition_change is not None:
                self.on_partition_change(record["topic"], record["partition"], self._change_of(record))
            self.replay(record)
        return result.response

    def _change_of(self, record: dict[str, Any]) -> PartitionChange:
        topic = self.replication.topics.get(record["topic"])
        old = None
        if topic is not None and record["partition"] < len(topic.partitions):
            old = topic.partitions[record["partition"]]
        return classify_change(old, records.registration_of(record))

    def close(self) -> None:
        """Close the metadata log cleanly."""
        self._log.close()

    # -- views ----------------------------------------------------------------------------

    def partition(self, topic: str, p: int) -> PartitionRegistration:
        """A partition's registration (KeyError/IndexError for an unknown one)."""
        return self.replication.topics[topic].partitions[p]

    def replica_spec(self, topic: str, p: int, broker_id: int) -> ReplicaSpec | None:
        """How to open one replica in its host; None when its broker is stopped."""
        broker = self.cluster.brokers[broker_id]
        if not broker.alive:
            return None
        info = self.replication.topics[topic]
        return ReplicaSpec(broker.node_id, broker.data_dir, self.configuration.effective(topic), info.topic_id)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, sorted."""
        return sorted(t for t in self.replication.topics if include_internal or t not in INTERNAL_TOPICS)

    def metadata(self, names: list[str] | None, handles: Mapping[Replica, Any]) -> ClusterMetadata:
        """Brokers and the named topics (None: all) as Metadata answers them; an unknown
        topic is left out, a name that is no string is INVALID_TOPIC_EXCEPTION."""
        names = list(self.replication.topics) if names is None else list(names)
        for name in names:
            if not isinstance(name, str):
                raise InvalidTopicError(f"a topic name is a string, got {type(name).__name__}")
        return ClusterMetadata(
            self.cluster.cluster_id,
            self.cluster.controller_epoch,
            tuple(self.cluster.brokers.values()),
            {n: self.replication.topic_metadata(n, handles) for n in names if n in self.replication.topics},
        )

    def describe(self) -> dict[str, Any]:
        """Cluster id, controller epoch, brokers and counts."""
        topics = self.replication.topics
        return {
            "cluster_id": self.cluster.cluster_id,
            "controller_epoch": self.cluster.controller_epoch,
            "brokers": list(self.cluster.brokers.values()),
            "topics": len(topics),
            "partitions": sum(len(t.partitions) for t in topics.values()),
            "data_root": str(self.root),
            "metadata_records_skipped": self.skipped.count,
        }
