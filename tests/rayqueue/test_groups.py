"""Consumer groups end to end on the session cluster: membership, rebalances, commits,
failures (dead member, zombie, coordinator restart), static members, subscription changes, admin."""

from __future__ import annotations

import itertools
import time

import pytest
import ray

from actors.protocol import OffsetCommitRequest
from rayqueue import ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition
from rayqueue.errors import IllegalGenerationError, NonEmptyGroupError, UnknownMemberIdError
from tests.helpers import wait_for

_groups = itertools.count()

FAST = dict(
    auto_offset_reset="earliest",
    session_timeout_ms=3000,
    heartbeat_interval_ms=200,
    max_poll_interval_ms=15000,
    enable_auto_commit=False,
    fetch_max_wait_ms=100,
)


def group_name() -> str:
    return f"group-{next(_groups)}-{time.monotonic_ns()}"


def member(cluster, group, **overrides):
    return cluster.consumer(**{**FAST, "group_id": group, **overrides})


class CommitOnRevoke(ConsumerRebalanceListener):
    """Commits what was processed when partitions are taken away; records what happened."""

    def __init__(self) -> None:
        self.consumer = None
        self.revoked: list[set] = []
        self.assigned: list[set] = []

    def on_partitions_revoked(self, revoked):
        self.revoked.append(set(revoked))
        positions = {tp: self.consumer.position(tp) for tp in revoked if self.consumer._subscriptions.has_position(tp)}
        if positions:
            self.consumer.commit(positions)

    def on_partitions_assigned(self, assigned):
        self.assigned.append(set(assigned))


def subscribed(cluster, group, topics, listener=None, **overrides):
    c = member(cluster, group, **overrides)
    if listener is not None:
        listener.consumer = c
    c.subscribe(topics, listener=listener)
    return c


def settle(consumers, partitions, timeout=30.0, sink=None):
    """Poll every consumer until the group is stable and their assignments split ``partitions`` exactly.

    Each member's own view must equal what the coordinator assigned it in the current
    generation: a member that has joined a generation but not yet synced still shows
    its previous partitions, and mixed views can add up to a split that never existed.
    """
    wanted = set(partitions)
    admin = consumers[0]._cluster.admin()
    group = consumers[0].group_metadata().group_id

    def done():
        for c in consumers:
            got = c.poll(20)
            if sink is not None:
                sink.extend(got)
        desc = admin.describe_groups([group])[group]
        if desc.state != "Stable":
            return False
        given = {m.member_id: set(m.assignment) for m in desc.members}
        metas = [c.group_metadata() for c in consumers]
        if any(
            m.generation_id != desc.generation_id or given.get(m.member_id) != c.assignment()
            for m, c in zip(metas, consumers, strict=True)
        ):
            return False
        owned = [c.assignment() for c in consumers]
        union = set().union(*owned)
        balanced = all(owned) or len(consumers) > len(wanted)
        return union == wanted and sum(len(o) for o in owned) == len(wanted) and balanced

    wait_for(done, timeout=timeout, interval=0, what="group to settle")


def produce(cluster, topic, n, prefix="v"):
    producer = cluster.producer(linger_ms=2)
    for i in range(n):
        producer.send(topic, f"{prefix}{i}".encode(), key=f"k{i}".encode())
    producer.flush(60)
    producer.close()
    return {f"{prefix}{i}".encode() for i in range(n)}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_members_split_six_partitions_and_read_everything_once(cluster, new_topic, strategy):
    topic = new_topic(partitions=6)
    sent = produce(cluster, topic, 3000)
    group = group_name()
    records: list = []
    listeners = [CommitOnRevoke() for _ in range(3)]
    consumers = []
    try:
        # Members arrive one at a time while consuming, so partitions move mid-stream.
        for listener in listeners:
            consumers.append(
                subscribed(
                    cluster, group, [topic], listener, partition_assignment_strategy=[strategy], max_poll_records=100
                )
            )
            for _ in range(5):
                for c in consumers:
                    records.extend(c.poll(20))
        settle(consumers, [TopicPartition(topic, p) for p in range(6)], sink=records)
        owners = [c.assignment() for c in consumers]
        assert all(len(o) == 2 for o in owners)
        wait_for(lambda: [records.extend(c.poll(20)) for c in consumers] and len(records) >= 3000, timeout=60)
        values = [r.value for r in records]
        assert len(values) == len(set(values)) == 3000  # every record exactly once
        assert set(values) == sent
        desc = cluster.admin().describe_groups([group])[group]
        assert desc.state == "Stable" and desc.protocol == strategy and len(desc.members) == 3
        if strategy == "cooperative-sticky":
            # The first member kept consuming its remaining partitions throughout.
            first = listeners[0]
            assert all(r <= first.assigned[0] for r in first.revoked)
    finally:
        for c in consumers:
            c.close()


