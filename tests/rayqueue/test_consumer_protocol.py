"""rayqueue's own Consumer with KIP-848's protocol (``group_protocol="consumer"``), and the
group coordinator's faults with consumer groups.

On the session cluster: a group whose members join and leave while records flow (every record
read once, commits at the ends), a static member that comes back to its partitions, the
classic protocol still the default. On a cluster of its own (it kills the coordinator and
writes into ``__consumer_offsets``): a coordinator killed while a member is revoking comes back
with the group's epochs and assignments from its log, skipping (and counting) a record it
cannot read; a member that stops heartbeating is fenced after its session and its partitions
go to the others.
"""

from __future__ import annotations

import itertools
import time

import pytest
import ray

from actors.group_coordinator import consumer_records as cr
from actors.names import OFFSETS_TOPIC, offsets_partition_for
from actors.protocol import AppendOrigin, ProduceRequest
from actors.protocol_consumer_groups import ConsumerGroupDescribeRequest
from actors.protocol_consumer_groups import ConsumerGroupHeartbeatRequest as HB
from actors.types import TopicPartition
from rayqueue.errors import FencedMemberEpochError
from storage.records.builder import RecordBatchBuilder
from tests.helpers import own_cluster, wait_for

pytestmark = pytest.mark.timeout(300)
_ids = itertools.count()


def _group() -> str:
    return f"kip848-native-{next(_ids)}-{int(time.time() * 1000) % 100000}"


def _consumer(cluster, group: str, **config):
    config.setdefault("auto_offset_reset", "earliest")
    config.setdefault("enable_auto_commit", False)
    return cluster.consumer(group_id=group, group_protocol="consumer", **config)


def _poll_all(consumers, seen: dict) -> None:
    for c in consumers:
        records = list(c.poll(50))
        for r in records:
            seen.setdefault((r.topic, r.partition, r.offset), []).append(c)
        if records:
            c.commit()


def _split(consumers, partitions: set[TopicPartition]) -> bool:
    owned = [c.assignment() for c in consumers]
    sizes = [len(o) for o in owned]
    return min(sizes) > 0 and max(sizes) - min(sizes) <= 1 and set().union(*owned) == partitions


def test_native_members_join_and_leave_while_records_flow(cluster, new_topic):
    topic = new_topic(partitions=6)
    group = _group()
    every = {TopicPartition(topic, p) for p in range(6)}
    producer = cluster.producer()
    produced = itertools.count()

    def produce(n: int = 5) -> None:
        for _ in range(n):
            i = next(produced)
            producer.send(topic, b"v%d" % i, key=b"k%d" % i)
        producer.flush()

    seen: dict = {}
    members = [_consumer(cluster, group) for _ in range(2)]
    for m in members:
        m.subscribe([topic])
    try:
        wait_for(lambda: produce() or _poll_all(members, seen) or _split(members, every), 60, 0, "two members")
        members.append(_consumer(cluster, group))
        members[-1].subscribe([topic])
        wait_for(lambda: produce() or _poll_all(members, seen) or _split(members, every), 60, 0, "three members")
        assert sorted(len(m.assignment()) for m in members) == [2, 2, 2]
        desc = cluster.admin().describe_groups([group])[group]
        assert (desc.group_type, desc.protocol_type, desc.protocol) == ("consumer", "consumer", "uniform")
        assert {m.member_id for m in desc.members} == {c.group_metadata().member_id for c in members}
        leaving = members.pop(0)
        leaving.close()  # leaves with epoch -1, committing what it read (enable.auto.commit off: commit() did)
        wait_for(lambda: produce() or _poll_all(members, seen) or _split(members, every), 60, 0, "member left")
        produce(20)
        total = next(produced)
        wait_for(lambda: _poll_all(members, seen) or len(seen) >= total, 60, 0, "every record")
    finally:
        for m in members:
            m.close()
        producer.close()
    assert len(seen) == total and all(len(who) == 1 for who in seen.values())  # every record once
    admin = cluster.admin()
    ends = {tp: o.offset for tp, o in admin.list_offsets(dict.fromkeys(every, -1)).items()}
    assert {tp: om.offset for tp, om in admin.list_group_offsets(group).items()} == ends
    listing = {g.group_id: g for g in admin.list_groups()}
    assert (listing[group].group_type, listing[group].state) == ("consumer", "Empty")


