"""Iceberg topics on an Iceberg REST catalog: Iceberg's own REST catalog server
(``RESTCatalogServer``, from Maven Central: ``tests/jvm/iceberg_rest.py``) in one JVM for the
module, its warehouse a bucket on moto's S3 server (started here, a real HTTP endpoint), and a
cluster of its own whose leaders write through it (``rayqueue.iceberg.catalog.type=rest``, an OAuth2 client credential exchanged at the
server's token endpoint). The table read back through pyiceberg's REST catalog, DuckDB and
Spark's ``SparkCatalog`` (``type=rest``) equals the topic; the catalog killed mid-translation
pauses the translation (an error in ``rayqueue status`` and the metrics, the partitions' data
path untouched) and, restarted, it resumes with every record once; leaders killed
mid-translation leave every record once too."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading

import pytest
from rich.console import Console

import rayqueue
import rayqueue.iceberg as rqi
from actors.types import TopicPartition
from rayqueue.cli.cluster import iceberg_table
from tests.helpers import SMALL_INTERNAL_TOPICS, wait_for
from tests.jvm import maven
from tests.jvm.iceberg_rest import IcebergRestServer, S3Warehouse, free_port
from tests.rayqueue.test_iceberg import _scraped
from tests.rayqueue.test_iceberg_failover import assert_table_equals_topic, produce_while_killing_leaders

moto_server = pytest.importorskip("moto.server")

CLIENT_ID = "rayqueue-brokers"
BUCKET = "rayqueue-rest-warehouse"
KV = {"rayqueue.iceberg.mode": "key_value", "rayqueue.iceberg.target.lag.ms": 200}


@pytest.fixture(scope="module")
def rest_s3():
    """moto's S3 server on a free port, with the warehouse's bucket: (warehouse, boto3 client)."""
    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    warehouse = S3Warehouse(endpoint=f"http://{host}:{port}", bucket=BUCKET)
    client = boto3.client(
        "s3",
        endpoint_url=warehouse.endpoint,
        aws_access_key_id=warehouse.access_key_id,
        aws_secret_access_key=warehouse.secret_access_key,
        region_name=warehouse.region,
    )
    client.create_bucket(Bucket=BUCKET)
    yield warehouse, client
    server.stop()


@pytest.fixture(scope="module")
def rest_classpath() -> str:
    """The REST catalog server's classpath (the pinned ``iceberg-rest`` set); the test skips
    without Java or Maven (fails under CI)."""
    try:
        return maven.classpath("iceberg-rest")
    except maven.JvmUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the Iceberg REST catalog server is unavailable under CI: {exc}")
        pytest.skip(f"the Iceberg REST catalog server is unavailable: {exc}")


@pytest.fixture(scope="module")
def rest_server(tmp_path_factory, rest_classpath, rest_s3):
    """Iceberg's REST catalog server on a free port (a JVM for the whole module), its
    warehouse in moto's S3."""
    server = IcebergRestServer(rest_classpath, tmp_path_factory.mktemp("iceberg-rest"), s3=rest_s3[0]).start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def rest_cluster(ray_session, rest_server):
    """Three brokers whose Iceberg topics' tables live in the REST catalog (the warehouse the
    server's, on S3: the brokers write data files there with the s3 keys), translated in steps
    of at most 64 KB (many commits: a kill lands mid-step)."""
    s3 = rest_server.s3
    root = tempfile.mkdtemp(prefix="rayqueue-iceberg-rest-")
    cluster = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace="iceberg-rest",
        rayqueue_iceberg_catalog_type="rest",
        rayqueue_iceberg_catalog_uri=rest_server.uri,
        rayqueue_iceberg_catalog_credential=f"{CLIENT_ID}:not-a-real-secret",
        rayqueue_iceberg_catalog_oauth2_server_uri=f"{rest_server.uri}/v1/oauth/tokens",
        rayqueue_iceberg_catalog_request_timeout_ms=5000,
        rayqueue_iceberg_s3_endpoint=s3.endpoint,
        rayqueue_iceberg_s3_access_key_id=s3.access_key_id,
        rayqueue_iceberg_s3_secret_access_key=s3.secret_access_key,
        rayqueue_iceberg_translation_max_bytes=64 * 1024,
        **SMALL_INTERNAL_TOPICS,
    )
    yield cluster
    cluster.shutdown(delete_data=True)
    shutil.rmtree(root, ignore_errors=True)


