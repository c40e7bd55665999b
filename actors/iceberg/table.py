"""The catalog side of the translation (pyiceberg): tables made and evolved, data files written,
and the optimistic commit that keeps every partition's records in the table exactly once.

Each table's newest snapshot written by rayqueue carries, in its summary, every partition's
translated state: ``rayqueue.next-offset.<p>`` (the offset after the last record translated)
and ``rayqueue.leader-epoch.<p>`` (the epoch of the leader that translated it), with the
topic's id (``rayqueue.topic-id``: a topic deleted and made again under its name starts over)
and the commit's own id (``rayqueue.commit-id``). A commit carries the others' state forward
and changes its partition's, so the newest such snapshot (snapshots of others, a Spark
compaction's, are walked past) says where every partition's translation stands.

A commit is optimistic (Iceberg's): written against the table's current snapshot, it fails
if another commit came first (the SQL catalog swaps the metadata location only if it is still
the one read; a REST catalog server checks the commit's requirement that the table's current
snapshot is still the one read, and answers 409 if not). On that conflict it reads the table again and tries again, provided its
partition's state is still the one its translation started from; if it moved (another
leader of the partition committed meanwhile), its files are deleted and the translator starts
again from the table's state. pyiceberg's own retry is turned off for these tables
(``commit.retry.num-retries=0``): it would rebuild the snapshot with a summary read before
the conflict and set back the other partitions' state.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from actors.iceberg.config import REST, IcebergSettings, PartitionTerm
from storage.errors import InvalidConfigError

logger = logging.getLogger(__name__)

TOPIC_ID = "rayqueue.topic-id"
NEXT_OFFSET = "rayqueue.next-offset."
LEADER_EPOCH = "rayqueue.leader-epoch."
COMMIT_ID = "rayqueue.commit-id"
TRANSLATED_BY = "rayqueue.translated-by"
# Table properties of the tables rayqueue makes: no retry inside pyiceberg (see above).
TABLE_PROPERTIES = {"commit.retry.num-retries": "0"}
# Iceberg's snapshot expiry properties (read by rayqueue's translators, and by Spark's
# expire_snapshots procedure). The defaults are Iceberg's; rayqueue makes its tables with a max
# age of an hour: every commit costs time in proportion to the snapshots the table holds
# (pyiceberg copies the table's metadata), and a translated topic commits often.
MAX_SNAPSHOT_AGE = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
ICEBERG_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
CREATED_MAX_SNAPSHOT_AGE_MS = 3600 * 1000
CREATE_PROPERTIES = {**TABLE_PROPERTIES, MAX_SNAPSHOT_AGE: str(CREATED_MAX_SNAPSHOT_AGE_MS)}

# How often one commit tries against concurrent ones before its translation is tried again later.
MAX_COMMIT_ATTEMPTS = 20
BACKOFF_S = 0.02
BACKOFF_MAX_S = 1.0


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Where a partition's translation stands in a table: the offset after the last record
    translated, and the epoch of the leader that committed it."""

    next_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit did: committed, or not (its files deleted) because the partition's state
    in the table is no longer the one it started from; ``state`` is the table's state now."""

    committed: bool
    state: PartitionState | None
    table: Any = None  # the table as the commit left it (when it committed)


class StaleTranslationError(Exception):
    """The table holds a newer leader epoch for the partition than this translator's."""


def _retriable(exc: BaseException) -> bool:
    """Whether a catalog error is a conflict to read again and retry: a lost optimistic
    commit, or SQLite busy with another process's write."""
    from pyiceberg.exceptions import CommitFailedException
    from sqlalchemy.exc import OperationalError

    return isinstance(exc, (CommitFailedException, OperationalError))


