"""Spark reads Iceberg topics through Iceberg's own Spark runtime (the session's Spark, with the
pinned ``iceberg-spark-runtime-3.5_2.12``): read_table and Spark SQL over it read what pyiceberg
reads, at the table's latest snapshot."""

from __future__ import annotations

import pytest

import rayqueue.iceberg as rqi
from rayqueue import spark as rq_spark

KV = {"rayqueue_iceberg_mode": "key_value", "rayqueue_iceberg_target_lag_ms": 200}


def test_iceberg_runtime_jars_refuse_what_does_not_fit(tmp_path, monkeypatch):
    monkeypatch.delenv(rq_spark.ICEBERG_JARS_ENV, raising=False)
    runtime = tmp_path / "iceberg-spark-runtime-3.4_2.12-1.10.0.jar"
    sqlite = tmp_path / "sqlite-jdbc-3.54.1.0.jar"
    for jar in (runtime, sqlite):
        jar.write_bytes(b"")
    with pytest.raises(rq_spark.IcebergRuntimeNotFoundError, match="not for Spark 3.5"):
        rq_spark.iceberg_runtime_jars([str(runtime), str(sqlite)])
    with pytest.raises(rq_spark.IcebergRuntimeNotFoundError, match="no iceberg-spark-runtime"):
        rq_spark.iceberg_runtime_jars([str(sqlite)])
    with pytest.raises(rq_spark.IcebergRuntimeNotFoundError, match="do not exist"):
        rq_spark.iceberg_runtime_jars([str(tmp_path / "nope.jar")])
    right = tmp_path / "iceberg-spark-runtime-3.5_2.12-1.10.0.jar"
    right.write_bytes(b"")
    assert rq_spark.iceberg_runtime_jars(str(right)) == [str(right)]


@pytest.mark.spark
def test_spark_reads_what_pyiceberg_reads(spark, spark_iceberg_jars, cluster, new_topic):
    if not isinstance(spark_iceberg_jars, list):
        pytest.skip(f"Iceberg's Spark runtime is not available: {spark_iceberg_jars}")
    topic = new_topic(partitions=2, **KV)
    producer = cluster.producer(linger_ms=5)
    for i in range(40):
        producer.send(topic, b"v%d" % i, key=b"k%d" % i, headers=[("h", b"x")], partition=i % 2)
    producer.flush(30)
    producer.close(10)
    rqi.wait_translated(topic, cluster, timeout_s=120)
    want = sorted(
        (r["rayqueue"]["partition"], r["rayqueue"]["offset"], r["key"], r["value"])
        for r in rqi.to_arrow(topic, cluster).to_pylist()
    )
    df = rq_spark.read_table(spark, topic, cluster=cluster)
    got = sorted((r.rayqueue.partition, r.rayqueue.offset, bytes(r.key), bytes(r.value)) for r in df.collect())
    assert got == want and len(got) == 40
    df.createOrReplaceTempView("iceberg_topic")
    counts = spark.sql(
        "SELECT rayqueue.partition AS p, count(*) AS n, max(rayqueue.offset) AS last "
        "FROM iceberg_topic GROUP BY rayqueue.partition ORDER BY p"
    ).collect()
    assert [(r.p, r.n, r.last) for r in counts] == [(0, 20, 19), (1, 20, 19)]
    # A later snapshot shows in the next read_table.
    producer = cluster.producer()
    producer.send(topic, b"later", partition=0)
    producer.flush(30)
    producer.close(10)
    rqi.wait_translated(topic, cluster, timeout_s=120)
    assert rq_spark.read_table(spark, topic, cluster=cluster).count() == 41
