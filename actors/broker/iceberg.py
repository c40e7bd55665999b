"""A host's side of Iceberg topics: its replicas as translation sources and the translation
metrics. The translators themselves (``actors.iceberg``) import no Ray; this hands them what
they need from the host.

:class:`HostIceberg` is what a ReplicaManager holds: its :meth:`tick` (on the host's
background tick) follows the replicas the host holds, takes the catalog settings the
controller handed them (the ``rayqueue.iceberg.*`` broker keys, with the replication
settings) and starts a due translation step; :meth:`record` sets the metrics on the host's
metrics step. The schema registry's lookups (for ``value_schema_id_prefix``) come from the
host's links (``Links.schema_registry``): Ray calls in a Ray actor, none in a test.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from actors.clock import SYSTEM, Clock
from actors.iceberg.translators import Translators
from actors.iceberg_keys import ICEBERG_BROKER_KEYS
from actors.metrics import Recorder
from actors.protocol import FetchResponse, ReplicaRole

logger = logging.getLogger(__name__)


class ReplicaSource:
    """One hosted replica as an Iceberg translator reads it (``PartitionSource``): its
    committed batches (the replica's own read_committed read), whether it leads, and its
    topic's config. It reads the replica's state directly: the two live in one package and
    one process."""

    __slots__ = ("replica", "topic", "partition")

    def __init__(self, replica: Any) -> None:
        self.replica = replica
        self.topic, self.partition = replica.topic, replica.partition

    @property
    def topic_id(self) -> str | None:
        """The topic's id."""
        return self.replica.topic_id

    def leading_epoch(self) -> int | None:
        """The leader epoch while the replica leads and is open, else None."""
        state = self.replica._state
        return state.leader_epoch if state.role == ReplicaRole.LEADER and not state.closed else None

    def topic_config(self) -> Any:
        """The topic's effective config, as the replica runs it."""
        return self.replica._config

    def read_committed(self, offset: int, max_bytes: int) -> FetchResponse:
        """A read_committed consumer's read from ``offset`` (0 bytes: the offsets only)."""
        replica = self.replica
        if max_bytes <= 0:
            log = replica._log
            return FetchResponse(
                b"", replica.high_watermark, replica._lso(), log.log_start_offset, log.log_end_offset,
                replica._state.leader_epoch,
            )  # fmt: skip
        return replica._read(offset, max_bytes, follower=False, committed=True)


class HostIceberg:
    """The Iceberg translation of one host's leader partitions (see the module docstring)."""

    def __init__(self, broker_id: int, recorder: Recorder | None, clock: Clock = SYSTEM, schemas: Any = None) -> None:
        self.translators = Translators(broker_id, clock, schemas)
        self._sources: dict[tuple[str, int], ReplicaSource] = {}
        self._broker = str(broker_id)
        self._recorder = recorder
        self._counted: dict[tuple[str, int], tuple[int, int, int, int]] = {}

    def tick(self, replicas: Iterable[Any], replication: Mapping[str, Any]) -> None:
        """Follow the hosted replicas and start a due translation step (``replication``: the
        host's broker settings from the controller, the catalog's among them)."""
        sources = []
        for replica in replicas:
            key = (replica.topic, replica.partition)
            source = self._sources.get(key)
            if source is None or source.replica is not replica:
                source = self._sources[key] = ReplicaSource(replica)
            sources.append(source)
        live = {(s.topic, s.partition) for s in sources}
        for key in [k for k in self._sources if k not in live]:
            del self._sources[key]
        self.translators.configure({k: v for k, v in replication.items() if k in ICEBERG_BROKER_KEYS})
        self.translators.tick(sources)

    def describe(self, topic: str, partition: int) -> dict[str, Any] | None:
        """The partition's translation stats, if this host translates it."""
        return self.translators.describe(topic, partition)

    def record(self) -> None:
        """Set the lag gauges and add to the counters (the host flushes its recorder after)."""
        rec = self._recorder
        if rec is None or rec.metrics is None:
            return
        m, lags, ages = rec.metrics, [], []
        for (topic, partition), stats in self.translators.stats().items():
            tags = rec.tags(topic=topic, partition=partition, broker=self._broker)
            lags.append((tags, stats.lag_records))
            ages.append((tags, stats.lag_seconds))
            before = self._counted.get((topic, partition), (0, 0, 0, 0))
            now = (stats.translated_records, stats.dlq_records, stats.dropped_records, stats.failed_steps)
            if any(n < b for n, b in zip(now, before, strict=True)):  # a new translator counts from 0
                before = (0, 0, 0, 0)
            topic_tags = (("topic", topic), ("broker", self._broker))
            rec.add(m.iceberg_translated, now[0] - before[0], topic_tags)
            rec.add(m.iceberg_invalid, now[1] - before[1], (*topic_tags, ("action", "dlq_table")))
            rec.add(m.iceberg_invalid, now[2] - before[2], (*topic_tags, ("action", "drop")))
            rec.add(m.iceberg_errors, now[3] - before[3], topic_tags)
            self._counted[(topic, partition)] = now
        rec.set_all(m.iceberg_lag_records, lags)
        rec.set_all(m.iceberg_lag_seconds, ages)

    async def close(self) -> None:
        """Forget the translators; a running step finishes."""
        await self.translators.close()
