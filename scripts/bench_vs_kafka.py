"""Apache Kafka beside rayqueue: the same workloads against both in one run, alternating.

Kafka is the real broker (``kafka_peer.py``: Kafka's jars pinned in tests/jvm/pins.toml, KRaft,
on free loopback ports, near its defaults); rayqueue is launched in an embedded Ray, each broker
serving its Kafka listener (3 brokers, its default). Two phases, each with a Kafka of its own
and a rayqueue launched to match it:

- three brokers, replication factor 3, acks=all (internal topics RF 3, min ISR 2 on both):
  7. cost at rest: PSS of every process of each system (Kafka's JVMs; every Ray process of
     the cluster: GCS, raylet, agents, workers and actors) with 0, 10, 100 and 300 partitions,
     and the seconds from CreateTopics to every partition's leader answering ListOffsets;
  1-3. the throughput workloads below, acks=all; 5. transactions; 6. end-to-end latency;
- one broker (Kafka: one combined-mode node; internal topics RF 1 on both), acks=1:
  1. confluent-kafka's producer (one ``produce()`` per record) and consumer, 100 B and 1 KB
     values, lz4; 2. Kafka's Java client through kafka-producer-perf-test and
     kafka-consumer-perf-test on both; 3. rayqueue's native Producer (``send()`` and
     ``send_many()``) and Consumer against Kafka's Java client on Kafka; 4. a group of three
     confluent-kafka consumers on 6 partitions; 6. end-to-end latency at 10,000 records/s;
  8. a 1M-record topic into Spark: Spark's Kafka connector (spark-sql-kafka on ``spark.jars``)
     reading it from Kafka and from rayqueue, and ``rayqueue.spark.read`` (RayDP);
  9. ``linger0``: end-to-end latency with the producer at ``linger.ms=0`` (10,000 records/s
     for 30 s, p50/p99 per 5 s window); 10. ``cpu``: the broker's CPU per produce request at
     about 200 and 2,000 requests/s (both in ``bench_broker_load.py``).

Every client runs on its defaults but for acks and lz4 (and what a workload cannot do without,
named where it is set). Values are kafka-producer-perf-test's: random letters, the same value
for every record. Each workload runs ``rounds`` times, alternating which system goes first;
every figure is printed for both with its median and range, and the ratio rayqueue/Kafka as
the median and range of the rounds' paired ratios. The last line is one JSON object with every
figure. ``--quick`` runs every workload reduced (1 round, a tenth of the records) in a few
minutes and prints the same keys.

Run: ``.venv/bin/python scripts/bench_vs_kafka.py [--quick] [--rounds R] [--workloads a,b]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import bench_broker_load as load  # noqa: E402
import bench_clients as bc  # noqa: E402
import kafka_peer  # noqa: E402
import psutil  # noqa: E402
from bench_stats import paired_ratios, percentile, spread  # noqa: E402

KAFKA, RAYQUEUE = "kafka", "rayqueue"
SIDES = (KAFKA, RAYQUEUE)
LZ4 = {"compression.type": "lz4"}


@dataclass(frozen=True)
class Scale:
    """How much each workload does; ``--quick`` shrinks it."""

    rounds: int = 3
    records_100b: int = 1_000_000
    records_1kb: int = 100_000
    group_records: int = 600_000
    group_partitions: int = 6
    txn_records: int = 10_000
    big_txns: int = 10
    small_txns: int = 200
    txn_partitions: int = 3
    e2e_rate: int = 10_000
    e2e_seconds: float = 15.0
    linger0_seconds: float = 30.0
    linger0_window_s: float = 5.0
    cpu_rates: tuple[int, ...] = (200, 2000)
    cpu_seconds: float = 10.0
    memory_partitions: tuple[int, ...] = (0, 10, 100, 300)
    settle_s: float = 5.0
    spark_records: int = 1_000_000
    spark_partitions: int = 3
    # Memory rayqueue must leave free when its brokers host many replicas (others share the machine).
    memory_reserve_gb: float = 4.0


FULL = Scale()
QUICK = Scale(
    rounds=1,
    records_100b=100_000,
    records_1kb=10_000,
    group_records=60_000,
    big_txns=2,
    small_txns=30,
    e2e_seconds=4.0,
    linger0_seconds=6.0,
    linger0_window_s=2.0,
    cpu_seconds=3.0,
    memory_partitions=(0, 10),
    settle_s=2.0,
    spark_records=100_000,
)

WORKLOADS = ("memory", "throughput", "transactions", "latency", "group", "spark", "linger0", "cpu")


# -- figures ---------------------------------------------------------------------------------------


@dataclass
class Figure:
    """One figure measured on both systems, round by round (None: that round failed)."""

    name: str
    unit: str
    higher_is_better: bool
    target: float | None = None  # on the ratio rayqueue/Kafka: >= for rates, <= for times
    note: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    values: dict[str, list[float | None]] = field(default_factory=lambda: {KAFKA: [], RAYQUEUE: []})
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None

    def ratios(self) -> list[float]:
        """rayqueue/Kafka for every round both measured."""
        pairs = [(r, k) for r, k in zip(self.values[RAYQUEUE], self.values[KAFKA], strict=False) if r and k]
        return paired_ratios([r for r, _ in pairs], [k for _, k in pairs])

    def met(self) -> bool | None:
        ratios = self.ratios()
        if self.target is None or not ratios:
            return None
        median = statistics.median(ratios)
        return median >= self.target if self.higher_is_better else median <= self.target

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "higher_is_better": self.higher_is_better, **self.params}
        for side in SIDES:
            got = [v for v in self.values[side] if v is not None]
            out[side] = self.values[side]
            out[f"{side}_median"] = statistics.median(got) if got else None
        ratios = self.ratios()
        out["ratio"] = spread(ratios) if ratios else None
        out["target"] = None if self.target is None else (">=" if self.higher_is_better else "<=") + f" {self.target}"
        out["met"] = self.met()
        out["skipped"] = self.skipped
        out["errors"] = self.errors
        return out


class Figures:
    """Every figure of the run, in the order defined."""

    def __init__(self) -> None:
        self.by_name: dict[str, Figure] = {}

    def define(
        self, name: str, unit: str, higher_is_better: bool, target: float | None = None, note: str = "", **params: Any
    ) -> Figure:
        if name not in self.by_name:
            self.by_name[name] = Figure(name, unit, higher_is_better, target, note, params)
        return self.by_name[name]

    def add(self, name: str, side: str, value: float | None) -> None:
        self.by_name[name].values[side].append(value)

    def measure(self, names: str | Iterable[str], side: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` for ``side`` and record what it returns under ``names`` (one value, or a
        tuple for several names); a failure is recorded on each figure and the run goes on."""
        names = [names] if isinstance(names, str) else list(names)
        try:
            with bc.steady_heap():  # the harness's heap is no workload's cost (bench_clients.steady_heap)
                got = fn()
        except Exception as exc:  # noqa: BLE001 - one failed measurement must not lose the run
            message = f"{side}: {type(exc).__name__}: {exc}"[:2000]
            print(f"  ! {', '.join(names)} on {side} failed: {message}", flush=True)
            traceback.print_exc(limit=3)
            for name in names:
                self.by_name[name].errors.append(message)
                self.add(name, side, None)
            return None
        values = [got] if len(names) == 1 else list(got)
        for name, value in zip(names, values, strict=True):
            self.add(name, side, value)
            print(f"  {name} {side}: {_fmt(value, self.by_name[name].unit)} {self.by_name[name].unit}", flush=True)
        return got

    def skip(self, name: str, reason: str) -> None:
        self.by_name[name].skipped = reason


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "records/s":
        return f"{value:,.0f}"
    if unit == "MB":
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def print_table(figures: Figures) -> None:
    """Both systems' median [range] per figure and the ratio's median [range]."""
    print()
    header = f"{'figure':<34} {'unit':>9} {'Kafka median [min-max]':>30} {'rayqueue median [min-max]':>30} {'ratio [range]':>20} {'target':>8}"
    print(header)
    print("-" * len(header))
    for fig in figures.by_name.values():
        cells = []
        for side in SIDES:
            got = [v for v in fig.values[side] if v is not None]
            if not got:
                cells.append("-")
            elif len(got) == 1:
                cells.append(_fmt(got[0], fig.unit))
            else:
                cells.append(
                    f"{_fmt(statistics.median(got), fig.unit)} [{_fmt(min(got), fig.unit)}-{_fmt(max(got), fig.unit)}]"
                )
        ratios = fig.ratios()
        if ratios:
            r = spread(ratios)
            ratio = f"{r['median']:.2f}x" + (f" [{r['min']:.2f}-{r['max']:.2f}]" if len(ratios) > 1 else "")
        else:
            ratio = "-"
        target = ""
        if fig.target is not None:
            met = fig.met()
            target = (
                ("≥" if fig.higher_is_better else "≤")
                + f"{fig.target:g} "
                + ("ok" if met else ("MISSED" if met is False else ""))
            )
        unit = {"records/s": "rec/s"}.get(fig.unit, fig.unit)
        print(f"{fig.name:<34} {unit:>9} {cells[0]:>30} {cells[1]:>30} {ratio:>20} {target:>8}")
        if fig.skipped:
            print(f"{'':<34} skipped: {fig.skipped}")
        for error in fig.errors[:2]:
            print(f"{'':<34} error: {error[:200]}")


