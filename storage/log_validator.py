"""The leader's check of every record before an append: Kafka's ``LogValidator``.

``check_batches`` (header sanity, CRC) is all a batch needs to be stored, but not all it
needs to be read: a batch whose header and CRC are fine can still hold records that no
consumer can parse (a record length that overstates the record, fewer records than
recordsCount, a body that does not decompress with the codec the attributes name). Kafka's
broker decompresses and walks every record of a leader append before writing it, and so
does this module, with the same parser the consumers use (``record_batch.walk_records``),
so whatever the leader accepts a consumer can read.

What is checked, per origin (``AppendOrigin``), as in Kafka:

- CLIENT (producer data): no control batches (INVALID_RECORD: only the coordinators'
  marker path writes them); every record readable (CORRUPT_MESSAGE); offset deltas exactly
  0..recordsCount-1 (INVALID_RECORD); on a compacted topic every record keyed
  (INVALID_RECORD);
- COORDINATOR (markers, transactional offset commits, written by rayqueue's own actors):
  the same, control batches allowed;
- REPLICATION (followers): nothing; the leader validated the batches and a follower keeps
  its bytes as they are.

Decompressing is bounded (``decompressed_limit``): Kafka's broker streams through a batch
record by record, this one decompresses it whole, and a megabyte of zstd can expand to
gigabytes. A batch that would expand past 64 times max.message.bytes (at least 64 MiB) is
refused as MESSAGE_TOO_LARGE before it takes that memory.

Kafka also makes each batch's header agree with its records on a CreateTime topic: the
maxTimestamp becomes the largest record timestamp and the timestamp type CreateTime. The
validator reports the batches whose headers say otherwise; ``Log.append`` rewrites those
two fields (and the CRC) as Kafka's ``setMaxTimestamp`` does. Batches from a well-behaved
producer never need it and keep their bytes.

The walk is per-record work in Python (vectorised for larger batches), the one place
where the broker does it; ``scripts/bench_storage.py`` measures its cost.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.batch_header import CREATE_TIME, BatchHeader
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.producer_state import AppendOrigin
from storage.record_batch import Buffer, walk_records

# How far a compressed batch may expand, relative to max.message.bytes (and at least).
DECOMPRESSED_RATIO_LIMIT = 64
MIN_DECOMPRESSED_LIMIT = 64 << 20
_MIN_INT64, _MAX_INT64 = -(2**63), 2**63 - 1


def decompressed_limit(max_message_bytes: int) -> int:
    """The most bytes the records of one compressed batch may take once decompressed."""
    return max(MIN_DECOMPRESSED_LIMIT, DECOMPRESSED_RATIO_LIMIT * max_message_bytes)


def validate_batches(
    buf: Buffer,
    headers: Sequence[BatchHeader],
    origin: AppendOrigin,
    *,
    compacted: bool = False,
    max_decompressed: int | None = None,
) -> list[tuple[int, int]]:
    """Validate every record of the batches ``headers`` describe in ``buf`` for an append from ``origin``.

    Raises CorruptRecordError for records that cannot be read, InvalidRecordError for
    batches a broker must refuse (see the module docstring) and RecordTooLargeError for a
    compressed batch expanding past ``max_decompressed`` bytes; nothing is changed. Returns
    ``(index, max_timestamp)`` for each batch whose header's maxTimestamp or timestamp type
    disagrees with its records (empty for a well-formed request): a CreateTime log writes
    those batches with that maxTimestamp and CreateTime.
    """
    if origin is AppendOrigin.REPLICATION:
        return []
    client = origin is AppendOrigin.CLIENT
    fixes: list[tuple[int, int]] = []
    for index, h in enumerate(headers):
        if client and h.is_control:
            raise InvalidRecordError(
                f"batch at byte {h.position} is a control batch: clients may not write transaction markers"
            )
        summary = walk_records(buf, h, max_decompressed)
        if not summary.offsets_in_order:
            raise InvalidRecordError(
                f"batch at byte {h.position}: the offset deltas of its {h.records_count} records are not 0..{h.records_count - 1}"
            )
        if compacted and summary.null_keys:
            raise InvalidRecordError(
                f"batch at byte {h.position}: a compacted topic cannot accept a record without a key"
            )
        if h.max_timestamp != summary.max_timestamp or h.timestamp_type != CREATE_TIME:
            if not _MIN_INT64 <= summary.max_timestamp <= _MAX_INT64:
                # baseTimestamp + a timestampDelta past what a timestamp (int64) can hold.
                raise CorruptRecordError(f"batch at byte {h.position}: a record timestamp does not fit int64")
            fixes.append((index, summary.max_timestamp))
    return fixes


__all__ = ["DECOMPRESSED_RATIO_LIMIT", "MIN_DECOMPRESSED_LIMIT", "decompressed_limit", "validate_batches"]
