"""Byte compatibility with kafka-python's independent v2 and legacy implementations, both ways."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage.records.builder import RecordBatchBuilder
from storage.records.columns import decode_columns
from storage.records.control import build_control_batch
from storage.records.reader import RecordBatch

# Every test here runs over both twins of the record codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

CODECS = [0, 1, 2, 3, 4]


def records(n: int) -> list[tuple[bytes | None, bytes | None, int, list]]:
    out = []
    for i in range(n):
        value = None if i % 9 == 4 else b"value-%d-" % i + bytes(i % 200)
        key = None if i % 4 == 0 else b"k%d" % i
        headers = [("a", b"1"), ("b", None)] if i % 6 == 1 else []
        out.append((value, key, 1_650_000_000_000 + i * 3 - (i % 5) * 7, headers))
    return out


def kafka_python_build(recs, codec: int, producer=(-1, -1, -1), transactional=False) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, transactional, *producer, 1 << 30)
    for offset, (value, key, ts, headers) in enumerate(recs):
        assert builder.append(offset, ts, key, value, headers) is not None
    return bytes(builder.build())


def ours_build(recs, codec: int, producer=(-1, -1, -1), transactional=False) -> bytes:
    # kafka-python writes partitionLeaderEpoch 0 where Kafka's Java client writes -1.
    builder = RecordBatchBuilder(
        codec,
        partition_leader_epoch=0,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        is_transactional=transactional,
    )
    for value, key, ts, headers in recs:
        builder.append(value, key=key, timestamp=ts, headers=headers)
    return builder.build()


def as_tuples(batch_records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch_records]


@pytest.mark.parametrize("n", [1, 10, 120])
@pytest.mark.parametrize("producer", [(-1, -1, -1), (1234, 5, 17)])
def test_uncompressed_batches_are_byte_identical(n: int, producer) -> None:
    recs = records(n)
    assert ours_build(recs, 0, producer) == kafka_python_build(recs, 0, producer)
    if producer[0] >= 0:
        assert ours_build(recs, 0, producer, True) == kafka_python_build(recs, 0, producer, True)


def test_bulk_batches_are_byte_identical() -> None:
    values = [b"%0100d" % i for i in range(500)]
    ours = RecordBatchBuilder.from_columns(values, timestamps=42, partition_leader_epoch=0).build()
    theirs = kafka_python_build([(v, None, 42, []) for v in values], 0)
    assert ours == theirs


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [3, 120])
def test_kafka_python_batches_decode_here(codec: int, n: int) -> None:
    recs = records(n)
    data = kafka_python_build(recs, codec, (99, 1, 0))
    batch = RecordBatch(data)
    batch.validate()
    if len(data) < 61 + sum(len(v or b"") for v, *_ in recs):
        assert batch.compression == codec  # kafka-python falls back to none when compression does not pay
    expected = as_tuples(DefaultRecordBatch(data))
    assert as_tuples(batch) == expected
    assert [(o, t, k, v, h) for o, t, k, v, h in expected] == [
        (i, ts, k, v, [tuple(x) for x in h]) for i, (v, k, ts, h) in enumerate(recs)
    ]
    cols = decode_columns(data)
    assert cols.value.to_pylist() == [r[3] for r in expected]
    assert cols.key.to_pylist() == [r[2] for r in expected]
    assert batch.producer_id == 99 and batch.max_timestamp == max(r[2] for r in recs)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [3, 120])
def test_our_batches_decode_in_kafka_python(codec: int, n: int) -> None:
    recs = records(n)
    data = ours_build(recs, codec, (7, 2, 100), transactional=True)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (7, 2, 100)
    assert theirs.is_transactional and theirs.records_count == n
    assert as_tuples(theirs) == as_tuples(RecordBatch(data))
    bulk = RecordBatchBuilder.from_columns([r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs])
    bulk.compression = codec
    bulk_data = bulk.build()
    assert DefaultRecordBatch(bulk_data).validate_crc()
    assert [r.value for r in DefaultRecordBatch(bulk_data)] == [r[0] for r in recs]


def test_control_batch_reads_in_kafka_python() -> None:
    data = build_control_batch(False, producer_id=3, producer_epoch=1, coordinator_epoch=2, timestamp=10)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional
    (marker,) = list(theirs)
    assert marker.abort and marker.version == 0 and marker.offset == 0 and marker.timestamp == 10
