"""Fetch, ListOffsets and OffsetForLeaderEpoch through the gateway, request by request.

Raw requests (tests/gateway/wire.py) where the real clients cannot say what is meant: a
long poll against other connections, byte limits, topic ids, stale leader epochs,
read_committed with open and aborted transactions, fetch sessions.
"""

from __future__ import annotations

import datetime
import itertools
import time
import uuid

import pytest

from actors.gateway.broker_view import topic_uuid
from actors.types import TopicPartition
from storage.batch_header import batch_boundaries, read_header
from tests.gateway.wire import Wire, build_request, gateway_address, leader_address
from tests.helpers import kill_broker, wait_for

FETCH, LIST_OFFSETS, METADATA, OFFSET_FOR_LEADER_EPOCH = 1, 2, 3, 23
_ids = itertools.count()


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


def fetch_request(
    version: int,
    topics: dict,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    isolation: int = 0,
    session_id: int = 0,
    session_epoch: int = -1,
):
    """``topics``: {topic name or topic id: [(partition, offset, partition_max_bytes, leader_epoch)]}."""
    return build_request(
        FETCH,
        version,
        replica_id=-1,
        max_wait=ms(max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            {
                "topic": key,
                "topic_id": key,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": epoch,
                        "fetch_offset": offset,
                        "partition_max_bytes": limit,
                    }
                    for p, offset, limit, epoch in parts
                ],
            }
            for key, parts in topics.items()
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def partitions_of(response) -> dict[int, object]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


@pytest.fixture
def one_broker_topic(admin):
    """A 3-partition topic whose partitions are all led by broker 0 (one gateway serves it)."""
    name = f"gateway-fetch-{next(_ids)}"
    admin.create_topic(name, replica_assignment=[[0], [0], [0]])
    yield name
    admin.delete_topic(name)


def test_a_long_poll_holds_up_no_other_connection(cluster, one_broker_topic):
    topic = one_broker_topic
    address = gateway_address(cluster, 0)
    with Wire(address) as waiting, Wire(address) as other:
        waiting.send(fetch_request(12, {topic: [(0, 0, 1 << 20, -1), (1, 0, 1 << 20, -1)]}, max_wait_ms=30_000))
        # The same gateway answers another connection meanwhile, more than once...
        for _ in range(3):
            answer = other.call(
                build_request(
                    METADATA,
                    12,
                    topics=[{"name": topic, "topic_id": None}],
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
            assert answer.topics[0].name == topic
        # ...while the long poll is still open.
        waiting.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            waiting.sock.recv(1)
        waiting.sock.setblocking(True)
        producer = cluster.producer()
        producer.send(topic, b"wake up", partition=1).get(30)
        producer.close()
        waiting.sock.settimeout(20)  # far less than max_wait: the data woke the poll
        _, response = waiting.receive(FETCH, 12)
    parts = partitions_of(response)
    assert parts[0].records == b"" and parts[0].high_watermark == 0
    assert parts[1].high_watermark == 1 and b"wake up" in parts[1].records


def test_byte_limits_cut_at_batch_boundaries_and_the_first_batch_always_comes(cluster, one_broker_topic):
    topic = one_broker_topic
    producer = cluster.producer(batch_size=16384, linger_ms=0)
    for p in (0, 1):
        for i in range(3):
            producer.send(topic, bytes([65 + i]) * 10_000, partition=p).get(30)
    producer.close()
    with Wire(gateway_address(cluster, 0)) as wire:
        full = partitions_of(wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, -1)]})))[0].records
        sizes = [size for _, size in batch_boundaries(full)]
        assert len(sizes) == 3 and all(s > 10_000 for s in sizes)
        # partition_max_bytes: whole batches only.
        two = partitions_of(wire.call(fetch_request(12, {topic: [(0, 0, sizes[0] + sizes[1] + 10, -1)]})))[0]
        assert bytes(two.records) == full[: sizes[0] + sizes[1]]
        # A limit below one batch still returns the first batch (KIP-74)...
        tiny = partitions_of(wire.call(fetch_request(12, {topic: [(0, 0, 100, -1)]})))[0]
        assert bytes(tiny.records) == full[: sizes[0]]
        # ...and the response's max_bytes is shared in request order.
        both = partitions_of(
            wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, -1), (1, 0, 1 << 20, -1)]}, max_bytes=sizes[0] + 10))
        )
        assert bytes(both[0].records) == full[: sizes[0]]
        assert both[1].records == b"" and both[1].high_watermark == 3


def test_topic_ids_from_fetch_v13(cluster, one_broker_topic):
    topic = one_broker_topic
    cluster.producer().send(topic, b"by id", partition=0).get(30)
    tid = topic_uuid(cluster.metadata([topic]).topics[topic].topic_id)
    unknown = uuid.uuid4()
    with Wire(gateway_address(cluster, 0)) as wire:
        response = wire.call(fetch_request(16, {tid: [(0, 0, 1 << 20, -1)], unknown: [(0, 0, 1 << 20, -1)]}))
    by_id = {t.topic_id: t.partitions[0] for t in response.responses}
    assert b"by id" in by_id[tid].records and by_id[tid].error_code == 0
    assert by_id[unknown].error_code == 100  # UNKNOWN_TOPIC_ID


