"""Metrics end to end: a cluster of its own on the session Ray (whose metrics agent serves
Prometheus on a free port), records produced and consumed, a follower failed, the endpoint
scraped over HTTP and parsed with prometheus_client's parser; the Grafana dashboard's
expressions checked against what the scrape returned; ``rayqueue health`` both ways.

Ray's agent exports every few seconds, so every check waits on a condition with a deadline.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import urllib.request
from pathlib import Path

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

import rayqueue
from actors.protocol import ProduceRequest
from rayqueue import TopicPartition
from rayqueue.cli import app
from rayqueue.errors import NotLeaderOrFollowerError
from storage.records.builder import RecordBatchBuilder
from tests.helpers import SMALL_INTERNAL_TOPICS, consume_all, listener_host, wait_for

NAMESPACE = "rayqueue-metrics-test"
DASHBOARD = Path(__file__).resolve().parents[2] / "configs" / "grafana" / "rayqueue.json"
SCRAPE_DEADLINE_S = 90.0
RECORDS, VALUE_SIZE = 2_000, 100
DIRECT_CALLS, DIRECT_RECORDS = 7, 10
# A record of a 100-byte value, no key or headers, costs at most this much more in a batch
# (length, attributes, timestamp and offset deltas, key and value lengths, header count);
# a batch adds its 61-byte header.
RECORD_OVERHEAD, BATCH_OVERHEAD = 12, 61


_port: list[int] = []


@pytest.fixture(scope="module", autouse=True)
def _endpoint(metrics_export_port):
    _port[:] = [metrics_export_port]


def scrape() -> dict[str, list]:
    """Every sample of the endpoint, by sample name (``_bucket``/``_count`` included)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{_port[0]}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def total(samples: dict[str, list], name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples of this cluster with ``labels`` (None: no such series).

    Summed over what Ray adds (WorkerId, ...): a counter of one topic is recorded by its
    leader's process, and after a leader change by another one.
    """
    found = [
        s.value
        for s in samples.get(name, [])
        if s.labels.get("cluster") == NAMESPACE and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(found) if found else None


def wait_metric(name: str, want, what: str, **labels: str) -> dict[str, list]:
    """Scrape until ``want(value)`` holds for the summed series; returns that scrape."""
    seen: list = []

    def check():
        samples = scrape()
        value = total(samples, name, **labels)
        seen.append(value)
        return samples if value is not None and want(value) else None

    try:
        return wait_for(check, timeout=SCRAPE_DEADLINE_S, interval=0.5, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{what}: last values of {name}{labels}: {seen[-5:]}") from exc


@pytest.fixture(scope="module")
def metrics_cluster(ray_session):
    root = tempfile.mkdtemp(prefix="rayqueue-metrics-")
    cluster = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace=NAMESPACE,
        log_retention_check_interval_ms=1000,
        rayqueue_group_lag_refresh_interval_ms=500,
        listeners="PLAINTEXT://127.0.0.1:0",
        **SMALL_INTERNAL_TOPICS,
    )
    yield cluster
    cluster.shutdown(delete_data=True)
    shutil.rmtree(root, ignore_errors=True)


def test_scraped_metrics_match_what_was_done(metrics_cluster):
    cluster = metrics_cluster
    admin = cluster.admin()
    admin.create_topic("metered", 1, 3)
    values = [bytes([i % 251]) * VALUE_SIZE for i in range(RECORDS)]
    producer = cluster.producer(acks="all", linger_ms=5)
    for start in range(0, RECORDS, 500):
        producer.send_many("metered", values[start : start + 500])
    producer.flush()
    producer.close()

    # Requests made one by one straight to the leader (acks=1, which nothing else here
    # uses): the histogram of that request type counts exactly these.
    leader = cluster.metadata(["metered"]).topics["metered"].partitions[0].leader_handle
    direct_bytes = 0
    for call in range(DIRECT_CALLS):
        builder = RecordBatchBuilder()
        for i in range(DIRECT_RECORDS):
            builder.append(b"v" * VALUE_SIZE, key=None, timestamp=1_700_000_000_000 + call * 100 + i)
        batch = builder.build()
        direct_bytes += len(batch)
        ray.get(leader.produce.remote(ProduceRequest(batch, 1, 30_000)))
    produced = RECORDS + DIRECT_CALLS * DIRECT_RECORDS
    # A produce to a follower is refused: a failed produce request, counted by error name.
    follower_handle = next(h for b, h in admin.replica_handles(TopicPartition("metered", 0)).items() if h != leader)
    with pytest.raises(NotLeaderOrFollowerError):
        ray.get(follower_handle.produce.remote(ProduceRequest(batch, 1, 30_000)))
    wait_metric(
        "ray_rayqueue_request_errors_total",
        lambda v: v == 1,
        "errors by name",
        request="Produce",
        error="NOT_LEADER_OR_FOLLOWER",
    )

    samples = wait_metric("ray_rayqueue_messages_in_total", lambda v: v >= produced, "messages in", topic="metered")
    assert total(samples, "ray_rayqueue_messages_in_total", topic="metered") == produced
    payload = RECORDS * VALUE_SIZE
    bytes_in = wait_metric(
        "ray_rayqueue_bytes_in_total", lambda v: v >= payload + direct_bytes, "bytes in", topic="metered"
    )
    value = total(bytes_in, "ray_rayqueue_bytes_in_total", topic="metered") - direct_bytes
    batches = total(bytes_in, "ray_rayqueue_produce_requests_total", topic="metered") - DIRECT_CALLS
    assert total(bytes_in, "ray_rayqueue_failed_produce_requests_total", topic="metered") == 1
    assert payload < value <= payload + RECORDS * RECORD_OVERHEAD + batches * BATCH_OVERHEAD
    hist = wait_metric(
        "ray_rayqueue_request_total_time_ms_count",
        lambda v: v >= DIRECT_CALLS + 1,
        "produce histogram",
        request="Produce",
        acks="1",
        path="actor",
    )
    # The refused one is timed too (Kafka's TotalTimeMs counts every request).
    timed = DIRECT_CALLS + 1
    assert total(hist, "ray_rayqueue_request_total_time_ms_count", request="Produce", acks="1") == timed
    inf_bucket = total(hist, "ray_rayqueue_request_total_time_ms_bucket", request="Produce", acks="1", le="+Inf")
    assert inf_bucket == timed

    # A group consumes everything and commits: its lag, computed by the coordinator from the
    # high watermark it asks the leader for, goes to 0 and its committed offset to the end.
    consumer = cluster.consumer(group_id="metered-group", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe(["metered"])
    records = consume_all(consumer, produced)
    assert sum(len(r.value) for r in records) == produced * VALUE_SIZE
    consumer.commit()
    consumer.close()
    wait_metric(
        "ray_rayqueue_group_committed_offset",
        lambda v: v == produced,
        "committed offset",
        group="metered-group",
        topic="metered",
        partition="0",
    )
    wait_metric(
        "ray_rayqueue_group_lag", lambda v: v == 0, "lag 0", group="metered-group", topic="metered", partition="0"
    )
    wait_metric("ray_rayqueue_bytes_out_total", lambda v: v >= produced * VALUE_SIZE, "bytes out", topic="metered")
    lags = admin.group_lag("metered-group")
    assert lags[TopicPartition("metered", 0)].lag == 0 and lags[TopicPartition("metered", 0)].committed == produced

    # A follower's broker fails: one under-replicated partition, then none once it is back.
    part = cluster.metadata(["metered"]).topics["metered"].partitions[0]
    follower = next(b for b in part.replicas if b != part.leader)
    wait_metric("ray_rayqueue_under_replicated_partitions", lambda v: v == 0, "URPs 0 at first", topic="metered")
    admin.stop_broker(follower)
    try:
        failed = wait_metric("ray_rayqueue_under_replicated_partitions", lambda v: v == 1, "URPs 1", topic="metered")
        assert total(failed, "ray_rayqueue_offline_partitions_count") == 0
        assert total(failed, "ray_rayqueue_isr_shrinks_total", topic="metered") >= 1
    finally:
        admin.start_broker(follower)
    back = wait_metric("ray_rayqueue_under_replicated_partitions", lambda v: v == 0, "URPs 0 again", topic="metered")
    assert total(back, "ray_rayqueue_isr_expands_total", topic="metered") >= 1
    assert total(back, "ray_rayqueue_active_controller_count") == 1
    # The log gauges of every replica.
    assert total(back, "ray_rayqueue_log_end_offset", topic="metered", broker=str(part.leader)) == produced


def test_gateway_requests_are_timed_by_api(metrics_cluster):
    from confluent_kafka import Producer as KafkaProducer

    cluster = metrics_cluster
    cluster.admin().create_topic("metered-kafka", 1, 1)
    producer = KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0, "acks": "all"})
    for i in range(20):
        producer.produce("metered-kafka", b"x" * 50, key=str(i).encode())
        producer.flush(30)
    samples = wait_metric(
        "ray_rayqueue_messages_in_total", lambda v: v >= 20, "gateway messages in", topic="metered-kafka"
    )
    assert total(samples, "ray_rayqueue_messages_in_total", topic="metered-kafka") == 20
    wait_metric(
        "ray_rayqueue_request_total_time_ms_count",
        lambda v: v >= 20,
        "gateway produce histogram",
        path="gateway",
        request="Produce",
        acks="-1",
    )
    # The client's Metadata went to the gateway it bootstrapped from, which may export later.
    wait_metric(
        "ray_rayqueue_request_total_time_ms_count",
        lambda v: v >= 1,
        "gateway metadata histogram",
        path="gateway",
        request="Metadata",
    )


def test_client_metrics_reach_the_scrape_with_their_client_id(metrics_cluster):
    """A producer's and a consumer's metrics, exported from the driver by the clients'
    exporter thread; a client with ``metric.reporters=[]`` exports nothing."""
    cluster = metrics_cluster
    cluster.admin().create_topic("metered-clients", 1, 1)
    n = 700
    values = [b"c" * VALUE_SIZE] * n
    silent = cluster.producer(client_id="metered-silent", metric_reporters=[])
    silent.send_many("metered-clients", values[:10], partition=0)
    silent.flush()
    silent.close()
    producer = cluster.producer(client_id="metered-producer", linger_ms=5)
    producer.send_many("metered-clients", values, partition=0)
    producer.flush()
    assert producer.metrics()["record-send-total"] == n
    producer.close()
    consumer = cluster.consumer(client_id="metered-consumer", auto_offset_reset="earliest")
    consumer.assign([TopicPartition("metered-clients", 0)])
    assert len(consume_all(consumer, n + 10)) == n + 10
    consumed = consumer.metrics()
    consumer.close()

    scraped = wait_metric(
        "ray_rayqueue_producer_record_send_total", lambda v: v >= n, "producer metric", client_id="metered-producer"
    )
    assert total(scraped, "ray_rayqueue_producer_record_send_total", client_id="metered-producer") == n
    assert total(scraped, "ray_rayqueue_producer_request_latency_avg_ms", client_id="metered-producer") is not None
    scraped = wait_metric(
        "ray_rayqueue_consumer_records_consumed_total",
        lambda v: v >= n + 10,
        "consumer metric",
        client_id="metered-consumer",
    )
    assert total(scraped, "ray_rayqueue_consumer_records_consumed_total", client_id="metered-consumer") == n + 10
    assert (
        total(scraped, "ray_rayqueue_consumer_bytes_consumed_total", client_id="metered-consumer")
        == (consumed["bytes-consumed-total"])
    )
    # Closed at the same time as the others, it would have been exported by now.
    assert total(scraped, "ray_rayqueue_producer_record_send_total", client_id="metered-silent") is None


def test_grafana_dashboard_names_only_scraped_metrics(metrics_cluster):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["schemaVersion"] >= 30 and dashboard["panels"]
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs and all(p.get("type") and p.get("gridPos") for p in dashboard["panels"])
    named = {m for e in exprs for m in re.findall(r"\b(ray_rayqueue_[a-z_]+)", e)}
    assert {
        "ray_rayqueue_messages_in_total",
        "ray_rayqueue_under_replicated_partitions",
        "ray_rayqueue_group_lag",
    } <= named
    # Everything above ran first (module order), so every family has been exported by now.
    missing: set[str] = set()

    def all_scraped() -> bool:
        samples = scrape()
        missing.clear()
        missing.update(n for n in named if total(samples, n) is None)
        return not missing

    wait_for(all_scraped, timeout=SCRAPE_DEADLINE_S, interval=0.5, what=f"dashboard metrics in the scrape: {missing}")
    assert not missing


def test_health_is_ok_then_fails_on_an_offline_partition(metrics_cluster):
    runner = CliRunner()
    ok = runner.invoke(app, ["health", "--name", NAMESPACE])
    assert ok.exit_code == 0, ok.output
    assert "healthy" in ok.output
    admin = metrics_cluster.admin()
    admin.create_topic("lonely", 1, 1)
    broker = metrics_cluster.metadata(["lonely"]).topics["lonely"].partitions[0].leader
    admin.stop_broker(broker)
    try:
        bad = runner.invoke(app, ["health", "--name", NAMESPACE])
        assert bad.exit_code == 1, bad.output
        assert "offline" in bad.output and "lonely-0" in bad.output
        wait_metric("ray_rayqueue_offline_partitions_count", lambda v: v >= 1, "offline partitions")
    finally:
        admin.start_broker(broker)
    again = runner.invoke(app, ["health", "--name", NAMESPACE])
    assert again.exit_code == 0, again.output


def test_health_and_the_listener_gauge_name_a_broker_whose_listener_is_down(metrics_cluster):
    """A listener that does not listen while Metadata still names its broker (as after a
    restart whose start failed) makes ``rayqueue health`` fail naming the broker and its
    address, and its listener-up gauge read 0; listening again clears both."""
    runner = CliRunner()
    host = listener_host(metrics_cluster, 1)
    wait_metric("ray_rayqueue_broker_listener_up", lambda v: v == 1, "broker 1's listener up", broker="1")
    broker = next(b for b in metrics_cluster.metadata([]).brokers if b.broker_id == 1)
    ray.get(host.stop_listener.remote(), timeout=30)
    try:
        named = next(b for b in metrics_cluster.metadata([]).brokers if b.broker_id == 1)
        assert (named.host, named.port) == (broker.host, broker.port)  # still in Metadata
        bad = runner.invoke(app, ["health", "--name", NAMESPACE])
        assert bad.exit_code == 1, bad.output
        assert f"broker 1's listener {broker.host}:{broker.port} is down" in " ".join(bad.output.split())
        assert "broker 0's" not in bad.output and "broker 2's" not in bad.output
        wait_metric("ray_rayqueue_broker_listener_up", lambda v: v == 0, "broker 1's listener down", broker="1")
    finally:
        ray.get(host.start_listener.remote(), timeout=60)
    ok = runner.invoke(app, ["health", "--name", NAMESPACE])
    assert ok.exit_code == 0, ok.output
    wait_metric("ray_rayqueue_broker_listener_up", lambda v: v == 1, "broker 1's listener up again", broker="1")


def test_health_fails_without_a_controller(ray_session):
    result = CliRunner().invoke(app, ["health", "--name", "rayqueue-nobody-here"])
    assert result.exit_code == 1
    assert "unhealthy" in result.output and "controller" in result.output
