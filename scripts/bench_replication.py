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

Run: ``.venv/bin/python scripts/bench_replication.py [--records N] [--kills K]``.
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


def failover_times(cluster, admin, kills: int) -> list[float]:
    """Seconds from a leader's kill to the first acks=all record that the new leader acknowledged.

    ``ray.kill`` takes effect a moment after the call, so the old leader may still answer a
    send or two: only sends issued after its death is confirmed count.
    """
    name = "bench-failover"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=200000, help="records per bulk run (per-record runs use a tenth)"
    )
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--latency-records", type=int, default=2000, help="sends per latency run")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="rayqueue-bench-replication-")
    start_ray()
    cluster = rayqueue.launch(log_dirs=root)
    admin = cluster.admin()
    try:
        print(f"{'case':<28}{'bulk rec/s':>14}{'ratio':>8}{'send rec/s':>14}{'ratio':>8}")
        base: dict[bool, float] = {}
        for label, rf, acks in [
            ("RF=1 acks=1 (baseline)", 1, "1"),
            ("RF=3 acks=1", 3, "1"),
            ("RF=3 acks=all", 3, "all"),
        ]:
            row = {}
            for bulk in (True, False):
                n = args.records if bulk else args.records // 10
                tag = "bulk" if bulk else "send"
                row[bulk] = throughput(cluster, admin, f"bench-{rf}-{acks}-{tag}", rf, acks, n, bulk)
            if not base:
                base = dict(row)
            print(
                f"{label:<28}{row[True]:>14,.0f}{row[True] / base[True]:>8.2f}"
                f"{row[False]:>14,.0f}{row[False] / base[False]:>8.2f}"
            )
        cases = [("RF=1 acks=1 (baseline)", 1, "1"), ("RF=3 acks=all, min ISR 2", 3, "all")]
        latency: dict[str, list[float]] = {label: [] for label, _, _ in cases}
        for r in range(2):  # alternated, so a noisy moment on the machine hits both alike
            for label, rf, acks in cases:
                latency[label] += send_latencies(cluster, admin, f"bench-lat-{rf}-{r}", rf, acks, args.latency_records)
        base_p50 = _percentile(latency["RF=1 acks=1 (baseline)"], 0.5)
        print(f"{'one send().get() at a time':<28}{'p50 ms':>10}{'p99 ms':>10}{'p50 ratio':>11}")
        for label, times in latency.items():
            p50 = _percentile(times, 0.5)
            print(f"{label:<28}{p50 * 1000:>10.2f}{_percentile(times, 0.99) * 1000:>10.2f}{p50 / base_p50:>10.2f}x")
        times = failover_times(cluster, admin, args.kills)
        print(
            f"failover (leader killed -> first acks=all produce on the new leader), {len(times)} kills: "
            f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
        )
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
