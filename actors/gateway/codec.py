"""Kafka's wire format through kio, with kio's sharp edges handled here and only here.

Every message is decoded and encoded by kio's generated classes (one per API version);
nothing here writes a message field by hand. What this module adds around them:

- Request headers: v1 or v2, whichever the request's kio class names (v0 belongs to
  ControlledShutdown v0 alone, which the gateway does not serve). Response headers v0/v1
  likewise, ApiVersions always v0.
- Unknown tagged fields: the spec says skip them, kio raises. A request kio refuses for
  that reason is walked once by its kio schema, the unknown tags are cut out, and kio
  decodes the result (the walk costs a copy, paid only by such requests).
- Buffers: kio takes ``bytes`` or a read-only memoryview, never a ``bytearray``; frames
  come in as read-only views of the connection's receive buffer.
- Trailing bytes after a body (librdkafka sends some after Metadata v13) are ignored.
- An ApiVersions request of a version newer than served is answered UNSUPPORTED_VERSION
  in a v0 body (with the supported ranges), so the client retries with a lower one.
"""

from __future__ import annotations

import datetime
import functools
import struct
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionsKeyV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import i32Timedelta

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35
ZERO_MS = i32Timedelta.parse(datetime.timedelta(0))
_REQUEST_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_INT32 = struct.Struct(">i")
_UNKNOWN_TAG = "Unknown tagged field tag"


class RequestDecodeError(Exception):
    """A frame that is not a well-formed request of a served API version."""


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    """A request off the wire: its header fields and its kio body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


class Schema:
    """kio's request and response classes of one (API key, version), and the response's encoder."""

    __slots__ = ("api_key", "version", "request", "response", "flexible", "_header_writer", "_writer")

    def __init__(self, api_key: int, version: int) -> None:
        self.api_key = api_key
        self.version = version
        self.request = load_request_schema(api_key, version)
        self.response = load_response_schema(api_key, version)
        self.flexible = bool(self.request.__flexible__)
        self._header_writer = entity_writer(self.response.__header_schema__)
        self._writer = entity_writer(self.response)

    def response_of(self, **values: Any) -> Any:
        """Build the top-level response from the values this version has (the others are
        dropped: handlers pass the fields of the newest version)."""
        return build(self.response, values)

    def encode(self, correlation_id: int, response: Any) -> list[bytes]:
        """The size-prefixed frame of ``response`` as chunks: record data stays the object
        it was (no copy here); the connection writes the chunks out."""
        chunks = _Chunks()
        chunks.append(b"")  # the size prefix, filled in below
        self._header_writer(chunks, self.response.__header_schema__(correlation_id=correlation_id))
        self._writer(chunks, response)
        chunks[0] = _INT32.pack(sum(map(len, chunks)))
        return chunks


@functools.cache
def nested(cls: type, field_name: str) -> type:
    """The entity class of field ``field_name`` of ``cls`` (an array's element class).
    Nested classes are named differently across versions; their place is stable."""
    for f in fields(cls):
        if f.name == field_name:
            kind = classify_field(f)
            if isinstance(kind, (EntityField, EntityTupleField)):
                return kind.type_
            raise TypeError(f"{cls.__name__}.{field_name} is not an entity field")
    raise AttributeError(f"{cls.__name__} has no field {field_name!r}")


def has_field(cls: type, field_name: str) -> bool:
    """Whether this version of an entity has the field."""
    return field_name in _field_names(cls)[0]


def make(cls: type, field_name: str, **values: Any) -> Any:
    """Build the nested entity of ``cls.field_name`` from the values its version has."""
    return build(nested(cls, field_name), values)


def topics_with_one_code(response_cls: type, topics: Any, code: int) -> tuple[Any, ...]:
    """The ``topics`` array of an OffsetCommit / TxnOffsetCommit response: every partition
    the request named, answered with the same error ``code``."""
    topic_cls = nested(response_cls, "topics")
    return tuple(
        make(
            response_cls,
            "topics",
            name=t.name,
            partitions=tuple(
                make(topic_cls, "partitions", partition_index=p.partition_index, error_code=error_code(code))
                for p in t.partitions
            ),
        )
        for t in topics
    )


class _Chunks(list):
    """The ``write`` target kio's writers want, keeping each piece as the object given."""

    write = list.append


@functools.cache
def schema(api_key: int, version: int) -> Schema:
    """The cached Schema of one API version."""
    return Schema(api_key, version)


@functools.cache
def _field_names(cls: type) -> tuple[frozenset[str], tuple[tuple[str, Any], ...]]:
    """A class's field names, and the required ones given a default here (throttle time)."""
    names = frozenset(f.name for f in fields(cls))
    filled = tuple(
        (f.name, ZERO_MS)
        for f in fields(cls)
        if f.name == "throttle_time" and f.default is MISSING and f.default_factory is MISSING
    )
    return names, filled


def build(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)`` keeping only the fields ``cls`` has."""
    names, filled = _field_names(cls)
    kwargs = {k: v for k, v in values.items() if k in names}
    for name, default in filled:
        kwargs.setdefault(name, default)
    return cls(**kwargs)


def error_code(code: int) -> ErrorCode:
    """kio's ErrorCode for a Kafka error code (UNKNOWN_SERVER_ERROR for one kio lacks)."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


def peek(frame: memoryview) -> tuple[int, int, int]:
    """(API key, API version, correlation id) of a request body; RequestDecodeError when
    it is too short to hold them."""
    if len(frame) < 8:
        raise RequestDecodeError(f"a request of {len(frame)} bytes cannot hold a header")
    return _REQUEST_PREFIX.unpack_from(frame, 0)


def decode_request(frame: memoryview, api_key: int, version: int) -> DecodedRequest:
    """Decode a request body (the frame without its size prefix) of a served version.

    ``frame`` must be read-only (kio's rule). Trailing bytes are ignored; unknown tagged
    fields are skipped; anything else malformed raises RequestDecodeError.
    """
    sch = schema(api_key, version)
    header_cls = sch.request.__header_schema__
    try:
        try:
            return _decode(frame, sch, header_cls)
        except KeyError as exc:
            if not str(exc.args[0] if exc.args else "").startswith(_UNKNOWN_TAG):
                raise
        # Rare: a client sent tagged fields this schema does not know. Cut them out once.
        cleaned = strip_unknown_tags(frame, header_cls, sch.request)
        return _decode(memoryview(cleaned), sch, header_cls)
    except RequestDecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - kio raises many kinds on malformed input
        raise RequestDecodeError(f"malformed {sch.request.__name__} v{version}: {type(exc).__name__}: {exc}") from None


def _decode(frame: memoryview, sch: Schema, header_cls: type) -> DecodedRequest:
    header, used = entity_reader(header_cls)(frame, 0)
    body, _ = entity_reader(sch.request)(frame, used)
    return DecodedRequest(sch.api_key, sch.version, header.correlation_id, header.client_id, body)


def api_versions_unsupported(correlation_id: int, ranges: dict[int, tuple[int, int]]) -> list[bytes]:
    """The answer to an ApiVersions request of a version newer than served: v0 body with
    UNSUPPORTED_VERSION and the served ranges (Kafka's own fallback)."""
    body = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionsKeyV0(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(ranges.items())
        ),
    )
    chunks = _Chunks()
    chunks.append(b"")
    entity_writer(ResponseHeaderV0)(chunks, ResponseHeaderV0(correlation_id=correlation_id))
    entity_writer(ApiVersionsResponseV0)(chunks, body)
    chunks[0] = _INT32.pack(sum(map(len, chunks)))
    return chunks


