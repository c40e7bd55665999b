"""Reading record batches: one batch lazily (``RecordBatch``), a buffer of them
(``iter_batches``), the leader's walk over every record (``walk_records``) and the
read_committed filter (``committed_batches``).

The per-record loops are kernels over the batch's bytes with a compiled twin
(``storage/records/_compiled/reader.pyx``, picked at import: :mod:`storage.extensions`):
``_decode_records`` and ``_iter_records`` (iteration) and ``_walk_records`` (the walk).
The pure loops parse small batches record by record and larger ones a column at a time
with numpy (``_parse_np``, which :mod:`storage.records.columns` uses too).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from typing import NamedTuple

import numpy as np

from storage import compression
from storage.batch_header import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchHeader,
    check_batch,
    read_header,
)
from storage.errors import CorruptRecordError, UnknownMagicError
from storage.extensions import load, pick
from storage.records import Buffer, Header
from storage.records.control import CONTROL_ABORT, ControlRecord, parse_control_record
from storage.varint import MAX_VARLONG_BYTES, decode_varint, decode_varints_np, decode_varlong

_INT32 = struct.Struct(">i")
# The smallest possible record: length, attributes, timestampDelta, offsetDelta,
# keyLength, valueLength and headerCount, one byte each.
_MIN_RECORD_SIZE = 7
# Below this many records a batch is parsed by the pure-Python loop; numpy's fixed cost
# per call only pays off on larger batches.
_NUMPY_MIN_RECORDS = 48

# _NEXT[b]: for a one-byte record length b, the bytes from this record's start to the
# next one's (0 marks an illegal non-positive length).
_NEXT: list[int] = [0] * 128
for _b in range(128):
    _len = (_b >> 1) ^ -(_b & 1)
    _NEXT[_b] = 1 + _len if _len > 0 else 0
_DEC1: list[int] = [(_b >> 1) ^ -(_b & 1) for _b in range(128)]


class Record(NamedTuple):
    """One record of a batch: absolute offset and timestamp, key, value and headers.

    A named tuple (immutable, fields by name), built in C by ``tuple.__new__`` mapped over
    the decoded columns. Its compiled twin (``_compiled/reader.pyx``) is a C class that
    reads the same (fields, indexing, unpacking, equality with tuples, hash, repr) and is
    built as aiokafka builds its records: from a free list, its ints made only when read.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


_tuple_new = tuple.__new__
_PURE_RECORD = repeat(Record)


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


def _walk_records_py(data: Buffer, start: int, end: int, header: BatchHeader) -> tuple[int, int, bool]:
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
        return _iter_records(*self._region(), self.header)

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def control_record(self) -> ControlRecord:
        """The marker of a control batch: (version, type 0 abort / 1 commit, coordinator epoch)."""
        if not self.is_control:
            raise ValueError("not a control batch")
        records = list(self.records())
        if len(records) != 1:
            raise CorruptRecordError(f"control batch holds {len(records)} records, expected 1")
        return parse_control_record(records[0].key, records[0].value)


def _decode_records_py(data: bytes, pos: int, end: int, h: BatchHeader) -> tuple[list, list, list, list, list]:
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


def _iter_records_py(data: bytes, pos: int, end: int, h: BatchHeader) -> Iterator[Record]:
    """The records of ``_decode_records`` (checked, all of them, now) as Records, one
    built per step."""
    return map(_tuple_new, _PURE_RECORD, zip(*_decode_records_py(data, pos, end, h), strict=True))


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


# The per-record loops: the compiled kernels (storage/records/_compiled/reader.pyx) when
# built, else the pure ones above; chosen here, once.
_compiled = load(__name__, "storage.records._compiled.reader")
Record = pick(__name__, "Record", Record, _compiled, "Record")  # type: ignore[misc]
_decode_records = pick(__name__, "_decode_records", _decode_records_py, _compiled, "decode_records")
_iter_records = pick(__name__, "_iter_records", _iter_records_py, _compiled, "iter_records")
_walk_records = pick(__name__, "_walk_records", _walk_records_py, _compiled, "walk_records")

__all__ = [
    "Record",
    "RecordBatch",
    "RecordsSummary",
    "committed_batches",
    "iter_batches",
    "walk_records",
]