def print_windows(figures: Figures) -> None:
    """The linger.ms=0 run's windows: each side's p50/p99 per window, round by round, the
    ratios, and whether a window's p50 passed twice the first window's."""
    fig = figures.by_name.get("e2e.linger0.p50")
    windows = fig.params.get("windows", {}) if fig else {}
    if not windows:
        return
    print("\nlinger.ms=0, end to end per window (p50 / p99 ms; ratio rayqueue/Kafka)")
    for r in range(max(len(v) for v in windows.values())):
        got = {side: runs[r] for side, runs in windows.items() if r < len(runs)}
        ratios = {start: (a, b) for start, a, b in load.window_ratios(got.get(KAFKA, []), got.get(RAYQUEUE, []))}
        starts = sorted({w["start_s"] for runs in got.values() for w in runs})
        for start in starts:
            cells = []
            for side in SIDES:
                w = next((w for w in got.get(side, []) if w["start_s"] == start), None)
                cells.append(f"{w['p50_ms']:9.1f} / {w['p99_ms']:9.1f}" if w else f"{'-':>21}")
            ratio = ratios.get(start)
            text = f"{ratio[0]:.2f}x / {ratio[1]:.2f}x" if ratio else "-"
            print(f"  round {r + 1} {start:>5.1f}s  Kafka {cells[0]}  rayqueue {cells[1]}  {text}")
        for side, runs in got.items():
            verdict = load.grows([load.Window(w["start_s"], int(w["count"]), w["p50_ms"], w["p99_ms"]) for w in runs])
            if verdict is not None:
                print(
                    f"  round {r + 1} {side}: "
                    + (
                        "a window's p50 > 2x the first window's"
                        if verdict
                        else "no window's p50 > 2x the first window's"
                    )
                )