class IcebergCatalog:
    """The catalog an Iceberg topic's tables live in (pyiceberg's SQL catalog, or its REST
    catalog client; made on first use and kept), with the namespace of ``settings``. Used from
    one thread at a time."""

    def __init__(self, settings: IcebergSettings) -> None:
        self.settings = settings
        self._catalog: Any = None
        self._lock = threading.Lock()

    @property
    def catalog(self) -> Any:
        """The pyiceberg catalog (a SQL catalog's tables made if absent)."""
        with self._lock:
            if self._catalog is None:
                self._catalog = _retrying(lambda: open_catalog(self.settings), "open the catalog")
            return self._catalog

    def identifier(self, name: str) -> tuple[str, str]:
        """The table identifier of ``name`` in the settings' namespace."""
        return (self.settings.namespace, name)

    def load(self, name: str) -> Any | None:
        """The table, or None when there is none."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return _retrying(lambda: self.catalog.load_table(self.identifier(name)), f"load {name}")
        except NoSuchTableError:
            return None

    def table(self, name: str, schema: pa.Schema, terms: Sequence[PartitionTerm]) -> Any:
        """The table ``name``, made with ``schema`` and partitioned by ``terms`` if it does not
        exist; its columns grown to hold ``schema``'s (``evolve``)."""
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

        table = self.load(name)
        if table is None:
            catalog = self.catalog
            try:
                _retrying(lambda: catalog.create_namespace(self.settings.namespace), "create the namespace")
            except NamespaceAlreadyExistsError:
                pass
            from pyiceberg.schema import assign_fresh_schema_ids

            iceberg_schema = assign_fresh_schema_ids(catalog._convert_schema_if_needed(schema))
            spec = partition_spec(iceberg_schema, terms)
            try:
                table = _retrying(
                    lambda: catalog.create_table(
                        self.identifier(name), iceberg_schema, partition_spec=spec, properties=CREATE_PROPERTIES
                    ),
                    f"create {name}",
                )
                logger.info("Iceberg table %s.%s created (%s)", self.settings.namespace, name, spec)
            except TableAlreadyExistsError:  # another leader made it meanwhile
                table = self.load(name)
                if table is None:
                    raise
        if table.properties.get("commit.retry.num-retries") != "0":
            table = _retrying(lambda: _set_properties(self.load(name)), f"set {name}'s properties")
        return evolve(table, schema)


def open_catalog(settings: IcebergSettings) -> Any:
    """pyiceberg's catalog for ``settings``: its SQL catalog, or its REST client
    (``actors.iceberg.rest``: bounded requests, errors that name the catalog)."""
    if settings.catalog_type == REST:
        from actors.iceberg.rest import open_rest_catalog

        return open_rest_catalog(settings)
    from pyiceberg.catalog.sql import SqlCatalog

    if settings.catalog_uri.startswith("sqlite:///"):
        import os
        import sqlite3

        path = settings.catalog_uri[len("sqlite://") :]
        # SQLite makes the database file, not its directory. In WAL mode (kept in the file) a
        # reader of the catalog never holds up a broker's commit, nor a commit a reader.
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            db.execute("PRAGMA journal_mode=WAL")
    if settings.warehouse.startswith("file://"):
        import os
        from urllib.parse import urlparse

        os.makedirs(urlparse(settings.warehouse).path, exist_ok=True)
    return SqlCatalog(settings.catalog_name, **settings.catalog_properties())


def _set_properties(table: Any) -> Any:
    with table.transaction() as txn:
        txn.set_properties(TABLE_PROPERTIES)
    return table


def _retrying(fn: Any, what: str, attempts: int = MAX_COMMIT_ATTEMPTS) -> Any:
    """``fn()`` again after a conflict (``_retriable``), with a growing random backoff."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if not _retriable(exc) or attempt == attempts - 1:
                raise
            _backoff(attempt)
            logger.debug("Iceberg: %s conflicted (%s); again", what, exc)
    raise AssertionError("unreachable")


def _backoff(attempt: int) -> None:
    # A backoff between optimistic attempts (not a wait on a condition): jitter spreads brokers apart.
    time.sleep(random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_S * 2**attempt)))


def partition_spec(schema: Any, terms: Sequence[PartitionTerm]) -> Any:
    """The Iceberg partition spec of ``terms`` over ``schema`` (InvalidConfigError for a
    column it lacks or a transform its type does not take)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        VoidTransform,
        YearTransform,
    )

    makers = {
        "identity": lambda w: IdentityTransform(),
        "year": lambda w: YearTransform(),
        "month": lambda w: MonthTransform(),
        "day": lambda w: DayTransform(),
        "hour": lambda w: HourTransform(),
        "bucket": lambda w: BucketTransform(num_buckets=w),
        "truncate": lambda w: TruncateTransform(width=w),
        "void": lambda w: VoidTransform(),
    }
    fields = []
    for i, term in enumerate(terms):
        try:
            source = schema.find_field(term.column)
        except ValueError:
            raise InvalidConfigError(f"partition spec: the table has no column {term.column!r}") from None
        transform = makers[term.transform](term.width)
        if not transform.can_transform(source.field_type):
            raise InvalidConfigError(
                f"partition spec: {term.transform} does not apply to {term.column} ({source.field_type})"
            )
        suffix = term.transform if term.width is None else f"{term.transform}_{term.width}"
        name = term.column.replace(".", "_") + ("" if term.transform == "identity" else f"_{suffix}")
        fields.append(PartitionField(source_id=source.field_id, field_id=1000 + i, transform=transform, name=name))
    return PartitionSpec(*fields)


