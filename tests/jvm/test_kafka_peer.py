"""The Kafka peer of the benchmarks (scripts/kafka_peer.py) and the smallest workload of
scripts/bench_vs_kafka.py against both systems, so that the harness cannot rot.

Real Kafka (the pinned jars, KRaft) on free ports; skipped without java/javac/mvn through the
JVM fixtures, failed under CI. The figures themselves are the benchmark's business: here only
that every path runs, reads back what it wrote and reports a figure for both systems.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import bench_clients as bc  # noqa: E402
import kafka_peer  # noqa: E402


@pytest.fixture(scope="module")
def kafka_jars(jvm_classpath):
    """The broker's classpath (skips without Java or Maven, fails under CI)."""
    jvm_classpath(kafka_peer.KAFKA_SET)
    return kafka_peer.classpath()


@pytest.fixture(scope="module")
def kafka(kafka_jars):
    """One single-node Kafka for the module."""
    with kafka_peer.KafkaPeer(1) as peer:
        yield peer


def _read_back(bootstrap: str, topic: str, count: int, partitions: int = 1) -> list[bytes]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": bc.unique("test")})
    consumer.assign([CkTP(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    try:
        for _ in range(600):
            for m in consumer.consume(count - len(got), 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


def test_single_node_answers_and_stops_clean(kafka_jars):
    peer = kafka_peer.KafkaPeer(1)
    with peer:
        pids = peer.pids()
        root = peer.root
        assert len(pids) == 1 and root is not None and root.exists()
        assert (peer.nodes[0].directory / "data" / "meta.properties").exists(), "the log dir was not formatted"
        topic = bc.unique("peer")
        bc.create_topic(peer.bootstrap_servers, topic, 2, 1)
        values = [b"v%d" % i for i in range(100)]
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": peer.bootstrap_servers, "acks": "all"})
        for i, v in enumerate(values):
            producer.produce(topic, v, partition=i % 2)
        assert producer.flush(60) == 0
        assert sorted(_read_back(peer.bootstrap_servers, topic, 100, 2)) == sorted(values)
        # Kafka's own log is written (the kafka set carries the SLF4J binding).
        assert "Kafka Server started" in peer.nodes[0].server_log.read_text()
    import psutil

    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert not root.exists(), "the peer's directories were left behind"
    assert peer.pids() == []


def test_three_nodes_replicate(kafka_jars):
    with kafka_peer.KafkaPeer(3) as peer:
        assert len(peer.pids()) == 3
        assert len(set(peer.bootstrap_servers.split(","))) == 3
        topic = bc.unique("rf3")
        took = bc.create_topic(peer.bootstrap_servers, topic, 3, 3)
        assert took > 0
        from confluent_kafka.admin import AdminClient

        meta = AdminClient({"bootstrap.servers": peer.bootstrap_servers}).list_topics(topic, timeout=30)
        assert {len(p.replicas) for p in meta.topics[topic].partitions.values()} == {3}
        assert {p.leader for p in meta.topics[topic].partitions.values()} <= {1, 2, 3}
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": peer.bootstrap_servers, "acks": "all"})
        for i in range(30):
            producer.produce(topic, b"%d" % i, partition=i % 3)
        assert producer.flush(60) == 0
        assert len(_read_back(peer.bootstrap_servers, topic, 30, 3)) == 30


def test_a_configuration_kafka_refuses_raises_and_leaves_nothing(kafka_jars):
    # A controller listener name that no listener has: kafka-storage format refuses it.
    peer = kafka_peer.KafkaPeer(1, overrides={"controller.listener.names": "NOSUCH"})
    with pytest.raises(kafka_peer.KafkaPeerError, match="format failed") as info:
        peer.start()
    assert "controller.listener.names" in str(info.value)
    assert peer.pids() == [] and peer.root is None


def test_a_taken_port_makes_the_node_exit_and_the_peer_tries_fresh_ports(kafka_jars, monkeypatch):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    real = kafka_peer.free_port
    handed = []

    def first_busy() -> int:
        # The first node's PLAINTEXT port is one somebody else holds; every later port is free.
        handed.append(busy if not handed else real())
        return handed[-1]

    monkeypatch.setattr(kafka_peer, "free_port", first_busy)
    peer = kafka_peer.KafkaPeer(1)
    try:
        with peer:
            assert peer.nodes[0].port != busy and len(peer.pids()) == 1
            bc.create_topic(peer.bootstrap_servers, bc.unique("retry"), 1, 1)
    finally:
        taken.close()
    assert handed[0] == busy and len(handed) >= 4  # two ports per try, two tries


def test_smallest_quick_workload_on_both_systems(kafka, cluster):
    """Workloads 1-3 at 100 B, acks=1, one round: confluent-kafka, Kafka's perf tools, and
    rayqueue's native clients, each against Kafka and against rayqueue's gateways."""
    import bench_vs_kafka as bvk

    sides = [bvk.kafka_side(kafka), bvk.rayqueue_side(cluster, kafka.pids)]
    figures = bvk.Figures()
    scale = bvk.Scale(rounds=1, records_100b=3_000)
    bvk.throughput(figures, sides, scale, "1", 1, sizes=((100, "100B"),))
    report = {name: fig.as_json() for name, fig in figures.by_name.items()}
    assert set(report) == {
        f"{client}.100B.acks1"
        for client in (
            "ck.produce",
            "ck.consume",
            "java.produce",
            "java.consume",
            "native.send",
            "native.send_many",
            "native.consume",
        )
    }
    for name, fig in report.items():
        assert fig["errors"] == [], (name, fig["errors"])
        for side in ("kafka", "rayqueue"):
            assert len(fig[side]) == 1 and fig[side][0] > 0, (name, side, fig[side])
        assert fig["ratio"]["median"] > 0
    json.dumps(report)  # the JSON line can carry it
    # Rayqueue's processes are found (Ray's own and the cluster's actors), Kafka's JVM is not among them.
    roles = sides[1].pids()
    assert "raylet" in roles and "gcs_server" in roles and "ray::BrokerHost" in roles
    assert not set(kafka.pids()) & {pid for pids in roles.values() for pid in pids}
    assert bvk.pss_mb(kafka.pids()) > 50