# -- the two systems ---------------------------------------------------------------------------------


@dataclass
class Side:
    """One system under test as the workloads see it."""

    name: str
    bootstrap: str
    pids: Callable[[], dict[str, list[int]]]  # role -> pids of every process of the system
    cluster: Any = None  # rayqueue's Cluster (native clients)


def ray_processes(exclude: Iterable[int] = ()) -> dict[str, list[int]]:
    """Every process of the Ray this driver started, by role: the Ray processes are this
    process's descendants (GCS and raylet are its children, workers the raylet's); those in
    ``exclude`` (Kafka's JVMs, client processes) and their descendants are left out."""
    skip = set(exclude)
    out: dict[str, list[int]] = {}
    me = psutil.Process()
    for proc in me.children(recursive=True):
        try:
            if proc.pid in skip or any(p.pid in skip for p in proc.parents()):
                continue
            cmd = proc.cmdline()
        except psutil.Error:
            continue
        if not cmd:
            continue
        text = " ".join(cmd)
        program = Path(cmd[0]).name
        if text.startswith("ray::"):
            role = text.split()[0]
        elif program in ("gcs_server", "raylet"):
            role = program
        elif "/ray/" in text:
            role = "ray (" + Path(next((c for c in cmd if c.endswith(".py")), cmd[0])).name + ")"
        else:
            continue  # not Ray's (a client child process, Spark, ...)
        out.setdefault(role, []).append(proc.pid)
    return out


def pss_mb(pids: Iterable[int]) -> float:
    """Proportional set size of these processes together (shared pages divided among sharers), MB."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            continue
    return total / 1e6


def kafka_side(peer: kafka_peer.KafkaPeer) -> Side:
    return Side(KAFKA, peer.bootstrap_servers, lambda: {"kafka.Kafka (JVM)": peer.pids()})


def rayqueue_side(cluster: Any, exclude: Callable[[], Iterable[int]] = list) -> Side:
    return Side(RAYQUEUE, cluster.bootstrap_servers, lambda: ray_processes(exclude()), cluster)


def rounds_of(sides: list[Side], rounds: int) -> Iterable[tuple[int, Side]]:
    """(round, side) for every round, alternating which system goes first."""
    for r in range(rounds):
        for side in sides if r % 2 == 0 else list(reversed(sides)):
            yield r, side


# -- 1, 2, 3: producers and consumers -----------------------------------------------------------------


def native_send(cluster: Any, topic: str, n: int, value: bytes, acks: str) -> float:
    """records/s of rayqueue's Producer, one ``send()`` per record, defaults but acks and lz4."""
    producer = cluster.producer(acks=acks, compression_type="lz4")
    try:
        producer.send(topic, value, partition=0).get(120)  # connected first
        start = time.perf_counter()
        send = producer.send
        for _ in range(n):
            send(topic, value)
        producer.flush(bc.STALL_S)
        return n / (time.perf_counter() - start)
    finally:
        producer.close(60)


