"""Replication: followers, ISR, high watermark, acks, elections, broker stop/start, reassignment.

The session cluster has three brokers on one Ray node. Faults are injected by killing a
replica's host actor (``kill_broker``: every replica it holds dies with it; on the failover
cluster, never the session's), stopping brokers through the controller, and pausing a
follower's fetching (``pause_fetching``), which stands in for a network partition.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from pathlib import Path

import pytest
import ray

from actors.protocol import FetchRequest, ListOffsetsRequest, ProduceRequest
from actors.protocol_broker import LeaderAndIsrPartitionState
from rayqueue import TopicPartition
from rayqueue.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError
from storage import RecordBatchBuilder, iter_batches
from storage.checkpoint import read_offset
from tests.helpers import kill_broker, set_role, wait_for


def batch(values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder()
    for v in values:
        builder.append(v)
    return builder.build()


def partition_meta(admin, topic: str, partition: int = 0):
    return admin.describe_topics([topic])[topic].partitions[partition]


def replica_log(handle) -> bytes:
    """Every batch of one replica's own log, as bytes."""
    info = ray.get(handle.describe.remote())
    offset, end, out = info["log_start_offset"], info["log_end_offset"], []
    while offset < end:
        records, offset = ray.get(handle.read_local.remote(offset))
        out.append(records)
    return b"".join(out)


def log_values(data: bytes) -> dict[int, bytes]:
    """offset -> value of every record in ``data``."""
    return {r.offset: r.value for b in iter_batches(data) for r in b}


def wait_in_sync(admin, topic: str, partition: int = 0, timeout: float = 60.0) -> dict[int, bytes]:
    """Wait until every replica is live, in the ISR and at the leader's log end; return the logs."""
    tp = TopicPartition(topic, partition)
    last: list = []

    def synced():
        meta = partition_meta(admin, topic, partition)
        handles = admin.replica_handles(tp)
        infos = {b: ray.get(h.describe.remote()) for b, h in handles.items()}
        last[:] = [
            meta,
            {
                b: {k: i[k] for k in ("role", "leader_epoch", "isr", "log_end_offset", "high_watermark", "epochs")}
                for b, i in infos.items()
            },
        ]
        if meta.leader < 0 or sorted(meta.isr) != sorted(meta.replicas) or sorted(handles) != sorted(meta.replicas):
            return None
        ends = {i["log_end_offset"] for i in infos.values()}
        hw = infos[meta.leader]["high_watermark"]
        if len(ends) != 1 or hw != ends.pop():
            return None
        return {b: replica_log(h) for b, h in handles.items()}

    try:
        return wait_for(synced, timeout=timeout, interval=0.2, what=f"{tp} replicas in sync")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {last}") from None


def set_lag_limit(meta, ms: int) -> None:
    """Give the leader of ``meta`` replica.lag.time.max.ms = ``ms``."""
    set_replication(meta, {"replica.lag.time.max.ms": ms})


def set_replication(meta, settings: dict) -> None:
    """Give the leader of ``meta`` these replication settings: the controller's own
    LeaderAndIsr call at the same term, with only those settings changed."""
    state = LeaderAndIsrPartitionState(
        meta.leader, meta.leader_epoch, tuple(meta.replicas), tuple(meta.isr), meta.partition_epoch
    )
    set_role(meta.leader_handle, state, settings)


def test_rf3_topic_replicates_to_every_replica(admin, cluster, new_topic):
    topic = new_topic(1, 3)
    meta = partition_meta(admin, topic)
    assert len(meta.replicas) == 3 and sorted(meta.isr) == sorted(meta.replicas)
    assert not meta.under_replicated and not meta.offline_replicas
    producer = cluster.producer(acks="all")
    for i in range(50):
        producer.send(topic, b"v%d" % i, partition=0)
    producer.flush(60)
    logs = wait_in_sync(admin, topic)
    assert len(set(logs.values())) == 1, "followers hold the leader's bytes unchanged"
    assert list(log_values(next(iter(logs.values()))).values()) == [b"v%d" % i for i in range(50)]
    leader = meta.leader_handle
    assert ray.get(leader.list_offsets.remote(ListOffsetsRequest(-1))).offset == 50
    # Followers refuse client requests.
    follower = next(h for b, h in admin.replica_handles(TopicPartition(topic, 0)).items() if b != meta.leader)
    with pytest.raises(Exception, match="not the leader"):
        ray.get(follower.produce.remote(ProduceRequest(batch([b"x"]))))


