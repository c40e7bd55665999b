"""Kafka's wire format through kio, with kio's sharp edges handled here and only here.

Every message is decoded and encoded by kio's generated classes (one per API version);
nothing here writes a message field by hand. What this module adds around them:

- Request headers: v1 or v2, whichever the request's kio class names (v0 belongs to
  ControlledShutdown v0 alone, which the gateway does not serve). Response headers v0/v1
  likewise, ApiVersions always v0.
- Lying lengths: kio reserves memory for whatever count an array claims (2^35 elements
  abort the process), so every request is first walked by its kio schema and every
  length and count checked against the bytes left (``walk_request``).
- Unknown tagged fields: the spec says skip them, kio raises. The same walk finds them,
  they are cut out, and kio decodes the result (a copy, paid only by such requests).
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
import time
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionsKeyV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._parse import get_field_reader, get_reader
from kio.static.primitive import i32Timedelta

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35
ZERO_MS = i32Timedelta.parse(datetime.timedelta(0))
_REQUEST_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_INT32 = struct.Struct(">i")


class RequestDecodeError(Exception):
    """A frame that is not a well-formed request of a served API version."""


class DecodeDeferred(Exception):
    """A request with more elements than may be decoded on the event loop: decode it with
    ``decode_request_split`` on another thread."""


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
    return topics_with_codes(response_cls, topics, lambda _: code)


def topics_with_codes(response_cls: type, topics: Any, code_of: Callable[[str], int]) -> tuple[Any, ...]:
    """The same, each topic's partitions answered with ``code_of(topic name)``."""
    topic_cls = nested(response_cls, "topics")
    out = []
    for t in topics:
        code = error_code(code_of(t.name))
        out.append(
            make(
                response_cls,
                "topics",
                name=t.name,
                partitions=tuple(
                    make(topic_cls, "partitions", partition_index=p.partition_index, error_code=code)
                    for p in t.partitions
                ),
            )
        )
    return tuple(out)


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
    found = _ERROR_CODES.get(code)
    if found is None:
        try:
            found = ErrorCode(code)
        except ValueError:
            found = ErrorCode.unknown_server_error
        _ERROR_CODES[code] = found
    return found


# An enum lookup costs a microsecond; responses naming 50,000 partitions make one per partition.
_ERROR_CODES: dict[int, ErrorCode] = {}


def peek(frame: memoryview) -> tuple[int, int, int]:
    """(API key, API version, correlation id) of a request body; RequestDecodeError when
    it is too short to hold them."""
    if len(frame) < 8:
        raise RequestDecodeError(f"a request of {len(frame)} bytes cannot hold a header")
    return _REQUEST_PREFIX.unpack_from(frame, 0)


def decode_request(frame: memoryview, api_key: int, version: int, max_elements: int | None = None) -> DecodedRequest:
    """Decode a request body (the frame without its size prefix) of a served version.

    ``frame`` must be read-only (kio's rule). Trailing bytes are ignored; unknown tagged
    fields are skipped; anything else malformed raises RequestDecodeError. With
    ``max_elements``, a request with more array elements raises DecodeDeferred instead
    (after a walk of at most that many).
    """
    sch = schema(api_key, version)
    header_cls = sch.request.__header_schema__
    try:
        # Every length and count is checked before kio sees the frame (see walk_request).
        edits = walk_request(frame, header_cls, sch.request, max_elements)
        if edits:  # rare: tagged fields this schema does not know; cut out, at the cost of a copy
            frame = memoryview(apply_edits(frame, edits))
        return _decode(frame, sch, header_cls)
    except (RequestDecodeError, DecodeDeferred):
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


# -- the bounds walk: every length and count checked before kio reads the frame --------------
#
# kio's native reader reserves what an array's count claims before it reads one element (a
# Vec of that many pointers): a 25-byte Metadata v12 request whose compact count says
# 2^35-1 topics asks for 256 GiB and the process aborts, which no Python handler can catch.
# kio has no limit of its own, so every request is walked first, field by field, by the
# same kio schema metadata kio compiles its reader from, and refused (RequestDecodeError:
# the connection closes) when a length or count claims more than the bytes left in the
# frame. An array of n elements whose elements take at least m bytes each needs n * m bytes
# (Kafka's own generated readers check count <= bytes remaining; this is tighter), so what
# kio reserves is bounded by 8 bytes per byte of frame. The same walk finds tagged fields
# the schema does not know (kio raises on those; the spec says skip them) and cuts them out.
#
# A field's walk step is compiled once per kio class into a ``_Op``; fixed-size runs
# collapse into one step, and an array of fixed-size elements is skipped in O(1), so a 1 MB
# Produce (its records are one bytes field) costs a few dozen steps.

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
_VARINT_MAX_BYTES = 5  # kio's (and Kafka's) unsigned varint: 5 bytes at most

