"""Control batches: the commit and abort markers a transaction's end writes to each of its
partitions (Kafka's ``ControlRecordType`` and ``EndTransactionMarker``).

A control batch has the transactional and control attributes set and one record: key =
version int16 0 + type int16 (0 abort, 1 commit), value = version int16 0 +
coordinatorEpoch int32. ``RecordBatch.control_record`` (:mod:`storage.records.reader`)
reads one.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from storage.batch_header import NO_PARTITION_LEADER_EPOCH
from storage.errors import CorruptRecordError

_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")

CONTROL_ABORT = 0  # the control record types of end-transaction markers
CONTROL_COMMIT = 1


class ControlRecord(NamedTuple):
    """The content of a control batch's record: an end-transaction marker."""

    version: int
    type: int  # CONTROL_ABORT, CONTROL_COMMIT (other values: control types this version does not know)
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        """Whether the marker commits (rather than aborts) the transaction."""
        return self.type == CONTROL_COMMIT


def parse_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """The marker a control record's key and value hold (Kafka's ControlRecordType.parse and
    EndTransactionMarker.deserialize); CorruptRecordError when they are too short."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key is shorter than 4 bytes")
    version, kind = _CONTROL_KEY.unpack_from(key)
    coordinator_epoch = 0
    if kind in (CONTROL_ABORT, CONTROL_COMMIT):
        if value is None or len(value) < 6:
            raise CorruptRecordError("end-transaction marker value is shorter than 6 bytes")
        _, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    return ControlRecord(version, kind, coordinator_epoch)


def build_control_batch(
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A commit or abort marker batch, as Kafka's transaction coordinator has brokers write.

    Transactional and control attributes set, one record: key = version int16 0 + type
    int16 (0 abort, 1 commit), value = version int16 0 + coordinatorEpoch int32.
    """
    # Imported here: the readers need this module (ControlRecord), not the builder and its pyarrow.
    from storage.records.builder import RecordBatchBuilder

    builder = RecordBatchBuilder(
        0,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
    builder.append(
        _CONTROL_VALUE.pack(0, coordinator_epoch),
        key=_CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT),
        timestamp=timestamp,
    )
    return builder.build()


__all__ = ["CONTROL_ABORT", "CONTROL_COMMIT", "ControlRecord", "build_control_batch", "parse_control_record"]
