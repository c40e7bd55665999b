"""The pure pieces of the broker-load workloads of the Kafka-peer benchmark
(scripts/bench_broker_load.py, wired into bench_vs_kafka.py) and of bench_replication.py's
alternation: latency windows and growth, the broker's processes, CPU per request, librdkafka's
request count, and the figures the workloads record (their clients replaced by fakes). No
Ray, no JVM, no broker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import bench_broker_load as load  # noqa: E402
import bench_vs_kafka as bvk  # noqa: E402


def test_latency_windows_cut_by_production_time_leaving_out_the_warm_up():
    samples = [(0.5, 9.0)] + [(t / 10, 0.010) for t in range(10, 50)] + [(t / 10, 0.100) for t in range(50, 100)]
    windows = load.latency_windows(samples, window_s=5.0, warmup_s=1.0)
    assert [(w.start_s, w.count) for w in windows] == [(0.0, 40), (5.0, 50)]
    assert windows[0].p50_ms == pytest.approx(10.0) and windows[1].p99_ms == pytest.approx(100.0)
    # The warm-up's 9 s record is in no window.
    assert max(w.p99_ms for w in windows) < 9000
    with pytest.raises(ValueError):
        load.latency_windows(samples, window_s=0)


def test_records_produced_after_the_last_window_began_count_in_it():
    samples = [(t / 10, 0.001) for t in range(0, 60)] + [(6.0, 0.5), (6.01, 0.5)]
    windows = load.latency_windows(samples, window_s=2.0, seconds=6.0)
    assert [w.start_s for w in windows] == [0.0, 2.0, 4.0]
    assert windows[-1].count == 22
    # Without the run's length the stragglers make a window of their own.
    assert [w.start_s for w in load.latency_windows(samples, window_s=2.0)][-1] == 6.0


def test_growth_is_a_later_window_p50_above_twice_the_first():
    def windows(*p50s):
        return [load.Window(i * 5.0, 100, p50, p50 * 2) for i, p50 in enumerate(p50s)]

    assert load.grows(windows(10.0, 12.0, 20.0)) is False  # twice is not more than twice
    assert load.grows(windows(10.0, 12.0, 20.1)) is True
    assert load.grows(windows(10.0)) is None
    assert load.growth_of(windows(10.0, 35.0, 20.0)) == pytest.approx(3.5)
    with pytest.raises(ValueError):
        load.growth_of([])


def test_window_ratios_pair_the_windows_both_sides_measured():
    kafka = [{"start_s": 0.0, "p50_ms": 5.0, "p99_ms": 20.0}, {"start_s": 5.0, "p50_ms": 4.0, "p99_ms": 10.0}]
    rayqueue = [{"start_s": 0.0, "p50_ms": 10.0, "p99_ms": 30.0}, {"start_s": 10.0, "p50_ms": 1.0, "p99_ms": 1.0}]
    assert load.window_ratios(kafka, rayqueue) == [(0.0, 2.0, 1.5)]


def test_the_brokers_processes_are_kafkas_jvm_and_rayqueues_host_and_listener_actors():
    roles = {
        "kafka.Kafka (JVM)": [10, 11],
        "ray::BrokerHost": [20],
        "ray::BrokerHost.fetch_messages": [21],
        "ray::gateway|0:Gateway.__init__": [30],
        "ray::Gateway": [31],
        "ray::Controller": [40],
        "ray::GroupCoordinator.start": [41],
        "gcs_server": [50],
        "raylet": [51],
        "ray (default_worker.py)": [52],
    }
    assert load.broker_processes(roles) == {"kafka": [10, 11], "host": [20, 21], "listener": [30, 31]}
    assert load.broker_processes({"ray::Controller": [1]}) == {}


def test_cpu_per_request_is_what_the_run_used_above_idle():
    assert load.cpu_used({1: 1.0, 2: 5.0, 3: 2.0}, {1: 1.5, 2: 6.0}) == pytest.approx(1.5)  # 3 exited
    # 2.0 s of CPU over 10 s with 0.1 s idle per second: 1.0 s for 1,000 requests.
    assert load.us_per_request(2.0, 10.0, 0.5, 5.0, 1000) == pytest.approx(1000.0)
    with pytest.raises(ValueError):
        load.us_per_request(2.0, 10.0, 0.5, 5.0, 0)
    with pytest.raises(ValueError):
        load.us_per_request(2.0, 0.0, 0.5, 5.0, 10)
    run = load.CpuRun(500, 600, 2.5, 2.0, 2.0, {"host": 0.3, "listener": 0.2}, {"host": 0.1, "listener": 0.0})
    assert run.us_per_request(["host"]) == pytest.approx(400.0)
    assert run.us_per_request() == pytest.approx(800.0)


def test_produce_requests_come_from_librdkafkas_statistics():
    stats = {
        "brokers": {
            "127.0.0.1:1/bootstrap": {"req": {"Produce": 0, "Metadata": 2}},
            "127.0.0.1:1/0": {"req": {"Produce": 41, "Fetch": 3}},
            "127.0.0.1:2/1": {"req": {"Produce": 2}},
            "127.0.0.1:3/2": {},
        }
    }
    assert load.produce_requests(stats) == 43
    assert load.produce_requests({}) == 0


class _Side:
    def __init__(self, name: str) -> None:
        self.name = name
        self.bootstrap = f"{name}:9"

    def pids(self) -> dict[str, list[int]]:
        return {"kafka.Kafka (JVM)": [1]} if self.name == "kafka" else {"ray::BrokerHost": [2], "ray::Gateway": [3]}


def _no_topics(monkeypatch) -> None:
    monkeypatch.setattr(load.bc, "create_topic", lambda *a, **k: 0.0)
    monkeypatch.setattr(load.bc, "delete_topic", lambda *a, **k: None)


def test_the_linger0_workload_records_both_sides_and_their_windows(monkeypatch, capsys):
    _no_topics(monkeypatch)
    asked = []

    def samples(bootstrap, topic, rate, seconds, size, config):
        asked.append(config)
        slow = 1.0 if bootstrap.startswith("rayqueue") else 0.0
        return [(t / 100, 0.005 + slow * t / 1000) for t in range(0, int(seconds * 100))]

    monkeypatch.setattr(load.bc, "e2e_samples", samples)
    figures = bvk.Figures()
    sides = [_Side("kafka"), _Side("rayqueue")]
    load.linger0(figures, bvk.rounds_of(sides, 1), 10_000, 6.0, 2.0)
    assert all(c["linger.ms"] == 0 and c["acks"] == "1" and c["compression.type"] == "lz4" for c in asked)
    p50 = figures.by_name["e2e.linger0.p50"]
    windows = p50.params["windows"]
    assert [w["start_s"] for w in windows["kafka"][0]] == [0.0, 2.0, 4.0]
    assert figures.by_name["e2e.linger0.growth"].values["kafka"] == [pytest.approx(1.0)]
    assert figures.by_name["e2e.linger0.growth"].values["rayqueue"][0] > 2
    assert figures.by_name["e2e.linger0.p99"].target == 2.0
    bvk.print_windows(figures)
    out = capsys.readouterr().out
    assert "round 1 kafka: no window's p50 > 2x" in out and "round 1 rayqueue: a window's p50 > 2x" in out


def test_the_cpu_workload_records_microseconds_per_request_at_each_rate(monkeypatch):
    _no_topics(monkeypatch)
    runs = []

    def cpu_run(bootstrap, topic, processes, rate, seconds):
        runs.append((bootstrap, sorted(processes), rate))
        busy = {kind: 0.2 for kind in processes}
        return load.CpuRun(rate * 2, rate * 2, 2.0, 2.0, 2.0, busy, {kind: 0.0 for kind in processes})

    monkeypatch.setattr(load, "cpu_run", cpu_run)
    figures = bvk.Figures()
    load.broker_cpu(figures, bvk.rounds_of([_Side("kafka"), _Side("rayqueue")], 1), (200, 2000), 2.0)
    assert ("rayqueue:9", ["host", "listener"], 2000) in runs and ("kafka:9", ["kafka"], 200) in runs
    fig = figures.by_name["cpu.produce.200rps"]
    assert fig.values["kafka"] == [pytest.approx(0.2 / 400 * 1e6)]
    assert fig.values["rayqueue"] == [pytest.approx(0.4 / 400 * 1e6)]
    detail = fig.params["runs"]["rayqueue"][0]
    assert detail["requests_per_s"] == 200 and detail["host_us"] == pytest.approx(500.0)


def test_the_new_workloads_are_chosen_by_name_and_quick_keeps_them_short():
    assert {"linger0", "cpu"} <= set(bvk.WORKLOADS)
    assert bvk.FULL.linger0_seconds == 30 and bvk.FULL.linger0_window_s == 5 and bvk.FULL.cpu_rates == (200, 2000)
    assert bvk.QUICK.linger0_seconds < bvk.FULL.linger0_seconds and bvk.QUICK.cpu_seconds < bvk.FULL.cpu_seconds


def test_bench_replication_turns_the_order_every_round():
    import bench_replication

    assert [bench_replication.turns(["kafka", "ray"], r) for r in range(3)] == [
        ["kafka", "ray"],
        ["ray", "kafka"],
        ["kafka", "ray"],
    ]


def test_a_workload_is_measured_with_the_harness_heap_frozen():
    import gc

    import bench_clients

    before = gc.get_freeze_count()
    seen = {}

    def workload() -> float:
        seen["frozen"] = gc.get_freeze_count()
        seen["collecting"] = gc.isenabled()
        return 1.0

    figures = bvk.Figures()
    figures.define("x", "ms", False)
    figures.measure("x", "kafka", workload)
    assert seen["frozen"] > before and seen["collecting"]  # frozen, not switched off
    assert gc.get_freeze_count() == before
    with pytest.raises(RuntimeError):
        with bench_clients.steady_heap():
            raise RuntimeError("a failed workload")
    assert gc.get_freeze_count() == before
