"""Fuzzing the decoders: arbitrary or mutated bytes raise only Kafka errors, never crash."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import batch_header
from storage.errors import CorruptRecordError, KafkaError, RecordTooLargeError, UnsupportedCompressionTypeError
from storage.legacy import read_legacy, upconvert
from storage.records.builder import RecordBatchBuilder
from storage.records.columns import decode_columns
from storage.records.reader import RecordBatch, iter_batches

# Every test here runs over both twins of the record codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

ALLOWED = (CorruptRecordError, RecordTooLargeError, UnsupportedCompressionTypeError)
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_everything(buf: bytes) -> None:
    """Every decoding entry point; each may raise only an allowed Kafka error."""
    for call in (
        lambda: [list(b) for b in iter_batches(buf, check_crc=False)],
        lambda: [list(b) for b in iter_batches(buf)],
        lambda: decode_columns(buf, check_crc=False, headers=True),
        lambda: RecordBatch(buf).control_record() if RecordBatch(buf).is_control else None,
        lambda: list(read_legacy(buf)),
        lambda: upconvert(buf),
    ):
        try:
            call()
        except ALLOWED:
            pass
        except KafkaError as exc:  # pragma: no cover - reported as a failure below
            raise AssertionError(f"unexpected Kafka error {exc!r}") from exc


def valid_batch(codec: int, n: int, headers: bool) -> bytes:
    builder = RecordBatchBuilder(codec)
    for i in range(n):
        builder.append(
            b"value-%d" % i if i % 4 else None,
            key=b"k%d" % i if i % 3 else None,
            timestamp=1000 + i,
            headers=[("h", b"x"), ("n", None)] if headers and i % 2 else (),
        )
    return builder.build()


def refresh_crc(data: bytearray) -> bytes:
    if len(data) >= batch_header.HEADER_SIZE:
        crc = batch_header.crc32c(memoryview(data)[batch_header.ATTRIBUTES_OFFSET :])
        struct.pack_into(">I", data, batch_header.CRC_OFFSET, crc)
    return bytes(data)


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes(buf: bytes) -> None:
    decode_everything(buf)


@FUZZ
@given(
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    n=st.sampled_from([1, 3, 60]),
    headers=st.booleans(),
    mutations=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(min_value=0)),
    fix_crc=st.booleans(),
)
def test_mutated_valid_batches(codec, n, headers, mutations, cut, fix_crc) -> None:
    data = bytearray(valid_batch(codec, n, headers))
    for where, value in mutations:
        # Mostly hit the records (and the compressed stream), sometimes the header.
        data[where % len(data)] = value
    if cut is not None:
        del data[cut % len(data) :]
    # With the CRC recomputed the record parser itself meets the damage.
    buf = refresh_crc(data) if fix_crc else bytes(data)
    decode_everything(buf)


@FUZZ
@given(
    mutations=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=3),
    codec=st.sampled_from([0, 1, 2]),
)
def test_mutated_legacy_sets(mutations, codec) -> None:
    import zlib

    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(1, codec, 1 << 20)
    for i in range(4):
        builder.append(i, 1000 + i, b"k", b"v%d" % i)
    data = bytearray(builder.build())
    for where, value in mutations:
        data[where % len(data)] = value
    if len(data) > 16:
        struct.pack_into(">I", data, 12, zlib.crc32(memoryview(data)[16:]))
    decode_everything(bytes(data))


def test_fuzz_harness_can_fail() -> None:
    """The harness does let non-Kafka errors through (so the fuzz tests mean something)."""
    from storage.records import reader

    original = reader._iter_records

    def broken(*args):
        raise IndexError("boom")

    reader._iter_records = broken
    try:
        with pytest.raises(IndexError):
            decode_everything(valid_batch(0, 2, False))
    finally:
        reader._iter_records = original
