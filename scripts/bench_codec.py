"""Record batch codec benchmark: the compiled and pure-Python twins side by side, 100-byte records.

Measures rayqueue's per-record paths (``RecordBatchBuilder.append``, iterating
``RecordBatch``, the Consumer's records of a fetch) and its bulk paths
(``append_many``/``from_columns``, ``decode_columns``)
with each twin of the codec (``storage.extensions.using``), and in the same process the
baselines: aiokafka's compiled record builder and reader (the targets: the compiled
``append`` and iteration at 1.0x or more) and kafka-python's pure-Python codec. Batches
hold ``RECORDS_PER_BATCH`` records (about 1 MiB, Kafka's default ``max.message.bytes``).

Times are CPU time of this process, best of several runs: the machine is shared, and
wall-clock figures swing with whatever else runs.

Run: ``python scripts/bench_codec.py``.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from storage import extensions  # noqa: E402
from storage.records.builder import RecordBatchBuilder  # noqa: E402
from storage.records.columns import decode_columns, decode_rows, iter_rows  # noqa: E402
from storage.records.reader import RecordBatch  # noqa: E402

VALUE_SIZE = 100
RECORDS_PER_BATCH = 8000
TIMESTAMP = 1_700_000_000_000
TWINS = ("compiled", "pure")
# The rows with an aiokafka counterpart: its builder's append and its reader's iteration.
AIOKAFKA_ROWS = {
    "RecordBatchBuilder.append, one at a time": "aiokafka_encode",
    "RecordBatch iteration": "aiokafka_decode",
}


class _ConsumerShaped(NamedTuple):
    """The fields of rayqueue.ConsumerRecord (whose module imports Ray)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    leader_epoch: int


def _rate(fn: Callable[[], object], records: int, min_seconds: float = 0.6) -> float:
    """Records per CPU second of ``fn`` (which handles ``records`` records), best of a few runs."""
    fn()  # warm up: tables, allocator, caches
    best = float("inf")
    deadline = time.process_time() + min_seconds
    runs = 0
    while runs < 3 or time.process_time() < deadline:
        gc.collect()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
        runs += 1
    return records / max(best, 1e-9)


def _columns(n: int) -> tuple[list[bytes], pa.Array, list[bytes]]:
    rng = np.random.default_rng(1)
    values = [rng.bytes(VALUE_SIZE) for _ in range(n)]
    # Variable-size values (50..150 bytes, 100 on average) exercise the general paths.
    varied = [rng.bytes(int(s)) for s in rng.integers(50, 151, n)]
    return values, pa.array(values, pa.binary()), varied


def bench_twin(kind: str, records_per_batch: int = RECORDS_PER_BATCH, min_seconds: float = 0.6) -> dict[str, float]:
    """Encode/decode rates (records/s) of one twin of the codec."""
    with extensions.using(kind):
        return _bench_twin(kind, records_per_batch, min_seconds)


def _bench_twin(kind: str, records_per_batch: int, min_seconds: float) -> dict[str, float]:
    n = records_per_batch
    values, arrow_values, varied = _columns(n)
    builder_class = extensions.twin_of(kind, "storage.records.builder", "RecordBatchBuilder")

    def encode_append() -> bytes:
        builder = builder_class()
        append = builder.append
        for v in values:
            append(v, None, TIMESTAMP)
        return builder.build()

    def encode_many() -> bytes:
        builder = builder_class()
        builder.append_many(values, timestamps=TIMESTAMP)
        return builder.build()

    def encode_columns() -> bytes:
        return builder_class.from_columns(arrow_values, timestamps=TIMESTAMP).build()

    def encode_many_varied() -> bytes:
        builder = builder_class()
        builder.append_many(varied, timestamps=TIMESTAMP)
        return builder.build()

    batch = encode_append()
    batch_varied = encode_many_varied()
    fetch = batch * 4  # a fetch response: several batches back to back

    def decode_iter() -> int:
        count = 0
        for _ in RecordBatch(batch):
            count += 1
        return count

    def decode_iter_varied() -> int:
        return sum(1 for _ in RecordBatch(batch_varied))

    def consumer_records() -> int:
        # What the Consumer does with a fetch answer: the rows in one pass, then one
        # ConsumerRecord-shaped named tuple built per record as it is taken.
        rows = decode_rows(fetch, min_offset=0)
        records, _ = iter_rows(rows, _ConsumerShaped, ("topic", 0), (0,), rows.offset.tolist())
        return sum(1 for _ in records)

    return {
        "RecordBatchBuilder.append, one at a time": _rate(encode_append, n, min_seconds),
        "append_many (list of bytes)": _rate(encode_many, n, min_seconds),
        "from_columns (Arrow array)": _rate(encode_columns, n, min_seconds),
        "append_many, 50-150 byte values": _rate(encode_many_varied, n, min_seconds),
        "RecordBatch iteration": _rate(decode_iter, n, min_seconds),
        "RecordBatch iteration, 50-150 bytes": _rate(decode_iter_varied, n, min_seconds),
        "decode_columns (4 batches)": _rate(lambda: len(decode_columns(fetch)), 4 * n, min_seconds),
        "decode_rows + iter_rows (Consumer, 4)": _rate(consumer_records, 4 * n, min_seconds),
        "decode_columns, 50-150 bytes": _rate(lambda: len(decode_columns(batch_varied)), n, min_seconds),
    }


