"""A member joining a busy group of three: how long until every partition is owned again.

The classic protocol (cooperative-sticky, confluent-kafka's ``partition.assignment.strategy``)
against KIP-848's consumer protocol (``group.protocol=consumer``, the coordinator's ``uniform``
assignor), on rayqueue and on Apache Kafka 4.4.0 beside it (``kafka_peer.py``: one KRaft node,
its defaults), in one run.

Each round, per system and protocol: a 12-partition topic, a producer writing about 2,000
records/s to it, three confluent-kafka consumers (each polling in a thread of its own,
committing asynchronously) that split the partitions; then a fourth member subscribes. The clock
runs from its ``subscribe()`` until the four members own every partition once, evenly (three
each): the join's revocations and reassignments are all done. The group settings are both
systems' defaults (the consumer protocol: ``group.consumer.heartbeat.interval.ms`` 5 s,
``group.consumer.assignment.interval.ms`` 1 s; the classic protocol: librdkafka's 3 s
heartbeat), so each side pays the same protocol waits; the point is what the coordinator adds.

Figures: the median and range of ``--rounds`` rounds for each of the four, and three ratios
from the rounds' pairs: rayqueue's consumer protocol against its classic one, and each
rayqueue protocol against Kafka's. The last line is one JSON object with every figure.
``--quick`` runs one round.

Run: ``.venv/bin/python scripts/bench_rebalance.py [--quick] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import bench_clients as bc  # noqa: E402
import kafka_peer  # noqa: E402
from bench_stats import paired_ratios, spread  # noqa: E402
from bench_vs_kafka import launch_rayqueue, machine, versions  # noqa: E402

PARTITIONS = 12
RATE = 2000  # records/s written while the member joins
STALL_S = 120.0  # a join not settled by then is stuck: fail, do not hang
PROTOCOLS = {
    "classic": {"partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}


class Member:
    """A confluent-kafka consumer polling in its own thread; its assignment as it sees it."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
                **PROTOCOLS[protocol],
            }
        )
        self.topic = topic
        self.owned: frozenset[int] = frozenset()
        self.stop = False
        self.read = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> float:
        """Subscribe and poll from now on; returns when ``subscribe()`` was called."""
        started = time.monotonic()
        self.consumer.subscribe([self.topic])
        self.thread.start()
        return started

    def _run(self) -> None:
        while not self.stop:
            messages = self.consumer.consume(500, 0.05)
            self.read += len(messages)
            if messages:
                self.consumer.commit(asynchronous=True)
            self.owned = frozenset(p.partition for p in self.consumer.assignment())

    def close(self) -> None:
        self.stop = True
        self.thread.join(30)
        self.consumer.close()


def _settled(members: list[Member]) -> bool:
    owned = [m.owned for m in members]
    sizes = [len(o) for o in owned]
    return (
        min(sizes) > 0
        and max(sizes) - min(sizes) <= 1
        and sum(sizes) == PARTITIONS
        and (frozenset().union(*owned) == frozenset(range(PARTITIONS)))
    )


def _wait_settled(members: list[Member], what: str) -> float:
    deadline = time.monotonic() + STALL_S
    while not _settled(members):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not settled in {STALL_S:.0f}s: {[sorted(m.owned) for m in members]}")
        time.sleep(0.005)
    return time.monotonic()


def join_seconds(bootstrap: str, protocol: str) -> float:
    """One round: seconds from a fourth member's subscribe() to every partition owned evenly."""
    from confluent_kafka import Producer

    topic, group = bc.unique("rebalance"), bc.unique(f"rebalance-{protocol}")
    bc.create_topic(bootstrap, topic, PARTITIONS, 1)
    writing = True

    def write() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        value = bc.payload(100)
        while writing:
            for _ in range(RATE // 100):
                producer.produce(topic, value)
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(30)
        del producer  # librdkafka's client goes now, not when the collector finds it (after the cluster)

    writer = threading.Thread(target=write, daemon=True)
    members = [Member(bootstrap, group, topic, protocol) for _ in range(3)]
    try:
        for m in members:
            m.start()
        writer.start()
        _wait_settled(members, f"{protocol}: three members")
        time.sleep(1.0)  # records flowing to all three
        joiner = Member(bootstrap, group, topic, protocol)
        members.append(joiner)
        started = joiner.start()
        return _wait_settled(members, f"{protocol}: a fourth member") - started
    finally:
        writing = False
        writer.join(30)
        for m in members:
            m.close()
        bc.delete_topic(bootstrap, topic)


def run(rounds: int) -> dict[str, Any]:
    import ray
    from bench_ray import start_ray

    report: dict[str, Any] = {
        "benchmark": "bench_rebalance",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "partitions": PARTITIONS,
        "rate_per_s": RATE,
        "rounds": rounds,
    }
    samples: dict[str, list[float]] = {f"{s}/{p}": [] for s in ("rayqueue", "kafka") for p in PROTOCOLS}
    root = tempfile.mkdtemp(prefix="bench-rebalance-")
    start_ray()
    try:
        with kafka_peer.KafkaPeer(1) as peer:
            cluster = launch_rayqueue(root, 1, "rebalance")
            try:
                sides = {"rayqueue": cluster.bootstrap_servers, "kafka": peer.bootstrap_servers}
                for i in range(rounds):
                    # Alternate which system goes first, round by round.
                    order = ["rayqueue", "kafka"] if i % 2 == 0 else ["kafka", "rayqueue"]
                    for side in order:
                        for protocol in PROTOCOLS:
                            seconds = join_seconds(sides[side], protocol)
                            samples[f"{side}/{protocol}"].append(seconds)
                            print(f"round {i + 1}: {side:8s} {protocol:8s} {seconds:6.2f} s", flush=True)
            finally:
                cluster.shutdown(delete_data=True)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    report["machine"]["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    report["seconds"] = {name: spread(values) for name, values in samples.items()}
    pairs = {
        "rayqueue consumer / rayqueue classic": ("rayqueue/consumer", "rayqueue/classic"),
        "rayqueue consumer / kafka consumer": ("rayqueue/consumer", "kafka/consumer"),
        "rayqueue classic / kafka classic": ("rayqueue/classic", "kafka/classic"),
    }
    report["ratios"] = {name: spread(paired_ratios(samples[a], samples[b])) for name, (a, b) in pairs.items()}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--rounds", type=int, help="rounds (default 3, quick 1)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    report = run(rounds)
    print(f"\njoin of a fourth member into a busy group of three ({PARTITIONS} partitions), seconds:")
    for name, s in report["seconds"].items():
        print(f"  {name:20s} median {s['median']:6.2f}  range {s['min']:.2f}-{s['max']:.2f}")
    print("ratios (median of the rounds' pairs; below 1: rayqueue's side is faster):")
    for name, s in report["ratios"].items():
        print(f"  {name:38s} {s['median']:.2f}x  range {s['min']:.2f}-{s['max']:.2f}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
