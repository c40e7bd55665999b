"""Decoding many record batches into columns at once: what the consumer and Ray Data use.

``decode_columns`` turns a buffer of consecutive batches (a fetch answer) into numpy/Arrow
columns with the names and types of Spark's Kafka source (Ray Data and Spark read these);
``decode_rows`` into row columns over the buffer, of which ``iter_rows`` builds records one
at a time (the Consumer). The pass over every record, ``_parse_columns``, and the building
of records, ``_iter_rows``, are kernels with a compiled twin
(``storage/records/_compiled/columns.pyx``, picked at import: :mod:`storage.extensions`);
the pure one decodes varints a column at a time with numpy, and keys/values are cut out of
the buffer by Arrow's ``take``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa

from storage import compression
from storage.batch_header import HEADER_SIZE, LOG_APPEND_TIME, BatchHeader
from storage.errors import CorruptRecordError
from storage.extensions import load, pick
from storage.records import Buffer
from storage.records.reader import _locate, _parse_np, _slices, iter_batches

_MAX_INT32 = 2**31 - 1


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Records of many batches as columns (control batches left out).

    ``offset``/``timestamp`` are int64 numpy arrays, ``timestamp_type`` int32; ``key`` and
    ``value`` are nullable Arrow binary arrays; ``headers`` (when asked for) is an Arrow
    ``list<struct<key: string, value: binary>>`` array, the layout of Spark's Kafka source.
    """

    offset: np.ndarray
    timestamp: np.ndarray
    timestamp_type: np.ndarray
    key: pa.Array
    value: pa.Array
    headers: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.offset)

    def to_arrow(self, topic: str | None = None, partition: int | None = None) -> pa.Table:
        """An Arrow table with the columns (and names) of Spark's Kafka source."""
        n = len(self.offset)
        columns: dict[str, Any] = {"key": self.key, "value": self.value}
        if topic is not None:
            columns["topic"] = pa.array([topic] * n, pa.string()) if n else pa.array([], pa.string())
        if partition is not None:
            columns["partition"] = pa.array(np.full(n, partition, np.int32))
        columns["offset"] = pa.array(self.offset)
        columns["timestamp"] = pa.array(self.timestamp).cast(pa.timestamp("ms"))
        columns["timestampType"] = pa.array(self.timestamp_type)
        if self.headers is not None:
            columns["headers"] = self.headers
        return pa.table(columns)


HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _binary_column(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of data[starts[i]:starts[i]+lengths[i]] (null where length is -1).

    Arrow wants value bytes contiguous, ours are interleaved with record fields. So the
    buffer is seen as a 2n-element array alternating "value i" and "gap after value i"
    (offsets stay increasing), and ``take`` keeps the even elements: one C loop.
    """
    n = len(starts)
    nulls = lengths < 0
    if n == 0 or nulls.all():
        return pa.nulls(n, pa.binary())
    ends = starts + np.maximum(lengths, 0)
    offsets = np.empty(2 * n + 1, np.int64)
    offsets[0 : 2 * n : 2] = starts
    offsets[1 : 2 * n : 2] = ends
    offsets[2 * n] = ends[-1]
    spread = pa.Array.from_buffers(pa.large_binary(), 2 * n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    indices = pa.array(np.arange(0, 2 * n, 2, dtype=np.int64), mask=nulls if nulls.any() else None)
    column = spread.take(indices)
    if int(ends[-1]) < _MAX_INT32:
        column = column.cast(pa.binary())
    return column


@dataclass(frozen=True, slots=True)
class RecordRows:
    """Records of many batches as row columns pointing into one buffer (control batches left out).

    ``data`` holds the records' bytes (``arr`` is its uint8 view): the fetch answer itself,
    or, when a batch was compressed, one buffer of every batch's records. ``offset``,
    ``timestamp`` (int64), ``timestamp_type`` (int32) and the key and value starts and
    lengths (int64; length -1 for null) are numpy arrays, one row per record; ``headers``
    maps the rows that have headers to them. :func:`decode_columns` makes Arrow columns of
    them; :func:`iter_rows` builds records of them one at a time (the Consumer).
    """

    data: Buffer
    arr: np.ndarray
    offset: np.ndarray
    timestamp: np.ndarray
    timestamp_type: np.ndarray
    kstart: np.ndarray
    klen: np.ndarray
    vstart: np.ndarray
    vlen: np.ndarray
    headers: dict[int, tuple]

    def __len__(self) -> int:
        return len(self.offset)

    def keys(self, start: int = 0) -> list[bytes | None]:
        """The keys of the rows from ``start`` as bytes (None for a null key)."""
        return _slices(bytes(self.data), self.kstart[start:].tolist(), self.klen[start:].tolist())

    def values(self, start: int = 0) -> list[bytes | None]:
        """The values of the rows from ``start`` as bytes (None for a null value)."""
        return _slices(bytes(self.data), self.vstart[start:].tolist(), self.vlen[start:].tolist())


def decode_rows(buf: Buffer, *, check_crc: bool = True, min_offset: int | None = None) -> RecordRows:
    """Decode every record of a buffer of consecutive batches into row columns.

    Control batches are skipped; a partial batch at the end is ignored. With
    ``min_offset`` the records before it (a fetch returns whole batches) are left out.
    Raises CorruptRecordError (or a subclass) for a malformed batch, with no partial result.
    """
    segments: list[tuple[Buffer, int, int, BatchHeader]] = []  # data, start, end, header
    compressed = False
    for batch in iter_batches(buf, check_crc=check_crc):
        h = batch.header
        if h.is_control or h.records_count == 0 and h.compression == 0:
            if h.records_count == 0 and h.size != HEADER_SIZE:
                raise CorruptRecordError(f"batch at byte {h.position} has bytes after 0 records")
            continue
        if h.compression:
            data = compression.decompress(
                h.compression, memoryview(buf)[h.position + HEADER_SIZE : h.position + h.size]
            )
            segments.append((data, 0, len(data), h))
            compressed = True
        else:
            segments.append((buf, h.position + HEADER_SIZE, h.position + h.size, h))
    if compressed:
        # One buffer for all records: decompressed regions as they are, the uncompressed
        # ones copied once, so that one vectorized pass covers every batch.
        parts, spans, at = [], [], 0
        for data, start, end, h in segments:
            parts.append(memoryview(data)[start:end])
            spans.append((at, at + end - start, h))
            at += end - start
        data_all: Buffer = b"".join(parts)
    else:
        data_all = buf
        spans = [(start, end, h) for _, start, end, h in segments]
    arr = np.frombuffer(data_all, np.uint8)
    if not spans:
        empty = np.zeros(0, np.int64)
        return RecordRows(data_all, arr, empty, empty, np.zeros(0, np.int32), empty, empty, empty, empty, {})
    offsets, timestamps, types, kstart, klen, vstart, vlen, headers = _parse_columns(data_all, arr, spans)
    if min_offset is not None and len(offsets) and offsets[0] < min_offset:
        keep = np.flatnonzero(offsets >= min_offset)
        offsets, timestamps, types = offsets[keep], timestamps[keep], types[keep]
        kstart, klen, vstart, vlen = kstart[keep], klen[keep], vstart[keep], vlen[keep]
        if headers:
            headers = {row: headers[old] for row, old in enumerate(keep.tolist()) if old in headers}
    return RecordRows(data_all, arr, offsets, timestamps, types, kstart, klen, vstart, vlen, headers)


def decode_columns(
    buf: Buffer, *, headers: bool = False, check_crc: bool = True, min_offset: int | None = None
) -> RecordColumns:
    """Decode every record of a buffer of consecutive batches into columns.

    Control batches are skipped; a partial batch at the end is ignored. With
    ``min_offset`` the records before it (a fetch returns whole batches) are left out.
    Raises CorruptRecordError (or a subclass) for a malformed batch, with no partial result.
    """
    rows = decode_rows(buf, check_crc=check_crc, min_offset=min_offset)
    header_column = None
    if headers:
        if rows.headers:
            lists = [[{"key": k, "value": v} for k, v in rows.headers.get(r, ())] for r in range(len(rows))]
            header_column = pa.array(lists, HEADERS_TYPE)
        else:
            # Every list empty: all offsets 0, no struct values.
            header_column = pa.ListArray.from_arrays(
                pa.array(np.zeros(len(rows) + 1, np.int32)), pa.array([], HEADERS_TYPE.value_type)
            )
    return RecordColumns(
        rows.offset,
        rows.timestamp,
        rows.timestamp_type,
        _binary_column(rows.arr, rows.kstart, rows.klen),
        _binary_column(rows.arr, rows.vstart, rows.vlen),
        header_column,
    )


def iter_rows(
    rows: RecordRows,
    record_type: type[tuple],
    prefix: tuple,
    suffix: tuple,
    offsets: list[int],
    start: int = 0,
    keys: list | None = None,
    values: list | None = None,
) -> tuple[Iterator[Any], Iterator[int]]:
    """The records of ``rows`` from row ``start``, built one at a time as they are taken.

    Each is the ``record_type`` tuple ``(*prefix, offset, timestamp, timestamp_type, key,
    value, headers, *suffix)``, a named tuple's fields set in C. ``offsets`` is the list of
    the rows' offsets from ``start`` on: a record is built for each of its items while it
    holds them, so clearing it stops the iteration at once. ``keys`` and ``values`` replace
    the rows' bytes (deserialized, aligned with ``offsets``). Returns the records and a
    cursor whose ``length_hint`` is how many are left.
    """
    if not offsets:
        return iter(()), iter(())
    return _iter_rows(rows, record_type, prefix, suffix, offsets, start, keys, values)


def _iter_rows_py(
    rows: RecordRows,
    record_type: type[tuple],
    prefix: tuple,
    suffix: tuple,
    offsets: list[int],
    start: int,
    keys: list | None,
    values: list | None,
) -> tuple[Iterator[Any], Iterator[int]]:
    """``iter_rows``' records: a lazy ``map`` of ``tuple.__new__`` over a ``zip`` of the
    columns as lists (or ``repeat`` where one value serves all), the cursor inside it."""
    stop = start + len(offsets)
    cursor = iter(offsets)
    types = rows.timestamp_type[start:stop]
    same_type = types[0] == types[-1] and (types == types[0]).all()
    headers: Any = repeat(())
    if rows.headers:
        headers = [rows.headers.get(row, ()) for row in range(start, stop)]
    columns = zip(
        *map(repeat, prefix),
        cursor,
        rows.timestamp[start:stop].tolist(),
        repeat(int(types[0])) if same_type else types.tolist(),
        rows.keys(start)[: stop - start] if keys is None else keys,
        rows.values(start)[: stop - start] if values is None else values,
        headers,
        *map(repeat, suffix),
        strict=False,  # the repeat()s never end: the cursor does
    )
    return map(tuple.__new__, repeat(record_type), columns), cursor


def _parse_columns_py(data: Buffer, arr: np.ndarray, spans: list[tuple[int, int, BatchHeader]]) -> tuple:
    """``decode_columns``' pass over every record: the records of each (start, end, header)
    span of ``data`` (``arr`` is its uint8 view) as row columns.

    Returns offsets, timestamps (int64), timestamp types (int32), key starts and lengths,
    value starts and lengths (int64; length -1 for null) and {row: headers} for the rows
    that have headers. Raises CorruptRecordError for malformed records or offset deltas
    that do not increase within a batch's lastOffsetDelta.
    """
    starts_parts, counts = [], []
    for start, end, h in spans:
        starts_parts.append(_locate(data, arr, start, end, h.records_count))
        counts.append(h.records_count)
    starts = np.concatenate(starts_parts)
    f = _parse_np(data, arr, starts, len(arr))

    hs = [s[2] for s in spans]
    counts_np = np.array(counts, np.int64)
    batch_of = np.repeat(np.arange(len(hs)), counts_np)
    base_offset = np.array([h.base_offset for h in hs], np.int64)
    last_delta = np.array([h.last_offset_delta for h in hs], np.int64)
    base_ts = np.array([h.base_timestamp for h in hs], np.int64)
    max_ts = np.array([h.max_timestamp for h in hs], np.int64)
    ts_type = np.array([h.timestamp_type for h in hs], np.int32)

    # Offset deltas increase inside each batch and stay within lastOffsetDelta.
    od = f.od
    first_row = np.cumsum(counts_np) - counts_np
    step = np.diff(od)
    new_batch = np.zeros(len(od), bool)
    new_batch[first_row[counts_np > 0]] = True  # a batch of no records starts no row
    if (od < 0).any() or (od > last_delta[batch_of]).any() or ((step <= 0) & ~new_batch[1:]).any():
        raise CorruptRecordError("offset deltas not increasing within a batch's lastOffsetDelta")

    offsets = base_offset[batch_of] + od
    ts_type_rows = ts_type[batch_of]
    timestamps = np.where(ts_type_rows == LOG_APPEND_TIME, max_ts[batch_of], base_ts[batch_of] + f.tsd)
    return offsets, timestamps, ts_type_rows, f.kstart, f.klen, f.vstart, f.vlen, f.headers


# The passes over every record: the compiled kernels (storage/records/_compiled/columns.pyx)
# when built, else the pure ones above; chosen here, once.
_compiled = load(__name__, "storage.records._compiled.columns")
_parse_columns = pick(__name__, "_parse_columns", _parse_columns_py, _compiled, "parse_columns")
_iter_rows = pick(__name__, "_iter_rows", _iter_rows_py, _compiled, "iter_rows")

__all__ = ["HEADERS_TYPE", "RecordColumns", "RecordRows", "decode_columns", "decode_rows", "iter_rows"]
