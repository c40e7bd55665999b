"""Kafka's Java client (4.x and 3.9.x) against rayqueue's gateways.

The same Java sources (``tests/jvm/java/client/``) are compiled against kafka-clients 4.4.0
and 3.9.2 (the ``kafka`` and ``clients-legacy`` sets of ``pins.toml``) and run once per
scenario: produce under every codec with acks=all and idempotence, a consumer group of three
with the cooperative and the range assignor, a transactional consume-transform-produce, and
the Admin client's calls. Each program prints what it did and saw as JSON lines; the tests
check that against what rayqueue's own clients and Admin see, byte for byte.
"""

from __future__ import annotations

import itertools
import time

import pytest

from actors.types import TopicPartition
from rayqueue.partitioner import partition_for_key
from tests.helpers import wait_for
from tests.jvm import maven
from tests.jvm.jvm import b64, events, run_java

_ids = itertools.count()
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SETS = {"kafka": maven.versions()["kafka"], "clients-legacy": maven.versions()["kafka-legacy"]}


@pytest.fixture(scope="module", params=list(SETS), ids=list(SETS.values()))
def client_cp(request, java_program) -> str:
    """The classpath running the client programs against one kafka-clients version."""
    return java_program("client", request.param)


def _unique(prefix: str) -> str:
    return f"java-{prefix}-{next(_ids)}-{int(time.time() * 1000) % 100000}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _java_record(r: dict) -> tuple:
    """(partition, offset, key, value, headers, timestamp) of a record a program printed."""
    headers = tuple((k, b64(v)) for k, v in r["headers"])
    return (r["partition"], r["offset"], b64(r["key"]), b64(r["value"]), headers, r["timestamp"])


