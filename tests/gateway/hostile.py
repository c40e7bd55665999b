"""Requests that lie about their lengths, for every API version the gateway advertises.

Valid requests come from kio's own classes (hypothesis's ``from_type``, or ``filled``: every
array one element long, every optional entity present, so that every length field of the
schema occurs). ``length_fields`` finds where each length and count sits in an encoded
request, by the gateway's own schema walk with its shortcuts off; ``lie`` rewrites one of
them with another value (a fixed-width int in place, a varint re-encoded, up to 2^63).
"""

from __future__ import annotations

import datetime
import functools
import struct
import uuid
from dataclasses import fields
from typing import Any

from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)
from kio.static.primitive import Records

from actors.gateway import codec
from actors.gateway.listener import FAMILIES
from actors.gateway.versions import served_apis
from tests.gateway.wire import encode

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

# Kinds of length fields (the walk's step kinds), and the tagged-field count.
STRING16, BYTES32, COMPACT, ARRAY32, COMPACT_ARRAY = (
    codec._STRING16,
    codec._BYTES32,
    codec._COMPACT,
    codec._ARRAY32,
    codec._COMPACT_ARRAY,
)
TAGGED_COUNT = -1
LENGTH_KINDS = frozenset({STRING16, BYTES32, COMPACT, ARRAY32, COMPACT_ARRAY})
WIDTH = {STRING16: 2, BYTES32: 4, ARRAY32: 4}  # fixed-width lengths; the others are varints


@functools.cache
def served_versions() -> tuple[tuple[int, int], ...]:
    """Every (API key, version) the gateway advertises."""
    apis = served_apis(FAMILIES)
    return tuple((key, v) for key, api in sorted(apis.items()) for v in range(api.min_version, api.max_version + 1))


def request_class(api_key: int, version: int) -> type:
    """kio's request class of an API version."""
    return load_request_schema(api_key, version)


def requests(api_key: int, version: int) -> st.SearchStrategy:
    """Valid requests of one API version (kio's types know their hypothesis strategies)."""
    return st.from_type(request_class(api_key, version))


def frame_body(body: Any, correlation_id: int = 7, client_id: str | None = "fuzz") -> bytes:
    """A request's header and body (the frame without its size prefix)."""
    header = body.__header_schema__(
        request_api_key=body.__api_key__,
        request_api_version=body.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    return encode(header) + encode(body)


_SAMPLES = {
    "int8": 0,
    "uint8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 1,
    "uint32": 1,
    "int64": 1,
    "uint64": 1,
    "float64": 0.0,
    "bool": False,
    "string": "x",
    "bytes": b"x",
    "records": Records(b"x"),
}


def filled(cls: type) -> Any:
    """An entity of ``cls`` whose every array holds one element and every optional entity is
    present (tagged ones too), so that every length field of the schema is on the wire."""
    values = {}
    for f in fields(cls):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            values[f.name] = (filled(kind.type_),)
        elif isinstance(kind, EntityField):
            values[f.name] = filled(kind.type_)
        else:
            sample = _sample(get_schema_field_type(f))
            values[f.name] = (sample,) if isinstance(kind, PrimitiveTupleField) else sample
        if get_field_tag(f) is not None and values[f.name] in ((), None):
            del values[f.name]
    return cls(**values)


def _sample(kafka_type: str) -> Any:
    if kafka_type in _SAMPLES:
        return _SAMPLES[kafka_type]
    if kafka_type == "uuid":
        return uuid.UUID(int=1)
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(milliseconds=1)
    if kafka_type == "datetime_i64":
        return datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    raise TypeError(f"no sample of kafka type {kafka_type!r}")


class _Recorder(codec._Walk):
    """The gateway's walk with its shortcuts off, noting where each length and count is."""

    inline = False

    def __init__(self, buf: memoryview) -> None:
        super().__init__(buf)
        self.found: list[tuple[int, int]] = []

    def skip(self, pos: int, op: Any) -> int:
        if op.kind in LENGTH_KINDS and op.size is None:
            self.found.append((pos, op.kind))
        return super().skip(pos, op)

    def tagged_count(self, pos: int) -> tuple[int, int]:
        self.found.append((pos, TAGGED_COUNT))
        return super().tagged_count(pos)


def length_fields(body: bytes, api_key: int, version: int) -> list[tuple[int, int]]:
    """(position, kind) of every length and count in a valid request's header and body."""
    cls = request_class(api_key, version)
    walk = _Recorder(memoryview(body))
    walk.entity(walk.entity(0, codec._layout(cls.__header_schema__)), codec._layout(cls))
    return walk.found


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_end(body: bytes, pos: int) -> int:
    while body[pos] & 0x80:
        pos += 1
    return pos + 1


def lie(body: bytes, pos: int, kind: int, value: int) -> bytes:
    """``body`` with the length or count at ``pos`` rewritten to say ``value`` (fixed-width
    lengths wrap to their width; a varint is re-encoded, as long as it takes)."""
    if kind in WIDTH:
        width = WIDTH[kind]
        fmt = ">h" if width == 2 else ">i"
        bits = 8 * width
        wrapped = (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
        return body[:pos] + struct.pack(fmt, wrapped) + body[pos + width :]
    if value < 0:
        value &= (1 << 64) - 1  # a negative varint is its 64-bit two's complement
    return body[:pos] + _uvarint(value) + body[_varint_end(body, pos) :]


def lies_for(kind: int, room: int) -> list[int]:
    """Values that cannot be true for a length of ``kind`` with ``room`` bytes after it:
    huge ones up to 2^63 and negative ones (-1 is null, not a lie, and is left out)."""
    if kind in WIDTH:
        top = (1 << (8 * WIDTH[kind] - 1)) - 1
        values = [top, -2, -(1 << (8 * WIDTH[kind] - 1))]
        if room + 1 < top:
            values.append(room + 1)
        return [v for v in values if v > room or v < -1]
    # A varint says value + 1 for compact lengths and counts (0 is null).
    return [room + 2, 2**31, 2**32 + 1, 2**35 - 1, 2**35, 2**63, -2]
