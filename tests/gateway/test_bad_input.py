"""Hostile input against a running gateway: each bad connection is closed on its own, the
gateway actor lives on, other clients keep producing and fetching, and no partition takes
a byte of it. (tests/gateway/test_server.py checks the same rules, one log line each, and
the idle and never-reading clients, on the server alone.)"""

from __future__ import annotations

import datetime
import struct

from actors.types import TopicPartition
from tests.gateway.wire import Wire, build_request, leader_address, request_frame
from tests.helpers import consume_all, listener_stats


def _stats(cluster, broker_id: int) -> dict:
    return listener_stats(cluster, broker_id)


def _produce_request(topic: str, records: bytes):
    return build_request(
        0,
        9,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    )


def test_bad_frames_close_their_connection_only(cluster, new_topic, bootstrap):
    from confluent_kafka import Producer

    topic = new_topic(partitions=1)
    leader = cluster.metadata([topic]).topics[topic].partitions[0].leader
    address = leader_address(cluster, topic, 0)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i in range(100):
        producer.produce(topic, value=b"before-%d" % i)
    assert producer.flush(30) == 0
    before = _stats(cluster, leader)

    good = request_frame(build_request(3, 12, topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False), 1)  # fmt: skip
    unknown_key = bytearray(good)
    unknown_key[4:6] = struct.pack(">h", 32000)
    body = good[4:]
    bad_inputs = [
        b"\x00\x00\x00\x30" + b"\xde\xad\xbe\xef" * 12,  # garbage with a plausible size
        struct.pack(">i", 2**31 - 1) + b"\x00" * 64,  # a 2 GB size prefix: refused before any allocation
        bytes(unknown_key),  # an unknown API key
        struct.pack(">i", len(body) - 5) + body[:-5],  # a body shorter than its schema
    ]
    silent = Wire(address)  # connects and never sends: stays harmless (closed when idle)
    try:
        for data in bad_inputs:
            with Wire(address) as bad:
                bad.send_raw(data)
                assert bad.closed_by_peer(10)
        # A Produce whose records are not record batches: the leader refuses it, the log is untouched.
        with Wire(address) as wire:
            answer = wire.call(_produce_request(topic, b"\x00" * 80))
            part = answer.responses[0].partition_responses[0]
            assert part.error_code in (2, 87) and part.base_offset == -1  # CORRUPT_MESSAGE / INVALID_RECORD
        # Everyone else carries on.
        for i in range(100):
            producer.produce(topic, value=b"after-%d" % i)
        assert producer.flush(30) == 0
    finally:
        silent.close()
    after = _stats(cluster, leader)
    assert after["closed_for_errors"] - before["closed_for_errors"] == len(bad_inputs)
    assert after["pid"] == before["pid"]  # the same gateway process throughout
    consumer = cluster.consumer(enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning([TopicPartition(topic, 0)])
    values = [r.value for r in consume_all(consumer, 200)]
    consumer.close()
    assert values == [b"before-%d" % i for i in range(100)] + [b"after-%d" % i for i in range(100)]
    end = cluster.admin().list_offsets({TopicPartition(topic, 0): -1})[TopicPartition(topic, 0)].offset
    assert end == 200


def test_acks_zero_is_not_answered_and_its_error_closes_the_connection(cluster, new_topic):
    from storage.records.builder import RecordBatchBuilder

    topic = new_topic(partitions=1)
    builder = RecordBatchBuilder()
    builder.append_many([b"fire", b"and", b"forget"])
    batch = builder.build()

    def produce(name: str):
        return build_request(
            0,
            9,
            transactional_id=None,
            acks=0,
            timeout=datetime.timedelta(seconds=30),
            topic_data=[{"name": name, "partition_data": [{"index": 0, "records": batch}]}],
        )

    metadata = build_request(3, 12, topics=None, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)  # fmt: skip
    with Wire(leader_address(cluster, topic, 0)) as wire:
        wire.send(produce(topic))
        cid = wire.send(metadata)
        got, _ = wire.receive(3, 12)
        assert got == cid  # the produce had no answer: the next one is the metadata's
        wire.send(produce("no-such-topic-for-acks-0"))
        assert wire.closed_by_peer(10)  # as Kafka does, so that the client refreshes its metadata
    consumer = cluster.consumer(enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning([TopicPartition(topic, 0)])
    assert [r.value for r in consume_all(consumer, 3)] == [b"fire", b"and", b"forget"]
    consumer.close()
