"""The bounds walk alone (no server): every length and count of every advertised API version
is checked against the bytes left before kio reads a frame.

kio reserves memory for whatever an array's count claims, so a lie that got past the walk
could abort this very process; the lies are therefore only ever given to the walk, and kio
only sees what the walk accepted.
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from actors.gateway import codec
from actors.gateway.codec import RequestDecodeError, decode_request, walk_request
from tests.gateway.hostile import (
    WIDTH,
    filled,
    frame_body,
    length_fields,
    lie,
    lies_for,
    request_class,
    requests,
    served_versions,
)
from tests.gateway.wire import encode

VERSIONS = served_versions()
LYING_COUNT_FRAME = bytes.fromhex("000000150003000c00000001000570726f626500ffffffff7f")


def _walk_end(body: bytes, api_key: int, version: int) -> int:
    cls = request_class(api_key, version)
    walk = codec._Walk(memoryview(body))
    return walk.entity(walk.entity(0, codec._layout(cls.__header_schema__)), codec._layout(cls))


def _kio_end(body: bytes, api_key: int, version: int) -> int:
    cls = request_class(api_key, version)
    _, used = entity_reader(cls.__header_schema__)(memoryview(body), 0)
    _, size = entity_reader(cls)(memoryview(body), used)
    return used + size


def _room(body: bytes, pos: int, kind: int) -> int:
    """Bytes after the length field at ``pos``."""
    if kind in WIDTH:
        return len(body) - pos - WIDTH[kind]
    end = pos
    while body[end] & 0x80:
        end += 1
    return len(body) - end - 1


def _walk(body: bytes, api_key: int, version: int) -> None:
    cls = request_class(api_key, version)
    walk_request(memoryview(body), cls.__header_schema__, cls)


def test_the_25_byte_request_of_issue_27_is_refused_before_kio():
    body = memoryview(LYING_COUNT_FRAME[4:])
    with pytest.raises(RequestDecodeError, match="array of 34359738366 elements"):
        decode_request(body, 3, 12)


@pytest.mark.parametrize(("api_key", "version"), VERSIONS, ids=[f"{k}v{v}" for k, v in VERSIONS])
def test_every_length_of_every_advertised_version_is_bounded(api_key, version):
    body = frame_body(filled(request_class(api_key, version)))
    # The walk reads the valid request exactly as kio does, to the same byte.
    assert _walk_end(body, api_key, version) == _kio_end(body, api_key, version) == len(body)
    decode_request(memoryview(body), api_key, version)
    found = length_fields(body, api_key, version)
    assert found  # the header's client id at least
    for pos, kind in found:
        for value in lies_for(kind, _room(body, pos, kind)):
            with pytest.raises(RequestDecodeError):
                _walk(lie(body, pos, kind, value), api_key, version)


@functools.cache
def _filled(api_key: int, version: int) -> tuple[bytes, tuple[tuple[int, int], ...]]:
    """A request of the version with every array filled, and where its lengths are."""
    body = frame_body(filled(request_class(api_key, version)))
    return body, tuple(length_fields(body, api_key, version))


def _lie_value(data, kind: int, room: int) -> int:
    if kind in WIDTH:
        return data.draw(st.sampled_from(lies_for(kind, room)), label="lie")
    return data.draw(st.integers(room + 2, 2**63) | st.sampled_from(lies_for(kind, room)), label="lie")


_FAST = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_GENERATED = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@_FAST
@given(data=st.data())
def test_any_lie_in_any_length_of_any_version_is_refused(data):
    api_key, version = data.draw(st.sampled_from(VERSIONS), label="version")
    body, found = _filled(api_key, version)
    pos, kind = data.draw(st.sampled_from(found), label="field")
    value = _lie_value(data, kind, _room(body, pos, kind))
    with pytest.raises(RequestDecodeError):
        _walk(lie(body, pos, kind, value), api_key, version)


@_FAST
@given(data=st.data())
def test_whatever_the_walk_accepts_kio_reads_to_the_same_end(data):
    """Garbage written anywhere: refused by the walk, or read by kio exactly as walked (kio
    only ever sees what the walk let through)."""
    api_key, version = data.draw(st.sampled_from(VERSIONS), label="version")
    body = bytearray(_filled(api_key, version)[0])
    pos = data.draw(st.integers(0, len(body) - 1), label="position")
    garbage = data.draw(st.binary(min_size=1, max_size=10), label="garbage")
    body[pos : pos + len(garbage)] = garbage
    _check_walk_against_kio(bytes(body), api_key, version)


@_GENERATED
@given(data=st.data())
def test_generated_requests_walk_like_kio_and_every_lie_is_refused(data):
    """Requests hypothesis builds from kio's types (empty and long arrays, nulls, long strings)."""
    api_key, version = data.draw(st.sampled_from(VERSIONS), label="version")
    body = frame_body(data.draw(requests(api_key, version), label="request"))
    assert _walk_end(body, api_key, version) == _kio_end(body, api_key, version)
    pos, kind = data.draw(st.sampled_from(length_fields(body, api_key, version)), label="field")
    value = _lie_value(data, kind, _room(body, pos, kind))
    with pytest.raises(RequestDecodeError):
        _walk(lie(body, pos, kind, value), api_key, version)
    garbled = bytearray(body)
    at = data.draw(st.integers(0, len(body) - 1), label="position")
    garbage = data.draw(st.binary(min_size=1, max_size=10), label="garbage")
    garbled[at : at + len(garbage)] = garbage
    _check_walk_against_kio(bytes(garbled), api_key, version)


def _check_walk_against_kio(body: bytes, api_key: int, version: int) -> None:
    try:
        _walk(body, api_key, version)
    except RequestDecodeError:
        return
    try:
        kio_end = _kio_end(body, api_key, version)
    except Exception:  # noqa: BLE001 - kio refusing it its own way (a bad UTF-8 string, an unknown tag...) is fine
        return
    assert kio_end == _walk_end(body, api_key, version)


@_GENERATED
@given(data=st.data())
def test_big_requests_decoded_piece_by_piece_equal_kios_decode(data, monkeypatch_split):
    """decode_request_split (the worker thread's decoder of big requests) gives what kio
    gives; with SPLIT_BYTES at 0 every entity is put together field by field."""
    api_key, version = data.draw(st.sampled_from(VERSIONS), label="version")
    body = frame_body(data.draw(requests(api_key, version), label="request"))
    whole = decode_request(memoryview(body), api_key, version)
    pieces = codec.decode_request_split(body, api_key, version)
    assert (pieces.correlation_id, pieces.client_id) == (whole.correlation_id, whole.client_id)
    assert encode(pieces.body) == encode(whole.body)


@pytest.fixture(scope="module")
def monkeypatch_split():
    """SPLIT_BYTES = 0 for the module's tests that ask for it."""
    saved = codec.SPLIT_BYTES
    codec.SPLIT_BYTES = 0
    yield
    codec.SPLIT_BYTES = saved
