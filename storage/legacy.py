"""Legacy message sets (message format v0 and v1, magic 0 and 1): reading and up-conversion.

A legacy message set is a sequence of ``offset int64 | messageSize int32 | message``,
where a message is::

    crc uint32 (CRC-32 of magic..end) | magic int8 | attributes int8
    | timestamp int64 (magic 1 only) | key int32-length bytes | value int32-length bytes

Attribute bits 0-2 name a codec (gzip, snappy, lz4); such a "wrapper" message's value is a
whole compressed message set. KIP-31 made the inner offsets of a magic 1 wrapper relative
(0, 1, ...) with the wrapper carrying the absolute offset of the last one; magic 0 inner
offsets are absolute. KIP-32 added the timestamp and bit 3, LogAppendTime, with which every
inner message takes the wrapper's timestamp.

``upconvert`` rewrites such a set as v2 batches, as a Kafka 3.x broker does on append:
one batch per wrapper (same codec) and one per run of uncompressed messages.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from storage import compression
from storage.batch_header import CREATE_TIME, LOG_APPEND_TIME, MAGIC_OFFSET, NO_TIMESTAMP
from storage.errors import CorruptRecordError, UnknownMagicError
from storage.records import Buffer
from storage.records.builder import RecordBatchBuilder
from storage.records.reader import Record

_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_INT32 = struct.Struct(">i")
LOG_OVERHEAD = 12
_MIN_SIZE = {0: 14, 1: 22}  # crc + magic + attributes (+ timestamp) + two lengths
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08


@dataclass(frozen=True, slots=True)
class LegacyRecord:
    """One record of a legacy message set, with absolute offset."""

    offset: int
    timestamp: int  # -1 for magic 0
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    magic: int
    compression: int  # codec of the wrapper the record came in, 0 if none

    def to_record(self) -> Record:
        """The same record as a v2 ``Record`` (no headers)."""
        return Record(self.offset, self.timestamp, self.key, self.value, ())


def is_legacy(buf: Buffer) -> bool:
    """Whether ``buf`` starts with a legacy (magic 0 or 1) message rather than a v2 batch."""
    return len(buf) > MAGIC_OFFSET and buf[MAGIC_OFFSET] < 2


def _read_bytes(buf: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise CorruptRecordError("legacy message truncated in a length field")
    (length,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise CorruptRecordError(f"legacy message field of {length} bytes runs past the message")
    return bytes(buf[pos : pos + length]), pos + length


def _lz4_decode_legacy(data: bytes, magic: int) -> bytes:
    try:
        return compression.decompress(compression.LZ4, data)
    except CorruptRecordError:
        if magic != 0 or len(data) < 7:
            raise
    # Kafka 0.8-0.9 wrote a wrong LZ4 frame header checksum (over the magic number too).
    # The checksum is one byte after the frame descriptor: try each value rather than
    # reimplementing xxhash32's broken variant.
    hc_at = 6 + (8 if data[4] & 0x08 else 0)
    for guess in range(256):
        patched = data[:hc_at] + bytes((guess,)) + data[hc_at + 1 :]
        try:
            return compression.decompress(compression.LZ4, patched)
        except CorruptRecordError:
            continue
    raise CorruptRecordError("lz4 wrapper message does not decompress")


def _messages(
    buf: Buffer, pos: int, end: int, inner: bool
) -> Iterator[tuple[int, int, int, int, bytes | None, bytes | None]]:
    """(offset, magic, attributes, timestamp, key, value) of each whole message in buf[pos:end]."""
    while end - pos >= LOG_OVERHEAD:
        offset, size = struct.unpack_from(">qi", buf, pos)
        if size < 0 or pos + LOG_OVERHEAD + size > end:
            if inner or size < 0:
                raise CorruptRecordError(f"legacy message at byte {pos} has size {size} past the end")
            return  # a partial message at the end, as a fetch cut at max_bytes leaves
        if size < 6:
            raise CorruptRecordError(f"legacy message at byte {pos} has size {size}")
        _, _, crc, magic, attributes = _ENTRY.unpack_from(buf, pos)
        msg_end = pos + LOG_OVERHEAD + size
        if magic not in (0, 1):
            raise UnknownMagicError(f"message at byte {pos} has magic {magic} in a legacy message set")
        if size < _MIN_SIZE[magic]:
            raise CorruptRecordError(f"magic {magic} message at byte {pos} has size {size}")
        if zlib.crc32(memoryview(buf)[pos + 16 : msg_end]) != crc:
            raise CorruptRecordError(f"CRC mismatch in legacy message at byte {pos}")
        q = pos + 18
        timestamp = NO_TIMESTAMP
        if magic == 1:
            (timestamp,) = _TIMESTAMP.unpack_from(buf, q)
            q += 8
        key, q = _read_bytes(buf, q, msg_end)
        value, q = _read_bytes(buf, q, msg_end)
        if q != msg_end:
            raise CorruptRecordError(f"legacy message at byte {pos} has {msg_end - q} trailing bytes")
        yield offset, magic, attributes, timestamp, key, value
        pos = msg_end
    if inner and pos != end:
        raise CorruptRecordError("compressed legacy message set ends in a partial message")


def _entries(buf: Buffer) -> Iterator[list[LegacyRecord]]:
    """Top-level messages of a legacy set: a wrapper's records as one list, else one record."""
    for offset, magic, attributes, timestamp, key, value in _messages(buf, 0, len(buf), inner=False):
        codec = attributes & _CODEC_MASK
        ts_type = LOG_APPEND_TIME if magic == 1 and attributes & _TIMESTAMP_TYPE_MASK else CREATE_TIME
        if codec == 0:
            yield [LegacyRecord(offset, timestamp, ts_type, key, value, magic, 0)]
            continue
        if codec > 3:
            raise CorruptRecordError(f"legacy message at offset {offset} has codec {codec}")
        if value is None:
            raise CorruptRecordError(f"compressed legacy message at offset {offset} has a null value")
        if codec == compression.LZ4:
            data = _lz4_decode_legacy(value, magic)
        else:
            data = compression.decompress(codec, value)
        inner = list(_messages(data, 0, len(data), inner=True))
        if not inner:
            raise CorruptRecordError(f"compressed legacy message at offset {offset} is empty")
        # Magic 1 inner offsets are relative; the wrapper holds the last one's absolute offset.
        shift = offset - inner[-1][0] if magic == 1 else 0
        records = []
        for inner_offset, inner_magic, inner_attributes, inner_ts, inner_key, inner_value in inner:
            if inner_attributes & _CODEC_MASK:
                raise CorruptRecordError(f"legacy message at offset {offset} is compressed twice")
            if inner_magic != magic:
                raise CorruptRecordError(f"inner message magic {inner_magic} differs from the wrapper's {magic}")
            ts = timestamp if ts_type == LOG_APPEND_TIME else inner_ts
            records.append(LegacyRecord(inner_offset + shift, ts, ts_type, inner_key, inner_value, magic, codec))
        yield records


