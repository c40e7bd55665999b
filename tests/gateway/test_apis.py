"""ApiVersions, Metadata, InitProducerId, Produce and DeleteTopics by topic id against a
running gateway, request by request (tests/gateway/wire.py), and Produce's acks settings
through confluent-kafka.

What a real client would hide is asked for exactly here: an ApiVersions version above the
served one, every Metadata field next to what the controller says, an idempotent batch
sent twice and one sent out of order.
"""

from __future__ import annotations

import datetime
import uuid

import pytest

from actors.gateway.broker_view import topic_uuid
from actors.gateway.listener import FAMILIES
from actors.gateway.versions import served_apis
from actors.types import TopicPartition
from storage.records.builder import RecordBatchBuilder
from tests.gateway.wire import Wire, build_request, leader_address, parse_bootstrap, request_frame
from tests.helpers import consume_all

PRODUCE, METADATA, API_VERSIONS, DELETE_TOPICS, INIT_PRODUCER_ID = 0, 3, 18, 20, 22
UNSUPPORTED_VERSION, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC, INVALID_REQUEST = 35, 3, 17, 42
UNKNOWN_TOPIC_ID = 100
OUT_OF_ORDER_SEQUENCE = 45


def metadata_request(version: int, topics: list[str] | None, auto_create: bool = False):
    return build_request(
        METADATA,
        version,
        topics=None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        allow_auto_topic_creation=auto_create,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def produce_request(topic: str, records: bytes, acks: int = -1):
    return build_request(
        PRODUCE,
        9,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=30),
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    )


