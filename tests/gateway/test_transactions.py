"""Transactions of Kafka clients through the gateway, on rayqueue's transaction coordinator.

confluent-kafka's transactional consume-transform-produce loop: records of committed
transactions are read once, aborted ones never, by a ``read_committed`` consumer through
the gateway and by rayqueue's own; the offsets sent with the transaction are the group's
once it commits; a second producer with the same transactional id fences the first.
"""

from __future__ import annotations

import itertools
import os
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP

from actors.types import TopicPartition
from tests.gateway.wire import Wire, build_request
from tests.helpers import consume_all, wait_for

_ids = itertools.count()


@pytest.fixture
def topics(cluster):
    base = f"txn-{next(_ids)}-{os.getpid()}"
    names = (f"{base}-in", f"{base}-out")
    for name in names:
        cluster.admin().create_topic(name, 1, 1)
    yield names
    for name in names:
        cluster.admin().delete_topic(name)


def _producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    producer.init_transactions(30)
    return producer


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([CTP(topic, 0, 0)])
        got: list[bytes] = []

        def more() -> bool:
            got.extend(m.value() for m in consumer.consume(100, 0.2) if not m.error())
            return len(got) >= expected

        wait_for(more, timeout=60, what=f"{expected} committed records of {topic}")
        got.extend(m.value() for m in consumer.consume(100, 1.0) if not m.error())  # nothing more may come
        return got
    finally:
        consumer.close()


def test_consume_transform_produce_commits_and_aborts(cluster, bootstrap, topics):
    src, dst = topics
    native = cluster.producer()
    for i in range(20):
        native.send(src, f"in-{i}".encode(), partition=0)
    native.flush()
    native.close()
    group = f"ctp-{src}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    producer = _producer(bootstrap, f"tid-{src}")
    try:
        consumer.subscribe([src])
        seen: list = []
        wait_for(
            lambda: seen.extend(m for m in consumer.consume(100, 0.2) if not m.error()) or len(seen) >= 20,
            timeout=60,
            what="the input read",
        )
        # The first ten: committed with their offsets; the next ten: aborted.
        for batch, commit in ((seen[:10], True), (seen[10:20], False)):
            producer.begin_transaction()
            for m in batch:
                producer.produce(dst, m.value().replace(b"in", b"out"), partition=0)
            last = batch[-1]
            producer.send_offsets_to_transaction(
                [CTP(src, 0, last.offset() + 1)], consumer.consumer_group_metadata(), 30
            )
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
    finally:
        consumer.close()
    expected = [f"out-{i}".encode() for i in range(10)]
    assert sorted(_read_committed(bootstrap, dst, 10)) == sorted(expected)
    reader = cluster.consumer(isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        reader.assign([TopicPartition(dst, 0)])
        reader.seek_to_beginning([TopicPartition(dst, 0)])
        assert sorted(r.value for r in consume_all(reader, 10)) == sorted(expected)
        assert not reader.poll(500)
    finally:
        reader.close()
    committed = cluster.admin().group_lag(group)[TopicPartition(src, 0)].committed
    assert committed == 10  # the aborted transaction's offsets did not apply

    # A second producer with the same transactional id fences the first.
    second = _producer(bootstrap, f"tid-{src}")
    producer.begin_transaction()
    producer.produce(dst, b"zombie", partition=0)
    with pytest.raises(KafkaException) as info:
        producer.commit_transaction(30)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    second.begin_transaction()
    second.produce(dst, b"live", partition=0)
    second.commit_transaction(30)
    assert sorted(_read_committed(bootstrap, dst, 11)) == sorted([*expected, b"live"])


def test_describe_transactions_start_time_is_minus_one_before_a_transaction(cluster, bootstrap, topics):
    """Kafka's DescribeTransactions sends -1 as the start time of a transactional id that has
    not begun a transaction (Admin.describeTransactions: empty; kafka-transactions describe:
    None); 0 made the tool print a duration of 56 years."""
    src, _ = topics
    tid = f"describe-{src}"
    producer = cluster.producer(transactional_id=tid)
    try:
        producer.init_transactions()

        def start_ms(wire: Wire) -> tuple[str, int]:
            # Read by hand: kio's reader refuses negative timestamps, which Kafka's clients accept.
            cid = wire.send(build_request(65, 0, transactional_ids=[tid]))
            return _state_and_start_time(wire.read_frame(), cid)

        with Wire(bootstrap) as wire:
            assert start_ms(wire) == ("Empty", -1)
            before = int(time.time() * 1000)
            producer.begin_transaction()
            producer.send(src, b"open")
            producer.flush()
            state, started = start_ms(wire)
            assert state == "Ongoing" and before - 1000 <= started <= int(time.time() * 1000)
            producer.commit_transaction()
            # Kept once it ends, as Kafka keeps it (CompleteCommit follows the commit's answer).
            assert wait_for(lambda: start_ms(wire)[0] == "CompleteCommit", 60, what="CompleteCommit")
            assert start_ms(wire) == ("CompleteCommit", started)
    finally:
        producer.close()


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _state_and_start_time(frame: bytes, correlation_id: int) -> tuple[str, int]:
    """(state, start time in ms) of the one transactional id of a DescribeTransactions v0 answer:
    header v1 (correlation id, tagged fields), throttle time, then the states' compact array of
    (error code, transactional id, state, timeout, start time, ...)."""
    assert struct.unpack_from(">i", frame, 0)[0] == correlation_id
    _, pos = _uvarint(frame, 4)  # the header's tagged fields (none)
    pos += 4  # throttle time
    count, pos = _uvarint(frame, pos)
    assert count - 1 == 1
    assert struct.unpack_from(">h", frame, pos)[0] == 0  # error code
    pos += 2
    length, pos = _uvarint(frame, pos)
    pos += length - 1  # the transactional id
    length, pos = _uvarint(frame, pos)
    state = frame[pos : pos + length - 1].decode()
    pos += length - 1 + 4  # the state, then the timeout
    return state, struct.unpack_from(">q", frame, pos)[0]
