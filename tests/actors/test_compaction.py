"""Compacted topics on the broker: replicas run the cleaner in the background."""

from __future__ import annotations

import ray

from rayqueue import TopicPartition
from tests.helpers import consume_all, wait_for


def test_replicas_compact_a_compacted_topic_in_the_background(cluster, new_topic):
    topic = new_topic(cleanup_policy="compact", segment_bytes=4096, min_cleanable_dirty_ratio=0.01)
    producer = cluster.producer(linger_ms=0, batch_size=1)
    for round_ in range(30):
        for key in range(10):
            producer.send(topic, f"{key}:{round_}".encode(), key=f"k{key}".encode())
        producer.flush(60)
    producer.send(topic, None, key=b"k0").get(60)  # a tombstone for k0
    leader = cluster.metadata([topic]).topics[topic].partitions[0].leader_handle
    size_before = ray.get(leader.describe.remote())["size_bytes"]
    # The replica's background loop notices the dirty log and cleans it.
    wait_for(lambda: ray.get(leader.describe.remote())["size_bytes"] < size_before / 2, 60, what="background cleaning")
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    end = consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    assert end == 301  # offsets never change; cleaning leaves holes
    records = []
    while not records or records[-1].offset < end - 1:
        records.extend(consume_all(consumer, 1))
    latest = {}
    for r in records:
        latest[r.key] = r.value
    # Every key's latest value survived; older ones (in cleaned segments) are gone.
    assert latest[b"k0"] is None
    for key in range(1, 10):
        assert latest[f"k{key}".encode()] == f"{key}:29".encode()
    assert len(records) < 301
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