# Step kinds.
_FIXED = 0  # ``size`` bytes
_STRING16 = 1  # legacy string: int16 length, -1 null
_BYTES32 = 2  # legacy bytes: int32 length, -1 null
_COMPACT = 3  # compact string or bytes: unsigned varint length + 1, 0 null
_ARRAY32 = 4  # legacy array: int32 count, -1 null; ``arg`` the element's step
_COMPACT_ARRAY = 5  # compact array: unsigned varint count + 1, 0 null
_ENTITY = 6  # ``arg`` the entity's _Layout
_NULLABLE_ENTITY = 7  # int8 marker (-1: null), then the entity (KIP-893)
_INT16 = struct.Struct(">h")
_INT8 = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class _Op:
    """One field's walk step: its kind, the element step or entity layout, the fewest bytes
    it can take, and its exact size when it has one."""

    kind: int
    arg: Any
    min_size: int
    size: int | None
    read: Any = None  # kio's reader of one element of this type (primitive steps)


@dataclass(frozen=True, slots=True)
class _Layout:
    """An entity class's walk: its untagged fields' steps in wire order, its known tagged
    fields' steps by tag, and the fewest bytes (exact size, when fixed) it takes."""

    cls: type
    flexible: bool
    ops: tuple[_Op, ...]
    tags: dict[int, _Op]
    min_size: int
    size: int | None
    # Per field, for decoding piece by piece: (name, step, kio's field reader); tagged ones by tag.
    fields: tuple[tuple[str, _Op, Any], ...]
    tagged: dict[int, tuple[str, _Op, Any]]
    defaults: tuple[tuple[str, Any], ...]  # tagged fields' values when absent, as kio gives them
    read: Any  # kio's reader of the whole entity


def _primitive_op(kafka_type: str, flexible: bool) -> _Op:
    read = get_reader(kafka_type, flexible, False)
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _Op(_FIXED, None, size, size, read)
    if flexible and kafka_type in ("string", "bytes", "records"):
        return _Op(_COMPACT, None, 1, None, read)
    if kafka_type == "string":
        return _Op(_STRING16, None, 2, None, read)
    if kafka_type in ("bytes", "records"):
        return _Op(_BYTES32, None, 4, None, read)
    raise TypeError(f"no walk step for kafka type {kafka_type!r}")


def _array_op(element: _Op, flexible: bool) -> _Op:
    return _Op(_COMPACT_ARRAY, element, 1, None) if flexible else _Op(_ARRAY32, element, 4, None)


def _field_op(f: Field, flexible: bool, legacy_string: bool) -> _Op:
    """A field's step, chosen as kio's native reader chooses its reader."""
    if legacy_string:  # RequestHeader.client_id: a legacy string in every header version
        return _Op(_STRING16, None, 2, None)
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField):
        layout = _layout(kind.type_)
        return _array_op(_Op(_ENTITY, layout, layout.min_size, layout.size), flexible)
    if isinstance(kind, EntityField):
        layout = _layout(kind.type_)
        if is_optional(f):
            return _Op(_NULLABLE_ENTITY, layout, 1, None)
        return _Op(_ENTITY, layout, layout.min_size, layout.size)
    element = _primitive_op(get_schema_field_type(f), flexible)
    if isinstance(kind, PrimitiveTupleField):
        return _array_op(element, flexible)
    return element


@functools.cache
def _layout(cls: type) -> _Layout:
    """The walk of kio class ``cls`` (compiled once per class)."""
    flexible = bool(cls.__flexible__)
    header = cls.__name__ == "RequestHeader"
    ops: list[_Op] = []
    tags: dict[int, _Op] = {}
    per_field: list[tuple[str, _Op, Any]] = []
    tagged: dict[int, tuple[str, _Op, Any]] = {}
    defaults: list[tuple[str, Any]] = []
    for f in fields(cls):
        op = _field_op(f, flexible, header and f.name == "client_id")
        tag = get_field_tag(f)
        read = get_field_reader(cls, f, header, tag is not None)
        if tag is not None:
            tagged[int(tag)] = (f.name, op, read)
            defaults.append((f.name, get_tagged_field_default(f)))
        else:
            per_field.append((f.name, op, read))
        if tag is not None:
            tags[int(tag)] = op
        elif op.kind == _FIXED and ops and ops[-1].kind == _FIXED:
            merged = ops[-1].size + op.size  # type: ignore[operator]
            ops[-1] = _Op(_FIXED, None, merged, merged)
        else:
            ops.append(op)
    min_size = sum(op.min_size for op in ops) + (1 if flexible else 0)  # + the tagged-field count
    fixed = not flexible and all(op.size is not None for op in ops)
    return _Layout(
        cls,
        flexible,
        tuple(ops),
        tags,
        min_size,
        min_size if fixed else None,
        tuple(per_field),
        tagged,
        tuple(defaults),
        entity_reader(cls),
    )