# -- unknown tagged fields ----------------------------------------------------------------

_FIXED_SIZES = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}


def strip_unknown_tags(frame: memoryview, header_cls: type, body_cls: type) -> bytes:
    """A copy of a request (header and body) with the tagged fields its kio classes do not
    know removed, walking the fields the way kio reads them. Tagged fields that are known
    are kept as they are."""
    edits: list[tuple[int, int, bytes]] = []
    pos = _walk(frame, 0, header_cls, edits, is_header=True)
    _walk(frame, pos, body_cls, edits, is_header=False)
    out, last = [], 0
    for start, end, replacement in sorted(edits):
        out.append(frame[last:start])
        out.append(replacement)
        last = end
    out.append(frame[last:])
    return b"".join(out)


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise RequestDecodeError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length(buf: memoryview, pos: int, flexible: bool, kind: str) -> tuple[int, int]:
    """Read a string/bytes/array length: (length, -1 for null; new position)."""
    if flexible:
        n, pos = _uvarint(buf, pos)
        return n - 1, pos
    size = 2 if kind == "string" else 4
    if pos + size > len(buf):
        raise RequestDecodeError("truncated length")
    fmt = ">h" if size == 2 else ">i"
    return struct.unpack_from(fmt, buf, pos)[0], pos + size


def _skip_primitive(buf: memoryview, pos: int, kafka_type: str, flexible: bool) -> int:
    if kafka_type in _FIXED_SIZES:
        return pos + _FIXED_SIZES[kafka_type]
    kind = "string" if kafka_type == "string" else "bytes"
    n, pos = _length(buf, pos, flexible, kind)
    return pos + max(n, 0)


def _walk(buf: memoryview, pos: int, cls: type, edits: list[tuple[int, int, bytes]], is_header: bool) -> int:
    flexible = bool(cls.__flexible__)
    known_tags = set()
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is not None:
            known_tags.add(int(tag))
            continue
        if is_header and f.name == "client_id":
            pos = _skip_primitive(buf, pos, "string", flexible=False)  # always a legacy string
        else:
            pos = _walk_field(buf, pos, f, flexible, edits)
        if pos > len(buf):
            raise RequestDecodeError("truncated request")
    if not flexible:
        return pos
    start = pos
    count, pos = _uvarint(buf, pos)
    kept, dropped = [], 0
    for _ in range(count):
        entry = pos
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise RequestDecodeError("truncated tagged field")
        if tag in known_tags:
            kept.append(bytes(buf[entry:pos]))
        else:
            dropped += 1
    if dropped:
        edits.append((start, pos, _encode_uvarint(len(kept)) + b"".join(kept)))
    return pos


def _walk_field(buf: memoryview, pos: int, f: Field, flexible: bool, edits: list[tuple[int, int, bytes]]) -> int:
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField):
        n, pos = _length(buf, pos, flexible, "array")
        for _ in range(max(n, 0)):
            pos = _walk(buf, pos, kind.type_, edits, is_header=False)
        return pos
    if isinstance(kind, EntityField):
        if is_optional(f):
            marker = struct.unpack_from(">b", buf, pos)[0]
            pos += 1
            if marker < 0:
                return pos
        return _walk(buf, pos, kind.type_, edits, is_header=False)
    kafka_type = get_schema_field_type(f)
    if isinstance(kind, PrimitiveTupleField):
        n, pos = _length(buf, pos, flexible, "array")
        for _ in range(max(n, 0)):
            pos = _skip_primitive(buf, pos, kafka_type, flexible)
        return pos
    return _skip_primitive(buf, pos, kafka_type, flexible)