def test_consumers_never_read_past_the_high_watermark(admin, new_topic):
    topic = new_topic(1, 3)
    meta = partition_meta(admin, topic)
    leader = meta.leader_handle
    ray.get(leader.produce.remote(ProduceRequest(batch([b"committed"]), -1, 30000, meta.leader_epoch)))
    followers = [h for b, h in admin.replica_handles(TopicPartition(topic, 0)).items() if b != meta.leader]
    ray.get([f.pause_fetching.remote(True) for f in followers])
    try:
        # acks=1: on the leader's disk, but not replicated, so not visible to consumers.
        r = ray.get(leader.produce.remote(ProduceRequest(batch([b"pending"]), 1, 30000, meta.leader_epoch)))
        assert r.base_offset == 1
        fetched = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0)))
        assert fetched.high_watermark == 1 and list(log_values(fetched.records).values()) == [b"committed"]
        assert ray.get(leader.list_offsets.remote(ListOffsetsRequest(-1))).offset == 1
        # A long-poll at the HW wakes when replication moves the HW.
        pending = leader.fetch.remote(FetchRequest(1, 1 << 20, 30000, 1))
        assert not ray.wait([pending], timeout=0.3)[0]  # it waits: nothing above the HW to answer
    finally:
        ray.get([f.pause_fetching.remote(False) for f in followers])
    result = ray.get(pending, timeout=30)
    assert result.high_watermark == 2 and list(log_values(result.records).values()) == [b"pending"]


def test_acks_all_waits_for_the_isr_and_times_out(admin, new_topic):
    topic = new_topic(1, 3)
    meta = partition_meta(admin, topic)
    followers = [h for b, h in admin.replica_handles(TopicPartition(topic, 0)).items() if b != meta.leader]
    ray.get([f.pause_fetching.remote(True) for f in followers])
    try:
        with pytest.raises(Exception, match="not replicated") as err:
            ray.get(meta.leader_handle.produce.remote(ProduceRequest(batch([b"a"]), -1, 500, meta.leader_epoch)))
        assert type(err.value).__name__.startswith("RequestTimedOutError") or "RequestTimedOut" in repr(err.value)
    finally:
        ray.get([f.pause_fetching.remote(False) for f in followers])
    r = ray.get(meta.leader_handle.produce.remote(ProduceRequest(batch([b"b"]), -1, 30000, meta.leader_epoch)))
    assert r.base_offset == 1


def test_leader_killed_new_leader_from_isr_and_old_one_rejoins(failover_admin, failover_cluster, failover_topic):
    admin, cluster, new_topic = failover_admin, failover_cluster, failover_topic
    topic = new_topic(1, 3)
    tp = TopicPartition(topic, 0)
    producer = cluster.producer(acks="all")
    for i in range(20):
        producer.send(topic, b"a%d" % i, partition=0)
    producer.flush(60)
    old = partition_meta(admin, topic)
    kill_broker(old.leader_handle)
    new = wait_for(
        lambda: (m := partition_meta(admin, topic)).leader not in (-1, old.leader) and m, timeout=30, what="new leader"
    )
    assert new.leader_epoch > old.leader_epoch and new.leader in old.isr
    for i in range(20):
        producer.send(topic, b"b%d" % i, partition=0)
    producer.flush(60)
    logs = wait_in_sync(admin, topic)
    assert len(set(logs.values())) == 1
    values = list(log_values(logs[old.leader]).values())
    assert values == [b"a%d" % i for i in range(20)] + [b"b%d" % i for i in range(20)]
    assert sorted(admin.replica_handles(tp)) == sorted(old.replicas)
    producer.close(10)


