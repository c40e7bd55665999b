"""Transactional produce throughput, against idempotent produce measured in the same run.

One producer, one topic of 3 partitions (RF=1), 100-byte values with keys, acks=all, on the
embedded 3-broker cluster:
- idempotent, non-transactional (the baseline): ``send()`` for every record, then ``flush()``;
- transactional, 100 records per transaction and 10,000 records per transaction: each
  transaction is ``begin_transaction()``, ``send()`` per record, ``commit_transaction()``
  (which flushes, writes PrepareCommit, the commit markers and CompleteCommit).

Each transactional figure is printed as a ratio to the baseline, with the median time of a
commit. As in Kafka, a transaction's cost is per transaction (coordinator writes and one
marker per partition), not per record, so it shrinks as transactions grow.

Run: ``.venv/bin/python scripts/bench_transactions.py [--records N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from bench_ray import start_ray  # noqa: E402

import rayqueue  # noqa: E402

VALUE = b"x" * 100
PARTITIONS = 3


def idempotent(cluster, topic: str, records: int) -> float:
    """Records/s of an idempotent producer sending ``records`` records one by one."""
    producer = cluster.producer(enable_idempotence=True, acks="all", linger_ms=5)
    try:
        producer.send(topic, VALUE, key=b"warm").get(60)
        start = time.perf_counter()
        for i in range(records):
            producer.send(topic, VALUE, key=b"%d" % i)
        producer.flush(300)
        return records / (time.perf_counter() - start)
    finally:
        producer.close(30)


def transactional(cluster, topic: str, records: int, per_txn: int, txn_id: str) -> tuple[float, float]:
    """(records/s, median commit latency in ms) of transactions of ``per_txn`` records."""
    producer = cluster.producer(transactional_id=txn_id, acks="all", linger_ms=5)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, VALUE, key=b"warm")
        producer.commit_transaction()
        commits = []
        start = time.perf_counter()
        for first in range(0, records, per_txn):
            producer.begin_transaction()
            for i in range(first, min(first + per_txn, records)):
                producer.send(topic, VALUE, key=b"%d" % i)
            before = time.perf_counter()
            producer.commit_transaction()
            commits.append(time.perf_counter() - before)
        return records / (time.perf_counter() - start), statistics.median(commits) * 1000
    finally:
        producer.close(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50000, help="records per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each case (the best is kept)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="rayqueue-bench-txn-")
    start_ray()
    cluster = rayqueue.launch(log_dirs=root)
    admin = cluster.admin()
    try:
        admin.create_topic("bench-txn", PARTITIONS, 1)
        rows: dict[str, list[float]] = {"idempotent": [], "txn-100": [], "txn-10000": []}
        latency: dict[str, list[float]] = {"txn-100": [], "txn-10000": []}
        # Interleaved rounds, so a noisy moment on the machine hits every case alike.
        for r in range(args.rounds):
            rows["idempotent"].append(idempotent(cluster, "bench-txn", args.records))
            for per_txn in (100, 10000):
                # Small transactions pay a commit per 100 records: a fifth of the records keeps the run short.
                n = args.records // 5 if per_txn == 100 else args.records
                rate, commit_ms = transactional(cluster, "bench-txn", n, per_txn, f"bench-{per_txn}-{r}")
                rows[f"txn-{per_txn}"].append(rate)
                latency[f"txn-{per_txn}"].append(commit_ms)
        base = max(rows["idempotent"])
        print(f"{'case':<40}{'records/s':>12}{'ratio':>8}{'commit ms':>11}")
        print(f"{'idempotent send() (baseline)':<40}{base:>12,.0f}{1.0:>8.2f}{'':>11}")
        for per_txn in (100, 10000):
            key = f"txn-{per_txn}"
            best = max(rows[key])
            label = f"transactions of {per_txn:,} records"
            print(f"{label:<40}{best:>12,.0f}{best / base:>8.2f}{statistics.median(latency[key]):>11.1f}")
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