def read_legacy(buf: Buffer) -> Iterator[LegacyRecord]:
    """Every record of a legacy (magic 0/1) message set, wrappers decompressed.

    Raises CorruptRecordError for a CRC mismatch or malformed message, UnknownMagicError
    for a magic other than 0 or 1. A partial message at the end is ignored.
    """
    for records in _entries(buf):
        yield from records


def upconvert(buf: Buffer) -> bytes:
    """Convert a legacy message set into v2 record batches, as a Kafka 3.x broker does.

    Each wrapper becomes one batch with the wrapper's codec; each run of uncompressed
    messages (with one timestamp type) becomes one uncompressed batch. Offsets are kept
    (gaps from compaction become offset-delta gaps); magic 0 records get timestamp -1.
    The whole set is decoded before any output is produced, so bad input yields an error
    and nothing else.
    """
    groups: list[list[LegacyRecord]] = []
    for records in _entries(buf):
        last = groups[-1] if groups else None
        if (
            records[0].compression == 0
            and last is not None
            and last[-1].compression == 0
            and last[-1].timestamp_type == records[0].timestamp_type
            and records[0].offset > last[-1].offset
            and records[0].offset - last[0].offset <= 2**31 - 1
        ):
            last.extend(records)
        else:
            groups.append(list(records))
    out = []
    for records in groups:
        base = records[0].offset
        if not 0 <= base <= 2**63 - 2**31:
            raise CorruptRecordError(f"legacy message offset {base} is out of range")
        builder = RecordBatchBuilder(records[0].compression, timestamp_type=records[0].timestamp_type, base_offset=base)
        previous = -1
        for r in records:
            delta = r.offset - base
            if delta <= previous or delta > 2**31 - 1:
                raise CorruptRecordError(f"legacy offsets not increasing at offset {r.offset}")
            builder.append(r.value, key=r.key, timestamp=r.timestamp, offset_delta=delta)
            previous = delta
        out.append(builder.build())
    return b"".join(out)


__all__ = ["LegacyRecord", "is_legacy", "read_legacy", "upconvert"]