def test_follower_killed_while_producing_truncates_catches_up_and_rejoins(
    failover_admin, failover_cluster, failover_topic
):
    admin, cluster, new_topic = failover_admin, failover_cluster, failover_topic
    topic = new_topic(1, 3)
    tp = TopicPartition(topic, 0)
    meta = partition_meta(admin, topic)
    victim = next(b for b in meta.replicas if b != meta.leader)
    producer = cluster.producer(acks="all", linger_ms=1)
    stop = threading.Event()
    sent: list = []

    def produce() -> None:
        i = 0
        while not stop.is_set():
            sent.append(producer.send(topic, b"%d" % i, partition=0))
            i += 1
            if i % 50 == 0:
                producer.flush(60)

    worker = threading.Thread(target=produce)
    worker.start()
    try:
        wait_for(lambda: len(sent) > 200, timeout=30, what="some records sent")
        kill_broker(admin.replica_handles(tp)[victim])
        # The dead follower leaves the ISR; produces go on with the other two.
        wait_for(lambda: victim not in partition_meta(admin, topic).isr, timeout=30, what="ISR shrink")
        count = len(sent)
        wait_for(lambda: len(sent) > count + 200, timeout=30, what="produce continues")
        # The restarted replica catches up and rejoins while records keep coming.
        wait_for(lambda: victim in partition_meta(admin, topic).isr, timeout=60, what="ISR expand")
    finally:
        stop.set()
        worker.join(60)
    producer.flush(60)
    values = [f.get(60) for f in sent]
    logs = wait_in_sync(admin, topic)
    assert len(set(logs.values())) == 1
    final = log_values(logs[victim])
    for i, md in enumerate(values):
        assert final[md.offset] == b"%d" % i
    producer.close(10)


def test_min_insync_replicas_with_two_brokers_stopped(admin, cluster, new_topic):
    topic = new_topic(1, 3, min_insync_replicas=2)
    meta = partition_meta(admin, topic)
    others = [b for b in meta.replicas if b != meta.leader]
    strict = cluster.producer(acks="all", retries=0)
    loose = cluster.producer(acks=1, retries=0)
    strict.send(topic, b"before", partition=0).get(30)
    try:
        for b in others:
            admin.stop_broker(b)
        m = partition_meta(admin, topic)
        assert m.isr == (meta.leader,) and m.under_replicated and set(m.offline_replicas) == set(others)
        with pytest.raises(NotEnoughReplicasError):
            ray.get(m.leader_handle.produce.remote(ProduceRequest(batch([b"refused"]), -1, 30000, m.leader_epoch)))
        # Retriable, but retries=0: the producer reports the error itself, as Kafka's does.
        with pytest.raises(NotEnoughReplicasError):
            strict.send(topic, b"refused", partition=0).get(30)
        assert loose.send(topic, b"accepted", partition=0).get(30).offset == 1
    finally:
        for b in others:
            admin.start_broker(b)
    wait_in_sync(admin, topic)
    assert strict.send(topic, b"after", partition=0).get(30).offset == 2
    logs = wait_in_sync(admin, topic)
    assert len(set(logs.values())) == 1
    assert list(log_values(logs[meta.leader]).values()) == [b"before", b"accepted", b"after"]
    strict.close(10)
    loose.close(10)


def test_divergent_old_leader_truncates_to_the_new_leaders_log(failover_admin, failover_topic):
    admin, new_topic = failover_admin, failover_topic
    topic = new_topic(1, 3)
    tp = TopicPartition(topic, 0)
    meta = partition_meta(admin, topic)
    leader = meta.leader_handle
    ray.get(leader.produce.remote(ProduceRequest(batch([b"c0", b"c1", b"c2"]), -1, 30000, meta.leader_epoch)))
    handles = admin.replica_handles(tp)
    followers = {b: h for b, h in handles.items() if b != meta.leader}
    ray.get([h.pause_fetching.remote(True) for h in followers.values()])
    # Unreplicated records only the old leader has.
    ray.get(leader.produce.remote(ProduceRequest(batch([b"lost0", b"lost1"]), 1, 30000, meta.leader_epoch)))
    ray.get(leader.produce.remote(ProduceRequest(batch([b"lost2"]), 1, 30000, meta.leader_epoch)))
    kill_broker(leader)
    new = wait_for(
        lambda: (m := partition_meta(admin, topic)).leader not in (-1, meta.leader) and m, timeout=30, what="new leader"
    )
    ray.get([h.pause_fetching.remote(False) for h in followers.values()])
    for v in (b"n0", b"n1"):
        ray.get(new.leader_handle.produce.remote(ProduceRequest(batch([v]), 1, 30000, new.leader_epoch)))
    logs = wait_in_sync(admin, topic)
    assert len(set(logs.values())) == 1, "the returning old leader holds exactly the new leader's log"
    assert list(log_values(logs[meta.leader]).values()) == [b"c0", b"c1", b"c2", b"n0", b"n1"]
    epochs = ray.get(admin.replica_handles(tp)[meta.leader].describe.remote())["epochs"]
    assert [e for e, _ in epochs][-1] == new.leader_epoch


