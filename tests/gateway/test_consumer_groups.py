"""KIP-848's consumer group protocol at the gateway, with confluent-kafka 2.16.1
(``group.protocol=consumer``, librdkafka's implementation) and raw requests.

A group of three whose members join and leave while records flow (every record read once by
the group, the committed offsets at the partitions' ends), a regex subscription that picks up
a topic created afterwards, static members that come back without a reassignment, the group
as ListGroups / DescribeGroups / ConsumerGroupDescribe show it, and hostile input: a stale
member epoch is fenced with Kafka's error, a flood of heartbeats on one connection is answered
one at a time and writes nothing.
"""

from __future__ import annotations

import datetime
import itertools
import time
import uuid

import pytest

from tests.gateway.wire import Wire, build_request
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(300)

HEARTBEAT, DESCRIBE = 68, 69
NOT_SET = datetime.timedelta(milliseconds=-1)  # the heartbeat's "unchanged" rebalance timeout
_ids = itertools.count()


def _unique(prefix: str) -> str:
    return f"cg-{prefix}-{next(_ids)}-{int(time.time() * 1000) % 100000}"


def _consumer(bootstrap: str, group: str, name: str, **extra):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


class Member:
    """A confluent-kafka consumer of the group: what it read, committed after each poll and
    when its partitions are revoked (so that their next owner starts after them)."""

    def __init__(self, bootstrap: str, group: str, name: str, topics: list[str], **extra) -> None:
        self.name = name
        self.consumer = _consumer(bootstrap, group, name, **extra)
        self.read: list[tuple[str, int, int]] = []
        self.next: dict[tuple[str, int], int] = {}
        self.events: list[tuple[str, list]] = []
        self.consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)

    def _assigned(self, consumer, partitions) -> None:
        self.events.append(("assigned", sorted((p.topic, p.partition) for p in partitions)))

    def _revoked(self, consumer, partitions) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        mine = [
            TopicPartition(p.topic, p.partition, self.next[(p.topic, p.partition)])
            for p in partitions
            if (p.topic, p.partition) in self.next
        ]
        if mine:
            try:
                consumer.commit(offsets=mine, asynchronous=False)
            except KafkaException as exc:
                # Closing after the member left (UNKNOWN_MEMBER_ID): recorded, not raised.
                # confluent-kafka would re-raise it from close() as a bare KafkaError, which is
                # no Exception and ends the whole pytest session. A commit lost this way shows
                # as a record read twice, which the tests check.
                self.events.append(("commit failed", [str(exc)]))
        self.events.append(("revoked", sorted((p.topic, p.partition) for p in partitions)))

    def _lost(self, consumer, partitions) -> None:
        self.events.append(("lost", sorted((p.topic, p.partition) for p in partitions)))

    def poll(self) -> None:
        from confluent_kafka import TopicPartition

        messages = self.consumer.consume(100, 0.05)
        for m in messages:
            assert m.error() is None, m.error()
            self.read.append((m.topic(), m.partition(), m.offset()))
            self.next[(m.topic(), m.partition())] = m.offset() + 1
        if messages:
            done = {(m.topic(), m.partition()) for m in messages}
            self.consumer.commit(offsets=[TopicPartition(t, p, self.next[(t, p)]) for t, p in done], asynchronous=False)

    def owned(self) -> set[tuple[str, int]]:
        return {(p.topic, p.partition) for p in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def _split(members: list[Member], partitions: set[tuple[str, int]], extra=()) -> bool:
    """Poll every member (and the ``extra`` ones) once; whether ``members`` split ``partitions``."""
    for m in [*members, *extra]:
        m.poll()
    owned = [m.owned() for m in members]
    return all(owned) and sum(len(o) for o in owned) == len(partitions) and set().union(*owned) == partitions


def _describe(bootstrap: str, group: str):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30)


