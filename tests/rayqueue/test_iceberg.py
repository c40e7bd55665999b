"""Iceberg topics on the session cluster: the table equals the topic (records, order within a
partition, columns), aborted transactions stay out, a topic altered on translates from its log
start, DuckDB and Ray Data read what pyiceberg reads, the configs are checked and set as any
topic config (rayqueue's Admin and a Kafka client's IncrementalAlterConfigs), and the lag shows
in ``rayqueue status``."""

from __future__ import annotations

import itertools
import re

import pytest

import rayqueue.iceberg as rqi
from actors.types import TopicPartition
from storage.errors import InvalidConfigError
from tests.helpers import metric_total, read_committed_to_end, scrape, wait_for

FAST = {"rayqueue_iceberg_target_lag_ms": 200}
KV = {"rayqueue_iceberg_mode": "key_value", **FAST}
_txn_ids = itertools.count()


def committed_records(cluster, topic: str, partitions: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record a read_committed consumer reads."""
    out = read_committed_to_end(cluster, topic, partitions)
    return sorted((r.partition, r.offset, r.key, r.value) for r in out)


def table_records(topic: str, cluster) -> list[tuple[int, int, bytes | None, bytes | None]]:
    rows = rqi.to_arrow(topic, cluster).to_pylist()
    return sorted((r["rayqueue"]["partition"], r["rayqueue"]["offset"], r["key"], r["value"]) for r in rows)


def test_a_key_value_topic_is_a_table(cluster, new_topic):
    topic = new_topic(partitions=2, **KV)
    producer = cluster.producer(linger_ms=5)
    for i in range(60):
        producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7), headers=[("n", b"%d" % i)], partition=i % 2)
    producer.flush(30)
    txn = cluster.producer(transactional_id=f"iceberg-{next(_txn_ids)}")
    txn.init_transactions()
    txn.begin_transaction()
    for i in range(10):
        txn.send(topic, b"aborted%d" % i, partition=i % 2)
    txn.abort_transaction()
    txn.begin_transaction()
    for i in range(10):
        txn.send(topic, b"committed%d" % i, partition=i % 2)
    txn.commit_transaction()
    txn.close(10)
    producer.close(10)
    rqi.wait_translated(topic, cluster, timeout_s=120)
    want = committed_records(cluster, topic, 2)
    assert len(want) == 70
    got = table_records(topic, cluster)
    assert got == want  # every committed record once, in offset order per partition; no aborted one
    rows = rqi.to_arrow(topic, cluster).to_pylist()
    row = next(r for r in rows if r["value"] == b"v3")
    assert row["key"] == b"k3" and row["headers"] == [{"key": "n", "value": b"3"}]
    assert row["rayqueue"]["topic"] == topic and row["rayqueue"]["timestamp_type"] == 0
    # The other readers read what pyiceberg reads.
    duck = rqi.duckdb(topic, cluster=cluster)
    duck_rows = duck.query("t", 'SELECT t.rayqueue.partition, t.rayqueue."offset", key, value FROM t').fetchall()
    assert sorted(tuple(r) for r in duck_rows) == got
    ds = rqi.read(topic, cluster)
    ray_rows = sorted(
        (r["rayqueue"]["partition"], r["rayqueue"]["offset"], r["key"], r["value"]) for r in ds.take_all()
    )
    assert ray_rows == got
    # The translation as the leaders report it.
    report = rqi.translation(topic, cluster)
    assert sorted(t.partition for t in report) == [0, 1]
    assert all(t.lag_records == 0 and t.error is None and t.mode == "key_value" for t in report)


def test_a_topic_altered_on_translates_from_its_log_start(cluster, admin, new_topic):
    topic = new_topic(partitions=1, **FAST)
    producer = cluster.producer()
    for i in range(20):
        producer.send(topic, b"r%d" % i)
    producer.flush(30)
    admin.delete_records({TopicPartition(topic, 0): 5})  # the log starts at 5
    assert rqi.translation(topic, cluster) == []  # disabled: nothing translates
    admin.alter_configs(topic, {"rayqueue.iceberg.mode": "key_value"})
    rqi.wait_translated(topic, cluster, timeout_s=120)
    assert [o for _, o, _, _ in table_records(topic, cluster)] == list(range(5, 20))
    # Off again: the leader stops translating; the table stays.
    admin.alter_configs(topic, {"rayqueue.iceberg.mode": "disabled"})
    wait_for(lambda: rqi.translation(topic, cluster) == [], timeout=30, what="translation stopped")
    producer.send(topic, b"while off")
    producer.flush(30)
    producer.close(10)
    assert len(table_records(topic, cluster)) == 15
    # On once more: it goes on from where it stopped (the table's summary), not the log start.
    admin.alter_configs(topic, {"rayqueue.iceberg.mode": "key_value"})
    rqi.wait_translated(topic, cluster, timeout_s=120)
    assert [o for _, o, _, _ in table_records(topic, cluster)] == list(range(5, 21))


def test_iceberg_configs_are_checked_as_topic_configs(admin, new_topic):
    with pytest.raises(InvalidConfigError):
        new_topic(rayqueue_iceberg_mode="parquet")
    with pytest.raises(InvalidConfigError):
        new_topic(rayqueue_iceberg_partition_spec="hour(rayqueue.timestamp)")  # no parentheses
    topic = new_topic()
    with pytest.raises(InvalidConfigError):
        admin.alter_configs(topic, {"rayqueue.iceberg.target.lag.ms": "-5"})
    described = admin.describe_configs(topic)
    assert described["rayqueue.iceberg.mode"][0] == "disabled"
    assert described["rayqueue.iceberg.partition.spec"][0] == "(hour(rayqueue.timestamp))"


def test_a_kafka_client_turns_a_topic_into_an_iceberg_topic(cluster, admin, new_topic):
    """confluent-kafka's AdminClient (what kafka-configs --alter sends): IncrementalAlterConfigs."""
    kafka_admin = pytest.importorskip("confluent_kafka.admin")
    topic = new_topic(**FAST)
    client = kafka_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = kafka_admin.ConfigResource(
        kafka_admin.ResourceType.TOPIC,
        topic,
        incremental_configs=[
            kafka_admin.ConfigEntry(
                "rayqueue.iceberg.mode", "key_value", incremental_operation=kafka_admin.AlterConfigOpType.SET
            )
        ],
    )
    for future in client.incremental_alter_configs([resource]).values():
        future.result(30)
    assert admin.describe_configs(topic)["rayqueue.iceberg.mode"][0] == "key_value"
    producer = cluster.producer()
    producer.send(topic, b"through kafka-configs")
    producer.flush(30)
    producer.close(10)
    rqi.wait_translated(topic, cluster, timeout_s=120)
    assert [v for _, _, _, v in table_records(topic, cluster)] == [b"through kafka-configs"]


def test_the_lag_shows_in_status_the_console_and_the_metrics(cluster, admin, metrics_export_port):
    """A topic whose translation waits (a long target lag): ``rayqueue status``, the console's
    topic page and the lag gauge show each partition's lag in records, from its leader."""
    import os

    topic = f"ice-lag-{os.getpid()}"  # short: the status table fits a terminal's width
    admin.create_topic(
        topic, 1, configs={"rayqueue.iceberg.mode": "key_value", "rayqueue.iceberg.target.lag.ms": 3_600_000}
    )
    try:
        _lag_shows(cluster, topic)
        wait_for(
            lambda: _scraped(metrics_export_port, "ray_rayqueue_iceberg_translation_lag_records", topic) == 7,
            timeout=60,
            interval=0.5,
            what="the lag gauge scraped from Ray's metrics agent",
        )
    finally:
        admin.delete_topic(topic)


def _scraped(port: int, name: str, topic: str) -> float | None:
    """The sum of ``name``'s samples for ``topic`` on the session Ray's metrics endpoint."""
    return metric_total(scrape(port), None, name, topic=topic)


def _lag_shows(cluster, topic: str) -> None:
    from typer.testing import CliRunner

    from rayqueue.cli import app
    from rayqueue.console.app import create_app
    from tests.rayqueue.test_console_api import ok, page_client

    producer = cluster.producer()
    for i in range(7):
        producer.send(topic, b"%d" % i)
    producer.flush(30)
    producer.close(10)
    wait_for(
        lambda: [t.lag_records for t in rqi.translation(topic, cluster)] == [7], timeout=60, what="a lag of 7 records"
    )
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    assert "Iceberg topics" in result.stdout, result.stdout
    row = next(line for line in result.stdout.splitlines() if topic in line)
    assert re.search(r"│\s+0\s+│\s+7\s+│", row), result.stdout  # partition 0, a lag of 7 records
    from rich.console import Console

    from rayqueue.cli import status_view
    from rayqueue.snapshot import take_snapshot

    frame = Console(width=200, record=True)
    frame.print(status_view(take_snapshot(cluster), {}))
    text = frame.export_text()
    assert "Iceberg topics" in text and topic in text  # rayqueue status --watch
    with page_client(create_app(cluster, sample_interval_s=0.3)) as client:
        detail = ok(client.get(f"/api/topics/{topic}"))
        assert detail["iceberg"]["lag_records"] == 7 and detail["partitions"][0]["iceberg"]["lag_records"] == 7
        listed = next(t for t in ok(client.get("/api/topics"))["topics"] if t["name"] == topic)
        assert listed["iceberg"]["lag_records"] == 7