def native_send_many(cluster: Any, topic: str, n: int, value: bytes, acks: str) -> float:
    """records/s of rayqueue's bulk ``send_many()`` (the records as one list), defaults but acks and lz4."""
    producer = cluster.producer(acks=acks, compression_type="lz4")
    try:
        producer.send(topic, value, partition=0).get(120)
        values = [value] * n
        start = time.perf_counter()
        producer.send_many(topic, values).get(bc.STALL_S)
        return n / (time.perf_counter() - start)
    finally:
        producer.close(60)


def native_consume(cluster: Any, topic: str, n: int) -> float:
    """records/s of rayqueue's Consumer iterating ``n`` records of partition 0 from the start."""
    from rayqueue import TopicPartition

    consumer = cluster.consumer(auto_offset_reset="earliest")
    try:
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0)])
        seen = 0
        for _ in consumer:
            seen += 1
            if seen == n:
                break
        return n / (time.perf_counter() - start)
    finally:
        consumer.close()


SIZES = ((100, "100B"), (1024, "1KB"))


def throughput(
    figures: Figures,
    sides: list[Side],
    scale: Scale,
    acks: str,
    rf: int,
    sizes: tuple[tuple[int, str], ...] = SIZES,
) -> None:
    """Workloads 1-3 for one acks setting: confluent-kafka, Kafka's Java client (perf tools)
    and rayqueue's native clients, 100 B and 1 KB values, one partition, lz4."""
    tag = "acks1" if acks == "1" else "acksall"
    for size, label in sizes:
        n = scale.records_100b if size == 100 else scale.records_1kb
        params = {"records": n, "value_bytes": size, "acks": acks, "replication_factor": rf, "partitions": 1}
        names = {
            "ck_p": f"ck.produce.{label}.{tag}",
            "ck_c": f"ck.consume.{label}.{tag}",
            "j_p": f"java.produce.{label}.{tag}",
            "j_c": f"java.consume.{label}.{tag}",
            "n_s": f"native.send.{label}.{tag}",
            "n_m": f"native.send_many.{label}.{tag}",
            "n_c": f"native.consume.{label}.{tag}",
        }
        figures.define(names["ck_p"], "records/s", True, 0.7, "confluent-kafka produce() per record", **params)
        figures.define(names["ck_c"], "records/s", True, 0.7, "confluent-kafka consumer", **params)
        figures.define(names["j_p"], "records/s", True, None, "kafka-producer-perf-test on each", **params)
        figures.define(names["j_c"], "records/s", True, None, "kafka-consumer-perf-test on each", **params)
        java_note = "Kafka: kafka-{producer,consumer}-perf-test on Kafka (same round); rayqueue: native client"
        figures.define(names["n_s"], "records/s", True, 1.0, java_note + " send()", **params)
        figures.define(names["n_m"], "records/s", True, 1.0, java_note + " send_many()", **params)
        figures.define(names["n_c"], "records/s", True, 1.0, java_note + " Consumer", **params)
        for r, side in rounds_of(sides, scale.rounds):
            print(f"[{label} {tag} round {r + 1}] {side.name}", flush=True)
            clients_round(figures, names, side, n, size, acks, rf)


def clients_round(figures: Figures, names: dict[str, str], side: Side, n: int, size: int, acks: str, rf: int) -> None:
    """One round of workloads 1-3 on one system, each client on a topic of its own."""
    value = bc.payload(size)
    props = {"acks": acks, **LZ4}
    boot = side.bootstrap
    t = bc.unique("ck")
    bc.create_topic(boot, t, 1, rf)
    figures.measure(names["ck_p"], side.name, lambda: bc.ck_produce(boot, t, n, value, props))
    figures.measure(names["ck_c"], side.name, lambda: bc.ck_consume(boot, t, n))
    bc.delete_topic(boot, t)
    tj = bc.unique("java")
    bc.create_topic(boot, tj, 1, rf)
    j_p = figures.measure(names["j_p"], side.name, lambda: bc.java_produce(boot, tj, n, size, props))
    j_c = figures.measure(names["j_c"], side.name, lambda: bc.java_consume(boot, tj, n))
    bc.delete_topic(boot, tj)
    if side.name == KAFKA:
        # Workload 3's baseline: Kafka's Java client on Kafka, this round.
        for key, got in (("n_s", j_p), ("n_m", j_p), ("n_c", j_c)):
            figures.add(names[key], KAFKA, got)
        return
    t1, t2 = bc.unique("native"), bc.unique("bulk")
    bc.create_topic(boot, t1, 1, rf)
    bc.create_topic(boot, t2, 1, rf)
    figures.measure(names["n_s"], RAYQUEUE, lambda: native_send(side.cluster, t1, n, value, acks))
    figures.measure(names["n_m"], RAYQUEUE, lambda: native_send_many(side.cluster, t2, n, value, acks))
    figures.measure(names["n_c"], RAYQUEUE, lambda: native_consume(side.cluster, t2, n))
    bc.delete_topic(boot, t1)
    bc.delete_topic(boot, t2)


