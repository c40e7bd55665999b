"""An Iceberg topic's columns, and a batch of decoded records as an Arrow table in them.

``key_value`` mode (and every dead-letter table): ``key`` and ``value`` (binary), ``headers``
(a list of key/value structs, as Spark's Kafka source has them) and the ``rayqueue`` struct of
the record's place and time: ``topic``, ``partition``, ``offset``, ``timestamp`` (a
timestamptz, microseconds) and ``timestamp_type`` (0 CreateTime, 1 LogAppendTime), as
Redpanda's ``redpanda`` struct. A dead-letter table also has ``error``: why the record could
not be typed.

``value_schema_id_prefix`` mode: the value's own fields as columns, and the ``rayqueue``
struct with the record's ``key`` and ``headers`` in it as well (a value field may be called
``key``). The columns are made from whole arrays (no Python work per record) in key_value
mode; the typed values' rows come from ``actors.iceberg.values``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from storage.records.columns import HEADERS_TYPE, RecordColumns

RAYQUEUE = "rayqueue"
TIMESTAMP = pa.timestamp("us", "UTC")
_PLACE_FIELDS = [
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP),
    pa.field("timestamp_type", pa.int32()),
]
# The rayqueue struct of each mode.
PLACE = pa.struct(_PLACE_FIELDS)
PLACE_WITH_KEY = pa.struct([*_PLACE_FIELDS, pa.field("key", pa.binary()), pa.field("headers", HEADERS_TYPE)])

KEY_VALUE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field(RAYQUEUE, PLACE),
    ]
)
DLQ_SCHEMA = KEY_VALUE_SCHEMA.append(pa.field("error", pa.string()))
# A value_schema_id_prefix table before any value's schema: the struct alone.
VALUE_MODE_SCHEMA = pa.schema([pa.field(RAYQUEUE, PLACE_WITH_KEY)])

# Kafka timestamps are ms in an int64; in microseconds those beyond about +-292,000 years do
# not fit: they become null (the record itself is kept), as does Kafka's NO_TIMESTAMP (-1).
_MAX_MS = (2**63 - 1) // 1000
NO_TIMESTAMP = -1


def timestamps(ms: np.ndarray) -> pa.Array:
    """Kafka timestamps (ms) as a timestamptz column in microseconds, null where out of range
    or none (-1)."""
    ms = np.asarray(ms, np.int64)
    bad = (ms > _MAX_MS) | (ms < -_MAX_MS) | (ms == NO_TIMESTAMP)
    us = np.where(bad, 0, ms) * 1000
    return pa.array(us, TIMESTAMP, mask=bad if bad.any() else None)


def place(columns: RecordColumns, topic: str, partition: int, with_key: bool = False) -> pa.StructArray:
    """The ``rayqueue`` struct column of ``columns`` (with key and headers when ``with_key``)."""
    n = len(columns)
    arrays = [
        pa.repeat(pa.scalar(topic, pa.string()), n) if n else pa.array([], pa.string()),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(np.asarray(columns.offset, np.int64)),
        timestamps(columns.timestamp),
        pa.array(np.asarray(columns.timestamp_type, np.int32)),
    ]
    fields = list(PLACE_WITH_KEY if with_key else PLACE)
    if with_key:
        arrays += [columns.key, headers(columns)]
    return pa.StructArray.from_arrays(arrays, fields=fields)


def headers(columns: RecordColumns) -> pa.Array:
    """The headers column (empty lists when the records were decoded without headers)."""
    if columns.headers is not None:
        return columns.headers
    n = len(columns)
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADERS_TYPE.value_type))


def key_value_table(columns: RecordColumns, topic: str, partition: int) -> pa.Table:
    """The key_value table's rows of ``columns``."""
    return pa.Table.from_arrays(
        [columns.key, columns.value, headers(columns), place(columns, topic, partition)], schema=KEY_VALUE_SCHEMA
    )


def dlq_table(columns: RecordColumns, topic: str, partition: int, errors: list[str]) -> pa.Table:
    """The dead-letter table's rows of ``columns``, each with why it could not be typed."""
    return pa.Table.from_arrays(
        [columns.key, columns.value, headers(columns), place(columns, topic, partition), pa.array(errors, pa.string())],
        schema=DLQ_SCHEMA,
    )


def take(columns: RecordColumns, rows: np.ndarray) -> RecordColumns:
    """The records of ``columns`` at the positions ``rows``."""
    index = pa.array(np.asarray(rows, np.int64))
    return RecordColumns(
        columns.offset[rows],
        columns.timestamp[rows],
        columns.timestamp_type[rows],
        columns.key.take(index),
        columns.value.take(index),
        columns.headers.take(index) if columns.headers is not None else None,
    )