class _Walk:
    """One request's walk: the frame, and what it found to cut (unknown tagged fields)."""

    __slots__ = ("buf", "end", "edits", "budget")
    # Whether ``entity`` takes its inline shortcuts; a walk that records where each length is
    # (the tests' fuzzers) turns them off so that every length goes through a method.
    inline = True

    def __init__(self, buf: memoryview, max_elements: int | None = None) -> None:
        self.buf = buf
        self.end = len(buf)
        self.edits: list[tuple[int, int, bytes]] = []
        self.budget = max_elements  # array elements still to visit (None: any number)

    def over_budget(self) -> None:
        """The walk visited its ``max_elements``: the request is for the worker thread."""
        raise DecodeDeferred

    def uvarint(self, pos: int) -> tuple[int, int]:
        """An unsigned varint at ``pos``: (value, next position)."""
        buf, end = self.buf, self.end
        value = shift = 0
        for _ in range(_VARINT_MAX_BYTES):
            if pos >= end:
                raise RequestDecodeError("truncated varint")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
            shift += 7
        raise RequestDecodeError(f"a varint longer than {_VARINT_MAX_BYTES} bytes")

    def tagged_count(self, pos: int) -> tuple[int, int]:
        """The number of tagged fields at ``pos``: (count, next position)."""
        return self.uvarint(pos)

    def int32(self, pos: int) -> int:
        if pos + 4 > self.end:
            raise RequestDecodeError("truncated length")
        return _INT32.unpack_from(self.buf, pos)[0]

    def skip(self, pos: int, op: _Op) -> int:
        """The position after field ``op`` at ``pos``; RequestDecodeError when a length or
        count there claims more than the frame holds."""
        if op.size is not None:
            pos += op.size
            if pos > self.end:
                raise RequestDecodeError(f"truncated request: needs {pos} bytes, has {self.end}")
            return pos
        kind = op.kind
        if kind == _ENTITY:
            return self.entity(pos, op.arg)
        if kind == _COMPACT:
            n, pos = self.uvarint(pos)
            return self._span(pos, n - 1) if n > 1 else pos
        if kind == _STRING16:
            if pos + 2 > self.end:
                raise RequestDecodeError("truncated length")
            return self._span(pos + 2, _INT16.unpack_from(self.buf, pos)[0])
        if kind == _BYTES32:
            return self._span(pos + 4, self.int32(pos))
        if kind == _COMPACT_ARRAY:
            n, pos = self.uvarint(pos)
            return self._array(pos, n - 1, op.arg)
        if kind == _ARRAY32:
            return self._array(pos + 4, self.int32(pos), op.arg)
        if kind == _NULLABLE_ENTITY:
            if pos >= self.end:
                raise RequestDecodeError("truncated request")
            if _INT8.unpack_from(self.buf, pos)[0] == -1:  # kio's null marker; any other value: present
                return pos + 1
            return self.entity(pos + 1, op.arg)
        raise AssertionError(f"unknown walk step {kind}")

    def _span(self, pos: int, length: int) -> int:
        """Past a string or bytes of ``length`` bytes (-1: null) starting at ``pos``."""
        if length < -1:
            raise RequestDecodeError(f"negative length {length}")
        if length > self.end - pos:
            raise RequestDecodeError(f"a length of {length} bytes with {max(self.end - pos, 0)} left in the request")
        return pos + length if length > 0 else pos

    def _array(self, pos: int, count: int, element: _Op) -> int:
        """Past an array of ``count`` elements (-1: null) starting at ``pos``."""
        if count <= 0:
            if count < -1:
                raise RequestDecodeError(f"negative array count {count}")
            return pos
        left = self.end - pos
        if count * element.min_size > left:
            raise RequestDecodeError(
                f"an array of {count} elements of at least {element.min_size} bytes with {max(left, 0)} bytes left"
            )
        if element.size is not None:
            # Skipped in O(1), but kio still makes an object of each: they count.
            if self.budget is not None:
                self.budget -= count
                if self.budget < 0:
                    self.over_budget()
            return pos + count * element.size
        skip = self.skip
        while count:
            n = count
            if self.budget is not None:
                if self.budget <= 0:
                    self.over_budget()
                n = min(count, self.budget)
                self.budget -= n
            count -= n
            for _ in range(n):
                pos = skip(pos, element)
        return pos

    def entity(self, pos: int, layout: _Layout) -> int:
        """Past one entity of ``layout`` at ``pos``, its tagged fields included."""
        buf, end, skip, inline = self.buf, self.end, self.skip, self.inline
        for op in layout.ops:
            # The common steps inline (this loop runs once per array element): a fixed run,
            # and a compact string shorter than 127 bytes (a one-byte length). Every read
            # checks its bounds, so a position past the end is caught below.
            if op.size is not None:
                pos += op.size
            elif inline and op.kind == _COMPACT and pos < end and buf[pos] < 0x80:
                pos += buf[pos] or 1  # the length byte, then length - 1 bytes (0: null)
            else:
                pos = skip(pos, op)
        if pos > end:
            raise RequestDecodeError(f"truncated request: needs {pos} bytes, has {end}")
        if not layout.flexible:
            return pos
        if inline and pos < end and buf[pos] == 0:  # no tagged fields: the usual case
            return pos + 1
        count_at = pos
        count, pos = self.tagged_count(pos)
        count_end = pos
        if count * 2 > end - pos:  # a tagged field takes a tag and a size at least
            raise RequestDecodeError(f"{count} tagged fields with {end - pos} bytes left")
        kept = count
        for _ in range(count):
            entry = pos
            tag, pos = self.uvarint(pos)
            size, pos = self.uvarint(pos)
            if size > end - pos:
                raise RequestDecodeError(f"a tagged field of {size} bytes with {end - pos} bytes left")
            op = layout.tags.get(tag)
            if op is None:  # not in this schema: skipped by its size, and cut out below
                pos = self._span(pos, size)
                self.edits.append((entry, pos, b""))
                kept -= 1
            else:
                # kio reads a known tagged field by its type and ignores the size; so does the walk.
                pos = skip(pos, op)
        if kept != count:
            self.edits.append((count_at, count_end, _encode_uvarint(kept)))
        return pos


