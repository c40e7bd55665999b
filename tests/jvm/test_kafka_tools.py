"""Kafka's own command-line tools (Kafka 4.x, kafka-tools) against rayqueue's gateways.

Each tool runs as its bin/*.sh script runs it: ``java -cp <the kafka set's classpath> <main
class> args`` (``tests/jvm/jvm.py``'s KAFKA_TOOLS). What a tool prints is checked against
what rayqueue holds, as its own Admin, producer and consumer see it; what a tool changes
(topics, configs, offsets, records, leaders) is checked the same way.
"""

from __future__ import annotations

import itertools
import json
import re
import time

import pytest

from actors.types import TopicPartition
from tests.helpers import rotate_preferred_leader, wait_for
from tests.jvm.jvm import KAFKA_TOOLS, run_java, start_java

_ids = itertools.count()


@pytest.fixture(scope="module")
def tool(jvm_classpath):
    """``tool(name, *args, stdin=None) -> stdout``: run one of Kafka's tools (exit 0 required)."""
    classpath = jvm_classpath("kafka")

    def run(name: str, *args: str, stdin: str | None = None) -> str:
        return run_java(classpath, KAFKA_TOOLS[name], list(args), stdin=stdin).stdout

    return run


def _unique(prefix: str) -> str:
    return f"tools-{prefix}-{next(_ids)}-{int(time.time() * 1000) % 100000}"


def _rows(text: str) -> list[list[str]]:
    """The whitespace-separated rows of a table the tools print (blank lines dropped)."""
    return [line.split() for line in text.splitlines() if line.strip()]


def _ends(admin, topic: str, partitions: int, spec: int = -1) -> dict[int, int]:
    found = admin.list_offsets({TopicPartition(topic, p): spec for p in range(partitions)})
    return {tp.partition: o.offset for tp, o in found.items()}


def test_kafka_topics_create_describe_alter_delete(tool, bootstrap, admin, cluster):
    topic = _unique("topics")
    out = tool(
        "kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
        "--partitions", "2", "--replication-factor", "3", "--config", "retention.ms=86400000",
    )  # fmt: skip
    assert f"Created topic {topic}." in out
    meta = admin.describe_topics([topic])[topic]
    assert len(meta.partitions) == 2 and all(len(p.replicas) == 3 for p in meta.partitions)
    assert admin.describe_configs(topic)["retention.ms"] == (86400000, "DYNAMIC_TOPIC_CONFIG")

    tool("kafka-topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic, "--partitions", "4")
    meta = admin.describe_topics([topic])[topic]
    assert len(meta.partitions) == 4

    out = tool("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    head, *parts = out.strip().splitlines()
    assert f"Topic: {topic}\tTopicId: {meta.topic_id}\tPartitionCount: 4\tReplicationFactor: 3" in head
    assert "retention.ms=86400000" in head
    described = {}
    for line in parts:
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        described[int(fields["Partition"])] = (int(fields["Leader"]), fields["Replicas"], fields["Isr"])
    fresh = admin.describe_topics([topic])[topic]
    assert described == {
        p.partition: (p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr))) for p in fresh.partitions
    }
    assert topic in tool("kafka-topics", "--bootstrap-server", bootstrap, "--list").split()

    tool("kafka-topics", "--bootstrap-server", bootstrap, "--delete", "--topic", topic)
    wait_for(lambda: topic not in admin.list_topics(), 30, what=f"{topic} deleted")


def test_kafka_configs_alter_and_describe(tool, bootstrap, admin, cluster, new_topic):
    topic = new_topic(partitions=1)
    tool(
        "kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
        "--alter", "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]",
    )  # fmt: skip
    configs = admin.describe_configs(topic)
    assert configs["retention.ms"] == (3600000, "DYNAMIC_TOPIC_CONFIG")
    assert configs["cleanup.policy"][0] in (["compact", "delete"], ("compact", "delete"), "compact,delete")
    tool(
        "kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
        "--alter", "--delete-config", "cleanup.policy",
    )  # fmt: skip
    out = tool(
        "kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
        "--describe",
    )  # fmt: skip
    assert f"Dynamic configs for topic {topic} are:" in out
    dynamic = dict(re.findall(r"^\s+([\w.]+)=(\S*) sensitive=", out, re.M))
    assert dynamic == {"retention.ms": "3600000"}
    assert admin.describe_configs(topic)["cleanup.policy"][1] == "DEFAULT_CONFIG"
    out = tool(
        "kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
        "--describe", "--all",
    )  # fmt: skip
    every = dict(re.findall(r"^\s+([\w.]+)=(\S*) sensitive=", out, re.M))
    native = admin.describe_configs(topic)
    assert every.keys() == native.keys()
    assert every["retention.ms"] == "3600000" and every["segment.bytes"] == str(native["segment.bytes"][0])
    out = tool(
        "kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-name", "0",
        "--describe", "--all",
    )  # fmt: skip
    broker = dict(re.findall(r"^\s+([\w.]+)=(\S*) sensitive=", out, re.M))
    assert broker["num.partitions"] == str(cluster.config["num.partitions"])
    assert "log.retention.ms" in broker or "log.retention.hours" in broker


