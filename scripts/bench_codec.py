"""Record batch codec benchmark: encode/decode rates for 100-byte uncompressed records.

Measures rayqueue's per-record paths (``RecordBatchBuilder.append``, iterating
``RecordBatch``), its bulk paths (``append_many``/``from_columns``, ``decode_columns``) and,
in the same run, kafka-python's pure-Python codec as a baseline. Batches hold
``RECORDS_PER_BATCH`` records (about 1 MiB, Kafka's default ``max.message.bytes``) so
buffers are reused the way a producer's and consumer's are.

Run: ``python scripts/bench_codec.py``.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from storage.record_batch import RecordBatch, RecordBatchBuilder, decode_columns  # noqa: E402

VALUE_SIZE = 100
RECORDS_PER_BATCH = 8000
TIMESTAMP = 1_700_000_000_000


def _rate(fn: Callable[[], object], records: int, min_seconds: float = 0.6) -> float:
    """Records per second of ``fn`` (which handles ``records`` records), best of a few runs."""
    fn()  # warm up: tables, allocator, caches
    best = float("inf")
    deadline = time.perf_counter() + min_seconds
    runs = 0
    while runs < 3 or time.perf_counter() < deadline:
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
        runs += 1
    return records / best


def bench_codec(records_per_batch: int = RECORDS_PER_BATCH, min_seconds: float = 0.6) -> dict[str, float]:
    """Measure encode/decode rates (records/s); returns a dict of named figures."""
    n = records_per_batch
    rng = np.random.default_rng(1)
    values = [rng.bytes(VALUE_SIZE) for _ in range(n)]
    arrow_values = pa.array(values, pa.binary())
    # Variable-size values (50..150 bytes, 100 on average) exercise the general paths.
    varied = [rng.bytes(int(s)) for s in rng.integers(50, 151, n)]

    def encode_append() -> bytes:
        builder = RecordBatchBuilder()
        append = builder.append
        for v in values:
            append(v, None, TIMESTAMP)
        return builder.build()

    def encode_many() -> bytes:
        builder = RecordBatchBuilder()
        builder.append_many(values, timestamps=TIMESTAMP)
        return builder.build()

    def encode_columns() -> bytes:
        return RecordBatchBuilder.from_columns(arrow_values, timestamps=TIMESTAMP).build()

    def encode_many_varied() -> bytes:
        builder = RecordBatchBuilder()
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

    def decode_cols() -> int:
        return len(decode_columns(fetch))

    def decode_cols_varied() -> int:
        return len(decode_columns(batch_varied))

    results = {
        "encode_append": _rate(encode_append, n, min_seconds),
        "encode_append_many": _rate(encode_many, n, min_seconds),
        "encode_from_columns_arrow": _rate(encode_columns, n, min_seconds),
        "encode_append_many_varied_sizes": _rate(encode_many_varied, n, min_seconds),
        "decode_iter": _rate(decode_iter, n, min_seconds),
        "decode_iter_varied_sizes": _rate(decode_iter_varied, n, min_seconds),
        "decode_columns": _rate(decode_cols, 4 * n, min_seconds),
        "decode_columns_varied_sizes": _rate(decode_cols_varied, n, min_seconds),
    }

    try:
        from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    except ImportError:  # kafka-python is a test dependency only
        return results

    def kafka_encode() -> bytes:
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
        append = builder.append
        for i, v in enumerate(values):
            append(i, TIMESTAMP, None, v, [])
        return bytes(builder.build())

    def kafka_decode() -> int:
        return sum(1 for _ in DefaultRecordBatch(batch))

    results["kafka_python_encode"] = _rate(kafka_encode, n, min_seconds)
    results["kafka_python_decode"] = _rate(kafka_decode, n, min_seconds)
    return results


def main() -> None:
    """Print the figures, with the ratio to kafka-python's pure-Python codec."""
    results = bench_codec()
    base_enc = results.get("kafka_python_encode")
    base_dec = results.get("kafka_python_decode")
    print(f"record batch codec, {VALUE_SIZE}-byte values, uncompressed, {RECORDS_PER_BATCH} records/batch")
    for name, rate in results.items():
        base = base_enc if name.startswith("encode") else base_dec if name.startswith("decode") else None
        ratio = f"  ({rate / base:5.1f}x kafka-python)" if base else ""
        print(f"  {name:34s} {rate / 1e6:7.2f} M records/s{ratio}")


if __name__ == "__main__":
    main()
