"""The internal topics against clients, on a cluster of this module's
own: launched fresh, and restarted once on the same data.

- Right after launch ``__consumer_offsets`` and ``__transaction_state`` exist with a leader
  for every partition; a client's all-topic Metadata lists them without an error, and a new
  group's first poll through confluent-kafka logs no "not available" error.
- No client writes an internal topic: confluent-kafka through the gateway, rayqueue's native
  producer and a direct replica call with the client origin are refused with
  INVALID_TOPIC_EXCEPTION (17), and nothing is appended.
- Garbage that the coordinators' own path wrote into the internal topics (bad JSON, bad
  UTF-8, truncated values, wrong types) and that was written straight into the metadata log
  does not stop the next start: the cluster comes back, serves the group's offsets and the
  transactional id it had, and each actor reports how many records it skipped.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import shutil
import tempfile

import pytest
import ray

import rayqueue
from actors.group_coordinator import group_key, offset_key
from actors.names import INTERNAL_TOPICS, METADATA_TOPIC, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, offsets_partition_for
from actors.protocol import AppendOrigin, ProduceRequest
from actors.transaction_coordinator import transaction_key
from rayqueue import TopicPartition
from rayqueue.errors import InvalidTopicError
from storage import Log, log_config
from storage.records.builder import RecordBatchBuilder
from tests.gateway.wire import Wire, build_request, parse_bootstrap
from tests.helpers import scrape, wait_for

NAMESPACE = "rayqueue-internal-topics-test"
METADATA_V12, FIND_COORDINATOR = 3, 10
INVALID_TOPIC_EXCEPTION = 17
GROUP, TID = "survivor-group", "survivor-txn"
_ids = itertools.count()
# What librdkafka logs when a partition has no leader or a coordinator is not there yet.
_NOT_AVAILABLE = re.compile(r"leader not available|no leader|coordinator not available|not_available", re.I)


@pytest.fixture(scope="module")
def fresh(ray_session):
    """{"cluster": a freshly launched cluster with gateways, "root": its data}; the restart
    test replaces the cluster."""
    root = tempfile.mkdtemp(prefix="rayqueue-internal-topics-")
    state = {
        "root": root,
        "cluster": rayqueue.launch(log_dirs=root, rayqueue_namespace=NAMESPACE, listeners="PLAINTEXT://127.0.0.1:0"),
    }
    yield state
    state["cluster"].shutdown(delete_data=True)
    shutil.rmtree(root, ignore_errors=True)


def _ends(cluster, topic: str) -> dict[int, int]:
    partitions = len(cluster.metadata([topic]).topics[topic].partitions)
    logs = cluster.admin().describe_partition_logs([TopicPartition(topic, p) for p in range(partitions)])
    return {tp.partition: info.log_end_offset for tp, info in logs.items()}


def _batch(records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    builder = RecordBatchBuilder()
    for key, value in records:
        builder.append(value, key=key)
    return builder.build()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_internal_topics_exist_with_leaders_right_after_launch(fresh):
    cluster = fresh["cluster"]
    meta = cluster.metadata([OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC])
    assert set(meta.topics) == INTERNAL_TOPICS
    for topic in meta.topics.values():
        assert topic.internal and topic.partitions
        assert all(p.leader >= 0 and p.leader_handle is not None for p in topic.partitions), topic
    with Wire(parse_bootstrap(cluster.bootstrap_servers)) as wire:
        answer = wire.call(
            build_request(
                METADATA_V12,
                12,
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )  # fmt: skip
        )
        listed = {t.name: t for t in answer.topics}
        for name in INTERNAL_TOPICS:
            assert listed[name].error_code == 0 and listed[name].is_internal
            assert all(p.error_code == 0 and p.leader_id >= 0 for p in listed[name].partitions)
        found = wire.call(build_request(FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["a-new-group"]))
        assert found.coordinators[0].error_code == 0 and found.coordinators[0].node_id >= 0


def test_a_first_group_poll_sees_no_leader_or_coordinator_errors(fresh):
    from confluent_kafka import Consumer, Producer

    cluster = fresh["cluster"]
    topic = f"first-poll-{next(_ids)}"
    cluster.admin().create_topic(topic, 3, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(9):
        producer.produce(topic, b"v%d" % i, key=b"k%d" % i)
    assert producer.flush(30) == 0
    lines, errors = _Lines(), []
    logger = logging.getLogger("rdkafka.first-poll-test")
    logger.propagate = False
    logger.addHandler(lines)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"first-poll-group-{next(_ids)}",
            "auto.offset.reset": "earliest",
            "debug": "cgrp,topic,metadata",
            "error_cb": errors.append,
        },
        logger=logger,
    )
    try:
        consumer.subscribe([topic])
        got = []
        wait_for(lambda: got.extend(m for m in consumer.consume(9, 0.2) if m.error() is None) or len(got) >= 9,
                 timeout=60, interval=0, what="the group's first records")  # fmt: skip
    finally:
        consumer.close()
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(9))
    assert not errors, errors
    scary = [line for line in lines.lines if _NOT_AVAILABLE.search(line)]
    assert not scary, scary[:5]


@pytest.mark.parametrize("topic", sorted(INTERNAL_TOPICS))
def test_no_client_writes_an_internal_topic(fresh, topic):
    from confluent_kafka import KafkaError, Producer

    cluster = fresh["cluster"]
    before = _ends(cluster, topic)
    # confluent-kafka through the gateway: the record of the issue, refused for every partition.
    reports: list = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "message.timeout.ms": 30000})
    for p in before:
        producer.produce(topic, b"not-json", key=b"not-json", partition=p, on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(60) == 0
    assert len(reports) == len(before)
    assert all(e is not None and e.code() == KafkaError.TOPIC_EXCEPTION for e in reports), reports
    # rayqueue's native producer, which calls the replica itself.
    native = cluster.producer(linger_ms=0)
    try:
        with pytest.raises(InvalidTopicError):
            native.send(topic, b"not-json", key=b"not-json", partition=0).get(60)
    finally:
        native.close()
    # A direct call with the client's origin, as the enum or as its value.
    part = cluster.metadata([topic]).topics[topic].partitions[0]
    for origin in (AppendOrigin.CLIENT, "client"):
        request = ProduceRequest(_batch([(b"k", b"v")]), -1, 30000, part.leader_epoch, origin)
        with pytest.raises(InvalidTopicError) as refused:
            ray.get(part.leader_handle.produce.remote(request), timeout=60)
        assert refused.value.code == INVALID_TOPIC_EXCEPTION
    assert _ends(cluster, topic) == before  # nothing appended


def _write_as_coordinator(cluster, topic: str, partition: int, records) -> None:
    """Append ``records`` the way the coordinators do (their origin): garbage that only a
    coordinator's own path, or an older version, could have written."""
    part = cluster.metadata([topic]).topics[topic].partitions[partition]
    request = ProduceRequest(_batch(records), -1, 30000, part.leader_epoch, AppendOrigin.COORDINATOR)
    ray.get(part.leader_handle.produce.remote(request), timeout=60)


