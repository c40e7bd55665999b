"""Compression codecs: round trips, Kafka's framings, and errors."""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import compression
from storage.errors import CorruptRecordError, UnsupportedCompressionTypeError

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 100, 32 * 1024, 32 * 1024 + 1, 200_000])
def test_round_trip(codec: str, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    packed = compression.compress(codec, data)
    assert compression.decompress(codec, packed) == data
    assert compression.decompress(compression.codec_id(codec), memoryview(packed)) == data


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5000))
def test_round_trip_property(codec: str, data: bytes) -> None:
    assert compression.decompress(codec, compression.compress(codec, data)) == data


def test_codec_names_and_ids() -> None:
    assert [compression.codec_id(n) for n in CODECS] == [0, 1, 2, 3, 4]
    assert compression.codec_id(None) == 0
    assert compression.codec_id("uncompressed") == 0
    assert compression.codec_id("ZSTD") == 4
    assert [compression.codec_name(i) for i in range(5)] == CODECS
    with pytest.raises(UnsupportedCompressionTypeError):
        compression.codec_id("brotli")
    with pytest.raises(UnsupportedCompressionTypeError):
        compression.codec_id(5)
    with pytest.raises(UnsupportedCompressionTypeError):
        compression.compress(7, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        compression.decompress(6, b"x")


def test_snappy_writes_xerial_framing_as_snappy_java() -> None:
    data = b"abcdefgh" * 10_000  # 80 000 bytes: three 32 KiB blocks
    packed = compression.compress("snappy", data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert [len(b) for b in blocks] == [32768, 32768, 80000 - 65536]
    assert b"".join(blocks) == data


def test_snappy_reads_plain_raw_snappy() -> None:
    data = b"hello snappy " * 100
    assert compression.decompress("snappy", bytes(cramjam.snappy.compress_raw(data))) == data


def test_lz4_frame_as_kafka_writes_it() -> None:
    packed = compression.compress("lz4", b"z" * 1000)
    info = lz4.frame.get_frame_info(packed)
    assert info["block_linked"] is False
    assert info["content_checksum"] is False
    assert info["block_size_id"] == lz4.frame.BLOCKSIZE_MAX64KB


def test_gzip_is_standard_gzip_and_reads_multi_member() -> None:
    data = b"gzip me " * 50
    assert gzip.decompress(compression.compress("gzip", data)) == data
    two = gzip.compress(b"first ") + gzip.compress(b"second")
    assert compression.decompress("gzip", two) == b"first second"


def test_zstd_reads_frames_without_content_size() -> None:
    cobj = zstandard.ZstdCompressor().compressobj()
    frame = cobj.compress(b"streamed " * 100) + cobj.flush()
    assert compression.decompress("zstd", frame) == b"streamed " * 100


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("garbage", [b"", b"\x00", b"not compressed at all", b"\x82SNAPPY\x00\x00\x00\x00\x01"])
def test_garbage_is_corrupt_record(codec: str, garbage: bytes) -> None:
    if codec == "snappy" and garbage == b"\x00":
        pytest.skip("a single zero byte is the valid raw snappy encoding of b''")
    with pytest.raises(CorruptRecordError):
        compression.decompress(codec, garbage)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_is_corrupt_record(codec: str) -> None:
    packed = compression.compress(codec, bytes(range(256)) * 40)
    with pytest.raises(CorruptRecordError):
        compression.decompress(codec, packed[: len(packed) // 2])
