"""Replication cost and failover time, against an RF=1 acks=1 baseline measured in the same run.

One producer, one partition, 100-byte values, on the embedded 3-broker cluster:
- RF=1 acks=1 (the baseline), RF=3 acks=1 and RF=3 acks=all, each with the bulk
  ``send_many()`` and with per-record ``send()``; the RF=3 figures are printed as a ratio
  to the baseline (Kafka's published ratio for 3x synchronous replication is about 0.51);
- latency: one ``send().get()`` at a time (nothing else in flight), p50 and p99 of RF=1
  acks=1 (the baseline) and RF=3 acks=all with ``min.insync.replicas=2``; the target is an
  acks=all p50 within 2x the acks=1 p50;
- failover: the host actor leading an RF=3 partition is killed (``ray.kill``) while a producer
  sends with acks=all; the time from the kill to the first record acknowledged by the
  new leader, over a few kills.

Each figure is taken for each replication transport (``rayqueue.replica.fetch.transport``:
``kafka``, Kafka's Fetch over the inter-broker listener, and ``ray``, Ray calls between the
host actors), one cluster each, both up for the whole run and measured alternately (the
order turns every round), so the two are compared in the same minutes; the last lines give
the ratios kafka/ray.

Run: ``.venv/bin/python scripts/bench_replication.py [--records N] [--kills K] [--transports kafka,ray]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from bench_ray import start_ray  # noqa: E402

import rayqueue  # noqa: E402
from rayqueue import TopicPartition  # noqa: E402

VALUE = b"x" * 100


def throughput(cluster, admin, name: str, rf: int, acks: str, records: int, bulk: bool) -> float:
    """Records/s of one producer into a fresh one-partition topic."""
    admin.create_topic(name, 1, rf)
    producer = cluster.producer(acks=acks, linger_ms=5)
    try:
        warm = [VALUE] * min(10000, records)
        producer.send_many(name, warm, partition=0).get(120)
        start = time.perf_counter()
        if bulk:
            chunk = 50000
            results = [
                producer.send_many(name, [VALUE] * min(chunk, records - i), partition=0)
                for i in range(0, records, chunk)
            ]
            for r in results:
                r.get(300)
        else:
            for _ in range(records):
                producer.send(name, VALUE, partition=0)
            producer.flush(300)
        return records / (time.perf_counter() - start)
    finally:
        producer.close(30)
        admin.delete_topic(name)


def send_latencies(cluster, admin, name: str, rf: int, acks: str, records: int) -> list[float]:
    """Seconds of each ``send().get()`` of one producer, one record at a time, into a fresh
    one-partition topic (the first tenth, the warm-up, left out)."""
    configs = {"min.insync.replicas": 2} if rf >= 2 else {}
    admin.create_topic(name, 1, rf, configs=configs)
    producer = cluster.producer(acks=acks, linger_ms=0)
    try:
        times = []
        for _ in range(records):
            start = time.perf_counter()
            producer.send(name, VALUE, partition=0).get(60)
            times.append(time.perf_counter() - start)
        return times[records // 10 :]
    finally:
        producer.close(30)
        admin.delete_topic(name)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _wait(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f}s")
        time.sleep(0.001)


def _dead(handle) -> bool:
    try:
        ray.get(handle.describe.remote(), timeout=5)
        return False
    except ray.exceptions.RayActorError:
        return True


def failover_times(cluster, admin, kills: int, name: str = "bench-failover") -> list[float]:
    """Seconds from a leader's kill to the first acks=all record that the new leader acknowledged.

    ``ray.kill`` takes effect a moment after the call, so the old leader may still answer a
    send or two: only sends issued after its death is confirmed count.
    """
    admin.create_topic(name, 1, 3)
    tp = TopicPartition(name, 0)
    producer = cluster.producer(acks="all", linger_ms=0, retry_backoff_ms=10)
    acks: list[tuple[float, float]] = []  # (issued, acknowledged)
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            issued = time.monotonic()
            producer.send(name, VALUE, partition=0).get(120)
            acks.append((issued, time.monotonic()))

    worker = threading.Thread(target=produce)
    worker.start()
    times = []
    try:
        for _ in range(kills):
            # A healthy partition (full ISR) before each kill, so every kill starts alike.
            def healthy() -> bool:
                meta = admin.describe_topics([name])[name].partitions[0]
                return meta.leader >= 0 and len(meta.isr) == 3 and len(admin.replica_handles(tp)) == 3

            _wait(healthy, 60, "healthy partition")
            leader = admin.describe_topics([name])[name].partitions[0].leader_handle
            count = len(acks)
            _wait(lambda c=count: len(acks) >= c + 20, 60, "acknowledged records")
            killed = time.monotonic()
            ray.kill(leader.host, no_restart=True)  # the leader's host dies
            _wait(lambda h=leader: _dead(h), 30, "dead leader")
            dead = time.monotonic()
            _wait(lambda d=dead: acks and acks[-1][0] > d, 60, "acknowledgement from the new leader")
            first = next(acked for issued, acked in acks if issued > dead)
            times.append(first - killed)
    finally:
        stop.set()
        worker.join(120)
        producer.close(30)
        admin.delete_topic(name)
    return times


CASES = [("RF=1 acks=1 (baseline)", 1, "1"), ("RF=3 acks=1", 3, "1"), ("RF=3 acks=all", 3, "all")]
LATENCY_CASES = [("RF=1 acks=1 (baseline)", 1, "1"), ("RF=3 acks=all, min ISR 2", 3, "all")]


def turns(items: list, r: int) -> list:
    """``items`` in round ``r``'s order: as given in even rounds, reversed in odd ones."""
    return items if r % 2 == 0 else list(reversed(items))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=200000, help="records per bulk run (per-record runs use a tenth)"
    )
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--latency-records", type=int, default=2000, help="sends per latency run")
    parser.add_argument("--transports", default="kafka,ray", help="replication transports to compare")
    args = parser.parse_args()
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    root = tempfile.mkdtemp(prefix="rayqueue-bench-replication-")
    start_ray()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    clusters = {
        t: rayqueue.launch(
            log_dirs=os.path.join(root, t),
            rayqueue_namespace=f"bench-replication-{t}",
            rayqueue_replica_fetch_transport=t,
        )
        for t in transports
    }
    admins = {t: c.admin() for t, c in clusters.items()}
    try:
        rates: dict[str, dict[str, dict[bool, float]]] = {t: {} for t in transports}
        for i, (label, rf, acks) in enumerate(CASES):
            for t in turns(transports, i):
                for bulk in (True, False):
                    n = args.records if bulk else args.records // 10
                    tag = "bulk" if bulk else "send"
                    rates[t].setdefault(label, {})[bulk] = throughput(
                        clusters[t], admins[t], f"bench-{rf}-{acks}-{tag}", rf, acks, n, bulk
                    )
        latency: dict[str, dict[str, list[float]]] = {
            t: {label: [] for label, _, _ in LATENCY_CASES} for t in transports
        }
        for r in range(2):  # alternated, so a noisy moment on the machine hits all alike
            for t in turns(transports, r):
                for label, rf, acks in LATENCY_CASES:
                    latency[t][label] += send_latencies(
                        clusters[t], admins[t], f"bench-lat-{rf}-{r}", rf, acks, args.latency_records
                    )
        failover: dict[str, list[float]] = {t: [] for t in transports}
        for k in range(args.kills):
            for t in turns(transports, k):
                failover[t] += failover_times(clusters[t], admins[t], 1, f"bench-failover-{k}")
        summary: dict[str, dict[str, float]] = {}
        for t in transports:
            print(f"\n== transport {t} ==")
            print(f"{'case':<28}{'bulk rec/s':>14}{'ratio':>8}{'send rec/s':>14}{'ratio':>8}")
            base = rates[t][CASES[0][0]]
            for label, _, _ in CASES:
                row = rates[t][label]
                print(
                    f"{label:<28}{row[True]:>14,.0f}{row[True] / base[True]:>8.2f}"
                    f"{row[False]:>14,.0f}{row[False] / base[False]:>8.2f}"
                )
            base_p50 = _percentile(latency[t][LATENCY_CASES[0][0]], 0.5)
            print(f"{'one send().get() at a time':<28}{'p50 ms':>10}{'p99 ms':>10}{'p50 ratio':>11}")
            for label, times in latency[t].items():
                p50 = _percentile(times, 0.5)
                print(f"{label:<28}{p50 * 1000:>10.2f}{_percentile(times, 0.99) * 1000:>10.2f}{p50 / base_p50:>10.2f}x")
            times = failover[t]
            print(
                f"failover (leader killed -> first acks=all produce on the new leader), {len(times)} kills: "
                f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
            )
            acks_all = latency[t][LATENCY_CASES[1][0]]
            summary[t] = {
                "bulk_all_ratio": rates[t]["RF=3 acks=all"][True] / base[True],
                "send_all_ratio": rates[t]["RF=3 acks=all"][False] / base[False],
                "p50_all_ms": _percentile(acks_all, 0.5) * 1000,
                "p99_all_ms": _percentile(acks_all, 0.99) * 1000,
                "p50_ratio": _percentile(acks_all, 0.5) / base_p50,
                "failover_ms": statistics.median(times) * 1000,
            }
        if len(transports) == 2:
            a, b = transports
            print(f"\n{a} vs {b} (same run):")
            for key, value in summary[a].items():
                print(f"  {key:<16}{value:>10.2f} vs {summary[b][key]:>10.2f}  ({value / summary[b][key]:.2f}x)")
        print(f"load average at end: {os.getloadavg()}")
    finally:
        for cluster in clusters.values():
            cluster.shutdown(delete_data=True)
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