# -- 4: a consumer group ---------------------------------------------------------------------------------


def group(figures: Figures, sides: list[Side], scale: Scale, rf: int) -> None:
    """A group of three confluent-kafka consumers (a process each) reading a 6-partition topic."""
    name = f"group3.consume.{scale.group_partitions}p"
    n = scale.group_records
    figures.define(
        name,
        "records/s",
        True,
        None,
        "3 confluent-kafka consumers (processes), subscribe, auto.offset.reset=earliest; clock from a formed group",
        records=n,
        partitions=scale.group_partitions,
        value_bytes=100,
        replication_factor=rf,
    )
    value = bc.payload(100)
    topics = {}
    for side in sides:
        topics[side.name] = bc.unique("group")
        bc.create_topic(side.bootstrap, topics[side.name], scale.group_partitions, rf)
        bc.fill(side.bootstrap, topics[side.name], n, value, scale.group_partitions, LZ4)
    for r, side in rounds_of(sides, scale.rounds):
        print(f"[group round {r + 1}] {side.name}", flush=True)
        figures.measure(
            name,
            side.name,
            lambda side=side: bc.group_rate(side.bootstrap, topics[side.name], n, 3, scale.group_partitions),
        )
    for side in sides:
        bc.delete_topic(side.bootstrap, topics[side.name])


# -- 5: transactions -----------------------------------------------------------------------------------------


def transactions(figures: Figures, sides: list[Side], scale: Scale, rf: int) -> None:
    """confluent-kafka's transactional producer: transactions of 10,000 records (rate, commit
    median) and of 10 records (commit p50/p99); the commit is timed after a flush (EndTxn)."""
    big = {"records_per_txn": scale.txn_records, "transactions": scale.big_txns, "partitions": scale.txn_partitions}
    small = {"records_per_txn": 10, "transactions": scale.small_txns, "partitions": 1}
    common = {"replication_factor": rf, "value_bytes": 100}
    f_rate = figures.define(f"txn.{scale.txn_records}.rate", "records/s", True, None, **big, **common)
    f_big = figures.define(
        f"txn.{scale.txn_records}.commit_p50", "ms", False, 2.0, "commit_transaction", **big, **common
    )
    f_p50 = figures.define("txn.10.commit_p50", "ms", False, 2.0, "commit_transaction", **small, **common)
    f_p99 = figures.define("txn.10.commit_p99", "ms", False, None, "commit_transaction", **small, **common)
    value = bc.payload(100)
    n = scale.txn_records * scale.big_txns
    for r, side in rounds_of(sides, scale.rounds):
        print(f"[transactions round {r + 1}] {side.name}", flush=True)
        t_big, t_small = bc.unique("txn-big"), bc.unique("txn-small")
        bc.create_topic(side.bootstrap, t_big, scale.txn_partitions, rf)
        bc.create_topic(side.bootstrap, t_small, 1, rf)

        def run_big(side: Side = side, topic: str = t_big) -> tuple[float, float]:
            rate, commits = bc.transactional_rate(
                side.bootstrap, topic, n, scale.txn_records, value, bc.unique("tid"), scale.txn_partitions
            )
            return rate, statistics.median(commits) * 1000

        def run_small(side: Side = side, topic: str = t_small) -> tuple[float, float]:
            commits = bc.commit_latencies(side.bootstrap, topic, scale.small_txns, value, bc.unique("tid"))
            return percentile(commits, 50) * 1000, percentile(commits, 99) * 1000

        figures.measure([f_rate.name, f_big.name], side.name, run_big)
        figures.measure([f_p50.name, f_p99.name], side.name, run_small)
        bc.delete_topic(side.bootstrap, t_big)
        bc.delete_topic(side.bootstrap, t_small)


# -- 6: end-to-end latency ---------------------------------------------------------------------------------


