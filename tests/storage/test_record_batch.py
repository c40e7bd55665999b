"""Record batch v2: building, reading, columnar paths, control batches and bad input."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import batch_header
from storage.errors import CorruptRecordError, RecordTooLargeError, UnknownMagicError
from storage.records.builder import RecordBatchBuilder
from storage.records.columns import decode_columns
from storage.records.control import build_control_batch
from storage.records.reader import Record, RecordBatch, iter_batches

# Every test here runs over both twins of the record codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

CODECS = [0, 1, 2, 3, 4]


def sample_records(n: int) -> list[tuple[bytes | None, bytes | None, int, tuple]]:
    """(value, key, timestamp, headers) with nulls, empties, headers and big values mixed in."""
    out = []
    for i in range(n):
        value = None if i % 11 == 3 else (b"" if i % 13 == 5 else bytes([i % 256]) * (i % 300))
        key = None if i % 3 == 0 else b"key-%d" % i
        headers = (("trace", b"t%d" % i), ("nul", None), ("ünï", b"")) if i % 7 == 0 else ()
        out.append((value, key, 1_700_000_000_000 + (i * 37) % 1000 - 500, headers))
    return out


def build(records, codec=0, **kwargs) -> bytes:
    builder = RecordBatchBuilder(codec, **kwargs)
    for value, key, ts, headers in records:
        builder.append(value, key=key, timestamp=ts, headers=headers)
    return builder.build()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [1, 5, 47, 48, 300])
def test_round_trip_every_codec(codec: int, n: int) -> None:
    records = sample_records(n)
    data = build(records, codec, base_offset=1000)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.compression == codec and len(batch) == n and batch.size == len(data)
    assert (batch.base_offset, batch.last_offset, batch.next_offset) == (1000, 1000 + n - 1, 1000 + n)
    assert batch.max_timestamp == max(r[2] for r in records)
    got = list(batch)
    assert got == [Record(1000 + i, ts, k, v, tuple(h)) for i, (v, k, ts, h) in enumerate(records)]
    # Iterating twice decodes once and gives the same records.
    assert list(batch.records()) == got


@pytest.mark.parametrize("codec", CODECS)
def test_decode_columns_matches_iteration(codec: int) -> None:
    records = sample_records(200)
    buf = build(records, codec, base_offset=10) + build(records[:60], codec, base_offset=210)
    cols = decode_columns(buf, headers=True)
    expected = [r for b in iter_batches(buf) for r in b]
    assert len(cols) == len(expected) == 260
    assert cols.offset.tolist() == [r.offset for r in expected]
    assert cols.timestamp.tolist() == [r.timestamp for r in expected]
    assert cols.timestamp_type.tolist() == [0] * 260
    assert cols.key.to_pylist() == [r.key for r in expected]
    assert cols.value.to_pylist() == [r.value for r in expected]
    assert cols.headers.to_pylist() == [[{"key": k, "value": v} for k, v in r.headers] for r in expected]
    table = cols.to_arrow(topic="t", partition=3)
    assert table.column_names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert table.schema.field("timestamp").type == pa.timestamp("ms")
    assert table.column("partition").to_pylist() == [3] * 260


def test_decode_columns_min_offset_and_empty() -> None:
    buf = build(sample_records(100), base_offset=50)
    cols = decode_columns(buf, min_offset=120)
    assert cols.offset.tolist() == list(range(120, 150))
    assert cols.value.to_pylist() == [r.value for r in RecordBatch(buf) if r.offset >= 120]
    empty = decode_columns(b"")
    assert len(empty) == 0 and len(empty.to_arrow()) == 0


def test_log_append_time_gives_every_record_max_timestamp() -> None:
    data = bytearray(build(sample_records(60)))
    headers = batch_header.check_batches(data)
    batch_header.set_log_append_time(data, headers, 1_800_000_000_000)
    batch = RecordBatch(bytes(data))
    batch.validate()
    assert batch.timestamp_type == 1
    assert {r.timestamp for r in batch} == {1_800_000_000_000}
    cols = decode_columns(bytes(data))
    assert set(cols.timestamp.tolist()) == {1_800_000_000_000}
    assert set(cols.timestamp_type.tolist()) == {1}
    built = RecordBatchBuilder(timestamp_type=1)
    built.append(b"x", timestamp=5)
    assert RecordBatch(built.build()).timestamp_type == 1


def test_producer_fields_and_attributes() -> None:
    data = build(
        sample_records(3),
        2,
        producer_id=77,
        producer_epoch=3,
        base_sequence=41,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    batch = RecordBatch(data)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 41)
    assert batch.is_transactional and not batch.is_control
    assert batch.header.partition_leader_epoch == 9 and batch.header.last_sequence == 43


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch(commit: bool) -> None:
    data = build_control_batch(commit, producer_id=12, producer_epoch=4, coordinator_epoch=6, timestamp=99)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_control and batch.is_transactional and len(batch) == 1
    assert batch.control_record() == (0, 1 if commit else 0, 6)
    assert batch.control_record().is_commit is commit
    (record,) = list(batch)
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, 6)
    # Control batches are not data: the columnar decode skips them.
    buf = build(sample_records(4)) + data + build(sample_records(2), base_offset=5)
    assert decode_columns(buf).offset.tolist() == [0, 1, 2, 3, 5, 6]
    with pytest.raises(ValueError):
        RecordBatch(build(sample_records(1))).control_record()


def test_append_many_and_from_columns_match_append() -> None:
    values = [bytes([i % 256]) * (100 if i < 150 else 37) for i in range(300)]
    keys = [None if i % 2 else b"k%d" % i for i in range(300)]
    timestamps = list(range(1000, 1300))
    per_record = RecordBatchBuilder(partition_leader_epoch=0)
    for v, k, t in zip(values, keys, timestamps, strict=True):
        per_record.append(v, key=k, timestamp=t)
    bulk = RecordBatchBuilder(partition_leader_epoch=0)
    assert bulk.append_many(values, keys, timestamps) == 0
    arrow = RecordBatchBuilder.from_columns(
        pa.array(values, pa.binary()), pa.array(keys, pa.binary()), np.array(timestamps), partition_leader_epoch=0
    )
    assert bulk.build() == per_record.build() == arrow.build()
    assert len(bulk) == 300 and bulk.estimated_size() == len(bulk.build())


def test_append_many_fixed_size_crosses_varint_widths() -> None:
    # Offset deltas 63/64 and 8191/8192 change the record size: several matrix runs.
    values = [b"v" * 100] * 9000
    data = RecordBatchBuilder.from_columns(values, timestamps=7).build()
    cols = decode_columns(data)
    assert cols.offset.tolist() == list(range(9000))
    assert cols.value.to_pylist() == values
    assert [r.value for r in RecordBatch(data)] == values


def test_append_many_varied_values_nulls_and_mixing() -> None:
    values = [None if i % 5 == 0 else b"x" * (i % 97) for i in range(500)]
    builder = RecordBatchBuilder("lz4")
    builder.append(b"first", timestamp=100)
    builder.append_many(values, timestamps=np.arange(500) + 101)
    builder.append(b"last", key=b"k", timestamp=50, headers=[("h", b"1")])
    got = list(RecordBatch(builder.build()))
    assert [r.value for r in got] == [b"first", *values, b"last"]
    assert [r.offset for r in got] == list(range(502))
    assert got[-1].timestamp == 50 and got[-1].headers == (("h", b"1"),)
    assert RecordBatch(builder.build()).max_timestamp == 600


def test_from_columns_sliced_arrow_and_strings() -> None:
    arr = pa.array([b"a", b"bb", None, b"dddd"], pa.binary()).slice(1)
    assert [r.value for r in RecordBatch(RecordBatchBuilder.from_columns(arr, timestamps=1).build())] == [
        b"bb",
        None,
        b"dddd",
    ]
    strings = pa.chunked_array([pa.array(["x", "yy"]), pa.array(["zzz"])])
    assert [r.value for r in RecordBatch(RecordBatchBuilder.from_columns(strings, timestamps=1).build())] == [
        b"x",
        b"yy",
        b"zzz",
    ]


def test_offset_delta_gaps() -> None:
    builder = RecordBatchBuilder(base_offset=100)
    builder.append(b"a", timestamp=1)
    assert builder.append(b"b", timestamp=1, offset_delta=5) == 5
    assert builder.append(b"c", timestamp=1) == 6
    batch = RecordBatch(builder.build())
    assert [r.offset for r in batch] == [100, 105, 106] and batch.last_offset == 106
    with pytest.raises(ValueError):
        builder.append(b"d", offset_delta=2)


def test_empty_builder_builds_nothing_and_bad_arguments() -> None:
    assert RecordBatchBuilder().build() == b""
    builder = RecordBatchBuilder()
    with pytest.raises(TypeError):
        builder.append("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        builder.append(b"v", key=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        builder.append(b"v", timestamp=-5)
    assert len(builder) == 0 and builder.build() == b""
    with pytest.raises(ValueError):
        RecordBatchBuilder(timestamp_type=2)


def test_default_timestamp_is_now() -> None:
    import time

    before = int(time.time() * 1000)
    builder = RecordBatchBuilder()
    builder.append(b"x")
    builder.append_many([b"y"])
    after = int(time.time() * 1000)
    assert all(before <= r.timestamp <= after for r in RecordBatch(builder.build()))


def test_max_batch_bytes() -> None:
    builder = RecordBatchBuilder(max_batch_bytes=200)
    builder.append(b"x" * 50, timestamp=1)
    assert builder.has_room_for(b"x" * 50)
    assert not builder.has_room_for(b"x" * 150)
    before = builder.estimated_size()
    with pytest.raises(RecordTooLargeError):
        builder.append(b"x" * 150, timestamp=1)
    with pytest.raises(RecordTooLargeError):
        builder.append_many([b"x" * 40] * 5, timestamps=1)
    # A failed append leaves nothing behind.
    assert builder.estimated_size() == before and len(builder) == 1
    assert [r.value for r in RecordBatch(builder.build())] == [b"x" * 50]
    with pytest.raises(RecordTooLargeError):
        RecordBatchBuilder(max_batch_bytes=100).append(b"y" * 100)


def test_iter_batches_ignores_trailing_partial_batch() -> None:
    one, two = build(sample_records(3)), build(sample_records(4), base_offset=3)
    buf = one + two
    for cut in (len(one), len(one) + 5, len(one) + 61, len(buf) - 1):
        assert [len(b) for b in iter_batches(buf[:cut])] == [3]
        assert len(decode_columns(buf[:cut])) == 3
    assert [b.base_offset for b in iter_batches(buf)] == [0, 3]
    assert [b.base_offset for b in iter_batches(memoryview(bytearray(buf)))] == [0, 3]


def _refresh_crc(data: bytearray) -> bytes:
    crc = batch_header.crc32c(memoryview(data)[batch_header.ATTRIBUTES_OFFSET :])
    struct.pack_into(">I", data, batch_header.CRC_OFFSET, crc)
    return bytes(data)


def test_crc_mismatch() -> None:
    data = bytearray(build(sample_records(10)))
    data[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        RecordBatch(bytes(data)).validate()
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_batches(bytes(data)))
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_columns(bytes(data))


def test_unknown_magic() -> None:
    data = bytearray(build(sample_records(2)))
    data[16] = 3
    with pytest.raises(UnknownMagicError):
        RecordBatch(bytes(data))
    data[16] = 1
    with pytest.raises(UnknownMagicError):
        decode_columns(bytes(data))


def test_unknown_codec_is_corrupt() -> None:
    data = bytearray(build(sample_records(2)))
    struct.pack_into(">h", data, 21, 6)
    with pytest.raises(CorruptRecordError):
        RecordBatch(_refresh_crc(data))


def test_truncated_batch() -> None:
    data = build(sample_records(5))
    for cut in (10, 17, 40, 60, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            RecordBatch(data[:cut])


@pytest.mark.parametrize("n", [3, 100])
def test_records_count_inconsistent_with_header(n: int) -> None:
    for count in (n - 1, n + 1, 0):
        data = bytearray(build(sample_records(n)))
        struct.pack_into(">i", data, batch_header.RECORDS_COUNT_OFFSET, count)
        bad = _refresh_crc(data)
        with pytest.raises(CorruptRecordError):
            list(RecordBatch(bad))
        with pytest.raises(CorruptRecordError):
            decode_columns(bad)


@pytest.mark.parametrize("n", [3, 100])
def test_offset_delta_beyond_last_offset_delta(n: int) -> None:
    data = bytearray(build(sample_records(n)))
    struct.pack_into(">i", data, batch_header.LAST_OFFSET_DELTA_OFFSET, n - 2)
    bad = _refresh_crc(data)
    with pytest.raises(CorruptRecordError, match="offset delta"):
        list(RecordBatch(bad))
    with pytest.raises(CorruptRecordError, match="offset delta"):
        decode_columns(bad)


def test_bad_varint_and_bad_record_length() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"v", timestamp=1)
    data = bytearray(builder.build())
    over_long = data[:61] + b"\xff" * 12
    struct.pack_into(">i", over_long, 8, len(over_long) - 12)
    with pytest.raises(CorruptRecordError, match="varint|length"):
        list(RecordBatch(_refresh_crc(over_long)))
    data[61] = 0x02  # record length 1: shorter than any record
    with pytest.raises(CorruptRecordError):
        list(RecordBatch(_refresh_crc(data)))


def test_record_fields_must_match_record_length() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"value", timestamp=1)
    data = bytearray(builder.build())
    data[61 + 5] = 0x0C  # value length 6 instead of 5: runs past the record
    with pytest.raises(CorruptRecordError):
        list(RecordBatch(_refresh_crc(data)))


@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=300)),
            st.one_of(st.none(), st.binary(max_size=40)),
            st.integers(min_value=-1, max_value=2**62),
            st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3),
        ),
        min_size=1,
        max_size=70,
    ),
    codec=st.sampled_from(CODECS),
)
def test_round_trip_property(records, codec) -> None:
    data = build(records, codec, base_offset=7)
    batch = RecordBatch(data)
    batch.validate()
    got = list(batch)
    first = records[0][2]
    assert got == [Record(7 + i, t, k, v, tuple(h)) for i, (v, k, t, h) in enumerate(records)]
    assert batch.header.base_timestamp == first
    cols = decode_columns(data, headers=True)
    assert cols.value.to_pylist() == [r[0] for r in records]
    assert cols.key.to_pylist() == [r[1] for r in records]
    assert cols.timestamp.tolist() == [r[2] for r in records]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.binary(max_size=200)), min_size=1, max_size=200),
    with_keys=st.booleans(),
)
def test_bulk_equals_per_record_property(values, with_keys) -> None:
    keys = [v[:3] if v is not None else None for v in values] if with_keys else None
    ts = list(range(5, 5 + len(values)))
    one = RecordBatchBuilder()
    for i, v in enumerate(values):
        one.append(v, key=keys[i] if keys else None, timestamp=ts[i])
    many = RecordBatchBuilder()
    many.append_many(values, keys, ts)
    assert one.build() == many.build()


def compressed_empty_batch(codec: int, base_offset: int) -> bytes:
    """A batch of no records whose body is the codec's encoding of nothing (a cleaner may keep one)."""
    from storage import compression

    body = compression.compress(codec, b"")
    data = bytearray(
        batch_header.HEADER.pack(base_offset, 49 + len(body), -1, 2, 0, codec, 0, 5, 5, -1, -1, -1, 0) + body
    )
    struct.pack_into(">I", data, batch_header.CRC_OFFSET, batch_header.crc32c(memoryview(data)[21:]))
    return bytes(data)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_compressed_batch_of_no_records_decodes_to_nothing(codec: int) -> None:
    """Alone, first, between or last in a fetch, decode_columns reads every record around it."""
    one = build([(b"v", b"k", 7, ())], codec, base_offset=1)
    for buf in (
        compressed_empty_batch(codec, 0),
        compressed_empty_batch(codec, 0) + one,
        one + compressed_empty_batch(codec, 2) + build([(b"w", None, 8, ())], base_offset=3),
        one + compressed_empty_batch(codec, 2),
    ):
        cols = decode_columns(buf, headers=True)
        expected = [r for b in iter_batches(buf) for r in b]
        assert cols.offset.tolist() == [r.offset for r in expected]
        assert cols.value.to_pylist() == [r.value for r in expected]
    assert list(RecordBatch(compressed_empty_batch(codec, 0))) == []


