"""Replica placement (``rayqueue.broker.placement``) seen from outside, under each placement of
the failover cluster: Ray lists the host actors the setting says (one per broker, or one per
replica, named after their broker and slot), ``rayqueue status`` says the placement, and a
Kafka client's transactions commit and abort across the hosts; and on a cluster of two hosts
per broker, partitions spread by their stable hash and one host's death moves only its own."""

from __future__ import annotations

import shutil
import tempfile

import pytest
import ray
from typer.testing import CliRunner

from actors.broker.placement import HostId, HostPlacement, Placement, fetcher_id
from actors.types import TopicPartition
from rayqueue.cli import app
from tests.gateway.test_transactions import _producer
from tests.helpers import listener_stats, wait_for


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
    # And each broker's listener host: its one host, or (replica) one that holds no replica.
    expected |= {setting.listener_host(b).name for b in range(3)}
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


@pytest.fixture(scope="module")
def hosts_cluster(ray_session):
    """A 3-broker cluster of its own with two host actors per broker (``hosts``)."""
    import rayqueue
    from tests.helpers import SMALL_INTERNAL_TOPICS

    root = tempfile.mkdtemp(prefix="rayqueue-hosts-")
    handle = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace="rayqueue-hosts",
        rayqueue_broker_placement="hosts",
        rayqueue_broker_num_hosts=2,
        listeners="PLAINTEXT://127.0.0.1:0",
        **SMALL_INTERNAL_TOPICS,
    )
    yield handle
    handle.shutdown(delete_data=True)
    shutil.rmtree(root, ignore_errors=True)


def test_the_listener_calls_its_own_hosts_partitions_directly_and_reads_ahead_from_the_other(hosts_cluster):
    """With two hosts per broker, broker 0's listener runs in its first host: a partition that
    host holds is read by direct calls (no read-ahead: there is no call to overlap), one its
    second host holds by Ray calls, read ahead as a backlog is walked; every answer is the
    log's bytes either way."""
    from tests.gateway.test_fetch import walk_the_log

    admin = hosts_cluster.admin()
    names = {k: next(f"walk-{k}-{i}" for i in range(100) if fetcher_id(f"walk-{k}-{i}", 0, 2) == k) for k in (0, 1)}
    for name in names.values():
        admin.create_topic(name, replica_assignment=[[0]])
    try:
        before = listener_stats(hosts_cluster, 0)
        walk_the_log(hosts_cluster, names[0], 0)
        local = listener_stats(hosts_cluster, 0)
        assert local["local_calls"] > before["local_calls"] + 20
        assert local["remote_calls"] == before["remote_calls"] and local["read_ahead_hits"] == before["read_ahead_hits"]
        walk_the_log(hosts_cluster, names[1], 0)
        remote = listener_stats(hosts_cluster, 0)
        assert remote["remote_calls"] > local["remote_calls"] + 20
        assert remote["read_ahead_hits"] > local["read_ahead_hits"]
    finally:
        for name in names.values():
            admin.delete_topic(name)


def test_two_hosts_per_broker_split_its_partitions_and_one_dying_fails_over_only_its_own(hosts_cluster):
    """``hosts`` with two per broker: each partition's replicas are in the host its stable
    hash names, all six hosts run, a Kafka client reads what the native producer wrote, and
    when one host dies only the partitions it led elect new leaders (the broker's other host
    goes on leading its own)."""
    from confluent_kafka import Consumer

    admin = hosts_cluster.admin()
    topic = "spread"
    admin.create_topic(topic, 8, 3)
    setting = HostPlacement(Placement.HOSTS, 2)
    assert _host_names(hosts_cluster.namespace) == {HostId(b, str(k)).name for b in range(3) for k in range(2)}
    for p in range(8):
        for broker, handle in admin.replica_handles(TopicPartition(topic, p)).items():
            name = ray.get(handle.host.describe_host.remote())["name"]
            assert name == str(setting.host_for(broker, topic, p)) == f"broker {broker} host {fetcher_id(topic, p, 2)}"
    producer = hosts_cluster.producer(acks="all")
    for p in range(8):
        producer.send_many(topic, [b"%d-%d" % (p, i) for i in range(10)], partition=p).get(60)
    consumer = Consumer(
        {"bootstrap.servers": hosts_cluster.bootstrap_servers, "group.id": "spread", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        wait_for(
            lambda: got.extend(m.value() for m in consumer.consume(100, 0.2) if not m.error()) or len(got) >= 80,
            60,
            what="every record",
        )
    finally:
        consumer.close()
    assert sorted(got) == sorted(b"%d-%d" % (p, i) for p in range(8) for i in range(10))

    before = {p.partition: p for p in admin.describe_topics([topic])[topic].partitions}
    victim = setting.host_for(before[0].leader, topic, 0)
    on_victim = {p for p, m in before.items() if setting.host_for(m.leader, topic, p) == victim}
    ray.kill(before[0].leader_handle.host, no_restart=True)
    after = wait_for(
        lambda: (
            (m := {p.partition: p for p in admin.describe_topics([topic])[topic].partitions})
            and all(m[p].leader >= 0 and m[p].leader_epoch > before[p].leader_epoch for p in on_victim)
            and m
        ),
        60,
        what="the dead host's partitions led again",
    )
    assert {p for p in before if after[p].leader_epoch != before[p].leader_epoch} == on_victim
    producer.send_many(topic, [b"after"] * 8, partition=0).get(60)
    producer.close()