def latency(figures: Figures, sides: list[Side], scale: Scale, acks: str, rf: int) -> None:
    """Produce-to-consume latency at a fixed rate (confluent-kafka both ends, defaults but acks, lz4)."""
    tag = "acks1" if acks == "1" else "acksall"
    params = {"rate": scale.e2e_rate, "seconds": scale.e2e_seconds, "value_bytes": 100, "acks": acks}
    params["replication_factor"] = rf
    names = [f"e2e.{tag}.p50", f"e2e.{tag}.p99", f"e2e.{tag}.p999"]
    for name in names:
        figures.define(name, "ms", False, 2.0 if name.endswith("p99") else None, "produce() to poll()", **params)
    for r, side in rounds_of(sides, scale.rounds):
        print(f"[latency {tag} round {r + 1}] {side.name}", flush=True)
        topic = bc.unique(f"e2e-{tag}")
        bc.create_topic(side.bootstrap, topic, 1, rf)

        def run(side: Side = side, topic: str = topic) -> tuple[float, float, float]:
            got = bc.e2e_latencies(side.bootstrap, topic, scale.e2e_rate, scale.e2e_seconds, 100, {"acks": acks, **LZ4})
            return tuple(percentile(got, q) * 1000 for q in (50, 99, 99.9))

        figures.measure(names, side.name, run)
        bc.delete_topic(side.bootstrap, topic)


# -- 7: cost at rest ------------------------------------------------------------------------------------------


def warm_internal_topics(bootstrap: str) -> None:
    """Have the system create its internal topics (offsets, transaction state) as its first
    group and first transactional producer do: Kafka creates them on first use, rayqueue at launch."""
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka import TopicPartition as CkTP

    producer = bc.txn_producer(bootstrap, bc.unique("warm"))
    producer.begin_transaction()
    producer.abort_transaction(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": bc.unique("warm")})
    deadline = time.monotonic() + 300
    try:
        while True:
            try:
                consumer.committed([CkTP("warm", 0)], timeout=60)
                return
            except KafkaException:
                # The offsets topic is still being created or loaded (NOT_COORDINATOR,
                # COORDINATOR_LOAD_IN_PROGRESS): ask again.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def memory(figures: Figures, sides: list[Side], scale: Scale, rf: int = 3) -> None:
    """PSS of each whole system at rest with 0, 10, 100 and 300 partitions (RF 3), and the
    seconds from CreateTopics to every partition's leader answering, for 10 and 100."""
    counts = scale.memory_partitions
    note = "PSS of every process (Kafka: JVMs; rayqueue: every Ray process of its cluster), internal topics created"
    for p in FULL.memory_partitions:
        figures.define(f"memory.p{p}", "MB", False, None, note, partitions=p, replication_factor=rf)
    for p in (10, 100):
        figures.define(f"create.p{p}", "s", False, None, "CreateTopics to every leader answering", partitions=p)
    for p in FULL.memory_partitions:
        if p not in counts:
            figures.skip(f"memory.p{p}", "not in this mode's partition counts")
            if p in (10, 100):
                figures.skip(f"create.p{p}", "not in this mode's partition counts")
    breakdown: dict[str, dict[str, Any]] = {}
    for side in sides:
        print(f"[memory] {side.name}", flush=True)
        warm_internal_topics(side.bootstrap)
        topics: list[str] = []
        hosted = 0
        per_replica_mb = None
        try:
            for p in counts:
                if p > hosted:
                    more = p - hosted
                    if side.name == RAYQUEUE and per_replica_mb is not None:
                        need_gb = per_replica_mb * more * rf / 1000
                        free_gb = psutil.virtual_memory().available / 1e9
                        if need_gb > free_gb - scale.memory_reserve_gb:
                            reason = (
                                f"rayqueue would need about {need_gb:.1f} GB more for {more * rf} replicas "
                                f"({per_replica_mb:.0f} MB each, measured at {hosted} partitions); "
                                f"{free_gb:.1f} GB available, {scale.memory_reserve_gb:.0f} GB kept for the machine's other work"
                            )
                            for q in counts:
                                if q >= p:
                                    figures.add(f"memory.p{q}", side.name, None)
                                    figures.by_name[f"memory.p{q}"].errors.append(f"{side.name}: skipped: {reason}")
                                    if q in (10, 100):
                                        figures.add(f"create.p{q}", side.name, None)
                                        figures.by_name[f"create.p{q}"].errors.append(f"{side.name}: skipped: {reason}")
                            print(f"  skipped on {side.name}: {reason}", flush=True)
                            break
                    topic = bc.unique(f"mem-{p}")
                    took = bc.create_topic(side.bootstrap, topic, more, rf)
                    topics.append(topic)
                    if p in (10, 100) and more == p:
                        figures.add(f"create.p{p}", side.name, took)
                    hosted = p
                time.sleep(scale.settle_s)  # at rest: what the creation churned has settled
                roles = side.pids()
                total = pss_mb(pid for pids in roles.values() for pid in pids)
                figures.add(f"memory.p{p}", side.name, total)
                breakdown.setdefault(side.name, {})[f"p{p}"] = {
                    role: {"processes": len(pids), "pss_mb": round(pss_mb(pids), 1)} for role, pids in roles.items()
                }
                if p == 0:
                    base = total
                elif side.name == RAYQUEUE:
                    per_replica_mb = (total - base) / (p * rf)
                print(f"  {side.name} {p} partitions: {total:,.0f} MB PSS", flush=True)
        finally:
            for topic in topics:
                bc.delete_topic(side.bootstrap, topic)
    figures.by_name["memory.p0"].params["breakdown"] = breakdown


# -- 8: a topic into Spark ---------------------------------------------------------------------------------


def connector_jars() -> list[str]:
    """The jars of Spark's Kafka connector (the ``spark-kafka`` set) that PySpark does not ship
    itself (PySpark's own Scala, Hadoop and logging jars stay first)."""
    import pyspark

    from tests.jvm import maven

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in maven.classpath("spark-kafka").split(os.pathsep) if _artifact(Path(j).name) not in shipped]


