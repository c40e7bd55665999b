"""Kafka's own clients against the gateway: kafka-python, aiokafka, confluent-kafka, kcat.

For each client: create a topic, produce keyed records with headers under every
compression codec, then read the topic back from the beginning and by timestamp; what the
client reads must be exactly what rayqueue's native consumer reads (partitions, offsets,
keys, values, headers, timestamps). Records the native producer wrote first are read by
the client, and the client's records by the native consumer.
"""

from __future__ import annotations

import itertools
import time

import pytest

from actors.types import TopicPartition
from tests.gateway.clients import AioKafka, Confluent, Got, KafkaPython, Kcat, Rec
from tests.helpers import consume_all

PARTITIONS = 3
PER_CODEC = 40
NATIVE = 20
_ids = itertools.count()


@pytest.fixture(params=["confluent-kafka", "kafka-python", "aiokafka", "kcat"])
def client(request):
    if request.param == "kcat":
        return Kcat(request.getfixturevalue("kcat"))
    return {"confluent-kafka": Confluent, "kafka-python": KafkaPython, "aiokafka": AioKafka}[request.param]()


@pytest.fixture
def topic(client, cluster, bootstrap):
    """A new 3-partition topic, created through the client's admin API where it has one."""
    name = f"gateway-{client.name}-{next(_ids)}"
    if hasattr(client, "create_topic"):
        client.create_topic(bootstrap, name, PARTITIONS)
    else:
        cluster.admin().create_topic(name, PARTITIONS, 1)
    yield name
    cluster.admin().delete_topic(name)


def read_native(cluster, topic: str, partitions: int) -> list[Got]:
    """Everything in the topic, as rayqueue's own consumer reads it."""
    consumer = cluster.consumer(auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        total = sum(consumer.end_offsets(tps).values())
        records = consume_all(consumer, total) if total else []
        return [
            Got(r.partition, r.offset, r.key, r.value, tuple((k, v or b"") for k, v in r.headers), r.timestamp)
            for r in records
        ]
    finally:
        consumer.close()


def test_client_produces_and_consumes_like_the_native_clients(client, topic, cluster, bootstrap):
    now = int(time.time() * 1000)
    base = now - 600_000
    # Native -> client: the native producer writes first, with older timestamps.
    native = cluster.producer()
    for i in range(NATIVE):
        native.send(topic, f"native-{i}".encode(), key=f"nk{i % 5}".encode(), headers=[("src", b"native")],
                    timestamp=base - 100_000 + i)  # fmt: skip
    native.flush()
    native.close()
    # Client -> native: every codec, keyed, with headers (and timestamps where the client sets them).
    sent: list[Rec] = []
    for c, codec in enumerate(client.codecs):
        records = [
            Rec(
                key=f"k{i % 7}".encode(),
                value=f"{client.name}-{codec}-{i}".encode(),
                headers=(("codec", codec.encode()),) + ((("i", str(i).encode()),) if client.name != "kcat" else ()),
                timestamp=base + c * 1000 + i if client.sets_timestamps else None,
            )
            for i in range(PER_CODEC)
        ]
        client.produce(bootstrap, topic, records, codec)
        sent += records

    log = read_native(cluster, topic, PARTITIONS)
    assert len(log) == NATIVE + len(sent)
    by_value = {g.value: g for g in log}
    for r in sent:
        g = by_value[r.value]
        assert (g.key, g.headers) == (r.key, r.headers)
        if r.timestamp is not None:
            assert g.timestamp == r.timestamp
    assert {f"native-{i}".encode() for i in range(NATIVE)} <= by_value.keys()

    # From the beginning: exactly what the native consumer read.
    got = client.consume(bootstrap, topic, {p: 0 for p in range(PARTITIONS)}, len(log))
    assert sorted(got) == sorted(log)

    # By timestamp: the first offset at or after T in each partition, then reading from there.
    client_records = sorted((g for g in log if not g.value.startswith(b"native-")), key=lambda g: g.timestamp)
    target = client_records[len(client_records) // 2].timestamp
    expected = {}
    for p in range(PARTITIONS):
        later = [g.offset for g in log if g.partition == p and g.timestamp >= target]
        expected[p] = min(later) if later else -1
    assert client.offsets_for_times(bootstrap, topic, PARTITIONS, target) == expected
    start = {p: o for p, o in expected.items() if o >= 0}
    want = [g for g in log if g.partition in start and g.offset >= start[g.partition]]
    assert sorted(client.consume(bootstrap, topic, start, len(want))) == sorted(want)


def test_kcat_lists_brokers_and_topics(kcat, cluster, bootstrap, new_topic):
    topic = new_topic(partitions=2)
    out = Kcat(kcat).metadata(bootstrap)
    for b in cluster.metadata([]).brokers:
        assert f"broker {b.broker_id} at {b.host}:{b.port}" in out
    assert f'topic "{topic}" with 2 partitions' in out


def test_a_producer_auto_creates_its_topic(cluster, bootstrap, admin):
    """auto.create.topics.enable (Kafka's default, true): the producer's Metadata request creates
    the topic with num.partitions; a consumer's Metadata does not (librdkafka asks not to)."""
    topic = f"gateway-auto-{next(_ids)}"
    try:
        Confluent().produce(bootstrap, topic, [Rec(b"k", b"first", (), None)], "none")
        meta = cluster.metadata([topic]).topics[topic]
        assert len(meta.partitions) == cluster.config["num.partitions"]
        assert [g.value for g in Confluent().consume(bootstrap, topic, {0: 0}, 1)] == [b"first"]
        missing = f"gateway-auto-missing-{next(_ids)}"
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "auto"})
        try:
            assert missing not in consumer.list_topics(missing, timeout=10).topics or (
                consumer.list_topics(missing, timeout=10).topics[missing].error is not None
            )
        finally:
            consumer.close()
        assert missing not in admin.list_topics()
    finally:
        admin.delete_topic(topic)
