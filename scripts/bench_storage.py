"""Storage benchmark: the log's append, read and recovery rates against raw file I/O.

Every figure is measured in one run on one disk (the temporary directory, ``/tmp`` by
default; ``--dir`` picks another), as CPU time of this process (the machine is shared:
wall-clock figures swing with whatever else runs). Appends are leader appends (every
record walked, Kafka's LogValidator), made with each twin of the append path (compiled and
pure Python, ``storage.extensions.using``), and compared with ``os.write`` of the same batch
bytes to a plain file, and with that write plus the CRC-32C of the same bytes (Kafka's
broker checks the CRC too: the sum is the real limit). Reads are compared with
``os.pread`` of the same file in the same chunk size. Both sides hit the page cache (no
fsync: flush.messages/flush.ms are Kafka's defaults).

The ``idem`` rows append batches as the idempotent producer (on by default) writes
them: a producer id, epoch 0 and consecutive sequence numbers, so the log's per-batch
producer-state check (one dict lookup and a few compares) is on the measured path.

The walk table prices the record walk alone, per twin: a leader's request checks (headers,
CRC, every record) minus a follower's (headers and CRC), uncompressed and lz4.

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

import storage.log_validator as log_validator  # noqa: E402
from storage import AppendOrigin, Log, extensions  # noqa: E402
from storage.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, BatchHeader, crc32c  # noqa: E402
from storage.log_files import RECOVERY_POINT_FILE  # noqa: E402
from storage.log_validator import decompressed_limit  # noqa: E402
from storage.records.builder import RecordBatchBuilder  # noqa: E402

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


def clock() -> float:
    """CPU seconds of this process: the machine is shared, and wall-clock figures swing with
    whatever else runs (the page-cache copy of a write is this process's CPU time too)."""
    return time.process_time()


def twins() -> list[str]:
    """The twins to measure: compiled (when built) and pure."""
    return ["compiled", "pure"] if extensions.compiled_available() else ["pure"]


def bench_append(workdir: Path, batches: list[bytes], rounds: int) -> tuple[dict[str, float], Path]:
    """Seconds for one append of each of ``batches``: raw ``os.write``, raw write + CRC-32C of
    the same bytes (what Kafka's broker cannot avoid), and a leader append with each twin."""
    raw_path = workdir / "raw.bin"

    def raw(with_crc: bool) -> float:
        raw_path.unlink(missing_ok=True)
        fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        start = clock()
        if with_crc:
            for batch in batches:
                crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])
                os.write(fd, batch)
        else:
            for batch in batches:
                os.write(fd, batch)
        elapsed = clock() - start
        os.close(fd)
        return elapsed

    log_dir = workdir / "bench-0"
    config = {"max.message.bytes": 2 * 1024 * 1024}

    def logged(kind: str) -> float:
        shutil.rmtree(log_dir, ignore_errors=True)
        with extensions.using(kind), Log(log_dir, config) as log:
            append = log.append
            start = clock()
            for batch in batches:
                append(batch)
            elapsed = clock() - start
        return elapsed

    best = dict.fromkeys(["raw", "raw+crc", *twins()], 1e9)
    for _ in range(rounds):  # interleaved so that all see the same machine state
        best["raw"] = min(best["raw"], raw(False))
        best["raw+crc"] = min(best["raw+crc"], raw(True))
        for kind in twins():
            best[kind] = min(best[kind], logged(kind))
    raw_path.unlink(missing_ok=True)
    return best, log_dir


def _checks(views: list[memoryview], origin: AppendOrigin) -> float:
    """Seconds of the append's request checks (the twin in use) over ``views`` from ``origin``."""
    check, limit = log_validator.check_request, decompressed_limit(2 * 1024 * 1024)
    start = clock()
    for view in views:
        check(view, 2 * 1024 * 1024, True, origin, False, limit, BatchHeader)
    return clock() - start


def bench_walk(batches: list[bytes], rounds: int) -> dict[str, float]:
    """Per twin, the seconds of the leader's record walk alone (Kafka's LogValidator) over
    ``batches``: a leader's request checks minus a follower's (headers and CRC only)."""
    out = {}
    views = [memoryview(b) for b in batches]
    for kind in twins():
        with extensions.using(kind):
            leader = min(_checks(views, AppendOrigin.CLIENT) for _ in range(rounds))
            follower = min(_checks(views, AppendOrigin.REPLICATION) for _ in range(rounds))
        out[kind] = max(leader - follower, 1e-9)
    return out


