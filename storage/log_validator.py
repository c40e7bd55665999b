"""The leader's check of every record before an append: Kafka's ``LogValidator``.

``check_batches`` (header sanity, CRC) is all a batch needs to be stored, but not all it
needs to be read: a batch whose header and CRC are fine can still hold records that no
consumer can parse (a record length that overstates the record, fewer records than
recordsCount, a body that does not decompress with the codec the attributes name). Kafka's
broker decompresses and walks every record of a leader append before writing it, and so
does this module, with the same parser the consumers use (``storage.records.reader.walk_records``),
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

An append runs ``check_request`` on its request before taking the log's lock: every batch's
header and CRC (``check_batches``), then ``validate_batches``; then, as a leader,
``patch_headers`` assigns the offsets and the leader epoch without copying the batches.
Both are kernels over the request's bytes with a compiled twin
(``storage/_compiled/log_validator.pyx``, picked at import: :mod:`storage.extensions`).

The walk is per-record work (vectorised for larger batches in Python), the one place
where the broker does it; ``scripts/bench_storage.py`` measures its cost.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from storage import batch_header
from storage.batch_header import CREATE_TIME, HEADER, HEADER_SIZE, BatchHeader, check_batches
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.extensions import load, pick
from storage.producer_state import AppendOrigin
from storage.records import Buffer
from storage.records.reader import walk_records

# How far a compressed batch may expand, relative to max.message.bytes (and at least).
DECOMPRESSED_RATIO_LIMIT = 64
MIN_DECOMPRESSED_LIMIT = 64 << 20
_MIN_INT64, _MAX_INT64 = -(2**63), 2**63 - 1
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")  # a header's first 16 bytes: baseOffset, batchLength, leader epoch


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


class _Slot(NamedTuple):
    """Where a batch header sits in the buffer of patched headers."""

    position: int
    last_offset_delta: int


def _check_request_py(
    view: memoryview,
    max_batch_size: int,
    leader: bool,
    origin: AppendOrigin,
    compacted: bool,
    max_decompressed: int,
    header_type: type[BatchHeader] = BatchHeader,
) -> tuple[list[BatchHeader], list[tuple[int, int]]]:
    """An append's checks of its request, before the lock: every batch's header and CRC
    (``check_batches``; ``leader``: as a producer writes them, within ``max_batch_size``),
    then every record (``validate_batches``, Kafka's LogValidator). Returns the headers
    (``header_type`` tuples) and the header fixes."""
    headers = check_batches(view, max_batch_size, leader)
    return headers, validate_batches(view, headers, origin, compacted=compacted, max_decompressed=max_decompressed)


def _patch_headers_py(
    view: memoryview, headers: list[BatchHeader], first_offset: int, leader_epoch: int
) -> tuple[list[memoryview], list[BatchHeader], int]:
    """Assign offsets without copying the batches: only their 61-byte headers are copied.

    baseOffset and partitionLeaderEpoch lie in the header and outside the CRC, so the
    patched headers plus the caller's untouched bodies, written with one ``writev``, are
    exactly the patched batches. Returns the write parts, the new headers (positions in
    ``view``) and the next offset.
    """
    if len(headers) == 1:  # the common case: patch the two fields directly, no loops
        h = headers[0]
        # BatchHeader fields: position, baseOffset, batchLength, partitionLeaderEpoch, the rest.
        new = tuple.__new__(BatchHeader, (h[0], first_offset, h[2], leader_epoch, *h[4:]))
        patched = _OFFSET_LENGTH_EPOCH.pack(first_offset, h[2], leader_epoch)  # the header's first 16 bytes
        return [patched, view[_OFFSET_LENGTH_EPOCH.size :]], [new], first_offset + h.last_offset_delta + 1
    patched = bytearray(b"".join([view[h.position : h.position + HEADER_SIZE] for h in headers]))
    # assign_offsets reads only position and lastOffsetDelta; a NamedTuple is far cheaper
    # to build than a copy of the frozen header.
    moved = [_Slot(n * HEADER_SIZE, h.last_offset_delta) for n, h in enumerate(headers)]
    next_offset = batch_header.assign_offsets(patched, moved, first_offset, leader_epoch)  # type: ignore[arg-type]
    patched_view = memoryview(patched)
    parts, new_headers = [], []
    for n, h in enumerate(headers):
        at = n * HEADER_SIZE
        parts.append(patched_view[at : at + HEADER_SIZE])
        parts.append(view[h.position + HEADER_SIZE : h.position + h.batch_length + batch_header.LOG_OVERHEAD])
        new_headers.append(BatchHeader(h.position, *HEADER.unpack_from(patched, at)))
    return parts, new_headers, next_offset


# The request's checks and the offset patch: the compiled kernels
# (storage/_compiled/log_validator.pyx) when built, else the pure ones above; chosen here, once.
_compiled = load(__name__, "storage._compiled.log_validator")
check_request = pick(__name__, "check_request", _check_request_py, _compiled)
patch_headers = pick(__name__, "patch_headers", _patch_headers_py, _compiled)

__all__ = [
    "DECOMPRESSED_RATIO_LIMIT",
    "MIN_DECOMPRESSED_LIMIT",
    "check_request",
    "decompressed_limit",
    "patch_headers",
    "validate_batches",
]
