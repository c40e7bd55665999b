"""The gateway actor's own life: a gateway whose process dies is restarted by Ray, listens
again and registers its new address, and Kafka clients follow it there."""

from __future__ import annotations

import ray

from actors.gateway.actor import gateway_actor_name
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