def evolve(table: Any, schema: pa.Schema) -> Any:
    """``table`` with its columns grown to hold ``schema``'s (Iceberg's union by name: new
    columns added as optional, ints widened to longs, floats to doubles); ValueError (or
    pyiceberg's ValidationError) for a change Iceberg does not allow, such as a string column
    becoming an int. Concurrent evolutions retry; the union is the same whoever comes first."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    for attempt in range(MAX_COMMIT_ATTEMPTS):
        try:
            _check_pyarrow_schema_compatible(table.schema(), schema, format_version=table.metadata.format_version)
            return table
        except ValueError:
            pass
        try:
            with table.update_schema() as update:
                update.union_by_name(schema)
            return table
        except Exception as exc:
            if not _retriable(exc) or attempt == MAX_COMMIT_ATTEMPTS - 1:
                raise
            _backoff(attempt)
            table = table.refresh()
    raise AssertionError("unreachable")


def read_state(table: Any, topic_id: str) -> dict[int, PartitionState]:
    """Every partition's translated state in ``table`` (the newest snapshot rayqueue wrote);
    empty when it has none, or it was written for another topic of the same name."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if TOPIC_ID in props:
            if props[TOPIC_ID] != topic_id:
                return {}
            return _parse_state(props)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return {}


def _parse_state(props: Mapping[str, str]) -> dict[int, PartitionState]:
    state: dict[int, PartitionState] = {}
    for key, value in props.items():
        if not key.startswith(NEXT_OFFSET):
            continue
        try:
            partition = int(key[len(NEXT_OFFSET) :])
            epoch = int(props.get(f"{LEADER_EPOCH}{partition}", "-1"))
            state[partition] = PartitionState(int(value), epoch)
        except ValueError:  # not ours after all: a key someone else wrote
            logger.warning("Iceberg: snapshot summary key %s=%r ignored", key, value)
    return state


def _summary(state: Mapping[int, PartitionState], topic_id: str, commit_id: str, broker_id: int) -> dict[str, str]:
    out = {TOPIC_ID: topic_id, COMMIT_ID: commit_id, TRANSLATED_BY: str(broker_id)}
    for partition, s in sorted(state.items()):
        out[f"{NEXT_OFFSET}{partition}"] = str(s.next_offset)
        out[f"{LEADER_EPOCH}{partition}"] = str(s.leader_epoch)
    return out


