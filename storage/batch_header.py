"""The record batch v2 header: layout, validation and in-place offset assignment.

This is the broker's hot path. A produce request carries one or more complete record
batches; the broker checks each header and CRC, then patches ``baseOffset`` and
``partitionLeaderEpoch`` in place (neither is covered by the CRC) and appends the same
bytes. No record inside a batch is looked at. Decoding records is ``storage.records``' job.

Layout (big-endian), as in the seeds and Kafka's ``DefaultRecordBatch``::

    0  baseOffset int64          27 baseTimestamp int64
    8  batchLength int32         35 maxTimestamp int64
    12 partitionLeaderEpoch int32 43 producerId int64
    16 magic int8                51 producerEpoch int16
    17 crc uint32 (CRC-32C of 21..end)  53 baseSequence int32
    21 attributes int16          57 recordsCount int32
    23 lastOffsetDelta int32     61 records...
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c as _crc32c

from storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, UnknownMagicError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
BASE_OFFSET = 0
LENGTH_OFFSET = 8
LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
RECORDS_COUNT_OFFSET = 57
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # smallest legal batchLength (49)

CURRENT_MAGIC = 2
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_LENGTH_AND_MAGIC = struct.Struct(">qi4xb")  # baseOffset, batchLength, skip epoch, magic


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``, as the batch header stores it."""
    return _crc32c.crc32c(data)


class BatchHeader(NamedTuple):
    """The fixed header fields of one v2 record batch, and where it lies in a buffer.

    A named tuple rather than a frozen dataclass: the broker builds one per batch on the
    produce path, and a tuple is about four times cheaper to create (measured: ~1.3 us
    against ~6 us on this machine); it is just as immutable.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Offset just past the batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        """Whether the batch belongs to a transaction."""
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        """Whether the batch is a commit/abort marker."""
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534: when attribute bit 6 is set, baseTimestamp is the time after which the
        cleaner may remove the batch's tombstones; None when not set."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def last_sequence(self) -> int:
        """Sequence number of the batch's last record (wrapping as Kafka does)."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