def test_a_group_of_three_joins_and_leaves_while_records_flow(bootstrap, new_topic, cluster, admin):
    from confluent_kafka import Producer

    topic = new_topic(partitions=6)
    group = _unique("flow")
    every = {(topic, p) for p in range(6)}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    produced = itertools.count()

    def produce(n: int = 5) -> None:
        for _ in range(n):
            i = next(produced)
            producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
        producer.poll(0)

    members = [Member(bootstrap, group, f"m{i}", [topic]) for i in range(2)]
    try:
        wait_for(lambda: produce() or _split(members, every), 60, 0, "two members split the partitions")
        members.append(Member(bootstrap, group, "m2", [topic]))
        # Reconciliation is incremental: the partitions may be split 1/2/3 while one member
        # has yet to release its third; the target is two each.
        wait_for(
            lambda: produce() or (_split(members, every) and sorted(len(m.owned()) for m in members) == [2, 2, 2]),
            60,
            0,
            "a third member joined and the partitions balanced",
        )
        described = _describe(bootstrap, group)
        assert str(described.type) == "ConsumerGroupType.CONSUMER" or "CONSUMER" in str(described.type)
        assert {m.client_id for m in described.members} == {"m0", "m1", "m2"}

        leaving = members.pop(0)
        leaving.close()
        wait_for(lambda: produce() or _split(members, every), 60, 0, "member m0 left")
        produce(20)
        assert producer.flush(30) == 0
        total = next(produced)
        everyone = [leaving, *members]
        wait_for(
            lambda: _split(members, every) and len({r for m in everyone for r in m.read}) >= total,
            60,
            0,
            "every record read",
        )
    finally:
        for m in members:
            m.close()
    reads = [r for m in everyone for r in m.read]
    assert len(reads) == len(set(reads)) == total  # every record once, by one member
    # The committed offsets are the partitions' ends.
    from actors.types import TopicPartition

    ends = {tp: o.offset for tp, o in admin.list_offsets({TopicPartition(topic, p): -1 for p in range(6)}).items()}
    assert {tp: om.offset for tp, om in admin.list_group_offsets(group).items()} == ends
    listing = {g.group_id: g for g in admin.list_groups()}
    assert (listing[group].group_type, listing[group].state) == ("consumer", "Empty")


def test_a_regex_subscription_picks_up_a_topic_created_later(bootstrap, new_topic):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    other = new_topic(partitions=2)  # does not match: stays out
    prefix = _unique("rx")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = []

    def create(name: str, partitions: int) -> str:
        for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            f.result(30)
        created.append(name)
        return name

    try:
        a = create(f"{prefix}-a", 2)
        member = Member(bootstrap, _unique("rx-group"), "rx", [f"^{prefix}-.*"])
        try:
            wait_for(lambda: _split([member], {(a, 0), (a, 1)}), 60, 0, "the first matching topic")
            b = create(f"{prefix}-b", 3)
            p = Producer({"bootstrap.servers": bootstrap})
            for i in range(6):
                p.produce(b, value=b"late-%d" % i)
            assert p.flush(30) == 0
            wanted = {(a, 0), (a, 1), (b, 0), (b, 1), (b, 2)}
            wait_for(lambda: _split([member], wanted), 90, 0, "the topic created afterwards")
            wait_for(lambda: member.poll() or sum(1 for t, _, _ in member.read if t == b) == 6, 60, 0, "its records")
        finally:
            member.close()
    finally:
        for f in admin.delete_topics(created).values():
            f.result(30)
    assert all(t != other for t, _, _ in member.read)


def test_static_members_come_back_without_a_reassignment(bootstrap, new_topic):
    topic = new_topic(partitions=6)
    group = _unique("static")
    every = {(topic, p) for p in range(6)}
    members = [Member(bootstrap, group, f"s{i}", [topic], **{"group.instance.id": f"{group}-{i}"}) for i in range(3)]
    try:
        wait_for(lambda: _split(members, every), 90, 0, "three static members")
        before = {m.name: m.owned() for m in members}
        epochs_before = {m.instance_id: m.member_epoch for m in _cg_describe(bootstrap, group).members}
        for m in members:
            m.events.clear()
        members[1].close()  # a static member leaves with epoch -2: its partitions stay its own
        members[1] = Member(bootstrap, group, "s1", [topic], **{"group.instance.id": f"{group}-1"})
        wait_for(lambda: _split(members, every), 90, 0, "the static member came back")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # a few heartbeats: nothing else moves
            _split(members, every)
        after = {m.name: m.owned() for m in members}
        assert after == before
        assert members[0].events == [] and members[2].events == []  # nobody gave anything up
        epochs_after = {m.instance_id: m.member_epoch for m in _cg_describe(bootstrap, group).members}
        assert epochs_after == epochs_before  # no new group epoch
    finally:
        for m in members:
            m.close()


