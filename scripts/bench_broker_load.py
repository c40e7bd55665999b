"""Two workloads of ``bench_vs_kafka.py`` that load the broker with many small requests.

- **linger.ms=0 end to end**: confluent-kafka's producer on its defaults but ``linger.ms=0``
  (and the phase's acks and lz4) sends 10,000 records/s for 30 s, so nearly every record is
  a produce request of its own; a consumer in the driver reads them. Latency is reported for
  the whole run and per window of 5 s (by the time each record was produced), so a broker
  that falls behind shows as windows whose latency grows; ``grows`` says whether any
  window's p50 is more than twice the first window's.
- **broker CPU per produce request**: a producer with ``linger.ms=0`` sends records one by
  one at about 200 and about 2,000 records/s (so about as many produce requests; the requests
  counted are librdkafka's own count, its statistics' ``Produce`` requests). The CPU time of
  the broker's processes is read with psutil over the run and over an idle stretch just
  before it; the figure is the CPU above idle per request, in microseconds. The broker's
  processes: Kafka's JVM; rayqueue's host actors (``BrokerHost``: replicas, and the Kafka
  listener in the same process) and, for a build that serves the listener apart from its
  broker, the listener actors (``Gateway``), so that both builds are measured alike.

The functions here take the figures and the rounds of ``bench_vs_kafka`` (figures with
``define``/``measure``/``add``, sides with ``name``, ``bootstrap`` and ``pids``) and import
nothing of it. No Ray here: the paced producers run in child processes.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import bench_clients as bc
import psutil
from bench_stats import percentile

KAFKA_JVM = "kafka.Kafka"
HOST, LISTENER = "BrokerHost", "Gateway"
# A Ray worker's process title: ``ray::Class``, ``ray::Class.method`` or ``ray::name:Class.method``.
_RAY_TITLE = re.compile(r"^ray::(?:[^:\s]*:)?(\w+)")


# -- linger.ms=0: latency per window -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    """The records produced in one window of the run: its start (seconds from the first
    record), how many, and their end-to-end p50 and p99 in ms."""

    start_s: float
    count: int
    p50_ms: float
    p99_ms: float


def latency_windows(
    samples: Iterable[tuple[float, float]], window_s: float, warmup_s: float = 0.0, seconds: float | None = None
) -> list[Window]:
    """``samples`` ((seconds since the first record was produced, latency in seconds), e.g.
    ``bench_clients.e2e_samples``) cut into windows of ``window_s`` by production time, the
    records of the first ``warmup_s`` left out; every window that holds a record, in order.
    With the run's length ``seconds``, records produced after the last whole window started
    (the producer's last records may come a moment late) count in the last window."""
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    last = max(0, math.ceil(round(seconds / window_s, 9)) - 1) if seconds is not None else None
    by_window: dict[int, list[float]] = {}
    for sent, latency in samples:
        if sent < warmup_s:
            continue
        index = int(sent // window_s)
        if last is not None:
            index = min(index, last)
        by_window.setdefault(index, []).append(latency)
    return [
        Window(i * window_s, len(got), percentile(got, 50) * 1000, percentile(got, 99) * 1000)
        for i, got in sorted(by_window.items())
    ]


def grows(windows: list[Window], factor: float = 2.0) -> bool | None:
    """Whether a later window's p50 is more than ``factor`` times the first window's (a broker
    falling behind); None with fewer than two windows."""
    if len(windows) < 2:
        return None
    first = windows[0].p50_ms
    return any(w.p50_ms > factor * first for w in windows[1:])


def linger0(figures: Any, rounds: Iterable[tuple[int, Any]], rate: int, seconds: float, window_s: float) -> None:
    """The linger.ms=0 workload (see the module docstring) on each side, round by round, in
    the RF 1 acks=1 phase; the windows of every round go into the p50 figure's ``windows``."""
    params = {"rate": rate, "seconds": seconds, "window_s": window_s, "value_bytes": 100, "acks": "1"}
    params["producer"] = "confluent-kafka defaults but acks=1, lz4, linger.ms=0"
    note = "produce() to poll(), linger.ms=0"
    p50 = figures.define("e2e.linger0.p50", "ms", False, None, note, **params)
    p99 = figures.define("e2e.linger0.p99", "ms", False, 2.0, note, **params)
    growth = figures.define(
        "e2e.linger0.growth",
        "x",
        False,
        None,
        "the highest window p50 over the first window's (2 or more: latency grows with the run)",
        **params,
    )
    windows: dict[str, list[list[dict[str, float]]]] = p50.params.setdefault("windows", {})
    for r, side in rounds:
        print(f"[latency linger.ms=0 round {r + 1}] {side.name}", flush=True)
        topic = bc.unique("e2e-linger0")
        bc.create_topic(side.bootstrap, topic, 1, 1)

        def run(side: Any = side, topic: str = topic) -> tuple[float, float, float]:
            config = {"acks": "1", "compression.type": "lz4", "linger.ms": 0}
            samples = bc.e2e_samples(side.bootstrap, topic, rate, seconds, 100, config)
            got = latency_windows(samples, window_s, warmup_s=1.0, seconds=seconds)
            windows.setdefault(side.name, []).append(
                [{"start_s": w.start_s, "count": w.count, "p50_ms": w.p50_ms, "p99_ms": w.p99_ms} for w in got]
            )
            print_windows(side.name, got)
            kept = [latency for sent, latency in samples if sent >= 1.0]
            return percentile(kept, 50) * 1000, percentile(kept, 99) * 1000, growth_of(got)

        figures.measure([p50.name, p99.name, growth.name], side.name, run)
        bc.delete_topic(side.bootstrap, topic)


def growth_of(windows: list[Window]) -> float:
    """The highest window p50 over the first window's."""
    if not windows:
        raise ValueError("no windows")
    return max(w.p50_ms for w in windows) / windows[0].p50_ms


def print_windows(side: str, windows: list[Window]) -> None:
    """One line per window, and whether latency grew over the run."""
    for w in windows:
        print(
            f"    {side} window {w.start_s:>5.1f}s: {w.count:>7,} records p50 {w.p50_ms:9.1f} ms p99 {w.p99_ms:9.1f} ms"
        )
    verdict = grows(windows)
    if verdict is not None:
        print(
            f"    {side}: {'a window p50 above twice the first window' if verdict else 'no window p50 above twice the first'}"
        )


def window_ratios(kafka: list[dict[str, float]], rayqueue: list[dict[str, float]]) -> list[tuple[float, float, float]]:
    """Per window both sides measured: (start, p50 ratio, p99 ratio) rayqueue/Kafka."""
    theirs = {w["start_s"]: w for w in kafka}
    return [
        (w["start_s"], w["p50_ms"] / theirs[w["start_s"]]["p50_ms"], w["p99_ms"] / theirs[w["start_s"]]["p99_ms"])
        for w in rayqueue
        if w["start_s"] in theirs and theirs[w["start_s"]]["p50_ms"] > 0 and theirs[w["start_s"]]["p99_ms"] > 0
    ]


# -- the broker's CPU per produce request ---------------------------------------------------------


def broker_processes(roles: Mapping[str, list[int]]) -> dict[str, list[int]]:
    """The broker's processes among a system's processes by role (``bench_vs_kafka``'s
    ``Side.pids``): Kafka's JVM as ``kafka``; rayqueue's host actors as ``host`` and its
    listener actors as ``listener``."""
    out: dict[str, list[int]] = {}
    for role, pids in roles.items():
        if KAFKA_JVM in role:
            kind = "kafka"
        else:
            found = _RAY_TITLE.match(role)
            kind = {HOST: "host", LISTENER: "listener"}.get(found.group(1) if found else "", "")
        if kind:
            out.setdefault(kind, []).extend(pids)
    return out


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User plus system CPU seconds of each process that still exists."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = times.user + times.system
    return out


def cpu_used(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """CPU seconds used between two ``cpu_seconds`` readings by the processes in both."""
    return sum(after[pid] - before[pid] for pid in before if pid in after)


def us_per_request(busy_cpu_s: float, busy_s: float, idle_cpu_s: float, idle_s: float, requests: int) -> float:
    """CPU microseconds per request above the idle rate: the CPU a run used, less what the
    same processes use idle over as long, over the requests the run made."""
    if requests <= 0:
        raise ValueError("no produce requests were counted")
    if busy_s <= 0 or idle_s <= 0:
        raise ValueError("the run and the idle stretch must last")
    return (busy_cpu_s - idle_cpu_s / idle_s * busy_s) / requests * 1e6


def produce_requests(stats: Mapping[str, Any]) -> int:
    """Produce requests sent so far by the client whose librdkafka statistics these are."""
    return sum(int(b.get("req", {}).get("Produce", 0)) for b in stats.get("brokers", {}).values())


def counting_producer(
    bootstrap: str,
    topic: str,
    rate: int,
    seconds: float,
    config: Mapping[str, Any],
    ready: Any,
    go: Any,
    result: Any,
) -> None:
    """In a child process: connect (one record delivered), set ``ready``, wait for ``go``,
    send 100-byte records to partition 0 at ``rate`` for ``seconds`` and flush; then put
    (Produce requests sent during the run, records, seconds) into ``result``."""
    from confluent_kafka import Producer

    latest: list[dict[str, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "statistics.interval.ms": 100,
            "stats_cb": lambda text: latest.append(json.loads(text)),
            **config,
        }
    )
    value = bc.payload(100)
    producer.produce(topic, value, partition=0)
    if producer.flush(120) != 0:
        raise TimeoutError("the counting producer could not deliver its first record")
    before = _fresh_stats(producer, latest)
    ready.set()
    go.wait(300)
    count = int(rate * seconds)
    start = time.monotonic()
    sent = 0
    while sent < count:
        due = min(count, int((time.monotonic() - start) * rate) + 1)
        while sent < due:
            producer.produce(topic, value, partition=0)
            sent += 1
        producer.poll(0)
        time.sleep(0.0002)
    if producer.flush(120) != 0:
        raise TimeoutError("the counting producer: records undelivered")
    took = time.monotonic() - start
    after = _fresh_stats(producer, latest)
    result.put((produce_requests(after) - produce_requests(before), count, took))


def _fresh_stats(producer: Any, latest: list[dict[str, Any]]) -> dict[str, Any]:
    """The first statistics librdkafka emits after now (so every request sent is counted)."""
    latest.clear()
    deadline = time.monotonic() + 10
    while len(latest) < 2:  # the first may have been taken before the last request went out
        if time.monotonic() > deadline:
            raise TimeoutError("librdkafka emitted no statistics")
        producer.poll(0.05)
    return latest[-1]


@dataclass(frozen=True, slots=True)
class CpuRun:
    """One run of the CPU workload: requests and records sent, the producer's sending time,
    the seconds the broker's CPU was read over (the run: from the start signal to the
    producer's report; the idle stretch before it) and its CPU seconds in each, by kind of
    process."""

    requests: int
    records: int
    sending_s: float
    seconds: float
    idle_s: float
    busy_cpu_s: dict[str, float]
    idle_cpu_s: dict[str, float]

    def us_per_request(self, kinds: Iterable[str] | None = None) -> float:
        """CPU microseconds per produce request above idle, over ``kinds`` (default: all)."""
        chosen = list(self.busy_cpu_s) if kinds is None else list(kinds)
        busy = sum(self.busy_cpu_s.get(k, 0.0) for k in chosen)
        idle = sum(self.idle_cpu_s.get(k, 0.0) for k in chosen)
        return us_per_request(busy, self.seconds, idle, self.idle_s, self.requests)


def cpu_run(bootstrap: str, topic: str, processes: Mapping[str, list[int]], rate: int, seconds: float) -> CpuRun:
    """The broker's CPU while a counting producer sends ``rate`` records/s (linger.ms=0,
    acks=1, lz4) for ``seconds``, and over an idle stretch as long just before."""
    spawn = multiprocessing.get_context("spawn")
    ready, go, result = spawn.Event(), spawn.Event(), spawn.Queue()
    config = {"acks": "1", "compression.type": "lz4", "linger.ms": 0}
    child = spawn.Process(
        target=counting_producer, args=(bootstrap, topic, rate, seconds, config, ready, go, result), daemon=True
    )
    child.start()
    try:
        if not ready.wait(180):
            raise TimeoutError("the counting producer did not connect")
        pids = [pid for group in processes.values() for pid in group]
        idle_start = cpu_seconds(pids)
        idle_t = time.monotonic()
        time.sleep(seconds)
        idle_end = cpu_seconds(pids)
        idle_s = time.monotonic() - idle_t
        busy_t = time.monotonic()
        go.set()
        requests, records, took = result.get(timeout=seconds + 300)
        busy_end = cpu_seconds(pids)
        busy_s = time.monotonic() - busy_t
        child.join(60)
    finally:
        if child.is_alive():
            child.kill()
    busy, idle = {}, {}
    for kind, group in processes.items():
        busy[kind] = cpu_used({p: idle_end[p] for p in group if p in idle_end}, busy_end)
        idle[kind] = cpu_used({p: idle_start[p] for p in group if p in idle_start}, idle_end)
    return CpuRun(requests, records, took, busy_s, idle_s, busy, idle)


def broker_cpu(figures: Any, rounds: Iterable[tuple[int, Any]], rates: Iterable[int], seconds: float) -> None:
    """The CPU workload (see the module docstring) at each rate, round by round, RF 1."""
    rates = list(rates)
    note = "broker CPU above idle per produce request (psutil); requests as librdkafka counted them"
    names = {rate: f"cpu.produce.{rate}rps" for rate in rates}
    for rate, name in names.items():
        figures.define(name, "us", False, None, note, rate=rate, seconds=seconds, value_bytes=100, linger_ms=0)
    for r, side in rounds:
        for rate, name in names.items():
            print(f"[cpu per produce request, {rate}/s, round {r + 1}] {side.name}", flush=True)
            topic = bc.unique("cpu")
            bc.create_topic(side.bootstrap, topic, 1, 1)
            figure = figures.by_name[name]

            def run(side: Any = side, topic: str = topic, rate: int = rate, figure: Any = figure) -> float:
                processes = broker_processes(side.pids())
                if not processes:
                    raise RuntimeError(f"no broker processes found for {side.name}")
                got = cpu_run(side.bootstrap, topic, processes, rate, seconds)
                detail = {
                    "requests_per_s": got.requests / got.sending_s,
                    "records_per_request": got.records / got.requests,
                    **{f"{kind}_us": got.us_per_request([kind]) for kind in processes},
                }
                figure.params.setdefault("runs", {}).setdefault(side.name, []).append(
                    {k: round(v, 2) for k, v in detail.items()}
                )
                print(
                    f"    {side.name}: {detail['requests_per_s']:,.0f} requests/s, "
                    f"{detail['records_per_request']:.2f} records each; "
                    + ", ".join(f"{k} {v:,.0f}" for k, v in detail.items() if k.endswith("_us")),
                    flush=True,
                )
                return got.us_per_request()

            figures.measure(name, side.name, run)
            bc.delete_topic(side.bootstrap, topic)
