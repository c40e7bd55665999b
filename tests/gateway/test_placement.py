"""Replica placement (``rayqueue.broker.placement``) seen from outside, under each placement of
the failover cluster: Ray lists the host actors the setting says (one per broker, or one per
replica, named after their broker and slot), ``rayqueue status`` says the placement, and a
Kafka client's transactions commit and abort across the hosts."""

from __future__ import annotations

import ray
from typer.testing import CliRunner

from actors.broker.placement import HostPlacement
from actors.types import TopicPartition
from rayqueue.cli import app
from tests.gateway.test_transactions import _producer
from tests.helpers import wait_for


def _host_names(namespace: str) -> set[str]:
    """The names of the live host actors in ``namespace``, as ``ray list actors`` shows them."""
    actors = ray.util.list_named_actors(all_namespaces=True)
    return {a["name"] for a in actors if a["namespace"] == namespace and a["name"].startswith("broker|")}


def test_ray_lists_the_host_actors_the_placement_says(failover_cluster, failover_admin, failover_topic):
    topic = failover_topic(2, 3)
    info = failover_cluster.describe()
    setting = HostPlacement.from_config({"rayqueue.broker.placement": info["placement"]})
    expected = {
        setting.host_for(b, name, p.partition).name
        for name, meta in failover_admin.describe_topics(failover_admin.list_topics(include_internal=True)).items()
        for p in meta.partitions
        for b in p.replicas
    }
    assert any(topic in name for name in expected) == (info["placement"] == "replica")
    wait_for(lambda: _host_names(failover_cluster.namespace) == expected, 60, what="the host actors")
    assert info["host_actors"] == len(expected)
    # Every replica is in the host the setting names.
    ref = failover_admin.replica_handles(TopicPartition(topic, 1))
    for broker, handle in ref.items():
        assert ray.get(handle.host.describe_host.remote())["name"] == str(setting.host_for(broker, topic, 1))
    status = CliRunner().invoke(app, ["status", "--name", failover_cluster.namespace])
    assert status.exit_code == 0, status.output
    assert f"in {len(expected)} host actors" in status.output
    assert f"Placement:         {info['placement']}" in status.output


def test_a_deleted_topics_replica_hosts_go_with_it(failover_cluster, failover_admin, failover_topic):
    """With one actor per replica, deleting a topic stops its replicas' actors; with one per
    broker the brokers' hosts stay."""
    before = _host_names(failover_cluster.namespace)
    topic = failover_topic(1, 3)
    wait_for(lambda: _host_names(failover_cluster.namespace) >= before, 30, what="the hosts")
    failover_admin.delete_topic(topic)
    wait_for(lambda: _host_names(failover_cluster.namespace) == before, 60, what="the topic's hosts gone")


def test_kafka_client_transactions_commit_and_abort_across_hosts(failover_topic, failover_bootstrap):
    """confluent-kafka's transactions over a topic of three partitions (each in its own actor
    under the replica placement): the committed records are read once, the aborted never."""
    topic = failover_topic(3, 3)
    producer = _producer(failover_bootstrap, f"{topic}-txn")
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=b"commit-%d" % i, partition=i % 3)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"abort-%d" % i, partition=i % 3)
    producer.flush(30)
    producer.abort_transaction(30)
    got = [v for p in range(3) for v in _read_committed_partition(failover_bootstrap, topic, p)]
    assert sorted(got) == sorted(b"commit-%d" % i for i in range(6))


def _read_committed_partition(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{partition}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([CTP(topic, partition, 0)])
        got: list[bytes] = []

        def two() -> bool:
            got.extend(m.value() for m in consumer.consume(100, 0.2) if not m.error())
            return len(got) >= 2

        wait_for(two, timeout=60, what=f"the committed records of {topic}-{partition}")
        got.extend(m.value() for m in consumer.consume(100, 1.0) if not m.error())  # nothing more may come
        return got
    finally:
        consumer.close()
