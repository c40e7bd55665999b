"""The client's metadata cache: partition leaders (actor handles) and their epochs.

Producers and consumers talk to partition leaders directly; the controller is asked only
when the cache is missing a topic, is older than ``metadata.max.age.ms``, or a leader
answers NotLeaderOrFollower / FencedLeaderEpoch / UnknownTopicOrPartition or has died.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray

from actors.protocol import MetadataRequest
from actors.types import PartitionMetadata, TopicMetadata, TopicPartition
from rayqueue.errors import (
    KafkaError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NetworkError,
    UnknownTopicOrPartitionError,
    as_kafka_error,
)


def call_controller(method: Any, *args: Any, timeout_s: float = 60.0) -> Any:
    """Call a controller actor method and wait, riding through a controller restart.

    The controller is restartable: while Ray brings it back (its node died, or it was
    killed) calls fail with RayActorError; they are retried until ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(method.remote(*args))
        except ray.exceptions.RayActorError as exc:
            if time.monotonic() > deadline:
                raise NetworkError(f"controller unavailable for {timeout_s}s: {exc}") from None
            time.sleep(0.2)
        except ray.exceptions.RayTaskError as exc:
            # The controller's own Kafka error (TopicAlreadyExistsError ...), not Ray's wrapper,
            # whose message carries the actor's traceback in terminal colours.
            error = as_kafka_error(exc)
            if isinstance(error, KafkaError):
                raise error from None
            raise


class MetadataCache:
    """Thread-safe cache of topic metadata fetched from the controller."""

    def __init__(
        self, controller: Any, max_age_ms: int = 300000, auto_create: bool = False, principal: str | None = None
    ) -> None:
        self._controller = controller
        # The client's principal: the controller answers only the topics it may DESCRIBE
        # and auto-creates only those it may CREATE (None: a super user).
        self._principal = principal
        self._max_age = max_age_ms / 1000
        self._auto_create = auto_create
        self._topics: dict[str, TopicMetadata] = {}
        self._fetched_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self.cluster_id = ""

    def topic(self, topic: str) -> TopicMetadata:
        """Metadata of ``topic``, refreshed when stale; UnknownTopicOrPartitionError if absent."""
        meta = self._topics.get(topic)
        if meta is None or time.monotonic() - self._fetched_at[topic] > self._max_age:
            self.refresh([topic])
            meta = self._topics.get(topic)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        return meta

    def num_partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has."""
        return len(self.topic(topic).partitions)

    def leader(self, tp: TopicPartition) -> PartitionMetadata:
        """The partition's metadata with a live leader handle, or a retriable error."""
        partitions = self.topic(tp.topic).partitions
        if not 0 <= tp.partition < len(partitions):
            raise UnknownTopicOrPartitionError(f"unknown partition {tp}")
        meta = partitions[tp.partition]
        if meta.leader_handle is None:
            raise LeaderNotAvailableError(f"{tp} has no leader right now")
        return meta

    def refresh(self, topics: list[str] | None = None) -> None:
        """Ask the controller for fresh metadata of ``topics`` (all cached ones by default)."""
        names = list(topics if topics is not None else self._topics)
        snapshot = call_controller(
            self._controller.get_metadata, MetadataRequest(tuple(names), self._auto_create, self._principal)
        )
        now = time.monotonic()
        with self._lock:
            self.cluster_id = snapshot.cluster_id
            for name in names:
                if name in snapshot.topics:
                    self._topics[name] = snapshot.topics[name]
                    self._fetched_at[name] = now
                else:
                    self._topics.pop(name, None)

    def call_leaders(
        self,
        make_calls: Mapping[TopicPartition, Callable[[PartitionMetadata], Any]],
        timeout_s: float,
        backoff_s: float = 0.1,
    ) -> dict[TopicPartition, Any]:
        """Call each partition's leader at once (``make(meta)`` returns the call's ObjectRef)
        and return the answers.

        A retriable error (the leader moved, was fenced, died, or none is elected yet)
        refreshes the metadata and repeats every call until ``timeout_s``; any other error
        is raised as it is (Kafka's clients do the same for ListOffsets and DeleteRecords).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                refs = {tp: make(self.leader(tp)) for tp, make in make_calls.items()}
                return {tp: ray.get(ref, timeout=max(0.0, deadline - time.monotonic())) for tp, ref in refs.items()}
            except ray.exceptions.GetTimeoutError:
                raise KafkaTimeoutError(
                    f"no answer from the leaders of {sorted(make_calls)} within {timeout_s}s"
                ) from None
            except Exception as exc:  # noqa: BLE001 - sorted into retriable and not below
                error = as_kafka_error(exc)
                if not (isinstance(error, KafkaError) and error.retriable) or time.monotonic() > deadline:
                    raise error from None
            for topic in {tp.topic for tp in make_calls}:
                self.invalidate(topic)
            time.sleep(backoff_s)

    def invalidate(self, topic: str) -> None:
        """Forget ``topic`` so that the next lookup asks the controller."""
        with self._lock:
            self._topics.pop(topic, None)