def write_data_files(table: Any, rows: pa.Table) -> list[Any]:
    """Parquet data files of ``rows`` in the table's location (split by its partition spec),
    not yet part of the table."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    if rows.num_rows == 0:
        return []
    return list(_dataframe_to_data_files(table_metadata=table.metadata, write_uuid=uuid.uuid4(), df=rows, io=table.io))


def delete_files(table: Any, files: Sequence[Any]) -> None:
    """Delete data files no commit took (best effort: an orphan file harms no reader)."""
    for data_file in files:
        try:
            table.io.delete(data_file.file_path)
        except Exception:  # noqa: BLE001 - an orphan is left; Iceberg's orphan-file cleanup finds it
            logger.warning("Iceberg: could not delete %s", data_file.file_path, exc_info=True)


def commit(
    catalog: IcebergCatalog,
    name: str,
    files: Sequence[Any],
    partition: int,
    expected: PartitionState | None,
    new_state: PartitionState,
    topic_id: str,
    broker_id: int,
) -> CommitResult:
    """Append ``files`` to table ``name`` and set ``partition``'s state to ``new_state`` in one
    snapshot, provided the table's state for the partition is still ``expected`` (see the
    module docstring). StaleTranslationError when the table holds a newer leader epoch for it."""
    commit_id = uuid.uuid4().hex
    table = catalog.load(name)
    if table is None:
        raise RuntimeError(f"Iceberg table {name} disappeared")
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        state = read_state(table, topic_id)
        current = state.get(partition)
        if attempt and _landed(table, commit_id, current, new_state):
            return CommitResult(True, new_state, table)  # an earlier attempt landed after all
        if current is not None and current.leader_epoch > new_state.leader_epoch:
            delete_files(table, files)
            raise StaleTranslationError(
                f"{name}: partition {partition} was translated at leader epoch {current.leader_epoch}, "
                f"this leader's is {new_state.leader_epoch}"
            )
        if current != expected:
            delete_files(table, files)
            return CommitResult(False, current)
        state[partition] = new_state
        txn = table.transaction()
        summary = _summary(state, topic_id, commit_id, broker_id)
        with txn.update_snapshot(snapshot_properties=summary).fast_append() as app:
            for data_file in files:
                app.append_data_file(data_file)
        try:
            txn.commit_transaction()
            return CommitResult(True, new_state, table)
        except Exception as exc:
            from pyiceberg.exceptions import CommitFailedException

            # CommitFailedException: the catalog refused the swap, nothing landed. Any other
            # error (SQLite busy at COMMIT, a lost answer) leaves the outcome unknown: the next
            # attempt looks for this commit's id before anything else.
            if not _retriable(exc) and not isinstance(exc, CommitFailedException):
                table = catalog.load(name)
                if table is not None and _landed(
                    table, commit_id, read_state(table, topic_id).get(partition), new_state
                ):
                    return CommitResult(True, new_state, table)
                raise
            if attempt == MAX_COMMIT_ATTEMPTS - 1:
                raise
            _backoff(attempt)
            table = catalog.load(name)
            if table is None:
                raise RuntimeError(f"Iceberg table {name} disappeared") from None
    raise AssertionError("unreachable")


def _landed(table: Any, commit_id: str, current: PartitionState | None, new_state: PartitionState) -> bool:
    """Whether a commit whose outcome was not known landed: the partition's state in the table
    is the one it set (no other translator sets the same offset at the same leader epoch), or
    its snapshot is among the newest (it may since have been expired, or carried forward)."""
    return current == new_state or _has_commit(table, commit_id)


def _has_commit(table: Any, commit_id: str, depth: int = 100) -> bool:
    """Whether one of the table's newest ``depth`` snapshots is commit ``commit_id``."""
    snapshot = table.current_snapshot()
    while snapshot is not None and depth > 0:
        if snapshot.summary is not None and snapshot.summary.additional_properties.get(COMMIT_ID) == commit_id:
            return True
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
        depth -= 1
    return False


def expirable_snapshots(table: Any, now_ms: int) -> list[int]:
    """The ids of the snapshots the table's ``history.expire.*`` properties let go at wall time
    ``now_ms`` (Iceberg's rules): older than the max age, yet not among the newest
    ``min-snapshots-to-keep`` of the current branch, not a branch's or tag's head, and never the
    newest snapshot rayqueue wrote (its summary holds the translated offsets). None when a
    property is not a number."""
    metadata, props = table.metadata, table.properties
    try:
        max_age = int(props.get(MAX_SNAPSHOT_AGE, ICEBERG_MAX_SNAPSHOT_AGE_MS))
        keep = max(1, int(props.get(MIN_SNAPSHOTS_TO_KEEP, 1)))
    except ValueError:
        return []
    cutoff = now_ms - max_age
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    snapshot, kept, ours = table.current_snapshot(), 0, False
    while snapshot is not None and (kept < keep or not ours):
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if kept < keep or (not ours and TOPIC_ID in summary):
            protected.add(snapshot.snapshot_id)
        kept += 1
        ours = ours or TOPIC_ID in summary
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return [s.snapshot_id for s in metadata.snapshots if s.timestamp_ms < cutoff and s.snapshot_id not in protected]


def expire_snapshots(table: Any, snapshot_ids: Sequence[int]) -> None:
    """Remove ``snapshot_ids`` from the table's metadata in one commit. A translated table only
    grows, so their data files are all still the current snapshot's; their manifests are left
    for an engine's orphan-file cleanup. A concurrent commit makes this fail (CommitFailedException):
    the next try reads the table again."""
    table.maintenance.expire_snapshots().by_ids(list(snapshot_ids)).commit()
