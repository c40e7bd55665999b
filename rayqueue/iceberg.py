"""Iceberg topics from the reader's side: a topic's table through pyiceberg, Arrow, DuckDB and
Ray Data, without the brokers; and how far each partition's translation has come.

A topic whose ``rayqueue.iceberg.mode`` is ``key_value`` or ``value_schema_id_prefix`` is also
an Apache Iceberg table, which each partition's leader fills with its committed records
(``actors.iceberg``). The table lives in the cluster's catalog (pyiceberg's SQL catalog, by
default SQLite under ``<log.dirs>/iceberg/``), named after the topic (``.`` as ``_``) in the
``rayqueue`` namespace; records that could not be typed are in ``<table>~dlq``.

    import rayqueue, rayqueue.iceberg as rqi
    cluster = rayqueue.connect()
    rqi.to_arrow("orders", cluster)                  # pyiceberg -> Arrow
    rqi.read("orders", cluster).count()              # Ray Data's read_iceberg
    rqi.duckdb("orders", cluster=cluster).fetchall() # DuckDB over the table's Parquet files

Spark reads it through Iceberg's own Spark runtime: ``rayqueue.spark.read_table``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from actors.iceberg.config import IcebergSettings, dlq_table_name, iceberg_settings, table_name
from actors.types import TopicPartition
from rayqueue.connection import ClusterHandle, connect
from storage.errors import KafkaTimeoutError, UnknownTopicOrPartitionError

MODE_KEY = "rayqueue.iceberg.mode"


def _cluster(cluster: ClusterHandle | None) -> ClusterHandle:
    return cluster if cluster is not None else connect()


def settings(cluster: ClusterHandle | None = None) -> IcebergSettings:
    """Where the cluster keeps its Iceberg topics' tables (its ``rayqueue.iceberg.*`` keys)."""
    return iceberg_settings(_cluster(cluster).config)


def catalog_kwargs(cluster: ClusterHandle | None = None) -> dict[str, str]:
    """pyiceberg's catalog properties with the catalog's ``name``: what
    ``pyiceberg.catalog.load_catalog(**kw)`` and ``ray.data.read_iceberg(catalog_kwargs=kw)`` take."""
    s = settings(cluster)
    return {"name": s.catalog_name, **s.catalog_properties()}


def catalog(cluster: ClusterHandle | None = None) -> Any:
    """The cluster's Iceberg catalog (pyiceberg)."""
    from actors.iceberg.table import open_catalog

    return open_catalog(settings(cluster))


def table_identifier(topic: str, cluster: ClusterHandle | None = None) -> str:
    """``namespace.table`` of a topic's table, e.g. ``rayqueue.orders``."""
    return f"{settings(cluster).namespace}.{table_name(topic)}"


def _load(name: str, cluster: ClusterHandle | None) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    s = settings(cluster)
    try:
        return catalog(cluster).load_table((s.namespace, name))
    except NoSuchTableError:
        raise UnknownTopicOrPartitionError(
            f"no Iceberg table {s.namespace}.{name}: the topic is not an Iceberg topic, or nothing is translated yet"
        ) from None


def table(topic: str, cluster: ClusterHandle | None = None) -> Any:
    """The topic's table (a pyiceberg ``Table``); UnknownTopicOrPartitionError if there is none yet."""
    return _load(table_name(topic), cluster)


def dead_letter_table(topic: str, cluster: ClusterHandle | None = None) -> Any:
    """The topic's dead-letter table (``<table>~dlq``: records its mode could not type)."""
    return _load(dlq_table_name(topic), cluster)


def to_arrow(topic: str, cluster: ClusterHandle | None = None, **scan: Any) -> Any:
    """The topic's table as an Arrow table (``scan`` goes to pyiceberg's ``Table.scan``:
    ``row_filter``, ``selected_fields``, ``snapshot_id``, ...)."""
    return table(topic, cluster).scan(**scan).to_arrow()


def read(topic: str, cluster: ClusterHandle | None = None, **options: Any) -> Any:
    """The topic's table as a Ray Dataset, through Ray Data's ``read_iceberg`` (``options``
    go to it: ``override_num_blocks``, ``snapshot_id``, ...)."""
    import ray.data

    return ray.data.read_iceberg(
        table_identifier=table_identifier(topic, cluster), catalog_kwargs=catalog_kwargs(cluster), **options
    )


def data_files(topic: str, cluster: ClusterHandle | None = None) -> list[str]:
    """The Parquet data files of the table's current snapshot (the table is append-only: no
    delete files), as paths a reader of Parquet opens."""
    from urllib.parse import urlparse

    files = [task.file.file_path for task in table(topic, cluster).scan().plan_files()]
    return [urlparse(f).path if f.startswith("file://") else f for f in files]


