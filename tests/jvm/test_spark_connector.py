"""Spark's own Kafka connector (spark-sql-kafka-0-10 3.5.7, the pinned PySpark's) against rayqueue.

The connector's jars (the ``spark-kafka`` set of ``pins.toml``) are on the session's
``spark.jars`` (``rayqueue.spark.session(kafka_connector=...)``), so the driver plans with
them and RayDP's executors, separate JVMs, fetch them from the driver and run the reads and
writes. Spark's Kafka source and sink then talk to the brokers' gateways: batch reads by
offset range (per-partition JSON, earliest/latest), a batch write, and a streaming query
from topic to topic that is stopped and restarted from its checkpoint. What they read equals
what ``rayqueue.spark.read`` (the RayDP bridge) returns for the same topic and range.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from rayqueue import spark as rq_spark
from tests.jvm.records import read_topic

pytestmark = pytest.mark.spark

BASE_TS = (int(time.time()) - 3600) * 1000  # recent: time-based retention keeps them


@pytest.fixture(scope="module")
def kspark(spark, spark_kafka_jars):
    """The session's Spark, with Spark's Kafka connector on it (skipped without its jars;
    failed under CI, where ``make jvm`` must have resolved them)."""
    if not isinstance(spark_kafka_jars, list):
        if os.environ.get("CI"):
            pytest.fail(f"Spark's Kafka connector is unavailable under CI: {spark_kafka_jars}")
        pytest.skip(f"Spark's Kafka connector is unavailable: {spark_kafka_jars}")
    return spark


def produce(cluster, topic: str, partitions: int, per_partition: int) -> None:
    """Keyed (and some null-keyed) records with headers and set timestamps, to every partition."""
    producer = cluster.producer()
    for p in range(partitions):
        for i in range(per_partition):
            key = f"user-{p}-{i % 7}".encode() if i % 5 else None
            headers = [("trace", f"t{i}".encode()), ("empty", None)] if i % 3 == 0 else []
            producer.send(topic, f"p{p}-v{i}".encode() * (1 + i % 3), key=key, headers=headers, partition=p,
                          timestamp=BASE_TS + 10 * i)  # fmt: skip
    producer.flush(60)
    producer.close()


def rows(df) -> list[tuple]:
    """Every column of Spark's Kafka source schema (headers when read), as (partition, offset,
    key, value, topic, timestamp in epoch ms taken in the JVM, timestampType[, headers]), sorted."""
    from pyspark.sql import functions as F

    cols = ["key", "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ms"), "timestampType"]
    if "headers" in df.columns:
        cols.append("headers")
    out = []
    for r in df.select(*cols).collect():
        key = None if r["key"] is None else bytes(r["key"])
        row = (r["partition"], r["offset"], key, bytes(r["value"]), r["topic"], r["ms"], r["timestampType"])
        if "headers" in df.columns:
            row += (tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or ()),)
        out.append(row)
    return sorted(out)


def connector_read(spark, cluster, topic: str, **options):
    return spark.read.format("kafka").options(**rq_spark.kafka_options(cluster, subscribe=topic, **options)).load()


def test_the_connector_jars_reach_driver_and_executors(kspark, spark_kafka_jars):
    names = {os.path.basename(j) for j in spark_kafka_jars}
    assert "spark-sql-kafka-0-10_2.12-3.5.7.jar" in names
    assert any(n.startswith("kafka-clients-") for n in names)
    # Not Spark's own jars again (Hadoop client, Scala, ...): those come from PySpark.
    assert not any(n.startswith(("scala-library", "hadoop-client", "slf4j")) for n in names)
    # Added to the SparkContext: served by the driver to the executors, which run the reads.
    served = {os.path.basename(j) for j in kspark.sparkContext._jsc.sc().listJars().mkString("\n").split("\n")}
    assert names <= served, served


def test_batch_reads_equal_the_bridge(kspark, cluster, new_topic):
    topic = new_topic(partitions=3)
    produce(cluster, topic, 3, 300)

    everything = rows(connector_read(kspark, cluster, topic, includeHeaders=True))
    assert len(everything) == 900
    assert everything == rows(rq_spark.read(kspark, topic, cluster=cluster, include_headers=True))
    assert {r[7] for r in everything} >= {(("trace", b"t0"), ("empty", None))}

    # Per-partition JSON offsets (-2 earliest, -1 latest), as Spark's startingOffsets/endingOffsets take them.
    start, end = {topic: {"0": 17, "1": -2, "2": 120}}, {topic: {"0": 233, "1": 5, "2": -1}}
    ranged = rows(connector_read(kspark, cluster, topic, startingOffsets=json.dumps(start), endingOffsets=end))
    want = [r for r in everything if (r[0], r[1]) in _in_ranges({0: (17, 233), 1: (0, 5), 2: (120, 300)})]
    assert [r[:7] for r in want] == ranged
    assert ranged == rows(rq_spark.read(kspark, topic, cluster=cluster, starting_offsets=start, ending_offsets=end))
    # The same through rayqueue.spark.read(via="connector"), rayqueue's names for the options.
    via = rq_spark.read(kspark, topic, cluster=cluster, via="connector", starting_offsets=start, ending_offsets=end)
    assert rows(via) == ranged

    # earliest..latest explicitly, and a range by timestamps.
    explicit = connector_read(kspark, cluster, topic, startingOffsets="earliest", endingOffsets="latest")
    assert rows(explicit) == [r[:7] for r in everything]
    by_time = rq_spark.read(
        kspark, topic, cluster=cluster, via="connector", starting_timestamp=BASE_TS + 1000,
        ending_timestamp=BASE_TS + 1500,
    )  # fmt: skip
    assert rows(by_time) == [r[:7] for r in everything if 100 <= r[1] < 150]


def _in_ranges(ranges: dict[int, tuple[int, int]]) -> set[tuple[int, int]]:
    return {(p, o) for p, (lo, hi) in ranges.items() for o in range(lo, hi)}


def test_dataframe_write_lands_as_written(kspark, cluster, new_topic):
    from pyspark.sql import functions as F

    topic = new_topic(partitions=4)
    source = kspark.range(0, 2000).select(
        F.concat(F.lit("k"), (F.col("id") % 50).cast("string")).alias("key"),
        F.concat(F.lit("event-"), F.col("id").cast("string")).cast("binary").alias("value"),
        (F.col("id") % 4).cast("int").alias("partition"),
        F.array(F.struct(F.lit("n").alias("key"), F.col("id").cast("string").cast("binary").alias("value"))).alias(
            "headers"
        ),
    )
    source.write.format("kafka").options(**rq_spark.kafka_options(cluster, topic=topic)).save()

    got = read_topic(cluster, topic, "read_uncommitted")
    assert sorted((r.key.decode(), r.value, r.partition, r.headers) for r in got) == sorted(
        (f"k{i % 50}", f"event-{i}".encode(), i % 4, (("n", str(i).encode()),)) for i in range(2000)
    )
    # Each partition holds its records in the order Spark wrote them (offsets 0..n-1).
    for p in range(4):
        assert [r.offset for r in got if r.partition == p] == list(range(500))
    assert rows(connector_read(kspark, cluster, topic)) == rows(rq_spark.read(kspark, topic, cluster=cluster))


def test_stream_to_topic_stopped_and_restarted_from_its_checkpoint(kspark, cluster, new_topic, tmp_path):
    """A readStream -> writeStream query with a checkpoint, stopped between micro-batches and
    restarted while the input keeps coming: the output holds every input record once.

    Spark's Kafka sink is at-least-once (a query stopped inside a batch writes that batch
    again on restart), so the query is stopped after ``processAllAvailable()``: a batch
    boundary, where Spark's own guarantee is that nothing is lost or repeated.
    """
    source, sink = new_topic(partitions=2), new_topic(partitions=2)
    checkpoint = str(tmp_path / "checkpoint")
    producer = cluster.producer()
    sent: list[tuple[bytes, bytes]] = []

    def send(first: int, last: int) -> None:
        batch = [(f"k{i % 9}".encode(), f"e{i}".encode()) for i in range(first, last)]
        producer.send_many(source, [v for _, v in batch], [k for k, _ in batch]).get(60)
        sent.extend(batch)

    def start():
        stream = (
            kspark.readStream.format("kafka")
            .options(**rq_spark.kafka_options(cluster, subscribe=source, startingOffsets="earliest"))
            .option("maxOffsetsPerTrigger", 150)  # several micro-batches per run
            .load()
            .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
        )
        return (
            stream.writeStream.format("kafka")
            .options(**rq_spark.kafka_options(cluster, topic=sink))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    send(0, 300)
    query = start()
    try:
        send(300, 500)  # while it runs
        query.processAllAvailable()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert len(batches) >= 3 and sum(p["numInputRows"] for p in batches) == 500
    finally:
        query.stop()
    send(500, 800)  # while it is stopped
    query = start()
    try:
        send(800, 900)
        query.processAllAvailable()
    finally:
        query.stop()
    producer.close()

    out = read_topic(cluster, sink, "read_uncommitted")
    assert len(out) == 900
    assert sorted((r.key, r.value) for r in out) == sorted((k, v.upper()) for k, v in sent)
    assert rows(connector_read(kspark, cluster, sink)) == rows(rq_spark.read(kspark, sink, cluster=cluster))