def _artifact(jar: str) -> str:
    """``kafka-clients-3.4.1.jar`` -> ``kafka-clients`` (the version is the last ``-<digits>.<...>``)."""
    found = re.match(r"^(.*)-(\d+\.\d+[\w.\-]*)\.jar$", jar)
    return found.group(1) if found else jar.removesuffix(".jar")


def spark_count(df: Any) -> int:
    """Rows of ``df``, making Spark read every value (count and the sum of the values' lengths)."""
    from pyspark.sql import functions as F

    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
    return int(row["n"])


def spark(figures: Figures, sides: list[Side], scale: Scale, rf: int) -> None:
    """A topic into a Spark DataFrame: Spark's Kafka connector from Kafka and from rayqueue,
    and ``rayqueue.spark.read``, one RayDP session (1 executor, 1 core) for all three."""
    from rayqueue import spark as rq_spark

    n, parts = scale.spark_records, scale.spark_partitions
    params = {"records": n, "partitions": parts, "value_bytes": 100, "executors": 1, "executor_cores": 1}
    f_conn = figures.define("spark.connector", "records/s", True, None, "spark.read.format('kafka') on each", **params)
    f_read = figures.define(
        "spark.rayqueue_read",
        "records/s",
        True,
        1.0,
        "Kafka: the connector on Kafka (same round); rayqueue: rayqueue.spark.read",
        **params,
    )
    value = bc.payload(100)
    topics = {}
    for side in sides:
        topics[side.name] = bc.unique("spark")
        bc.create_topic(side.bootstrap, topics[side.name], parts, rf)
        bc.fill(side.bootstrap, topics[side.name], n, value, parts, LZ4)
    session = rq_spark.session(
        "bench-vs-kafka",
        num_executors=1,
        executor_cores=1,
        executor_memory="1G",
        configs={"spark.jars": ",".join(connector_jars())},
        log_level="ERROR",
    )
    try:

        def via_connector(side: Side) -> float:
            start = time.perf_counter()
            df = (
                session.read.format("kafka")
                .option("kafka.bootstrap.servers", side.bootstrap)
                .option("subscribe", topics[side.name])
                .option("startingOffsets", "earliest")
                .option("endingOffsets", "latest")
                .load()
            )
            got = spark_count(df)
            if got != n:
                raise AssertionError(f"Spark's connector counted {got:,} of {n:,} records")
            return n / (time.perf_counter() - start)

        def via_rayqueue(side: Side) -> float:
            start = time.perf_counter()
            got = spark_count(rq_spark.read(session, topics[side.name], cluster=side.cluster))
            if got != n:
                raise AssertionError(f"rayqueue.spark.read counted {got:,} of {n:,} records")
            return n / (time.perf_counter() - start)

        # Warm-up (the JVM, Spark's code paths, the Python workers; for the bridge also Ray
        # Data's first read, which starts its workers), not measured: both paths get one.
        for side in sides:
            warm = [via_connector] + ([via_rayqueue] if side.name == RAYQUEUE else [])
            for path in warm:
                try:
                    path(side)
                except Exception:  # noqa: BLE001 - the measured runs record the failure
                    pass
        for r, side in rounds_of(sides, scale.rounds):
            print(f"[spark round {r + 1}] {side.name}", flush=True)
            got = figures.measure(f_conn.name, side.name, lambda side=side: via_connector(side))
            if side.name == KAFKA:
                figures.add(f_read.name, KAFKA, got)
            else:
                figures.measure(f_read.name, RAYQUEUE, lambda side=side: via_rayqueue(side))
    finally:
        rq_spark.stop()
        for side in sides:
            bc.delete_topic(side.bootstrap, topics[side.name])


# -- the run ------------------------------------------------------------------------------------------------------