def test_preferred_leader_election_and_reassignment(failover_admin, failover_cluster, failover_topic):
    admin, cluster, new_topic = failover_admin, failover_cluster, failover_topic
    topic = new_topic(1, 2)
    tp = TopicPartition(topic, 0)
    meta = partition_meta(admin, topic)
    preferred = meta.replicas[0]
    producer = cluster.producer(acks="all")
    for i in range(10):
        producer.send(topic, b"%d" % i, partition=0)
    producer.flush(30)
    assert admin.elect_leaders([tp]) == {tp: "ElectionNotNeededError"}
    kill_broker(meta.leader_handle)
    wait_for(lambda: partition_meta(admin, topic).leader == meta.replicas[1], timeout=30, what="failover")
    wait_in_sync(admin, topic)
    assert admin.elect_leaders([tp]) == {tp: None}
    assert partition_meta(admin, topic).leader == preferred
    # Move the partition onto the broker it does not use, keeping one old replica.
    spare = next(b for b in range(3) if b not in meta.replicas)
    target = [spare, meta.replicas[1]]
    admin.alter_partition_reassignments({tp: target})
    wait_for(lambda: not admin.list_partition_reassignments(), timeout=60, what="reassignment done")
    after = partition_meta(admin, topic)
    assert list(after.replicas) == target and sorted(after.isr) == sorted(target) and after.leader in target
    assert sorted(admin.replica_handles(tp)) == sorted(target)
    for i in range(10, 15):
        producer.send(topic, b"%d" % i, partition=0)
    producer.flush(30)
    logs = wait_in_sync(admin, topic)
    assert list(log_values(logs[spare]).values()) == [b"%d" % i for i in range(15)]
    producer.close(10)


@pytest.mark.chaos
@pytest.mark.parametrize("failover_cluster", ["broker"], indirect=True)
def test_leader_killed_ten_times_under_acks_all_loses_nothing(failover_admin, failover_cluster, failover_topic):
    admin, cluster, new_topic = failover_admin, failover_cluster, failover_topic
    topic = new_topic(1, 3)
    tp = TopicPartition(topic, 0)
    # The idempotent producer (Kafka's default) keeps send order across retries with five
    # requests in flight, and the replicas' producer state makes a retry of a batch the
    # old leader had already replicated a duplicate, answered with its original offset.
    producer = cluster.producer(acks="all", linger_ms=2, enable_idempotence=True)
    consumer = cluster.consumer(fetch_max_wait_ms=100)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    stop = threading.Event()
    acked: list[tuple[int, int]] = []  # (sequence number, offset), in acknowledgement order
    seen: list[tuple[int, bytes]] = []
    errors: list[BaseException] = []

    def produce() -> None:
        i = 0
        try:
            while not stop.is_set():
                futures = [(j, producer.send(topic, b"%d" % j, partition=0)) for j in range(i, i + 20)]
                i += 20
                for j, fut in futures:
                    acked.append((j, fut.get(120).offset))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def consume() -> None:
        try:
            while not stop.is_set():
                seen.extend((r.offset, r.value) for r in consumer.poll(100))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    rng = random.Random(7)
    try:
        for _ in range(10):
            meta = wait_for(lambda: (m := partition_meta(admin, topic)).leader >= 0 and m, timeout=60, what="a leader")
            goal = len(acked) + rng.randrange(1, 60)  # a random moment within the produce stream
            wait_for(lambda g=goal: len(acked) > g, timeout=60, what="progress")
            kill_broker(meta.leader_handle)
        count = len(acked)
        wait_for(lambda: len(acked) > count + 100, timeout=60, what="progress after the last kill")
    finally:
        stop.set()
        for t in threads:
            t.join(180)
    assert not errors, errors
    logs = wait_in_sync(admin, topic, timeout=120)
    assert len(set(logs.values())) == 1, "all replicas end with identical data"
    final = log_values(next(iter(logs.values())))
    offsets = [o for _, o in acked]
    assert [j for j, _ in acked] == list(range(len(acked)))
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), "acknowledged order is preserved"
    for j, offset in acked:
        assert final.get(offset) == b"%d" % j, f"acknowledged record {j} at {offset} lost"
    copies = collections.Counter(final.values())
    duplicated = {v: n for v, n in copies.items() if n > 1}
    assert not duplicated, f"records written more than once: {sorted(duplicated.items())[:5]}"
    assert list(final.values()) == sorted(final.values(), key=int), "the log holds the records in send order"
    for offset, value in seen:
        assert final.get(offset) == value, f"consumer read {value!r} at {offset}, later lost"
    assert len(acked) > 300 and len(seen) > 0
    producer.close(10)
    consumer.close()


