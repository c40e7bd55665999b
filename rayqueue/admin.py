"""Admin: topics, configs, records and cluster description (Kafka's Admin client)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import ray

from actors.types import OffsetAndTimestamp, TopicMetadata, TopicPartition
from rayqueue.metadata import MetadataCache, call_controller


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create (Kafka's NewTopic)."""

    name: str
    num_partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, Any] | None = None
    replica_assignment: list[list[int]] | None = None


class Admin:
    """Administrative operations on a rayqueue cluster."""

    def __init__(self, cluster: Any = None) -> None:
        from rayqueue.cluster import connect

        self._cluster = cluster if cluster is not None else connect()
        self._controller = self._cluster.controller
        self._metadata = MetadataCache(self._controller)

    def create_topic(
        self,
        name: str,
        num_partitions: int | None = None,
        replication_factor: int | None = None,
        configs: Mapping[str, Any] | None = None,
        replica_assignment: list[list[int]] | None = None,
    ) -> TopicMetadata:
        """Create one topic; defaults come from num.partitions / default.replication.factor."""
        return call_controller(
            self._controller.create_topic, name, num_partitions, replication_factor, dict(configs or {}), replica_assignment
        )

    def create_topics(self, topics: Iterable[NewTopic]) -> list[TopicMetadata]:
        """Create several topics, in order."""
        return [
            self.create_topic(t.name, t.num_partitions, t.replication_factor, t.configs, t.replica_assignment)
            for t in topics
        ]

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data."""
        call_controller(self._controller.delete_topic, name)

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete several topics."""
        for name in names:
            self.delete_topic(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names."""
        return call_controller(self._controller.list_topics, include_internal)

    def describe_topics(self, names: Iterable[str] | None = None) -> dict[str, TopicMetadata]:
        """Partitions, leaders, replicas and ISR of each topic."""
        names = list(names) if names is not None else None
        return call_controller(self._controller.get_metadata, names).topics

    def create_partitions(self, name: str, total: int, assignment: list[list[int]] | None = None) -> TopicMetadata:
        """Grow ``name`` to ``total`` partitions."""
        return call_controller(self._controller.create_partitions, name, total, assignment)

    def describe_configs(self, name: str) -> dict[str, tuple[Any, str]]:
        """Each topic config: (value, source)."""
        return call_controller(self._controller.describe_configs, name)

    def alter_configs(
        self, name: str, set_configs: Mapping[str, Any] | None = None, delete_configs: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """Set or remove topic config overrides; returns the topic's overrides."""
        return call_controller(
            self._controller.alter_configs, name, dict(set_configs or {}), list(delete_configs or [])
        )

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete records before each offset (-1: the high watermark); returns the new log start offsets."""
        refs = {}
        for tp, offset in offsets.items():
            leader = self._metadata.leader(tp)
            refs[tp] = leader.leader_handle.delete_records.remote(offset, leader.leader_epoch)
        return {tp: ray.get(ref) for tp, ref in refs.items()}

    def list_offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets by spec: -2 earliest, -1 latest, or a timestamp in ms."""
        refs = {}
        for tp, spec in specs.items():
            leader = self._metadata.leader(tp)
            refs[tp] = leader.leader_handle.list_offsets.remote(spec, leader.leader_epoch)
        return {tp: ray.get(ref) for tp, ref in refs.items()}

    def describe_cluster(self) -> dict[str, Any]:
        """Cluster id, controller epoch, brokers and counts."""
        return call_controller(self._controller.describe_cluster)
