"""KIP-848's consumer groups as a state machine, without Ray, on a manual clock (as Kafka tests
its GroupMetadataManager on MockTime): joins and epochs, incremental reconciliation (a
partition never has two owners), fencing of stale epochs, session and rebalance timeouts,
static members, regex subscriptions and topic changes, assignment batching, the records and
their replay, classic members inside consumer groups and the conversions between the two
kinds of group, offset commit checks, and hostile input.

The actor shell (writing the records, timers, the gateway) is tested end to end in
tests/gateway/test_consumer_groups.py and tests/jvm/test_java_client.py.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.clock import ManualClock
from actors.consumer_group_config import ConsumerGroupSettings
from actors.group_coordinator import consumer_records as cr
from actors.group_coordinator.consumer_group import ConsumerGroupState, MemberState
from actors.group_coordinator.consumer_protocol import decode_assignment, encode_assignment
from actors.group_coordinator.metadata_image import MetadataImage, TopicImage
from actors.group_coordinator.records import group_key
from actors.group_coordinator.server_assignors import MemberSpec, RangeAssignor, UniformAssignor
from actors.group_coordinator.shard import GroupCoordinatorShard
from actors.internal_records import SkippedRecords
from actors.protocol import GroupState, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from actors.protocol_consumer_groups import ConsumerGroupHeartbeatRequest as HB
from actors.types import JoinGroupResult, OffsetAndMetadata, TopicPartition
from storage.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
)

G = "g"
T, T_ID = "t", "tid-t"
U, U_ID = "u", "tid-u"
SETTINGS = ConsumerGroupSettings(assignment_interval_ms=0)


def image(**topics: int) -> MetadataImage:
    return MetadataImage.of(TopicImage(f"tid-{name}", name, n) for name, n in topics.items())


class Coordinator:
    """The shard, as the actor shell drives it: records kept, replayable."""

    def __init__(self, settings: ConsumerGroupSettings = SETTINGS, **topics: int) -> None:
        self.clock = ManualClock()
        self.shard = GroupCoordinatorShard(self.clock, lambda _: 0, 7 * 86_400_000, 0, settings)
        self.consumer = self.shard.consumer
        ids = itertools.count()
        self.shard.groups._new_member_id = lambda prefix: f"{prefix}-{next(ids)}"
        self.records: list = []
        self.set_image(**(topics or {T: 4}))

    def set_image(self, **topics: int) -> None:
        self.shard.groups.set_topic_counts(topics)
        self.take(
            self.consumer.set_image(
                MetadataImage.of((TopicImage(f"tid-{n}", n, c) for n, c in topics.items()), self.consumer.image)
            )
        )

    def take(self, result):
        self.records += [record for _, record in result.records]
        return result.response

    def hb(self, member: str, epoch: int, owned=None, **fields):
        if epoch == 0:
            fields.setdefault("rebalance_timeout_ms", 10_000)
            fields.setdefault("subscribed_topic_names", (T,))
            owned = () if owned is None else owned
        tps = None if owned is None else tuple((t, tuple(ps)) for t, ps in dict(owned).items())
        return self.take(self.shard.consumer_group_heartbeat(HB(G, member, epoch, topic_partitions=tps, **fields)))

    def join(self, member: str, **fields):
        return self.hb(member, 0, **fields)

    def group(self):
        return self.consumer.get(G)

    def member(self, member_id: str):
        return self.group().members[member_id]

    def poll(self):
        return self.take(self.consumer.poll())

    def replayed(self) -> GroupCoordinatorShard:
        """A fresh shard that replayed every record written so far."""
        other = GroupCoordinatorShard(ManualClock(), lambda _: 0, 7 * 86_400_000, 0, SETTINGS)
        for key, value in self.records:
            other.replay(key, value)
        return other


def parts(response) -> dict[str, set[int]]:
    return {t.topic_id: set(t.partitions) for t in response.assignment or ()}


def owners(c: Coordinator) -> dict[tuple[str, int], list[str]]:
    """Who holds each partition (assigned or pending revocation)."""
    out: dict[tuple[str, int], list[str]] = {}
    for mid, m in c.group().members.items():
        for held in (m.assigned, m.pending_revocation):
            for t, ps in held.items():
                for p in ps:
                    out.setdefault((t, p), []).append(mid)
    return out


# -- joining and reconciling --------------------------------------------------------------------


def test_a_first_member_gets_every_partition_at_epoch_one():
    c = Coordinator()
    r = c.join("m1")
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert parts(r) == {T_ID: {0, 1, 2, 3}}
    group = c.group()
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, ConsumerGroupState.STABLE)
    kinds = [cr.decode_any_key(k)[0] for k, _ in c.records]
    assert kinds == [
        cr.MEMBER_METADATA_KEY,
        cr.PARTITION_METADATA_KEY,
        cr.GROUP_EPOCH_KEY,
        cr.TARGET_MEMBER_KEY,
        cr.TARGET_EPOCH_KEY,
        cr.CURRENT_ASSIGNMENT_KEY,
    ]


def test_a_partition_moves_only_after_its_old_owner_revoked_it():
    c = Coordinator()
    c.join("m1")
    r2 = c.join("m2")
    # m2 is at the new epoch, but what it is given is still m1's: it waits.
    assert r2.member_epoch == 2 and parts(r2) == {}
    assert c.member("m2").state == MemberState.UNRELEASED_PARTITIONS
    assert c.group().state == ConsumerGroupState.RECONCILING
    target2 = c.group().target["m2"][T_ID]
    # m1 still reports all four: it must revoke m2's two first, and stays at epoch 1.
    r1 = c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
    assert r1.member_epoch == 1 and parts(r1)[T_ID] == {0, 1, 2, 3} - target2
    assert c.member("m1").state == MemberState.UNREVOKED_PARTITIONS
    assert all(len(who) == 1 for who in owners(c).values())
    # m2 asks again: still nothing (m1 has not let go).
    assert c.hb("m2", 2, owned={}).assignment is None
    # m1 reports it let them go: it moves to epoch 2.
    r1 = c.hb("m1", 1, owned={T_ID: sorted({0, 1, 2, 3} - target2)})
    assert r1.member_epoch == 2 and r1.assignment is None
    # Now they are free and m2 gets them.
    r2 = c.hb("m2", 2, owned={})
    assert parts(r2) == {T_ID: target2}
    assert c.group().state == ConsumerGroupState.STABLE
    assert sorted(len(m.assigned[T_ID]) for m in c.group().members.values()) == [2, 2]


def test_a_heartbeat_that_changes_nothing_writes_nothing():
    c = Coordinator()
    c.join("m1")
    before = len(c.records)
    for _ in range(1000):
        r = c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
        assert r.member_epoch == 1 and r.assignment is None
    assert len(c.records) == before


def test_the_preferred_assignor_is_the_one_members_name():
    c = Coordinator(**{T: 4, U: 4})
    c.join("m1", subscribed_topic_names=(T, U), server_assignor="range")
    c.join("m2", subscribed_topic_names=(T, U), server_assignor="range")
    # range: the first member (by id) gets the first half of each topic.
    assert c.group().target["m1"] == {T_ID: frozenset({0, 1}), U_ID: frozenset({0, 1})}
    assert c.consumer.describe([G])[0].assignor_name == "range"


# -- fencing --------------------------------------------------------------------------------------


def test_stale_and_future_epochs_are_fenced():
    c = Coordinator()
    c.join("m1")
    c.join("m2")
    c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
    c.hb("m1", 1, owned={T_ID: [0, 1]})  # m1 is at epoch 2 now, its previous epoch 1
    with pytest.raises(FencedMemberEpochError):
        c.hb("m1", 3, owned={T_ID: [0, 1]})
    with pytest.raises(FencedMemberEpochError):
        c.hb("m1", 0 + 1, owned={T_ID: [0, 1, 2]})  # its previous epoch, but it owns more than it has
    with pytest.raises(UnknownMemberIdError):
        c.hb("nobody", 1, owned={})
    with pytest.raises(GroupIdNotFoundError):
        c.take(c.shard.consumer_group_heartbeat(HB("other", "m9", 5, topic_partitions=())))


def test_the_previous_epoch_with_a_subset_is_accepted_as_a_lost_answer():
    c = Coordinator()
    c.join("m1")
    c.join("m2")
    c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
    r = c.hb("m1", 1, owned={T_ID: [0, 1]})
    assert r.member_epoch == 2
    # The answer was lost: m1 asks again with epoch 1 and a subset of what it has.
    assert c.hb("m1", 1, owned={T_ID: [0, 1]}).member_epoch == 2


def test_a_member_past_its_session_is_fenced_and_its_partitions_go_to_the_others():
    c = Coordinator()
    c.join("m1")
    c.join("m2")
    c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
    c.hb("m1", 1, owned={T_ID: list(c.member("m1").assigned[T_ID])})
    c.hb("m2", 2, owned={})
    epoch = c.group().group_epoch
    c.clock.advance(40_000)
    c.hb("m2", 2, owned={T_ID: list(c.member("m2").assigned[T_ID])})  # m2 stays alive
    assert c.poll() is None
    c.clock.advance(6_000)  # m1 is past 45 s
    c.poll()
    assert list(c.group().members) == ["m2"] and c.group().group_epoch == epoch + 1
    r = c.hb("m2", 2, owned={T_ID: list(c.member("m2").assigned[T_ID])})
    assert parts(r) == {T_ID: {0, 1, 2, 3}}


def test_a_member_that_does_not_revoke_in_time_is_fenced():
    c = Coordinator()
    c.join("m1", rebalance_timeout_ms=2000)
    c.join("m2")
    c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
    assert c.member("m1").state == MemberState.UNREVOKED_PARTITIONS
    c.clock.advance(1500)
    c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})  # still holding on
    c.poll()
    assert "m1" in c.group().members
    c.clock.advance(600)
    c.poll()
    assert "m1" not in c.group().members
    assert c.consumer.next_deadline() is not None  # m2's session


def test_leaving_with_epoch_minus_one_removes_the_member():
    c = Coordinator()
    c.join("m1")
    c.join("m2")
    r = c.hb("m2", -1)
    assert r.member_epoch == -1 and "m2" not in c.group().members
    with pytest.raises(UnknownMemberIdError):
        c.hb("m2", -1)


# -- static members ------------------------------------------------------------------------------


def test_a_static_member_comes_back_with_its_partitions_and_no_new_epoch():
    c = Coordinator()
    c.join("a1", instance_id="A")
    c.join("b1", instance_id="B")
    c.hb("a1", 1, owned={T_ID: [0, 1, 2, 3]})
    c.hb("a1", 1, owned={T_ID: list(c.member("a1").assigned[T_ID])})
    c.hb("b1", 2, owned={})
    held = set(c.member("a1").assigned[T_ID])
    epoch = c.group().group_epoch
    # While A's first instance is alive, another instance may not take its id.
    with pytest.raises(UnreleasedInstanceIdError):
        c.join("a2", instance_id="A")
    left = c.hb("a1", -2, instance_id="A")
    assert left.member_epoch == -2 and c.member("a1").member_epoch == -2
    # Its partitions are still its own while it is away.
    assert {p for (t, p), who in owners(c).items() if who == ["a1"]} == held
    back = c.join("a2", instance_id="A")
    assert parts(back) == {T_ID: held} and back.member_epoch == epoch
    assert c.group().group_epoch == epoch and set(c.group().members) == {"a2", "b1"}
    with pytest.raises(FencedInstanceIdError):
        c.hb("a1", 2, instance_id="A", owned={})


def test_a_static_member_away_past_its_session_is_removed():
    c = Coordinator()
    c.join("a1", instance_id="A")
    c.hb("a1", -2, instance_id="A")
    c.clock.advance(46_000)
    c.poll()
    assert not c.group().members and c.group().state == ConsumerGroupState.EMPTY


# -- subscriptions, regexes, topic changes ----------------------------------------------------------


def test_a_regex_subscription_picks_up_a_topic_created_later():
    c = Coordinator(**{"logs-a": 2, "other": 2})
    r = c.join("m1", subscribed_topic_names=None, subscribed_topic_regex="logs-.*")
    assert parts(r) == {"tid-logs-a": {0, 1}}
    c.set_image(**{"logs-a": 2, "other": 2, "logs-b": 3})
    r = c.hb("m1", c.member("m1").member_epoch, owned={"tid-logs-a": [0, 1]})
    assert parts(r) == {"tid-logs-a": {0, 1}, "tid-logs-b": {0, 1, 2}}
    # RE2 semantics: the whole name must match; internal topics are never matched.
    c.set_image(**{"logs-a": 2, "other": 2, "logs-b": 3, "xlogs-c": 1, "__consumer_offsets": 1})
    assert set(c.group().resolved_regexes["logs-.*"].topics) == {"logs-a", "logs-b"}


def test_an_invalid_regex_is_refused_with_kafkas_error():
    c = Coordinator()
    with pytest.raises(InvalidRegularExpressionError):
        c.join("m1", subscribed_topic_names=None, subscribed_topic_regex="[")
    with pytest.raises(InvalidRegularExpressionError):  # RE2 has no lookahead
        c.join("m1", subscribed_topic_names=None, subscribed_topic_regex="(?=x)t")
    assert c.group() is None


def test_partitions_added_reach_the_assignment():
    c = Coordinator()
    c.join("m1")
    epoch = c.group().group_epoch
    c.set_image(**{T: 6})
    assert c.group().group_epoch == epoch + 1
    r = c.hb("m1", epoch, owned={T_ID: [0, 1, 2, 3]})
    assert parts(r) == {T_ID: {0, 1, 2, 3, 4, 5}}


def test_a_member_subscribing_to_a_topic_that_does_not_exist_yet_gets_it_when_it_appears():
    c = Coordinator()
    r = c.join("m1", subscribed_topic_names=("later",))
    assert r.assignment == ()
    c.set_image(**{T: 4, "later": 2})
    r = c.hb("m1", c.member("m1").member_epoch, owned={})
    assert parts(r) == {"tid-later": {0, 1}}


def test_assignments_are_batched_within_the_assignment_interval():
    c = Coordinator(ConsumerGroupSettings(assignment_interval_ms=1000))
    c.join("m1")
    assert c.group().assignment_epoch == 1
    r = c.join("m2")  # within the interval: the group epoch moves, the target does not yet
    assert c.group().group_epoch == 2 and c.group().assignment_epoch == 1 and r.member_epoch == 1
    assert c.group().state == ConsumerGroupState.ASSIGNING
    assert c.consumer.next_deadline() == pytest.approx(c.clock.monotonic() + 1.0)
    c.clock.advance(1000)
    c.poll()
    assert c.group().assignment_epoch == 2 and set(c.group().target) == {"m1", "m2"}


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        (dict(group_id=""), InvalidRequestError, "GroupId can't be empty."),
        (dict(member_id=""), InvalidRequestError, "MemberId can't be empty."),
        (dict(instance_id=" "), InvalidRequestError, "InstanceId can't be empty."),
        (dict(rack_id=""), InvalidRequestError, "RackId can't be empty."),
        (dict(rebalance_timeout_ms=-1), InvalidRequestError, "RebalanceTimeoutMs must be provided"),
        (dict(topic_partitions=None), InvalidRequestError, "TopicPartitions must be empty"),
        (dict(topic_partitions=((T_ID, (0,)),)), InvalidRequestError, "TopicPartitions must be empty"),
        (dict(subscribed_topic_names=None), InvalidRequestError, "Either SubscribedTopicNames"),
        (dict(member_epoch=-3), InvalidRequestError, "MemberEpoch is invalid."),
        (dict(member_epoch=-2), InvalidRequestError, "InstanceId can't be null."),
        (dict(server_assignor="sticky"), UnsupportedAssignorError, "Supported assignors: uniform, range."),
        (dict(subscribed_topic_names=("t",) * (10_000 + 1)), InvalidRequestError, "at most"),
        (dict(subscribed_topic_regex="x" * 20_000), InvalidRequestError, "longer than"),
        (dict(member_epoch="1"), InvalidRequestError, "member_epoch must be an integer"),
        (dict(subscribed_topic_names=(1, 2)), InvalidRequestError, "list of names"),
    ],
)
def test_invalid_heartbeats_get_kafkas_errors_and_change_nothing(fields, error, message):
    c = Coordinator()
    base = dict(
        group_id=G,
        member_id="m1",
        member_epoch=0,
        rebalance_timeout_ms=10_000,
        subscribed_topic_names=(T,),
        topic_partitions=(),
    )
    with pytest.raises(error, match=message.replace(".", r"\.")):
        c.shard.consumer_group_heartbeat(HB(**{**base, **fields}))
    assert c.group() is None and not c.records


def test_the_protocol_can_be_switched_off():
    c = Coordinator(ConsumerGroupSettings(enabled=False))
    with pytest.raises(UnsupportedVersionError):
        c.join("m1")


def test_a_full_group_refuses_new_members():
    c = Coordinator(ConsumerGroupSettings(max_size=2, assignment_interval_ms=0))
    c.join("m1")
    c.join("m2")
    with pytest.raises(GroupMaxSizeReachedError):
        c.join("m3")
    assert c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]}).member_epoch == 1  # members go on


# -- records and replay ----------------------------------------------------------------------------


def test_the_records_replay_into_the_same_group():
    c = Coordinator(**{T: 4, "logs-a": 2})
    c.join("m1", instance_id="A")
    c.join("m2", subscribed_topic_names=None, subscribed_topic_regex="logs-.*")
    c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
    c.hb("m1", 1, owned={T_ID: [0, 1]})  # mid-reconciliation: m2 not told yet
    live = c.group()
    again = c.replayed().consumer.get(G)
    assert (again.group_epoch, again.assignment_epoch) == (live.group_epoch, live.assignment_epoch)
    assert again.members == live.members and again.target == live.target
    assert again.partition_epochs == live.partition_epochs and again.static == live.static
    assert again.resolved_regexes == live.resolved_regexes
    assert again.subscription_metadata == live.subscription_metadata
    assert str(again.state) == str(live.state)


def test_a_record_that_cannot_be_read_is_skipped_and_counted():
    c = Coordinator()
    c.join("m1")
    bad = [
        (cr.current_assignment_key(G, "m1"), b"{not json"),
        (cr.group_epoch_key(G), b'{"epoch": "one"}'),
        (cr.member_metadata_key(G, "mx"), b'{"subscribed_topic_names": [1]}'),
        (b'[5, "g"]', b"{}"),  # a member key without a member
        (cr.target_member_key(G, "m1"), b'{"topic_partitions": [{"topic_id": "x", "partitions": ["a"]}]}'),
        (
            cr.current_assignment_key(G, "m1"),
            b'{"member_epoch":1,"previous_member_epoch":0,"state":0,'
            b'"assigned_partitions":[{"topic_id":"x","partitions":[1,2],"assignment_epochs":[1]}]}',
        ),
    ]
    other = c.replayed()
    before = other.consumer.get(G).members
    skipped = SkippedRecords("__consumer_offsets")
    for i, (key, value) in enumerate(bad):
        try:
            other.replay(key, value)
        except (ValueError, TypeError, KeyError) as exc:
            skipped.skip(0, i, exc)
    assert skipped.count == len(bad)
    assert other.consumer.get(G).members == before


def test_a_state_written_by_a_newer_version_fences_the_member():
    c = Coordinator()
    c.join("m1")
    other = c.replayed()
    value = (
        b'{"member_epoch":1,"previous_member_epoch":0,"state":42,'
        b'"assigned_partitions":[],"partitions_pending_revocation":[]}'
    )
    other.replay(cr.current_assignment_key(G, "m1"), value)
    assert other.consumer.get(G).members["m1"].state == MemberState.UNKNOWN
    with pytest.raises(FencedMemberEpochError):
        other.consumer_group_heartbeat(HB(G, "m1", 1, topic_partitions=((T_ID, (0,)),)))


# -- offsets -----------------------------------------------------------------------------------


def test_offset_commits_are_checked_against_the_member_epoch():
    c = Coordinator()
    c.join("m1")
    c.join("m2")
    c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
    kept = sorted(c.member("m1").assigned[T_ID])
    c.hb("m1", 1, owned={T_ID: kept})  # m1 at epoch 2, its partitions assigned at epoch 1
    s = c.shard
    assert s.validate_offset_commit(G, "m1", None, 2, api_version=9) is None
    with pytest.raises(StaleMemberEpochError):
        s.validate_offset_commit(G, "m1", None, 3, api_version=9)
    with pytest.raises(UnsupportedVersionError):
        s.validate_offset_commit(G, "m1", None, 2, api_version=8)
    with pytest.raises(UnknownMemberIdError):
        s.validate_offset_commit(G, "nobody", None, 2, api_version=9)
    # An older epoch commits only what the member held since then (Kafka 4.4).
    check = s.validate_offset_commit(G, "m1", None, 1, api_version=9)
    assert check(TopicPartition(T, kept[0])) is None
    moved = ({0, 1, 2, 3} - set(kept)).pop()
    assert isinstance(check(TopicPartition(T, moved)), StaleMemberEpochError)
    # Standalone commits (the Admin client's) only while the group is empty.
    with pytest.raises(UnknownMemberIdError):
        s.validate_offset_commit(G, "", None, -1)
    s.validate_offset_fetch(G, None, -1)
    s.validate_offset_fetch(G, "m1", 2)
    with pytest.raises(StaleMemberEpochError):
        s.validate_offset_fetch(G, "m1", 1)


def test_committed_offsets_survive_the_group_and_the_group_is_deleted_when_empty():
    c = Coordinator()
    c.join("m1")
    tp = TopicPartition(T, 0)
    c.shard.offsets.apply_commit(G, c.shard.offsets.stamp({tp: OffsetAndMetadata(5)}))
    assert c.shard.check_delete_groups([G])[G] is not None  # a member is still in it
    c.hb("m1", -1)
    assert c.shard.check_delete_groups([G])[G] is None
    assert c.shard.offsets.fetch(G, [tp])[tp].offset == 5
    assert ("g", "Empty", "consumer", "consumer") in c.shard.list_groups()


# -- the classic protocol and consumer groups --------------------------------------------------------


def subscription(*topics: str, owned: tuple[tuple[str, int], ...] = ()) -> bytes:
    """A ConsumerProtocolSubscription v1 (what a Kafka client's JoinGroup carries)."""
    body = len(topics).to_bytes(4, "big") + b"".join(len(t).to_bytes(2, "big") + t.encode() for t in topics)
    body += (-1).to_bytes(4, "big", signed=True)  # no user data
    by_topic: dict[str, list[int]] = {}
    for t, p in owned:
        by_topic.setdefault(t, []).append(p)
    body += len(by_topic).to_bytes(4, "big")
    for t, ps in by_topic.items():
        body += len(t).to_bytes(2, "big") + t.encode() + len(ps).to_bytes(4, "big")
        body += b"".join(p.to_bytes(4, "big") for p in ps)
    return (1).to_bytes(2, "big") + body


def classic_join(c: Coordinator, member_id: str = "", owned=(), instance_id=None, protocols=("range",)):
    metadata = tuple(subscription(T, owned=owned) for _ in protocols)
    request = JoinGroupRequest(
        G,
        member_id,
        instance_id,
        "java",
        10_000,
        10_000,
        protocols,
        (T,),
        metadata=metadata,
        require_known_member_id=False,
    )
    return c.take(c.shard.join_group(request))


def test_a_classic_member_joins_a_consumer_group_and_follows_its_epochs():
    c = Coordinator()
    c.join("m1")
    joined = classic_join(c)
    assert isinstance(joined, JoinGroupResult) and joined.generation_id == 2 and joined.leader_id == ""
    member_id = joined.member_id
    assert c.member(member_id).uses_classic_protocol
    synced = c.take(c.shard.sync_group(SyncGroupRequest(G, member_id, None, 2)))
    assert synced.assignment == ()  # its target is still m1's
    partitions, user_data = decode_assignment(synced.member_assignment)
    assert partitions == () and user_data is None
    # m1 revokes; the classic member is told to rejoin, and gets its partitions.
    c.hb("m1", 1, owned={T_ID: [0, 1, 2, 3]})
    c.hb("m1", 1, owned={T_ID: sorted(c.member("m1").assigned[T_ID])})
    with pytest.raises(RebalanceInProgressError):
        c.shard.heartbeat(HeartbeatRequest(G, member_id, None, 2))
    again = classic_join(c, member_id)
    synced = c.take(c.shard.sync_group(SyncGroupRequest(G, member_id, None, again.generation_id)))
    assert len(synced.assignment) == 2
    # SyncGroup v5 names the protocol of the JoinGroup answer; another one is refused.
    for wrong in (dict(protocol_type="connect"), dict(protocol_name="roundrobin")):
        with pytest.raises(InconsistentGroupProtocolError):
            c.shard.sync_group(SyncGroupRequest(G, member_id, None, again.generation_id, **wrong))
    c.shard.sync_group(
        SyncGroupRequest(G, member_id, None, again.generation_id, protocol_type="consumer", protocol_name="range")
    )
    assert decode_assignment(synced.member_assignment)[0] == synced.assignment
    c.shard.heartbeat(HeartbeatRequest(G, member_id, None, again.generation_id))  # nothing to do
    with pytest.raises(IllegalGenerationError):
        c.shard.heartbeat(HeartbeatRequest(G, member_id, None, 99))
    # A consumer-protocol member may not use the classic calls.
    with pytest.raises(UnknownMemberIdError):
        c.shard.heartbeat(HeartbeatRequest(G, "m1", None, 2))


def test_a_classic_member_with_foreign_protocols_is_refused():
    c = Coordinator()
    c.join("m1")
    classic_join(c, protocols=("range",))
    with pytest.raises(InconsistentGroupProtocolError):
        classic_join(c, protocols=("roundrobin",))


def test_the_last_consumer_member_leaving_downgrades_the_group_to_classic():
    c = Coordinator()
    c.join("m1")
    member_id = classic_join(c).member_id
    c.hb("m1", -1)
    assert c.consumer.get(G) is None
    classic = c.shard.groups.get(G)
    assert classic is not None and classic.client_assigned and set(classic.members) == {member_id}
    assert classic.state == GroupState.PREPARING_REBALANCE
    # Replayed, the log agrees: a classic group of that id, no consumer group.
    other = c.replayed()
    assert other.consumer.get(G) is None and set(other.groups.get(G).members) == {member_id}


def test_a_consumer_heartbeat_upgrades_a_classic_group_of_kafka_clients():
    c = Coordinator()
    classic_join(c)
    classic = c.shard.groups.get(G)
    (member_id,) = classic.members
    owned = (TopicPartition(T, 0), TopicPartition(T, 1), TopicPartition(T, 2), TopicPartition(T, 3))
    c.take(
        c.shard.sync_group(
            SyncGroupRequest(
                G, member_id, None, classic.generation, {member_id: encode_assignment(owned, 1)}, {member_id: owned}
            )
        )
    )
    generation = classic.generation
    r = c.join("m1")
    group = c.consumer.get(G)
    assert c.shard.groups.get(G) is None and group is not None
    assert group.members[member_id].member_epoch == generation and group.members[member_id].uses_classic_protocol
    assert r.member_epoch == generation + 1 and r.assignment == ()  # the classic member must revoke first
    with pytest.raises(RebalanceInProgressError):
        c.shard.heartbeat(HeartbeatRequest(G, member_id, None, generation))
    assert (group_key(G), None) in c.records


def test_a_classic_group_that_cannot_be_read_is_not_upgraded():
    c = Coordinator(ConsumerGroupSettings(migration_policy="downgrade", assignment_interval_ms=0))
    classic_join(c)
    with pytest.raises(GroupIdNotFoundError, match="is not a consumer group"):
        c.join("m1")
    assert c.shard.groups.get(G) is not None  # unchanged


def test_a_classic_group_whose_assignment_carries_user_data_is_not_upgraded():
    # As Kafka's ConsumerGroup.fromClassicGroup: user data in a member's assignment (a custom
    # assignor's, or librdkafka's cooperative-sticky, which copies its sticky data there once the
    # group has rebalanced) would be lost: GROUP_ID_NOT_FOUND, the classic group unchanged.
    c = Coordinator()
    classic_join(c)
    classic = c.shard.groups.get(G)
    (member_id,) = classic.members
    owned = (TopicPartition(T, 0), TopicPartition(T, 1))
    plain = encode_assignment(owned, 1)
    assert plain.endswith(b"\xff\xff\xff\xff")  # null user data
    with_data = plain[:-4] + (6).to_bytes(4, "big") + b"sticky"
    assert decode_assignment(with_data) == (owned, b"sticky")
    c.take(c.shard.sync_group(SyncGroupRequest(G, member_id, None, classic.generation, {member_id: with_data}, {})))
    with pytest.raises(GroupIdNotFoundError, match="is not a consumer group"):
        c.join("m1")
    assert c.consumer.get(G) is None and c.shard.groups.get(G) is classic


def test_an_empty_group_changes_kind_either_way():
    c = Coordinator()
    c.join("m1")
    c.hb("m1", -1)
    member = classic_join(c)
    assert c.consumer.get(G) is None and c.shard.groups.get(G) is not None
    c.take(c.shard.leave_group(LeaveGroupRequest(G, member.member_id)))
    c.shard.groups.poll()
    assert not c.shard.groups.get(G).members
    assert c.join("m2").member_epoch >= 1 and c.shard.groups.get(G) is None


# -- the server-side assignors ----------------------------------------------------------------------


def spec(topics, current=None, instance=None):
    return MemberSpec(frozenset(topics), instance, None, current or {})


@settings(max_examples=150, deadline=None)
@given(
    members=st.integers(1, 8),
    counts=st.lists(st.integers(0, 12), min_size=1, max_size=4),
    seed=st.randoms(use_true_random=False),
)
def test_uniform_is_complete_balanced_and_sticky(members, counts, seed):
    topics = {f"t{i}": n for i, n in enumerate(counts)}
    specs = {f"m{i}": spec(topics) for i in range(members)}
    first = UniformAssignor().assign(specs, topics)
    every = [(t, p) for t, n in topics.items() for p in range(n)]
    held = [(t, p) for a in first.values() for t, ps in a.items() for p in ps]
    assert sorted(held) == sorted(every)  # every partition, once
    sizes = [sum(len(ps) for ps in a.values()) for a in first.values()]
    assert max(sizes) - min(sizes) <= 1
    # One more member: each old member keeps what it had up to its new share.
    specs2 = {m: spec(topics, first[m]) for m in specs} | {"new": spec(topics)}
    second = UniformAssignor().assign(specs2, topics)
    share = len(every) // (members + 1)
    for m in specs:
        kept = sum(len(first[m].get(t, set()) & second[m].get(t, set())) for t in topics)
        assert kept >= min(share, sum(len(ps) for ps in first[m].values()))


@settings(max_examples=100, deadline=None)
@given(
    subs=st.lists(st.sets(st.sampled_from(["a", "b", "c"]), min_size=1), min_size=1, max_size=6),
    counts=st.fixed_dictionaries({"a": st.integers(0, 9), "b": st.integers(0, 9), "c": st.integers(0, 9)}),
)
def test_both_assignors_give_each_partition_to_one_subscriber(subs, counts):
    specs = {f"m{i}": spec(s) for i, s in enumerate(subs)}
    subscribed = {t for s in subs for t in s}
    for assignor in (UniformAssignor(), RangeAssignor()):
        out = assignor.assign(specs, counts)
        seen: dict[tuple[str, int], str] = {}
        for m, a in out.items():
            for t, ps in a.items():
                assert t in specs[m].topic_ids
                for p in ps:
                    assert (t, p) not in seen
                    seen[(t, p)] = m
        assert set(seen) == {(t, p) for t in subscribed for p in range(counts[t])}


def test_range_gives_contiguous_ranges_static_members_first():
    specs = {"m-b": spec({"a"}), "m-a": spec({"a"}), "z": spec({"a"}, instance="i1")}
    out = RangeAssignor().assign(specs, {"a": 7})
    assert out["z"] == {"a": frozenset({0, 1, 2})}
    assert out["m-a"] == {"a": frozenset({3, 4})} and out["m-b"] == {"a": frozenset({5, 6})}


def test_rayqueues_own_classic_consumer_is_a_member_of_a_consumer_group_too():
    """A rayqueue consumer on the classic protocol (its subscription spelled out, no protocol
    metadata) joins a consumer group as a classic member; by regex it may not."""
    c = Coordinator()
    c.join("m1")
    native = JoinGroupRequest(G, "", None, "rayqueue", 10_000, 10_000, ("range",), (T,))
    joined = c.take(c.shard.join_group(native))
    assert joined.generation_id == 2 and c.member(joined.member_id).uses_classic_protocol
    synced = c.take(c.shard.sync_group(SyncGroupRequest(G, joined.member_id, None, 2)))
    assert synced.member_assignment == b""  # rayqueue's consumer reads the partitions, not bytes
    by_regex = JoinGroupRequest(G, "", None, "rayqueue", 10_000, 10_000, ("range",), (), pattern="t.*")
    with pytest.raises(InconsistentGroupProtocolError):
        c.shard.join_group(by_regex)
    assert c.take(c.consumer.poll()) is None
    assert len(c.consumer.poll().rebalances) == 0


def test_each_epoch_bump_counts_as_a_rebalance():
    c = Coordinator()
    first = c.shard.consumer_group_heartbeat(
        HB(G, "m1", 0, rebalance_timeout_ms=1000, subscribed_topic_names=(T,), topic_partitions=())
    )
    assert first.rebalances == [G]
    again = c.shard.consumer_group_heartbeat(HB(G, "m1", 1, topic_partitions=((T_ID, (0, 1, 2, 3)),)))
    assert again.rebalances == []


def test_version_0_lets_the_coordinator_name_a_joining_member():
    c = Coordinator()
    joined = c.take(
        c.shard.consumer_group_heartbeat(
            HB(G, "", 0, rebalance_timeout_ms=1000, subscribed_topic_names=(T,), topic_partitions=(), api_version=0)
        )
    )
    assert joined.member_id and joined.member_id in c.group().members
    with pytest.raises(InvalidRequestError, match="MemberId can't be empty"):
        c.shard.consumer_group_heartbeat(HB(G, "", 1, topic_partitions=(), api_version=0))
