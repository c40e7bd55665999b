"""The clients' metrics (Kafka's producer-metrics and consumer-fetch-manager-metrics): what
``Producer.metrics()`` and ``Consumer.metrics()`` count, per request and batch; the windows
of their maxima; whether a client reports to Ray. The Prometheus side is in test_metrics.py."""

from __future__ import annotations

import pytest

from rayqueue import TopicPartition
from rayqueue.config import CONSUMER_CONFIG, producer_config
from rayqueue.errors import RecordTooLargeError
from rayqueue.metrics import CONSUMER_METRICS, PRODUCER_METRICS, ClientMetrics, Sensor
from tests.helpers import consume_all, wait_for

pytestmark = pytest.mark.usefixtures("twin")

VALUE_SIZE = 100
# A 100-byte record without key or headers takes at most this much more in a batch; a batch
# adds its 61-byte header (as in test_metrics.py).
RECORD_OVERHEAD, BATCH_OVERHEAD = 12, 61


def test_producer_metrics_count_records_batches_and_requests(cluster, new_topic):
    topic = new_topic()
    records, batches = 1000, 10
    per_batch = records // batches
    # Batches as large as a whole flush and a linger that never ends: each flush() seals
    # exactly one batch, sent alone in one produce call.
    producer = cluster.producer(linger_ms=600_000, batch_size=10**6, client_id="metrics-producer")
    for b in range(batches):
        for _ in range(per_batch):
            producer.send(topic, bytes([b]) * VALUE_SIZE, partition=0)
        producer.flush(60)
    m = producer.metrics()
    producer.close()
    assert set(m) == set(PRODUCER_METRICS)
    assert m["record-send-total"] == records
    assert m["request-total"] == batches
    assert m["records-per-request-avg"] == per_batch
    low, high = per_batch * VALUE_SIZE, per_batch * (VALUE_SIZE + RECORD_OVERHEAD) + BATCH_OVERHEAD
    assert low < m["batch-size-avg"] <= m["batch-size-max"] <= high
    assert m["record-error-total"] == 0 and m["record-retry-total"] == 0
    assert 0 < m["request-latency-avg"] <= m["request-latency-max"]
    assert m["record-send-rate"] > 0 and m["request-rate"] > 0


def test_producer_counts_failed_records(cluster, new_topic):
    topic = new_topic(max_message_bytes=1000)
    producer = cluster.producer(linger_ms=600_000, batch_size=10**6)
    futures = [producer.send(topic, b"x" * 500, partition=0) for _ in range(3)]
    producer.flush(60)  # one batch of three records, larger than the topic accepts
    for future in futures:
        with pytest.raises(RecordTooLargeError):
            future.get(30)
    ok = producer.send(topic, b"small", partition=0)
    producer.flush(60)
    assert ok.get(30).offset == 0
    m = producer.metrics()
    producer.close()
    assert m["record-error-total"] == 3
    assert m["record-send-total"] == 4
    assert m["request-total"] == 2


def test_consumer_metrics_count_records_and_lag_falls_to_zero(cluster, new_topic):
    topic = new_topic()
    records = 3000
    # Many small batches, none above batch.size: an idempotent producer lets a batch grow past
    # it while its in-flight window is full (a loaded machine), and one such batch would
    # make a fetch answer larger than max.partition.fetch.bytes.
    producer = cluster.producer(linger_ms=5, batch_size=4096, enable_idempotence=False)
    for i in range(records):
        producer.send(topic, bytes([i % 251]) * VALUE_SIZE, partition=0)
    producer.flush(60)
    producer.close()
    # Small answers (so the first ones leave lag behind) and short windows (so the lag's
    # maximum forgets them soon after the consumer catches up).
    consumer = cluster.consumer(
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8192,
        fetch_max_wait_ms=100,
        metrics_sample_window_ms=300,
        metrics_num_samples=2,
    )
    consumer.assign([TopicPartition(topic, 0)])
    first = consumer.poll(10_000)
    assert first
    behind = consumer.metrics()["records-lag-max"]
    assert 0 < behind < records
    got = list(first) + consume_all(consumer, records - len(first))
    assert len(got) == records
    m = consumer.metrics()
    assert set(m) == set(CONSUMER_METRICS)
    assert m["records-consumed-total"] == records
    assert m["bytes-consumed-total"] >= records * VALUE_SIZE
    assert m["fetch-total"] >= records * VALUE_SIZE // 8192
    assert 0 <= m["fetch-latency-avg"] <= m["fetch-latency-max"]
    assert 0 < m["fetch-size-avg"] <= m["fetch-size-max"] <= 8192  # max.partition.fetch.bytes holds

    def caught_up():
        consumer.poll(50)  # empty answers (long polls) record a lag of 0
        return consumer.metrics()["records-lag-max"] == 0

    wait_for(caught_up, timeout=30, what="records-lag-max back to 0")
    assert consumer.metrics()["records-consumed-total"] == records
    consumer.close()


def test_ray_reporting_follows_the_cluster_unless_configured():
    on = producer_config(client_id="p")
    assert ClientMetrics("producer", on, "ns", cluster_metrics=False).ray_enabled is False
    off = ClientMetrics("producer", producer_config(metric_reporters=[]), "ns", cluster_metrics=True)
    assert off.ray_enabled is False
    explicit = CONSUMER_CONFIG.parse({"metric.reporters": "ray"})
    client = ClientMetrics("consumer", explicit, "ns", cluster_metrics=False)
    assert client.ray_enabled is True
    client.close()


def test_sensor_windows_forget_old_maxima_and_rates_span_whole_windows():
    sensor = Sensor(window_s=1.0, samples=2)
    sensor.record(50, now=100.0)
    sensor.record(10, now=100.5)
    assert sensor.max(100.9) == 50 and sensor.avg(100.9) == 30
    # Kafka's Rate: over at least (samples - 1) whole windows.
    assert sensor.rate(100.5) == pytest.approx(60 / 1.0)
    sensor.record(0, now=101.2)  # a new window; the first is still live
    assert sensor.max(101.5) == 50
    assert sensor.max(102.1) == 0  # the first window (100.0 - 101.0) has aged out
    assert sensor.max(103.3) == 0 and sensor.rate(103.3) == 0
    assert sensor.total == 60 and sensor.count == 3