def test_dead_member_partitions_move_and_resume_from_last_commit(cluster, new_topic):
    topic = new_topic(partitions=6)
    sent = produce(cluster, topic, 1200)
    group = group_name()
    consumers = [subscribed(cluster, group, [topic], max_poll_records=50) for _ in range(3)]
    seen: list = []
    try:
        settle(consumers, [TopicPartition(topic, p) for p in range(6)], sink=seen)
        victim, survivors = consumers[2], consumers[:2]
        victim_parts = victim.assignment()
        # Everyone consumes a bit and commits; the victim then reads more it never commits.
        for c in consumers:
            seen.extend(c.poll(200))
            c.commit()
        committed = victim.committed(victim_parts)
        seen.extend(victim.poll(200))
        victim._group._simulate_crash()  # no heartbeats, no leave: a dead process
        # When a silent member goes (its session timeout) is the state machine's, tested on a
        # manual clock in tests/actors/test_group_state.py; here: the partitions move at all.
        wait_for(
            lambda: (
                [seen.extend(c.poll(20)) for c in survivors]
                and victim_parts <= survivors[0].assignment() | survivors[1].assignment()
            ),
            timeout=20,
            interval=0,
            what="the dead member's partitions to move",
        )
        for tp in victim_parts:
            owner = next(c for c in survivors if tp in c.assignment())
            start = committed[tp].offset if committed[tp] else 0
            assert owner.position(tp) >= start
        wait_for(lambda: [seen.extend(c.poll(20)) for c in survivors] and {r.value for r in seen} >= sent, timeout=60)
        assert {r.value for r in seen} == sent  # nothing skipped (some re-delivered: at least once)
    finally:
        for c in consumers[:2]:
            c.close()


def test_zombie_member_cannot_commit(cluster, new_topic):
    topic = new_topic(partitions=2)
    produce(cluster, topic, 20)
    group = group_name()
    a, b = subscribed(cluster, group, [topic]), subscribed(cluster, group, [topic])
    try:
        settle([a, b], [TopicPartition(topic, p) for p in range(2)])
        old_generation = a.group_metadata().generation_id
        a._group._simulate_crash()  # it still believes it is a member
        wait_for(lambda: b.poll(20) is not None and len(b.assignment()) == 2, timeout=20, interval=0)
        with pytest.raises(UnknownMemberIdError):
            a.commit({TopicPartition(topic, 0): 5})
        # A live member with a stale generation is fenced too.
        meta = b.group_metadata()
        assert meta.generation_id > old_generation
        coordinator = cluster.group_coordinator
        with pytest.raises(IllegalGenerationError):
            ray.get(
                coordinator.commit_offsets.remote(
                    OffsetCommitRequest(
                        group, {TopicPartition(topic, 0): OffsetAndMetadata(5)}, meta.member_id, None, old_generation
                    )
                )
            )
    finally:
        b.close()


def test_member_that_stops_polling_is_removed(cluster, new_topic):
    topic = new_topic(partitions=2)
    group = group_name()
    a = subscribed(cluster, group, [topic], max_poll_interval_ms=1500)
    b = subscribed(cluster, group, [topic], max_poll_interval_ms=1500)
    try:
        settle([a, b], [TopicPartition(topic, p) for p in range(2)])
        # a's heartbeat thread keeps running, but a's application no longer polls.
        wait_for(lambda: b.poll(20) is not None and len(b.assignment()) == 2, timeout=20, interval=0)
    finally:
        a.close()
        b.close()


def test_coordinator_restart_restores_offsets_and_groups(cluster, new_topic):
    topic = new_topic(partitions=3)
    produce(cluster, topic, 300)
    group = group_name()
    c = subscribed(cluster, group, [topic])
    try:
        settle([c], [TopicPartition(topic, p) for p in range(3)])
        offsets = {TopicPartition(topic, p): 10 + p for p in range(3)}
        c.commit({tp: o for tp, o in offsets.items()})
        from rayqueue import OffsetAndMetadata

        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(42, "checkpoint-7")})
        generation = c.group_metadata().generation_id
        ray.kill(cluster.group_coordinator, no_restart=False)
        got = wait_for(lambda: c.committed(list(offsets)), timeout=60, what="offsets after restart")
        assert got[TopicPartition(topic, 0)].offset == 42 and got[TopicPartition(topic, 0)].metadata == "checkpoint-7"
        assert got[TopicPartition(topic, 1)].offset == 11 and got[TopicPartition(topic, 2)].offset == 12
        desc = cluster.admin().describe_groups([group])[group]
        assert desc.generation_id == generation and len(desc.members) == 1
        # The member carries on in its generation: heartbeats and commits still work.
        for _ in range(10):
            c.poll(50)
        c.commit({TopicPartition(topic, 1): 20})
        assert c.committed([TopicPartition(topic, 1)])[TopicPartition(topic, 1)].offset == 20
        assert c.group_metadata().generation_id == generation
    finally:
        c.close()