def bench_baselines(records_per_batch: int = RECORDS_PER_BATCH, min_seconds: float = 0.6) -> dict[str, float]:
    """aiokafka's compiled codec and kafka-python's pure one, on the same records."""
    n = records_per_batch
    values, _, _ = _columns(n)
    out: dict[str, float] = {}
    builder = RecordBatchBuilder()
    for v in values:
        builder.append(v, None, TIMESTAMP)
    batch = builder.build()
    try:
        from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
        from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
    except ImportError:  # a test extra; without it the targets have no baseline
        print("aiokafka is not installed: no compiled baseline")
    else:
        if "_crecords" not in AioBuilder.__module__:
            print(f"note: aiokafka runs its pure-Python codec here ({AioBuilder.__module__}), not its compiled one")

        def aio_encode() -> bytes:
            b = AioBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
            append = b.append
            for i, v in enumerate(values):
                append(i, TIMESTAMP, None, v, [])
            return bytes(b.build())

        def aio_decode() -> int:
            count = 0
            for _ in AioBatch(batch):
                count += 1
            return count

        out["aiokafka_encode"] = _rate(aio_encode, n, min_seconds)
        out["aiokafka_decode"] = _rate(aio_decode, n, min_seconds)
    try:
        from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    except ImportError:  # kafka-python is a test dependency only
        return out

    def kafka_encode() -> bytes:
        b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
        append = b.append
        for i, v in enumerate(values):
            append(i, TIMESTAMP, None, v, [])
        return bytes(b.build())

    out["kafka_python_encode"] = _rate(kafka_encode, n, min_seconds)
    out["kafka_python_decode"] = _rate(lambda: sum(1 for _ in DefaultRecordBatch(batch)), n, min_seconds)
    return out


def main() -> None:
    """Print both twins side by side, with the ratios to aiokafka's compiled codec."""
    twins = [kind for kind in TWINS if kind == "pure" or extensions.compiled_available()]
    results = {kind: bench_twin(kind) for kind in twins}
    base = bench_baselines()
    print(
        f"\nrecord batch codec, {VALUE_SIZE}-byte values, uncompressed, {RECORDS_PER_BATCH} records/batch"
        " (records per CPU second, best of several runs)"
    )
    header = "".join(f"{kind + ' M/s':>14}" for kind in twins)
    print(f"  {'path':40s}{header}   vs aiokafka (compiled), same process")
    for name in results[twins[0]]:
        rates = [results[kind][name] for kind in twins]
        cells = "".join(f"{rate / 1e6:14.2f}" for rate in rates)
        baseline = base.get(AIOKAFKA_ROWS.get(name, ""))
        ratio = "   " + " / ".join(f"{rate / baseline:.2f}x" for rate in rates) if baseline else ""
        print(f"  {name:40s}{cells}{ratio}")
    for name, label in (
        ("aiokafka_encode", "aiokafka builder, one at a time"),
        ("aiokafka_decode", "aiokafka reader, iteration"),
        ("kafka_python_encode", "kafka-python builder (pure Python)"),
        ("kafka_python_decode", "kafka-python reader (pure Python)"),
    ):
        if name in base:
            print(f"  {label:40s}{base[name] / 1e6:14.2f}")


if __name__ == "__main__":
    main()