def read_values(cluster, topic: str, n: int) -> list[bytes]:
    consumer = cluster.consumer(enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning([TopicPartition(topic, 0)])
        return [r.value for r in consume_all(consumer, n)]
    finally:
        consumer.close()


def end_offset(cluster, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return cluster.admin().list_offsets({tp: -1})[tp].offset


def test_api_versions_advertises_what_is_served_and_answers_a_newer_version_in_v0(bootstrap):
    served = {key: (api.min_version, api.max_version) for key, api in served_apis(FAMILIES).items()}
    with Wire(bootstrap) as wire:
        answer = wire.call(build_request(API_VERSIONS, 3, client_software_name="wire", client_software_version="1"))
        assert answer.error_code == 0
        assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == served
        # Groups (both protocols: KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe,
        # 68-69, at Kafka 4.4's v0-v1) and transactions are advertised; v4 of
        # AddPartitionsToTxn (KIP-890, brokers') is not served.
        assert {10, 11, 12, 13, 14, 24, 26, 68, 69} <= served.keys()
        assert served[24] == (0, 3) and served[68] == served[69] == (0, 1)
        # A version above the served one: UNSUPPORTED_VERSION in a v0 body, with the ranges,
        # so the client retries with one it finds there (Kafka's own fallback).
        newest = served[API_VERSIONS][1]
        frame = build_request(API_VERSIONS, newest, client_software_name="wire", client_software_version="1")
        body = bytearray(request_frame(frame, 7))
        body[6:8] = (newest + 1).to_bytes(2, "big")  # the header's api_version
        wire.send_raw(bytes(body))
        cid, fallback = wire.receive(API_VERSIONS, 0)
        assert cid == 7 and fallback.error_code == UNSUPPORTED_VERSION
        assert {k.api_key: (k.min_version, k.max_version) for k in fallback.api_keys} == served
        # The connection stays usable: the client asks again, lower.
        assert wire.call(build_request(API_VERSIONS, 0)).error_code == 0


@pytest.mark.parametrize("version", [1, 9, 12])
def test_metadata_names_the_gateways_and_the_controller_s_partitions(cluster, new_topic, bootstrap, admin, version):
    topic = new_topic(partitions=3, replication_factor=2)
    absent = f"gateway-apis-absent-v{version}"
    meta = cluster.metadata([topic])
    try:
        with Wire(bootstrap) as wire:
            answer = wire.call(metadata_request(version, [topic, absent]))
    finally:
        if absent in admin.list_topics():
            admin.delete_topic(absent)
    brokers = {b.broker_id: (b.host, b.port) for b in meta.brokers}
    assert {b.node_id: (b.host, b.port) for b in answer.brokers} == brokers
    assert parse_bootstrap(bootstrap) in brokers.values()
    assert answer.controller_id in brokers
    if version >= 2:
        assert answer.cluster_id == meta.cluster_id == cluster.describe()["cluster_id"]
    found, other = answer.topics
    if version < 4:
        # Before v4 a Metadata request has no allow_auto_topic_creation: Kafka creates.
        assert other.error_code == 0 and len(other.partitions) == cluster.config["num.partitions"]
    else:
        assert other.error_code == UNKNOWN_TOPIC_OR_PARTITION and other.partitions == ()
    assert found.error_code == 0 and found.name == topic and not found.is_internal
    if version >= 10:
        assert found.topic_id == topic_uuid(meta.topics[topic].topic_id)
    expected_partitions = meta.topics[topic].partitions
    for p, expected in zip(sorted(found.partitions, key=lambda p: p.partition_index), expected_partitions, strict=True):
        assert (p.error_code, p.partition_index, p.leader_id) == (0, expected.partition, expected.leader)
        assert (tuple(p.replica_nodes), tuple(p.isr_nodes)) == (expected.replicas, expected.isr)
        if version >= 7:
            assert p.leader_epoch == expected.leader_epoch


def test_metadata_auto_creates_only_when_asked_and_refuses_bad_names(cluster, bootstrap, admin):
    name = f"gateway-apis-auto-{id(cluster)}"
    try:
        with Wire(bootstrap) as wire:
            answer = wire.call(metadata_request(12, [name], auto_create=False))
            assert answer.topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
            assert name not in admin.list_topics()
            answer = wire.call(metadata_request(12, [name, "bad/name"], auto_create=True))
            created, bad = answer.topics
            assert created.error_code == 0 and len(created.partitions) == cluster.config["num.partitions"]
            assert bad.error_code == INVALID_TOPIC
        assert name in admin.list_topics() and "bad/name" not in admin.list_topics()
    finally:
        admin.delete_topic(name)


def test_idempotent_produce_through_the_gateway(cluster, new_topic):
    """InitProducerId hands out a producer id; the same batch sent twice is appended once
    and both answers name its offset; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    topic = new_topic(partitions=1)
    with Wire(leader_address(cluster, topic, 0)) as wire:
        init = build_request(
            INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1,
        )  # fmt: skip
        ids = wire.call(init)
        assert ids.error_code == 0 and ids.producer_id >= 0 and ids.producer_epoch == 0
        again = wire.call(init)
        assert again.producer_id != ids.producer_id  # every idempotent producer gets its own

        def batch(values: list[bytes], sequence: int) -> bytes:
            builder = RecordBatchBuilder(
                producer_id=ids.producer_id, producer_epoch=ids.producer_epoch, base_sequence=sequence
            )
            builder.append_many(values)
            return builder.build()

        first = batch([b"a", b"b", b"c"], 0)
        answers = [wire.call(produce_request(topic, first)).responses[0].partition_responses[0] for _ in range(2)]
        assert [(a.error_code, a.base_offset) for a in answers] == [(0, 0), (0, 0)]
        gap = wire.call(produce_request(topic, batch([b"late"], 7))).responses[0].partition_responses[0]
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE and gap.base_offset == -1
        follow = wire.call(produce_request(topic, batch([b"d"], 3))).responses[0].partition_responses[0]
        assert (follow.error_code, follow.base_offset) == (0, 3)
        # A transactional id: its producer id, the epoch bumped by each InitProducerId
        # (which fences the older instance).
        tid = f"txn-{topic}"
        as_txn = build_request(
            INIT_PRODUCER_ID, 4, transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1,
        )  # fmt: skip
        first_txn, second_txn = wire.call(as_txn), wire.call(as_txn)
        assert first_txn.error_code == second_txn.error_code == 0 and first_txn.producer_id >= 0
        assert second_txn.producer_id == first_txn.producer_id
        assert second_txn.producer_epoch == first_txn.producer_epoch + 1
    assert read_values(cluster, topic, 4) == [b"a", b"b", b"c", b"d"]
    assert end_offset(cluster, topic) == 4


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_kafka_produces_with_each_acks_setting(cluster, new_topic, bootstrap, acks):
    from confluent_kafka import Producer

    topic = new_topic(partitions=1, replication_factor=3)
    config = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5}
    if acks != "all":
        config["enable.idempotence"] = False  # librdkafka's idempotence needs acks=all
    producer = Producer(config)
    delivered: list = []
    for i in range(200):
        producer.produce(topic, value=b"%d" % i, partition=0, on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    assert len(delivered) == 200 and all(err is None for err, _ in delivered)
    offsets = [msg.offset() for _, msg in delivered]
    # acks=0 is never answered, so the client knows no offsets.
    assert offsets == (list(range(200)) if acks != "0" else [None] * 200)
    assert read_values(cluster, topic, 200) == [b"%d" % i for i in range(200)]


def test_delete_topics_by_topic_id(cluster, admin, bootstrap):
    """DeleteTopics v6 names topics by id (KIP-516); an unknown id is UNKNOWN_TOPIC_ID."""
    name = f"gateway-apis-by-id-{id(admin)}"
    admin.create_topic(name, 2, 1)
    topic_id = topic_uuid(cluster.metadata([name]).topics[name].topic_id)
    unknown = uuid.uuid4()
    with Wire(bootstrap) as wire:
        answer = wire.call(
            build_request(
                DELETE_TOPICS,
                6,
                topics=[{"name": None, "topic_id": topic_id}, {"name": None, "topic_id": unknown}],
                timeout=datetime.timedelta(seconds=30),
            )  # fmt: skip
        )
    deleted, missing = answer.responses
    assert (deleted.error_code, deleted.name, deleted.topic_id) == (0, name, topic_id)
    assert (missing.error_code, missing.topic_id) == (UNKNOWN_TOPIC_ID, unknown)
    assert name not in admin.list_topics()
