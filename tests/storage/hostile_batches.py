"""Hostile produce requests for the property tests of the leader's append, and their oracle.

``requests()`` draws arbitrary byte strings and valid batches damaged in every way a
hostile or broken client could: random bytes anywhere, header fields set to random values,
cuts, a bad batch behind a good one, with the CRC mostly recomputed so that the damage
reaches the record parser. ``check_stored`` says whether what the log stored for an
accepted request is that request as Kafka would store it.
"""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from storage import batch_header as bh
from storage.errors import KafkaError, UnknownServerError
from storage.legacy import upconvert
from storage.records.builder import RecordBatchBuilder
from storage.records.columns import decode_columns
from storage.records.reader import RecordBatch, iter_batches

# Header fields a mutation may set: (offset, struct format).
FIELDS = {
    "batchLength": (bh.LENGTH_OFFSET, ">i"),
    "magic": (bh.MAGIC_OFFSET, ">b"),
    "attributes": (bh.ATTRIBUTES_OFFSET, ">h"),
    "lastOffsetDelta": (bh.LAST_OFFSET_DELTA_OFFSET, ">i"),
    "baseTimestamp": (bh.BASE_TIMESTAMP_OFFSET, ">q"),
    "maxTimestamp": (bh.MAX_TIMESTAMP_OFFSET, ">q"),
    "producerId": (bh.PRODUCER_ID_OFFSET, ">q"),
    "baseSequence": (53, ">i"),
    "recordsCount": (bh.RECORDS_COUNT_OFFSET, ">i"),
}
_LIMITS = {"b": 7, "h": 15, "i": 31, "q": 63}


def valid_batch(codec: int, n: int, keys: bool, headers: bool, ts_step: int) -> bytes:
    """A batch as a producer builds it (no producer id: the producer-state checks are
    another test's business), records with varied sizes, nulls and headers."""
    builder = RecordBatchBuilder(codec)
    for i in range(n):
        builder.append(
            b"value-%d" % i * (1 + i % 3) if i % 5 else None,
            key=b"k%d" % i if keys or i % 2 else None,
            timestamp=1_700_000_000_000 + i * ts_step,
            headers=[("h", b"x"), ("n", None)] if headers and i % 2 else (),
        )
    return builder.build()


def refresh_crc(data: bytearray) -> None:
    """Recompute the CRC of the batch at the start of ``data`` (if a header is there)."""
    if len(data) >= bh.HEADER_SIZE:
        struct.pack_into(">I", data, bh.CRC_OFFSET, bh.crc32c(memoryview(data)[bh.ATTRIBUTES_OFFSET :]))


@st.composite
def damaged_batches(draw: st.DrawFn) -> bytes:
    data = bytearray(
        valid_batch(
            draw(st.sampled_from([0, 1, 2, 3, 4])),
            draw(st.sampled_from([1, 2, 7, 60])),
            draw(st.booleans()),
            draw(st.booleans()),
            draw(st.sampled_from([0, 1, -3, 10**6])),
        )
    )
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(sorted(FIELDS)))
        offset, fmt = FIELDS[name]
        bits = _LIMITS[fmt[-1]]
        struct.pack_into(fmt, data, offset, draw(st.integers(-(2**bits), 2**bits - 1)))
    for _ in range(draw(st.integers(0, 3))):
        # Mostly the records (and the compressed stream), sometimes the header.
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        del data[draw(st.integers(0, len(data) - 1)) :]
    if draw(st.integers(0, 9)) > 1:  # mostly: past the CRC, into the records
        refresh_crc(data)
    return bytes(data)


def requests() -> st.SearchStrategy[bytes]:
    """Produce request bodies: arbitrary bytes, valid batches, damaged batches, and a damaged
    batch behind a valid one (the request must be taken whole or not at all)."""
    valid = st.builds(
        valid_batch,
        st.sampled_from([0, 3, 4]),
        st.integers(1, 60),
        st.booleans(),
        st.booleans(),
        st.sampled_from([0, 1, -3]),
    )
    return st.one_of(
        st.binary(max_size=300),
        valid,
        damaged_batches(),
        damaged_batches(),
        st.tuples(valid, damaged_batches()).map(lambda pair: pair[0] + pair[1]),
    )


def is_kafka_named(error: BaseException) -> bool:
    """A refusal is one of Kafka's errors with its code, not a generic or unknown one."""
    return isinstance(error, KafkaError) and type(error) not in (KafkaError, UnknownServerError) and error.code > 0


def as_appended(request: bytes) -> bytes:
    """The bytes a log appends for ``request`` before it assigns anything: magic 0/1 message
    sets are up-converted (Kafka's broker converts them too)."""
    if len(request) > bh.MAGIC_OFFSET and request[bh.MAGIC_OFFSET] < bh.CURRENT_MAGIC:
        return upconvert(request)
    return request


def check_stored(request: bytes, stored: bytes, first_offset: int, leader_epoch: int) -> None:
    """Assert that ``stored`` is ``request`` as Kafka's leader stores it.

    Byte for byte, except what the leader assigns: baseOffset (consecutive from
    ``first_offset``) and partitionLeaderEpoch; and, as Kafka's LogValidator does, a
    CreateTime batch whose header disagrees with its records gets the records' largest
    timestamp as maxTimestamp (with CreateTime and a new CRC). Every stored batch is
    readable by the consumers' decoder.
    """
    sent = as_appended(request)
    assert len(stored) == len(sent)
    offset, position = first_offset, 0
    while position < len(sent):
        h = bh.read_header(stored, position)
        end = position + h.size
        mine, theirs = stored[position:end], sent[position:end]
        assert (h.base_offset, h.partition_leader_epoch) == (offset, leader_epoch)
        assert mine[bh.LENGTH_OFFSET : bh.LEADER_EPOCH_OFFSET] == theirs[bh.LENGTH_OFFSET : bh.LEADER_EPOCH_OFFSET]
        assert mine[bh.MAGIC_OFFSET : bh.CRC_OFFSET] == theirs[bh.MAGIC_OFFSET : bh.CRC_OFFSET]
        if mine[bh.CRC_OFFSET :] != theirs[bh.CRC_OFFSET :]:
            # Only the CreateTime correction may differ: the CRC, the attributes' timestamp
            # bit and maxTimestamp; everything else is as sent.
            for a, b in (bh.LAST_OFFSET_DELTA_OFFSET, bh.MAX_TIMESTAMP_OFFSET), (bh.PRODUCER_ID_OFFSET, h.size):
                assert mine[a:b] == theirs[a:b]
            batch = RecordBatch(stored, position)
            batch.validate()
            assert batch.timestamp_type == bh.CREATE_TIME
            assert batch.max_timestamp == max(r.timestamp for r in batch)
            assert (
                h.attributes & ~bh.TIMESTAMP_TYPE_MASK
                == bh.read_header(sent, position).attributes & ~bh.TIMESTAMP_TYPE_MASK
            )
        offset, position = h.next_offset, end
    decode_columns(stored, headers=True)  # both of the consumers' decoders read it
    for batch in iter_batches(stored):
        list(batch)


__all__ = ["check_stored", "is_kafka_named", "requests"]