def test_sessionless_fetch_sessions(cluster, one_broker_topic):
    topic = one_broker_topic
    with Wire(gateway_address(cluster, 0)) as wire:
        new = wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, -1)]}, session_id=0, session_epoch=0))
        assert new.error_code == 0 and new.session_id == 0  # no session created: full fetches go on
        stale = wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, -1)]}, session_id=1234, session_epoch=3))
        assert stale.error_code == 70 and stale.responses == ()  # FETCH_SESSION_ID_NOT_FOUND


def test_partitions_led_elsewhere_answer_not_leader(cluster, new_topic):
    topic = new_topic(partitions=1)
    leader = cluster.metadata([topic]).topics[topic].partitions[0].leader
    other = next(b.broker_id for b in cluster.metadata([]).brokers if b.broker_id != leader)
    with Wire(gateway_address(cluster, other)) as wire:
        response = wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, -1)], "no-such-topic": [(0, 0, 100, -1)]}))
    codes = {t.topic: t.partitions[0].error_code for t in response.responses}
    assert codes == {topic: 6, "no-such-topic": 3}  # NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION


def test_stale_and_future_leader_epochs_are_fenced_after_a_leader_dies(failover_cluster, failover_topic):
    cluster, new_topic = failover_cluster, failover_topic
    topic = new_topic(partitions=1, replication_factor=2)
    producer = cluster.producer(acks="all")
    producer.send(topic, b"epoch 0", partition=0).get(30)
    before = cluster.metadata([topic]).topics[topic].partitions[0]

    kill_broker(before.leader_handle)
    after = wait_for(
        lambda: (
            (m := cluster.metadata([topic]).topics[topic].partitions[0]).leader_epoch > before.leader_epoch
            and m.leader_handle is not None
            and m
        ),
        timeout=60,
        what="a new leader",
    )
    producer.send(topic, b"epoch 1", partition=0).get(60)
    producer.close()
    epoch = after.leader_epoch
    with Wire(gateway_address(cluster, after.leader)) as wire:
        codes = {}
        for label, e in (("stale", epoch - 1), ("future", epoch + 1), ("current", epoch), ("none", -1)):
            codes[label] = partitions_of(wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, e)]})))[0].error_code
        assert codes == {"stale": 74, "future": 75, "current": 0, "none": 0}
        listed = wire.call(
            build_request(
                LIST_OFFSETS,
                7,
                replica_id=-1,
                isolation_level=0,
                topics=[
                    {
                        "name": topic,
                        "partitions": [{"partition_index": 0, "current_leader_epoch": epoch - 1, "timestamp": -1}],
                    }
                ],
            )  # fmt: skip
        )
        assert listed.topics[0].partitions[0].error_code == 74
        # Where the old epoch ended: the first offset of the new one (KIP-320).
        ended = (
            wire.call(
                build_request(
                    OFFSET_FOR_LEADER_EPOCH,
                    4,
                    replica_id=-1,
                    topics=[
                        {
                            "topic": topic,
                            "partitions": [
                                {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": before.leader_epoch}
                            ],
                        }
                    ],
                )  # fmt: skip
            )
            .topics[0]
            .partitions[0]
        )
        assert (ended.error_code, ended.leader_epoch, ended.end_offset) == (0, before.leader_epoch, 1)
    # The old leader's listener (its host started again) no longer serves the partition.
    if before.leader != after.leader:
        wait_for(lambda: gateway_address(cluster, before.leader)[1] > 0, 90, what="the old leader listed again")
        with Wire(gateway_address(cluster, before.leader)) as wire:
            answer = wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, -1)]}))
            assert partitions_of(answer)[0].error_code == 6


