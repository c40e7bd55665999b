"""Ray Data source and sink for rayqueue topics.

``read()`` turns offset ranges of topic partitions into a ``ray.data.Dataset`` whose Arrow
blocks have the columns of Spark's Kafka source (key, value, topic, partition, offset,
timestamp, timestampType, plus headers on request). Ranges are resolved once, on the
driver, with ``list_offsets`` on the partition leaders, so a Dataset always reads the
same records however often it is executed. Each read task fetches its range straight
from the partition leader actor through the consumer's Fetcher (the one fetch path: no
consumer group, no controller on the data path but for leader changes) and decodes whole
batches with the vectorized column decoder into Arrow tables.

``write()`` produces the rows of a Dataset to a topic from parallel write tasks, one
Producer per task, through the bulk ``send_many`` path.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask

from actors.fetch import CompletedFetch
from actors.protocol import FetchRequest, IsolationLevel, ListOffsetsRequest
from actors.types import PartitionMetadata, TopicPartition
from rayqueue.cluster import Cluster, connect
from rayqueue.config import CONSUMER_CONFIG
from rayqueue.connection import ClusterHandle
from rayqueue.consumer.fetcher import Fetcher
from rayqueue.consumer.subscription_state import SubscriptionState
from rayqueue.errors import InvalidConfigError, NetworkError, is_retriable
from rayqueue.metadata import MetadataCache
from rayqueue.producer import Producer
from storage.records.columns import HEADERS_TYPE, decode_columns

logger = logging.getLogger(__name__)

EARLIEST = -2
"""Offset spec meaning the partition's log start offset (as in Spark's offsets JSON)."""
LATEST = -1
"""Offset spec meaning the partition's high watermark (as in Spark's offsets JSON)."""

DEFAULT_MAX_RECORDS_PER_TASK = 1_000_000
DEFAULT_FETCH_MAX_BYTES = 8 << 20
# Blocks are built from several fetches (zero-copy concatenation) so that downstream
# per-block costs (RayDP fetches each block with an actor call) stay small.
TARGET_BLOCK_BYTES = 64 << 20
# A task smaller than this is not worth its scheduling cost when splitting for parallelism.
MIN_RECORDS_PER_SPLIT = 10_000
RETRY_TIMEOUT_S = 60.0
RETRY_BACKOFF_S = 0.1

SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms")),
        ("timestampType", pa.int32()),
    ]
)
"""Arrow schema of a topic read (Spark's Kafka source columns)."""
SCHEMA_WITH_HEADERS = SCHEMA.append(pa.field("headers", HEADERS_TYPE))
"""Arrow schema of a topic read with ``include_headers=True``."""

_ISOLATION = {"read_uncommitted": IsolationLevel.READ_UNCOMMITTED, "read_committed": IsolationLevel.READ_COMMITTED}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        """The range's TopicPartition."""
        return TopicPartition(self.topic, self.partition)

    @property
    def count(self) -> int:
        """Number of offsets in the range (records, unless compacted or transactional)."""
        return max(0, self.end - self.start)


# -- resolving offset specs on the driver ---------------------------------------------------


def _cluster_or_connect(cluster: ClusterHandle | None) -> Cluster:
    """``cluster`` as a :class:`rayqueue.Cluster` (which also makes clients and names its
    gateways), or the cluster :func:`rayqueue.connect` finds when none is given."""
    if cluster is None:
        return connect()
    return cluster if isinstance(cluster, Cluster) else Cluster.of(cluster)


def _topic_list(topics: str | Iterable[str]) -> list[str]:
    if isinstance(topics, str):
        names = [t.strip() for t in topics.split(",")]  # Spark's "subscribe" form: "a,b"
    else:
        names = list(topics)
    names = [t for t in names if t]
    if not names:
        raise InvalidConfigError("no topics to read")
    return names


def _parse_spec(
    spec: str | Mapping[str, Mapping[str | int, int]] | None, name: str, allowed: tuple[str, ...]
) -> str | dict[TopicPartition, int] | None:
    """'earliest'/'latest', or Spark's per-partition JSON (a str or dict) as {tp: value}."""
    if spec is None:
        return None
    if isinstance(spec, str):
        text = spec.strip()
        if text in allowed:
            return text
        if not text.startswith("{"):
            raise InvalidConfigError(f"{name}: expected one of {allowed} or a JSON object, got {spec!r}")
        try:
            spec = json.loads(text)
        except ValueError as exc:
            raise InvalidConfigError(f"{name}: invalid JSON: {exc}") from None
    if not isinstance(spec, Mapping):
        raise InvalidConfigError(f"{name}: expected a string or a mapping, got {type(spec).__name__}")
    out: dict[TopicPartition, int] = {}
    for topic, partitions in spec.items():
        if not isinstance(partitions, Mapping):
            raise InvalidConfigError(f"{name}: {topic!r} must map partitions to values")
        for partition, value in partitions.items():
            out[TopicPartition(str(topic), int(partition))] = int(value)
    return out


def _leader(metadata: Any, tp: TopicPartition) -> tuple[Any, int]:
    parts = metadata.partitions_for(tp.topic)
    if not 0 <= tp.partition < len(parts):
        raise InvalidConfigError(f"unknown partition {tp}")
    meta = parts[tp.partition]
    return meta.leader_handle, meta.leader_epoch


def _list_offsets(cluster: Any, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """list_offsets on each partition's leader (pipelined), retrying leader changes."""
    topics = sorted({tp.topic for tp in specs})
    deadline = time.monotonic() + RETRY_TIMEOUT_S
    while True:
        metadata = cluster.metadata(topics)
        for t in topics:
            if t not in metadata.topics:
                raise InvalidConfigError(f"unknown topic {t!r}")
        try:
            refs = {}
            for tp, ts in specs.items():
                handle, epoch = _leader(metadata, tp)
                if handle is None:
                    raise NetworkError(f"{tp} has no leader")
                refs[tp] = handle.list_offsets.remote(ListOffsetsRequest(ts, epoch))
            return {tp: ray.get(ref).offset for tp, ref in refs.items()}
        except Exception as exc:  # noqa: BLE001 - retried below when retriable
            if not is_retriable(exc) or time.monotonic() > deadline:
                raise
            time.sleep(RETRY_BACKOFF_S)


def _last_stable_offsets(cluster: Any, hw: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The last stable offset of each partition (a zero-wait fetch at the high watermark)."""
    metadata = cluster.metadata(sorted({tp.topic for tp in hw}))
    refs = {}
    for tp, offset in hw.items():
        handle, epoch = _leader(metadata, tp)
        refs[tp] = handle.fetch.remote(FetchRequest(offset, 1, 0, 1, IsolationLevel.READ_COMMITTED, epoch))
    return {tp: min(hw[tp], ray.get(ref).last_stable_offset) for tp, ref in refs.items()}


def _resolve(spec: tuple[str, int], found: int | None, low: int, high: int) -> int:
    """An offset from ("ts", ms) (``found`` is its list_offsets answer) or ("offset", n)."""
    kind, value = spec
    if kind == "ts":
        return high if found is None or found < 0 else found  # -1: no record at or after it
    if value == EARLIEST:
        return low
    if value == LATEST:
        return high
    return value


def offset_ranges(
    topics: str | Iterable[str],
    *,
    cluster: Any = None,
    starting_offsets: str | Mapping[str, Mapping[str | int, int]] = "earliest",
    ending_offsets: str | Mapping[str, Mapping[str | int, int]] = "latest",
    starting_timestamp: int | None = None,
    ending_timestamp: int | None = None,
    starting_offsets_by_timestamp: str | Mapping[str, Mapping[str | int, int]] | None = None,
    ending_offsets_by_timestamp: str | Mapping[str, Mapping[str | int, int]] | None = None,
    isolation_level: str = "read_uncommitted",
) -> list[OffsetRange]:
    """Resolve Spark-style start/end options to one offset range per partition.

    Precedence as in Spark: a global timestamp, then per-partition timestamps, then
    offsets. Per-partition offsets use -2 for earliest and -1 for latest; partitions left
    out of a JSON spec start at earliest and end at latest. A timestamp resolves to the
    first offset whose record timestamp is >= it (latest when there is none). Ranges are
    clamped to [log start offset, high watermark] (the last stable offset under
    read_committed); an empty range is kept so that every partition is accounted for.
    """
    cluster = _cluster_or_connect(cluster)
    if isolation_level not in _ISOLATION:
        raise InvalidConfigError(f"isolation_level must be one of {sorted(_ISOLATION)}, got {isolation_level!r}")
    names = _topic_list(topics)
    metadata = cluster.metadata(names)
    tps = []
    for t in names:
        if t not in metadata.topics:
            raise InvalidConfigError(f"unknown topic {t!r}")
        tps.extend(TopicPartition(t, p.partition) for p in metadata.topics[t].partitions)

    start_spec = _parse_spec(starting_offsets, "starting_offsets", ("earliest", "latest"))
    end_spec = _parse_spec(ending_offsets, "ending_offsets", ("latest",))
    start_ts = _parse_spec(starting_offsets_by_timestamp, "starting_offsets_by_timestamp", ())
    end_ts = _parse_spec(ending_offsets_by_timestamp, "ending_offsets_by_timestamp", ())
    for spec, what in (
        (start_spec, "starting_offsets"),
        (end_spec, "ending_offsets"),
        (start_ts, "starting_offsets_by_timestamp"),
        (end_ts, "ending_offsets_by_timestamp"),
    ):
        if isinstance(spec, dict):
            unknown = sorted(str(tp) for tp in spec if tp not in set(tps))
            if unknown:
                raise InvalidConfigError(f"{what} names partitions not being read: {unknown}")
    if isinstance(end_spec, dict) and any(v == EARLIEST for v in end_spec.values()):
        raise InvalidConfigError("ending_offsets cannot be earliest (-2)")

    def wanted(spec: Any, ts_spec: Any, ts: int | None, default: int) -> dict[TopicPartition, tuple[str, int]]:
        out = {}
        for tp in tps:
            if ts is not None:
                out[tp] = ("ts", int(ts))
            elif isinstance(ts_spec, dict) and tp in ts_spec:
                out[tp] = ("ts", ts_spec[tp])
            elif isinstance(spec, dict):
                out[tp] = ("offset", spec.get(tp, default))
            elif spec == "latest":
                out[tp] = ("offset", LATEST)
            elif spec == "earliest":
                out[tp] = ("offset", EARLIEST)
            else:
                out[tp] = ("offset", default)
        return out

    starts = wanted(start_spec, start_ts, starting_timestamp, EARLIEST)
    ends = wanted(end_spec, end_ts, ending_timestamp, LATEST)
    for what, chosen in (("starting", starts), ("ending", ends)):
        for tp, (kind, value) in chosen.items():
            if kind == "ts" and value < 0:
                raise InvalidConfigError(f"{what} timestamp for {tp} must be >= 0, got {value}")
            if kind == "offset" and value < EARLIEST:
                raise InvalidConfigError(f"{what} offset for {tp} must be >= -2, got {value}")

    bounds_start = _list_offsets(cluster, dict.fromkeys(tps, EARLIEST))
    bounds_end = _list_offsets(cluster, dict.fromkeys(tps, LATEST))
    if isolation_level == "read_committed":
        bounds_end = _last_stable_offsets(cluster, bounds_end)
    by_time = {tp: v for tp, (k, v) in starts.items() if k == "ts"}
    start_found = _list_offsets(cluster, by_time) if by_time else {}
    by_time = {tp: v for tp, (k, v) in ends.items() if k == "ts"}
    end_found = _list_offsets(cluster, by_time) if by_time else {}

    ranges = []
    for tp in tps:
        low, high = bounds_start[tp], bounds_end[tp]
        start = min(max(_resolve(starts[tp], start_found.get(tp), low, high), low), high)
        end = min(max(_resolve(ends[tp], end_found.get(tp), low, high), low), high)
        ranges.append(OffsetRange(tp.topic, tp.partition, start, max(start, end)))
    return ranges


# -- reading one range inside a task --------------------------------------------------------


def schema_for(include_headers: bool = False, timestamp_tz: str | None = None) -> pa.Schema:
    """The Arrow schema of a read with these options."""
    schema = SCHEMA_WITH_HEADERS if include_headers else SCHEMA
    if timestamp_tz is not None:
        at = schema.get_field_index("timestamp")
        schema = schema.set(at, pa.field("timestamp", pa.timestamp("ms", tz=timestamp_tz)))
    return schema


def _to_table(buf: bytes, r: OffsetRange, start: int, schema: pa.Schema, check_crc: bool) -> pa.Table:
    """Decode whole batches into the Kafka-source columns, keeping offsets in [start, r.end)."""
    include_headers = "headers" in schema.names
    cols = decode_columns(buf, headers=include_headers, check_crc=check_crc, min_offset=start)
    table = cols.to_arrow(r.topic, r.partition)
    if len(cols) and cols.offset[-1] >= r.end:
        # A batch may straddle the end offset: cut exactly at it (offsets increase).
        table = table.slice(0, int(np.searchsorted(cols.offset, r.end)))
    if include_headers and cols.headers is None:
        table = table.append_column("headers", pa.nulls(len(table), HEADERS_TYPE))
    # Keep every block on the one schema (a null-only column would otherwise differ).
    return table.cast(schema)


@dataclass(frozen=True, slots=True)
class _FetchedTable:
    """The records of one fetch answer as a table, and the position past them."""

    table: pa.Table
    end_offset: int


class _TableDecoder:
    """The Fetcher's decoder for a range read: Arrow tables with the Kafka-source columns."""

    def __init__(self, r: OffsetRange, schema: pa.Schema, check_crc: bool) -> None:
        self._range, self._schema, self._check_crc = r, schema, check_crc

    def __call__(self, tp: TopicPartition, fetched: CompletedFetch, end_offset: int) -> _FetchedTable:
        table = _to_table(fetched.visible_records(), self._range, fetched.position, self._schema, self._check_crc)
        return _FetchedTable(table, end_offset)


class _KnownLeader(MetadataCache):
    """The metadata cache, answering first with a leader the caller already knows (until it
    fails and is invalidated)."""

    def __init__(self, controller: Any, tp: TopicPartition, handle: Any, leader_epoch: int) -> None:
        super().__init__(controller)
        self._known: PartitionMetadata | None = PartitionMetadata(
            tp.topic, tp.partition, -1, leader_epoch, (), (), leader_handle=handle
        )

    def leader(self, tp: TopicPartition) -> PartitionMetadata:
        """The known leader of ``tp`` while it serves, then the controller's."""
        known = self._known
        if known is not None and known.tp == tp:
            return known
        return super().leader(tp)

    def invalidate(self, topic: str) -> None:
        """Forget the known leader and ``topic``'s metadata."""
        self._known = None
        super().invalidate(topic)


def read_range(
    controller: Any,
    r: OffsetRange,
    *,
    include_headers: bool = False,
    isolation_level: IsolationLevel | int = IsolationLevel.READ_UNCOMMITTED,
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
    target_block_bytes: int = TARGET_BLOCK_BYTES,
    check_crc: bool = True,
    leader: tuple[Any, int] | None = None,
    timestamp_tz: str | None = None,
) -> Iterator[pa.Table]:
    """Fetch ``r`` from its partition leader and yield Arrow tables of its records.

    It reads through the consumer's Fetcher, which keeps the next fetch under way while an
    answer is decoded. Leader changes and dead leader actors are retried with fresh
    metadata from ``controller`` for up to a minute; OffsetOutOfRange (the range was
    deleted by retention meanwhile) is raised, as Spark's failOnDataLoss does, and so is
    CorruptRecordError for a batch that cannot be read (after the records before it).
    ``leader``: the partition's leader handle and epoch, if known.
    """
    if r.count == 0:
        return
    schema = schema_for(include_headers, timestamp_tz)
    committed = IsolationLevel(isolation_level) is IsolationLevel.READ_COMMITTED
    config = CONSUMER_CONFIG.parse(
        max_partition_fetch_bytes=fetch_max_bytes,
        fetch_max_wait_ms=0,
        isolation_level="read_committed" if committed else "read_uncommitted",
        check_crcs=check_crc,
        auto_offset_reset="none",
        retry_backoff_ms=int(RETRY_BACKOFF_S * 1000),
        default_api_timeout_ms=int(RETRY_TIMEOUT_S * 1000),
    )
    subscriptions = SubscriptionState("none")
    subscriptions.assign_from_user([r.tp])
    subscriptions.seek(r.tp, r.start)
    metadata = MetadataCache(controller) if leader is None else _KnownLeader(controller, r.tp, *leader)
    fetcher = Fetcher(
        subscriptions,
        metadata,
        config,
        decode=_TableDecoder(r, schema, check_crc),
        end_offsets={r.tp: r.end},
        retry_timeout_s=RETRY_TIMEOUT_S,
        max_in_flight=1,  # the next fetch under way while this answer is decoded: a second costs here
    )
    pending: list[pa.Table] = []
    pending_bytes = 0
    try:
        while not fetcher.exhausted(r.tp):
            fetcher.send_fetches()
            fetcher.wait_for_fetches(1.0)
            for fetched in fetcher.take_fetched(r.tp):
                if fetched.table.num_rows:
                    pending.append(fetched.table)
                    pending_bytes += fetched.table.nbytes
                if pending_bytes >= target_block_bytes:
                    yield pa.concat_tables(pending)
                    pending, pending_bytes = [], 0
            fetcher.raise_partition_error()
    finally:
        fetcher.close()
    if pending:
        yield pa.concat_tables(pending)


# -- the Datasource -------------------------------------------------------------------------


def split_ranges(
    ranges: Iterable[OffsetRange], max_records_per_task: int, parallelism: int | None = None
) -> list[OffsetRange]:
    """Split ranges so no piece exceeds ``max_records_per_task``, then (if asked) into about
    ``parallelism`` pieces by halving the largest, never below MIN_RECORDS_PER_SPLIT."""
    if max_records_per_task < 1:
        raise InvalidConfigError(f"max_records_per_task must be >= 1, got {max_records_per_task}")
    pieces: list[OffsetRange] = []
    for r in ranges:
        if r.count == 0:
            continue
        n = math.ceil(r.count / max_records_per_task)
        step = math.ceil(r.count / n)
        for start in range(r.start, r.end, step):
            pieces.append(OffsetRange(r.topic, r.partition, start, min(start + step, r.end)))
    if parallelism:
        while len(pieces) < parallelism:
            largest = max(pieces, key=lambda p: p.count, default=None)
            if largest is None or largest.count < 2 * MIN_RECORDS_PER_SPLIT:
                break
            pieces.remove(largest)
            middle = largest.start + largest.count // 2
            pieces.append(OffsetRange(largest.topic, largest.partition, largest.start, middle))
            pieces.append(OffsetRange(largest.topic, largest.partition, middle, largest.end))
    return sorted(pieces, key=lambda p: (p.topic, p.partition, p.start))


class TopicDatasource(Datasource):
    """A Ray Data source over resolved offset ranges of rayqueue topics."""

    def __init__(
        self,
        controller: Any,
        ranges: list[OffsetRange],
        *,
        include_headers: bool = False,
        isolation_level: str = "read_uncommitted",
        max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK,
        parallelism: int | None = None,
        fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        check_crc: bool = True,
        timestamp_tz: str | None = None,
    ) -> None:
        super().__init__()
        self._timestamp_tz = timestamp_tz
        self._controller = controller
        self._ranges = list(ranges)
        self._include_headers = include_headers
        self._isolation = _ISOLATION[isolation_level]
        self._max_records = max_records_per_task
        self._parallelism = parallelism
        self._fetch_max_bytes = fetch_max_bytes
        self._check_crc = check_crc

    @property
    def ranges(self) -> list[OffsetRange]:
        """The resolved offset ranges, one per partition."""
        return list(self._ranges)

    def pieces(self) -> list[OffsetRange]:
        """The ranges split as the read tasks will read them."""
        return split_ranges(self._ranges, self._max_records, self._parallelism)

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the blocks."""
        return schema_for(self._include_headers, self._timestamp_tz)

    def get_name(self) -> str:
        """Name of the read operator."""
        return "ReadRayqueue"

    def estimate_inmemory_data_size(self) -> int | None:
        """Unknown up front (record sizes are not tracked per partition)."""
        return None

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        """One read task per piece of each range (see ``split_ranges``).

        Ray's requested ``parallelism`` is ignored unless ``parallelism`` was given to
        ``read``: its default (about 200) would cut topics into pieces too small to pay
        for a task.
        """
        pieces = self.pieces()
        schema = self.schema
        controller, include_headers = self._controller, self._include_headers
        isolation, fetch_max_bytes, check_crc = self._isolation, self._fetch_max_bytes, self._check_crc
        timestamp_tz = self._timestamp_tz
        if not pieces:
            # One empty block so that the Dataset (and a Spark DataFrame made from it)
            # has its schema even when there is nothing to read.
            return [
                ReadTask(
                    lambda: [schema.empty_table()],
                    BlockMetadata(num_rows=0, size_bytes=0, input_files=None, exec_stats=None),
                    schema=schema,
                    per_task_row_limit=per_task_row_limit,
                )
            ]
        tasks = []
        for piece in pieces:

            def read_fn(piece: OffsetRange = piece) -> Iterator[Block]:
                yielded = False
                for table in read_range(
                    controller,
                    piece,
                    include_headers=include_headers,
                    isolation_level=isolation,
                    fetch_max_bytes=fetch_max_bytes,
                    check_crc=check_crc,
                    timestamp_tz=timestamp_tz,
                ):
                    yielded = True
                    yield table
                if not yielded:
                    yield schema.empty_table()

            # num_rows stays unknown: compaction and control batches leave offset gaps.
            meta = BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None)
            tasks.append(ReadTask(read_fn, meta, schema=schema, per_task_row_limit=per_task_row_limit))
        return tasks


def datasource(
    topics: str | Iterable[str],
    *,
    cluster: Any = None,
    starting_offsets: str | Mapping[str, Mapping[str | int, int]] = "earliest",
    ending_offsets: str | Mapping[str, Mapping[str | int, int]] = "latest",
    starting_timestamp: int | None = None,
    ending_timestamp: int | None = None,
    starting_offsets_by_timestamp: str | Mapping[str, Mapping[str | int, int]] | None = None,
    ending_offsets_by_timestamp: str | Mapping[str, Mapping[str | int, int]] | None = None,
    include_headers: bool = False,
    isolation_level: str = "read_uncommitted",
    max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK,
    parallelism: int | None = None,
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
    check_crc: bool = True,
    timestamp_tz: str | None = None,
) -> TopicDatasource:
    """A TopicDatasource over the ranges the options select (resolved now); see ``read``."""
    cluster = _cluster_or_connect(cluster)
    ranges = offset_ranges(
        topics,
        cluster=cluster,
        starting_offsets=starting_offsets,
        ending_offsets=ending_offsets,
        starting_timestamp=starting_timestamp,
        ending_timestamp=ending_timestamp,
        starting_offsets_by_timestamp=starting_offsets_by_timestamp,
        ending_offsets_by_timestamp=ending_offsets_by_timestamp,
        isolation_level=isolation_level,
    )
    return TopicDatasource(
        cluster.controller,
        ranges,
        include_headers=include_headers,
        isolation_level=isolation_level,
        max_records_per_task=max_records_per_task,
        parallelism=parallelism,
        fetch_max_bytes=fetch_max_bytes,
        check_crc=check_crc,
        timestamp_tz=timestamp_tz,
    )


def read(
    topics: str | Iterable[str],
    *,
    cluster: Any = None,
    ray_remote_args: Mapping[str, Any] | None = None,
    **options: Any,
) -> ray.data.Dataset:
    """A Dataset of the records of ``topics`` in the given offset or timestamp ranges.

    Options (keyword): ``starting_offsets`` / ``ending_offsets`` ("earliest"/"latest" or
    Spark's per-partition JSON, as a str or dict, -2 earliest / -1 latest),
    ``starting_timestamp`` / ``ending_timestamp`` (ms), ``starting_offsets_by_timestamp``
    / ``ending_offsets_by_timestamp`` (per-partition JSON of ms), ``include_headers``,
    ``isolation_level``, ``max_records_per_task``, ``parallelism``, ``fetch_max_bytes``,
    ``check_crc``, ``timestamp_tz``; see ``offset_ranges`` for how they resolve. Ranges
    are fixed when this is called. Columns: key, value (binary), topic (string),
    partition (int32), offset (int64), timestamp (timestamp[ms]), timestampType (int32),
    and headers (list<struct<key: string, value: binary>>) with ``include_headers``.
    With ``timestamp_tz`` (e.g. "UTC") the timestamp column carries that zone (same
    values), for converters that take naive timestamps as local time.
    """
    source = datasource(topics, cluster=cluster, **options)
    # One output block per read task at least: without this Ray Data splits the blocks
    # of small reads up to its default minimum of 200, and every downstream per-block
    # cost (RayDP's conversion makes a Spark partition of each) multiplies.
    tasks = max(1, len(source.pieces()))
    return ray.data.read_datasource(source, override_num_blocks=tasks, ray_remote_args=dict(ray_remote_args or {}))


# -- the Datasink ---------------------------------------------------------------------------


def _binary(column: pa.ChunkedArray | pa.Array, name: str) -> pa.Array:
    """A binary column from binary or string data (Spark's sink takes either)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.cast(pa.binary())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) or pa.types.is_null(column.type):
        return column.cast(pa.binary())  # utf8 -> binary reuses the buffers
    raise InvalidConfigError(f"column {name!r} must be binary or string, not {column.type}")


def _timestamps_ms(column: pa.ChunkedArray) -> list[int] | None:
    """Millisecond timestamps from a timestamp or integer column (None where null)."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("ms")).cast(pa.int64())
    elif not pa.types.is_integer(column.type):
        raise InvalidConfigError(f"column 'timestamp' must be a timestamp or integer, not {column.type}")
    if column.null_count:
        return None
    return column.to_numpy().astype(np.int64).tolist()


def write_table(producer: Any, topic: str, table: pa.Table) -> tuple[int, list[Any]]:
    """Queue the rows of ``table`` on ``producer``; returns (rows, results to wait on).

    Rows are grouped by their ``partition`` column (nulls: the producer's partitioner)
    and sent through ``send_many``; rows with headers go through ``send`` one by one,
    the only path that carries headers.
    """
    names = set(table.column_names)
    if "value" not in names:
        raise InvalidConfigError(f"writing to a topic needs a 'value' column; got {sorted(names)}")
    n = table.num_rows
    if n == 0:
        return 0, []
    values = _binary(table.column("value"), "value")
    keys = _binary(table.column("key"), "key") if "key" in names else None
    if keys is not None and keys.null_count == n:
        keys = None
    timestamps = _timestamps_ms(table.column("timestamp")) if "timestamp" in names else None
    partitions = None
    if "partition" in names:
        column = table.column("partition")
        if column.null_count < n:
            partitions = column.cast(pa.int64()).fill_null(-1).to_numpy()
    headers = None
    if "headers" in names:
        column = table.column("headers")
        if column.null_count < n and pc.sum(pc.list_value_length(column).fill_null(0)).as_py():
            headers = column.to_pylist()

    results: list[Any] = []
    if headers is not None:
        value_list, key_list = values.to_pylist(), keys.to_pylist() if keys is not None else None
        for i in range(n):
            results.append(
                producer.send(
                    topic,
                    value_list[i],
                    key_list[i] if key_list is not None else None,
                    headers=[(h["key"], h["value"]) for h in headers[i] or ()],
                    partition=int(partitions[i]) if partitions is not None and partitions[i] >= 0 else None,
                    timestamp=timestamps[i] if timestamps is not None else None,
                )
            )
        return n, results

    if partitions is None:
        groups: list[tuple[int | None, np.ndarray | None]] = [(None, None)]
    else:
        order = np.argsort(partitions, kind="stable")  # stable: rows keep their order per partition
        sorted_parts = partitions[order]
        cuts = np.flatnonzero(np.diff(sorted_parts)) + 1
        groups = [
            (int(chunk_parts[0]) if chunk_parts[0] >= 0 else None, chunk)
            for chunk, chunk_parts in zip(np.split(order, cuts), np.split(sorted_parts, cuts), strict=True)
        ]
    for partition, index in groups:
        if index is None:
            part_values, part_keys, part_ts = values, keys, timestamps
        else:
            take = pa.array(index)
            part_values = values.take(take)
            part_keys = keys.take(take) if keys is not None else None
            part_ts = [timestamps[i] for i in index] if timestamps is not None else None
        results.append(producer.send_many(topic, part_values, part_keys, partition=partition, timestamps=part_ts))
    return n, results


class TopicDatasink(Datasink[int]):
    """A Ray Data sink producing rows to a rayqueue topic, one Producer per write task."""

    def __init__(self, cluster: ClusterHandle, topic: str, producer_config: Mapping[str, Any] | None = None) -> None:
        self._namespace = cluster.namespace
        self._controller = cluster.controller
        self._config = cluster.config
        self._topic = topic
        self._producer_config = dict(producer_config or {})
        self.rows_written = 0

    def get_name(self) -> str:
        """Name of the write operator."""
        return "WriteRayqueue"

    def write(self, blocks: Iterable[Block], ctx: Any) -> int:
        """Produce every row of ``blocks``; returns how many were acknowledged."""
        cluster = ClusterHandle(self._namespace, self._controller, self._config)
        producer = Producer(cluster, self._producer_config)
        written = 0
        try:
            pending: list[Any] = []
            for block in blocks:
                rows, results = write_table(producer, self._topic, BlockAccessor.for_block(block).to_arrow())
                written += rows
                pending.extend(results)
            producer.flush()
            for result in pending:
                result.get()  # raises the first failed batch's error
        finally:
            producer.close()
        return written

    def on_write_complete(self, write_result: Any) -> None:
        """Record the total of rows written (runs on the driver)."""
        self.rows_written = sum(write_result.write_returns)


def write(
    dataset: ray.data.Dataset,
    topic: str,
    *,
    cluster: Any = None,
    producer_config: Mapping[str, Any] | None = None,
    concurrency: int | None = None,
) -> int:
    """Produce the rows of ``dataset`` to ``topic``; returns the number of rows written.

    Columns as Spark's Kafka sink takes them: ``value`` (required), ``key``,
    ``partition`` and ``headers`` (list of {key, value}) optional; binary or string.
    A ``timestamp`` column (timestamp or epoch ms), if present, sets record timestamps.
    Any other column (``topic`` included: the argument wins) is ignored.
    """
    cluster = _cluster_or_connect(cluster)
    sink = TopicDatasink(cluster, topic, producer_config)
    dataset.write_datasink(sink, concurrency=concurrency)
    return sink.rows_written


__all__ = [
    "EARLIEST",
    "LATEST",
    "SCHEMA",
    "SCHEMA_WITH_HEADERS",
    "OffsetRange",
    "TopicDatasink",
    "TopicDatasource",
    "datasource",
    "offset_ranges",
    "read",
    "read_range",
    "schema_for",
    "split_ranges",
    "write",
    "write_table",
]
