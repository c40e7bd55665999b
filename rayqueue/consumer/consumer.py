"""The Consumer: Kafka's consumer API over partition leader actors.

Assign mode (``assign``) or group mode (``group.id`` + ``subscribe``). The work is done by
the modules beside this one, as in Kafka's and aiokafka's consumers: ``subscription_state``
(what is read and where each partition stands), ``fetcher`` (fetching ahead and handing out
records: the fetch path, see its docstring) and ``coordinator`` (group membership,
rebalances and commits over the classic protocol) or ``membership`` (the same over KIP-848's
consumer protocol, ``group.protocol=consumer``). This class ties them together behind
Kafka's methods.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain
from typing import Any

from actors.protocol import principal_field
from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from rayqueue.config import CONSUMER_CONFIG
from rayqueue.connection import ClusterHandle, connect
from rayqueue.consumer.coordinator import ConsumerCoordinator
from rayqueue.consumer.fetcher import ConsumerRecord, Fetcher
from rayqueue.consumer.membership import ConsumerMembership
from rayqueue.consumer.subscription_state import ConsumerRebalanceListener, SubscriptionState
from rayqueue.errors import InvalidConfigError, KafkaError
from rayqueue.metadata import MetadataCache, call_controller
from rayqueue.metrics import ClientMetrics
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

# In group mode poll() waits in slices this long, to act on rebalances between them.
_GROUP_WAIT_S = 0.1


class ConsumerRecords:
    """The records of one poll, grouped by partition (Kafka's ConsumerRecords)."""

    def __init__(self, by_partition: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        self._by_partition = by_partition

    def __iter__(self) -> Iterator[ConsumerRecord]:
        for records in self._by_partition.values():
            yield from records

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_partition.values())

    def __bool__(self) -> bool:
        return any(self._by_partition.values())

    def count(self) -> int:
        """Number of records."""
        return len(self)

    def partitions(self) -> set[TopicPartition]:
        """Partitions with records in this poll."""
        return {tp for tp, r in self._by_partition.items() if r}

    def records(self, tp: TopicPartition) -> list[ConsumerRecord]:
        """The records of one partition, in offset order."""
        return self._by_partition.get(tp, [])


class Consumer:
    """A Kafka-style consumer. Create with ``rayqueue.Consumer(cluster, **config)``."""

    def __init__(
        self,
        cluster: ClusterHandle | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        principal: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = CONSUMER_CONFIG.parse(config, **kwargs)
        cfg = self.config
        # ``principal`` (``User:alice``): every request carries it and the actors check it
        # against the cluster's ACLs (Kafka's rules); without one, a super user.
        self._principal = principal = principal_field(principal)
        self._cluster = cluster if cluster is not None else connect()
        self._metadata = MetadataCache(self._cluster.controller, cfg["metadata.max.age.ms"], principal=principal)
        self._subscriptions = SubscriptionState(cfg["auto.offset.reset"])
        self._metrics = ClientMetrics(
            "consumer", cfg, self._cluster.namespace, self._cluster.config.get("rayqueue.metrics.enabled", True)
        )
        self._fetcher = Fetcher(self._subscriptions, self._metadata, cfg, metrics=self._metrics)
        self._fetcher.principal = principal  # fetches (READ on the topic), list offsets (DESCRIBE)
        self._max_poll_records = cfg["max.poll.records"]
        self._closed = False
        self._group: ConsumerCoordinator | ConsumerMembership | None = None
        if cfg["group.id"] is not None:
            # group.protocol: the classic protocol (default), or KIP-848's consumer protocol.
            membership = ConsumerMembership if cfg["group.protocol"] == "consumer" else ConsumerCoordinator
            self._group = membership(self._subscriptions, self._cluster.group_coordinator, cfg, principal)
        elif cfg["group.instance.id"] is not None:
            raise InvalidConfigError("group.instance.id needs group.id")

    # -- group membership -----------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern | None = None,
        listener: ConsumerRebalanceListener | None = None,
        *,
        pattern: str | re.Pattern | None = None,
    ) -> None:
        """Join the consumer group for these topics (or all topics matching a regex).

        ``topics`` is a list of names, a compiled regex, or a string: a name, or a regex
        when it starts with ``^`` (librdkafka's convention). ``pattern=`` is a regex too.
        Partitions arrive with the poll that completes the rebalance.
        """
        if self._group is None:
            raise InvalidConfigError("subscribe() needs group.id; use assign() without a group")
        names: list[str] = []
        if isinstance(topics, re.Pattern):
            pattern = topics
        elif isinstance(topics, str):
            if topics.startswith("^"):
                pattern = topics
            else:
                names = [topics]
        elif topics is not None:
            names = list(topics)
        if isinstance(pattern, re.Pattern):
            pattern = pattern.pattern
        if pattern is not None:
            re.compile(pattern)  # fail here, not in the coordinator
        if not names and pattern is None:
            self.unsubscribe()
            return
        self._group.subscribe(names, pattern, listener)

    def subscription(self) -> set[str]:
        """The subscribed topic names (a regex subscription shows what it matched)."""
        return self._subscriptions.subscription()

    def unsubscribe(self) -> None:
        """Give up every partition and leave the group."""
        self._fetcher.reclaim_all()  # exact positions for the commit on revocation
        if self._group is not None:
            self._group.unsubscribe()
        self._subscriptions.unsubscribe()
        self._fetcher.drop_unassigned()

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit offsets (by default the position of every assigned partition) and wait.

        Raises IllegalGenerationError / UnknownMemberIdError when this member was fenced out
        of the group (its partitions went to another member), RebalanceInProgressError while
        the group completes a rebalance.
        """
        self._require_group().commit_sync(self._commit_offsets(offsets))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None] | None = None,
    ) -> None:
        """Commit without waiting; ``callback(offsets, error)`` runs in a later poll()/commit()/close()."""
        self._require_group().commit_async(self._commit_offsets(offsets), callback)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's last committed offset of each partition (None if it has none)."""
        return self._require_group().committed(partitions)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Group id, generation, member id and instance id (what transactions need)."""
        return self._require_group().group_metadata()

    def _require_group(self) -> ConsumerCoordinator | ConsumerMembership:
        if self._group is None:
            raise InvalidConfigError("this consumer has no group.id")
        return self._group

    def _commit_offsets(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            positions = self._fetcher.positions(self._subscriptions.assignment)
            return {tp: OffsetAndMetadata(p) for tp, p in positions.items()}
        return {
            tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om)) for tp, om in offsets.items()
        }

    # -- assignment -----------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing any previous assignment)."""
        wanted = [TopicPartition(*tp) if not isinstance(tp, TopicPartition) else tp for tp in partitions]
        if not self._subscriptions.subscribed:  # a subscribed consumer is refused below, whatever it asks for
            for tp in wanted:
                if not 0 <= tp.partition < self._metadata.num_partitions(tp.topic):
                    raise KafkaError(f"unknown partition {tp}")
        self._subscriptions.assign_from_user(wanted)
        self._fetcher.drop_unassigned()

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer."""
        return self._subscriptions.assigned_partitions()

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        """All partitions of ``topic``."""
        return [TopicPartition(topic, p) for p in range(self._metadata.num_partitions(topic))]

    def topics(self, pattern: str | None = None) -> list[str]:
        """Topic names on the cluster (optionally matching a regex)."""
        names = call_controller(self._cluster.controller.list_topics, False, self._principal)
        return [n for n in names if pattern is None or re.fullmatch(pattern, n)]

    # -- polling --------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> ConsumerRecords:
        """Records fetched since the last poll, waiting up to ``timeout_ms`` for some."""
        limit = max_records or self._max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        group, fetcher = self._group, self._fetcher
        fetcher.reclaim_all()  # a loop over the consumer that was left must not lose what it did not take
        last_pass = False
        while True:
            if group is not None:
                group.poll()
            fetcher.reset_positions()
            batch = fetcher.drain(limit)
            fetcher.send_fetches()
            if batch:
                return ConsumerRecords(batch)
            fetcher.raise_partition_error()
            if last_pass:
                return ConsumerRecords({})
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # Out of time: still take the answers that are in already (poll(0) too).
                last_pass, remaining = True, 0.0
            if group is None:
                fetcher.wait_for_fetches(remaining)
            elif not self._subscriptions.assignment:
                group.wait(min(remaining, _GROUP_WAIT_S))
            else:
                # Short slices, so that a rebalance the heartbeat thread flags is acted on soon.
                fetcher.wait_for_fetches(min(remaining, _GROUP_WAIT_S))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Iterate records forever (break out of the loop to stop).

        ``position()`` and ``commit()`` during the loop see exactly the records handed out
        so far; ``seek``, ``pause`` and a revocation take effect at the next record.
        """
        self._fetcher.reclaim_all()
        # chain() takes each fetch's lazy records in C: no generator step per record.
        return chain.from_iterable(self._iter_chunks())

    def _iter_chunks(self) -> Iterator[Iterator[ConsumerRecord]]:
        """The record iterators of fetched chunks, in turn, fetching and waiting as needed."""
        fetcher = self._fetcher
        while not self._closed:
            if self._group is not None:
                self._group.poll()
            fetcher.reset_positions()
            fetcher.send_fetches()  # before handing records out: the broker works meanwhile
            handed = False
            for records in fetcher.iter_fetched():
                handed = True
                yield records
            if not handed:
                fetcher.raise_partition_error()
                fetcher.wait_for_fetches(1.0 if self._group is None else _GROUP_WAIT_S)

    # -- positions ------------------------------------------------------------------------

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record poll() will return for ``tp``."""
        if not self._subscriptions.has_position(tp):
            self._fetcher.reset_positions([tp])
        return self._fetcher.position(tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make the next poll() start at ``offset`` for ``tp``."""
        if offset < 0:
            raise InvalidConfigError(f"seek offset must be >= 0, got {offset}")
        self._subscriptions.seek(tp, offset)
        self._fetcher.discard_fetched(tp)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Seek to the log start offset of each partition (all assigned by default)."""
        for tp, offset in self.beginning_offsets(partitions or list(self._subscriptions.assignment)).items():
            self.seek(tp, offset)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Seek to the high watermark of each partition (all assigned by default)."""
        for tp, offset in self.end_offsets(partitions or list(self._subscriptions.assignment)).items():
            self.seek(tp, offset)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        found = self._fetcher.list_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions})
        return {tp: r.offset for tp, r in found.items()}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last readable record of each partition: the high watermark,
        or with read_committed the last stable offset."""
        found = self._fetcher.list_offsets({tp: LATEST_TIMESTAMP for tp in partitions})
        return {tp: r.offset for tp, r in found.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is >= the given one, per partition (None if none)."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise InvalidConfigError(f"timestamp for {tp} must be >= 0, got {ts}")
        found = self._fetcher.list_offsets(dict(timestamps))
        return {tp: (r if r.offset >= 0 else None) for tp, r in found.items()}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching and returning records of these partitions."""
        for tp in partitions:
            self._subscriptions.pause(tp)
            self._fetcher.reclaim(tp)  # an iteration under way stops handing this partition out

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Resume paused partitions."""
        for tp in partitions:
            self._subscriptions.resume(tp)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return self._subscriptions.paused_partitions()

    def close(self) -> None:
        """Stop fetching; pending fetches are dropped. In a group: commit (auto-commit), run
        the listener's revocation and leave the group at once (dynamic members)."""
        if self._closed:
            return
        try:
            if self._group is not None:
                self._fetcher.reclaim_all()  # exact positions for the commit on revocation
                self._group.close()
        finally:
            self._closed = True
            self._subscriptions.unsubscribe()
            self._fetcher.close()
            self._metrics.close()

    def metrics(self) -> dict[str, float]:
        """Kafka's ``consumer-fetch-manager-metrics`` of this consumer, by name
        (``records-consumed-total``, ``fetch-latency-avg``, ``records-lag-max``, ...:
        ``rayqueue.metrics.CONSUMER_METRICS``). Counted per fetch answer as it is decoded
        for the application (fetched ahead of ``poll``)."""
        return self._metrics.snapshot()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Consumer", "ConsumerRecord", "ConsumerRecords"]
