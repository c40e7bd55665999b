"""Building record batches (Kafka's ``MemoryRecordsBuilder``): one record at a time, or
whole columns at once.

* ``RecordBatchBuilder.append``: one record; its pieces are kept as they are and joined
  once per batch, with table-driven varints;
* ``RecordBatchBuilder.append_many`` / ``from_columns``: whole columns; runs of records
  with the same layout are written as rows of a numpy matrix, without a Python step per
  record.

The builder is a whole class with a compiled twin (``storage/records/_compiled/builder.pyx``,
picked at import: :mod:`storage.extensions`) that encodes straight into one C buffer.

A producer closes a batch in two steps, as Kafka's does: ``close_for_record_appends`` when
the batch is full or has lingered (the records compressed: the batch's size is then
exact), and, once the sender drains it and knows its sequence, ``set_producer_state`` and
``build``: the header and the CRC are written once.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from typing import Any

import crc32c as _crc32c
import numpy as np
import pyarrow as pa

from storage import compression
from storage.batch_header import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    CREATE_TIME,
    CURRENT_MAGIC,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TRANSACTIONAL_MASK,
)
from storage.errors import RecordTooLargeError
from storage.extensions import load, pick
from storage.records import Header
from storage.varint import encode_varint, encode_varints_np, varint_table

_MAX_INT32 = 2**31 - 1
_CRC = struct.Struct(">I")
_TABLE, _TABLE_MIN = varint_table()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_HEADERS_NONE = b"\x00"
_ATTR = b"\x00"
_NULL_LENGTH = b"\x01"  # varint -1: a null key or value


def _as_bytes(value: Any, what: str) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytearray | memoryview):
        # Copied: the caller may reuse its buffer before the batch is built.
        return bytes(value)
    raise TypeError(f"{what} must be bytes or None, not {type(value).__name__}")


def _encode_headers(headers: Sequence[Header]) -> bytes:
    parts = [encode_varint(len(headers))]
    for key, value in headers:
        if not isinstance(key, str):
            raise TypeError(f"header key must be str, not {type(key).__name__}")
        k = key.encode("utf-8")
        parts.append(encode_varint(len(k)))
        parts.append(k)
        v = _as_bytes(value, "header value")
        if v is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(v)))
            parts.append(v)
    return b"".join(parts)


class RecordBatchBuilder:
    """Accumulates records and builds one v2 batch (compressed, with its CRC), as Kafka's
    ``MemoryRecordsBuilder`` does.

    ``append`` adds one record; ``append_many``/``from_columns`` add whole columns. With
    ``max_batch_bytes`` an append that would make the (uncompressed) batch larger raises
    RecordTooLargeError and leaves the builder as it was.
    """

    __slots__ = (
        "compression",
        "timestamp_type",
        "base_offset",
        "partition_leader_epoch",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "is_transactional",
        "is_control",
        "max_batch_bytes",
        "_parts",
        "_count",
        "_size",
        "_next_delta",
        "_first_ts",
        "_max_ts",
        "delete_horizon_ms",
        "_last_offset_delta",
        "_region",
    )

    def __init__(
        self,
        compression: int | str | None = 0,
        *,
        timestamp_type: int = CREATE_TIME,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        max_batch_bytes: int | None = None,
        delete_horizon_ms: int | None = None,
    ) -> None:
        if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
        if is_transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        self.compression = _codec(compression)
        self.timestamp_type = timestamp_type
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.max_batch_bytes = max_batch_bytes
        self._parts: list[bytes] = []
        self._count = 0
        self._size = 0  # bytes of the encoded (uncompressed) records
        self._next_delta = 0
        self._first_ts: int | None = None
        self._max_ts = NO_TIMESTAMP
        # KIP-534 (the log cleaner): baseTimestamp holds the delete horizon, flagged by
        # attribute bit 6, and record timestamp deltas count from it.
        self.delete_horizon_ms = delete_horizon_ms
        if delete_horizon_ms is not None:
            self._first_ts = delete_horizon_ms
        self._last_offset_delta: int | None = None
        # The records as they go into the batch (compressed when there is a codec), once
        # close_for_record_appends() is called; no append may follow.
        self._region: bytes | None = None

    def __len__(self) -> int:
        return self._count

    def estimated_size(self) -> int:
        """Size of the batch if built now without compression (an upper bound with it); the
        exact size once closed for record appends (Kafka's estimatedSizeInBytes)."""
        if self._region is not None:
            return HEADER_SIZE + len(self._region)
        return HEADER_SIZE + self._size

    @property
    def is_closed_for_appends(self) -> bool:
        """Whether :meth:`close_for_record_appends` was called."""
        return self._region is not None

    def _check_open(self) -> None:
        if self._region is not None:
            raise ValueError("the builder is closed for record appends")

    def _check_room(self, extra: int) -> None:
        limit = self.max_batch_bytes
        if limit is not None and HEADER_SIZE + self._size + extra > limit:
            raise RecordTooLargeError(
                f"batch would grow to {HEADER_SIZE + self._size + extra} bytes, over max_batch_bytes={limit}"
            )

    def has_room_for(self, value: bytes | None, key: bytes | None = None, headers: Sequence[Header] = ()) -> bool:
        """Whether ``append`` of this record would stay within ``max_batch_bytes``."""
        if self.max_batch_bytes is None:
            return True
        size = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        size += len(_encode_headers(headers)) if headers else 1
        return HEADER_SIZE + self._size + size <= self.max_batch_bytes

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        timestamp: int | None = None,
        headers: Sequence[Header] = (),
        *,
        offset_delta: int | None = None,
    ) -> int:
        """Add one record; return its offset delta in the batch.

        ``timestamp`` defaults to now (ms). ``offset_delta`` (for rewriting compacted data)
        may skip offsets but never go back.
        """
        if self._region is not None:
            self._check_open()
        if type(value) is not bytes and value is not None:
            value = _as_bytes(value, "value")
        if timestamp is None:
            timestamp = _now_ms()
        elif type(timestamp) is not int or timestamp < NO_TIMESTAMP or timestamp >= 2**63:
            raise ValueError(f"invalid timestamp {timestamp!r}")
        delta = self._next_delta
        if offset_delta is not None:
            if offset_delta < delta or offset_delta > _MAX_INT32:
                raise ValueError(f"offset delta {offset_delta} is before the next one, {delta}")
            delta = offset_delta
        first = self._first_ts
        if first is None:
            first = timestamp  # kept as the batch's base timestamp once the record is in
        table, base = _TABLE, _TABLE_MIN
        tsd = timestamp - first
        tsd_b = table[tsd - base] if -64 <= tsd < 16384 else encode_varint(tsd)
        od_b = table[delta - base] if delta < 16384 else encode_varint(delta)
        # ``body`` counts the record's bytes after its length varint, field by field.
        if key is None:
            key_b = _NULL_LENGTH
            body = 2 + len(tsd_b) + len(od_b)  # attributes byte, null key
        else:
            if type(key) is not bytes:
                key = _as_bytes(key, "key")
            klen = len(key)
            key_b = (table[klen - base] if klen < 16384 else encode_varint(klen)) + key
            body = 1 + len(tsd_b) + len(od_b) + len(key_b)
        hdr_b = _encode_headers(headers) if headers else _HEADERS_NONE
        # The record's pieces go to the batch as they are; build() joins them all at once
        # (concatenating them here made four throwaway bytes objects per record).
        if value is None:
            body += 1 + len(hdr_b)
            len_b = table[body - base] if body < 16384 else encode_varint(body)
            pieces: tuple[bytes, ...] = (len_b, _ATTR, tsd_b, od_b, key_b, _NULL_LENGTH, hdr_b)
        else:
            vlen = len(value)
            val_b = table[vlen - base] if vlen < 16384 else encode_varint(vlen)
            body += len(val_b) + vlen + len(hdr_b)
            len_b = table[body - base] if body < 16384 else encode_varint(body)
            pieces = (len_b, _ATTR, tsd_b, od_b, key_b, val_b, value, hdr_b)
        size = len(len_b) + body
        if self.max_batch_bytes is not None:
            self._check_room(size)
        self._parts.extend(pieces)
        self._first_ts = first
        self._size += size
        self._count += 1
        self._next_delta = delta + 1
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        return delta

    def append_many(
        self,
        values: Sequence[bytes | None] | pa.Array | pa.ChunkedArray,
        keys: Sequence[bytes | None] | pa.Array | pa.ChunkedArray | None = None,
        timestamps: Sequence[int] | np.ndarray | pa.Array | int | None = None,
    ) -> int:
        """Add many records (no headers) at once; return the offset delta of the first.

        ``values``/``keys`` are lists of bytes (None for null) or Arrow binary arrays;
        ``timestamps`` a column, one int for all, or None for now.
        """
        self._check_open()
        vcol = _Column.of(values, "values")
        n = len(vcol.lengths)
        if n == 0:
            return self._next_delta
        kcol = _Column.of(keys, "keys") if keys is not None else None
        if kcol is not None and len(kcol.lengths) != n:
            raise ValueError(f"{len(kcol.lengths)} keys for {n} values")
        if timestamps is None:
            ts = np.full(n, _now_ms(), np.int64)
        elif isinstance(timestamps, int):
            ts = np.full(n, timestamps, np.int64)
        else:
            if isinstance(timestamps, pa.ChunkedArray | pa.Array):
                timestamps = timestamps.to_numpy(zero_copy_only=False)
            ts = np.asarray(timestamps)
            if ts.dtype.kind not in "iu" or len(ts) != n:
                raise ValueError("timestamps must be one integer per value")
            ts = ts.astype(np.int64, copy=False)
            if (ts < NO_TIMESTAMP).any():
                raise ValueError("timestamps must be >= -1")
        first = self._first_ts if self._first_ts is not None else int(ts[0])
        od = np.arange(self._next_delta, self._next_delta + n, dtype=np.int64)
        if od[-1] > _MAX_INT32:
            raise ValueError("too many records for one batch")
        region = _encode_columns(vcol, kcol, ts - first, od)
        if self.max_batch_bytes is not None:
            self._check_room(len(region))
        self._parts.append(region)
        self._size += len(region)
        self._count += n
        first_delta = self._next_delta
        self._next_delta += n
        self._first_ts = first
        self._max_ts = max(self._max_ts, int(ts.max()))
        return first_delta

    def override_last_offset(self, last_offset: int) -> None:
        """Keep ``last_offset`` as the batch's last offset even if its record is gone (Kafka's
        overrideLastOffset: a cleaned v2 batch keeps its original offset and sequence range)."""
        delta = last_offset - self.base_offset
        if delta < self._next_delta - 1 or delta > _MAX_INT32:
            raise ValueError(f"last offset {last_offset} is before the batch's records or too far")
        self._last_offset_delta = delta

    @classmethod
    def from_columns(
        cls,
        values: Sequence[bytes | None] | pa.Array | pa.ChunkedArray,
        keys: Sequence[bytes | None] | pa.Array | pa.ChunkedArray | None = None,
        timestamps: Sequence[int] | np.ndarray | pa.Array | int | None = None,
        **kwargs: Any,
    ) -> RecordBatchBuilder:
        """A builder (``kwargs`` as for the constructor) holding the given columns."""
        builder = cls(**kwargs)
        builder.append_many(values, keys, timestamps)
        return builder

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool
    ) -> None:
        """The producer id, epoch, first sequence and transactional flag the batch is built
        with (Kafka's setProducerState). The producer sets them when the sender drains the
        batch, before its one build: the batch's bytes and CRC are made once."""
        if is_transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional

    def close_for_record_appends(self) -> None:
        """No more records (Kafka's closeForRecordAppends): the records are joined and
        compressed now, so that :meth:`estimated_size` is the batch's exact size; the header
        (producer state, CRC) is written by :meth:`build`."""
        if self._region is None:
            records = b"".join(self._parts)
            self._parts = []
            self._region = compression.compress(self.compression, records) if self.compression else records

    def build(self) -> bytes:
        """The batch's bytes: records joined, compressed, header and CRC-32C written.

        An empty builder builds ``b""`` (no batch), as Kafka's MemoryRecordsBuilder does.
        Building does not close the builder; once closed for record appends the records are
        not joined nor compressed again.
        """
        if not self._count:
            return b""
        region = self._region
        if region is None:
            records = b"".join(self._parts)
            if len(self._parts) > 1:
                # Keep the joined form: a second build() (or more appends) starts from it.
                self._parts = [records]
            region = compression.compress(self.compression, records) if self.compression else records
        attributes = self.compression | (self.timestamp_type << 3)
        if self.is_transactional:
            attributes |= TRANSACTIONAL_MASK
        if self.is_control:
            attributes |= CONTROL_MASK
        if self.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_MASK
        last_delta = self._next_delta - 1
        if self._last_offset_delta is not None and self._last_offset_delta > last_delta:
            last_delta = self._last_offset_delta
        head = bytearray(
            HEADER.pack(
                self.base_offset,
                MIN_BATCH_LENGTH + len(region),
                self.partition_leader_epoch,
                CURRENT_MAGIC,
                0,
                attributes,
                last_delta,
                self._first_ts,
                self._max_ts,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                self._count,
            )
        )
        size = HEADER_SIZE + len(region)
        if self.max_batch_bytes is not None and size > self.max_batch_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max_batch_bytes={self.max_batch_bytes}")
        # One CRC pass (header tail, then the records where they are) and one copy (the join).
        _CRC.pack_into(head, CRC_OFFSET, _crc32c.crc32c(region, _crc32c.crc32c(memoryview(head)[ATTRIBUTES_OFFSET:])))
        return b"".join((head, region))