def _replica_data_dir(cluster, broker: int) -> Path:
    return Path(next(b.data_dir for b in cluster.describe()["brokers"] if b.broker_id == broker))


def test_topic_recreated_while_a_broker_was_down_holds_none_of_the_old_records(admin, cluster, new_topic):
    """KIP-516: a topic deleted while one of its brokers is stopped leaves its directory there;
    a new topic of the same name has a new topic id, so that broker's replica sees the old
    directory as a stray of the deleted topic, removes it and starts empty."""
    topic = new_topic(1, 2)
    meta = partition_meta(admin, topic)
    old_id = admin.describe_topics([topic])[topic].topic_id
    down = next(b for b in meta.replicas if b != meta.leader)
    for i in range(5):  # one batch each: a truncation keeps whole batches below its offset
        ray.get(meta.leader_handle.produce.remote(ProduceRequest(batch([b"old%d" % i]), -1, 30000, meta.leader_epoch)))
    # The follower knows these records are committed (its HW reached them) before it stops.
    follower = admin.replica_handles(TopicPartition(topic, 0))[down]
    wait_for(lambda: ray.get(follower.describe.remote())["high_watermark"] == 5, 30, what="follower HW")
    directory = _replica_data_dir(cluster, down) / f"{topic}-0"
    admin.stop_broker(down)
    try:
        admin.delete_topic(topic)
        assert (directory / "00000000000000000000.log").exists()  # the stopped broker kept it
        created = admin.create_topic(topic, replica_assignment=[list(meta.replicas)])
        assert created.topic_id and created.topic_id != old_id
        new = created.partitions[0]
        assert new.isr == (meta.leader,)  # the stopped broker's replica starts outside the ISR
        # Fewer new records than old ones: with the old log, the returning replica would keep
        # old0..old2 after truncating to the leader's end of epoch 0.
        ray.get(
            new.leader_handle.produce.remote(
                ProduceRequest(batch([b"new0", b"new1", b"new2"]), -1, 30000, new.leader_epoch)
            )
        )
    finally:
        admin.start_broker(down)
    logs = wait_in_sync(admin, topic)
    assert list(log_values(logs[down]).values()) == [b"new0", b"new1", b"new2"]
    assert logs[down] == logs[meta.leader]
    handles = admin.replica_handles(TopicPartition(topic, 0))
    assert ray.get(handles[down].describe.remote())["topic_id"] == created.topic_id
    assert (directory / "partition.metadata").read_text() == f"version: 0\ntopic_id: {created.topic_id}\n"
    assert not list(directory.parent.glob(f"{topic}-0.*-stray"))


def test_topic_deleted_while_a_broker_was_down_is_removed_when_it_starts(admin, cluster, new_topic):
    """A topic deleted while one of its brokers is stopped, and not created again: when that
    broker starts, its directory of the topic goes (Kafka's stray logs), and the partitions
    it still hosts stay."""
    topic = new_topic(1, 2)
    meta = partition_meta(admin, topic)
    down = next(b for b in meta.replicas if b != meta.leader)
    ray.get(meta.leader_handle.produce.remote(ProduceRequest(batch([b"gone"]), -1, 30000, meta.leader_epoch)))
    follower = admin.replica_handles(TopicPartition(topic, 0))[down]
    wait_for(lambda: ray.get(follower.describe.remote())["log_end_offset"] == 1, 30, what="the follower's copy")
    kept = f"{topic}-kept"
    admin.create_topic(kept, replica_assignment=[[down]])  # a partition the broker still hosts
    data_dir = _replica_data_dir(cluster, down)
    directory = data_dir / f"{topic}-0"
    admin.stop_broker(down)
    try:
        admin.delete_topic(topic)
        assert (directory / "00000000000000000000.log").exists()  # the stopped broker kept it
        described = admin.describe_topics(admin.list_topics(include_internal=True))
        hosted = {f"{name}-{p.partition}" for name, t in described.items() for p in t.partitions if down in p.replicas}
        assert f"{kept}-0" in hosted and all((data_dir / name).is_dir() for name in hosted)
    finally:
        admin.start_broker(down)
    try:
        assert not directory.exists()
        assert not list(data_dir.glob(f"{topic}-0.*-stray"))
        assert all((data_dir / name).is_dir() for name in hosted)
    finally:
        admin.delete_topic(kept)


