"""The Iceberg translators of one host: one per partition it leads whose topic has a mode on.

The host's background tick calls :meth:`Translators.tick` with the replicas it holds (each a
``PartitionSource``); a translator is made when a replica leads (again: a new leader epoch
makes a new one, which reads the table's state afresh) and forgotten when it stops leading or
its topic's mode is turned off. One step runs at a time per host, in a worker thread (the
catalog and the Parquet writer block), so translation takes at most one core of the host's and
never holds its event loop; among the partitions due, a new leader's first step (reading the
table's state) goes first, then the one waiting longest.
Nothing here imports Ray: the broker's shell hands in the replicas, the catalog settings (the
controller's broker keys) and the schema registry's lookups.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from actors.clock import SYSTEM, Clock
from actors.iceberg import config as ic
from actors.iceberg.translator import PartitionSource, PartitionTranslator

logger = logging.getLogger(__name__)

Key = tuple[str, int]


class Translators:
    """The translators of one host's leader partitions (see the module docstring)."""

    def __init__(self, broker_id: int, clock: Clock = SYSTEM, schemas: Any = None) -> None:
        self.broker_id = broker_id
        self._clock = clock
        self._schemas = schemas
        self._translators: dict[Key, PartitionTranslator] = {}
        self._settings: ic.IcebergSettings | None = None
        self._catalog: Any = None
        self._running: asyncio.Task | None = None
        self._running_key: Key | None = None

    def configure(self, broker_config: Mapping[str, Any]) -> None:
        """Take the catalog settings from the broker keys the controller handed the replicas
        (``ICEBERG_BROKER_KEYS``); a change makes a new catalog for the steps after it."""
        settings = ic.iceberg_settings(broker_config)
        if settings != self._settings:
            from actors.iceberg.table import IcebergCatalog

            self._settings = settings
            self._catalog = IcebergCatalog(settings)

    def catalog(self) -> Any:
        """The host's catalog (one per host: translators share its connection)."""
        if self._catalog is None:
            self.configure({})
        return self._catalog

    def tick(self, sources: Iterable[PartitionSource]) -> None:
        """Follow the host's leaders and start the most overdue step (if none is running)."""
        sources = list(sources)
        live: dict[Key, PartitionTranslator] = {}
        for source in sources:
            try:
                if source.topic_config().get(ic.MODE, ic.DISABLED) == ic.DISABLED:
                    continue
                epoch = source.leading_epoch()
            except Exception:  # noqa: BLE001 - a replica closing under the tick: not a leader now
                continue
            if epoch is None:
                continue
            key = (source.topic, source.partition)
            translator = self._translators.get(key)
            if translator is None or translator.epoch != epoch or translator.source is not source:
                translator = PartitionTranslator(source, self.catalog, self.broker_id, self._clock, self._schemas)
            live[key] = translator
        self._translators = live
        if self._running is not None and not self._running.done():
            return
        due = []
        for key, translator in live.items():
            try:
                if translator.observe():
                    due.append((not translator.first_step, translator.waiting_since(), key))
            except Exception:  # noqa: BLE001 - one partition's trouble must not stop the others'
                logger.exception("Iceberg %s-%d: cannot read the partition's offsets", *key)
        if not due:
            return
        # A new leader's first step reads the table's state: a short step, and until it runs
        # the partition's lag is not even known. It goes first, or a partition that always has
        # records waiting would keep the host's one step to itself. Then the longest waiting
        # (a step skipping past the log start, with nothing waiting, is short: before those).
        due.sort(key=lambda entry: (entry[0], entry[1] is not None, entry[1] or 0.0))
        key = due[0][2]
        self._running_key = key
        self._running = asyncio.get_running_loop().create_task(live[key].step())
        # The next step (this partition's rest, or another's) starts when this one ends, not
        # at the host's next tick.
        self._running.add_done_callback(lambda task: self._tick_again(task, sources))

    def _tick_again(self, task: asyncio.Task, sources: list[PartitionSource]) -> None:
        # A cancelled step means the loop is going away: start nothing more on it.
        if self._translators and not task.cancelled():
            try:
                self.tick(sources)
            except Exception:  # noqa: BLE001 - the host's next tick tries again
                logger.exception("Iceberg: starting the next step failed")

    def describe(self, topic: str, partition: int) -> dict[str, Any] | None:
        """The translation stats of a partition this host leads and translates (None if none)."""
        translator = self._translators.get((topic, partition))
        return translator.stats.as_dict() if translator is not None else None

    def stats(self) -> dict[Key, Any]:
        """Every translator's stats (the metrics' tick reads them)."""
        return {key: translator.stats for key, translator in self._translators.items()}

    async def close(self) -> None:
        """Forget every translator; a running step finishes (its commit is whole or absent)."""
        self._translators = {}
        running = self._running
        if running is not None and not running.done():
            try:
                await asyncio.wait_for(asyncio.shield(running), 30)
            except Exception:  # noqa: BLE001 - a step cut short leaves orphan files at most
                logger.warning("Iceberg: a translation step did not finish before the close")
