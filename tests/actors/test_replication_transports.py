"""Replication's two transports in a Ray cluster: the failover tests again with
``rayqueue.replica.fetch.transport=ray`` (followers calling the leader host's actor; the
default, Kafka's Fetch over the inter-broker listener, runs every failover test of
test_replication.py and test_failover.py under both placements), and a cluster whose
inter-broker listener wants SASL and an authorizer, replicating as Kafka's brokers do there.

The imported tests run here on this module's ``failover_cluster``, a 3-broker cluster of its
own with the Ray transport."""

from __future__ import annotations

import shutil
import tempfile

import pytest
import ray

from rayqueue import TopicPartition
from tests.actors.test_replication import (  # noqa: F401 - collected here, on this module's cluster
    test_divergent_old_leader_truncates_to_the_new_leaders_log,
    test_follower_killed_while_producing_truncates_catches_up_and_rejoins,
    test_follower_killed_while_the_leader_waits_for_it,
    test_leader_killed_new_leader_from_isr_and_old_one_rejoins,
)
from tests.gateway.test_failover import test_acknowledged_records_survive_a_leader_kill  # noqa: F401
from tests.helpers import SMALL_INTERNAL_TOPICS, wait_for


@pytest.fixture(scope="module")
def failover_cluster(ray_session):
    """A 3-broker cluster whose followers fetch by Ray calls (gateways on free ports)."""
    import rayqueue

    root = tempfile.mkdtemp(prefix="rayqueue-failover-ray-transport-")
    handle = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace="rayqueue-failover-ray-transport",
        rayqueue_replica_fetch_transport="ray",
        log_retention_check_interval_ms=1000,
        listeners="PLAINTEXT://127.0.0.1:0",
        **SMALL_INTERNAL_TOPICS,
    )
    yield handle
    handle.shutdown(delete_data=True)
    shutil.rmtree(root, ignore_errors=True)


def _hosts(cluster, topic: str) -> list[dict]:
    refs = cluster.admin().replica_handles(TopicPartition(topic, 0)).values()
    return [ray.get(ref.host.describe_host.remote(), timeout=60) for ref in refs]


def test_followers_on_the_ray_transport_fetch_by_ray_calls(failover_cluster, failover_topic):
    topic = failover_topic(partitions=1, replication_factor=3)
    producer = failover_cluster.producer(acks="all")
    try:
        producer.send(topic, b"v", partition=0).get(60)
    finally:
        producer.close(30)
    hosts = _hosts(failover_cluster, topic)
    assert sum(h["replica_fetches_served"] for h in hosts) > 0
    assert all(h["inter_broker_fetches_served"] == 0 and h["inter_broker_connects"] == 0 for h in hosts)


def test_brokers_log_in_to_a_sasl_inter_broker_listener_as_its_super_user(ray_session, tmp_path):
    """Two listeners: clients on PLAINTEXT, brokers on INTERNAL (SASL PLAIN) as User:broker,
    a super user of the cluster's authorizer; an RF 3 topic written with acks=all reaches
    every replica through the inter-broker listeners."""
    import rayqueue
    from rayqueue.acl import STANDARD_AUTHORIZER

    users = tmp_path / "users.toml"
    users.write_text('broker = "broker-secret"\n')
    cluster = rayqueue.launch(
        log_dirs=str(tmp_path / "data"),
        rayqueue_namespace="rayqueue-sasl-inter-broker",
        listeners="PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        inter_broker_listener_name="INTERNAL",
        sasl_mechanism_inter_broker_protocol="PLAIN",
        sasl_enabled_mechanisms="PLAIN",
        rayqueue_sasl_plain_users_file=str(users),
        **{
            "listener.name.internal.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required"
                ' username="broker" password="broker-secret";'
            )
        },
        authorizer_class_name=STANDARD_AUTHORIZER,
        super_users="User:broker",
        **SMALL_INTERNAL_TOPICS,
    )
    try:
        admin = cluster.admin()
        admin.create_topic("replicated", 1, 3, configs={"min.insync.replicas": 3})
        producer = cluster.producer(acks="all")
        try:
            for i in range(20):
                producer.send("replicated", str(i).encode(), partition=0).get(60)
        finally:
            producer.close(30)
        refs = admin.replica_handles(TopicPartition("replicated", 0)).values()

        def everywhere() -> bool:
            return all(ray.get(ref.describe.remote(), timeout=60)["log_end_offset"] == 20 for ref in refs)

        wait_for(everywhere, timeout=60, what="every replica has the 20 records")
        hosts = _hosts(cluster, "replicated")
        assert sum(h["inter_broker_fetches_served"] for h in hosts) > 0
    finally:
        cluster.shutdown(delete_data=True)
