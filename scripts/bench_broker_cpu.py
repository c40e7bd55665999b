"""The broker's CPU per produce request: rayqueue's and Apache Kafka's, in one run.

One confluent-kafka producer (``linger.ms=0``, acks=1, one 100-byte record per request) sends
to a one-partition topic (RF 1) at a paced rate of about 200 and then about 2,000 requests/s
for ``--seconds`` each. The CPU time (user + system, psutil) that the broker's processes spend
meanwhile, divided by the produce requests the broker answered, is the CPU per request:

- rayqueue: every process that serves the partition's leader broker: its host actor (which
  runs the Kafka listener in its process), and the separate gateway actor when the build has
  one (``gateway|<id>``), so that a build with the listener apart from its broker and one
  with the listener inside it are measured alike; the requests are the Produce requests its
  listener served;
- Kafka: the broker's JVM (a one-node KRaft cluster, ``kafka_peer.py``); the requests are the
  records sent (one per request with ``linger.ms=0`` at these rates, as librdkafka's own
  statistics confirm: ``txmsgs`` against the broker's ``tx`` requests).

Each system first runs ``--warmup`` seconds at the higher rate, not counted (Kafka's JVM
compiles its hot paths in its first seconds: a first run costs it several times its steady
figure). Each rate then runs ``--rounds`` times; the median per rate is printed with the ratio
rayqueue/Kafka, and the last line is one JSON object with every figure.

Run: ``.venv/bin/python scripts/bench_broker_cpu.py [--seconds S] [--rounds R] [--no-kafka]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
import ray  # noqa: E402
from bench_ray import start_ray  # noqa: E402
from confluent_kafka import Producer  # noqa: E402

import rayqueue  # noqa: E402

RATES = (200, 2000)
VALUE = b"x" * 100
PRODUCE_KEY = 0


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def paced_produce(bootstrap: str, topic: str, rate: int, seconds: float) -> tuple[int, dict]:
    """Send ``rate`` records/s for ``seconds`` (one record per request at linger.ms=0);
    returns the records delivered and librdkafka's last statistics of the broker."""
    stats: list[dict] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "acks": 1,
            "statistics.interval.ms": 1000,
            "stats_cb": lambda raw: stats.append(json.loads(raw)),
        }
    )
    producer.produce(topic, VALUE, partition=0)
    producer.flush(60)
    delivered = 0

    def done(err, _msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1

    interval = 1.0 / rate
    start = time.perf_counter()
    sent = 0
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        due = int((now - start) / interval) + 1
        while sent < due:
            producer.produce(topic, VALUE, partition=0, on_delivery=done)
            sent += 1
        producer.poll(0)
        time.sleep(min(interval, 0.001))
    producer.flush(60)
    producer.poll(1.5)  # one more statistics callback
    return delivered, (stats[-1] if stats else {})


def produce_requests(stats: dict) -> int:
    """The produce requests librdkafka sent to brokers (its ``tx`` counts every request;
    ``txmsgs`` would be the records)."""
    return sum(int(b.get("req", {}).get("Produce", 0)) for b in stats.get("brokers", {}).values())


def measure(
    bootstrap: str, topic: str, rate: int, seconds: float, pids: Callable[[], list[int]], served: Callable[[], int]
) -> dict:
    """One paced run: CPU µs per produce request, the requests and the achieved rate."""
    processes = pids()
    before_cpu, before_served = cpu_seconds(processes), served()
    started = time.perf_counter()
    delivered, stats = paced_produce(bootstrap, topic, rate, seconds)
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(processes) - before_cpu
    requests = served() - before_served
    if requests <= 0:
        requests = produce_requests(stats)
    return {
        "rate": rate,
        "requests": requests,
        "requests_per_s": requests / elapsed,
        "records": delivered,
        "cpu_s": cpu,
        "cpu_us_per_request": cpu / max(1, requests) * 1e6,
    }


# -- rayqueue --------------------------------------------------------------------------------------


def rayqueue_processes(cluster: rayqueue.Cluster, broker: int) -> tuple[list[int], list]:
    """The pids serving broker ``broker``'s listener and its replicas, and the handles to ask
    for served Produce requests (the listener host's, or a separate gateway actor's)."""
    from actors.names import broker_actor_name

    pids: list[int] = []
    counters = []
    # The default placement: the broker's one host holds its replicas (and its listener, when
    # the build runs the listener in the broker's process).
    host = ray.get_actor(broker_actor_name(broker), namespace=cluster.namespace)
    pids.append(ray.get(host.describe_host.remote())["pid"])
    try:
        gateway = ray.get_actor(f"gateway|{broker}", namespace=cluster.namespace)
    except ValueError:
        gateway = None
    if gateway is not None:  # a build whose listener runs apart from its broker
        pids.append(ray.get(gateway.stats.remote())["pid"])
        counters.append(lambda: ray.get(gateway.stats.remote())["served"])
    else:
        counters.append(lambda: ray.get(host.listener_stats.remote())["served"])
    return pids, counters


def run_rayqueue(seconds: float, rounds: int, warmup: float) -> list[dict]:
    root = tempfile.mkdtemp(prefix="rayqueue-cpu-")
    start_ray()
    cluster = rayqueue.launch(log_dirs=root, listeners="PLAINTEXT://127.0.0.1:0")
    out = []
    try:
        admin = cluster.admin()
        admin.create_topic("cpu", replica_assignment=[[0]])
        pids, counters = rayqueue_processes(cluster, 0)

        def served() -> int:
            return sum(count for (key, _), count in counters[0]().items() if key == PRODUCE_KEY)

        if warmup > 0:
            paced_produce(cluster.bootstrap_servers, "cpu", RATES[-1], warmup)
        for _ in range(rounds):
            for rate in RATES:
                out.append(measure(cluster.bootstrap_servers, "cpu", rate, seconds, lambda: pids, served))
                print(f"  rayqueue {rate}/s: {out[-1]['cpu_us_per_request']:.0f} µs/request", flush=True)
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return out


# -- Kafka -------------------------------------------------------------------------------------------


def run_kafka(seconds: float, rounds: int, warmup: float) -> list[dict]:
    import kafka_peer
    from confluent_kafka.admin import AdminClient, NewTopic

    out = []
    with kafka_peer.KafkaPeer(1) as peer:
        admin = AdminClient({"bootstrap.servers": peer.bootstrap_servers})
        for future in admin.create_topics([NewTopic("cpu", 1, 1)]).values():
            future.result(60)
        if warmup > 0:
            paced_produce(peer.bootstrap_servers, "cpu", RATES[-1], warmup)
        for _ in range(rounds):
            for rate in RATES:
                out.append(measure(peer.bootstrap_servers, "cpu", rate, seconds, peer.pids, lambda: 0))
                print(f"  kafka {rate}/s: {out[-1]['cpu_us_per_request']:.0f} µs/request", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per paced run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each rate per system")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds at the higher rate first, not counted")
    parser.add_argument("--no-kafka", action="store_true", help="measure rayqueue alone")
    args = parser.parse_args()
    results = {"rayqueue": run_rayqueue(args.seconds, args.rounds, args.warmup)}
    if not args.no_kafka:
        results["kafka"] = run_kafka(args.seconds, args.rounds, args.warmup)
    print()
    print(f"{'rate':>6} {'rayqueue µs/req':>16} {'Kafka µs/req':>13} {'ratio':>7}   (median of {args.rounds} runs)")
    summary = {}
    for rate in RATES:
        mine = statistics.median(r["cpu_us_per_request"] for r in results["rayqueue"] if r["rate"] == rate)
        theirs = None
        if "kafka" in results:
            theirs = statistics.median(r["cpu_us_per_request"] for r in results["kafka"] if r["rate"] == rate)
        summary[rate] = {"rayqueue_us": mine, "kafka_us": theirs}
        ratio = f"{mine / theirs:.1f}x" if theirs else "-"
        print(f"{rate:>6} {mine:>16.0f} {theirs or 0:>13.0f} {ratio:>7}")
    print(json.dumps({"summary": summary, "runs": results, "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