def test_list_offsets_earliest_latest_max_timestamp_and_by_time(cluster, admin, new_topic):
    topic = new_topic(partitions=1)
    producer = cluster.producer()
    # Recent timestamps: the session cluster checks retention (7 days) every second.
    base = int(time.time() * 1000) - 60_000
    for i, ts in enumerate([base + 1_000, base + 5_000, base + 3_000, base + 4_000]):
        producer.send(topic, b"%d" % i, partition=0, timestamp=ts).get(30)
    producer.close()
    admin.delete_records({TopicPartition(topic, 0): 1})
    with Wire(leader_address(cluster, topic, 0)) as wire:

        def ask(timestamp: int):
            p = (
                wire.call(
                    build_request(
                        LIST_OFFSETS,
                        7,
                        replica_id=-1,
                        isolation_level=0,
                        topics=[{"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}],
                    )
                )
                .topics[0]
                .partitions[0]
            )
            assert p.error_code == 0, p
            return p.offset, p.timestamp

        assert ask(-2) == (1, -1)  # earliest: the log start, after DeleteRecords
        assert ask(-1) == (4, -1)  # latest: the high watermark
        assert ask(-3) == (1, base + 5_000)  # the record with the largest timestamp (KIP-734)
        assert ask(base + 3_500) == (1, base + 5_000)  # the first at or after it
        assert ask(base + 9_999) == (-1, -1)  # later than every record


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(cluster, one_broker_topic, bootstrap):
    topic = one_broker_topic
    txn = cluster.producer(transactional_id=f"gateway-rc-{topic}")
    txn.init_transactions()
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True)):
        txn.begin_transaction()
        for v in values:
            txn.send(topic, v, partition=0)
        txn.flush()
        txn.commit_transaction() if commit else txn.abort_transaction()
    txn.begin_transaction()
    txn.send(topic, b"open", partition=0)
    txn.flush()  # left open: the LSO stays before it
    try:
        with Wire(gateway_address(cluster, 0)) as wire:
            committed = partitions_of(wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, -1)]}, isolation=1)))[0]
            uncommitted = partitions_of(wire.call(fetch_request(12, {topic: [(0, 0, 1 << 20, -1)]}, isolation=0)))[0]
        assert committed.last_stable_offset < committed.high_watermark == uncommitted.high_watermark
        headers = [read_header(committed.records, pos) for pos, _ in batch_boundaries(committed.records)]
        assert headers[-1].last_offset < committed.last_stable_offset
        aborted_batch = next(h for h in headers if h.base_offset > 0 and not h.is_control and h.base_offset >= 3)
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [
            (aborted_batch.producer_id, aborted_batch.base_offset)
        ]
        assert uncommitted.aborted_transactions is None and len(uncommitted.records) > len(committed.records)
        # A Kafka client's read_committed consumer sees the committed records only.
        seen = _read_values(bootstrap, topic, "read_committed", 3)
        assert seen == [b"c1", b"c2", b"c3"]
        assert set(_read_values(bootstrap, topic, "read_uncommitted", 6)) == {
            b"c1",
            b"c2",
            b"a1",
            b"a2",
            b"c3",
            b"open",
        }
    finally:
        txn.abort_transaction()
        txn.close()


def _read_values(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkTopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "rc", "enable.auto.commit": False, "isolation.level": isolation}
    )
    try:
        consumer.assign([CkTopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        wait_for(
            lambda: (
                values.extend(m.value() for m in consumer.consume(100, 0.5) if m.error() is None)
                or len(values) >= expected
            ),
            timeout=30,
            what=f"{expected} {isolation} records",
        )
        # Nothing more arrives (the aborted and open records stay filtered out).
        values.extend(m.value() for m in consumer.consume(100, 1.0) if m.error() is None)
        return values
    finally:
        consumer.close()


def test_sequential_fetches_read_the_log_exactly_through_seeks(cluster, one_broker_topic):
    walk_the_log(cluster, one_broker_topic, 0)


def walk_the_log(cluster, topic: str, broker: int) -> None:
    """Fetch partition 0 of ``topic`` (led by ``broker``) from broker ``broker``'s listener in
    small steps, with seeks back and another size: every answer is the log's bytes there
    (the read-ahead a listener keeps for another host's partition must never show)."""
    producer = cluster.producer(batch_size=2048, linger_ms=0)
    for i in range(600):
        producer.send(topic, b"%05d" % i + b"x" * 200, partition=0)
    producer.flush()
    producer.close()
    with Wire(gateway_address(cluster, broker)) as wire:

        def read(offset: int, limit: int) -> bytes:
            part = partitions_of(wire.call(fetch_request(12, {topic: [(0, offset, limit, -1)]})))[0]
            assert part.error_code == 0 and part.high_watermark == 600
            return bytes(part.records)

        full = read(0, 10 << 20)
        assert len(batch_boundaries(full)) > 20
        starts = {read_header(full, pos).base_offset: pos for pos, _ in batch_boundaries(full)}

        def walk(offset: int, steps: int) -> int:
            """Fetch ``steps`` times from ``offset`` in 5 KB steps; each answer must be the log's bytes there."""
            for _ in range(steps):
                chunk = read(offset, 5000)
                pos = starts[offset]
                assert chunk == full[pos : pos + len(chunk)] and chunk
                bounds = batch_boundaries(chunk)
                offset = read_header(chunk, bounds[-1][0]).next_offset
            return offset

        middle = walk(0, 5)
        # A seek back drops the read-ahead; reading on from there is exact again.
        back = sorted(o for o in starts if o < middle)[1]
        walk(back, 4)
        # As does a different partition size for the same offset.
        assert read(back, 100) == full[starts[back] : starts[back] + batch_boundaries(full[starts[back] :])[0][1]]
        offset = walk(back, 3)
        while offset < 600:
            offset = walk(offset, 1)