def _skipped_metric(port: int) -> dict[str, float]:
    """This cluster's ``ray_rayqueue_internal_records_skipped_total`` by topic, as scraped."""
    found: dict[str, float] = {}
    for sample in scrape(port).get("ray_rayqueue_internal_records_skipped_total", []):
        if sample.labels.get("cluster") == NAMESPACE:
            topic = sample.labels["topic"]
            found[topic] = found.get(topic, 0) + sample.value
    return found


def test_garbage_in_internal_topics_and_the_metadata_log_does_not_stop_a_restart(fresh, metrics_export_port):
    cluster = fresh["cluster"]
    topic = f"kept-{next(_ids)}"
    cluster.admin().create_topic(topic, 1, 1)
    tp = TopicPartition(topic, 0)
    # A group with a committed offset, and a transactional id with a committed transaction.
    consumer = cluster.consumer(group_id=GROUP, enable_auto_commit=False)
    consumer.assign([tp])
    consumer.commit({tp: rayqueue.OffsetAndMetadata(7)})
    consumer.close()
    producer = cluster.producer(transactional_id=TID)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"in a transaction")
    producer.commit_transaction()
    producer.close()
    # Its markers follow the commit's answer: wait for them before the restarts below.
    wait_for(lambda: cluster.admin().describe_transactions([TID])[TID].state == "CompleteCommit", 60)
    epoch_before = cluster.admin().describe_transactions([TID])[TID].producer_epoch

    offsets_partitions = len(cluster.metadata([OFFSETS_TOPIC]).topics[OFFSETS_TOPIC].partitions)
    garbage_offsets = [
        (b"not-json", b"{}"),
        (b"\xff\xfe", b"{}"),
        (offset_key(GROUP, tp), b'{"offset": 9'),  # truncated
        (offset_key(GROUP, tp), b'{"offset": "9"}'),  # the wrong type
        (group_key(GROUP), b'{"generation": []}'),
    ]
    _write_as_coordinator(cluster, OFFSETS_TOPIC, offsets_partition_for(GROUP, offsets_partitions), garbage_offsets)
    state_partitions = len(cluster.metadata([TRANSACTION_STATE_TOPIC]).topics[TRANSACTION_STATE_TOPIC].partitions)
    garbage_state = [
        (b"\xc3\x28", b"{}"),
        (transaction_key(TID), b'{"producer_id": '),
        (transaction_key(TID), json.dumps({"producer_id": "x", "producer_epoch": 0, "timeout_ms": 1}).encode()),
    ]
    # (The transaction coordinator picks a partition for an id as the group coordinator does.)
    _write_as_coordinator(cluster, TRANSACTION_STATE_TOPIC, offsets_partition_for(TID, state_partitions), garbage_state)
    cluster.shutdown()

    # Straight into the controller's metadata log, with storage/ (the cluster is down).
    metadata_log = Log(f"{fresh['root']}/{METADATA_TOPIC}-0", log_config({}))
    garbage_metadata = [b"not-json", b'{"type": "broker", "broker_id": "zero"}', b'{"type": "from-the-future"}']
    for value in garbage_metadata:
        metadata_log.append(_batch([(b"junk", value)]))
    metadata_log.close()

    cluster = fresh["cluster"] = rayqueue.launch(
        log_dirs=fresh["root"], rayqueue_namespace=NAMESPACE, listeners="PLAINTEXT://127.0.0.1:0"
    )
    assert ray.get(cluster.group_coordinator.skipped_records.remote(), timeout=60) == len(garbage_offsets)
    assert ray.get(cluster.transaction_coordinator.skipped_records.remote(), timeout=60) == len(garbage_state)
    assert cluster.describe()["metadata_records_skipped"] == len(garbage_metadata)
    # And the metric counts them, by topic.
    expected = {OFFSETS_TOPIC: len(garbage_offsets), TRANSACTION_STATE_TOPIC: len(garbage_state)}
    expected[METADATA_TOPIC] = len(garbage_metadata)
    wait_for(
        lambda: _skipped_metric(metrics_export_port) == expected,
        timeout=90,
        interval=0.5,
        what=f"ray_rayqueue_internal_records_skipped_total = {expected}",
    )
    # The group's offset and the transactional id are served as they were.
    assert cluster.admin().list_group_offsets(GROUP)[tp].offset == 7
    assert cluster.admin().describe_transactions([TID])[TID].state == "CompleteCommit"
    producer = cluster.producer(transactional_id=TID)
    producer.init_transactions()  # the same id goes on, fencing the earlier epoch
    assert cluster.admin().describe_transactions([TID])[TID].producer_epoch == epoch_before + 1
    producer.begin_transaction()
    producer.send(topic, b"after the restart")
    producer.commit_transaction()
    producer.close()
    consumer = cluster.consumer(group_id=GROUP, isolation_level="read_committed")
    consumer.assign([tp])
    assert consumer.committed([tp])[tp].offset == 7
    consumer.close()
