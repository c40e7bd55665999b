"""The gateway actor's own life: a gateway whose process dies is restarted by Ray, listens
again by itself and registers its new address, and Kafka clients follow it there."""

from __future__ import annotations

import os
import signal
import time

import ray

from actors.names import gateway_actor_name
from tests.gateway.clients import Confluent, Rec
from tests.helpers import wait_for


def test_a_crashed_gateway_comes_back_and_clients_find_it(cluster, admin, new_topic):
    topic = new_topic(partitions=1)
    leader = cluster.metadata([topic]).topics[topic].partitions[0].leader
    handle = ray.get_actor(gateway_actor_name(leader), namespace=cluster.namespace)
    before = ray.get(handle.stats.remote())
    old_address = next((b.host, b.port) for b in cluster.metadata([]).brokers if b.broker_id == leader)
    assert tuple(before["address"]) == old_address

    ray.kill(handle, no_restart=False)  # as if its process crashed: Ray restarts it

    def registered_anew():
        stats = ray.get(handle.stats.remote(), timeout=10)
        now = next((b.host, b.port) for b in cluster.metadata([]).brokers if b.broker_id == leader)
        return stats["pid"] != before["pid"] and stats["address"] is not None and tuple(stats["address"]) == now

    wait_for(registered_anew, timeout=60, what="the restarted gateway registered")
    # A client bootstrapping from the current list reaches the partition through it.
    client = Confluent()
    client.produce(cluster.bootstrap_servers, topic, [Rec(b"k", b"after the restart", (), None)], "none")
    got = client.consume(cluster.bootstrap_servers, topic, {0: 0}, 1)
    assert [g.value for g in got] == [b"after the restart"]


KILLS = 6


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


def test_a_gateway_killed_again_and_again_listens_again_each_time(cluster, new_topic):
    """The worker process of a gateway is killed (SIGKILL) again and again; each time Ray
    restarts it and it must listen again by itself, within a deadline, for a real Kafka
    client to produce and fetch through it (a start task that Ray fails while the restarted
    actor is being created must not leave its port closed)."""
    topic = new_topic(partitions=1)
    leader = cluster.metadata([topic]).topics[topic].partitions[0].leader
    handle = ray.get_actor(gateway_actor_name(leader), namespace=cluster.namespace)
    assert _produce_and_fetch(cluster, topic, b"before the kills")
    for kill in range(KILLS):
        pid = ray.get(handle.stats.remote(), timeout=30)["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda old=pid: ray.get(handle.stats.remote(), timeout=10)["pid"] != old, 60, 0.2, "a restart")
        value = b"after kill %d" % kill
        wait_for(
            lambda v=value: _produce_and_fetch(cluster, topic, v),
            timeout=60,
            interval=0.5,
            what=f"produce and fetch through the gateway after kill {kill + 1}",
        )
        assert ray.get(handle.stats.remote(), timeout=10)["listening"]