def produce(cluster, topic: str, count: int, partitions: int) -> None:
    producer = cluster.producer(linger_ms=5)
    for i in range(count):
        producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7), headers=[("n", b"%d" % i)], partition=i % partitions)
    producer.flush(30)
    producer.close(10)


def until_reported(cluster, topic: str, predicate, what: str, timeout: float = 120) -> list:
    """Wait until ``predicate`` holds of the leaders' translation report; the last report is
    in the failure."""
    seen: list = []

    def check() -> bool:
        seen[:] = [rqi.translation(topic, cluster)]
        return bool(seen[0]) and predicate(seen[0])

    try:
        wait_for(check, timeout=timeout, interval=0.2, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last report: {seen}") from None
    return seen[0]


def test_a_topic_on_the_rest_catalog_is_a_table(rest_cluster, rest_server, rest_s3):
    cluster, topic = rest_cluster, "rest-orders"
    cluster.admin().create_topic(topic, 2, 1, configs=KV)
    produce(cluster, topic, 60, 2)
    rqi.wait_translated(topic, cluster, timeout_s=120)
    # The server's own answer lists the table; its metadata and data files are in the
    # server's warehouse, the S3 bucket.
    assert "rest-orders" in rest_server.tables("rayqueue")
    table = rqi.table(topic, cluster)
    assert table.metadata_location.startswith(f"{rest_server.warehouse}/rayqueue/rest-orders")
    listed = rest_s3[1].list_objects_v2(Bucket=BUCKET, Prefix="rest/rayqueue/rest-orders/")["Contents"]
    keys = [o["Key"] for o in listed]
    assert any(k.endswith(".parquet") for k in keys) and any(k.endswith(".metadata.json") for k in keys)
    # pyiceberg's own REST catalog (load_catalog, as any pyiceberg program opens it) reads the topic.
    from pyiceberg.catalog import load_catalog

    kwargs = rqi.catalog_kwargs(cluster)
    assert kwargs["type"] == "rest" and kwargs["uri"] == rest_server.uri
    reader = load_catalog(**kwargs).load_table(("rayqueue", "rest-orders"))
    rows = reader.scan().to_arrow().to_pylist()
    got = sorted(
        (
            r["rayqueue"]["partition"],
            r["rayqueue"]["offset"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"]],
        )
        for r in rows
    )
    consumer = cluster.consumer(enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(2)]
    consumer.assign(tps)
    consumer.seek_to_beginning(tps)
    records: list = []
    wait_for(
        lambda: records.extend(consumer.poll(200)) or len(records) >= 60, timeout=60, interval=0, what="60 records"
    )
    consumer.close()
    want = sorted((r.partition, r.offset, r.key, r.value, [(k, v) for k, v in r.headers]) for r in records)
    assert got == want and len(got) == 60
    # DuckDB over the same table's files.
    duck = rqi.duckdb(topic, cluster=cluster).query("t", "SELECT count(*), count(DISTINCT value) FROM t").fetchall()
    assert duck == [(60, 60)]
    # The brokers' client exchanged its credential at the server's token endpoint: the server
    # answers client credentials with a token naming the client.
    assert rqi.catalog(cluster)._auth_manager.auth_header() == f"Bearer client-credentials-token:sub={CLIENT_ID}"


@pytest.mark.spark
def test_spark_reads_through_the_rest_catalog(rest_cluster, spark, spark_iceberg_jars):
    """Spark's own REST client (Iceberg's SparkCatalog, type=rest) finds the table in the
    catalog and reads what pyiceberg reads; read_table (the metadata file) agrees."""
    if not isinstance(spark_iceberg_jars, list):
        pytest.skip(f"Iceberg's Spark runtime is not available: {spark_iceberg_jars}")
    from rayqueue import spark as rq_spark

    cluster, topic = rest_cluster, "rest_spark"
    cluster.admin().create_topic(topic, 2, 1, configs=KV)
    produce(cluster, topic, 40, 2)
    rqi.wait_translated(topic, cluster, timeout_s=120)
    want = sorted(
        (r["rayqueue"]["partition"], r["rayqueue"]["offset"], r["value"])
        for r in rqi.to_arrow(topic, cluster).to_pylist()
    )
    name = rq_spark.iceberg_catalog(spark, cluster)
    df = spark.table(f"{name}.rayqueue.rest_spark")
    assert sorted((r.rayqueue.partition, r.rayqueue.offset, bytes(r.value)) for r in df.collect()) == want
    counts = spark.sql(
        f"SELECT rayqueue.partition AS p, count(*) AS n FROM {name}.rayqueue.rest_spark GROUP BY 1 ORDER BY 1"
    ).collect()
    assert [(r.p, r.n) for r in counts] == [(0, 20), (1, 20)]
    assert rq_spark.read_table(spark, topic, cluster=cluster).count() == 40


def test_the_catalog_killed_mid_translation(rest_cluster, rest_server, metrics_export_port):
    """The REST server SIGKILLed while the leaders translate: produce and fetch go on, each
    leader reports the catalog's error (``rqi.translation``, ``rayqueue status``, the error
    counter) and its lag grows; restarted (same port, catalog file and warehouse), the
    translation resumes and the table holds every committed record once."""
    cluster, topic = rest_cluster, "rest-outage"
    cluster.admin().create_topic(topic, 2, 1, configs=KV)
    stop, errors, sent = threading.Event(), [], [0]

    def keep_producing() -> None:
        producer = cluster.producer(acks="all", linger_ms=5)
        try:
            while not stop.is_set():
                producer.send(topic, b"outage-%06d" % sent[0] + b"." * 100, partition=sent[0] % 2)
                sent[0] += 1
                if sent[0] % 50 == 0:
                    producer.flush(60)
                    stop.wait(0.05)  # a steady stream (about 1,000 records/s at most), not a flood
            producer.flush(60)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            producer.close(30)

    producing = threading.Thread(target=keep_producing)
    producing.start()
    try:
        wait_for(
            lambda: sum(t.translated_records for t in rqi.translation(topic, cluster)) > 0 and sent[0] > 300,
            timeout=120,
            what="the translation under way",
        )
        rest_server.kill()
        # Every leader's next step fails on the catalog, named by its URL; the records wait.
        until_reported(
            cluster,
            topic,
            lambda report: all(t.error and rest_server.uri in t.error and t.failed_steps > 0 for t in report),
            "each partition's translation error",
        )
        lag = sum(t.lag_records for t in rqi.translation(topic, cluster))
        wait_for(
            lambda: sum(t.lag_records for t in rqi.translation(topic, cluster)) > lag,
            timeout=60,
            what="the lag growing while the catalog is down",
        )
        # The data path does not depend on the catalog: a record produced now is fetched.
        producer = cluster.producer(acks="all")
        marker = producer.send(topic, b"while the catalog is down", partition=1).get(30)
        producer.close(10)
        consumer = cluster.consumer(enable_auto_commit=False)
        consumer.assign([TopicPartition(topic, 1)])
        consumer.seek(TopicPartition(topic, 1), marker.offset)
        fetched = wait_for(lambda: consumer.poll(500), timeout=30, interval=0, what="the marker fetched")
        consumer.close()
        assert next(iter(fetched)).value == b"while the catalog is down"
        # The failed steps are counted in the metrics (scraped from Ray's metrics agent).
        wait_for(
            lambda: (_scraped(metrics_export_port, "ray_rayqueue_iceberg_translation_errors_total", topic) or 0) > 0,
            timeout=60,
            interval=0.5,
            what="the translation error counter scraped",
        )
    finally:
        if not rest_server.answers():
            rest_server.start()  # the same port, catalog file and warehouse
        stop.set()
        producing.join(120)
    assert not errors and sent[0] > 0, errors
    # Back, the catalog takes the leaders' next steps: the errors clear and the lag drains.
    until_reported(
        cluster,
        topic,
        lambda report: all(t.error is None and t.lag_records == 0 for t in report),
        "the translation caught up after the catalog came back",
        timeout=240,
    )
    assert_table_equals_topic(cluster, topic, 2)


def test_the_table_equals_the_topic_after_leaders_are_killed_mid_translation(rest_cluster):
    cluster, topic = rest_cluster, "rest-failover"
    cluster.admin().create_topic(topic, 3, 3, configs=KV)
    produce_while_killing_leaders(cluster, topic, 3, kills=2, seed=45)
    assert_table_equals_topic(cluster, topic, 3)


def test_the_catalog_unreachable_at_launch(ray_session, rest_classpath, rest_s3, tmp_path):
    """A cluster launched while nothing answers at its REST catalog's URL starts and serves
    its topics; the leaders' translation fails, naming the URL (``rqi.translation`` and the
    status table), and its lag grows; once a catalog answers there, every record is translated."""
    warehouse, _ = rest_s3
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    root = tempfile.mkdtemp(prefix="rayqueue-iceberg-rest-down-")
    cluster = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace="iceberg-rest-down",
        rayqueue_num_brokers=1,
        rayqueue_iceberg_catalog_type="rest",
        rayqueue_iceberg_catalog_uri=uri,
        rayqueue_iceberg_catalog_request_timeout_ms=2000,
        rayqueue_iceberg_s3_endpoint=warehouse.endpoint,
        rayqueue_iceberg_s3_access_key_id=warehouse.access_key_id,
        rayqueue_iceberg_s3_secret_access_key=warehouse.secret_access_key,
        **SMALL_INTERNAL_TOPICS,
    )
    server = None
    try:
        topic = "down-at-launch"
        cluster.admin().create_topic(topic, 1, 1, configs=KV)
        produce(cluster, topic, 30, 1)
        report = until_reported(
            cluster,
            topic,
            lambda r: all(t.error and uri in t.error and t.failed_steps > 0 and t.lag_records >= 30 for t in r),
            "the translation failing on the unreachable catalog",
        )
        console = Console(record=True, width=400)
        console.print(iceberg_table(report))
        assert uri in console.export_text()
        produce(cluster, topic, 30, 1)
        until_reported(cluster, topic, lambda r: all(t.lag_records >= 60 for t in r), "the lag growing")
        # A catalog comes up at the URL (its warehouse another prefix of the same bucket).
        server = IcebergRestServer(
            rest_classpath,
            tmp_path / "late-catalog",
            port=port,
            s3=S3Warehouse(endpoint=warehouse.endpoint, bucket=BUCKET, prefix="late"),
        ).start()
        until_reported(
            cluster,
            topic,
            lambda r: all(t.error is None and t.lag_records == 0 for t in r),
            "the translation caught up once the catalog answers",
            timeout=180,
        )
        assert_table_equals_topic(cluster, topic, 1)
        assert rqi.table(topic, cluster).metadata_location.startswith(f"s3://{BUCKET}/late/")
    finally:
        if server is not None:
            server.kill()
        cluster.shutdown(delete_data=True)
        shutil.rmtree(root, ignore_errors=True)