def test_a_native_static_member_comes_back_to_its_partitions(cluster, new_topic):
    topic = new_topic(partitions=4)
    group = _group()
    every = {TopicPartition(topic, p) for p in range(4)}
    a = _consumer(cluster, group, group_instance_id="a")
    b = _consumer(cluster, group, group_instance_id="b")
    members = [a, b]
    for m in members:
        m.subscribe([topic])
    try:
        wait_for(lambda: _poll_all(members, {}) or _split(members, every), 60, 0, "two static members")
        held, epoch = b.assignment(), cluster.admin().describe_groups([group])[group].generation_id
        b.close()  # a static member leaves with epoch -2
        b = members[1] = _consumer(cluster, group, group_instance_id="b")
        b.subscribe([topic])
        wait_for(lambda: _poll_all(members, {}) or _split(members, every), 60, 0, "b is back")
        assert b.assignment() == held
        assert cluster.admin().describe_groups([group])[group].generation_id == epoch  # no new group epoch
    finally:
        for m in members:
            m.close()


def test_the_classic_protocol_stays_the_default(cluster, new_topic):
    topic = new_topic(partitions=1)
    group = _group()
    c = cluster.consumer(group_id=group, auto_offset_reset="earliest")
    c.subscribe([topic])
    try:
        wait_for(lambda: c.poll(50) is not None and c.assignment(), 60, 0, "a classic member")
        assert cluster.admin().describe_groups([group])[group].group_type == "classic"
    finally:
        c.close()


# -- a cluster of its own: the coordinator killed, a member fenced -----------------------------------


@pytest.fixture(scope="module")
def own(ray_session):
    with own_cluster(
        f"kip848-{int(time.time())}",
        rayqueue_num_brokers=1,
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_min_heartbeat_interval_ms=500,
        group_consumer_session_timeout_ms=4000,
        group_consumer_min_session_timeout_ms=4000,
        group_consumer_assignment_interval_ms=0,
    ) as handle:
        yield handle


def _hb(coordinator, group, member, epoch, owned=None, **fields):
    if epoch == 0:
        fields.setdefault("rebalance_timeout_ms", 60_000)
        fields.setdefault("subscribed_topic_names", ("killed",))
        owned = {} if owned is None else owned
    tps = None if owned is None else tuple((t, tuple(sorted(ps))) for t, ps in owned.items())
    return ray.get(
        coordinator.consumer_group_heartbeat.remote(HB(group, member, epoch, topic_partitions=tps, **fields))
    )


def _snapshot(coordinator, group: str):
    (d,) = ray.get(coordinator.consumer_group_describe.remote(ConsumerGroupDescribeRequest((group,))))
    assert d.error is None
    return (d.group_epoch, d.assignment_epoch, d.group_state, sorted(d.members, key=lambda m: m.member_id))


def _pid(actor) -> int:
    """The process an actor runs in (a restarted actor runs in a new one)."""
    return ray.get(actor.__ray_call__.remote(lambda self: __import__("os").getpid()), timeout=30)


def _write_as_coordinator(cluster, partition: int, records) -> None:
    builder = RecordBatchBuilder()
    for key, value in records:
        builder.append(value, key=key)
    part = cluster.metadata([OFFSETS_TOPIC]).topics[OFFSETS_TOPIC].partitions[partition]
    request = ProduceRequest(builder.build(), -1, 30000, part.leader_epoch, AppendOrigin.COORDINATOR)
    ray.get(part.leader_handle.produce.remote(request), timeout=60)