def test_unclean_leader_election_only_when_enabled(admin, cluster, new_topic):
    """The only live replica of a partition is out of the ISR: with
    unclean.leader.election.enable false (the default) the partition stays offline; with it
    true (set at creation, or turned on later) that replica leads and the ISR is just it."""
    clean = new_topic(1, 2)
    meta = partition_meta(admin, clean)
    assert admin.describe_configs(clean)["unclean.leader.election.enable"][0] is False
    leader, other = meta.leader, next(b for b in meta.replicas if b != meta.leader)
    unclean = clean + "-unclean"
    admin.create_topic(unclean, configs={"unclean.leader.election.enable": True}, replica_assignment=[[leader, other]])
    stopped: list[int] = []
    try:
        for topic in (clean, unclean):
            m = partition_meta(admin, topic)
            assert m.leader == leader
            ray.get(m.leader_handle.produce.remote(ProduceRequest(batch([b"both"]), -1, 30000, m.leader_epoch)))
        wait_in_sync(admin, clean)
        wait_in_sync(admin, unclean)
        admin.stop_broker(other)
        stopped.append(other)
        for topic in (clean, unclean):
            m = partition_meta(admin, topic)
            assert m.isr == (leader,)
            ray.get(m.leader_handle.produce.remote(ProduceRequest(batch([b"leader only"]), -1, 30000, m.leader_epoch)))
        admin.stop_broker(leader)
        stopped.append(leader)
        admin.start_broker(other)
        stopped.remove(other)
        # start_broker returns after its elections: the clean topic has no leader, ...
        m = partition_meta(admin, clean)
        assert (m.leader, m.isr, m.offline_replicas) == (-1, (leader,), (leader,))
        handle = admin.replica_handles(TopicPartition(clean, 0))[other]
        assert ray.get(handle.describe.remote())["role"] != "leader"
        # ... the unclean one is led by the out-of-sync replica, which is its whole ISR.
        m = partition_meta(admin, unclean)
        assert (m.leader, m.isr) == (other, (other,)) and m.leader_epoch > meta.leader_epoch
        ray.get(m.leader_handle.produce.remote(ProduceRequest(batch([b"after"]), -1, 30000, m.leader_epoch)))
        # Turning the setting on elects at once, as Kafka does.
        admin.alter_configs(clean, {"unclean.leader.election.enable": True})
        m = partition_meta(admin, clean)
        assert (m.leader, m.isr) == (other, (other,))
        ray.get(m.leader_handle.produce.remote(ProduceRequest(batch([b"after"]), -1, 30000, m.leader_epoch)))
    finally:
        for b in stopped:
            admin.start_broker(b)
    try:
        for topic in (clean, unclean):
            # The old leader returns, truncates what only it had and follows: that record is lost.
            logs = wait_in_sync(admin, topic)
            assert len(set(logs.values())) == 1
            assert list(log_values(logs[leader]).values()) == [b"both", b"after"]
    finally:
        admin.delete_topic(unclean)


def test_acks_all_append_then_isr_below_min_insync_is_not_enough_replicas_after_append(admin, new_topic):
    """An acks=-1 produce that was appended while the ISR was large enough, but whose ISR
    shrank below min.insync.replicas before the record replicated, fails with
    NotEnoughReplicasAfterAppend (the record stays in the log)."""
    topic = new_topic(1, 3, min_insync_replicas=2)
    meta = partition_meta(admin, topic)
    leader = meta.leader_handle
    followers = [h for b, h in admin.replica_handles(TopicPartition(topic, 0)).items() if b != meta.leader]

    def lag_limit(ms: int) -> None:
        set_lag_limit(meta, ms)

    ray.get([f.pause_fetching.remote(True) for f in followers])
    try:
        pending = leader.produce.remote(ProduceRequest(batch([b"x"]), -1, 30000, meta.leader_epoch))
        wait_for(lambda: ray.get(leader.describe.remote())["log_end_offset"] == 1, 30, what="the append")
        assert not ray.wait([pending], timeout=0)[0], "acks=-1 waits for the stalled followers"
        # The stalled followers now lag too long: the leader shrinks the ISR to itself
        # through the controller, the HW passes the record, and the ISR is too small.
        lag_limit(200)
        with pytest.raises(NotEnoughReplicasAfterAppendError) as err:
            ray.get(pending, timeout=30)
        assert err.value.code == 20 and err.value.retriable
        assert partition_meta(admin, topic).isr == (meta.leader,)
        info = ray.get(leader.describe.remote())
        assert (info["log_end_offset"], info["high_watermark"]) == (1, 1)
        with pytest.raises(NotEnoughReplicasError):
            ray.get(leader.produce.remote(ProduceRequest(batch([b"y"]), -1, 30000, meta.leader_epoch)))
    finally:
        lag_limit(30000)
        ray.get([f.pause_fetching.remote(False) for f in followers])
    logs = wait_in_sync(admin, topic)
    assert [list(log_values(v).values()) for v in logs.values()] == [[b"x"]] * 3