_tuple_new = tuple.__new__  # builds a BatchHeader in C (NamedTuple._make is a Python call)


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at ``position``; the caller has checked that 61 bytes are there."""
    return _tuple_new(BatchHeader, (position, *HEADER.unpack_from(buf, position)))


def check_batch(buf: bytes | bytearray | memoryview, position: int, end: int, max_batch_size: int) -> BatchHeader:
    """Validate the batch at ``position`` (header sanity and CRC) and return its header.

    Raises CorruptRecordError for a truncated, malformed or CRC-failing batch,
    UnknownMagicError for a magic byte other than 2, RecordTooLargeError past
    ``max_batch_size`` bytes.
    """
    if end - position < LOG_OVERHEAD + 5:
        raise CorruptRecordError(f"truncated batch at byte {position}: {end - position} bytes left")
    if end - position >= HEADER_SIZE:  # the usual case: one unpack for every check below
        header = _tuple_new(BatchHeader, (position, *HEADER.unpack_from(buf, position)))  # read_header, inline
        length, magic = header.batch_length, header.magic
    else:
        header = None
        _, length, magic = _LENGTH_AND_MAGIC.unpack_from(buf, position)
    if magic != CURRENT_MAGIC:
        raise UnknownMagicError(f"batch at byte {position} has magic {magic}; only v2 is stored")
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at byte {position} has batchLength {length} < {MIN_BATCH_LENGTH}")
    size = length + LOG_OVERHEAD
    if size > max_batch_size:
        raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_batch_size}")
    if position + size > end or header is None:
        raise CorruptRecordError(f"batch at byte {position} needs {size} bytes, {end - position} left")
    actual = _crc32c.crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    if actual != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch in batch at byte {position}: stored {header.crc:#x}, computed {actual:#x}"
        )
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError(f"batch at byte {position} has negative lastOffsetDelta or recordsCount")
    if header.compression > 4:
        raise CorruptRecordError(f"batch at byte {position} has unknown compression codec {header.compression}")
    return header


def check_batches(
    buf: bytes | bytearray | memoryview, max_batch_size: int = 2**31 - 1, producer_batches: bool = False
) -> list[BatchHeader]:
    """Validate every batch of a buffer that must hold whole batches only.

    With ``producer_batches`` the batches must also be as a producer writes them: at least
    one record, offsets contiguous inside each batch (recordsCount == lastOffsetDelta + 1),
    as Kafka's broker requires before it assigns offsets in place (InvalidRecordError,
    Kafka's INVALID_RECORD, otherwise).
    """
    end = len(buf)
    if end == 0:
        raise CorruptRecordError("empty record set")
    headers = []
    position = 0
    while True:
        header = check_batch(buf, position, end, max_batch_size)
        if producer_batches and (header.records_count == 0 or header.records_count != header.last_offset_delta + 1):
            raise InvalidRecordError(
                f"batch at byte {position}: recordsCount {header.records_count} does not match "
                f"lastOffsetDelta {header.last_offset_delta}"
            )
        headers.append(header)
        position += header.batch_length + LOG_OVERHEAD
        if position >= end:
            return headers


def scan_valid_prefix(buf: bytes | bytearray | memoryview, start: int = 0) -> tuple[list[BatchHeader], int]:
    """Headers of the valid batches from ``start`` and the byte where validity ends.

    Recovery uses this: the first batch that runs past the end of the buffer or fails its
    CRC (or is otherwise malformed) ends the valid prefix.
    """
    headers = []
    position, end = start, len(buf)
    while position < end:
        try:
            header = check_batch(buf, position, end, 2**31 - 1)
        except CorruptRecordError:
            break
        headers.append(header)
        position += header.size
    return headers, position


def batch_boundaries(buf: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    """(position, size) of each whole batch in ``buf``, without checking CRCs.

    A partial batch at the end (a read cut at ``max_bytes``) is left out.
    """
    out = []
    position, end = 0, len(buf)
    while end - position >= LOG_OVERHEAD:
        size = _INT32.unpack_from(buf, position + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE or position + size > end:
            break
        out.append((position, size))
        position += size
    return out


def has_control_batch(records: object) -> bool:
    """Whether any whole batch in ``records`` has the control attribute (headers only; not
    bytes: False, the append refuses it as it is)."""
    if not isinstance(records, bytes | bytearray | memoryview):
        return False
    return any(records[p + ATTRIBUTES_OFFSET + 1] & CONTROL_MASK for p, _ in batch_boundaries(records))


def assign_offsets(buf: bytearray, headers: list[BatchHeader], first_offset: int, leader_epoch: int) -> int:
    """Patch baseOffset and partitionLeaderEpoch of each batch in place; return the next offset.

    Neither field is covered by the CRC, so no CRC is recomputed.
    """
    offset = first_offset
    for header in headers:
        _INT64.pack_into(buf, header.position + BASE_OFFSET, offset)
        _INT32.pack_into(buf, header.position + LEADER_EPOCH_OFFSET, leader_epoch)
        offset += header.last_offset_delta + 1
    return offset


def set_log_append_time(buf: bytearray, headers: list[BatchHeader], timestamp: int) -> None:
    """Stamp each batch with LogAppendTime: set the timestamp-type bit and maxTimestamp.

    Both fields are covered by the CRC, so it is recomputed (a C call per batch), as
    Kafka's broker does for ``message.timestamp.type=LogAppendTime``.
    """
    view = memoryview(buf)
    for header in headers:
        p = header.position
        _INT16.pack_into(buf, p + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
        _INT64.pack_into(buf, p + MAX_TIMESTAMP_OFFSET, timestamp)
        _UINT32.pack_into(buf, p + CRC_OFFSET, crc32c(view[p + ATTRIBUTES_OFFSET : p + header.size]))


def set_max_timestamp(buf: bytearray, header: BatchHeader, timestamp_type: int, timestamp: int) -> None:
    """Set one batch's timestamp type and maxTimestamp and recompute its CRC (Kafka's
    ``DefaultRecordBatch.setMaxTimestamp``): the leader makes a CreateTime batch's header
    agree with its records."""
    p = header.position
    attributes = (header.attributes & ~TIMESTAMP_TYPE_MASK) | (timestamp_type << 3)
    _INT16.pack_into(buf, p + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, p + MAX_TIMESTAMP_OFFSET, timestamp)
    _UINT32.pack_into(buf, p + CRC_OFFSET, crc32c(memoryview(buf)[p + ATTRIBUTES_OFFSET : p + header.size]))


_PRODUCER_STATE = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence


def with_producer_state(
    batch: bytes | bytearray | memoryview,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
) -> bytes:
    """A copy of the one batch ``batch`` with its producer id, epoch, base sequence and
    transactional flag set and its CRC recomputed (Kafka's reopenAndRewriteProducerState:
    the header rewritten, the records untouched). One copy and one CRC pass: only the
    header's 36 changed bytes are made anew, the records are read where they are."""
    view = memoryview(batch)
    attributes = _INT16.unpack_from(view, ATTRIBUTES_OFFSET)[0]
    attributes = attributes | TRANSACTIONAL_MASK if transactional else attributes & ~TRANSACTIONAL_MASK
    # attributes .. baseSequence: the CRC'd header bytes before recordsCount.
    fields = b"".join(
        (
            _INT16.pack(attributes),
            view[ATTRIBUTES_OFFSET + 2 : PRODUCER_ID_OFFSET],
            _PRODUCER_STATE.pack(producer_id, producer_epoch, base_sequence),
        )
    )
    crc = _crc32c.crc32c(view[RECORDS_COUNT_OFFSET:], _crc32c.crc32c(fields))
    return b"".join((view[:CRC_OFFSET], _UINT32.pack(crc), fields, view[RECORDS_COUNT_OFFSET:]))


def base_offset_of(buf: bytes | bytearray | memoryview, position: int = 0) -> int:
    """The baseOffset field of the batch at ``position``."""
    return _INT64.unpack_from(buf, position + BASE_OFFSET)[0]
