"""What a partition replica records (``actors.metrics``): per request and per append, summed
in its host's recorder until the host's tick; the log's gauges on the tick. Never per record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.clock import SYSTEM, Clock
from actors.metrics import PATH_ACTOR, Recorder, error_name
from storage.cleaner import dirty_ratio
from storage.log import Log


class ReplicaMetrics:
    """What a replica records (``actors.metrics``) into its host's recorder (None: metrics
    are off): per request and per append, summed until the host's tick; the log's gauges on
    the tick. Never per record."""

    def __init__(
        self, topic: str, partition: int, broker_id: int, recorder: Recorder | None, clock: Clock = SYSTEM
    ) -> None:
        self.enabled = recorder is not None
        self._clock = clock
        self._broker = str(broker_id)
        self._last_clean = clock.monotonic()
        # The host's recorder, shared by its replicas: it flushes their counters once per tick.
        self.recorder = recorder
        if recorder is None:
            return
        self._rec = rec = recorder
        self._m = rec.metrics
        topic, partition, broker = topic, str(partition), self._broker
        self._topic_tags = (("topic", topic), ("broker", broker))
        self._replica_tags = rec.tags(topic=topic, partition=partition, broker=broker)
        self._partition_tags = rec.tags(topic=topic, partition=partition)
        self._clean_tags = (("topic", topic), ("broker", broker))
        self._request_tags: dict[tuple[str, str], dict[str, str]] = {}
        self._broker_tags = rec.tags(broker=broker)

    def _request(self, request: str, acks: Any) -> dict[str, str]:
        # Tags only ever take Kafka's acks values: a hostile request must not mint series.
        acks = str(acks) if acks in (-1, 0, 1) and type(acks) is int else ("" if acks is None else "invalid")
        key = (request, acks)
        tags = self._request_tags.get(key)
        if tags is None:
            tags = self._request_tags[key] = self._rec.tags(
                broker=self._broker, path=PATH_ACTOR, request=request, acks=acks
            )
        return tags

    def appended(self, info: Any, size: int) -> None:
        """A client's batches were appended (not a duplicate): records and bytes in."""
        if self.enabled:
            rec, m = self._rec, self._m
            rec.add(m.messages_in, info.last_offset - info.first_offset + 1, self._topic_tags)
            rec.add(m.bytes_in, size, self._topic_tags)

    def request_done(self, request: str, acks: Any, started: float) -> None:
        """A produce or fetch answered; ``started`` is its start on the clock's ``monotonic``."""
        rec, m = self._rec, self._m
        rec.add(m.produce_requests if request == "Produce" else m.fetch_requests, 1, self._topic_tags)
        rec.observe_ms(m.request_time, started, self._request(request, acks), self._clock.monotonic())

    def produce_failed(self, acks: Any, exc: BaseException, started: float | None = None) -> None:
        """A produce failed (``started`` None: refused before it started)."""
        if self.enabled:
            self._failed("Produce", acks, exc, started)

    def _failed(self, request: str, acks: Any, exc: BaseException, started: float | None) -> None:
        rec, m = self._rec, self._m
        failed = m.failed_produce if request == "Produce" else m.failed_fetch
        rec.add(failed, 1, self._topic_tags)
        tags = self._request(request, acks)
        rec.add(m.request_errors, 1, (*tags.items(), ("error", error_name(exc))))
        if started is not None:
            rec.observe_ms(m.request_time, started, tags, self._clock.monotonic())

    def fetched(self, follower: bool, size: int, started: float) -> None:
        """A fetch answered ``size`` bytes, to a follower or a consumer."""
        rec, m = self._rec, self._m
        if follower:
            rec.add(m.replication_bytes_out, size, self._topic_tags)
            rec.observe_ms(m.request_time, started, self._request("FetchFollower", None), self._clock.monotonic())
        else:
            rec.add(m.bytes_out, size, self._topic_tags)
            rec.add(m.fetch_requests, 1, self._topic_tags)
            rec.observe_ms(m.request_time, started, self._request("FetchConsumer", None), self._clock.monotonic())

    def fetch_failed(self, follower: bool, exc: BaseException, started: float) -> None:
        """A fetch failed."""
        self._failed("FetchFollower" if follower else "FetchConsumer", None, exc, started)

    def cleaned(self, stats: Any) -> None:
        """A cleaner pass finished with ``stats`` (storage.cleaner's CleanerStats)."""
        self._last_clean = self._clock.monotonic()
        if self.enabled:
            self._rec.add(self._m.cleaner_bytes_read, stats.bytes_read, self._clean_tags)
            self._rec.add(self._m.cleaner_bytes_written, stats.bytes_written, self._clean_tags)

    def tick(self, log: Log, leader_hw: int | None, compacted: bool, lso: Callable[[], int]) -> None:
        """The log's gauges (and the flushes since the last tick); the host flushes the
        counters. ``leader_hw``: the high watermark when this replica leads, else None."""
        if not self.enabled:
            return
        m, tags = self._m, self._replica_tags
        if log.closed:
            return
        m.log_size.set(log.size_in_bytes, tags)
        m.log_segments.set(len(log.segments), tags)
        m.log_start_offset.set(log.log_start_offset, tags)
        m.log_end_offset.set(log.log_end_offset, tags)
        if leader_hw is not None:
            m.high_watermark.set(leader_hw, self._partition_tags)
        flushes = log.flush_times_ms
        while flushes:
            m.flush_time.observe(flushes.popleft(), self._broker_tags)
        if compacted:
            m.cleaner_dirty_ratio.set(dirty_ratio(log, lso()), tags)
            m.cleaner_time_since_last_run.set((self._clock.monotonic() - self._last_clean) * 1000.0, tags)