def _codec(codec: int | str | None) -> int:
    return compression.codec_id(codec)


# ---------------------------------------------------------------------------------------
# Vectorized record encoding
# ---------------------------------------------------------------------------------------


class _Column:
    """A binary column as (concatenated bytes, lengths with -1 for null, start of each)."""

    __slots__ = ("data", "lengths", "starts", "items")

    def __init__(self, data: np.ndarray, lengths: np.ndarray, starts: np.ndarray, items: list | None) -> None:
        self.data = data
        self.lengths = lengths
        self.starts = starts
        self.items = items  # the original bytes objects, when given as a list

    @classmethod
    def of(cls, column: Any, what: str) -> _Column:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if isinstance(column, pa.Array):
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                column = column.cast(pa.binary() if pa.types.is_string(column.type) else pa.large_binary())
            if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
                otype = np.int32 if pa.types.is_binary(column.type) else np.int64
                validity, obuf, dbuf = column.buffers()
                n, off = len(column), column.offset
                offsets = np.frombuffer(obuf, otype, n + 1, off * np.dtype(otype).itemsize).astype(np.int64)
                data = np.frombuffer(dbuf, np.uint8) if dbuf is not None else np.zeros(0, np.uint8)
                lengths = np.diff(offsets)
                if column.null_count:
                    lengths[column.is_null().to_numpy(zero_copy_only=False)] = -1
                return cls(data, lengths, offsets[:-1], None)
            if pa.types.is_null(column.type):
                n = len(column)
                return cls(np.zeros(0, np.uint8), np.full(n, -1, np.int64), np.zeros(n, np.int64), [None] * n)
            raise TypeError(f"{what} must be a binary Arrow array, not {column.type}")
        items = column if isinstance(column, list) else list(column)
        try:
            lengths = np.fromiter(map(len, items), np.int64, len(items))
            data = np.frombuffer(b"".join(items), np.uint8)
        except TypeError:
            # Nulls (or non-bytes, caught below) present: slow path.
            items = [_as_bytes(v, what) for v in items]
            lengths = np.array([-1 if v is None else len(v) for v in items], np.int64)
            data = np.frombuffer(b"".join(v for v in items if v is not None), np.uint8)
        else:
            if not all(type(v) is bytes for v in items):
                items = [_as_bytes(v, what) for v in items]
        starts = np.cumsum(np.maximum(lengths, 0)) - np.maximum(lengths, 0)
        return cls(data, lengths, starts, items)

    def to_list(self) -> list[bytes | None]:
        """The column's items as bytes (None for null)."""
        data = self.data.tobytes()
        return [
            data[s : s + n] if n >= 0 else None
            for s, n in zip(self.starts.tolist(), self.lengths.tolist(), strict=True)
        ]


