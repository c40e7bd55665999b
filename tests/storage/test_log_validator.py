"""The leader validates every record before an append (Kafka's LogValidator) and refuses
control batches from clients; refused input leaves the log as it was."""

from __future__ import annotations

import struct

import pytest

from storage import Log, build_control_batch, decode_columns
from storage import batch_header as bh
from storage.errors import CorruptRecordError, InvalidRecordError, InvalidRequestError
from storage.records.builder import RecordBatchBuilder
from storage.records.reader import RecordBatch
from tests.storage.batches import log_bytes

# Every test here runs over both twins of the record codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

P = 42  # a producer id


def records_batch(n: int, codec: int = 0, *, key: bytes | None = b"k", **kwargs: object) -> bytes:
    """``n`` records of equal size (one-byte varints throughout: fields at fixed places)."""
    builder = RecordBatchBuilder(codec, **kwargs)
    for i in range(n):
        builder.append(b"v%02d" % (i % 100), key=key, timestamp=1000)
    return builder.build()


def refresh_crc(data: bytearray) -> bytes:
    """The batch with its CRC recomputed: the damage gets past the header check to the records."""
    struct.pack_into(">I", data, bh.CRC_OFFSET, bh.crc32c(memoryview(data)[bh.ATTRIBUTES_OFFSET :]))
    return bytes(data)


def overstated_length(n: int) -> bytes:
    data = bytearray(records_batch(n))
    data[bh.HEADER_SIZE] += 2  # the first record's length varint (zig-zag: +1)
    return refresh_crc(data)


def fewer_records_than_counted(n: int) -> bytes:
    # recordsCount and lastOffsetDelta agree with each other (the header is fine), not with the body.
    data = bytearray(records_batch(n))
    struct.pack_into(">i", data, bh.RECORDS_COUNT_OFFSET, n + 1)
    struct.pack_into(">i", data, bh.LAST_OFFSET_DELTA_OFFSET, n)
    return refresh_crc(data)


def wrong_codec(n: int, actual: int, claimed: int) -> bytes:
    data = bytearray(records_batch(n, actual))
    struct.pack_into(">h", data, bh.ATTRIBUTES_OFFSET, claimed)
    return refresh_crc(data)


UNREADABLE = {
    "record length overstated": overstated_length(3),
    "record length overstated, 100 records": overstated_length(100),
    "recordsCount above the records": fewer_records_than_counted(3),
    "recordsCount above the records, 100 records": fewer_records_than_counted(100),
    "says lz4, is uncompressed": wrong_codec(3, 0, 3),
    "says none, is lz4": wrong_codec(100, 3, 0),
    "says gzip, is zstd": wrong_codec(20, 4, 1),
    "says snappy, is uncompressed": wrong_codec(3, 0, 2),
}


@pytest.fixture
def log(tmp_path):
    opened = Log(tmp_path / "t-0")
    yield opened
    opened.close()


def state(log: Log) -> tuple[int, int, bytes]:
    return log.log_end_offset, log.size_in_bytes, log_bytes(log)


def values(log: Log) -> list[bytes]:
    return decode_columns(log.read(0, 1 << 30).records).value.to_pylist()


@pytest.mark.parametrize("name", list(UNREADABLE))
def test_unreadable_records_are_refused_and_the_log_keeps_serving(log, name):
    """Valid header and CRC, unreadable records: CORRUPT_MESSAGE, nothing written, and a
    consumer still reads every earlier record (before, the batch was appended and poisoned
    the partition for every consumer)."""
    log.append(records_batch(2))
    before = state(log)
    with pytest.raises(CorruptRecordError) as refused:
        log.append(UNREADABLE[name])
    assert refused.value.code == 2
    # Also when the bad batch follows a good one in the same request: all or nothing.
    with pytest.raises(CorruptRecordError):
        log.append(records_batch(1) + UNREADABLE[name])
    assert state(log) == before
    assert values(log) == [b"v00", b"v01"]
    log.append(records_batch(1))
    assert values(log) == [b"v00", b"v01", b"v00"]


def test_walk_records_and_the_consumer_decoder_agree_on_the_examples():
    """The validator and the readers share one parser: what one refuses the other cannot read."""
    from storage.records.reader import walk_records

    for data in UNREADABLE.values():
        with pytest.raises(CorruptRecordError):
            walk_records(data, bh.read_header(data))
        with pytest.raises(CorruptRecordError):
            decode_columns(data)


def swapped_offset_deltas(n: int) -> bytes:
    data = bytearray(records_batch(n))
    size = data[bh.HEADER_SIZE] // 2 + 1  # every record has the same one-byte length varint
    first, second = bh.HEADER_SIZE + 3, bh.HEADER_SIZE + size + 3  # length, attributes, timestampDelta, offsetDelta
    data[first], data[second] = data[second], data[first]
    return refresh_crc(data)


@pytest.mark.parametrize("n", [3, 100])
def test_offset_deltas_other_than_0_to_n_minus_1_are_invalid_records(log, n):
    before = state(log)
    bad = swapped_offset_deltas(n)
    with pytest.raises(InvalidRecordError) as refused:
        log.append(bad)
    assert refused.value.code == 87
    assert state(log) == before


def test_a_header_whose_count_disagrees_with_its_offsets_is_an_invalid_record(log):
    data = bytearray(records_batch(3))
    struct.pack_into(">i", data, bh.RECORDS_COUNT_OFFSET, 2)
    with pytest.raises(InvalidRecordError):
        log.append(refresh_crc(data))
    assert log.log_end_offset == 0