def walk_request(
    frame: memoryview, header_cls: type, body_cls: type, max_elements: int | None = None
) -> list[tuple[int, int, bytes]]:
    """Walk a request (header and body) as kio will read it, checking every length and count
    against the bytes left; returns the edits that cut out unknown tagged fields (none,
    almost always). RequestDecodeError when the request is truncated or a length lies;
    DecodeDeferred when it has more than ``max_elements`` array elements. Bytes after the
    body are left alone (librdkafka sends some)."""
    walk = _Walk(frame, max_elements)
    walk.entity(walk.entity(0, _layout(header_cls)), _layout(body_cls))
    return walk.edits


def apply_edits(frame: memoryview, edits: list[tuple[int, int, bytes]]) -> bytes:
    """A copy of ``frame`` with each ``(start, end, replacement)`` applied (they never overlap)."""
    out, last = [], 0
    for start, end, replacement in sorted(edits):
        out.append(frame[last:start])
        out.append(replacement)
        last = end
    out.append(frame[last:])
    return b"".join(out)


def strip_unknown_tags(frame: memoryview, header_cls: type, body_cls: type) -> bytes:
    """A copy of a request (header and body) without the tagged fields its kio classes do
    not know; the ones they know are kept as they are."""
    return apply_edits(frame, walk_request(frame, header_cls, body_cls))


def _encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# -- big requests: decoded piece by piece, off the event loop ----------------------------------
#
# kio decodes a request in one native call that holds the GIL throughout: 170 ms for a
# Metadata request naming 100,000 topics, during which no other thread runs. A request with
# more than the event loop's share of elements is therefore decoded on the gateway's worker
# thread, piece by piece: the walk records where every entity larger than SPLIT_BYTES
# starts and ends; each smaller entity (a topic, a partition) is one kio call, and the
# big ones (the body, a topic naming 50,000 partitions) are put together here from their
# fields, read by kio's own field readers. Every PAUSE_ELEMENTS elements the thread lets the
# event loop's thread have the GIL (time.sleep(0) releases it).