def _read_native(cluster, topic: str, isolation_level: str = "read_uncommitted") -> list[tuple]:
    """Everything in ``topic`` as rayqueue's own consumer reads it, in the same shape."""
    consumer = cluster.consumer(enable_auto_commit=False, isolation_level=isolation_level)
    try:
        partitions = len(cluster.metadata([topic]).topics[topic].partitions)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        ends = consumer.end_offsets(tps)
        records: list = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"native read of {topic} did not reach {ends}"
            records.extend(consumer.poll(200))
        return sorted((r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in records)
    finally:
        consumer.close()


def _leader_batches(admin, topic: str, partition: int) -> list:
    """The record batches in the partition leader's own log, as stored."""
    import ray

    from storage.records.reader import iter_batches

    leader = admin.describe_topics([topic])[topic].partitions[partition].leader
    handle = admin.replica_handles(TopicPartition(topic, partition))[leader]
    info = ray.get(handle.describe.remote())
    offset, end, out = info["log_start_offset"], info["log_end_offset"], []
    while offset < end:
        data, offset = ray.get(handle.read_local.remote(offset))
        out.extend(iter_batches(data))
    return out


def _offsets(by_partition: dict[TopicPartition, int], topic: str) -> dict[str, int]:
    """Offsets keyed as the programs print them (``topic:partition``)."""
    return {f"{topic}:{tp.partition}": o for tp, o in by_partition.items()}


# -- produce ---------------------------------------------------------------------------------------


def test_produce_every_codec_idempotent_acks_all_and_read_back(client_cp, cluster, bootstrap, new_topic, admin):
    """What Java produced is what rayqueue's consumer reads, and what rayqueue's producer wrote
    (and Java's records) is what Java reads: keys, values, headers, timestamps, byte for byte."""
    topic = new_topic(partitions=3, replication_factor=3)
    base = _now_ms() - 3_600_000
    native = cluster.producer()
    for i in range(12):
        native.send(
            topic,
            bytes(range(i, i + 40)),
            key=None if i % 4 == 3 else b"native-\x00\xff-%d" % i,
            headers=[("src", b"native"), ("raw", bytes([i, 0, 255]))],
            timestamp=base - 60_000 + i,
        )
    native.flush()
    native.close()

    per_codec = 20
    out = events(
        run_java(
            client_cp,
            "ProduceRead",
            [f"--bootstrap={bootstrap}", f"--topic={topic}", f"--per-codec={per_codec}", f"--timestamp-base={base}"],
        ).stdout
    )
    sent = out["sent"]
    assert len(sent) == per_codec * len(CODECS)
    assert [s["codec"] for s in sent] == [c for c in CODECS for _ in range(per_codec)]
    log = _read_native(cluster, topic)
    at = {(r[0], r[1]): r for r in log}
    assert len(log) == 12 + len(sent)
    for s in sent:
        want = _java_record(s)
        assert at[(s["partition"], s["offset"])] == want
        if want[2] is not None:  # the default partitioner is murmur2(key) on both sides
            assert s["partition"] == partition_for_key(want[2], 3)
    # The corner cases travelled as written: a null value, an empty one, a null header value.
    values = [r[3] for r in log]
    assert None in values and b"" in values
    assert any(("nothing", None) in r[4] for r in log)
    # On disk, each of Java's batches is as Java built it: its codec, and idempotent (a producer
    # id and epoch, sequences that follow on within each producer's partition).
    codec_ids = dict(zip(CODECS, range(5), strict=True))
    java_offsets = {(s["partition"], s["offset"]): s["codec"] for s in sent}
    sequences: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for p in range(3):
        for batch in _leader_batches(admin, topic, p):
            codecs = {java_offsets.get((p, o)) for o in range(batch.base_offset, batch.next_offset)}
            if codecs == {None}:
                continue  # rayqueue's own producer's batch
            (codec,) = codecs
            assert batch.compression == codec_ids[codec] and batch.producer_id >= 0 and batch.producer_epoch >= 0
            sequences.setdefault((batch.producer_id, p), []).append((batch.base_sequence, len(batch)))
    assert len({pid for pid, _ in sequences}) == len(CODECS)  # one idempotent producer per codec
    for runs in sequences.values():
        assert [seq for seq, _ in runs] == [sum(n for _, n in runs[:i]) for i in range(len(runs))]
    # Java read the whole topic, rayqueue's records included, exactly as rayqueue reads it.
    (read,) = out["read"]
    assert sorted(_java_record(r) for r in read["records"]) == log
    assert {r["timestamp_type"] for r in read["records"]} == {0}  # CreateTime


# -- consumer groups -------------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])
def test_consumer_group_of_three(assignor, client_cp, cluster, bootstrap, new_topic, admin):
    partitions, expected, extra = 6, 60, 12
    topic = new_topic(partitions=partitions)
    group = _unique(f"group-{assignor}")
    base = _now_ms() - 600_000
    native = cluster.producer()
    for i in range(expected):
        native.send(topic, b"v%d" % i, key=b"k%d" % i, timestamp=base + i)
    native.flush()
    native.close()
    for_time = base + expected // 2

    out = events(
        run_java(
            client_cp,
            "Groups",
            [
                f"--bootstrap={bootstrap}",
                f"--topic={topic}",
                f"--group={group}",
                f"--assignor={assignor}",
                f"--expected={expected}",
                f"--extra={extra}",
                f"--for-time={for_time}",
            ],
        ).stdout
    )

    # Three members split the six partitions, two each; describeConsumerGroups agrees.
    (stable,) = out["stable"]
    owned = {int(m): set(ps) for m, ps in stable["assignments"].items()}
    assert sorted(len(ps) for ps in owned.values()) == [2, 2, 2]
    assert set().union(*owned.values()) == set(range(partitions))
    (described,) = out["described"]
    assert described["state"] == "Stable" and described["assignor"] == assignor and not described["simple"]
    assert {m["client_id"]: set(m["partitions"]) for m in described["members"]} == {
        f"{group}-member-{i}": owned[i] for i in range(3)
    }

    # Member 2 left: the other two own everything; the cooperative assignor kept what each had
    # (nothing revoked), the eager range assignor revoked everything first.
    (after,) = out["after_leave"]
    survivors = {int(m): set(ps) for m, ps in after["assignments"].items()}
    assert set().union(*survivors.values()) == set(range(partitions))
    revoked = {
        int(m): [e for e in evs if e["kind"] == "revoked" and e["partitions"]] for m, evs in after["events"].items()
    }
    if assignor == "cooperative-sticky":
        assert all(owned[m] <= survivors[m] for m in survivors)
        assert revoked == {0: [], 1: []}
    else:
        assert all(revoked[m] for m in survivors)

    # Every record read exactly once, the ones rayqueue's producer wrote and the ones Java wrote later.
    (consumed,) = out["consumed"]
    seen = [(r["partition"], r["offset"]) for r in consumed["records"]]
    assert len(seen) == len(set(seen)) == expected + extra
    values = {b64(r["value"]) for r in consumed["records"]}
    assert values == {b"v%d" % i for i in range(expected)} | {b"extra-%d" % i for i in range(extra)}

    # Committed offsets: the end of every partition, the same through Java and rayqueue's Admin.
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {tp: o.offset for tp, o in admin.list_offsets({tp: -1 for tp in tps}).items()}
    native_committed = {tp: om.offset for tp, om in admin.list_group_offsets(group).items()}
    assert native_committed == ends
    assert out["committed"][0]["offsets"] == _offsets(ends, topic)
    # seekToBeginning, endOffsets, offsetsForTimes: as rayqueue answers them.
    assert out["beginning"][0]["offsets"] == _offsets(dict.fromkeys(tps, 0), topic)
    assert out["end"][0]["offsets"] == _offsets(ends, topic)
    by_time = admin.list_offsets({tp: for_time for tp in tps})
    assert out["for_times"][0]["offsets"] == {
        f"{topic}:{tp.partition}": (None if o.offset < 0 else [o.offset, o.timestamp]) for tp, o in by_time.items()
    }
    assert any(o is not None for o in out["for_times"][0]["offsets"].values())


# -- transactions ----------------------------------------------------------------------------------


def test_transactional_consume_transform_produce(client_cp, cluster, bootstrap, new_topic, admin):
    source, sink = new_topic(partitions=3), new_topic(partitions=3)
    group, txn_id = _unique("txn-group"), _unique("txn-id")
    n = 30
    native = cluster.producer()
    for i in range(n):
        native.send(source, b"word-%d" % i, key=b"k%d" % (i % 7))
    native.flush()
    native.close()

    out = events(
        run_java(
            client_cp,
            "Txn",
            [
                f"--bootstrap={bootstrap}",
                f"--input={source}",
                f"--output={sink}",
                f"--group={group}",
                f"--transactional-id={txn_id}",
                f"--expected={n}",
            ],
        ).stdout
    )
    assert out["abort"][0]["records"] == n and out["commit"][0]["records"] == n
    committed_values = {b"commit:WORD-%d" % i for i in range(n)}
    aborted_values = {b"abort:WORD-%d" % i for i in range(n)}

    # read_committed: only the committed transaction's records, through Java and natively alike.
    java_committed = sorted(_java_record(r) for r in out["read_committed"][0]["records"])
    assert {r[3] for r in java_committed} == committed_values and len(java_committed) == n
    assert _read_native(cluster, sink, "read_committed") == java_committed
    # read_uncommitted: the aborted records too (the markers are not records).
    java_all = sorted(_java_record(r) for r in out["read_uncommitted"][0]["records"])
    assert {r[3] for r in java_all} == committed_values | aborted_values and len(java_all) == 2 * n
    assert _read_native(cluster, sink) == java_all

    # The offsets went in with the committed transaction only: the end of the input (the group's
    # once the commit's markers are in: they follow the commit's answer, as in Kafka).
    wait_for(lambda: admin.describe_transactions([txn_id])[txn_id].state == "CompleteCommit", 60, what="CompleteCommit")
    tps = [TopicPartition(source, p) for p in range(3)]
    ends = {tp: o.offset for tp, o in admin.list_offsets({tp: -1 for tp in tps}).items()}
    assert {tp: om.offset for tp, om in admin.list_group_offsets(group).items()} == ends
    assert out["committed"][0]["offsets"] == _offsets(ends, source)
    described = admin.describe_transactions([txn_id])[txn_id]
    assert described.state == "CompleteCommit"


# -- Admin -----------------------------------------------------------------------------------------


def test_admin_client(client_cp, cluster, bootstrap, admin):
    prefix, group, txn_id = _unique("admin"), _unique("admin-group"), _unique("admin-txn")
    a, b = f"{prefix}-a", f"{prefix}-b"
    base = _now_ms() - 600_000
    # A finished transaction for listTransactions to find (a record in it: a transaction without
    # one never leaves the Empty state).
    txn_topic = _unique("admin-txn-topic")
    admin.create_topic(txn_topic, 1, 1)
    producer = cluster.producer(transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(txn_topic, b"in a transaction")
        producer.commit_transaction()
    finally:
        producer.close()
    wait_for(lambda: admin.describe_transactions([txn_id])[txn_id].state == "CompleteCommit", 60, what="CompleteCommit")
    try:
        out = events(
            run_java(
                client_cp,
                "AdminOps",
                [f"--bootstrap={bootstrap}", f"--prefix={prefix}", f"--group={group}", f"--timestamp-base={base}"],
            ).stdout
        )
        meta = cluster.metadata([a]).topics[a]

        created = {c["name"]: c for c in out["created"]}
        assert created[a] == {
            "name": a,
            "topic_id": meta.topic_id,
            "partitions": 3,
            "replication_factor": 3,
            "retention_ms": "86400000",
            "retention_source": "DYNAMIC_TOPIC_CONFIG",
        }
        assert (created[b]["partitions"], created[b]["replication_factor"]) == (2, 1)
        assert created[b]["retention_source"] == "DEFAULT_CONFIG"
        assert out["create_again"] == [{"error": "TopicExistsException"}]
        assert out["describe_missing"] == [{"error": "UnknownTopicOrPartitionException"}]
        assert out["listed"] == [{"names": [a, b]}]
        described = next(d for d in out["described"] if d["name"] == a)
        assert described["topic_id"] == meta.topic_id and not described["internal"]
        assert [(p["partition"], tuple(p["replicas"])) for p in described["partitions"]] == [
            (p.partition, p.replicas) for p in meta.partitions
        ]
        for p, m in zip(described["partitions"], meta.partitions, strict=True):
            assert p["leader"] in m.replicas and set(p["isr"]) <= set(m.replicas)

        def config(event: str, name: str) -> tuple[str, str]:
            entry = next(e for e in out[event][0]["entries"] if e["name"] == name)
            return entry["value"], entry["source"]

        assert config("configs_before", "retention.ms") == ("86400000", "DYNAMIC_TOPIC_CONFIG")
        assert config("configs_before", "segment.bytes")[1] == "DEFAULT_CONFIG"
        assert config("configs_set", "retention.ms") == ("7200000", "DYNAMIC_TOPIC_CONFIG")
        assert config("configs_set", "max.message.bytes") == ("2000000", "DYNAMIC_TOPIC_CONFIG")
        assert config("configs_deleted", "max.message.bytes")[1] == "DEFAULT_CONFIG"
        assert out["alter_invalid"] == [{"error": "InvalidConfigurationException"}]
        native_configs = admin.describe_configs(a)
        assert native_configs["retention.ms"] == (7200000, "DYNAMIC_TOPIC_CONFIG")
        assert native_configs["max.message.bytes"][1] == "DEFAULT_CONFIG"
        broker = {e["name"]: e for e in out["broker_configs"][0]["entries"]}
        assert broker["num.partitions"]["value"] == str(cluster.config["num.partitions"])
        assert all(e["read_only"] for e in broker.values())

        # listOffsets (10 records a partition, timestamps base + i), then deleteRecords.
        lists = {e["spec"]: e["offsets"] for e in out["list_offsets"]}
        tps = [TopicPartition(a, p) for p in range(3)]
        assert lists["earliest"] == {f"{a}:{p}": [0, -1] for p in range(3)}
        assert lists["latest"] == {f"{a}:{p}": [10, -1] for p in range(3)}
        assert lists["for_timestamp"] == {f"{a}:{p}": [5, base + 15 + p] for p in range(3)}
        assert lists["max_timestamp"] == {f"{a}:{p}": [9, base + 27 + p] for p in range(3)}
        (deleted,) = out["delete_records"]
        assert deleted["low_watermark"] == 3 and deleted["earliest"][f"{a}:0"] == [3, -1]
        assert admin.list_offsets({tps[0]: -2})[tps[0]].offset == 3
        assert out["elect_leaders"][0]["partitions"] == {
            f"{a}:0": "ElectionNotNeededException",
            f"{a}:1": "ElectionNotNeededException",
        }

        # Consumer group offsets written through Java are rayqueue's committed offsets.
        assert out["group_offsets"][0]["offsets"] == {f"{a}:0": [5, "five"], f"{a}:1": [2, ""]}
        assert out["group_offsets_altered"][0]["offsets"] == {f"{a}:0": [5, "five"], f"{a}:1": [7, ""]}
        native_offsets = admin.list_group_offsets(group)
        assert {tp.partition: (om.offset, om.metadata) for tp, om in native_offsets.items()} == {
            0: (5, "five"),
            1: (7, ""),
        }
        assert out["group_described"] == [{"state": "Empty", "members": 0, "coordinator": _coordinator(admin, group)}]
        assert out["groups_listed"][0]["groups"][group] == "Empty"

        (described_cluster,) = out["cluster"]
        snapshot = cluster.metadata([])
        assert described_cluster["cluster_id"] == snapshot.cluster_id
        live = sorted((b.broker_id, b.host, b.port) for b in snapshot.brokers if b.alive)
        assert sorted((n["id"], n["host"], n["port"]) for n in described_cluster["nodes"]) == live
        assert described_cluster["controller"] == live[0][0]

        listed = {t["transactional_id"]: t for t in out["transactions"][0]["listed"]}
        native_txn = admin.describe_transactions([txn_id])[txn_id]
        assert listed[txn_id] == {
            "transactional_id": txn_id,
            "producer_id": native_txn.producer_id,
            "state": "CompleteCommit",
        }
        assert out["deleted"] == [{"names": [a]}]
        wait_for(lambda: b not in admin.list_topics(), 30, what=f"{b} deleted")
    finally:
        for name in (a, b, txn_topic):
            if name in admin.list_topics():
                admin.delete_topic(name)
        if group in {g.group_id for g in admin.list_groups()}:
            admin.delete_groups([group])


def _coordinator(admin, group: str) -> int:
    """The broker FindCoordinator names for ``group`` (the leader of its offsets partition)."""
    from actors.names import OFFSETS_TOPIC, offsets_partition_for

    meta = admin.describe_topics([OFFSETS_TOPIC])[OFFSETS_TOPIC]
    return meta.partitions[offsets_partition_for(group, len(meta.partitions))].leader


@pytest.fixture(scope="module")
def kip848_cp(java_program) -> str:
    """Kafka's Java client 4.4.0 with the KIP-848 program (``client/kafka/Kip848.java``)."""
    return java_program("client", "kafka")


def kip848(cp: str, scenario: str, bootstrap: str, **options: str) -> dict:
    """The events of one run of the KIP-848 program (``--scenario``, ``--bootstrap`` and
    ``--name=value`` of each option)."""
    flags = [f"--scenario={scenario}", f"--bootstrap={bootstrap}", *(f"--{k}={v}" for k, v in options.items())]
    return events(run_java(cp, "Kip848", flags).stdout)


def test_kip848_group_of_three_joins_and_leaves_while_records_flow(kip848_cp, bootstrap, new_topic, admin):
    """group.protocol=consumer: two members, a third joins, the first leaves, while a producer
    writes; every record read once, the committed offsets at the ends, the group described."""
    topic = new_topic(partitions=6)
    group = _unique("k848-group")
    out = kip848(kip848_cp, "group", bootstrap, group=group, topic=topic)
    every = [f"{topic}:{p}" for p in range(6)]
    (three,) = out["three"]
    assert sorted(len(ps) for ps in three["assignments"].values()) == [2, 2, 2]
    assert sorted(p for ps in three["assignments"].values() for p in ps) == every
    (described,) = out["described"]
    assert (described["type"], described["listed_type"], described["assignor"]) == ("Consumer", "Consumer", "uniform")
    assert {m["client_id"] for m in described["members"]} == {f"{group}-member-{i}" for i in range(3)}
    # Each member at its target; "upgraded": it speaks the consumer protocol (ConsumerGroupDescribe v1).
    assert all(m["partitions"] == m["target"] and m["upgraded"] is True for m in described["members"])
    (after,) = out["after_leave"]
    assert sorted(p for ps in after["assignments"].values() for p in ps) == every
    (consumed,) = out["consumed"]
    seen = [(r["partition"], r["offset"]) for r in consumed["records"]]
    assert len(seen) == len(set(seen)) == consumed["produced"]  # every record once
    assert {b64(r["value"]) for r in consumed["records"]} == {b"v%d" % i for i in range(consumed["produced"])}
    # Incremental: when member 0 left, the others kept what they had.
    (three_members,) = out["three"]
    kept = {m: set(ps) for m, ps in three_members["assignments"].items() if m != "0"}
    assert all(kept[m] <= set(after["assignments"][m]) for m in kept)
    ends = {
        tp.partition: o.offset for tp, o in admin.list_offsets({TopicPartition(topic, p): -1 for p in range(6)}).items()
    }
    (committed,) = out["committed"]
    assert committed["offsets"] == {f"{topic}:{p}": end for p, end in ends.items()}
    assert {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items()} == ends
    (empty,) = out["described_empty"]
    assert (empty["state"], empty["members"]) == ("Empty", [])


def test_kip848_regex_subscription_picks_up_a_topic_created_later(kip848_cp, bootstrap, admin):
    """A SubscriptionPattern (RE2J, resolved by the coordinator) takes in a topic created afterwards."""
    prefix = _unique("k848-rx")
    admin.create_topic(f"{prefix}-a", 2, None)
    try:
        out = kip848(kip848_cp, "regex", bootstrap, group=f"{prefix}-g", prefix=prefix)
    finally:
        for name in (f"{prefix}-a", f"{prefix}-b"):
            if name in admin.list_topics():
                admin.delete_topic(name)
    (later,) = out["later"]
    assert later["assignments"]["0"] == [f"{prefix}-a:0", f"{prefix}-a:1", f"{prefix}-b:0", f"{prefix}-b:1"]
    assert sum(1 for r in later["records"] if r["topic"] == f"{prefix}-b") == 10
    (described,) = out["described"]
    assert described["state"] == "Stable" and described["type"] == "Consumer"


def test_kip848_static_member_comes_back_without_a_reassignment(kip848_cp, bootstrap, new_topic):
    """A static member closes (epoch -2) and a new instance of it comes back: the same
    partitions, nothing revoked from the others, no new group epoch."""
    topic = new_topic(partitions=6)
    group = _unique("k848-static")
    out = kip848(kip848_cp, "static", bootstrap, group=group, topic=topic)
    (rejoined,) = out["rejoined"]
    assert rejoined["after"] == rejoined["before"]
    assert rejoined["events"]["0"] == [] and rejoined["events"]["2"] == []
    (before,), (away,), (after,) = out["before"], out["away"], out["after"]
    assert before["group_epoch"] == after["group_epoch"] == away["group_epoch"]
    gone = [m for m in away["members"] if m["instance_id"] == f"{group}-instance-1"]
    assert [m["member_epoch"] for m in gone] == [-2]
    back = [m for m in after["members"] if m["instance_id"] == f"{group}-instance-1"]
    assert back[0]["member_id"] != gone[0]["member_id"] and back[0]["partitions"] == gone[0]["partitions"]