def test_static_member_restart_gets_its_partitions_back_without_rebalance(cluster, new_topic):
    topic = new_topic(partitions=4)
    group = group_name()
    listener_b = CommitOnRevoke()
    a = subscribed(cluster, group, [topic], group_instance_id="a", session_timeout_ms=10000)
    b = subscribed(cluster, group, [topic], listener_b, group_instance_id="b", session_timeout_ms=10000)
    try:
        settle([a, b], [TopicPartition(topic, p) for p in range(4)])
        before = a.assignment()
        generation = b.group_metadata().generation_id
        revokes = len(listener_b.revoked)
        a.close()  # a static member does not leave the group
        a2 = subscribed(cluster, group, [topic], group_instance_id="a", session_timeout_ms=10000)
        wait_for(lambda: a2.poll(20) is not None and a2.assignment() == before, timeout=20, interval=0)
        for _ in range(10):
            b.poll(50)
        assert a2.group_metadata().generation_id == generation == b.group_metadata().generation_id
        assert len(listener_b.revoked) == revokes  # b saw no rebalance
        a2.close()
    finally:
        b.close()


def test_regex_subscription_picks_up_a_new_topic(cluster, admin):
    prefix = f"rx{time.monotonic_ns()}"
    admin.create_topic(f"{prefix}-one", 2)
    group = group_name()
    c = member(cluster, group)
    try:
        c.subscribe(pattern=rf"{prefix}-.*")
        settle([c], [TopicPartition(f"{prefix}-one", p) for p in range(2)])
        admin.create_topic(f"{prefix}-two", 1)
        wanted = {
            TopicPartition(f"{prefix}-one", 0),
            TopicPartition(f"{prefix}-one", 1),
            TopicPartition(f"{prefix}-two", 0),
        }
        wait_for(lambda: c.poll(20) is not None and c.assignment() == wanted, timeout=20, interval=0)
    finally:
        c.close()
        admin.delete_topic(f"{prefix}-one")
        admin.delete_topic(f"{prefix}-two")


def test_partition_count_change_triggers_rebalance(cluster, new_topic, admin):
    topic = new_topic(partitions=2)
    group = group_name()
    a, b = subscribed(cluster, group, [topic]), subscribed(cluster, group, [topic])
    try:
        settle([a, b], [TopicPartition(topic, p) for p in range(2)])
        admin.create_partitions(topic, 4)
        settle([a, b], [TopicPartition(topic, p) for p in range(4)], timeout=20)
        assert len(a.assignment()) == len(b.assignment()) == 2
    finally:
        a.close()
        b.close()


def test_admin_lists_describes_lags_resets_and_deletes_groups(cluster, new_topic, admin):
    topic = new_topic(partitions=2)
    produce(cluster, topic, 100)
    group = group_name()
    c = subscribed(cluster, group, [topic])
    tps = [TopicPartition(topic, p) for p in range(2)]
    try:
        settle([c], tps)
        c.commit({tps[0]: 10, tps[1]: 20})
        assert (group, "Stable", "consumer") in [(g.group_id, g.state, g.protocol_type) for g in admin.list_groups()]
        desc = admin.describe_groups([group])[group]
        assert desc.members[0].assignment == tuple(tps)
        lag = admin.group_lag(group)
        ends = c.end_offsets(tps)
        assert {tp: (lag[tp].committed, lag[tp].lag) for tp in tps} == {
            tps[0]: (10, ends[tps[0]] - 10),
            tps[1]: (20, ends[tps[1]] - 20),
        }
        with pytest.raises(NonEmptyGroupError):
            admin.reset_group_offsets(group, [topic], to="earliest")
        with pytest.raises(NonEmptyGroupError):
            admin.delete_groups([group])
    finally:
        c.close()
    wait_for(lambda: admin.describe_groups([group])[group].state == "Empty", timeout=10)
    assert admin.reset_group_offsets(group, [topic], to="latest") == ends
    assert admin.reset_group_offsets(group, [tps[0]], offset=3) == {tps[0]: 3}
    assert admin.list_group_offsets(group)[tps[0]].offset == 3
    # An empty group's offsets expire after offsets.retention.minutes (checked with a future clock).
    assert ray.get(cluster.group_coordinator.expire_offsets.remote(int(time.time() * 1000) + 8 * 24 * 3600 * 1000)) >= 2
    assert admin.list_group_offsets(group) == {}
    with pytest.raises(Exception, match="does not exist"):
        admin.delete_groups([group])