SPLIT_BYTES = 8 * 1024
PAUSE_ELEMENTS = 256


class _SplitWalk(_Walk):
    """The bounds walk of a big request, pausing now and then, noting its big entities."""

    __slots__ = ("spans",)

    def __init__(self, buf: memoryview) -> None:
        super().__init__(buf, PAUSE_ELEMENTS)
        self.spans: dict[int, int] = {}

    def over_budget(self) -> None:
        time.sleep(0)
        self.budget = PAUSE_ELEMENTS

    def entity(self, pos: int, layout: _Layout) -> int:
        end = super().entity(pos, layout)
        if end - pos > SPLIT_BYTES:
            self.spans[pos] = end
        return end


def decode_request_split(data: bytes, api_key: int, version: int) -> DecodedRequest:
    """``decode_request`` for a big request, on a thread other than the event loop's: the
    same checks and the same result, decoded in small pieces with pauses between them."""
    sch = schema(api_key, version)
    header_cls = sch.request.__header_schema__
    try:
        frame = memoryview(data).toreadonly()
        walk = _SplitWalk(frame)
        body_at = walk.entity(0, _layout(header_cls))
        walk.entity(body_at, _layout(sch.request))
        if walk.edits:  # unknown tagged fields: cut them out, then walk the result again
            frame = memoryview(apply_edits(frame, walk.edits))
            walk = _SplitWalk(frame)
            body_at = walk.entity(0, _layout(header_cls))
            walk.entity(body_at, _layout(sch.request))
        header, _ = entity_reader(header_cls)(frame, 0)
        body, _ = _Pieces(frame, walk.spans).entity(body_at, _layout(sch.request))
        return DecodedRequest(api_key, version, header.correlation_id, header.client_id, body)
    except RequestDecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - kio raises many kinds on malformed input
        raise RequestDecodeError(f"malformed {sch.request.__name__} v{version}: {type(exc).__name__}: {exc}") from None


class _Pieces:
    """Decoding a walked request: small entities by kio in one call, big ones field by field."""

    __slots__ = ("buf", "spans", "varints", "count")

    def __init__(self, buf: memoryview, spans: dict[int, int]) -> None:
        self.buf = buf
        self.spans = spans
        self.varints = _Walk(buf)  # its varint reader
        self.count = 0  # elements since the last pause

    def entity(self, pos: int, layout: _Layout) -> tuple[Any, int]:
        """(the entity at ``pos``, the position after it)."""
        if pos not in self.spans:
            value, size = layout.read(self.buf, pos)
            return value, pos + size
        values: dict[str, Any] = {}
        for name, op, read in layout.fields:
            values[name], pos = self.field(pos, op, read)
        if layout.flexible:
            values.update(layout.defaults)
            count, pos = self.varints.uvarint(pos)
            for _ in range(count):
                tag, pos = self.varints.uvarint(pos)
                _, pos = self.varints.uvarint(pos)  # the size: kio reads by the type, as the walk did
                name, op, read = layout.tagged[tag]
                values[name], pos = self.field(pos, op, read)
        return layout.cls(**values), pos

    def field(self, pos: int, op: _Op, read: Any) -> tuple[Any, int]:
        """One field: arrays and entities here (they may be big), the rest by kio's reader."""
        kind = op.kind
        if kind == _ARRAY32 or kind == _COMPACT_ARRAY:
            return self.array(pos, op)
        if kind == _ENTITY:
            return self.entity(pos, op.arg)
        if kind == _NULLABLE_ENTITY:
            if _INT8.unpack_from(self.buf, pos)[0] == -1:
                return None, pos + 1
            return self.entity(pos + 1, op.arg)
        value, size = read(self.buf, pos)
        return value, pos + size

    def array(self, pos: int, op: _Op) -> tuple[Any, int]:
        """An array, element by element."""
        if op.kind == _ARRAY32:
            count = _INT32.unpack_from(self.buf, pos)[0]
            pos += 4
        else:
            count, pos = self.varints.uvarint(pos)
            count -= 1
        if count < 0:
            return None, pos
        element = op.arg
        items = []
        for _ in range(count):
            if element.kind == _ENTITY:
                item, pos = self.entity(pos, element.arg)
            else:
                item, size = element.read(self.buf, pos)
                pos += size
            items.append(item)
            self.count += 1
            if self.count >= PAUSE_ELEMENTS:
                self.count = 0
                time.sleep(0)  # releases the GIL: the event loop's thread runs if it waits
        return tuple(items), pos
