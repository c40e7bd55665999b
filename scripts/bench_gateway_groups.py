"""Consumer groups and transactions of confluent-kafka through the gateway, against the same
client without them, measured in the same run.

A 6-partition topic (RF=1), 100-byte values, on the embedded cluster with its gateways:
- a group of three confluent-kafka consumers, each in its own process, reading the whole
  topic from the beginning, against one such consumer alone in a group of its own. The clock
  runs from the moment every member holds its partitions (the members join with their
  partitions paused, so that the rebalance and librdkafka's start-up are not timed) until
  the members together have read every record. The machine has two cores: the point is that
  the group protocol (heartbeats, commits, one coordinator) costs little, not that three
  processes outrun one. Target >= 0.9x.
- confluent-kafka's transactional producer writing transactions of ``--txn-records``
  records (``begin_transaction``, ``produce_batch``, ``commit_transaction``), against the
  same client's idempotent producer (the baseline), acks=all both. Target >= 0.8x. The
  latency of ``commit_transaction`` (the producer is flushed first, so this is EndTxn: the
  coordinator's PrepareCommit, one marker per partition, CompleteCommit) is printed as p50/p99
  over ``--latency-txns`` small transactions of 10 records, and the median over the big ones.
Throughput figures are the best of ``--rounds`` rounds, the baseline measured in each round.

Run: ``.venv/bin/python scripts/bench_gateway_groups.py [--records N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import bench_clients as bc  # noqa: E402
import ray  # noqa: E402
from bench_gateway import CONSUMER_TUNED  # noqa: E402
from bench_ray import start_ray  # noqa: E402
from bench_stats import percentiles  # noqa: E402

import rayqueue  # noqa: E402

VALUE_SIZE = 100
PARTITIONS = 6
GROUP_TARGET = 0.9
TXN_TARGET = 0.8
STALL_S = 120.0  # a group that has not read everything by then is stuck: fail, do not hang


# -- the clients' settings (the workloads themselves are in bench_clients) -------------------------

# Members read with librdkafka's queue threshold raised (bench_gateway.CONSUMER_TUNED) and commit nothing.
MEMBER_CONFIG = {"enable.auto.commit": False, **CONSUMER_TUNED}
FILL_CONFIG = {"linger.ms": 5, "queue.buffering.max.messages": 2_000_000}
PRODUCER_CONFIG = {"linger.ms": 5, "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000}


def group_rate(cluster: rayqueue.Cluster, topic: str, n: int, size: int) -> float:
    """records/s of a group of ``size`` confluent-kafka consumers reading ``topic`` (``n`` records)."""

    def stable(group: str) -> bool:
        desc = cluster.admin().describe_groups([group]).get(group)
        return desc is not None and desc.state == "Stable" and len(desc.members) == size

    return bc.group_rate(
        cluster.bootstrap_servers, topic, n, size, PARTITIONS, MEMBER_CONFIG, formed=stable, stall_s=STALL_S
    )


# -- the run --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="100-byte records per figure")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every figure; the best of each is kept")
    parser.add_argument("--txn-records", type=int, default=10_000, help="records per transaction")
    parser.add_argument("--latency-txns", type=int, default=200, help="small transactions for the commit latency")
    args = parser.parse_args()
    n = args.records - args.records % args.txn_records
    value = os.urandom(VALUE_SIZE)
    root = tempfile.mkdtemp(prefix="rayqueue-bench-")
    start_ray()
    cluster = rayqueue.launch(log_dirs=root, listeners="PLAINTEXT://127.0.0.1:0")
    best: dict[str, float] = {}
    big_commits: list[float] = []
    try:
        admin, bootstrap = cluster.admin(), cluster.bootstrap_servers
        admin.create_topic("bench-groups", PARTITIONS, 1)
        bc.fill(bootstrap, "bench-groups", n, value, PARTITIONS, FILL_CONFIG)
        # One unmeasured read first: the first group to read the topic pays for the cold start
        # (page cache, the gateways' first fetches, librdkafka's first connections), which
        # made one consumer alone look several times slower than it is.
        group_rate(cluster, "bench-groups", n, 1)
        for r in range(args.rounds):
            rates = {
                "one": group_rate(cluster, "bench-groups", n, 1),
                "three": group_rate(cluster, "bench-groups", n, 3),
            }
            topics = [f"bench-txn-{kind}-{r}" for kind in ("idem", "txn")]
            for t in topics:
                admin.create_topic(t, PARTITIONS, 1)
            rates["idempotent"] = bc.idempotent_rate(
                bootstrap, topics[0], n, args.txn_records, value, PARTITIONS, PRODUCER_CONFIG
            )
            rates["transactional"], commits = bc.transactional_rate(
                bootstrap, topics[1], n, args.txn_records, value, f"bench-txn-{r}", PARTITIONS, PRODUCER_CONFIG
            )
            big_commits += commits
            for t in topics:
                admin.delete_topic(t)
            for key, rate in rates.items():
                best[key] = max(best.get(key, 0.0), rate)
        admin.create_topic("bench-txn-latency", 1, 1)
        small = bc.commit_latencies(
            bootstrap, "bench-txn-latency", args.latency_txns, value, "bench-txn-latency", PRODUCER_CONFIG
        )
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)

    print(
        f"{n:,} records of {VALUE_SIZE} bytes, {PARTITIONS} partitions, through the gateway; best of {args.rounds} rounds"
    )
    print()
    print(f"{'path':<46} {'records/s':>12} {'baseline':>30} {'ratio':>7} {'target':>7}")
    rows = [
        ("group of 3 confluent-kafka consumers", "three", "one consumer alone", "one", GROUP_TARGET),
        (
            f"confluent-kafka transactions of {args.txn_records:,}",
            "transactional",
            "idempotent producer",
            "idempotent",
            TXN_TARGET,
        ),
    ]
    for label, key, base_label, base, target in rows:
        ratio = best[key] / best[base]
        verdict = "ok" if ratio >= target else "MISSED"
        print(
            f"{label:<46} {best[key]:>12,.0f} {base_label:>19} {best[base]:>10,.0f} {ratio:>6.2f}x {target:>6.1f}x {verdict}"
        )
    print()
    p50, p99 = percentiles(small)
    print(
        f"commit_transaction (EndTxn) latency, {len(small)} transactions of 10 records: p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )
    print(
        f"commit_transaction of {args.txn_records:,} records on {PARTITIONS} partitions "
        f"({len(big_commits)} commits): median {statistics.median(big_commits) * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