def test_records_read_as_named_tuples() -> None:
    """Either twin's Record (a named tuple, or the compiled C class) reads the same way."""
    data = build([(b"v", b"k", 7, [("h", b"x"), ("n", None)]), (None, None, 9, [])], base_offset=5)
    first, second = RecordBatch(data)
    assert (first.offset, first.timestamp, first.key, first.value, first.headers) == (
        5, 7, b"k", b"v", (("h", b"x"), ("n", None))
    )  # fmt: skip
    assert (second.offset, second.key, second.value, second.headers) == (6, None, None, ())
    offset, timestamp, key, value, headers = first
    assert (offset, timestamp, key, value, headers) == tuple(first) == first
    assert len(first) == 5 and first[0] == 5 and first[-1] == headers and first[1:3] == (7, b"k")
    assert first == Record(5, 7, b"k", b"v", (("h", b"x"), ("n", None))) == (5, 7, b"k", b"v", headers)
    assert second == Record(6, 9, None, None) and first != second and first < second
    assert hash(first) == hash((5, 7, b"k", b"v", headers)) and len({first, Record(*first)}) == 1
    assert repr(second) == "Record(offset=6, timestamp=9, key=None, value=None, headers=())"
    assert Record._fields == ("offset", "timestamp", "key", "value", "headers")
    assert first._asdict() == {"offset": 5, "timestamp": 7, "key": b"k", "value": b"v", "headers": headers}
    assert first._replace(value=b"w") == (5, 7, b"k", b"w", headers) and first.value == b"v"
    assert pickle.loads(pickle.dumps(first)) == first
    with pytest.raises(AttributeError):
        first.value = b"w"  # type: ignore[misc]


def test_records_keep_offsets_and_timestamps_past_int64() -> None:
    """A base offset or timestamp near 2**63 plus the deltas: exact Python ints, as the reference's."""
    records = [(b"a", None, 2**63 - 2, []), (b"b", None, 2**63 - 1, []), (b"c", None, 2**63 - 1, [])]
    got = list(RecordBatch(build(records, base_offset=2**63 - 2)))
    assert [(r.offset, r.timestamp) for r in got] == [
        (2**63 - 2, 2**63 - 2),
        (2**63 - 1, 2**63 - 1),
        (2**63, 2**63 - 1),
    ]
    assert got[2] == (2**63, 2**63 - 1, None, b"c", ())