def test_a_client_cannot_write_control_batches(log):
    """A forged COMMIT marker from a client is INVALID_RECORD; the transaction stays open
    (read_committed readers keep waiting for the coordinator's real marker)."""
    open_txn = records_batch(2, producer_id=P, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append(open_txn)
    assert log.first_unstable_offset == 0
    before = state(log)
    forged = build_control_batch(True, P, 0, timestamp=1000)
    with pytest.raises(InvalidRecordError, match="control batch"):
        log.append(forged)  # the default origin: a client's
    with pytest.raises(InvalidRecordError):
        log.append(records_batch(1) + forged)  # hidden behind an ordinary batch
    assert state(log) == before and log.first_unstable_offset == 0
    # The coordinators' marker path may.
    info = log.append(forged, origin="coordinator")
    assert info.first_offset == 2
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None


def test_origins_are_explicit(log, tmp_path):
    from storage import AppendOrigin

    with pytest.raises(InvalidRequestError):
        log.append(records_batch(1), origin="nobody")
    with pytest.raises(InvalidRequestError, match="cannot assign offsets"):
        log.append(records_batch(1), origin=AppendOrigin.REPLICATION)  # would skip validation
    assert log.append(records_batch(1), origin="coordinator").first_offset == 0
    assert log.append(records_batch(1), origin=AppendOrigin.CLIENT).first_offset == 1
    # A follower keeps its leader's bytes unvalidated (the leader checked them): a marker
    # written by the leader's coordinator path replicates.
    follower = Log(tmp_path / "f-0")
    try:
        marker = bytearray(build_control_batch(False, P, 0, timestamp=1000))
        struct.pack_into(">q", marker, 0, 0)
        follower.append(bytes(marker), assign_offsets=False)
        assert follower.log_end_offset == 1 and log_bytes(follower) == bytes(marker)
    finally:
        follower.close()


def test_compacted_topics_refuse_keyless_records(tmp_path):
    with Log(tmp_path / "c-0", {"cleanup.policy": "compact"}) as log:
        with pytest.raises(InvalidRecordError, match="without a key"):
            log.append(records_batch(60, key=None))
        log.append(records_batch(3))
        assert log.log_end_offset == 3


def with_header(data: bytes, *, max_timestamp: int, log_append_time: bool = False) -> bytes:
    out = bytearray(data)
    struct.pack_into(">q", out, bh.MAX_TIMESTAMP_OFFSET, max_timestamp)
    if log_append_time:
        struct.pack_into(">h", out, bh.ATTRIBUTES_OFFSET, bh.read_header(out).attributes | bh.TIMESTAMP_TYPE_MASK)
    return refresh_crc(out)


@pytest.mark.parametrize("n", [3, 100])
def test_a_create_time_header_is_made_to_agree_with_its_records(tmp_path, n):
    """As Kafka's setMaxTimestamp: a header whose maxTimestamp (or timestamp type) does not
    match the records is rewritten, CRC and all; honest batches keep their bytes."""
    timestamps = [5000 + (i * 7919) % n for i in range(n)]
    builder = RecordBatchBuilder()
    for ts in timestamps:
        builder.append(b"v", key=b"k", timestamp=ts)
    honest = builder.build()
    lying = with_header(honest, max_timestamp=1, log_append_time=True)
    with Log(tmp_path / "t-0") as log:
        log.append(lying)  # alone in the log: its header alone feeds the time index
        log.append(honest)
        stored = log.read(0, 1 << 30).records
        fixed, kept = RecordBatch(stored, 0), RecordBatch(stored, len(honest))
        fixed.validate()  # the CRC was recomputed
        assert fixed.timestamp_type == bh.CREATE_TIME and fixed.max_timestamp == max(timestamps)
        assert stored[bh.HEADER_SIZE : len(honest)] == honest[bh.HEADER_SIZE :]  # the records as sent
        assert stored[len(honest) + bh.ATTRIBUTES_OFFSET :] == honest[bh.ATTRIBUTES_OFFSET :]  # untouched
        assert kept.max_timestamp == max(timestamps)
        assert log.offset_for_timestamp(max(timestamps)).offset == timestamps.index(max(timestamps))


def zstd_bomb(expanded: int) -> bytes:
    """A batch whose zstd body (a few KiB) expands to ``expanded`` zero bytes."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    chunk = bytes(1 << 20)
    body = b"".join(compressor.compress(chunk) for _ in range(expanded >> 20)) + compressor.flush()
    data = bytearray(records_batch(1, 4)[: bh.HEADER_SIZE] + body)
    struct.pack_into(">i", data, bh.LENGTH_OFFSET, len(data) - bh.LOG_OVERHEAD)
    return refresh_crc(data)


def test_a_decompression_bomb_is_refused_before_it_takes_the_memory(log):
    """A few KiB of zstd that would expand to 1 GiB: MESSAGE_TOO_LARGE, with the memory
    the leader used bounded by the limit (64 MiB here), not by the bomb."""
    import tracemalloc

    from storage.errors import RecordTooLargeError

    bomb = zstd_bomb(1 << 30)
    assert len(bomb) < 64 * 1024
    before = state(log)
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError, match="expand"):
            log.append(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 << 20, peak
    assert state(log) == before


@pytest.mark.parametrize("n", [2, 60])
def test_a_record_timestamp_past_int64_is_a_corrupt_record(log, n):
    """baseTimestamp near the int64 limit plus a record's timestampDelta: no such time exists.
    Refused as CORRUPT_MESSAGE, not a struct.error from patching the header (which would kill the call)."""
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(b"v", key=b"k", timestamp=1000 * i)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, bh.BASE_TIMESTAMP_OFFSET, 2**63 - 10)
    before = state(log)
    with pytest.raises(CorruptRecordError, match="timestamp"):
        log.append(refresh_crc(data))
    assert state(log) == before