def test_console_producer_consumer_and_consumer_groups(tool, jvm_classpath, bootstrap, admin, cluster, new_topic):
    topic = new_topic(partitions=3)
    group = _unique("console")
    lines = [f"h1:a{i},h2:b{i}\tkey-{i % 4}\tvalue {i}" for i in range(12)]
    tool(
        "kafka-console-producer", "--bootstrap-server", bootstrap, "--topic", topic,
        "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    # What rayqueue holds: each line's key, value and headers, keyed records where murmur2 puts them.
    consumer = cluster.consumer(enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        held = []
        deadline = time.monotonic() + 60
        while len(held) < len(lines):
            assert time.monotonic() < deadline
            held.extend(consumer.poll(200))
    finally:
        consumer.close()
    by_value = {r.value: r for r in held}
    for i in range(12):
        r = by_value[f"value {i}".encode()]
        assert r.key == f"key-{i % 4}".encode()
        assert tuple(r.headers) == (("h1", f"a{i}".encode()), ("h2", f"b{i}".encode()))

    out = tool(
        "kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
        "--group", group, "--max-messages", str(len(lines)), "--timeout-ms", "60000",
        "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
        "--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
        "--formatter-property", "print.timestamp=true",
    )  # fmt: skip
    printed = set()
    for line in out.strip().splitlines():
        ts, part, off, headers, key, value = line.split("\t")
        printed.add((int(part.removeprefix("Partition:")), int(off.removeprefix("Offset:")),
                     int(ts.removeprefix("CreateTime:")), headers, key, value))  # fmt: skip
    assert printed == {
        (
            r.partition,
            r.offset,
            r.timestamp,
            ",".join(f"{k}:{v.decode()}" for k, v in r.headers),
            r.key.decode(),
            r.value.decode(),
        )
        for r in held
    }

    # The console consumer's group committed the end of each partition.
    ends = _ends(admin, topic, 3)
    assert {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items()} == ends
    assert group in tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list").split()
    out = tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    table = [row for row in _rows(out) if row[0] == group]
    assert {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in table if r[1] == topic} == {
        p: (end, end, 0) for p, end in ends.items()
    }
    # With a member: a console consumer left running in the group.
    member = start_java(
        jvm_classpath("kafka"), KAFKA_TOOLS["kafka-console-consumer"],
        ["--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--timeout-ms", "120000"],
    )  # fmt: skip
    try:
        wait_for(lambda: admin.describe_groups([group])[group].state == "Stable", 90, what=f"{group} stable")
        out = tool(
            "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--members"
        )
        (row,) = [r for r in _rows(out) if r[0] == group]
        (native,) = admin.describe_groups([group])[group].members
        assert row == [group, native.member_id, "/127.0.0.1", "console-consumer", "3"]
        out = tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--state")
        (row,) = [r for r in _rows(out) if r[0] == group]
        assert row[-3:] == ["range", "Stable", "1"]
    finally:
        member.terminate()  # the JVM's shutdown hook closes the consumer: it leaves the group
        member.wait(60)
    wait_for(lambda: admin.describe_groups([group])[group].state == "Empty", 60, what=f"{group} empty")
    out = tool(
        "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--group", group, "--topic", topic,
        "--reset-offsets", "--to-earliest", "--execute",
    )  # fmt: skip
    assert {int(r[2]): int(r[3]) for r in _rows(out) if r[0] == group} == {0: 0, 1: 0, 2: 0}
    assert {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items()} == {0: 0, 1: 0, 2: 0}
    out = tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out
    assert group not in {g.group_id for g in admin.list_groups()}


def test_consumer_groups_describes_a_kip848_group(tool, jvm_classpath, bootstrap, admin, new_topic):
    """kafka-consumer-groups --list / --describe (offsets, --members, --state) on a group of
    KIP-848's protocol (a console consumer with group.protocol=consumer), as on a classic one."""
    topic = new_topic(partitions=3)
    group = _unique("k848")
    producer_lines = "\n".join(f"value {i}" for i in range(9)) + "\n"
    tool("kafka-console-producer", "--bootstrap-server", bootstrap, "--topic", topic, stdin=producer_lines)
    member = start_java(
        jvm_classpath("kafka"), KAFKA_TOOLS["kafka-console-consumer"],
        ["--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--from-beginning",
         "--consumer-property", "group.protocol=consumer", "--timeout-ms", "120000"],
    )  # fmt: skip
    try:
        ends = _ends(admin, topic, 3)
        wait_for(
            lambda: {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items()} == ends,
            90,
            what=f"{group} committed the ends",
        )
        listed = {g.group_id: g for g in admin.list_groups()}
        assert (listed[group].group_type, listed[group].state) == ("consumer", "Stable")
        assert group in tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list").split()
        out = tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list", "--type", "consumer")
        assert group in out.split()
        out = tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
        table = [row for row in _rows(out) if row[0] == group]
        assert {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in table if r[1] == topic} == {
            p: (end, end, 0) for p, end in ends.items()
        }
        out = tool(
            "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--members"
        )
        (row,) = [r for r in _rows(out) if r[0] == group]
        (native,) = admin.describe_groups([group])[group].members
        assert native.member_id in row and "/127.0.0.1" in row and "console-consumer" in row and "3" in row
        out = tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--state")
        (row,) = [r for r in _rows(out) if r[0] == group]
        assert "uniform" in row and "Stable" in row
    finally:
        member.terminate()  # the JVM's shutdown hook closes the consumer: it leaves the group
        member.wait(60)
    wait_for(lambda: admin.describe_groups([group])[group].state == "Empty", 60, what=f"{group} empty")
    out = tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out
    assert group not in {g.group_id for g in admin.list_groups()}


def test_get_offsets_and_delete_records(tool, bootstrap, admin, cluster, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    base = int(time.time() * 1000) - 600_000
    producer = cluster.producer()
    for i in range(20):
        producer.send(topic, b"r%d" % i, partition=i % 2, timestamp=base + i)
    producer.flush()
    producer.close()

    def offsets(*extra: str) -> dict[int, int]:
        out = tool("kafka-get-offsets", "--bootstrap-server", bootstrap, "--topic", topic, *extra)
        return {int(p): int(o) for t, p, o in (line.rsplit(":", 2) for line in out.split()) if t == topic}

    assert offsets() == _ends(admin, topic, 2) == {0: 10, 1: 10}
    assert offsets("--time", "-2") == {0: 0, 1: 0}
    assert offsets("--time", str(base + 9)) == _ends(admin, topic, 2, base + 9) == {0: 5, 1: 4}
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 4}]}))
    out = tool("kafka-delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(spec))
    assert f"partition: {topic}-0\tlow_watermark: 4" in out
    assert _ends(admin, topic, 2, -2) == {0: 4, 1: 0}
    assert offsets("--time", "-2") == {0: 4, 1: 0}


def _elect_after_rotation(tool, admin, topic: str, partition: int, *args: str) -> str:
    """Rotate the partition's preferred replica away from its leader, run kafka-leader-election
    with ``args``, and return its output once it did the election itself. The controller's own
    rebalance (auto.leader.rebalance.enable, every leader.imbalance.check.interval.seconds) may
    get there first in the moment between the two; then the tool finds nothing to do, and the
    rotation is made again."""
    for _ in range(3):
        preferred = rotate_preferred_leader(admin, topic, partition)
        out = tool("kafka-leader-election", *args)
        assert admin.describe_topics([topic])[topic].partitions[partition].leader == preferred
        if "Successfully completed leader election (PREFERRED)" in out:
            return out
        assert f"Valid replica already elected for partitions {topic}-{partition}" in out, out
    raise AssertionError("the controller's rebalance moved the leader first three times")


def test_leader_election_and_broker_api_versions(tool, bootstrap, admin, cluster, new_topic):
    topic = new_topic(partitions=2, replication_factor=3)
    wait_for(lambda: all(len(p.isr) == 3 for p in admin.describe_topics([topic])[topic].partitions), 60, what="isr")
    out = _elect_after_rotation(
        tool, admin, topic, 0, "--bootstrap-server", bootstrap, "--election-type", "preferred",
        "--topic", topic, "--partition", "0",
    )  # fmt: skip
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out
    out = tool(
        "kafka-leader-election", "--bootstrap-server", bootstrap, "--election-type", "preferred",
        "--topic", topic, "--partition", "1",
    )  # fmt: skip
    assert f"Valid replica already elected for partitions {topic}-1" in out
    # Every partition of the cluster: only what moved is named (here, this topic's partition 1).
    out = _elect_after_rotation(
        tool, admin, topic, 1, "--bootstrap-server", bootstrap, "--election-type", "preferred",
        "--all-topic-partitions",
    )  # fmt: skip
    moved = re.search(r"Successfully completed leader election \(PREFERRED\) for partitions (.*)", out)
    assert moved and f"{topic}-1" in moved.group(1).split(", ") and f"{topic}-0" not in moved.group(1)

    out = tool("kafka-broker-api-versions", "--bootstrap-server", bootstrap)
    for b in cluster.metadata([]).brokers:
        assert f"{b.host}:{b.port} (id: {b.broker_id} rack: null" in out
    assert "ElectLeaders(43): 0 to 2 [usable: 2]" in out and "Produce(0): 3 to 11" in out


def test_kafka_transactions_list_and_describe(tool, bootstrap, admin, cluster, new_topic):
    topic = new_topic(partitions=1)
    done, open_ = _unique("txn-done"), _unique("txn-open")
    finished = cluster.producer(transactional_id=done)
    finished.init_transactions()
    finished.begin_transaction()
    finished.send(topic, b"committed")
    finished.commit_transaction()
    finished.close()
    # CompleteCommit once its markers are in (they follow the commit's answer).
    wait_for(lambda: admin.describe_transactions([done])[done].state == "CompleteCommit", 60, what="CompleteCommit")
    ongoing = cluster.producer(transactional_id=open_)
    try:
        ongoing.init_transactions()
        ongoing.begin_transaction()
        ongoing.send(topic, b"pending")
        ongoing.flush()

        out = tool("kafka-transactions", "--bootstrap-server", bootstrap, "list")
        header, *rows = _rows(out)
        assert header == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        listed = {r[0]: (int(r[2]), r[3]) for r in rows}
        native = admin.describe_transactions([done, open_])
        assert listed[done] == (native[done].producer_id, "CompleteCommit")
        assert listed[open_] == (native[open_].producer_id, "Ongoing")

        def describe(tid: str) -> dict[str, str]:
            out = tool("kafka-transactions", "--bootstrap-server", bootstrap, "describe", "--transactional-id", tid)
            header, row = out.strip("\n").splitlines()  # tab-separated, padded with spaces
            return dict(zip([h.strip() for h in header.split("\t")], [v.strip() for v in row.split("\t")], strict=True))

        described = describe(open_)
        assert described["TransactionalId"] == open_
        assert int(described["ProducerId"]) == native[open_].producer_id
        assert int(described["ProducerEpoch"]) == native[open_].producer_epoch
        assert described["TransactionState"] == "Ongoing"
        assert described["TopicPartitions"] == f"{topic}-0"
        assert 0 <= int(described["TransactionDurationMs"]) < 600_000
        described = describe(done)
        assert described["TransactionState"] == "CompleteCommit" and described["TopicPartitions"] == ""
    finally:
        ongoing.abort_transaction()
        ongoing.close()


def test_producer_and_consumer_perf_test(tool, bootstrap, admin, new_topic):
    topic = new_topic(partitions=3)
    n = 5000
    out = tool(
        "kafka-producer-perf-test", "--topic", topic, "--num-records", str(n), "--record-size", "100",
        "--throughput", "-1", "--command-property", f"bootstrap.servers={bootstrap}", "acks=all",
    )  # fmt: skip
    assert re.search(rf"^{n} records sent, [\d.]+ records/sec", out, re.M), out
    assert sum(_ends(admin, topic, 3).values()) == n
    out = tool(
        "kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
        "--num-records", str(n), "--timeout", "60000",
    )  # fmt: skip
    header, data = out.strip().splitlines()[-2:]
    stats = dict(zip([h.strip() for h in header.split(",")], [d.strip() for d in data.split(",")], strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == n
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(n * 100 / 1024 / 1024, rel=0.01)
