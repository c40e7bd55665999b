"""Zig-zag varints as Kafka's records use them (protobuf's encoding), scalar and vectorized.

Record fields (lengths, offset and timestamp deltas, header counts) are zig-zag varints:
``n`` is mapped to ``(n << 1) ^ (n >> 63)`` so small negative numbers (``-1`` marks a null
key or value) stay short, then written 7 bits at a time, low group first, with the high
bit set on every byte but the last. A varint (int32) takes at most 5 bytes, a varlong
(int64, used for timestampDelta) at most 10.

The scalar encoder is table driven: the byte strings of every value the hot path meets
(``-64 .. 16383``: nulls, lengths and deltas of ordinary records) are precomputed, so
encoding one is a list index. The numpy functions encode or decode whole columns at once
for the columnar batch codec.
"""

from __future__ import annotations

import numpy as np

from storage.errors import CorruptRecordError

TABLE_MIN = -64
TABLE_MAX = 1 << 14  # exclusive; values up to 16 KiB cover the lengths of typical records
MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10
_MASK64 = (1 << 64) - 1


def _encode_slow(value: int) -> bytes:
    # Mask to 64 bits first so the zig-zag of a negative Python int is the unsigned image
    # Java's ``(v << 1) ^ (v >> 63)`` gives.
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# _TABLE[v - TABLE_MIN] is the encoding of v.
_TABLE: list[bytes] = [_encode_slow(v) for v in range(TABLE_MIN, TABLE_MAX)]
# Zig-zag decoding of the one-byte varints 0x00..0x7f.
_DECODE1: list[int] = [(b >> 1) ^ -(b & 1) for b in range(128)]


def encode_varint(value: int) -> bytes:
    """The zig-zag varint bytes of ``value`` (also right for varlongs)."""
    if TABLE_MIN <= value < TABLE_MAX:
        return _TABLE[value - TABLE_MIN]
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{value} does not fit a varlong")
    return _encode_slow(value)


encode_varlong = encode_varint


def varint_table() -> tuple[list[bytes], int]:
    """The precomputed encodings and the offset to index them with (``table[v - offset]``).

    Exposed so that hot loops elsewhere can bind the table to a local name.
    """
    return _TABLE, TABLE_MIN


def size_of_varint(value: int) -> int:
    """Bytes the zig-zag varint encoding of ``value`` takes."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    return max(1, (z.bit_length() + 6) // 7)


def _decode(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    try:
        b = buf[pos]
        if b < 0x80:
            return _DECODE1[b], pos + 1
        z = b & 0x7F
        shift = 7
        for i in range(1, max_bytes):
            b = buf[pos + i]
            z |= (b & 0x7F) << shift
            if b < 0x80:
                # A tenth byte's bits past the 64th fall off, as in Kafka's ByteUtils.readVarlong.
                return ((z & _MASK64) >> 1) ^ -(z & 1), pos + i + 1
            shift += 7
    except IndexError:
        raise CorruptRecordError(f"truncated varint at byte {pos}") from None
    raise CorruptRecordError(f"varint at byte {pos} is longer than {max_bytes} bytes")


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the varint (at most 5 bytes) at ``pos``; return ``(value, next position)``.

    Raises CorruptRecordError for a truncated or over-long varint.
    """
    return _decode(buf, pos, MAX_VARINT_BYTES)


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the varlong (at most 10 bytes) at ``pos``; return ``(value, next position)``."""
    return _decode(buf, pos, MAX_VARLONG_BYTES)


# ---------------------------------------------------------------------------------------
# Vectorized forms
# ---------------------------------------------------------------------------------------


def encode_varints_np(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Encode an int64 column; return a ``(n, w)`` uint8 matrix and the width of each row.

    Row ``i`` holds the encoding of ``values[i]`` in its first ``widths[i]`` bytes; ``w``
    is the widest encoding in the column.
    """
    v = np.asarray(values, dtype=np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    widths = np.ones(len(z), dtype=np.int64)
    rest = z >> np.uint64(7)
    while rest.any():
        widths += rest != 0
        rest >>= np.uint64(7)
    w = int(widths.max()) if len(widths) else 1
    out = np.empty((len(z), w), dtype=np.uint8)
    for k in range(w):
        chunk = ((z >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        # The continuation bit is set on every byte but a row's last.
        out[:, k] = chunk | np.where(widths > k + 1, 0x80, 0).astype(np.uint8)
    return out, widths


def decode_varints_np(
    data: np.ndarray, positions: np.ndarray, limit: int, max_bytes: int = MAX_VARINT_BYTES
) -> tuple[np.ndarray, np.ndarray]:
    """Decode the varint starting at each of ``positions`` in the uint8 array ``data``.

    Returns ``(values int64, sizes int64)``. Every varint must end before ``limit``;
    otherwise, or if one is longer than ``max_bytes``, raises CorruptRecordError.
    """
    if len(positions) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if positions.min() < 0 or positions.max() >= limit:
        raise CorruptRecordError("varint position past the end of the records")
    first = data[positions]
    cont = first >= 0x80
    if not cont.any():
        # The common case: every varint is a single byte.
        z = first.astype(np.int64)
        return (z >> 1) ^ -(z & 1), np.ones(len(positions), np.int64)
    second_pos = positions + 1
    if second_pos[-1] < limit and second_pos.max() < limit:
        # Next most common: one or two bytes (lengths of 64..8191 bytes).
        second = data[second_pos]
        if not (cont & (second >= 0x80)).any():
            z = np.where(cont, (first & 0x7F).astype(np.int64) | (second.astype(np.int64) << 7), first)
            return (z >> 1) ^ -(z & 1), 1 + cont
    idx = positions[:, None] + np.arange(max_bytes, dtype=np.int64)
    np.minimum(idx, limit - 1, out=idx)
    mat = data[idx]
    cont = (mat & 0x80) != 0
    # A varint ends at its first byte without the continuation bit, before the limit.
    ends = np.argmin(cont, axis=1)
    if (cont.all(axis=1)).any() or ((positions + ends) >= limit).any():
        raise CorruptRecordError("over-long or truncated varint in records")
    sizes = ends + 1
    keep = np.arange(max_bytes) < sizes[:, None]
    groups = (mat & 0x7F).astype(np.uint64) * keep
    z = np.zeros(len(positions), np.uint64)
    for k in range(max_bytes):
        z |= groups[:, k] << np.uint64(7 * k)
    zi = z.view(np.int64)
    return (zi >> 1 & np.int64(0x7FFFFFFFFFFFFFFF)) ^ -(zi & 1), sizes