# -- the wire: ConsumerGroupDescribe, fencing, a flood ----------------------------------------------


def _heartbeat(wire: Wire, group: str, member: str, epoch: int, **fields):
    fields.setdefault("rebalance_timeout", NOT_SET)
    fields.setdefault("topic_partitions", None)
    values = dict(group_id=group, member_id=member, member_epoch=epoch, **fields)
    return wire.call(build_request(HEARTBEAT, 1, **values))


def _join(wire: Wire, group: str, member: str, topic: str):
    return _heartbeat(
        wire,
        group,
        member,
        0,
        rebalance_timeout=datetime.timedelta(seconds=30),
        subscribed_topic_names=[topic],
        topic_partitions=[],
    )


def _cg_describe(bootstrap: str, group: str):
    with Wire(bootstrap) as wire:
        response = wire.call(build_request(DESCRIBE, 1, group_ids=[group], include_authorized_operations=False))
    (described,) = response.groups
    return described


def test_a_stale_member_epoch_is_fenced_and_the_member_rejoins(bootstrap, new_topic):
    topic = new_topic(partitions=2)
    group, member = _unique("fence"), str(uuid.uuid4())
    with Wire(bootstrap) as wire:
        joined = _join(wire, group, member, topic)
        assert int(joined.error_code) == 0 and joined.member_epoch >= 1
        stale = _heartbeat(wire, group, member, joined.member_epoch + 5)
        assert int(stale.error_code) == 110  # FENCED_MEMBER_EPOCH
        unknown = _heartbeat(wire, group, "nobody", joined.member_epoch)
        assert int(unknown.error_code) == 25  # UNKNOWN_MEMBER_ID
        not_found = _heartbeat(wire, _unique("nogroup"), member, 3)
        assert int(not_found.error_code) == 69  # GROUP_ID_NOT_FOUND
        bad = _heartbeat(wire, group, member, -7)
        assert int(bad.error_code) == 42 and bad.error_message == "MemberEpoch is invalid."
        regex = _heartbeat(
            wire,
            group,
            str(uuid.uuid4()),
            0,
            subscribed_topic_regex="[",
            topic_partitions=[],
            rebalance_timeout=datetime.timedelta(seconds=30),
        )
        assert int(regex.error_code) == 128  # INVALID_REGULAR_EXPRESSION
        # Fenced, it joins again with epoch 0 and the same id.
        again = _join(wire, group, member, topic)
        assert int(again.error_code) == 0
        left = _heartbeat(wire, group, member, -1)
        assert int(left.error_code) == 0 and left.member_epoch == -1


def test_consumer_group_describe_answers_each_group_or_its_error(bootstrap, new_topic, cluster):
    topic = new_topic(partitions=3)
    group, member = _unique("describe"), str(uuid.uuid4())
    classic = _unique("classic")
    consumer = cluster.consumer(group_id=classic, auto_offset_reset="earliest")
    consumer.subscribe([topic])
    wait_for(lambda: consumer.poll(100) is not None and consumer.assignment(), 60, 0, "a classic group")
    try:
        with Wire(bootstrap) as wire:
            joined = _join(wire, group, member, topic)
            response = wire.call(
                build_request(
                    DESCRIBE, 1, group_ids=[group, classic, "no-such-group"], include_authorized_operations=False
                )
            )
            mine, theirs, none = response.groups
            assert int(mine.error_code) == 0 and mine.group_epoch == joined.member_epoch
            ((m,),) = [mine.members]
            assert m.member_id == member and m.member_type == 1 and m.client_id == "wire-test"
            assert {p for t in m.assignment.topic_partitions for p in t.partitions} == {0, 1, 2}
            assert [t.topic_name for t in m.assignment.topic_partitions] == [topic]
            assert int(theirs.error_code) == 69 and theirs.error_message == f"Group {classic} is not a consumer group."
            assert int(none.error_code) == 69 and none.error_message == "Group no-such-group not found."
            # DescribeGroups v6 refuses a consumer group the same way; v5 shows it Dead.
            dg = wire.call(build_request(15, 6, groups=[group], include_authorized_operations=False))
            assert int(dg.groups[0].error_code) == 69 and dg.groups[0].group_state == "Dead"
            dg5 = wire.call(build_request(15, 5, groups=[group], include_authorized_operations=False))
            assert int(dg5.groups[0].error_code) == 0 and dg5.groups[0].group_state == "Dead"
            # ListGroups v5 names each group's type, and filters by it.
            lg = wire.call(build_request(16, 5, states_filter=[], types_filter=["consumer"]))
            types = {g.group_id: g.group_type for g in lg.groups}
            assert types.get(group) == "consumer" and classic not in types
            _heartbeat(wire, group, member, -1)
    finally:
        consumer.close()


