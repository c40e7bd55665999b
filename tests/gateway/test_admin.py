"""Admin requests through the gateway with Kafka's admin clients (confluent-kafka, kafka-python):
what they change is what rayqueue's own Admin sees."""

from __future__ import annotations

import gc
import itertools
import time

import pytest

from actors.types import TopicPartition

_ids = itertools.count()


def _name(prefix: str) -> str:
    return f"gateway-admin-{prefix}-{next(_ids)}"


@pytest.fixture
def ck_admin(bootstrap):
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": bootstrap})
    yield client
    del client
    gc.collect()  # librdkafka's handle (and its connections) go with the object


def test_confluent_admin_topics_partitions_and_configs(ck_admin, admin, cluster):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    name = _name("ck")
    try:
        # validate_only changes nothing.
        for f in ck_admin.create_topics([NewTopic(name, 2, 1)], validate_only=True).values():
            f.result(30)
        assert name not in admin.list_topics()
        for f in ck_admin.create_topics([NewTopic(name, 2, 1, config={"retention.ms": "123456"})]).values():
            f.result(30)
        meta = admin.describe_topics([name])[name]
        assert len(meta.partitions) == 2 and meta.configs["retention.ms"] == 123456

        # Errors come back as Kafka's codes.
        errors = {}
        for bad in (
            NewTopic(name, 1, 1),
            NewTopic("bad/name", 1, 1),
            NewTopic(_name("cfg"), 1, 1, config={"x.y": "1"}),
        ):
            with pytest.raises(KafkaException) as err:
                ck_admin.create_topics([bad])[bad.topic].result(30)
            errors[bad.topic if bad.topic != name else "exists"] = err.value.args[0].name()
        # (librdkafka names INVALID_TOPIC_EXCEPTION "TOPIC_EXCEPTION")
        assert list(errors.values()) == ["TOPIC_ALREADY_EXISTS", "TOPIC_EXCEPTION", "INVALID_CONFIG"]

        resource = ConfigResource(ResourceType.TOPIC, name)
        described = ck_admin.describe_configs([resource])[resource].result(30)
        assert described["retention.ms"].value == "123456" and not described["retention.ms"].is_default
        assert described["segment.bytes"].is_default and described["cleanup.policy"].value == "delete"

        alter = ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
                ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
                ConfigEntry("max.message.bytes", "200000", incremental_operation=AlterConfigOpType.SET),
            ],
        )
        ck_admin.incremental_alter_configs([alter])[alter].result(30)
        configs = admin.describe_configs(name)
        assert configs["cleanup.policy"][0] in (["delete", "compact"], ("delete", "compact"))
        assert configs["max.message.bytes"] == (200000, "DYNAMIC_TOPIC_CONFIG")
        assert configs["retention.ms"][1] != "DYNAMIC_TOPIC_CONFIG"

        broker = ConfigResource(ResourceType.BROKER, "0")
        broker_configs = ck_admin.describe_configs([broker])[broker].result(30)
        assert broker_configs["listeners"].value == "PLAINTEXT://127.0.0.1:0"
        assert broker_configs["num.partitions"].is_read_only

        ck_admin.create_partitions([NewPartitions(name, 4)])[name].result(30)
        assert len(admin.describe_topics([name])[name].partitions) == 4
        with pytest.raises(KafkaException) as err:
            ck_admin.create_partitions([NewPartitions(name, 3)])[name].result(30)
        assert err.value.args[0].name() == "INVALID_PARTITIONS"

        cluster_info = ck_admin.describe_cluster().result(30)
        assert {n.id for n in cluster_info.nodes} == {b.broker_id for b in cluster.metadata([]).brokers}
        assert cluster_info.cluster_id == cluster.describe()["cluster_id"]
    finally:
        for f in ck_admin.delete_topics([name]).values():
            f.result(30)
    assert name not in admin.list_topics()
    with pytest.raises(KafkaException) as err:
        ck_admin.delete_topics([name])[name].result(30)
    assert err.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"


def test_confluent_admin_list_offsets_and_delete_records(ck_admin, admin, cluster, new_topic):
    from confluent_kafka import TopicPartition as CkTP
    from confluent_kafka.admin import OffsetSpec

    topic = new_topic(partitions=1)
    producer = cluster.producer()
    base = int(time.time() * 1000) - 60_000  # recent: retention (7 days) is checked every second
    for i, ts in enumerate([base + 10, base + 50, base + 30, base + 40, base + 20]):
        producer.send(topic, b"%d" % i, partition=0, timestamp=ts).get(30)
    producer.close()
    tp = CkTP(topic, 0)

    def offset(spec) -> tuple[int, int]:
        info = ck_admin.list_offsets({tp: spec})[tp].result(30)
        return info.offset, info.timestamp

    assert offset(OffsetSpec.earliest())[0] == 0
    assert offset(OffsetSpec.latest())[0] == 5
    assert offset(OffsetSpec.max_timestamp()) == (1, base + 50)
    assert offset(OffsetSpec.for_timestamp(base + 35)) == (1, base + 50)

    deleted = ck_admin.delete_records([CkTP(topic, 0, 3)])[CkTP(topic, 0, 3)].result(30)
    assert deleted.low_watermark == 3
    assert admin.list_offsets({TopicPartition(topic, 0): -2})[TopicPartition(topic, 0)].offset == 3


def test_kafka_python_admin(bootstrap, admin):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic

    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    name = _name("kp")
    try:
        client.create_topics([NewTopic(name, 1, 1, topic_configs={"cleanup.policy": "compact"})])
        assert admin.describe_configs(name)["cleanup.policy"][1] == "DYNAMIC_TOPIC_CONFIG"
        described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        assert "cleanup.policy" in str(described)
        client.create_partitions({name: NewPartitions(3)})
        assert len(admin.describe_topics([name])[name].partitions) == 3
        cluster_info = client.describe_cluster()
        assert len(cluster_info["brokers"]) == 3
        assert name in client.list_topics()
    finally:
        client.delete_topics([name])
        client.close()
    assert name not in admin.list_topics()