def _encode_columns(vcol: _Column, kcol: _Column | None, tsd: np.ndarray, od: np.ndarray) -> bytes:
    """Encode records (no headers) from columns into the bytes of a batch's record region."""
    n = len(vcol.lengths)
    vlen = vcol.lengths
    klen = kcol.lengths if kcol is not None else np.full(n, -1, np.int64)
    vbody = np.maximum(vlen, 0)
    kbody = np.maximum(klen, 0)
    tsd_m, tsd_w = encode_varints_np(tsd)
    od_m, od_w = encode_varints_np(od)
    kl_m, kl_w = encode_varints_np(klen)
    vl_m, vl_w = encode_varints_np(vlen)
    body = 1 + tsd_w + od_w + kl_w + kbody + vl_w + vbody + 1
    len_m, len_w = encode_varints_np(body)
    # Rows with the same layout (every field width and key/value length) can be written
    # as one numpy matrix; find the runs of such rows.
    layout = np.stack([len_w, tsd_w, od_w, kl_w, kbody, vl_w, vbody, klen < 0, vlen < 0])
    change = np.flatnonzero((layout[:, 1:] != layout[:, :-1]).any(axis=0)) + 1
    bounds = np.concatenate(([0], change, [n])).tolist()
    if len(bounds) - 1 > max(4, n // 16):
        return _encode_rows_py(vcol, kcol, tsd, od)
    out_parts = []
    for r0, r1 in zip(bounds[:-1], bounds[1:], strict=False):
        m = r1 - r0
        lw, tw, ow, kw, kb, vw, vb = (int(x) for x in layout[:7, r0])
        width = lw + 1 + tw + ow + kw + kb + vw + vb + 1
        mat = np.empty((m, width), np.uint8)
        c = 0
        for src, w in ((len_m, lw), (None, 1), (tsd_m, tw), (od_m, ow), (kl_m, kw)):
            if src is None:
                mat[:, c] = 0  # record attributes
            else:
                mat[:, c : c + w] = src[r0:r1, :w]
            c += w
        if kb:
            s = int(kcol.starts[r0])  # type: ignore[union-attr]
            mat[:, c : c + kb] = kcol.data[s : s + m * kb].reshape(m, kb)  # type: ignore[union-attr]
            c += kb
        mat[:, c : c + vw] = vl_m[r0:r1, :vw]
        c += vw
        if vb:
            s = int(vcol.starts[r0])
            mat[:, c : c + vb] = vcol.data[s : s + m * vb].reshape(m, vb)
            c += vb
        mat[:, c] = 0  # header count
        out_parts.append(mat)
    if len(out_parts) == 1:
        return out_parts[0].tobytes()
    return b"".join(p.data for p in out_parts)


def _encode_rows_py(vcol: _Column, kcol: _Column | None, tsd: np.ndarray, od: np.ndarray) -> bytes:
    """Record by record, for columns whose lengths vary too much for the matrix path."""
    values = vcol.items if vcol.items is not None else vcol.to_list()
    keys = [None] * len(values) if kcol is None else kcol.items if kcol.items is not None else kcol.to_list()
    table, base = _TABLE, _TABLE_MIN
    enc = encode_varint
    parts: list[bytes] = []
    append = parts.append
    for value, key, t, o in zip(values, keys, tsd.tolist(), od.tolist(), strict=False):
        tsd_b = table[t - base] if -64 <= t < 16384 else enc(t)
        od_b = table[o - base] if o < 16384 else enc(o)
        if key is None:
            key_b = b"\x01"
        else:
            kl = len(key)
            key_b = (table[kl - base] if kl < 16384 else enc(kl)) + key
        if value is None:
            body = 3 + len(tsd_b) + len(od_b) + len(key_b)
            append((table[body - base] if body < 16384 else enc(body)) + b"\x00" + tsd_b + od_b + key_b + b"\x01\x00")
            continue
        vl = len(value)
        val_b = table[vl - base] if vl < 16384 else enc(vl)
        body = 2 + len(tsd_b) + len(od_b) + len(key_b) + len(val_b) + vl
        append((table[body - base] if body < 16384 else enc(body)) + b"\x00" + tsd_b + od_b + key_b + val_b)
        append(value)
        append(b"\x00")
    return b"".join(parts)


# The builder: the compiled class (storage/records/_compiled/builder.pyx) when built, else
# the pure one above; chosen here, once.
RecordBatchBuilder = pick(  # type: ignore[misc]
    __name__, "RecordBatchBuilder", RecordBatchBuilder, load(__name__, "storage.records._compiled.builder")
)

__all__ = ["RecordBatchBuilder"]
