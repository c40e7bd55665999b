"""Iceberg topics on a cluster of their own, its warehouse on S3 (moto's S3 server, started
here, a real HTTP endpoint): leaders are killed while they translate and the table still holds
every committed record once; value_schema_id_prefix with the cluster's own schema registry and
confluent-kafka's Avro serializer, its hostile records in the dead-letter table."""

from __future__ import annotations

import logging
import random
import threading

import pytest

import rayqueue.iceberg as rqi
from storage.errors import UnknownTopicOrPartitionError
from tests.helpers import kill_broker, own_cluster, read_committed_to_end, wait_for

moto_server = pytest.importorskip("moto.server")
BUCKET = "rayqueue-warehouse"


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on a free port, with the warehouse's bucket."""
    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client
    server.stop()


@pytest.fixture(scope="module")
def s3_cluster(ray_session, s3):
    """Three brokers, a schema registry, Kafka listeners; Iceberg tables on S3, translated in
    steps of at most 16 KB (many commits: a kill lands mid-step)."""
    endpoint, _ = s3
    with own_cluster(
        "iceberg-failover",
        listeners="PLAINTEXT://127.0.0.1:0",
        schema_registry_listeners="http://127.0.0.1:0",
        schema_registry_kafkastore_topic_replication_factor=1,
        rayqueue_iceberg_warehouse=f"s3://{BUCKET}/tables",
        rayqueue_iceberg_s3_endpoint=endpoint,
        rayqueue_iceberg_s3_access_key_id="test",
        rayqueue_iceberg_s3_secret_access_key="test",
        rayqueue_iceberg_translation_max_bytes=16 * 1024,
    ) as cluster:
        yield cluster


def committed(cluster, topic: str, partitions: int) -> list[tuple[int, int, bytes | None]]:
    out = read_committed_to_end(cluster, topic, partitions, timeout=120)
    return sorted((r.partition, r.offset, r.value) for r in out)


def produce_while_killing_leaders(cluster, topic: str, partitions: int, kills: int = 3, seed: int = 44) -> int:
    """Produce to ``topic`` from a thread while, ``kills`` times, a partition's leader is killed
    once its translation is under way (commits landed, records waiting) and a new one is
    elected; returns how many records were sent (every one acknowledged)."""
    admin = cluster.admin()
    stop, sent, errors = threading.Event(), [0], []

    def produce() -> None:
        producer = cluster.producer(acks="all", linger_ms=5, retries=1_000_000, delivery_timeout_ms=120_000)
        try:
            i = 0
            while not stop.is_set():
                producer.send(topic, b"order-%06d" % i + b"." * 200, key=b"%d" % (i % 50))
                i += 1
                if i % 200 == 0:
                    producer.flush(120)
                    sent[0] = i
            producer.flush(120)
            sent[0] = i
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
        finally:
            producer.close(30)

    producing = threading.Thread(target=produce)
    producing.start()
    rng = random.Random(seed)
    try:
        for _ in range(kills):
            # Kill a partition's leader once its translation is under way: with small steps
            # (translation.max.bytes), a step is in flight most of the time.
            partition = rng.randrange(partitions)
            seen: list = []

            def under_way(p: int = partition, seen: list = seen) -> bool:
                seen[:] = rqi.translation(topic, cluster)
                return any(t.partition == p and t.translated_records > 0 and t.lag_records > 0 for t in seen)

            try:
                wait_for(under_way, timeout=120, what=f"partition {partition}'s translation under way")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; last report: {seen}") from None
            leader = admin.describe_topics([topic])[topic].partitions[partition]
            kill_broker(leader.leader_handle)
            wait_for(
                lambda p=partition, old=leader.leader_epoch: (
                    admin.describe_topics([topic])[topic].partitions[p].leader_epoch > old
                ),
                timeout=60,
                what="a new leader",
            )
            # Produce and translate a while under the new leader: a random number of batches more.
            more = sent[0] + 200 * rng.randrange(1, 6)
            wait_for(lambda n=more: sent[0] >= n or errors, timeout=120, what="records under the new leader")
    finally:
        stop.set()
        producing.join(180)
    assert not errors and sent[0] > 0, errors
    return sent[0]


def assert_table_equals_topic(cluster, topic: str, partitions: int, timeout_s: float = 240) -> None:
    """Once translated, the table holds every committed record of ``topic`` once: the same
    (partition, offset, value)s, no gap, no duplicate; and every partition's leader reports no lag."""
    want = committed(cluster, topic, partitions)
    rqi.wait_translated(topic, cluster, timeout_s=timeout_s)
    rows = rqi.to_arrow(topic, cluster).to_pylist()
    got = sorted((r["rayqueue"]["partition"], r["rayqueue"]["offset"], r["value"]) for r in rows)
    assert len(got) == len(set(got)), "a record is in the table twice"
    assert got == want  # every committed record, once; order within a partition is the offset's
    report = rqi.translation(topic, cluster)
    assert sorted(t.partition for t in report) == list(range(partitions)) and all(t.lag_records == 0 for t in report)