def test_fetch_min_bytes_counts_only_bytes_below_the_high_watermark(admin, new_topic):
    """fetch.min.bytes: a consumer fetch waits until that many readable bytes are there; bytes
    the followers do not have yet (above the HW) do not count, and the HW moving wakes it."""
    topic = new_topic(1, 3)
    meta = partition_meta(admin, topic)
    leader, epoch = meta.leader_handle, meta.leader_epoch
    small, large = batch([b"s" * 100]), batch([b"L" * 1000])
    ray.get(leader.produce.remote(ProduceRequest(small, -1, 30000, epoch)))  # readable: about 170 bytes
    followers = [h for b, h in admin.replica_handles(TopicPartition(topic, 0)).items() if b != meta.leader]
    ray.get([f.pause_fetching.remote(True) for f in followers])
    try:
        pending = leader.fetch.remote(FetchRequest(0, 1 << 20, 60000, len(small) + 500))
        ray.get(leader.produce.remote(ProduceRequest(large, 1, 30000, epoch)))  # on the leader only
        ready, _ = ray.wait([pending], timeout=1.0)
        assert not ready  # the log holds enough bytes, but not enough are readable
    finally:
        ray.get([f.pause_fetching.remote(False) for f in followers])
    result = ray.get(pending, timeout=30)
    assert len(result.records) == len(small) + len(large) and result.high_watermark == 2
    # max_wait ends the wait with what is readable.
    short = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 300, 10**6)), timeout=30)
    assert len(short.records) == len(small) + len(large)


def test_follower_killed_while_the_leader_waits_for_it(failover_admin, failover_topic):
    """An acks=all produce waiting for a follower that dies is answered once that follower
    leaves the ISR (after replica.lag.time.max.ms), not held until its request times out;
    what it acknowledged is on every ISR replica, and the follower catches up when back."""
    admin, new_topic = failover_admin, failover_topic
    topic = new_topic(1, 3, min_insync_replicas=2)
    tp = TopicPartition(topic, 0)
    meta = partition_meta(admin, topic)
    victim = next(b for b in meta.replicas if b != meta.leader)
    handles = admin.replica_handles(tp)
    set_lag_limit(meta, 1000)
    try:
        ray.get(handles[victim].pause_fetching.remote(True))  # it must not have the record
        pending = meta.leader_handle.produce.remote(ProduceRequest(batch([b"x"]), -1, 20000, meta.leader_epoch))
        wait_for(lambda: ray.get(meta.leader_handle.describe.remote())["log_end_offset"] == 1, 30, what="the append")
        kill_broker(handles[victim])
        # Answered once the ISR shrank to the leader and the live follower: well before 20 s.
        # (Or once a restarted replica caught up, if the controller brought it back that soon.)
        assert ray.get(pending, timeout=60).base_offset == 0
        survivor = next(b for b in meta.replicas if b not in (meta.leader, victim))
        assert list(log_values(replica_log(handles[survivor])).values()) == [b"x"]
    finally:
        set_lag_limit(partition_meta(admin, topic), 30000)
    logs = wait_in_sync(admin, topic)  # the restarted replica caught up and rejoined
    assert [list(log_values(v).values()) for v in logs.values()] == [[b"x"]] * 3


