"""What metrics cost: send and consume rates with metrics on against metrics off, same run.

Two clusters run side by side on one embedded Ray, the same but for
``rayqueue.metrics.enabled``: every replica, controller, coordinator and gateway of the
"off" cluster records nothing, and neither do its clients (``metric.reporters`` follows the
cluster: the "on" clients export producer-metrics and consumer-fetch-manager-metrics to Ray
every second, the "off" ones to nobody; both keep their in-process ``metrics()`` counters,
as Kafka's clients always do). Each round runs the same workload on both, alternating which
goes first: a producer ``send()``s 100-byte records one at a time (acks=all, a partition
with three replicas, so followers fetch too) and a consumer reads them back. The best round
of each is printed with the ratio on/off; the target is at most 3% lost (ratio >= 0.97).
On a shared machine whose speed swings between rounds, the median of the rounds' paired
ratios (each "on" against the "off" run next to it) is printed too, and so is what the
clients' recording costs on its own: the time of one produce call's and one fetch answer's
recording, measured in a loop, as a share of the time a call or answer took in the run.

Run: ``.venv/bin/python scripts/bench_metrics.py [--records N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from types import SimpleNamespace

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from bench_ray import start_ray  # noqa: E402

import rayqueue  # noqa: E402
from rayqueue import TopicPartition  # noqa: E402
from rayqueue.config import CONSUMER_CONFIG, producer_config  # noqa: E402
from rayqueue.metrics import ClientMetrics  # noqa: E402

TARGET = 0.97
# Records per produce call and per fetch answer in the last round (from the clients' metrics()).
PER_CALL: dict[str, float] = {}


def recording_cost_s(calls: int = 200_000) -> dict[str, float]:
    """Seconds the clients' recording takes per produce call (one batch) and per fetch answer."""
    client = ClientMetrics("producer", producer_config(metric_reporters=[]), "bench", cluster_metrics=False)
    batch = SimpleNamespace(records=600, data=b"x" * 65536, attempts=1)
    batches = [batch]
    start = time.perf_counter()
    for _ in range(calls):
        now = time.monotonic()
        client.batches_sent(batches, now)
        client.request_answered(0.001, now)
    send = (time.perf_counter() - start) / calls
    client = ClientMetrics("consumer", CONSUMER_CONFIG.parse(metric_reporters=[]), "bench", cluster_metrics=False)
    start = time.perf_counter()
    for _ in range(calls):
        client.fetched(600, 65536, 0.001, 10, time.monotonic())
    return {"send": send, "consume": (time.perf_counter() - start) / calls}


def check_reporting(client: rayqueue.Producer | rayqueue.Consumer, want: bool) -> None:
    """The client reports to Ray exactly when its cluster records metrics."""
    if client._metrics.ray_enabled is not want:
        raise SystemExit(f"client metrics reporting is {client._metrics.ray_enabled}, wanted {want}")


def send_rate(cluster: rayqueue.Cluster, topic: str, value: bytes, n: int, metered: bool) -> float:
    producer = cluster.producer(acks="all", linger_ms=5, batch_size=64 * 1024)
    check_reporting(producer, metered)
    send = producer.send
    start = time.perf_counter()
    for _ in range(n):
        send(topic, value, partition=0)
    producer.flush()
    rate = n / (time.perf_counter() - start)
    metrics = producer.metrics()
    producer.close()
    if metrics["record-send-total"] != n:
        raise SystemExit(f"record-send-total is {metrics['record-send-total']}, {n} records were sent")
    PER_CALL["send"] = metrics["records-per-request-avg"]
    return rate


def consume_rate(cluster: rayqueue.Cluster, topic: str, n: int, metered: bool) -> float:
    consumer = cluster.consumer(auto_offset_reset="earliest")
    check_reporting(consumer, metered)
    consumer.assign([TopicPartition(topic, 0)])
    start = time.perf_counter()
    seen = 0
    for _ in consumer:
        seen += 1
        if seen == n:
            break
    rate = n / (time.perf_counter() - start)
    PER_CALL["consume"] = consumer.metrics()["records-per-request-avg"]
    consumer.close()
    return rate


def one_round(cluster: rayqueue.Cluster, name: str, value: bytes, n: int) -> tuple[float, float]:
    admin = cluster.admin()
    admin.create_topic(name, 1, 3)
    try:
        metered = name.startswith("bench-metrics-on")
        return send_rate(cluster, name, value, n, metered), consume_rate(cluster, name, n, metered)
    finally:
        admin.delete_topic(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    start_ray()
    roots = [tempfile.mkdtemp(prefix=f"rayqueue-bench-metrics-{kind}-") for kind in ("on", "off")]
    clusters = {
        "on": rayqueue.launch(log_dirs=roots[0], rayqueue_namespace="bench-metrics-on"),
        "off": rayqueue.launch(
            log_dirs=roots[1], rayqueue_namespace="bench-metrics-off", rayqueue_metrics_enabled=False
        ),
    }
    value = os.urandom(100)
    best: dict[str, dict[str, float]] = {k: {"send": 0.0, "consume": 0.0} for k in clusters}
    paired: dict[str, list[float]] = {"send": [], "consume": []}
    try:
        for r in range(args.rounds):
            order = ["on", "off"] if r % 2 == 0 else ["off", "on"]
            this_round: dict[str, tuple[float, float]] = {}
            for kind in order:
                send, consume = this_round[kind] = one_round(
                    clusters[kind], f"bench-metrics-{kind}-{r}", value, args.records
                )
                best[kind]["send"] = max(best[kind]["send"], send)
                best[kind]["consume"] = max(best[kind]["consume"], consume)
                print(f"round {r + 1} metrics {kind:3}: send {send:10,.0f} rec/s   consume {consume:10,.0f} rec/s")
            for i, what in enumerate(("send", "consume")):
                paired[what].append(this_round["on"][i] / this_round["off"][i])
    finally:
        for cluster in clusters.values():
            cluster.shutdown(delete_data=True)
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        ray.shutdown()
    print(f"\nMetrics on vs off, {args.records:,} records of 100 B, acks=all, RF 3, best of {args.rounds} rounds")
    print(f"{'':10}{'metrics on':>16}{'metrics off':>16}{'ratio':>8}  target >= {TARGET}")
    for what in ("send", "consume"):
        on, off = best["on"][what], best["off"][what]
        ratio = on / off
        verdict = "ok" if ratio >= TARGET else "MISSED"
        print(f"{what:10}{on:>12,.0f} r/s{off:>12,.0f} r/s{ratio:>8.3f}  {verdict}")
    print(f"\nmedian of the rounds' paired ratios on/off (same round, adjacent runs), target >= {TARGET}")
    for what in ("send", "consume"):
        ratios = paired[what]
        median = statistics.median(ratios)
        rounds = " ".join(f"{x:.3f}" for x in ratios)
        print(f"{what:10}{median:>8.3f}  {'ok' if median >= TARGET else 'MISSED'}   (rounds: {rounds})")
    cost = recording_cost_s()
    print("\nclient recording alone (in a loop), against the time of a call in the 'off' run")
    for what, unit in (("send", "produce call"), ("consume", "fetch answer")):
        per_call_s = PER_CALL[what] / best["off"][what]  # records per call / records per second
        share = cost[what] / per_call_s
        print(
            f"{what:10}{cost[what] * 1e6:8.2f} us per {unit} of {PER_CALL[what]:,.0f} records"
            f" ({per_call_s * 1e6:,.0f} us): {share:.4%} of its time"
        )


if __name__ == "__main__":
    main()