def bench_read(log_dir: Path, rounds: int) -> tuple[float, float, int]:
    """(log seconds, raw seconds, bytes) reading the whole log in fetch-sized requests."""
    with Log(log_dir) as log:
        end = log.log_end_offset
        files = [s.log_path for s in log.segments]

        def logged() -> tuple[float, int]:
            offset, total, read = 0, 0, log.read
            start = clock()
            while offset < end:
                result = read(offset, FETCH_BYTES)
                total += len(result.records)
                offset = result.next_offset
            return clock() - start, total

        def raw() -> float:
            start = clock()
            for path in files:
                fd = os.open(path, os.O_RDONLY)
                position, size = 0, os.fstat(fd).st_size
                while position < size:
                    position += len(os.pread(fd, FETCH_BYTES, position))
                os.close(fd)
            return clock() - start

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
    start = clock()
    with Log(log_dir) as log:
        elapsed = clock() - start
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
    kinds = twins()
    print(
        f"storage benchmark in {workdir} (one disk for every figure), CPU time of this process, "
        f"best of {args.rounds} rounds; leader appends with the {' and the '.join(kinds)} twin"
    )
    try:
        cells = "".join(f" {kind + ' MB/s':>13} {'/raw':>5} {'/+CRC':>6}" for kind in kinds)
        print(
            f"{'batch':>10} | {'raw MB/s':>9} {'+CRC MB/s':>9} |{cells} | {'read MB/s':>9} {'raw MB/s':>9} {'ratio':>6}"
        )
        for label, size in (*BATCH_SIZES.items(), *IDEMPOTENT_SIZES.items()):
            batch = make_batch(size)
            total_mb = args.mb / 16 if size < 4096 else args.mb
            count = max(1, int(total_mb * 1024 * 1024 // len(batch)))
            batches = idempotent_batches(size, count) if label in IDEMPOTENT_SIZES else [batch] * count
            seconds, log_dir = bench_append(workdir, batches, args.rounds)
            del batches
            mb = count * len(batch) / 1e6
            read_log_s, read_raw_s, read_bytes = bench_read(log_dir, args.rounds)
            read_mb = read_bytes / 1e6
            raw_s, crc_s = seconds["raw"], seconds["raw+crc"]
            cells = "".join(
                f" {mb / seconds[kind]:13.0f} {raw_s / seconds[kind]:5.0%} {crc_s / seconds[kind]:6.0%}"
                for kind in kinds
            )
            print(
                f"{label:>10} | {mb / raw_s:9.0f} {mb / crc_s:9.0f} |{cells} |"
                f" {read_mb / read_log_s:9.0f} {read_mb / read_raw_s:9.0f} {read_raw_s / read_log_s:6.0%}"
            )
            if label == "64 KB":
                seconds_, scanned = bench_recovery(log_dir)
                recovery = f"recovery scan (CRC of every batch, index rebuild): {scanned / 1e6 / seconds_:.0f} MB/s"
            shutil.rmtree(log_dir, ignore_errors=True)
        print(recovery)
        print("\nthe leader's record walk (Kafka's LogValidator), alone: a leader's request checks minus a follower's")
        cells = "".join(f" {kind + ' us/batch':>18} {'records/s':>13}" for kind in kinds)
        print(f"{'batch':>10} {'codec':>5} {'wire KB':>8} |{cells}")
        for label, size in BATCH_SIZES.items():
            for codec_name, codec in CODECS.items():
                batch = make_batch(size, codec=codec)
                records = struct.unpack_from(">i", batch, 57)[0]
                total_mb = args.mb / 16 if size < 4096 else args.mb / 4
                count = max(1, int(total_mb * 1024 * 1024 // size))
                walk = bench_walk([batch] * count, args.rounds)
                cells = "".join(
                    f" {walk[kind] / count * 1e6:18.2f} {count * records / walk[kind]:13,.0f}" for kind in kinds
                )
                print(f"{label:>10} {codec_name:>5} {len(batch) / 1024:8.1f} |{cells}")
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