def test_slow_follower_leaves_the_isr_without_holding_acks_all_producers(admin, cluster, new_topic):
    """A follower whose fetches answer later than replica.lag.time.max.ms (a slow network)
    falls out of the ISR while it keeps fetching; acks=all producers go on with the others,
    none held until its request times out; with the delay gone it rejoins, logs equal."""
    topic = new_topic(1, 3, min_insync_replicas=2)
    tp = TopicPartition(topic, 0)
    meta = partition_meta(admin, topic)
    slow = next(b for b in meta.replicas if b != meta.leader)
    handle = admin.replica_handles(tp)[slow]
    set_lag_limit(meta, 1000)
    # No retries: a send held past its request timeout fails instead of being sent again.
    producer = cluster.producer(acks="all", linger_ms=1, enable_idempotence=False, retries=0, request_timeout_ms=10000)
    try:
        ray.get(handle.delay_fetching.remote(3000))
        sent = []
        # Records keep coming, so the slow follower is behind whenever the leader checks.
        deadline = time.monotonic() + 60
        while slow in partition_meta(admin, topic).isr:
            assert time.monotonic() < deadline, "the slow follower never left the ISR"
            sent.append(producer.send(topic, b"%d" % len(sent), partition=0))
            producer.flush(30)
        for _ in range(20):
            sent.append(producer.send(topic, b"%d" % len(sent), partition=0))
        producer.flush(30)
        # Every send was acknowledged (none timed out waiting for the slow follower).
        offsets = [f.get(0).offset for f in sent]
        assert offsets == list(range(len(sent)))
        assert slow not in partition_meta(admin, topic).isr
    finally:
        ray.get(handle.delay_fetching.remote(0))
        set_lag_limit(partition_meta(admin, topic), 30000)
        producer.close(10)
    logs = wait_in_sync(admin, topic)
    assert [list(log_values(v).values()) for v in logs.values()] == [[b"%d" % i for i in range(len(sent))]] * 3


def test_the_high_watermark_reaches_its_checkpoint_while_the_replica_runs(admin, cluster, new_topic):
    """The periodic checkpoint (every replica.high.watermark.checkpoint.interval.ms, written
    off the request path) puts the HW in its file on disk while the replica runs, not only
    when it closes. (The interval is shortened here so the wait is short; the test does not
    time it.)"""
    topic = new_topic(1, 1)
    meta = partition_meta(admin, topic)
    checkpoint = _replica_data_dir(cluster, meta.leader) / f"{topic}-0" / "high-watermark-checkpoint"
    set_replication(meta, {"replica.high.watermark.checkpoint.interval.ms": 100})
    try:
        for i in range(3):
            ray.get(meta.leader_handle.produce.remote(ProduceRequest(batch([b"%d" % i]), 1, 30000, meta.leader_epoch)))
        wait_for(lambda: read_offset(checkpoint) == 3, 30, what="the checkpoint at the high watermark")
    finally:
        set_replication(meta, {"replica.high.watermark.checkpoint.interval.ms": 5000})


def test_followers_of_one_source_broker_fetch_together(admin, cluster, new_topic):
    """Kafka's replica fetcher threads: a broker fetches every partition it follows from one
    leader broker in one request per round, on one connection per leader broker, so the
    requests between brokers grow with the brokers, not with the partitions."""
    topic = new_topic(6, 3)
    producer = cluster.producer(acks="all")
    try:
        for p in range(6):
            producer.send(topic, b"x", partition=p)
        producer.flush(60)
    finally:
        producer.close()
    leaders = {p.partition: p.leader for p in admin.describe_topics([topic])[topic].partitions}
    brokers = {b: h.host for b, h in admin.replica_handles(TopicPartition(topic, 0)).items()}
    assert len(brokers) == 3 and len(set(leaders.values())) == 3  # each broker leads two

    def fetchers(b: int) -> dict[int, list[tuple[str, int]]]:
        return {
            f["leader"]: [tuple(tp) for tp in f["partitions"]]
            for f in ray.get(brokers[b].describe_host.remote())["fetchers"]
        }

    def grouped(b: int, wanted: dict[int, set]) -> dict | None:
        f = fetchers(b)
        return f if set(f) == set(wanted) and all(w <= set(f[k]) for k, w in wanted.items()) else None

    for b in brokers:
        # One fetcher per other broker, holding every partition of the topic that broker leads.
        wanted = {
            leader: {(topic, p) for p, lb in leaders.items() if lb == leader} for leader in brokers if leader != b
        }
        wait_for(lambda b=b, wanted=wanted: grouped(b, wanted), 30, what=f"broker {b}'s fetchers")
    for b, broker in brokers.items():
        # Each leader broker served fetches carrying several partitions at once, over its
        # inter-broker listener (Kafka's Fetch, the default transport), and fetched from each
        # other broker on a connection of its own.
        described = ray.get(broker.describe_host.remote())
        assert described["most_partitions_per_fetch"] >= 2, b
        assert described["inter_broker_fetches_served"] > 0 and described["inter_broker_connects"] >= 2, b
