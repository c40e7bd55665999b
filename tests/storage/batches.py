"""Build valid v2 record batches for the storage tests."""

from __future__ import annotations

from collections.abc import Sequence

from kafka.record.default_records import DefaultRecordBatchBuilder

try:  # the project's own builder (storage.record_batch, the codec)
    from storage.records.builder import RecordBatchBuilder
except ImportError:  # pragma: no cover - fall back to kafka-python's
    RecordBatchBuilder = None


def make_batch(
    values: Sequence[bytes],
    timestamps: Sequence[int] | None = None,
    compression: int = 0,
    *,
    base_offset: int = 0,
    keys: Sequence[bytes | None] | None = None,
) -> bytes:
    """One v2 batch holding ``values``, with offsets ``base_offset + i`` and the given timestamps."""
    timestamps = list(timestamps) if timestamps is not None else [1_000 + i for i in range(len(values))]
    keys = list(keys) if keys is not None else [None] * len(values)
    if RecordBatchBuilder is not None:
        ours = RecordBatchBuilder(compression, base_offset=base_offset)
        for key, value, ts in zip(keys, values, timestamps, strict=True):
            ours.append(value, key=key, timestamp=ts)
        return bytes(ours.build())
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**30,
    )
    for i, (key, value, ts) in enumerate(zip(keys, values, timestamps, strict=True)):
        builder.append(i, ts, key, value, [])
    out = bytearray(builder.build())
    out[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(out)


def abandon(log) -> None:  # noqa: ANN001 - a storage.Log
    """Simulate the owning process dying: drop file handles and the lock, write nothing.

    No flush, no index trim, no clean-shutdown marker: what a crash leaves behind
    (the kernel closes descriptors and releases the flock of a dead process).
    """
    for segment in log.segments:
        segment.close_without_trim()
    log._file_lock.release()
    log._closed = True


def log_bytes(log) -> bytes:  # noqa: ANN001 - a storage.Log
    """Every byte of every segment's .log file, in order."""
    return b"".join(s.log_path.read_bytes() for s in log.segments)
