"""Ray's own Kafka source (``ray.data.read_kafka``, confluent-kafka inside) reads a topic that
rayqueue's native producer wrote, through the gateways."""

from __future__ import annotations

import ray

from actors.types import TopicPartition
from tests.helpers import consume_all


def test_ray_data_read_kafka_reads_what_the_native_producer_wrote(cluster, new_topic, bootstrap):
    topic = new_topic(partitions=3)
    producer = cluster.producer(compression_type="lz4")
    values = [b"row-%d" % i for i in range(3000)]
    producer.send_many(topic, values, keys=[b"key-%d" % (i % 11) for i in range(3000)]).get(60)
    producer.send(topic, b"with headers", key=b"h", headers=[("a", b"1"), ("b", b"2")]).get(30)
    producer.close()

    native = cluster.consumer(enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(3)]
    native.assign(tps)
    native.seek_to_beginning(tps)
    expected = {(r.partition, r.offset): r for r in consume_all(native, 3001)}
    native.close()

    rows = ray.data.read_kafka(topic, bootstrap_servers=bootstrap, timeout_ms=60_000).take_all()
    assert len(rows) == 3001
    for row in rows:
        r = expected[(row["partition"], row["offset"])]
        assert (row["topic"], row["key"], row["value"]) == (topic, r.key, r.value)
        assert row["timestamp"] == r.timestamp and row["timestamp_type"] == 1  # librdkafka's CreateTime
    with_headers = next(row for row in rows if row["value"] == b"with headers")
    assert dict(with_headers["headers"]) == {"a": b"1", "b": b"2"}


def test_ray_data_write_kafka_writes_what_the_native_consumer_reads(cluster, new_topic, bootstrap):
    """``Dataset.write_kafka`` (confluent-kafka's producer in Ray's write tasks) through the
    gateways: every row lands once, keyed as asked, JSON values as Ray serializes them."""
    import json

    topic = new_topic(partitions=2)
    rows = [{"user": f"u{i % 7}", "n": i} for i in range(500)]
    ray.data.from_items(rows).write_kafka(topic, bootstrap, key_field="user")

    native = cluster.consumer(enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(2)]
    native.assign(tps)
    native.seek_to_beginning(tps)
    records = consume_all(native, 500)
    native.close()
    assert sorted(json.loads(r.value)["n"] for r in records) == list(range(500))
    for r in records:
        assert r.key == json.loads(r.value)["user"].encode()
    # Keys land where Kafka's murmur2 partitioner puts them, so one user stays in one partition.
    assert all(len({r.partition for r in records if r.key == k}) == 1 for k in {r.key for r in records})
