"""One leader partition's translation into its topic's Iceberg table.

A :class:`PartitionTranslator` needs three things of the replica it translates
(:class:`PartitionSource`, a narrow interface the broker's replica implements): its committed
batches from an offset (up to the last stable offset, with the aborted transactions in that
range: what a read_committed consumer gets), whether it still leads and at which epoch, and
the topic's config. It imports no Ray and is driven from outside: the host's translators
(``actors.iceberg.translators``) call :meth:`observe` on every tick and :meth:`step` when it is
due, one step at a time per host.

A step reads (in the event loop: reading the log is quick) up to
``rayqueue.iceberg.translation.max.bytes`` of batches after the table's translated offset,
then in a worker thread leaves out aborted transactions and control batches
(``committed_batches``, as the consumer does), decodes the records into columns
(``storage.records.columns``), builds the table's rows (``actors.iceberg.layout``, or the typed
values of ``actors.iceberg.values``), writes Parquet data files and commits them with the
partition's new offset in the snapshot summary (``actors.iceberg.table.commit``). A step is
due when the oldest untranslated committed record has waited half the topic's
``rayqueue.iceberg.target.lag.ms``, or sooner when about ``translation.max.bytes`` are waiting.

Exactly once, whatever is killed when: the table's summary is the only record of progress.
A translator starts from it (from the log start for a partition never translated); a commit
lands only if the partition's offset in the table is still the one its step started from.
So a leader killed mid-step leaves at most orphan files, and two leaders of one partition
(an old one not yet told) never both add the same records. A record the table cannot take
(``value_schema_id_prefix`` mode) goes to the ``<topic>~dlq`` table, committed first and with
its own offsets, or is counted and dropped (``rayqueue.iceberg.invalid.record.action``); it
never stops the partition.

Snapshot expiry: after a commit, a translator lets go of the snapshots the table's
``history.expire.max-snapshot-age-ms`` and ``history.expire.min-snapshots-to-keep`` allow
(``actors.iceberg.table.expirable_snapshots``), in a commit of its own, when a batch of them
has gathered or a while has passed; every commit's cost grows with the snapshots the table holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from actors.clock import Clock
from actors.iceberg import config as ic
from storage.batch_header import batch_boundaries, read_header
from storage.errors import OffsetOutOfRangeError

logger = logging.getLogger(__name__)

# After a failed step (catalog or storage unreachable, registry down), the next waits this
# long, doubling to the maximum.
RETRY_BACKOFF_S = 1.0
RETRY_BACKOFF_MAX_S = 30.0
# Expired snapshots are removed once this many have gathered, or this long after the last removal.
EXPIRE_BATCH = 100
EXPIRE_INTERVAL_S = 60.0
# A step's first read size; later reads of the same step double it up to the step's budget.
FIRST_READ_BYTES = 1024 * 1024
# Until a translation has measured them, records are taken to be this big on disk.
ASSUMED_RECORD_BYTES = 100


class PartitionSource(Protocol):
    """What a translator needs of the replica it translates (the broker's replica implements it)."""

    topic: str
    partition: int

    @property
    def topic_id(self) -> str | None:
        """The topic's id (a topic made again under its name has another)."""
        ...

    def leading_epoch(self) -> int | None:
        """The leader epoch while this replica leads (and is open), else None."""
        ...

    def topic_config(self) -> Mapping[str, Any]:
        """The topic's effective config (the ``rayqueue.iceberg.*`` keys among them)."""
        ...

    def read_committed(self, offset: int, max_bytes: int) -> Any:
        """Whole batches from the one holding ``offset`` up to the last stable offset, about
        ``max_bytes`` (0: none, only the offsets): a FetchResponse with ``records``,
        ``high_watermark``, ``last_stable_offset``, ``log_start_offset`` and the
        ``aborted_transactions`` overlapping the batches. OffsetOutOfRangeError outside the log."""
        ...


@dataclass(slots=True)
class TranslationStats:
    """A translator's progress and counts (``describe``, the metrics and ``rayqueue status``)."""

    mode: str = ic.DISABLED
    next_offset: int | None = None  # the table's translated offset for this partition (None: not read yet)
    high_watermark: int = 0
    lag_records: int = 0  # offsets between the translated offset and the high watermark
    lag_seconds: float = 0.0  # how long the oldest untranslated committed record has waited
    translated_records: int = 0  # records this translator put in the table
    invalid_records: int = 0  # records the mode could not type (to the dead-letter table or dropped)
    dlq_records: int = 0
    dropped_records: int = 0
    skipped_offsets: int = 0  # offsets gone to retention before they were translated
    commits: int = 0
    expired_snapshots: int = 0  # snapshots this translator removed from the table (history.expire.*)
    conflicts: int = 0  # commits that lost to another leader of this partition and were dropped
    last_commit_wall_ms: int | None = None
    failed_steps: int = 0  # steps that failed (catalog or storage unreachable, ...) and were tried again
    error: str | None = None  # the last failed step's error, until a step succeeds

    def as_dict(self) -> dict[str, Any]:
        """The stats as a plain dict."""
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(slots=True)
class _Chunk:
    """What one step read: batches from ``start`` to ``end`` and their aborted transactions."""

    start: int
    end: int
    parts: list[tuple[bytes, tuple]] = field(default_factory=list)
    size: int = 0
    more: bool = False  # the read stopped at the step's budget with more committed behind it
    read_at: float = 0.0  # when (monotonic) the step read: later records waited at most since then


class PartitionTranslator:
    """The translation of one partition while its replica here leads (see the module docstring).

    ``catalog`` is the host's ``IcebergCatalog`` (made on first use: pyiceberg is imported
    then); ``schemas`` looks registered schemas up by id for ``value_schema_id_prefix``."""

    def __init__(
        self,
        source: PartitionSource,
        catalog: Callable[[], Any],
        broker_id: int,
        clock: Clock,
        schemas: Any = None,
    ) -> None:
        self.source = source
        self.topic, self.partition = source.topic, source.partition
        self._catalog = catalog
        self._broker_id = broker_id
        self._clock = clock
        self._schemas = schemas
        self.epoch: int | None = source.leading_epoch()
        self.stats = TranslationStats()
        self._pending_since: float | None = None  # monotonic time the oldest untranslated record was seen
        self._retry_at = 0.0
        self._failures = 0
        self._expired_at = float("-inf")  # monotonic time of the last snapshot expiry
        self._record_bytes = float(ASSUMED_RECORD_BYTES)
        self._values: Any = None  # the value decoder (value_schema_id_prefix), made on first use
        self._table_state: Any = None  # the table's PartitionState for this partition, as last read or written
        self.stopped = False  # the table holds a newer leader's translation: this one is done

    # -- the loop side: cheap, every tick ---------------------------------------------------

    @property
    def first_step(self) -> bool:
        """Whether the next step is the first, which reads the table's state."""
        return self.stats.next_offset is None

    def waiting_since(self) -> float | None:
        """When (monotonic) the oldest untranslated committed record was seen; None: nothing waits."""
        return self._pending_since

    def config(self) -> Mapping[str, Any]:
        """The topic's current config."""
        return self.source.topic_config()

    def observe(self) -> bool:
        """Look at the partition's offsets; whether a step is due now."""
        conf = self.config()
        self.stats.mode = conf[ic.MODE]
        now = self._clock.monotonic()
        offsets = self.source.read_committed(self.stats.next_offset or 0, 0)
        hw, lso = offsets.high_watermark, offsets.last_stable_offset
        self.stats.high_watermark = hw
        if self.stopped:
            return False
        if self.stats.next_offset is None:
            # Until the table's state is read (the catalog unreachable, ...) how far the table
            # is behind is not known: the lag counts from the log start, an upper bound that
            # grows with what is produced meanwhile.
            self.stats.lag_records = max(0, hw - offsets.log_start_offset)
            if hw > offsets.log_start_offset:
                if self._pending_since is None:
                    self._pending_since = now
                self.stats.lag_seconds = now - self._pending_since
            return now >= self._retry_at  # the first step reads the table's state
        nxt = max(self.stats.next_offset, offsets.log_start_offset)
        self.stats.lag_records = max(0, hw - self.stats.next_offset)
        if lso <= nxt:
            self._pending_since = None
            self.stats.lag_seconds = 0.0
            if nxt > self.stats.next_offset and hw >= nxt:
                return now >= self._retry_at  # the log start passed the translated offset: skip ahead
            return False
        if self._pending_since is None:
            self._pending_since = now
        waited = now - self._pending_since
        self.stats.lag_seconds = waited
        if now < self._retry_at:
            return False
        backlog = (lso - nxt) * self._record_bytes
        settings = self._catalog().settings
        return waited * 1000 >= conf[ic.TARGET_LAG] / 2 or backlog >= settings.flush_bytes

    async def step(self) -> None:
        """One step: read the table's state if not yet read, else translate what is committed
        (at most ``translation.max.bytes``) into one commit. Errors are kept in ``stats.error``
        and retried with a backoff; they never reach the caller."""
        try:
            if self.stats.next_offset is None:
                await asyncio.to_thread(self._load_state)
            else:
                chunk = self._read()
                if chunk is not None:
                    await asyncio.to_thread(self._translate, chunk)
            self._failures = 0
            self.stats.error = None
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        from actors.iceberg.table import StaleTranslationError

        if isinstance(exc, StaleTranslationError):
            self.stopped = True
            self.stats.error = str(exc)
            logger.info("Iceberg %s-%d: %s; this translator stops", self.topic, self.partition, exc)
            return
        self._failures += 1
        self.stats.failed_steps += 1
        delay = min(RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S * 2 ** (self._failures - 1))
        self._retry_at = self._clock.monotonic() + delay
        self.stats.error = f"{type(exc).__name__}: {exc}"[:500]
        logger.warning(
            "Iceberg %s-%d: translation failed (again in %.0f s): %s", self.topic, self.partition, delay, exc,
            exc_info=self._failures == 1,
        )  # fmt: skip

    def _read(self) -> _Chunk | None:
        """Batches after the translated offset up to the LSO, at most the step's budget."""
        budget = self._catalog().settings.flush_bytes
        start = self.stats.next_offset
        assert start is not None
        try:
            first = self.source.read_committed(start, min(FIRST_READ_BYTES, budget))
        except OffsetOutOfRangeError:
            first = None
        if first is None or start < first.log_start_offset:
            # Retention removed offsets before they were translated: go on from the log start.
            offsets = self.source.read_committed(0, 0) if first is None else first
            skipped = offsets.log_start_offset - start
            if skipped > 0:
                logger.warning(
                    "Iceberg %s-%d: offsets %d..%d were deleted before translation", self.topic, self.partition,
                    start, offsets.log_start_offset - 1,
                )  # fmt: skip
                self.stats.skipped_offsets += skipped
                start = offsets.log_start_offset
                first = self.source.read_committed(start, min(FIRST_READ_BYTES, budget))
        chunk = _Chunk(start, start, read_at=self._clock.monotonic())
        response, size = first, min(FIRST_READ_BYTES, budget)
        while response is not None and response.records:
            end = _end_offset(response.records)
            if end <= chunk.end:
                break
            chunk.parts.append((response.records, tuple(response.aborted_transactions)))
            chunk.size += len(response.records)
            chunk.end = end
            if end >= response.last_stable_offset:
                break
            if chunk.size >= budget:
                chunk.more = True
                break
            size = min(size * 2, budget - chunk.size)
            response = self.source.read_committed(end, size)
        if chunk.end == chunk.start and chunk.start == self.stats.next_offset:
            return None
        return chunk

    # -- the thread side: the catalog and the files ------------------------------------------

    def _load_state(self) -> None:
        from actors.iceberg.table import read_state

        conf = self.config()
        table = self._main_table(self._catalog(), conf)
        self._table_state = read_state(table, self._topic_id).get(self.partition)
        if self._table_state is None:
            start = self.source.read_committed(0, 0).log_start_offset
            logger.info("Iceberg %s-%d: translating from the log start, %d", self.topic, self.partition, start)
        else:
            start = self._table_state.next_offset
        self.stats.next_offset = start
        # _pending_since stays: records not in the table have waited since then (``observe``
        # clears it when none has).

    def _main_table(self, catalog: Any, conf: Mapping[str, Any], schema: Any = None) -> Any:
        """The topic's table (made if absent) with columns for ``schema`` (default: the mode's own)."""
        from actors.iceberg import layout

        if schema is None:
            schema = layout.KEY_VALUE_SCHEMA if conf[ic.MODE] == ic.KEY_VALUE else layout.VALUE_MODE_SCHEMA
        return catalog.table(ic.table_name(self.topic), schema, ic.parse_partition_spec(conf[ic.PARTITION_SPEC]))

    @property
    def _topic_id(self) -> str:
        return self.source.topic_id or ""

    def _translate(self, chunk: _Chunk) -> None:
        from actors.iceberg import layout
        from actors.iceberg.table import PartitionState, commit, write_data_files

        conf = self.config()
        mode, epoch = conf[ic.MODE], self.epoch if self.epoch is not None else -1
        columns = _decode(chunk)
        catalog = self._catalog()
        invalid: list[tuple[int, str]] = []
        if mode == ic.KEY_VALUE:
            rows = layout.key_value_table(columns, self.topic, self.partition)
            table = self._main_table(catalog, conf, rows.schema)
        else:
            rows, invalid = self._typed_rows(columns)
            table = self._main_table(catalog, conf, rows.schema)
        if invalid:
            self._dead_letters(catalog, columns, invalid, chunk, conf, epoch)
        files = write_data_files(table, rows)
        result = commit(
            catalog,
            ic.table_name(self.topic),
            files,
            self.partition,
            self._table_state,
            PartitionState(chunk.end, epoch),
            self._topic_id,
            self._broker_id,
        )
        expected, self._table_state = self._table_state, result.state
        if not result.committed:
            self.stats.conflicts += 1
            self.stats.next_offset = None  # read the table's state again before going on
            logger.warning(
                "Iceberg %s-%d: the table's state moved from %s to %s under this step (another leader's commit)",
                self.topic, self.partition, expected, result.state,
            )  # fmt: skip
            return
        self.stats.commits += 1
        self.stats.translated_records += rows.num_rows
        self.stats.last_commit_wall_ms = self._clock.wall_ms()
        self.stats.next_offset = chunk.end
        if len(columns):
            self._record_bytes = max(1.0, chunk.size / len(columns))
        # Records committed after the read have waited at most since it (``observe`` clears
        # this when none has).
        self._pending_since = chunk.read_at
        self._expire(result.table)

    def _expire(self, table: Any) -> None:
        """Remove the snapshots the table's expiry properties let go, when enough have gathered
        (or a while has passed). Best effort: a conflict or error is tried again later."""
        from actors.iceberg.table import expirable_snapshots, expire_snapshots

        if table is None:
            return
        now = self._clock.monotonic()
        try:
            ids = expirable_snapshots(table, self._clock.wall_ms())  # snapshot times are wall clock
            if not ids or (len(ids) < EXPIRE_BATCH and now - self._expired_at < EXPIRE_INTERVAL_S):
                return
            self._expired_at = now
            expire_snapshots(table, ids)
        except Exception as exc:  # noqa: BLE001 - another commit came first: the next expiry reads again
            logger.debug("Iceberg %s-%d: snapshot expiry not done (%s)", self.topic, self.partition, str(exc)[:200])
            return
        self.stats.expired_snapshots += len(ids)

    def _typed_rows(self, columns: Any) -> tuple[Any, list[tuple[int, str]]]:
        """value_schema_id_prefix: the typed rows and the (row, reason) of those that cannot be."""
        from actors.iceberg.values import ValueDecoder

        if self._values is None:
            self._values = ValueDecoder(self._schemas)
        return self._values.rows(columns, self.topic, self.partition, self._evolve)

    def _evolve(self, schema: Any) -> Any:
        """Grow the topic's table to hold ``schema``; its Arrow schema after (ValueError if it cannot)."""
        table = self._main_table(self._catalog(), self.config(), schema)
        return table.schema().as_arrow()

    def _dead_letters(
        self, catalog: Any, columns: Any, invalid: list[tuple[int, str]], chunk: _Chunk, conf: Any, epoch: int
    ) -> None:
        """Records that cannot be typed: to the dead-letter table (its own offsets, committed
        before the main table's) or counted and dropped."""
        import numpy as np

        from actors.iceberg import layout
        from actors.iceberg.table import PartitionState, commit, read_state, write_data_files

        self.stats.invalid_records += len(invalid)
        if conf[ic.INVALID_RECORD_ACTION] == ic.DROP:
            self.stats.dropped_records += len(invalid)
            logger.warning(
                "Iceberg %s-%d: dropped %d records that cannot be typed (first: offset %d, %s)", self.topic,
                self.partition, len(invalid), int(columns.offset[invalid[0][0]]), invalid[0][1],
            )  # fmt: skip
            return
        name = ic.dlq_table_name(self.topic)
        table = catalog.table(name, layout.DLQ_SCHEMA, ic.parse_partition_spec(conf[ic.PARTITION_SPEC]))
        for _ in range(3):
            state = read_state(table, self._topic_id).get(self.partition)
            done = state.next_offset if state is not None else -1
            rows = np.array([r for r, _ in invalid if columns.offset[r] >= done], np.int64)
            if done >= chunk.end or len(rows) == 0:
                return  # an earlier leader's step put these there already
            reasons = [reason for r, reason in invalid if columns.offset[r] >= done]
            bad = layout.dlq_table(layout.take(columns, rows), self.topic, self.partition, reasons)
            files = write_data_files(table, bad)
            result = commit(
                catalog, name, files, self.partition, state, PartitionState(chunk.end, epoch), self._topic_id,
                self._broker_id,
            )  # fmt: skip
            if result.committed:
                self.stats.dlq_records += len(rows)
                return
            table = catalog.load(name)
        raise RuntimeError(f"{name}: the dead-letter commit kept losing to another leader's")


def _decode(chunk: _Chunk) -> Any:
    """The committed records of a chunk as columns: aborted transactions and control batches
    left out (as a read_committed consumer filters them), records before its start too."""
    from storage.records.columns import RecordColumns, decode_columns
    from storage.records.reader import committed_batches

    parts = []
    for records, aborted in chunk.parts:
        kept = committed_batches(records, batch_boundaries(records), aborted)
        if kept:
            parts.append(decode_columns(kept, headers=True, min_offset=chunk.start))
    if len(parts) == 1:
        return parts[0]
    import numpy as np
    import pyarrow as pa

    from storage.records.columns import HEADERS_TYPE

    if not parts:
        empty = np.zeros(0, np.int64)
        return RecordColumns(
            empty, empty, np.zeros(0, np.int32), pa.array([], pa.binary()), pa.array([], pa.binary()),
            pa.array([], HEADERS_TYPE),
        )  # fmt: skip
    return RecordColumns(
        np.concatenate([p.offset for p in parts]),
        np.concatenate([p.timestamp for p in parts]),
        np.concatenate([p.timestamp_type for p in parts]),
        pa.concat_arrays([p.key for p in parts]),
        pa.concat_arrays([p.value for p in parts]),
        pa.concat_arrays([p.headers for p in parts]),
    )


def _end_offset(records: bytes) -> int:
    """The offset after the last whole batch of ``records``."""
    bounds = batch_boundaries(records)
    if not bounds:
        return -1
    return read_header(records, bounds[-1][0]).last_offset + 1
