"""The listener's process: a broker's Kafka listener runs in one of its host actors (the
broker's one host; with the replica placement, a host of its own that holds no replica).
When that process dies the broker is listed no more, the controller starts the host again,
it listens again by itself and registers its new address, and Kafka clients follow it there,
kill after kill. Under each placement of the failover cluster (a cluster of its own)."""

from __future__ import annotations

import os
import signal
import time

import ray

from tests.helpers import listener_stats, wait_for

KILLS = 3


def _produce_and_fetch(cluster, topic: str, value: bytes) -> bool:
    """Whether confluent-kafka, bootstrapping from the brokers' current addresses, writes
    ``value`` to partition 0 and reads it back."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    delivered: list = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "message.timeout.ms": 10000})
    producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: delivered.append((err, msg)))
    producer.flush(15)
    if not delivered or delivered[0][0] is not None:
        return False
    offset = delivered[0][1].offset()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "kill-test"})
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for message in consumer.consume(1, 0.5):
                if message.error() is None:
                    return message.value() == value
    finally:
        consumer.close()
    return False


def _listed(cluster, broker: int) -> tuple[str, int] | None:
    """Where Metadata says broker ``broker``'s listener is (None: the broker is not listed)."""
    for b in cluster.metadata([]).brokers:
        if b.broker_id == broker and b.alive and b.port > 0:
            return b.host, b.port
    return None


def test_a_listener_process_killed_again_and_again_listens_again_each_time(failover_cluster, failover_topic):
    """The process serving a partition leader's broker listener is killed (SIGKILL) again
    and again: each time Metadata stops naming the broker (a client is never sent to the dead
    address), a new host listens and registers within a deadline, Ray lists it under the
    broker's name, and a real Kafka client produces and fetches through the brokers' current
    addresses."""
    cluster = failover_cluster
    topic = failover_topic(partitions=1, replication_factor=3)
    assert _produce_and_fetch(cluster, topic, b"before the kills")
    for kill in range(KILLS):
        broker = cluster.metadata([topic]).topics[topic].partitions[0].leader
        stats = listener_stats(cluster, broker)
        assert stats["listening"] and tuple(stats["address"]) == _listed(cluster, broker)
        os.kill(stats["pid"], signal.SIGKILL)
        listed: list = []

        def replaced(old=stats, listed=listed):
            listed.append(_listed(cluster, old["broker_id"]))
            now = listener_stats(cluster, old["broker_id"], timeout_s=10)
            return now["pid"] != old["pid"] and now["listening"] and tuple(now["address"]) == listed[-1]

        wait_for(replaced, 90, 0.05, f"a new listener of broker {broker} registered after kill {kill + 1}")
        # Between the death and the new registration the broker was not listed (the new
        # host starts only once the controller has handled the death).
        assert None in listed, listed
        names = {
            a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == cluster.namespace
        }
        assert f"broker|{broker}" in names
        value = b"after kill %d" % kill
        wait_for(
            lambda v=value: _produce_and_fetch(cluster, topic, v),
            timeout=90,
            interval=0.5,
            what=f"produce and fetch through the listeners after kill {kill + 1}",
        )
