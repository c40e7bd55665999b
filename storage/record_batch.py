"""Kafka record batches, message format v2, byte for byte: reading, building, columnar paths.

A batch is the 61-byte header of ``batch_header`` followed by its records, compressed as
a whole when the attributes name a codec. Each record is::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value | headerCount varint | headers

(a length of -1 is a null key or value; a header is keyLength varint, utf-8 key,
valueLength varint, value).

Three ways in and out, from simplest to fastest:

* ``RecordBatchBuilder.append`` / ``RecordBatch`` iteration: one record at a time, one
  tight loop with table-driven varints and a single join per batch;
* ``RecordBatchBuilder.append_many`` / ``from_columns``: whole columns at once; runs of
  records with the same layout are written as rows of a numpy matrix, without a Python
  step per record;
* ``decode_columns``: many batches to numpy/Arrow columns; varints are decoded a column
  at a time and keys/values are cut out of the buffer by Arrow's ``take``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

import crc32c as _crc32c
import numpy as np
import pyarrow as pa

from storage import compression
from storage.batch_header import (
    CONTROL_MASK,
    CREATE_TIME,
    CURRENT_MAGIC,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_batch,
    read_header,
)
from storage.errors import CorruptRecordError, RecordTooLargeError, UnknownMagicError
from storage.extensions import bind, load
from storage.varint import (
    MAX_VARLONG_BYTES,
    decode_varint,
    decode_varints_np,
    decode_varlong,
    encode_varint,
    encode_varints_np,
    varint_table,
)

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]

_INT32 = struct.Struct(">i")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_MAX_INT32 = 2**31 - 1
# The smallest possible record: length, attributes, timestampDelta, offsetDelta,
# keyLength, valueLength and headerCount, one byte each.
_MIN_RECORD_SIZE = 7
# Below this many records a batch is parsed by the pure-Python loop; numpy's fixed cost
# per call only pays off on larger batches.
_NUMPY_MIN_RECORDS = 48

_TABLE, _TABLE_MIN = varint_table()
# _NEXT[b]: for a one-byte record length b, the bytes from this record's start to the
# next one's (0 marks an illegal non-positive length).
_NEXT: list[int] = [0] * 128
for _b in range(128):
    _len = (_b >> 1) ^ -(_b & 1)
    _NEXT[_b] = 1 + _len if _len > 0 else 0
_DEC1: list[int] = [(_b >> 1) ^ -(_b & 1) for _b in range(128)]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------


class Record(NamedTuple):
    """One record of a batch: absolute offset and timestamp, key, value and headers.

    A named tuple (immutable, fields by name): the lazy reader builds one per record in C
    (``tuple.__new__`` mapped over the decoded columns), several times cheaper than a
    frozen dataclass's per-field setattr.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


_tuple_new = tuple.__new__


CONTROL_ABORT = 0  # the control record types of end-transaction markers
CONTROL_COMMIT = 1


class ControlRecord(NamedTuple):
    """The content of a control batch's record: an end-transaction marker."""

    version: int
    type: int  # CONTROL_ABORT, CONTROL_COMMIT (other values: control types this version does not know)
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        """Whether the marker commits (rather than aborts) the transaction."""
        return self.type == CONTROL_COMMIT


# ---------------------------------------------------------------------------------------
# Parsing records (pure Python and vectorized)
# ---------------------------------------------------------------------------------------


