"""Storage benchmark: the log's append, read and recovery rates against raw file I/O.

Every figure is measured in one run on one disk (the temporary directory, ``/tmp`` by
default; ``--dir`` picks another). Appends are compared with ``os.write`` of the same
batch bytes to a plain file, reads with ``os.pread`` of the same file in the same chunk
size, so the ratio is what the log costs on top of the system calls it cannot avoid.
Both sides hit the page cache (no fsync: flush.messages/flush.ms are Kafka's defaults).

The ``idem`` rows append batches as the idempotent producer (on by default) writes
them: a producer id, epoch 0 and consecutive sequence numbers, so the log's per-batch
producer-state check (one dict lookup and a few compares) is on the measured path.

Every leader append validates every record (``storage.log_validator``, Kafka's
LogValidator: decompress, walk the records). The validation table prices that walk: the
same appends with it and without it (``storage.log.validate_batches`` swapped for a no-op
for those rounds only, which is the append as it was before the validator existed),
uncompressed and lz4, interleaved round by round.

Run: ``.venv/bin/python scripts/bench_storage.py [--dir DIR] [--mb N]``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import storage.log as log_module  # noqa: E402
from storage import Log  # noqa: E402
from storage.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, crc32c  # noqa: E402
from storage.log_files import RECOVERY_POINT_FILE  # noqa: E402
from storage.record_batch import RecordBatchBuilder  # noqa: E402

BATCH_SIZES = {"1 KB": 1024, "64 KB": 64 * 1024, "1 MB": 1024 * 1024}
CODECS = {"none": 0, "lz4": 3}
IDEMPOTENT_SIZES = {"1 KB idem": 1024, "64 KB idem": 64 * 1024}
PRODUCER_ID = 4242
BASE_SEQUENCE_OFFSET = 53
VALUE_SIZE = 100  # bytes per record value; the broker never looks at records anyway
FETCH_BYTES = 1024 * 1024  # max.partition.fetch.bytes default


def make_batch(size: int, producer_id: int = -1, codec: int = 0) -> bytes:
    """A v2 batch of about ``size`` bytes of 100-byte records (before compression).

    Compressed batches get JSON-like values drawn from a small vocabulary (lz4 makes
    about 2:1 of them, not the 100:1 of a repeated byte), so decompression costs about
    what it would on real data.
    """
    if producer_id >= 0:
        builder = RecordBatchBuilder(codec, producer_id=producer_id, producer_epoch=0, base_sequence=0)
    else:
        builder = RecordBatchBuilder(codec)
    rng = random.Random(size)
    while builder.estimated_size() + VALUE_SIZE + 10 <= size:
        value = b"v" * VALUE_SIZE if not codec else _json_like(rng)
        builder.append(value, timestamp=1_700_000_000_000)
    return bytes(builder.build())


_WORDS = [b'"page"', b'"/home"', b'"user"', b'"click"', b'"view"', b'"ts"', b'"ref"', b'"mobile"', b"1", b"42"]


def _json_like(rng: random.Random) -> bytes:
    """A VALUE_SIZE-byte value of random words and digits (compressible, not trivially)."""
    value = b"{" + b",".join(rng.choice(_WORDS) + b":" + b"%d" % rng.randrange(10**6) for _ in range(12))
    return value[: VALUE_SIZE - 1] + b"}"


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


def bench_validation(workdir: Path, batches: list[bytes], rounds: int) -> tuple[float, float]:
    """(seconds with validation, seconds without) for one leader append of each of ``batches``."""
    log_dir = workdir / "validate-0"
    config = {"max.message.bytes": 2 * 1024 * 1024}
    real = log_module.validate_batches

    def appends(validate) -> float:  # noqa: ANN001 - the validator to use, or a no-op
        shutil.rmtree(log_dir, ignore_errors=True)
        log_module.validate_batches = validate
        try:
            with Log(log_dir, config) as log:
                append = log.append
                start = time.perf_counter()
                for batch in batches:
                    append(batch)
                return time.perf_counter() - start
        finally:
            log_module.validate_batches = real

    with_s, without_s = 1e9, 1e9
    for _ in range(rounds):  # interleaved so both see the same machine state
        with_s = min(with_s, appends(real))
        without_s = min(without_s, appends(lambda *args, **kwargs: []))
    shutil.rmtree(log_dir, ignore_errors=True)
    return with_s, without_s


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
        print("\nleader append with record validation (Kafka's LogValidator) against the same append without it")
        print(
            f"{'batch':>10} {'codec':>5} {'wire KB':>8} | {'validated MB/s':>14} {'without MB/s':>12} {'ratio':>6}"
            f" {'us/batch':>9} | {'records/s walked':>16}"
        )
        for label, size in BATCH_SIZES.items():
            for codec_name, codec in CODECS.items():
                batch = make_batch(size, codec=codec)
                records = struct.unpack_from(">i", batch, 57)[0]
                total_mb = args.mb / 16 if size < 4096 else args.mb / 4
                count = max(1, int(total_mb * 1024 * 1024 // size))
                with_s, without_s = bench_validation(workdir, [batch] * count, args.rounds)
                mb = count * size / 1e6  # records' bytes before compression, the same for both codecs
                extra_us = (with_s - without_s) / count * 1e6
                print(
                    f"{label:>10} {codec_name:>5} {len(batch) / 1024:8.1f} | {mb / with_s:14.0f} {mb / without_s:12.0f}"
                    f" {without_s / with_s:6.0%} {extra_us:9.1f} | {count * records / max(with_s - without_s, 1e-9):16,.0f}"
                )
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
