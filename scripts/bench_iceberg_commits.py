"""Iceberg topics: what one translation commit costs as the table's snapshots pile up, with
rayqueue's snapshot expiry and without it, measured in the same run.

Each commit is what a translator does per step (``actors.iceberg.table.commit``: read the
table's state, write a small Parquet file, commit a snapshot carrying the partition's offset),
against a table in a fresh SQLite catalog and local warehouse. Two tables take the same number
of commits, alternating one by one: ``kept`` holds every snapshot (``history.expire.*`` unset
and old enough to keep them all), ``expired`` has ``history.expire.max-snapshot-age-ms=0`` and
keeps 100 (``min-snapshots-to-keep``), its translator expiring as it does after a commit. The
baseline is each table's own first 100 commits; the ratio of the last 100 to them says how
the cost grows (1.0: it does not).

    .venv/bin/python scripts/bench_iceberg_commits.py [--commits 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1000)
    args = parser.parse_args()
    import pyarrow as pa

    from actors.iceberg import config as ic
    from actors.iceberg import layout
    from actors.iceberg.table import (
        MAX_SNAPSHOT_AGE,
        MIN_SNAPSHOTS_TO_KEEP,
        IcebergCatalog,
        PartitionState,
        commit,
        expirable_snapshots,
        expire_snapshots,
        write_data_files,
    )

    with tempfile.TemporaryDirectory(prefix="rq-bench-iceberg-commits-") as root:
        catalog = IcebergCatalog(ic.iceberg_settings({"log.dirs": root}))
        props = {
            "kept": {MAX_SNAPSHOT_AGE: str(10**12)},
            "expired": {MAX_SNAPSHOT_AGE: "0", MIN_SNAPSHOTS_TO_KEEP: "100"},
        }
        state: dict[str, PartitionState | None] = {}
        for name, p in props.items():
            table = catalog.table(name, layout.KEY_VALUE_SCHEMA, [])
            with table.transaction() as txn:
                txn.set_properties(p)
            state[name] = None
        times: dict[str, list[float]] = {name: [] for name in props}
        for i in range(args.commits):
            for name in props:
                began = time.perf_counter()
                table = catalog.load(name)
                rows = pa.Table.from_pylist(
                    [{"key": b"k", "value": b"v" * 200, "headers": [], "rayqueue": {"topic": name, "partition": 0,
                      "offset": i, "timestamp": None, "timestamp_type": 0}}],
                    schema=layout.KEY_VALUE_SCHEMA,
                )  # fmt: skip
                new = PartitionState(i + 1, 0)
                result = commit(catalog, name, write_data_files(table, rows), 0, state[name], new, "bench", 1)
                state[name] = result.state
                if name == "expired":
                    ids = expirable_snapshots(result.table, int(time.time() * 1000))
                    if ids:
                        expire_snapshots(result.table, ids)
                times[name].append(time.perf_counter() - began)
            if (i + 1) % 100 == 0:
                print(
                    f"{i + 1:5d} commits: ms per commit over the last 100: "
                    + ", ".join(f"{n} {1000 * sum(t[-100:]) / 100:.1f}" for n, t in times.items()),
                    flush=True,
                )
        window = min(100, args.commits)
        print()
        for name, t in times.items():
            first, last = sum(t[:window]) / window, sum(t[-window:]) / window
            snapshots = len(catalog.load(name).metadata.snapshots)
            print(
                f"{name:8s} first {window}: {1000 * first:.1f} ms/commit, last {window}: {1000 * last:.1f} ms/commit, "
                f"ratio {last / first:.2f}; snapshots held at the end: {snapshots}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