def test_a_heartbeat_flood_is_answered_in_order_and_writes_nothing(bootstrap, new_topic, cluster):
    import ray

    topic = new_topic(partitions=2)
    group, member = _unique("flood"), str(uuid.uuid4())
    with Wire(bootstrap) as wire:
        joined = _join(wire, group, member, topic)
        epoch = joined.member_epoch
        # The topic was created just before the join: the coordinator sees it at once.
        assert [list(t.partitions) for t in joined.assignment.topic_partitions] == [[0, 1]]
        owned = [{"topic_id": t.topic_id, "partitions": list(t.partitions)} for t in joined.assignment.topic_partitions]
        _heartbeat(wire, group, member, epoch, topic_partitions=owned)
        before = _offsets_log_end(cluster, group)
        # 2,000 heartbeats sent back to back, without reading: the gateway works on a bounded
        # number at a time and answers each, in order.
        body = build_request(
            HEARTBEAT,
            1,
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            rebalance_timeout=NOT_SET,
            topic_partitions=owned,
        )
        ids = [wire.send(body) for _ in range(2000)]
        for cid in ids:
            got, response = wire.receive(HEARTBEAT, 1)
            assert got == cid and int(response.error_code) == 0 and response.member_epoch == epoch
        assert _offsets_log_end(cluster, group) == before  # nothing changed, nothing written
        _heartbeat(wire, group, member, -1)
    # The coordinator is still at everyone's service.
    assert ray.get(cluster.group_coordinator.ping.remote())


def _offsets_log_end(cluster, group: str) -> int:
    from actors.names import OFFSETS_TOPIC, offsets_partition_for
    from actors.types import TopicPartition

    admin = cluster.admin()
    partitions = len(admin.describe_topics([OFFSETS_TOPIC])[OFFSETS_TOPIC].partitions)
    tp = TopicPartition(OFFSETS_TOPIC, offsets_partition_for(group, partitions))
    return admin.list_offsets({tp: -1})[tp].offset


def test_a_classic_group_is_upgraded_by_a_consumer_member_and_downgraded_when_it_leaves(bootstrap, new_topic, admin):
    """KIP-848's online migration with librdkafka on both protocols: a consumer-protocol member
    joining a group of classic members converts it (the classic members go on inside it, told
    to rejoin by their heartbeats), and the group is classic again once that member leaves.
    The classic members use the range assignor: librdkafka's cooperative-sticky copies its
    sticky user data into each assignment once the group has rebalanced, and such a group is
    not upgraded (as with Kafka: test_consumer_group_state's user-data test)."""
    topic = new_topic(partitions=4)
    group = _unique("migrate")
    every = {(topic, p) for p in range(4)}
    classic = [
        Member(
            bootstrap,
            group,
            f"c{i}",
            [topic],
            **{"group.protocol": "classic", "partition.assignment.strategy": "range"},
        )
        for i in range(2)
    ]
    newer = None

    def kind() -> str:
        return {g.group_id: g.group_type for g in admin.list_groups()}.get(group, "")

    try:
        wait_for(lambda: _split(classic, every), 90, 0, "two classic members")
        assert kind() == "classic"
        newer = Member(bootstrap, group, "k0", [topic])
        members = [*classic, newer]
        wait_for(lambda: _split(members, every), 120, 0, "the upgraded group of three")
        assert kind() == "consumer"
        described = _cg_describe(bootstrap, group)
        assert sorted(m.member_type for m in described.members) == [0, 0, 1]  # two classic, one consumer
        newer.close()
        newer = None
        wait_for(lambda: _split(classic, every) and kind() == "classic", 120, 0, "downgraded to classic")
    finally:
        for m in classic:
            m.close()
        if newer is not None:
            newer.close()
