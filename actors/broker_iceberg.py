"""A broker's side of Iceberg topics: its replicas as translation sources, the schema
registry's lookups, and the translation metrics. The translators themselves
(``actors.iceberg``) import no Ray; this module hands them what they need from the broker.

:class:`BrokerIceberg` is what the broker holds: its :meth:`tick` (every TICK_S on the
broker's loop) follows the replicas it hosts, takes the catalog settings the controller handed
them (the ``rayqueue.iceberg.*`` broker keys, with the replication settings) and records the
metrics once a second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import ray

from actors import launch
from actors.clock import SYSTEM, Clock
from actors.iceberg.config import ICEBERG_BROKER_KEYS
from actors.iceberg.translators import Translators
from actors.iceberg.values import SchemaNotFoundError
from actors.metrics import TICK_S, Recorder
from actors.names import SCHEMA_REGISTRY_NAME
from actors.protocol import FetchResponse, ReplicaRole

logger = logging.getLogger(__name__)

# How often the broker looks at its leaders' translation.
ICEBERG_TICK_S = 0.2
REGISTRY_TIMEOUT_S = 10.0
_NOT_FOUND = (40401, 40402, 40403)


class ReplicaSource:
    """One hosted replica as an Iceberg translator reads it (``PartitionSource``): its
    committed batches, whether it leads, and its topic's config."""

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


class RegistrySchemas:
    """The schema registry's schemas by id, for ``value_schema_id_prefix`` (called from the
    translation's worker thread; the registry actor answers as its REST API does)."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def _registry(self) -> Any:
        handle = launch.find_actor(SCHEMA_REGISTRY_NAME, self._namespace)
        if handle is None:
            raise RuntimeError("the cluster's schema registry is not running")
        return handle

    def _call(self, ref: Any) -> dict[str, Any]:
        from actors.schema_registry.errors import RegistryError

        try:
            return ray.get(ref, timeout=REGISTRY_TIMEOUT_S)
        except RegistryError as exc:
            if exc.error_code in _NOT_FOUND:
                raise SchemaNotFoundError(str(exc)) from None
            raise

    def schema(self, schema_id: int) -> dict[str, Any]:
        """``GET /schemas/ids/{id}``."""
        return self._call(self._registry().schema.remote(schema_id))

    def version(self, subject: Any, version: Any) -> dict[str, Any]:
        """``GET /subjects/{subject}/versions/{version}`` (a reference's schema)."""
        return self._call(self._registry().get_version.remote(subject, version))


class BrokerIceberg:
    """The Iceberg translation of one broker's leader partitions (see the module docstring)."""

    def __init__(self, broker_id: int, namespace: str, metrics_enabled: bool, clock: Clock = SYSTEM) -> None:
        self._clock = clock
        self.translators = Translators(broker_id, clock, RegistrySchemas(namespace))
        self._sources: dict[tuple[str, int], ReplicaSource] = {}
        self._broker = str(broker_id)
        self._recorder = Recorder(namespace, True) if metrics_enabled else None
        self._counted: dict[tuple[str, int], tuple[int, int, int]] = {}
        self._last_metrics = clock.monotonic()
        self._task: asyncio.Task | None = None

    def start(self, replicas: Any) -> None:
        """Tick every ICEBERG_TICK_S over ``replicas()`` (the hosted replicas, read each time)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(replicas))

    async def _run(self, replicas: Any) -> None:
        while True:
            await asyncio.sleep(ICEBERG_TICK_S)
            try:
                self.tick(replicas())
            except Exception:  # the translation's trouble must never stop the broker
                logger.exception("Iceberg tick failed")

    def tick(self, replicas: Iterable[Any]) -> None:
        """Follow the hosted replicas and start a due translation step."""
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
        for source in sources:
            if source.leading_epoch() is not None:
                replication = source.replica.replication
                self.translators.configure({k: v for k, v in replication.items() if k in ICEBERG_BROKER_KEYS})
                break
        self.translators.tick(sources)
        if self._recorder is not None and self._clock.monotonic() - self._last_metrics >= TICK_S:
            self._last_metrics = self._clock.monotonic()
            self._record()

    def describe(self, topic: str, partition: int) -> dict[str, Any] | None:
        """The partition's translation stats, if this broker translates it."""
        return self.translators.describe(topic, partition)

    def _record(self) -> None:
        rec = self._recorder
        assert rec is not None and rec.metrics is not None
        m, lags, ages = rec.metrics, [], []
        for (topic, partition), stats in self.translators.stats().items():
            tags = rec.tags(topic=topic, partition=partition, broker=self._broker)
            lags.append((tags, stats.lag_records))
            ages.append((tags, stats.lag_seconds))
            before = self._counted.get((topic, partition), (0, 0, 0))
            now = (stats.translated_records, stats.dlq_records, stats.dropped_records)
            if any(n < b for n, b in zip(now, before, strict=True)):  # a new translator counts from 0
                before = (0, 0, 0)
            topic_tags = (("topic", topic), ("broker", self._broker))
            rec.add(m.iceberg_translated, now[0] - before[0], topic_tags)
            rec.add(m.iceberg_invalid, now[1] - before[1], (*topic_tags, ("action", "dlq_table")))
            rec.add(m.iceberg_invalid, now[2] - before[2], (*topic_tags, ("action", "drop")))
            self._counted[(topic, partition)] = now
        rec.set_all(m.iceberg_lag_records, lags)
        rec.set_all(m.iceberg_lag_seconds, ages)
        rec.flush()

    async def close(self) -> None:
        """Stop ticking; a running step finishes."""
        if self._task is not None:
            self._task.cancel()
        await self.translators.close()