def test_the_table_equals_the_topic_after_leaders_are_killed_mid_translation(s3_cluster, s3):
    cluster, (_, client) = s3_cluster, s3
    topic = "orders"
    cluster.admin().create_topic(
        topic, 3, 3, configs={"rayqueue.iceberg.mode": "key_value", "rayqueue.iceberg.target.lag.ms": 200}
    )
    # Snapshots older than two seconds expire (each commit's cost grows with the snapshots the
    # table holds): the translators remove them as they go, between each other's commits.
    set_table_properties(topic, cluster, {"history.expire.max-snapshot-age-ms": "2000"})
    produce_while_killing_leaders(cluster, topic, 3)
    # New leaders resumed from the snapshot summary: the table equals the topic.
    assert_table_equals_topic(cluster, topic, 3)
    assert sum(t.expired_snapshots for t in rqi.translation(topic, cluster)) > 0
    # The data and metadata files are on S3.
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="tables/")["Contents"]]
    assert any(k.endswith(".parquet") for k in keys) and any(k.endswith(".metadata.json") for k in keys)


def set_table_properties(topic: str, cluster, props: dict[str, str]) -> None:
    """Set the table's properties, again when a translator's commit comes first."""
    from pyiceberg.exceptions import CommitFailedException

    def done() -> bool:
        try:
            with rqi.table(topic, cluster).transaction() as txn:
                txn.set_properties(props)
            return True
        except (CommitFailedException, UnknownTopicOrPartitionError):
            return False

    wait_for(done, timeout=60, what="the table's properties set")


def test_avro_values_through_the_registry_with_hostile_records(s3_cluster):
    """confluent-kafka's Avro serializer against the cluster's own registry; records in no wire
    format, with an unknown id, or garbage under a real id go to the dead-letter table."""
    pytest.importorskip("confluent_kafka.schema_registry.avro")
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    cluster = s3_cluster
    topic = "payments"
    cluster.admin().create_topic(
        topic, 1, 1, configs={"rayqueue.iceberg.mode": "value_schema_id_prefix", "rayqueue.iceberg.target.lag.ms": 200}
    )
    registry = SchemaRegistryClient({"url": cluster.schema_registry_url})
    v1 = '{"type":"record","name":"Payment","fields":[{"name":"id","type":"long"},{"name":"amount","type":"double"}]}'
    v2 = (
        '{"type":"record","name":"Payment","fields":[{"name":"id","type":"long"},{"name":"amount","type":"double"},'
        '{"name":"currency","type":"string","default":"EUR"}]}'
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    ctx = SerializationContext(topic, MessageField.VALUE)
    first = AvroSerializer(registry, v1)
    producer.produce(topic, value=first({"id": 1, "amount": 9.5}, ctx))
    second = AvroSerializer(registry, v2)  # a compatible evolution: the table grows a column
    producer.produce(topic, value=second({"id": 2, "amount": 1.25, "currency": "NOK"}, ctx))
    producer.produce(topic, value=b"not avro at all")
    producer.produce(topic, value=b"\x00\x00\x0f\x42\x40" + b"\x02")  # schema id 1,000,000: unknown
    producer.produce(topic, value=first({"id": 3, "amount": 0.0}, ctx)[:5] + b"\xff" * 3)  # truncated
    producer.produce(topic, value=first({"id": 4, "amount": 2.0}, ctx))
    assert producer.flush(30) == 0
    rqi.wait_translated(topic, cluster, timeout_s=120)
    rows = sorted(rqi.to_arrow(topic, cluster).to_pylist(), key=lambda r: r["rayqueue"]["offset"])
    assert [(r["id"], r["amount"], r["currency"]) for r in rows] == [(1, 9.5, None), (2, 1.25, "NOK"), (4, 2.0, None)]
    dead = rqi.dead_letter_table(topic, cluster).scan().to_arrow().to_pylist()
    assert sorted(r["rayqueue"]["offset"] for r in dead) == [2, 3, 4]
    assert all(r["error"] for r in dead)
    (report,) = rqi.translation(topic, cluster)
    assert report.invalid_records == 3 and report.error is None


def test_readers_of_an_s3_warehouse(s3_cluster):
    """DuckDB (over pyiceberg's Arrow: its httpfs extension is not installable here) and Ray
    Data's read_iceberg read the S3 table as pyiceberg does."""
    cluster = s3_cluster
    topic = "s3-readers"
    cluster.admin().create_topic(
        topic, 2, 1, configs={"rayqueue.iceberg.mode": "key_value", "rayqueue.iceberg.target.lag.ms": 200}
    )
    producer = cluster.producer()
    for i in range(30):
        producer.send(topic, b"%d" % i, partition=i % 2)
    producer.flush(30)
    producer.close(10)
    rqi.wait_translated(topic, cluster, timeout_s=120)
    want = sorted(
        (r["rayqueue"]["partition"], r["rayqueue"]["offset"], r["value"])
        for r in rqi.to_arrow(topic, cluster).to_pylist()
    )
    assert len(want) == 30
    duck = rqi.duckdb(topic, cluster=cluster)
    got = duck.query("t", 'SELECT t.rayqueue.partition, t.rayqueue."offset", value FROM t').fetchall()
    assert sorted(tuple(r) for r in got) == want
    ds = rqi.read(topic, cluster)
    assert sorted((r["rayqueue"]["partition"], r["rayqueue"]["offset"], r["value"]) for r in ds.take_all()) == want
