"""The pure pieces of the Kafka-peer benchmark (scripts/bench_vs_kafka.py, kafka_peer.py,
bench_stats.py): figures and their ratios, percentiles, Kafka's configuration. No Ray, no JVM."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import bench_vs_kafka as bvk  # noqa: E402
import kafka_peer  # noqa: E402
from bench_stats import paired_ratios, percentile, spread  # noqa: E402


def test_ratios_pair_rounds_and_skip_failed_ones():
    fig = bvk.Figure("x", "records/s", True, target=0.7)
    fig.values = {"kafka": [100.0, 200.0, None], "rayqueue": [50.0, None, 90.0]}
    assert fig.ratios() == [0.5]
    assert fig.met() is False
    fig.values = {"kafka": [100.0, 100.0, 100.0], "rayqueue": [60.0, 80.0, 90.0]}
    assert fig.ratios() == [0.6, 0.8, 0.9]
    assert fig.met() is True  # the median round, 0.8
    out = fig.as_json()
    assert out["ratio"] == {"median": 0.8, "min": 0.6, "max": 0.9}
    assert out["target"] == ">= 0.7" and out["kafka_median"] == 100.0 and out["rayqueue_median"] == 80.0


def test_latency_targets_are_upper_bounds():
    fig = bvk.Figure("e2e", "ms", False, target=2.0)
    fig.values = {"kafka": [10.0], "rayqueue": [25.0]}
    assert fig.met() is False and fig.as_json()["target"] == "<= 2.0"
    fig.values = {"kafka": [10.0], "rayqueue": [15.0]}
    assert fig.met() is True


def test_a_failed_measurement_is_recorded_and_the_run_goes_on():
    figures = bvk.Figures()
    figures.define("a", "ms", False)
    figures.define("b", "ms", False)

    def boom():
        raise RuntimeError("no leader")

    assert figures.measure(["a", "b"], "kafka", boom) is None
    assert figures.by_name["a"].values["kafka"] == [None] and "no leader" in figures.by_name["b"].errors[0]
    figures.measure(["a", "b"], "rayqueue", lambda: (1.0, 2.0))
    assert figures.by_name["b"].values["rayqueue"] == [2.0]


def test_rounds_alternate_which_system_goes_first():
    sides = [bvk.Side("kafka", "", dict), bvk.Side("rayqueue", "", dict)]
    order = [(r, s.name) for r, s in bvk.rounds_of(sides, 3)]
    assert order == [
        (0, "kafka"),
        (0, "rayqueue"),
        (1, "rayqueue"),
        (1, "kafka"),
        (2, "kafka"),
        (2, "rayqueue"),
    ]


def test_percentile_is_nearest_rank():
    samples = [float(i) for i in range(1, 1001)]
    assert percentile(samples, 50) == 500.0
    assert percentile(samples, 99) == 990.0
    assert percentile(samples, 99.9) == 999.0
    assert percentile([3.0], 99.9) == 3.0
    with pytest.raises(ValueError):
        percentile([], 50)
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    with pytest.raises(ValueError):
        paired_ratios([1.0], [1.0, 2.0])


def test_connector_jar_names():
    assert bvk._artifact("kafka-clients-3.4.1.jar") == "kafka-clients"
    assert bvk._artifact("spark-sql-kafka-0-10_2.12-3.5.7.jar") == "spark-sql-kafka-0-10_2.12"
    assert bvk._artifact("commons-pool2-2.11.1.jar") == "commons-pool2"
    assert bvk._artifact("javassist-3.30.2-GA.jar") == "javassist"


def test_cluster_ids_are_kafka_uuids():
    for _ in range(200):
        cid = kafka_peer.random_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_broker_properties_stay_at_kafkas_defaults_but_for_what_a_node_needs(tmp_path):
    one = kafka_peer.broker_properties(1, 5000, 5001, "1@127.0.0.1:5001", tmp_path, 1)
    assert one["process.roles"] == "broker,controller"
    assert one["listeners"] == "PLAINTEXT://127.0.0.1:5000,CONTROLLER://127.0.0.1:5001"
    assert one["offsets.topic.replication.factor"] == "1" and one["transaction.state.log.min.isr"] == "1"
    assert one["group.initial.rebalance.delay.ms"] == "0"
    three = kafka_peer.broker_properties(2, 5002, 5003, "1@a:1,2@b:2,3@c:3", tmp_path, 3)
    # Three nodes keep Kafka's internal-topic defaults (RF 3, min ISR 2): the keys are not set.
    assert not {k for k in three if k.startswith(("offsets.topic", "transaction.state", "share."))}
    assert three["node.id"] == "2" and three["controller.quorum.voters"] == "1@a:1,2@b:2,3@c:3"
    with pytest.raises(ValueError):
        kafka_peer.KafkaPeer(0)
