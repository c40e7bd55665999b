"""Storage benchmark: the log's append, read and recovery rates against raw file I/O.

Every figure is measured in one run on one disk (the temporary directory, ``/tmp`` by
default; ``--dir`` picks another). Appends are compared with ``os.write`` of the same
batch bytes to a plain file, reads with ``os.pread`` of the same file in the same chunk
size, so the ratio is what the log costs on top of the system calls it cannot avoid.
Both sides hit the page cache (no fsync: flush.messages/flush.ms are Kafka's defaults).

The ``idem`` rows append batches as the idempotent producer (on by default) writes
them: a producer id, epoch 0 and consecutive sequence numbers, so the log's per-batch
producer-state check (one dict lookup and a few compares) is on the measured path.

Run: ``.venv/bin/python scripts/bench_storage.py [--dir DIR] [--mb N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from storage import Log  # noqa: E402
from storage.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, crc32c  # noqa: E402
from storage.log import RECOVERY_POINT_FILE  # noqa: E402
from storage.record_batch import RecordBatchBuilder  # noqa: E402

BATCH_SIZES = {"1 KB": 1024, "64 KB": 64 * 1024, "1 MB": 1024 * 1024}
IDEMPOTENT_SIZES = {"1 KB idem": 1024, "64 KB idem": 64 * 1024}
PRODUCER_ID = 4242
BASE_SEQUENCE_OFFSET = 53
VALUE_SIZE = 100  # bytes per record value; the broker never looks at records anyway
FETCH_BYTES = 1024 * 1024  # max.partition.fetch.bytes default


def make_batch(size: int, producer_id: int = -1) -> bytes:
    """An uncompressed v2 batch of about ``size`` bytes made of 100-byte records."""
    if producer_id >= 0:
        builder = RecordBatchBuilder(0, producer_id=producer_id, producer_epoch=0, base_sequence=0)
    else:
        builder = RecordBatchBuilder(0)
    value = b"v" * VALUE_SIZE
    while builder.estimated_size() + VALUE_SIZE + 10 <= size:
        builder.append(value, timestamp=1_700_000_000_000)
    return bytes(builder.build())


def idempotent_batches(size: int, count: int) -> list[bytes]:
    """``count`` batches of one idempotent producer with consecutive sequence numbers.

    The sequence is covered by the CRC, so each batch is patched and its CRC recomputed
    here, before anything is timed.
    """
    template = bytearray(make_batch(size, PRODUCER_ID))
    records = struct.unpack_from(">i", template, 57)[0]
    out = []
    for n in range(count):
        struct.pack_into(">i", template, BASE_SEQUENCE_OFFSET, (n * records) % 2**31)
        struct.pack_into(">I", template, CRC_OFFSET, crc32c(memoryview(template)[ATTRIBUTES_OFFSET:]))
        out.append(bytes(template))
    return out


def best_of(rounds: int, fn) -> float:  # noqa: ANN001 - a zero-argument callable returning seconds
    """Smallest duration over ``rounds`` runs (least disturbed by the rest of the machine)."""
    return min(fn() for _ in range(rounds))


def bench_append(workdir: Path, batches: list[bytes], rounds: int) -> tuple[float, float, Path]:
    """(log seconds, raw seconds, log directory) for one append of each of ``batches``."""
    raw_path = workdir / "raw.bin"

    def raw() -> float:
        raw_path.unlink(missing_ok=True)
        fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        start = time.perf_counter()
        for batch in batches:
            os.write(fd, batch)
        elapsed = time.perf_counter() - start
        os.close(fd)
        return elapsed

    log_dir = workdir / "bench-0"
    config = {"max.message.bytes": 2 * 1024 * 1024}

    def logged() -> float:
        shutil.rmtree(log_dir, ignore_errors=True)
        with Log(log_dir, config) as log:
            append = log.append
            start = time.perf_counter()
            for batch in batches:
                append(batch)
            elapsed = time.perf_counter() - start
        return elapsed

    raw_s, log_s = 1e9, 1e9
    for _ in range(rounds):  # interleaved so both see the same machine state
        raw_s = min(raw_s, raw())
        log_s = min(log_s, logged())
    raw_path.unlink(missing_ok=True)
    return log_s, raw_s, log_dir


def bench_read(log_dir: Path, rounds: int) -> tuple[float, float, int]:
    """(log seconds, raw seconds, bytes) reading the whole log in fetch-sized requests."""
    with Log(log_dir) as log:
        end = log.log_end_offset
        files = [s.log_path for s in log.segments]

        def logged() -> tuple[float, int]:
            offset, total, read = 0, 0, log.read
            start = time.perf_counter()
            while offset < end:
                result = read(offset, FETCH_BYTES)
                total += len(result.records)
                offset = result.next_offset
            return time.perf_counter() - start, total

        def raw() -> float:
            start = time.perf_counter()
            for path in files:
                fd = os.open(path, os.O_RDONLY)
                position, size = 0, os.fstat(fd).st_size
                while position < size:
                    position += len(os.pread(fd, FETCH_BYTES, position))
                os.close(fd)
            return time.perf_counter() - start

        raw_s, log_s, total = 1e9, 1e9, 0
        for _ in range(rounds):
            raw_s = min(raw_s, raw())
            elapsed, total = logged()
            log_s = min(log_s, elapsed)
    return log_s, raw_s, total


def bench_recovery(log_dir: Path) -> tuple[float, int]:
    """(seconds, bytes) to open the log after a crash with nothing flushed: a full scan."""
    size = sum(p.stat().st_size for p in log_dir.glob("*.log"))
    (log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
    (log_dir / RECOVERY_POINT_FILE).unlink(missing_ok=True)
    start = time.perf_counter()
    with Log(log_dir) as log:
        elapsed = time.perf_counter() - start
        assert log.size_in_bytes == size
    return elapsed, size


def main() -> None:
    """Run every benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the temporary log goes")
    parser.add_argument("--mb", type=int, default=256, help="MB appended per batch size (1 KB: a 16th)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="rayqueue-bench-", dir=args.dir))
    print(f"storage benchmark in {workdir} (one disk for every figure), best of {args.rounds} rounds")
    try:
        print(
            f"{'batch':>10} | {'append MB/s':>11} {'batches/s':>10} {'raw MB/s':>9} {'ratio':>6} |"
            f" {'read MB/s':>9} {'raw MB/s':>9} {'ratio':>6}"
        )
        for label, size in (*BATCH_SIZES.items(), *IDEMPOTENT_SIZES.items()):
            batch = make_batch(size)
            total_mb = args.mb / 16 if size < 4096 else args.mb
            count = max(1, int(total_mb * 1024 * 1024 // len(batch)))
            batches = idempotent_batches(size, count) if label in IDEMPOTENT_SIZES else [batch] * count
            log_s, raw_s, log_dir = bench_append(workdir, batches, args.rounds)
            del batches
            mb = count * len(batch) / 1e6
            read_log_s, read_raw_s, read_bytes = bench_read(log_dir, args.rounds)
            read_mb = read_bytes / 1e6
            print(
                f"{label:>10} | {mb / log_s:11.0f} {count / log_s:10.0f} {mb / raw_s:9.0f} {raw_s / log_s:6.0%} |"
                f" {read_mb / read_log_s:9.0f} {read_mb / read_raw_s:9.0f} {read_raw_s / read_log_s:6.0%}"
            )
            if label == "64 KB":
                seconds, scanned = bench_recovery(log_dir)
                recovery = f"recovery scan (CRC of every batch, index rebuild): {scanned / 1e6 / seconds:.0f} MB/s"
            shutil.rmtree(log_dir, ignore_errors=True)
        print(recovery)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        from bench_codec import main as codec_main
    except ImportError:
        print("scripts/bench_codec.py not found: no codec figures")
    else:
        codec_main()


if __name__ == "__main__":
    main()
