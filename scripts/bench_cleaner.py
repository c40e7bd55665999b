"""Log cleaner throughput, compiled and pure-Python twins side by side, against a plain read +
decode of the same log.

    .venv/bin/python scripts/bench_cleaner.py [--mb 150] [--keys 10000] [--value-bytes 100]

Builds a compacted log of ``--mb`` MB (batches of 100 records with keys drawn from
``--keys`` distinct keys and ``--value-bytes`` values) once, then for each twin of the
storage hot paths (``storage.extensions.using``): reads it all back with a ``Log.read`` loop
decoding every batch (``decode_columns``), and cleans a fresh copy of it once. Prints both
rates and their ratio per twin. Times are CPU time of this process (the machine is shared).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import storage.cleaner as cleaner_module  # noqa: E402
from storage import Log, extensions  # noqa: E402
from storage.cleaner import clean  # noqa: E402
from storage.records.builder import RecordBatchBuilder  # noqa: E402
from storage.records.columns import decode_columns  # noqa: E402

CONFIG = {"cleanup.policy": "compact", "segment.bytes": 64 * 1024 * 1024, "min.cleanable.dirty.ratio": 0}


def build(directory: Path, mb: int, keys: int, value_bytes: int) -> Log:
    log = Log(directory, CONFIG)
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


def measure(original: Path, copy: Path) -> tuple[float, float, object]:
    """(read + decode MB/s, clean MB/s, CleanerStats) of the twin in use, on a fresh copy of the log."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(original, copy)
    log = Log(copy, CONFIG)
    try:
        started = time.process_time()
        _, read_bytes = read_all(log)
        read_rate = read_bytes / 1e6 / (time.process_time() - started)
        started = time.process_time()
        stats = clean(log)
        assert stats is not None
        clean_rate = stats.bytes_read / 1e6 / (time.process_time() - started)
        return read_rate, clean_rate, stats
    finally:
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=150)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    kinds = ["compiled", "pure"] if extensions.compiled_available() else ["pure"]
    with tempfile.TemporaryDirectory() as tmp:
        original = Path(tmp) / "bench-0"
        log = build(original, args.mb, args.keys, args.value_bytes)
        print(
            f"log cleaner: {log.size_in_bytes / 1e6:.1f} MB, {log.log_end_offset} records, "
            f"{len(log.segments)} segments, {args.keys} keys (CPU time of this process)"
        )
        log.close()
        print(f"{'twin':>9} | {'read + decode MB/s':>18} | {'clean MB/s':>10} {'records/s':>11} | {'clean / read':>12}")
        for kind in kinds:
            # pyarrow imports pandas on its first column (about 0.2 s): not part of either rate.
            decode_columns(RecordBatchBuilder.from_columns([b"v"], [b"k"], 0).build())
            # The cleaner's own builder (it imported the class by name) follows the twin too.
            builder = extensions.twin_of(kind, "storage.records.builder", "RecordBatchBuilder")
            with extensions.using(kind), _patched(cleaner_module, "RecordBatchBuilder", builder):
                read_rate, clean_rate, stats = measure(original, Path(tmp) / f"{kind}-0")
            records = stats.messages_read / max(stats.bytes_read / 1e6 / clean_rate, 1e-9)
            print(
                f"{kind:>9} | {read_rate:18.1f} | {clean_rate:10.1f} {records:11,.0f} | {clean_rate / read_rate:12.3f}"
            )
        print(
            f"(one pass: {stats.bytes_read / 1e6:.1f} -> {stats.bytes_written / 1e6:.2f} MB, "
            f"{stats.messages_read} -> {stats.messages_written} records, map {stats.map_entries} keys)"
        )


@contextlib.contextmanager
def _patched(module: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


if __name__ == "__main__":
    main()
