"""rayqueue.spark: topics as Spark DataFrames (RayDP), DataFrames into topics, streaming."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pytest

from rayqueue import TopicPartition
from rayqueue import spark as rq_spark
from rayqueue.cluster import Cluster
from rayqueue.errors import InvalidConfigError
from tests.helpers import wait_for
from tests.rayqueue.processes import REPO, Background

# Recent timestamps: time-based retention (7 days by default) would delete older records.
BASE_TS = (int(time.time()) - 3600) * 1000


def produce(cluster, topic: str, partitions: int, per_partition: int, compression: str = "none") -> dict:
    """Keyed records to each partition with timestamps BASE_TS + 10 * i; {(p, offset): (key, value, ts)}."""
    producer = cluster.producer(compression_type=compression)
    sent = []
    for p in range(partitions):
        keys = [f"user-{p}-{i % 11}".encode() if i % 4 else None for i in range(per_partition)]
        values = [f"p{p}-value-{i}".encode() * (1 + i % 3) for i in range(per_partition)]
        stamps = [BASE_TS + 10 * i for i in range(per_partition)]
        sent.append((keys, values, stamps, producer.send_many(topic, values, keys, partition=p, timestamps=stamps)))
    expected = {}
    for keys, values, stamps, result in sent:
        i = 0
        for tp, base_offset, count in result.get(60):
            for j in range(count):
                expected[(tp.partition, base_offset + j)] = (keys[i], values[i], stamps[i])
                i += 1
    producer.close()
    return expected


def rows_of(df) -> dict:
    """{(partition, offset): (key, value, ts_ms)}, with event times taken in the JVM (no Python time zone)."""
    from pyspark.sql import functions as F

    out = {}
    for row in df.select("key", "value", "partition", "offset", F.unix_millis("timestamp").alias("ms")).collect():
        key = (row["partition"], row["offset"])
        assert key not in out, f"record {key} read twice"
        out[key] = (bytes(row["key"]) if row["key"] is not None else None, bytes(row["value"]), row["ms"])
    return out


def wait_for_committed(cluster, group: str, source: str, total: int) -> None:
    """Until the group's committed offsets on ``source``'s two partitions sum to ``total``
    (a transactional commit's offsets count once its markers are in, as in Kafka)."""
    tps = [TopicPartition(source, p) for p in range(2)]
    wait_for(
        lambda: sum(rq_spark.load_offsets(group, tps, cluster=cluster).values()) == total,
        60,
        what="the committed offsets",
    )


def test_java_missing_gives_a_clear_error(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(rq_spark.shutil, "which", lambda name: None)
    with pytest.raises(rq_spark.JavaNotFoundError, match="Java"):
        rq_spark.session()


def _jars(tmp_path, *names: str) -> list[str]:
    paths = []
    for name in names:
        (tmp_path / name).write_bytes(b"PK")
        paths.append(str(tmp_path / name))
    return paths


def test_kafka_connector_jars_are_the_ones_spark_lacks(tmp_path, monkeypatch):
    import pyspark

    connector = f"spark-sql-kafka-0-10_2.12-{pyspark.__version__}.jar"
    resolved = _jars(
        tmp_path,
        connector,
        f"spark-token-provider-kafka-0-10_2.12-{pyspark.__version__}.jar",
        "hadoop-client-runtime-3.3.4.jar",
        "kafka-clients-3.4.1.jar",
        "snappy-java-1.1.8.4.jar",  # PySpark ships its own (newer) snappy: that one stays
        "commons-pool2-2.11.1.jar",
        "scala-library-2.12.18.jar",
    )
    wanted = [resolved[0], resolved[1], resolved[3], resolved[5]]
    assert rq_spark.kafka_connector_jars(resolved) == wanted
    assert rq_spark.kafka_connector_jars(":".join(resolved)) == wanted  # a classpath, as `make jvm` writes it
    monkeypatch.setenv(rq_spark.KAFKA_CONNECTOR_JARS_ENV, ":".join(resolved))
    assert rq_spark.kafka_connector_jars() == wanted


def test_kafka_connector_jars_refuse_what_does_not_fit(tmp_path, monkeypatch):
    with pytest.raises(rq_spark.KafkaConnectorNotFoundError, match="is for Spark 3.4.0"):
        rq_spark.kafka_connector_jars(_jars(tmp_path, "spark-sql-kafka-0-10_2.12-3.4.0.jar"))
    with pytest.raises(rq_spark.KafkaConnectorNotFoundError, match="names no spark-sql-kafka"):
        rq_spark.kafka_connector_jars(_jars(tmp_path, "kafka-clients-3.4.1.jar"))
    with pytest.raises(rq_spark.KafkaConnectorNotFoundError, match="do not exist"):
        rq_spark.kafka_connector_jars([str(tmp_path / "gone.jar")])
    monkeypatch.delenv(rq_spark.KAFKA_CONNECTOR_JARS_ENV, raising=False)
    monkeypatch.setattr(rq_spark, "CONNECTOR_CLASSPATH_FILE", tmp_path / "no.classpath")
    with pytest.raises(rq_spark.KafkaConnectorNotFoundError, match="make jvm"):
        rq_spark.kafka_connector_jars()


def test_kafka_options_point_spark_at_the_gateways():
    class Listening(Cluster):  # a cluster whose gateways are known, without Ray
        def __init__(self) -> None:
            pass

        bootstrap_servers = "127.0.0.1:39092,127.0.0.1:39093"

    options = rq_spark.kafka_options(
        Listening(), subscribe="t", startingOffsets={"t": {0: 5, "1": -2}}, includeHeaders=True, minPartitions=4
    )
    assert options == {
        "kafka.bootstrap.servers": "127.0.0.1:39092,127.0.0.1:39093",
        "subscribe": "t",
        "startingOffsets": '{"t": {"0": 5, "1": -2}}',
        "includeHeaders": "true",
        "minPartitions": "4",
    }

    class Silent(Cluster):  # a cluster without Kafka listeners
        def __init__(self) -> None:
            pass

        bootstrap_servers = ""

    with pytest.raises(InvalidConfigError, match="listeners"):
        rq_spark.kafka_options(Silent())


def test_read_via_the_connector_refuses_the_bridges_own_options():
    class Listening(Cluster):
        def __init__(self) -> None:
            pass

        bootstrap_servers = "127.0.0.1:39092"

    with pytest.raises(InvalidConfigError, match="max_records_per_task"):
        rq_spark.read(None, "t", cluster=Listening(), via="connector", max_records_per_task=10)
    with pytest.raises(InvalidConfigError, match="via"):
        rq_spark.read(None, "t", cluster=Listening(), via="jdbc")


def test_offsets_store_keeps_the_last_commit_per_group_and_partition(cluster):
    a, b = TopicPartition("orders", 0), TopicPartition("orders", 1)
    group = f"g-{time.monotonic_ns()}"
    assert rq_spark.load_offsets(group, [a, b], cluster=cluster) == {}
    rq_spark.commit_offsets(group, {a: 10, b: 3}, cluster=cluster)
    rq_spark.commit_offsets(group, {a: 25}, cluster=cluster)
    rq_spark.commit_offsets(f"{group}-other", {a: 99}, cluster=cluster)
    assert rq_spark.load_offsets(group, [a, b, TopicPartition("orders", 2)], cluster=cluster) == {a: 25, b: 3}
    assert rq_spark.load_offsets(f"{group}-other", [a, b], cluster=cluster) == {a: 99}


@pytest.mark.spark
def test_schema_is_the_kafka_source_schema(spark, cluster, new_topic):
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    # Spark's KafkaRecordToRowConverter.kafkaSchema and headersType, field for field.
    kafka = StructType(
        [
            StructField("key", BinaryType(), True),
            StructField("value", BinaryType(), True),
            StructField("topic", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("offset", LongType(), True),
            StructField("timestamp", TimestampType(), True),
            StructField("timestampType", IntegerType(), True),
        ]
    )
    headers = ArrayType(
        StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True
    )
    topic = new_topic(partitions=2)
    producer = cluster.producer()
    producer.send(topic, b"v1", key=b"k1", headers=[("trace", b"abc")], partition=0)
    producer.send(topic, b"v2", partition=1)
    producer.flush(30)
    df = rq_spark.read(spark, topic, cluster=cluster)
    assert df.schema == kafka
    with_headers = rq_spark.read(spark, topic, cluster=cluster, include_headers=True)
    assert with_headers.schema == StructType([*kafka.fields, StructField("headers", headers, True)])
    rows = sorted(with_headers.collect(), key=lambda r: r["partition"])
    assert [(r["topic"], r["partition"], r["offset"], r["timestampType"]) for r in rows] == [
        (topic, 0, 0, 0),
        (topic, 1, 0, 0),
    ]
    assert [(h["key"], bytes(h["value"])) for h in rows[0]["headers"]] == [("trace", b"abc")]
    assert rows[1]["headers"] == []
    # An empty range still has the schema.
    assert rq_spark.read(spark, topic, cluster=cluster, starting_offsets="latest").schema == kafka


@pytest.mark.spark
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_dataframe_equals_records_produced(spark, cluster, new_topic, codec):
    topic = new_topic(partitions=3)
    expected = produce(cluster, topic, 3, 400, compression=codec)
    df = rq_spark.read(spark, topic, cluster=cluster, max_records_per_task=150)
    assert df.count() == 1200
    assert rows_of(df) == expected


@pytest.mark.spark
def test_offset_and_timestamp_ranges_select_exactly(spark, cluster, new_topic):
    topic = new_topic(partitions=2)
    expected = produce(cluster, topic, 2, 300)
    df = rq_spark.read(
        spark,
        topic,
        cluster=cluster,
        starting_offsets=f'{{"{topic}": {{"0": 17, "1": -2}}}}',
        ending_offsets={topic: {"0": 233, "1": 5}},
    )
    assert rows_of(df) == {
        k: v for k, v in expected.items() if (k[0] == 0 and 17 <= k[1] < 233) or (k[0] == 1 and k[1] < 5)
    }
    df = rq_spark.read(
        spark, topic, cluster=cluster, starting_timestamp=BASE_TS + 1000, ending_timestamp=BASE_TS + 1055
    )
    assert rows_of(df) == {k: v for k, v in expected.items() if 100 <= k[1] < 106}
    # Event times do not depend on the session time zone.
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        assert rows_of(rq_spark.read(spark, topic, cluster=cluster, ending_offsets={topic: {"0": 3, "1": 0}})) == {
            k: v for k, v in expected.items() if k[0] == 0 and k[1] < 3
        }
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


@pytest.mark.spark
def test_round_trip_dataframe_topic_dataframe(spark, cluster, new_topic):
    from pyspark.sql import functions as F

    source = spark.range(0, 3000).select(
        F.concat(F.lit("user-"), (F.col("id") % 37).cast("string")).alias("key"),
        F.concat(F.lit("event-"), F.col("id").cast("string")).cast("binary").alias("value"),
        (F.col("id") % 4).cast("int").alias("partition"),
        F.col("id").alias("ignored"),
    )
    topic = new_topic(partitions=4)
    assert rq_spark.write(source, topic, cluster=cluster) == 3000
    back = rq_spark.read(spark, topic, cluster=cluster)
    got = sorted((bytes(r["key"]).decode(), bytes(r["value"]), r["partition"]) for r in back.collect())
    want = sorted((r["key"], bytes(r["value"]), r["partition"]) for r in source.collect())
    assert got == want
    # Read back and written again (timestamps kept), the copy equals the original.
    copy = new_topic(partitions=4)
    assert rq_spark.write(back, copy, cluster=cluster) == 3000

    def content(df) -> list:
        return sorted((p, *v) for (p, _), v in rows_of(df).items())

    assert content(rq_spark.read(spark, copy, cluster=cluster)) == content(back)
    with pytest.raises(InvalidConfigError):
        rq_spark.write(source.select("key"), topic, cluster=cluster)


@pytest.mark.spark
def test_stream_resumes_after_stop_without_loss(spark, cluster, new_topic):
    from pyspark.sql import functions as F

    source, sink = new_topic(partitions=2), new_topic(partitions=1)
    group = f"stream-{source}"
    producer = cluster.producer()

    def send(start: int, stop: int) -> None:
        producer.send_many(
            source, [f"e{i}".encode() for i in range(start, stop)], [f"k{i % 5}".encode() for i in range(start, stop)]
        ).get(30)

    def transform(df):
        return df.select("key", F.upper(F.col("value").cast("string")).alias("value"))

    def sink_values() -> list[str]:
        return [bytes(r["value"]).decode() for r in rq_spark.read(spark, sink, cluster=cluster).collect()]

    send(0, 400)
    handle = rq_spark.stream(spark, source, group, transform, sink, cluster=cluster, trigger_interval=0.2)
    assert handle.await_batches(1, timeout=120)
    handle.stop()
    assert not handle.active
    assert sorted(sink_values()) == sorted(f"E{i}" for i in range(400))

    # Records produced while the stream is down are picked up from the committed offsets.
    send(400, 700)
    # The last batch's offsets are the group's once its commit's markers are in (they follow
    # the commit's answer, as in Kafka).
    wait_for_committed(cluster, group, source, 400)
    # The progress is the group's committed offsets in __consumer_offsets, lag and all.
    assert sum(info.lag for info in cluster.admin().group_lag(group).values()) == 300
    handle = rq_spark.stream(spark, source, group, transform, sink, cluster=cluster, until_idle=True, background=False)
    assert handle.rows_written == 300 and not handle.active
    assert sorted(sink_values()) == sorted(f"E{i}" for i in range(700))  # each once: nothing lost or repeated

    # A background stream keeps up with new data, batch after batch, and stops cleanly.
    handle = rq_spark.stream(spark, source, group, transform, sink, cluster=cluster, trigger_interval=0.1)
    send(700, 750)
    wait_for(lambda: handle.rows_written >= 50, timeout=120, what="the first 50 new records")
    send(750, 800)
    wait_for(lambda: handle.rows_written >= 100, timeout=120, what="the next 50 records")
    assert handle.batches >= 2
    handle.stop()
    assert sorted(sink_values()) == sorted(f"E{i}" for i in range(800))


@pytest.mark.spark
def test_stream_cut_off_before_its_commit_writes_each_record_once(spark, cluster, new_topic, monkeypatch):
    """A stream that dies after writing a batch but before committing it leaves an open
    transaction (nothing aborts it: the process is gone). The next stream of the group
    fences it, which aborts that transaction, and writes the batch again: read_committed
    readers see every record once, read_uncommitted ones see the aborted copy too."""
    from rayqueue.producer import Producer

    source, sink = new_topic(partitions=2), new_topic(partitions=1)
    group = f"stream-{source}"
    producer = cluster.producer()
    producer.send_many(source, [f"e{i}".encode() for i in range(300)]).get(30)
    producer.close()

    def transform(df):
        return df.select("key", "value")

    def sink_values(isolation_level: str) -> list[bytes]:
        df = rq_spark.read(spark, sink, cluster=cluster, isolation_level=isolation_level)
        return [bytes(r["value"]) for r in df.collect()]

    def killed(self):  # the process dies between the write and the commit
        raise RuntimeError("killed before the commit")

    with monkeypatch.context() as m:
        m.setattr(Producer, "commit_transaction", killed)
        m.setattr(Producer, "abort_transaction", lambda self: None)
        with pytest.raises(RuntimeError, match="killed before the commit"):
            rq_spark.stream(spark, source, group, transform, sink, cluster=cluster, until_idle=True, background=False)
    assert rq_spark.load_offsets(group, [TopicPartition(source, p) for p in range(2)], cluster=cluster) == {}

    handle = rq_spark.stream(spark, source, group, transform, sink, cluster=cluster, until_idle=True, background=False)
    assert handle.rows_written == 300
    # The offsets are the group's once the commit's markers are in (the sink's marker too).
    wait_for_committed(cluster, group, source, 300)
    expected = sorted(f"e{i}".encode() for i in range(300))
    assert sorted(sink_values("read_committed")) == expected
    assert sorted(sink_values("read_uncommitted")) == sorted(expected * 2)


# A process of its own: the session's Ray runs on the machine's address, and a process holds
# one Ray. `rayqueue.launch` on loopback listeners starts its Ray on 127.0.0.1 only.
LOOPBACK_SPARK_READ = textwrap.dedent(
    """
    import json, sys
    import ray
    import rayqueue
    from rayqueue import spark as rq_spark

    cluster = rayqueue.launch(
        log_dirs=sys.argv[1], listeners="PLAINTEXT://127.0.0.1:0", rayqueue_num_brokers=1,
        offsets_topic_num_partitions=1, transaction_state_log_num_partitions=1,
    )
    try:
        cluster.admin().create_topic("loopback", 2)
        producer = cluster.producer()
        producer.send_many("loopback", [b"v%d" % i for i in range(2000)]).get(60)
        producer.close()
        spark = rq_spark.session("loopback-read", num_executors=1, executor_cores=1, executor_memory="1G")
        print("SPARK UP", flush=True)
        try:
            values = [bytes(r["value"]) for r in rq_spark.read(spark, "loopback", cluster=cluster).collect()]
        finally:
            rq_spark.stop()
        node = ray.util.get_node_ip_address()
        gcs = ray.get_runtime_context().gcs_address
        print("RESULT " + json.dumps({"node": node, "gcs": gcs, "values": sorted(v.decode() for v in values)}), flush=True)
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
    """
)


@pytest.mark.spark
def test_bridge_read_on_a_loopback_only_embedded_ray(tmp_path):
    """`rayqueue.launch` on loopback listeners runs its own Ray on 127.0.0.1 only, and a Spark
    bridge read on it returns every record. RayDP's conversion joins Ray by its address
    (127.0.0.1:<port>) from Spark's Python workers, which the executor (a Ray actor) starts;
    Ray sends such a process to the machine's outward address unless it runs in Ray's
    single-machine mode, and the read then stalls for ever."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    env["RAY_AUTH_MODE"] = "disabled"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    child = Background([sys.executable, "-c", LOOPBACK_SPARK_READ, str(tmp_path / "data")], env, tmp_path / "child.log")
    try:
        # Start-up (a cluster, Spark) is slow on a busy 2-core machine; the read of 2,000
        # records takes seconds once Spark is up, and without the fix never ends.
        child.wait_for("SPARK UP", 600)
        child.wait_for("RESULT ", 300)
        code = child.proc.wait(180)  # the cluster, Spark and Ray shut down
    finally:
        child.stop()
    output = child.output()
    result = json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
    assert result["node"] == "127.0.0.1" and result["gcs"].startswith("127.0.0.1:"), result
    assert result["values"] == sorted(f"v{i}" for i in range(2000))
    assert code == 0, output
