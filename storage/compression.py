"""Compression codecs of record batches: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Bytes are written the way Kafka's Java client writes them, so a Java consumer reads ours:

* gzip: one gzip member (level 6, the JDK's default);
* snappy: snappy-java's "xerial" stream framing, which Kafka's Java client uses: the
  header ``\\x82SNAPPY\\x00`` + int32 version 1 + int32 compatible-version 1, then for each
  32 KiB input block an int32 length and the raw snappy block. Plain raw snappy (written
  by some non-Java clients) is read too;
* lz4: the LZ4 frame format with independent 64 KiB blocks and no checksums besides the
  header's, as ``KafkaLZ4BlockOutputStream`` writes;
* zstd: one zstd frame.

Any decompression failure is a corrupt batch: it surfaces as CorruptRecordError, never as
a codec library's own exception type.

``decompress`` can be told the most bytes it may produce (the leader validating a client's
batch): gzip, lz4 and zstd can expand a megabyte into gigabytes (zstd's run-length blocks
about 32,000 to 1), and a broker must not run out of memory on one request. The bound is
kept while decompressing, never after; it does not change what decompresses.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from storage.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionTypeError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

CODEC_NAMES: dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: dict[str, int] = {name: codec for codec, name in CODEC_NAMES.items()}
# Kafka's topic config spells "none" as "uncompressed".
CODEC_IDS["uncompressed"] = NONE

GZIP_LEVEL = 6
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default block size
_INT32 = struct.Struct(">i")

Buffer = bytes | bytearray | memoryview


def codec_id(codec: int | str | None) -> int:
    """The numeric id of a codec given by id or name (``None`` means no compression)."""
    if codec is None:
        return NONE
    if isinstance(codec, str):
        try:
            return CODEC_IDS[codec.strip().lower()]
        except KeyError:
            raise UnsupportedCompressionTypeError(
                f"unknown compression type {codec!r}; expected one of {', '.join(CODEC_NAMES.values())}"
            ) from None
    if isinstance(codec, int) and not isinstance(codec, bool) and codec in CODEC_NAMES:
        return codec
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec!r}")


def codec_name(codec: int | str | None) -> str:
    """The name (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``) of a codec given by id or name."""
    return CODEC_NAMES[codec_id(codec)]


def _snappy_xerial(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decode(data: Buffer) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    # Version and compatible-version are not checked: snappy-java only ever wrote 1, and
    # some producers are known to write them little-endian.
    if len(view) < 16:
        raise CorruptRecordError("truncated xerial snappy header")
    parts = []
    pos, end = 16, len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes runs past the data")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)


def _gzip_encode(data: Buffer) -> bytes:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: gzip container
    return compressor.compress(data) + compressor.flush()


def _too_large(max_size: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"compressed records expand to more than {max_size} bytes")


def _gzip_decode(data: Buffer, max_size: int | None = None) -> bytes:
    parts = []
    rest: Buffer = data
    left = max_size
    # A gzip stream may hold several members back to back; read them all.
    while True:
        decompressor = zlib.decompressobj(47)  # 47: accept a gzip or zlib header
        if left is None:
            parts.append(decompressor.decompress(rest))
        else:
            # One byte more than allowed: getting it means the member goes on past the bound.
            part = decompressor.decompress(rest, left + 1)
            if len(part) > left:
                raise _too_large(max_size)  # type: ignore[arg-type]
            parts.append(part)
            left -= len(part)
        if not decompressor.eof:
            raise CorruptRecordError("truncated gzip data")
        rest = decompressor.unused_data
        if not rest:
            return b"".join(parts)


def _zstd_decode(data: Buffer, max_size: int | None = None) -> bytes:
    if not len(data):
        raise CorruptRecordError("empty zstd data")
    parts = []
    rest: Buffer = data
    made = 0
    # Frames written by streaming encoders (zstd-jni's) carry no content size, which
    # ZstdDecompressor.decompress needs, so use the streaming decompressor, frame by frame.
    while rest:
        decompressor = _ZSTD_D.decompressobj()
        if max_size is None:
            parts.append(decompressor.decompress(rest))
        else:
            # Its decompress takes no output bound: feed the input in pieces small enough
            # that one piece cannot expand past what is left of the bound.
            view, at = memoryview(rest), 0
            while not decompressor.eof and at < len(view):
                step = max(_ZSTD_MIN_PIECE, (max_size - made) // _ZSTD_MAX_RATIO)
                part = decompressor.decompress(view[at : at + step])
                at += step
                made += len(part)
                if made > max_size:
                    raise _too_large(max_size)
                parts.append(part)
            if decompressor.eof:
                rest = decompressor.unused_data + view[at:]
                continue
        if not decompressor.eof:
            raise CorruptRecordError("truncated zstd frame")
        rest = decompressor.unused_data
    return b"".join(parts)


# A zstd block of at most 128 KiB can be an RLE block of 4 bytes: at most this expansion.
_ZSTD_MAX_RATIO = 32 * 1024
_ZSTD_MIN_PIECE = 1024
_ZSTD_C = zstandard.ZstdCompressor(level=3)
_ZSTD_D = zstandard.ZstdDecompressor()


def compress(codec: int | str | None, data: Buffer) -> bytes:
    """Compress ``data`` with ``codec`` (id or name) as Kafka's Java client would."""
    c = codec_id(codec)
    if c == NONE:
        return bytes(data)
    if c == GZIP:
        return _gzip_encode(data)
    if c == SNAPPY:
        return _snappy_xerial(data)
    if c == LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return _ZSTD_C.compress(data)


def decompress(codec: int | str | None, data: Buffer, max_size: int | None = None) -> bytes:
    """Decompress ``data`` written with ``codec``.

    Raises UnsupportedCompressionTypeError for an unknown codec and CorruptRecordError when
    the data does not decompress. With ``max_size``, RecordTooLargeError as soon as the
    output would grow past it (snappy cannot expand past 32 to 1 and is not bounded).
    """
    c = codec_id(codec)
    try:
        if c == NONE:
            return bytes(data)
        if c == GZIP:
            return _gzip_decode(data, max_size)
        if c == SNAPPY:
            return _snappy_decode(data)
        if c == LZ4:
            if max_size is None:
                return lz4.frame.decompress(data)
            decompressor = lz4.frame.LZ4FrameDecompressor()
            out = decompressor.decompress(data, max_length=max_size + 1)
            if len(out) > max_size:
                raise _too_large(max_size)
            if not decompressor.eof:  # as lz4.frame.decompress: the first frame, whole
                raise CorruptRecordError("truncated lz4 frame")
            return out
        return _zstd_decode(data, max_size)
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except Exception as exc:  # zlib.error, cramjam.DecompressionError, RuntimeError, ZstdError, ...
        raise CorruptRecordError(f"{CODEC_NAMES[c]} data does not decompress: {exc}") from None