def launch_rayqueue(root: str, rf: int, tag: str) -> Any:
    """A rayqueue cluster (3 brokers, Kafka listeners on free ports) whose internal topics match the
    Kafka of this phase: RF 3 and min ISR 2 (both systems' defaults) beside three Kafka brokers,
    RF 1 beside one."""
    import rayqueue

    internal: dict[str, Any] = {}
    if rf == 1:
        internal = {
            "offsets_topic_replication_factor": 1,
            "transaction_state_log_replication_factor": 1,
            "transaction_state_log_min_isr": 1,
        }
    return rayqueue.launch(
        log_dirs=os.path.join(root, tag),
        listeners="PLAINTEXT://127.0.0.1:0",
        rayqueue_namespace=f"bench-vs-kafka-{tag}",
        **internal,
    )


def versions() -> dict[str, str]:
    """What ran: Kafka, the clients, Ray, Spark, Java, and this checkout's commit."""
    import confluent_kafka
    import pyspark
    import ray

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    try:
        commit = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "kafka": kafka_peer.kafka_version(),
        "rayqueue_commit": commit,
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "ray": ray.__version__,
        "pyspark": pyspark.__version__,
        "java": java[0] if java else "",
        "python": platform.python_version(),
    }


def machine() -> dict[str, Any]:
    """The machine the figures come from, and how loaded it was."""
    return {
        "cpus": psutil.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
    }


def run(scale: Scale, workloads: Iterable[str]) -> dict[str, Any]:
    """Every chosen workload on both systems; returns the JSON report."""
    import ray
    from bench_ray import start_ray

    chosen = set(workloads)
    figures = Figures()
    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "bench_vs_kafka",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "kafka_config_changes": kafka_peer.CONFIG_CHANGES,
        "rayqueue_brokers": 3,
        "rounds": scale.rounds,
    }
    root = tempfile.mkdtemp(prefix="bench-vs-kafka-")
    start_ray()
    try:
        if chosen & {"memory", "throughput", "transactions", "latency"}:
            print("== three brokers, RF 3, acks=all ==", flush=True)
            with kafka_peer.KafkaPeer(3) as peer:
                cluster = launch_rayqueue(root, 3, "rf3")
                try:
                    sides = [kafka_side(peer), rayqueue_side(cluster, peer.pids)]
                    if "memory" in chosen:
                        memory(figures, sides, scale)
                    if "throughput" in chosen:
                        throughput(figures, sides, scale, "all", 3)
                    if "transactions" in chosen:
                        transactions(figures, sides, scale, 3)
                    if "latency" in chosen:
                        latency(figures, sides, scale, "all", 3)
                finally:
                    cluster.shutdown(delete_data=True)
        if chosen & {"throughput", "group", "latency", "spark", "linger0", "cpu"}:
            print("== one broker, RF 1, acks=1 ==", flush=True)
            with kafka_peer.KafkaPeer(1) as peer:
                cluster = launch_rayqueue(root, 1, "rf1")
                try:
                    sides = [kafka_side(peer), rayqueue_side(cluster, peer.pids)]
                    if "throughput" in chosen:
                        throughput(figures, sides, scale, "1", 1)
                    if "group" in chosen:
                        group(figures, sides, scale, 1)
                    if "latency" in chosen:
                        latency(figures, sides, scale, "1", 1)
                    if "linger0" in chosen:
                        rounds = rounds_of(sides, scale.rounds)
                        load.linger0(figures, rounds, scale.e2e_rate, scale.linger0_seconds, scale.linger0_window_s)
                    if "cpu" in chosen:
                        load.broker_cpu(figures, rounds_of(sides, scale.rounds), scale.cpu_rates, scale.cpu_seconds)
                    if "spark" in chosen:
                        spark(figures, sides, scale, 1)
                finally:
                    cluster.shutdown(delete_data=True)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    report["machine"]["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["figures"] = {name: fig.as_json() for name, fig in figures.by_name.items()}
    report["_figures"] = figures
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every workload reduced: 1 round, a tenth of the records")
    parser.add_argument("--rounds", type=int, help="rounds of every workload (default 3, quick 1)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"a comma list of {', '.join(WORKLOADS)}")
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    if args.rounds:
        scale = replace(scale, rounds=args.rounds)
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = set(chosen) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    report = run(scale, chosen)
    figures = report.pop("_figures")
    report["mode"] = "quick" if args.quick else "full"
    print_table(figures)
    print_windows(figures)
    print(f"\n{report['elapsed_s']:.0f} s; machine {report['machine']}; versions {report['versions']}")
    print(json.dumps(report, separators=(",", ":")))
    missing = [f.name for f in figures.by_name.values() if f.errors and not all("skipped" in e for e in f.errors)]
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
