"""Log cleaner throughput: MB/s of log cleaned, against a plain read + decode of the same log.

    .venv/bin/python scripts/bench_cleaner.py [--mb 150] [--keys 10000] [--value-bytes 100]

Builds a compacted log of ``--mb`` MB (batches of 100 records with keys drawn from
``--keys`` distinct keys and ``--value-bytes`` values), reads it all back with a
``Log.read`` loop decoding every batch (``decode_columns``), then cleans it once and
prints both rates and their ratio.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from storage import Log, RecordBatchBuilder, decode_columns
from storage.cleaner import clean


def build(directory: Path, mb: int, keys: int, value_bytes: int) -> Log:
    log = Log(
        directory, {"cleanup.policy": "compact", "segment.bytes": 64 * 1024 * 1024, "min.cleanable.dirty.ratio": 0}
    )
    rng = random.Random(7)
    value = b"v" * value_bytes
    key_names = [b"key-%08d" % n for n in range(keys)]
    while log.size_in_bytes < mb * 1_000_000:
        ks = [key_names[rng.randrange(keys)] for _ in range(100)]
        log.append(RecordBatchBuilder.from_columns([value] * 100, ks, 1_000).build())
    log.roll()
    return log


def read_all(log: Log) -> tuple[int, int]:
    offset, records, size = log.log_start_offset, 0, 0
    while offset < log.log_end_offset:
        info = log.read(offset, 1024 * 1024)
        records += len(decode_columns(info.records).offset)
        size += len(info.records)
        offset = info.next_offset
    return records, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=150)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = build(Path(tmp) / "bench-0", args.mb, args.keys, args.value_bytes)
        size = log.size_in_bytes
        print(f"log: {size / 1e6:.1f} MB, {log.log_end_offset} records, {len(log.segments)} segments")
        started = time.perf_counter()
        records, read_bytes = read_all(log)
        read_s = time.perf_counter() - started
        read_rate = read_bytes / 1e6 / read_s
        print(f"read + decode: {read_rate:8.1f} MB/s  ({records / read_s / 1e6:.2f} M records/s)")
        stats = clean(log)
        assert stats is not None
        print(
            f"clean:         {stats.mb_per_s:8.1f} MB/s  ({stats.messages_read / stats.duration_s / 1e6:.2f} M records/s; "
            f"{stats.bytes_read / 1e6:.1f} -> {stats.bytes_written / 1e6:.2f} MB, "
            f"{stats.messages_read} -> {stats.messages_written} records, map {stats.map_entries} keys, "
            f"{stats.duration_s:.2f} s)"
        )
        print(f"clean / read ratio: {stats.mb_per_s / read_rate:.3f}")
        log.close()


if __name__ == "__main__":
    main()