def duckdb(topic: str, connection: Any = None, cluster: ClusterHandle | None = None) -> Any:
    """A DuckDB relation over the topic's table: DuckDB's own ``read_parquet`` over the current
    snapshot's data files of a local warehouse, columns by name (``union_by_name``: files
    written before the table's schema grew lack the newer columns, read as null). DuckDB's
    ``iceberg`` extension would read the table itself but downloads at first use; this needs
    nothing beyond DuckDB. With an S3 warehouse DuckDB reads the table's Arrow (pyiceberg's)."""
    import duckdb as duckdb_module

    con = connection if connection is not None else duckdb_module.connect()
    files = data_files(topic, cluster)
    if not files or any("://" in f for f in files):
        # No file yet, or a warehouse on S3 (DuckDB's httpfs extension downloads at first use
        # too): DuckDB reads the Arrow table pyiceberg reads.
        return con.from_arrow(to_arrow(topic, cluster))
    return con.read_parquet(files, union_by_name=True)


@dataclass(frozen=True, slots=True)
class PartitionTranslation:
    """How far one partition's translation has come, as its leader reports it."""

    topic: str
    partition: int
    leader: int
    mode: str
    next_offset: int | None  # the table's translated offset (None: not read yet)
    high_watermark: int
    lag_records: int
    lag_seconds: float
    translated_records: int
    invalid_records: int
    error: str | None  # the last failed step's error (the catalog unreachable, ...), until a step succeeds
    failed_steps: int = 0  # steps of this leader's that failed and were tried again
    expired_snapshots: int = 0  # snapshots this leader's translator removed (history.expire.*)


def translation(
    topics: str | Iterable[str], cluster: ClusterHandle | None = None, admin: Any = None, timeout_s: float = 10.0
) -> list[PartitionTranslation]:
    """Each partition of the Iceberg ``topics`` and its translation, from its leader (a
    partition whose leader does not translate it yet, one just elected, has no entry)."""
    cluster = _cluster(cluster)
    if admin is None:
        from rayqueue.admin import Admin

        admin = Admin(cluster)
    names = [topics] if isinstance(topics, str) else list(topics)
    described = admin.describe_topics(names)
    parts = [TopicPartition(t, p.partition) for t in names for p in described[t].partitions]
    if not parts:
        return []
    logs = admin.describe_partition_logs(parts, timeout_s=timeout_s)
    out = []
    for tp in parts:
        log = logs.get(tp)
        stats = getattr(log, "iceberg", None)
        if stats is None:
            continue
        out.append(
            PartitionTranslation(
                tp.topic,
                tp.partition,
                log.leader,
                stats["mode"],
                stats["next_offset"],
                stats["high_watermark"],
                stats["lag_records"],
                stats["lag_seconds"],
                stats["translated_records"],
                stats["invalid_records"],
                stats["error"],
                stats.get("failed_steps", 0),
                stats.get("expired_snapshots", 0),
            )
        )
    return out


def wait_translated(topic: str, cluster: ClusterHandle | None = None, timeout_s: float = 120.0) -> None:
    """Wait until the table holds every record committed to ``topic`` when this is called
    (each partition's translated offset reaches its high watermark of now); KafkaTimeoutError
    after ``timeout_s``. Translation runs on the topic's own schedule
    (``rayqueue.iceberg.target.lag.ms``): this only waits for it."""
    cluster = _cluster(cluster)
    from rayqueue.admin import Admin

    admin = Admin(cluster)
    parts = [TopicPartition(topic, p.partition) for p in admin.describe_topics([topic])[topic].partitions]
    targets = {tp: log.high_watermark for tp, log in admin.describe_partition_logs(parts).items()}
    deadline = time.monotonic() + timeout_s
    while True:
        report = translation(topic, cluster, admin)
        done = {t.partition: t.next_offset for t in report}
        if all(done.get(tp.partition) is not None and done[tp.partition] >= hw for tp, hw in targets.items()):
            return
        if time.monotonic() > deadline:
            behind = [
                f"{t.partition}: leader {t.leader}, failed steps {t.failed_steps}, last error {t.error!r}"
                for t in report
                if t.error or t.failed_steps
            ]
            raise KafkaTimeoutError(
                f"{topic}: translated offsets {done} did not reach the high watermarks "
                f"{ {tp.partition: hw for tp, hw in targets.items()} } within {timeout_s}s"
                + (f" ({'; '.join(behind)})" if behind else "")
            )
        time.sleep(0.2)  # polling the leaders' reports, bounded by the deadline above
