"""Legacy message sets (magic 0/1): reading, CRC-32 checks, relative offsets, up-conversion."""

from __future__ import annotations

import struct

import pytest
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from storage.errors import CorruptRecordError, UnknownMagicError
from storage.legacy import is_legacy, read_legacy, upconvert
from storage.records.builder import RecordBatchBuilder
from storage.records.reader import iter_batches

CASES = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)]


def legacy_set(magic: int, codec: int, n: int = 6, wrapper_offset: int | None = None, ts_type: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(n):
        builder.append(i, 1000 + i, None if i == 2 else b"k%d" % i, None if i == 4 else b"v%d" % i)
    data = bytearray(builder.build())
    if codec and wrapper_offset is not None:
        # A broker stores the wrapper with the absolute offset of its last inner message.
        struct.pack_into(">q", data, 0, wrapper_offset)
    if ts_type:
        data[17] |= 0x08
        struct.pack_into(">q", data, 18, 5555)
        struct.pack_into(">I", data, 12, __import__("zlib").crc32(memoryview(data)[16:]))
    return bytes(data)


def kafka_python_read(buf: bytes, magic: int) -> list[tuple]:
    out, pos = [], 0
    while pos < len(buf):
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        for r in LegacyRecordBatch(buf[pos : pos + 12 + size], magic):
            ts = -1 if r.timestamp is None else r.timestamp
            out.append((r.offset, ts, r.key, r.value))
        pos += 12 + size
    return out


@pytest.mark.parametrize("magic,codec", CASES)
def test_read_matches_kafka_python(magic: int, codec: int) -> None:
    buf = legacy_set(magic, codec, wrapper_offset=105 if magic == 1 else None)
    assert is_legacy(buf)
    ours = [(r.offset, r.timestamp, r.key, r.value) for r in read_legacy(buf)]
    assert ours == kafka_python_read(buf, magic)
    if magic == 1 and codec:
        assert [o for o, *_ in ours] == list(range(100, 106))  # relative -> absolute
    if magic == 0:
        assert {t for _, t, *_ in ours} == {-1}
    assert [r.key for r in read_legacy(buf)] == [b"k0", b"k1", None, b"k3", b"k4", b"k5"]


@pytest.mark.parametrize("magic,codec", CASES)
def test_upconvert(magic: int, codec: int) -> None:
    buf = legacy_set(magic, codec, wrapper_offset=105 if magic == 1 else None)
    v2 = upconvert(buf)
    assert not is_legacy(v2)
    batches = list(iter_batches(v2))
    assert len(batches) == 1 and batches[0].compression == codec
    expected = [(r.offset, r.timestamp, r.key, r.value) for r in read_legacy(buf)]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batches[0]] == expected


def test_log_append_time_wrapper_stamps_inner_messages() -> None:
    buf = legacy_set(1, 1, wrapper_offset=5, ts_type=1)
    assert {r.timestamp for r in read_legacy(buf)} == {5555}
    (batch,) = list(iter_batches(upconvert(buf)))
    assert batch.timestamp_type == 1 and {r.timestamp for r in batch} == {5555}


def test_upconvert_groups_runs_and_wrappers() -> None:
    plain = legacy_set(1, 0, n=3)
    wrapped = legacy_set(1, 2, n=4, wrapper_offset=6)
    later_plain = bytearray(legacy_set(1, 0, n=2))
    for pos, offset in ((0, 9), (len(later_plain) // 2, 12)):  # leave a compaction gap at 10, 11
        struct.pack_into(">q", later_plain, pos, offset)
    buf = plain + wrapped + bytes(later_plain)
    batches = list(iter_batches(upconvert(buf)))
    assert [(b.base_offset, b.last_offset, b.compression) for b in batches] == [(0, 2, 0), (3, 6, 2), (9, 12, 0)]
    assert [r.offset for b in batches for r in b] == [0, 1, 2, 3, 4, 5, 6, 9, 12]


def test_crc_mismatch_and_truncation() -> None:
    buf = bytearray(legacy_set(1, 0))
    buf[30] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(read_legacy(bytes(buf)))
    with pytest.raises(CorruptRecordError):
        upconvert(bytes(buf))
    good = legacy_set(1, 0, n=2)
    # A partial message at the end is a fetch cut short, not corruption.
    assert len(list(read_legacy(good[:-3]))) == 1


def test_bad_magic_and_v2_input() -> None:
    buf = bytearray(legacy_set(0, 0, n=1))
    buf[16] = 7
    with pytest.raises(UnknownMagicError):
        list(read_legacy(bytes(buf)))
    builder = RecordBatchBuilder()
    builder.append(b"x")
    assert not is_legacy(builder.build())
    assert not is_legacy(b"short")


def test_corrupt_wrapper_payload() -> None:
    buf = bytearray(legacy_set(1, 1, wrapper_offset=5))
    buf[-5] ^= 0xFF  # inside the gzip data
    struct.pack_into(">I", buf, 12, __import__("zlib").crc32(memoryview(buf)[16:]))
    with pytest.raises(CorruptRecordError):
        list(read_legacy(bytes(buf)))