def test_a_coordinator_killed_mid_reconciliation_comes_back_from_its_log(own):
    own.admin().create_topic("killed", 4, 1)
    group = _group()
    coordinator = own.group_coordinator
    m1 = _hb(coordinator, group, "m1", 0)
    assert m1.member_epoch == 1 and len(m1.assignment[0].partitions) == 4
    topic_id = m1.assignment[0].topic_id
    m2 = _hb(coordinator, group, "m2", 0)
    assert m2.member_epoch == 2 and m2.assignment == ()
    # m1 is told to revoke (it stays at epoch 1): the middle of the reconciliation.
    r1 = _hb(coordinator, group, "m1", 1, {topic_id: range(4)})
    kept = set(r1.assignment[0].partitions)
    before = _snapshot(coordinator, group)
    assert before[2] == "Reconciling"
    # A record no coordinator wrote, in the group's partition: skipped and counted on load.
    partitions = len(own.metadata([OFFSETS_TOPIC]).topics[OFFSETS_TOPIC].partitions)
    _write_as_coordinator(
        own, offsets_partition_for(group, partitions), [(cr.current_assignment_key(group, "m1"), b'{"member_epoch":')]
    )
    skipped_before = ray.get(coordinator.skipped_records.remote())

    pid = _pid(coordinator)
    ray.kill(coordinator, no_restart=False)
    wait_for(lambda: _pid(own.group_coordinator) != pid, 120, 0.2, "a new coordinator process")
    wait_for(lambda: ray.get(own.group_coordinator.ping.remote(), timeout=10), 120, 0.2, "the coordinator loaded")
    coordinator = own.group_coordinator
    assert _snapshot(coordinator, group) == before
    assert ray.get(coordinator.skipped_records.remote()) == skipped_before + 1
    # The reconciliation goes on where it was: m1 revokes, moves to epoch 2; m2 gets the rest.
    with pytest.raises(FencedMemberEpochError):
        _hb(coordinator, group, "m1", 5, {topic_id: kept})
    assert _hb(coordinator, group, "m1", 1, {topic_id: kept}).member_epoch == 2
    r2 = _hb(coordinator, group, "m2", 2, {})
    assert set(r2.assignment[0].partitions) == set(range(4)) - kept
    assert _snapshot(coordinator, group)[2] == "Stable"
    for m in ("m1", "m2"):
        _hb(coordinator, group, m, -1)


def test_a_member_that_stops_heartbeating_is_fenced_after_its_session(own):
    topic = "fenced"
    own.admin().create_topic(topic, 2, 1)
    group = _group()
    every = {TopicPartition(topic, p) for p in range(2)}
    a, b = _consumer(own, group), _consumer(own, group)
    for m in (a, b):
        m.subscribe([topic])
    try:
        wait_for(lambda: _poll_all([a, b], {}) or _split([a, b], every), 60, 0, "two members")
        a._group._simulate_crash()  # no heartbeats, no leave: a dead process
        wait_for(lambda: _poll_all([b], {}) or b.assignment() == every, 60, 0, "b takes a's partitions")
        assert len(own.admin().describe_groups([group])[group].members) == 1
    finally:
        b.close()


def test_a_native_regex_subscription_is_resolved_by_the_coordinator(cluster):
    """subscribe(pattern=...) with the consumer protocol: the coordinator matches the regex
    (RE2, whole names) and a topic created afterwards joins the member's assignment."""
    prefix = f"kip848-rx-{next(_ids)}-{int(time.time() * 1000) % 100000}"
    admin = cluster.admin()
    admin.create_topic(f"{prefix}-a", 2, 1)
    consumer = _consumer(cluster, _group())
    try:
        consumer.subscribe(pattern=f"{prefix}-.*")
        first = {TopicPartition(f"{prefix}-a", p) for p in range(2)}
        wait_for(lambda: consumer.poll(50) is not None and consumer.assignment() == first, 60, 0, "the first topic")
        admin.create_topic(f"{prefix}-b", 1, 1)
        both = first | {TopicPartition(f"{prefix}-b", 0)}
        wait_for(lambda: consumer.poll(50) is not None and consumer.assignment() == both, 60, 0, "the later topic")
    finally:
        consumer.close()
        for name in (f"{prefix}-a", f"{prefix}-b"):
            admin.delete_topic(name)