def _read_headers(data: Buffer, pos: int, count: int) -> tuple[tuple[Header, ...], int]:
    headers = []
    for _ in range(count):
        klen, pos = decode_varint(data, pos)
        if klen < 0 or pos + klen > len(data):
            raise CorruptRecordError(f"invalid header key length {klen}")
        try:
            key = bytes(data[pos : pos + klen]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not valid utf-8") from None
        pos += klen
        vlen, pos = decode_varint(data, pos)
        if vlen < -1:
            raise CorruptRecordError(f"invalid header value length {vlen}")
        if vlen < 0:
            value = None
        else:
            value = bytes(data[pos : pos + vlen])
            pos += vlen
        headers.append((key, value))
    return tuple(headers), pos


def _parse_py(data: bytes, pos: int, end: int, count: int) -> tuple[list, list, list, list, list]:
    """Parse ``count`` records from data[pos:end]: offset deltas, timestamp deltas, keys, values, headers."""
    ods: list[int] = []
    tsds: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[tuple] = []
    dec1 = _DEC1
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = dec1[b]
                pos += 1
            else:
                length, pos = decode_varint(data, pos)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise CorruptRecordError(f"record length {length} invalid or past the end of the batch")
            pos += 1  # attributes: no bits defined for records
            b = data[pos]
            if b < 0x80:
                tsds.append(dec1[b])
                pos += 1
            else:
                tsd, pos = decode_varlong(data, pos)
                tsds.append(tsd)
            b = data[pos]
            if b < 0x80:
                ods.append(dec1[b])
                pos += 1
            else:
                od, pos = decode_varint(data, pos)
                ods.append(od)
            b = data[pos]
            if b == 1:  # zig-zag -1: null key
                keys.append(None)
                pos += 1
            else:
                klen, pos = decode_varint(data, pos)
                if klen < 0:
                    if klen != -1:
                        raise CorruptRecordError(f"invalid key length {klen}")
                    keys.append(None)  # -1 written in more bytes than it needs: still null
                else:
                    keys.append(data[pos : pos + klen])
                    pos += klen
            b = data[pos]
            if b == 1:
                values.append(None)
                pos += 1
            else:
                vlen, pos = decode_varint(data, pos)
                if vlen < 0:
                    if vlen != -1:
                        raise CorruptRecordError(f"invalid value length {vlen}")
                    values.append(None)
                else:
                    values.append(data[pos : pos + vlen])
                    pos += vlen
            b = data[pos]
            if b == 0:
                headers.append(())
                pos += 1
            else:
                hcount, pos = decode_varint(data, pos)
                if hcount < 0 or hcount > rec_end - pos:
                    raise CorruptRecordError(f"invalid header count {hcount}")
                hs, pos = _read_headers(data, pos, hcount)
                headers.append(hs)
            if pos != rec_end:
                raise CorruptRecordError(f"record fields take {pos - rec_end + length} bytes, its length says {length}")
    except IndexError:
        raise CorruptRecordError("record runs past the end of the batch") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the batch's {count} records")
    return ods, tsds, keys, values, headers


def _locate(data: Buffer, arr: np.ndarray, pos: int, end: int, count: int) -> np.ndarray:
    """Start position of each of ``count`` records tiling data[pos:end] exactly."""
    if count * _MIN_RECORD_SIZE > end - pos:
        raise CorruptRecordError(f"{count} records cannot fit in {end - pos} bytes")
    if count == 0:
        if pos != end:
            raise CorruptRecordError(f"{end - pos} bytes in a batch of 0 records")
        return np.zeros(0, np.int64)
    chunks: list[np.ndarray] = []
    p, remaining = pos, count
    window, python_steps = 64, 32
    try:
        while remaining:
            if remaining >= 16:
                # Records come in runs of one size (fixed-size values; the size changes
                # only where an offset delta needs another varint byte): guess that the
                # run goes on and check a window of guessed starts at once.
                length, q = decode_varint(data, p)
                stride = q - p + length
                if length <= 0 or p + stride > end:
                    raise CorruptRecordError(f"invalid record length {length} at byte {p}")
                k = min(remaining, window, (end - p) // stride)
                guess = p + np.arange(k, dtype=np.int64) * stride
                ok = _stride_matches(arr, guess, stride, end)
                run = k if ok.all() else int(np.argmin(ok))
                chunks.append(guess[:run])
                p += run * stride
                remaining -= run
                if run == k:
                    window *= 4
                    continue
                # The run broke early: hop record by record for a while, longer each
                # time guessing does not pay, so varied sizes cost little extra.
                window = 64
                if run < 16:
                    python_steps *= 2
            steps = min(remaining, python_steps)
            hops = [0] * steps
            nxt = _NEXT
            for i in range(steps):
                hops[i] = p
                b = data[p]
                if b < 0x80:
                    step = nxt[b]
                    if not step:
                        raise CorruptRecordError(f"invalid record length at byte {p}")
                    p += step
                else:
                    length, q = decode_varint(data, p)
                    if length <= 0:
                        raise CorruptRecordError(f"invalid record length {length} at byte {p}")
                    p = q + length
                if p > end:
                    raise CorruptRecordError("record runs past the end of the batch")
            chunks.append(np.array(hops, dtype=np.int64))
            remaining -= steps
    except IndexError:
        raise CorruptRecordError("record runs past the end of the batch") from None
    if p != end:
        raise CorruptRecordError(f"records of the batch end at byte {p}, the batch at {end}")
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def _stride_matches(arr: np.ndarray, starts: np.ndarray, stride: int, end: int) -> np.ndarray:
    """Whether the record at each guessed start has a 1- or 2-byte length giving ``stride``.

    Guessed starts may point into the middle of a record, so this never raises: a guess
    that does not decode as such a length simply does not match.
    """
    b0 = arr[starts].astype(np.int64)
    b1 = arr[np.minimum(starts + 1, end - 1)].astype(np.int64)
    two = b0 >= 0x80
    z = np.where(two, (b0 & 0x7F) | ((b1 & 0x7F) << 7), b0)
    length = (z >> 1) ^ -(z & 1)
    return (length + 1 + two == stride) & ~(two & (b1 >= 0x80))


class _Fields(NamedTuple):
    od: np.ndarray
    tsd: np.ndarray
    kstart: np.ndarray
    klen: np.ndarray
    vstart: np.ndarray
    vlen: np.ndarray
    headers: dict[int, tuple]  # row -> headers, only for rows that have any


def _parse_np(data: Buffer, arr: np.ndarray, starts: np.ndarray, limit: int) -> _Fields:
    """Decode the fields of the records at ``starts`` (which tile their batches) column-wise."""
    lengths, p = decode_varints_np(arr, starts, limit)
    rec_end = starts + p + lengths
    p = starts + p + 1  # skip the attributes byte
    tsd, sz = decode_varints_np(arr, p, limit, MAX_VARLONG_BYTES)
    p = p + sz
    od, sz = decode_varints_np(arr, p, limit)
    p = p + sz
    klen, sz = decode_varints_np(arr, p, limit)
    kstart = p + sz
    p = kstart + np.maximum(klen, 0)
    vlen, sz = decode_varints_np(arr, p, limit)
    vstart = p + sz
    p = vstart + np.maximum(vlen, 0)
    hcount, sz = decode_varints_np(arr, p, limit)
    p = p + sz
    if (klen < -1).any() or (vlen < -1).any() or (hcount < 0).any():
        raise CorruptRecordError("negative key, value or header count in a record")
    headers: dict[int, tuple] = {}
    with_headers = np.flatnonzero(hcount)
    if len(with_headers):
        p = p.copy()
        for row in with_headers.tolist():
            count = int(hcount[row])
            if count > rec_end[row] - p[row]:
                raise CorruptRecordError(f"invalid header count {count}")
            headers[row], p[row] = _read_headers(data, int(p[row]), count)
    if (p != rec_end).any():
        raise CorruptRecordError("a record's fields do not add up to its length")
    return _Fields(od, tsd, kstart, klen, vstart, vlen, headers)


def _check_offset_deltas(od: np.ndarray | list, last_offset_delta: int) -> None:
    # Offsets inside a batch increase; compaction may leave holes, never disorder.
    if isinstance(od, list):
        if od and (od[0] < 0 or od[-1] > last_offset_delta or any(b <= a for a, b in zip(od, od[1:], strict=False))):
            raise CorruptRecordError(f"offset deltas {od[:3]}... not increasing within 0..{last_offset_delta}")
        return
    if len(od) and (od[0] < 0 or od[-1] > last_offset_delta or (np.diff(od) <= 0).any()):
        raise CorruptRecordError(f"offset deltas not increasing within 0..{last_offset_delta}")


class RecordsSummary(NamedTuple):
    """What walking every record of one batch found: what the broker's LogValidator needs."""

    max_timestamp: int  # the largest record timestamp (CreateTime); NO_TIMESTAMP without records
    null_keys: int  # records without a key
    offsets_in_order: bool  # the offset deltas are exactly 0, 1, ..., recordsCount - 1


def walk_records(buf: Buffer, header: BatchHeader, max_decompressed: int | None = None) -> RecordsSummary:
    """Decompress and parse every record of the batch ``header`` describes in ``buf``.

    The same parser the readers use: the records must tile the (decompressed) body
    exactly, be as many as recordsCount and have sane field lengths; anything else raises
    CorruptRecordError. The offset deltas are reported, not checked: a producer's batch
    must number its records 0..n-1 (the broker refuses others as INVALID_RECORD), a
    compacted one may have holes. A batch whose deltas are in order is one the readers
    accept. Keys and values are not copied out. A compressed body that would expand past
    ``max_decompressed`` bytes is RecordTooLargeError, found while decompressing.
    """
    start, end = header.position + HEADER_SIZE, header.position + header.size
    count = header.records_count
    data: Buffer
    if header.compression:
        data = compression.decompress(header.compression, memoryview(buf)[start:end], max_decompressed)
        start, end = 0, len(data)
    else:
        data = buf
    if count == 0:
        if start != end:
            raise CorruptRecordError(f"{end - start} bytes in a batch of 0 records")
        return RecordsSummary(NO_TIMESTAMP, 0, True)
    return _tuple_new(RecordsSummary, _walk_records(data, start, end, header))


def _walk_records(data: Buffer, start: int, end: int, header: BatchHeader) -> tuple[int, int, bool]:
    """``walk_records``' loop over the (one or more) records tiling data[start:end].

    Returns (largest timestamp, records without a key, offset deltas exactly 0..n-1).
    """
    count = header.records_count
    if count < _NUMPY_MIN_RECORDS:
        ods, tsds, keys, _, _ = _parse_py(data, start, end, count)
        return header.base_timestamp + max(tsds), keys.count(None), ods == list(range(count))
    arr = np.frombuffer(data, np.uint8)
    f = _parse_np(data, arr, _locate(data, arr, start, end, count), end)
    return (
        header.base_timestamp + int(f.tsd.max()),
        int(np.count_nonzero(f.klen < 0)),
        bool((f.od == np.arange(count)).all()),
    )


# ---------------------------------------------------------------------------------------
# Reading batches
# ---------------------------------------------------------------------------------------


class RecordBatch:
    """One v2 record batch at ``position`` in ``buf``, decoded lazily.

    Construction reads and sanity-checks the header only (magic, length within ``buf``,
    codec); ``validate()`` checks the CRC; iterating decompresses (once) and decodes the
    records.
    """

    __slots__ = ("_buf", "header", "_parsed", "_region_cache")

    def __init__(self, buf: Buffer, position: int = 0) -> None:
        end = len(buf)
        if position < 0 or end - position < MAGIC_OFFSET + 1:
            raise CorruptRecordError(f"truncated batch at byte {position}: {end - position} bytes")
        magic = buf[position + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            raise UnknownMagicError(f"batch at byte {position} has magic {magic}; expected {CURRENT_MAGIC}")
        if end - position < HEADER_SIZE:
            raise CorruptRecordError(f"truncated batch header at byte {position}: {end - position} bytes")
        header = read_header(buf, position)
        if header.batch_length < MIN_BATCH_LENGTH or position + header.size > end:
            raise CorruptRecordError(
                f"batch at byte {position} has batchLength {header.batch_length}; {end - position} bytes available"
            )
        if header.records_count < 0 or header.last_offset_delta < 0 or header.compression > 4:
            raise CorruptRecordError(f"batch at byte {position} has an invalid header: {header}")
        self._buf = buf
        self.header: BatchHeader = header
        self._parsed: tuple | None = None
        self._region_cache: tuple[bytes, int, int] | None = None

    # -- header fields ------------------------------------------------------------------
    @property
    def base_offset(self) -> int:
        """Offset of the batch's first record."""
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record (as lastOffsetDelta says, even if compacted away)."""
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        """Offset just past the batch."""
        return self.header.next_offset

    @property
    def compression(self) -> int:
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.header.compression

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return self.header.timestamp_type

    @property
    def is_transactional(self) -> bool:
        """Whether the batch belongs to a transaction."""
        return self.header.is_transactional

    @property
    def is_control(self) -> bool:
        """Whether the batch is a control (commit/abort marker) batch."""
        return self.header.is_control

    @property
    def producer_id(self) -> int:
        """Producer id, -1 without idempotence."""
        return self.header.producer_id

    @property
    def producer_epoch(self) -> int:
        """Producer epoch, -1 without idempotence."""
        return self.header.producer_epoch

    @property
    def base_sequence(self) -> int:
        """Sequence number of the first record, -1 without idempotence."""
        return self.header.base_sequence

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp, or the LogAppendTime."""
        return self.header.max_timestamp

    @property
    def size(self) -> int:
        """Bytes the batch takes, header included."""
        return self.header.size

    def __len__(self) -> int:
        return self.header.records_count

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(base_offset={h.base_offset}, last_offset={h.last_offset}, count={h.records_count}, "
            f"compression={compression.CODEC_NAMES[h.compression]}, size={h.size})"
        )

    # -- validation and records -----------------------------------------------------------
    def validate(self) -> None:
        """Check the header and CRC-32C; raise CorruptRecordError (or a subclass) if bad."""
        h = self.header
        check_batch(self._buf, h.position, h.position + h.size, 2**31 - 1)

    def _region(self) -> tuple[bytes, int, int]:
        """The records bytes (decompressed, once, if need be) and their span within them."""
        if self._region_cache is None:
            h = self.header
            start, end = h.position + HEADER_SIZE, h.position + h.size
            buf = self._buf
            if h.compression:
                data = compression.decompress(h.compression, memoryview(buf)[start:end])
                self._region_cache = (data, 0, len(data))
            elif type(buf) is not bytes:
                # Slices of bytes are bytes; other buffers are copied once here.
                self._region_cache = (bytes(memoryview(buf)[start:end]), 0, end - start)
            else:
                self._region_cache = (buf, start, end)
        return self._region_cache

    def _decode(self) -> tuple[list, list, list, list, list]:
        """The records as columns (offsets, timestamps, keys, values, headers), decoded once."""
        if self._parsed is None:
            data, pos, end = self._region()
            self._parsed = _decode_records(data, pos, end, self.header)
        return self._parsed

    def records(self) -> Iterator[Record]:
        """The batch's records (decompressing once); the whole batch is checked before the first."""
        return _iter_records(Record, *self._region(), self.header)

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def control_record(self) -> ControlRecord:
        """The marker of a control batch: (version, type 0 abort / 1 commit, coordinator epoch)."""
        if not self.is_control:
            raise ValueError("not a control batch")
        records = list(self.records())
        if len(records) != 1:
            raise CorruptRecordError(f"control batch holds {len(records)} records, expected 1")
        key, value = records[0].key, records[0].value
        if key is None or len(key) < 4:
            raise CorruptRecordError("control record key is shorter than 4 bytes")
        version, kind = _CONTROL_KEY.unpack_from(key)
        coordinator_epoch = 0
        if kind in (0, 1):
            if value is None or len(value) < 6:
                raise CorruptRecordError("end-transaction marker value is shorter than 6 bytes")
            _, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
        return ControlRecord(version, kind, coordinator_epoch)


def _decode_records(data: bytes, pos: int, end: int, h: BatchHeader) -> tuple[list, list, list, list, list]:
    """The ``h.records_count`` records tiling data[pos:end] as lists: offsets, timestamps,
    keys, values, headers. Raises CorruptRecordError unless they are well formed, with
    offset deltas increasing within 0..lastOffsetDelta."""
    count = h.records_count
    base, base_ts = h.base_offset, h.base_timestamp
    if count < _NUMPY_MIN_RECORDS:
        ods, tsds, keys, values, headers = _parse_py(data, pos, end, count)
        _check_offset_deltas(ods, h.last_offset_delta)
        offsets, timestamps = [base + d for d in ods], [base_ts + d for d in tsds]
    else:
        arr = np.frombuffer(data, np.uint8)
        starts = _locate(data, arr, pos, end, count)
        f = _parse_np(data, arr, starts, end)
        _check_offset_deltas(f.od, h.last_offset_delta)
        offsets, timestamps = (f.od + base).tolist(), (f.tsd + base_ts).tolist()
        keys = _slices(data, f.kstart.tolist(), f.klen.tolist())
        values = _slices(data, f.vstart.tolist(), f.vlen.tolist())
        headers = [()] * count
        for row, hs in f.headers.items():
            headers[row] = hs
    if h.timestamp_type == LOG_APPEND_TIME:
        # Kafka gives every record of a LogAppendTime batch the batch's maxTimestamp.
        timestamps = [h.max_timestamp] * count
    return offsets, timestamps, keys, values, headers


def _iter_records(record_type: type[Record], data: bytes, pos: int, end: int, h: BatchHeader) -> Iterator[Record]:
    """The records of ``_decode_records`` (checked, all of them, now) as ``record_type``
    tuples (Record), one built per step."""
    return map(_tuple_new, repeat(record_type), zip(*_decode_records(data, pos, end, h), strict=True))


def _slices(data: bytes, starts: list[int], lengths: list[int]) -> list[bytes | None]:
    if not lengths or min(lengths) >= 0:
        return [data[s : s + n] for s, n in zip(starts, lengths, strict=False)]
    if max(lengths) < 0:
        return [None] * len(lengths)
    return [data[s : s + n] if n >= 0 else None for s, n in zip(starts, lengths, strict=False)]


def iter_batches(buf: Buffer, *, check_crc: bool = True) -> Iterator[RecordBatch]:
    """The batches of a buffer of consecutive batches, each validated when ``check_crc``.

    A partial batch at the end (a fetch cut at ``max_bytes``) is ignored, as Kafka's
    consumer does.
    """
    position, end = 0, len(buf)
    while end - position >= LOG_OVERHEAD:
        size = _INT32.unpack_from(buf, position + 8)[0] + LOG_OVERHEAD
        if size >= LOG_OVERHEAD and position + size > end:
            return
        batch = RecordBatch(buf, position)
        if check_crc:
            batch.validate()
        yield batch
        position += batch.size


# ---------------------------------------------------------------------------------------
# Columnar decoding
# ---------------------------------------------------------------------------------------


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


def decode_columns(
    buf: Buffer, *, headers: bool = False, check_crc: bool = True, min_offset: int | None = None
) -> RecordColumns:
    """Decode every record of a buffer of consecutive batches into columns.

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
    if not spans:
        empty = np.zeros(0, np.int64)
        return RecordColumns(
            empty,
            empty.copy(),
            np.zeros(0, np.int32),
            pa.nulls(0, pa.binary()),
            pa.nulls(0, pa.binary()),
            pa.nulls(0, HEADERS_TYPE) if headers else None,
        )
    arr = np.frombuffer(data_all, np.uint8)
    offsets, timestamps, ts_type_rows, kstart, klen, vstart, vlen, row_headers = _parse_columns(data_all, arr, spans)

    keep: np.ndarray | None = None
    if min_offset is not None and len(offsets) and offsets[0] < min_offset:
        keep = np.flatnonzero(offsets >= min_offset)
    rows = np.arange(len(offsets))
    if keep is not None:
        offsets, timestamps, ts_type_rows = offsets[keep], timestamps[keep], ts_type_rows[keep]
        kstart, klen, vstart, vlen, rows = kstart[keep], klen[keep], vstart[keep], vlen[keep], keep
    header_column = None
    if headers:
        if row_headers:
            lists = [[{"key": k, "value": v} for k, v in row_headers.get(r, ())] for r in rows.tolist()]
            header_column = pa.array(lists, HEADERS_TYPE)
        else:
            # Every list empty: all offsets 0, no struct values.
            header_column = pa.ListArray.from_arrays(
                pa.array(np.zeros(len(rows) + 1, np.int32)), pa.array([], HEADERS_TYPE.value_type)
            )
    return RecordColumns(
        offsets,
        timestamps,
        ts_type_rows,
        _binary_column(arr, kstart, klen),
        _binary_column(arr, vstart, vlen),
        header_column,
    )


def _parse_columns(data: Buffer, arr: np.ndarray, spans: list[tuple[int, int, BatchHeader]]) -> tuple:
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


# ---------------------------------------------------------------------------------------
# Building batches
# ---------------------------------------------------------------------------------------

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

    def __len__(self) -> int:
        return self._count

    def estimated_size(self) -> int:
        """Size of the batch if built now without compression (an upper bound with it)."""
        return HEADER_SIZE + self._size

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

    def build(self) -> bytes:
        """The batch's bytes: records joined, compressed, header and CRC-32C written.

        An empty builder builds ``b""`` (no batch), as Kafka's MemoryRecordsBuilder does.
        """
        if not self._count:
            return b""
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
        crc = _crc32c.crc32c(region, _crc32c.crc32c(memoryview(head)[21:]))
        struct.pack_into(">I", head, 17, crc)
        head += region
        return bytes(head)


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
    values = vcol.items
    if values is None:
        data = vcol.data.tobytes()
        values = _slices(data, vcol.starts.tolist(), vcol.lengths.tolist())
    if kcol is None:
        keys: list = [None] * len(values)
    else:
        keys = kcol.items
        if keys is None:
            kdata = kcol.data.tobytes()
            keys = _slices(kdata, kcol.starts.tolist(), kcol.lengths.tolist())
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


# ---------------------------------------------------------------------------------------
# Control batches
# ---------------------------------------------------------------------------------------


def build_control_batch(
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A commit or abort marker batch, as Kafka's transaction coordinator has brokers write.

    Transactional and control attributes set, one record: key = version int16 0 + type
    int16 (0 abort, 1 commit), value = version int16 0 + coordinatorEpoch int32.
    """
    builder = RecordBatchBuilder(
        0,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
    builder.append(
        _CONTROL_VALUE.pack(0, coordinator_epoch),
        key=_CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT),
        timestamp=timestamp,
    )
    return builder.build()


def committed_batches(
    data: bytes, bounds: Sequence[tuple[int, int]], aborted: Iterable[tuple[int, int]]
) -> bytes | memoryview:
    """The batches of ``data`` a read_committed reader may see (as Kafka's client Fetcher filters).

    ``bounds`` are the batches' (position, size) (``batch_boundaries(data)``); ``aborted``
    lists (producer id, first offset) of the aborted transactions overlapping the fetch,
    as a fetch answer carries them. Walking the batches in order, every aborted transaction
    that begins at or before a batch's last offset marks its producer as aborted; a
    transactional batch of an aborted producer is dropped; that producer's ABORT marker
    ends the drop. Control batches go as well (the decoder would skip them anyway). Per-batch
    work only; ``data`` itself comes back when nothing is dropped.
    """
    queue = sorted(aborted, key=lambda t: t[1])
    next_txn = 0
    aborted_pids: set[int] = set()
    kept: list[tuple[int, int]] = []
    for position, size in bounds:
        header = read_header(data, position)
        if header.producer_id != NO_PRODUCER_ID:
            last = header.last_offset
            while next_txn < len(queue) and queue[next_txn][1] <= last:
                aborted_pids.add(queue[next_txn][0])
                next_txn += 1
            if header.is_control:
                if RecordBatch(data, position).control_record().type == CONTROL_ABORT:
                    aborted_pids.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted_pids:
                continue
        if kept and kept[-1][1] == position:
            kept[-1] = (kept[-1][0], position + size)
        else:
            kept.append((position, position + size))
    if bounds and len(kept) == 1 and kept[0] == (0, bounds[-1][0] + bounds[-1][1]):
        return data
    view = memoryview(data)
    return b"".join(view[start:end] for start, end in kept)


# The compiled twin (storage/_compiled/record_batch.pyx), when built: the builder, and the
# per-record loops of iteration (decoding, then one Record per step), the leader's walk and
# decode_columns.
bind(
    globals(),
    load(__name__, "storage._compiled.record_batch"),
    ("RecordBatchBuilder", "_decode_records", "_iter_records", "_walk_records", "_parse_columns"),
)

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "ControlRecord",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordColumns",
    "RecordsSummary",
    "build_control_batch",
    "committed_batches",
    "decode_columns",
    "iter_batches",
    "walk_records",
]
