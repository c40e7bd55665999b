"""The group coordinator's state machines without Ray, on a manual clock (as Kafka tests its
GroupMetadataManager and OffsetMetadataManager on MockTime): joins, syncs, heartbeats,
session, poll and rebalance timeouts by advancing the clock, static members, leaving,
generation fencing, groups of Kafka clients, offset commits and fetches, transactional
offsets, offset expiry and the records that replay into the same state.

``Shell`` plays the actor shell's part: it keeps the answers the state machine hands to
parked calls and the records it asks to write. The shell itself (parking on futures,
writing to ``__consumer_offsets``) is tested end to end in tests/rayqueue/test_groups.py.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from actors.assignors import COOPERATIVE, EAGER
from actors.clock import ManualClock
from actors.group_coordinator.classic_group import ClassicGroup, IllegalGroupStateError
from actors.group_coordinator.group_metadata_manager import JOIN_GRACE_MS, GroupMetadataManager
from actors.group_coordinator.offset_metadata_manager import OffsetMetadataManager
from actors.group_coordinator.records import group_key, offset_key, offset_records
from actors.group_coordinator.results import GroupResult, Parked, Wait
from actors.group_coordinator.shard import GroupCoordinatorShard
from actors.protocol import (
    GroupState,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from actors.types import JoinGroupResult, OffsetAndMetadata, TopicPartition
from storage.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)

G = "group"
SESSION_MS = 3000
REBALANCE_MS = 10_000
RETENTION_MS = 7 * 24 * 3600 * 1000
T = "t"
TPS = [TopicPartition(T, p) for p in range(4)]


class Shell:
    """The actor shell's bookkeeping around a :class:`GroupCoordinatorShard`."""

    def __init__(self, clock: ManualClock, initial_delay_ms: int = 0) -> None:
        self.clock = clock
        self.state = GroupCoordinatorShard(clock, lambda group_id: 0, RETENTION_MS, initial_delay_ms)
        names = itertools.count()
        # Deterministic member ids (prefix-N) instead of uuids.
        self.groups = self.state.groups
        self.groups._new_member_id = lambda prefix: f"{prefix}-{next(names)}"
        self.groups.set_topic_counts({T: 4, "u": 2})
        self.offsets = self.state.offsets
        self.answers: dict[tuple[Wait, str], Any] = {}
        self.records: list = []
        self.rebalances = 0

    def run(self, result: GroupResult) -> Any:
        for answer in result.answers:
            key = (answer.kind, answer.member_id)
            assert key not in self.answers, f"{key} answered twice"
            self.answers[key] = answer.result
        self.records += [record for _, record in result.records]
        self.rebalances += len(result.rebalances)
        return result.response

    def join(self, member_id: str = "", instance: str | None = None, **kw: Any) -> Any:
        request = JoinGroupRequest(
            kw.pop("group", G),
            member_id,
            instance,
            kw.pop("client_id", "c"),
            kw.pop("session_ms", SESSION_MS),
            kw.pop("rebalance_ms", REBALANCE_MS),
            tuple(kw.pop("protocols", ("range",))),
            tuple(kw.pop("topics", (T,))),
            **kw,
        )
        return self.run(self.groups.join_group(request))

    def answer(self, kind: Wait, member_id: str) -> Any:
        """The answer a parked call got (and forget it), or KeyError if it has none yet."""
        return self.answers.pop((kind, member_id))

    def joined(self, response: Any) -> JoinGroupResult:
        """A join's result, whether it came at once or to the parked call."""
        if isinstance(response, Parked):
            result = self.answer(Wait.JOIN, response.member_id)
        else:
            result = response
        if isinstance(result, BaseException):
            raise result
        return result

    def sync(self, joined: JoinGroupResult, **kw: Any) -> Any:
        request = SyncGroupRequest(G, joined.member_id, kw.pop("instance", None), joined.generation_id, **kw)
        return self.run(self.groups.sync_group(request))

    def heartbeat(self, joined: JoinGroupResult, instance: str | None = None, poll_age_ms: int = 0) -> None:
        self.groups.heartbeat(HeartbeatRequest(G, joined.member_id, instance, joined.generation_id, poll_age_ms))

    def leave(self, member_id: str, instance: str | None = None) -> None:
        self.run(self.groups.leave_group(LeaveGroupRequest(G, member_id, instance)))

    def poll(self) -> None:
        self.run(self.groups.poll())

    def group(self) -> ClassicGroup:
        return self.groups.get(G)

    def assignment(self, member_id: str) -> set[TopicPartition]:
        return set(self.group().members[member_id].assignment)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def shell(clock: ManualClock) -> Shell:
    return Shell(clock)


def stable_pair(shell: Shell) -> tuple[JoinGroupResult, JoinGroupResult]:
    """Two members a and b of a Stable group splitting T's four partitions."""
    a = shell.joined(shell.join(client_id="a"))
    b_parked = shell.join(client_id="b")
    a = shell.joined(shell.join(a.member_id, client_id="a"))
    b = shell.joined(b_parked)
    assert shell.group().state == GroupState.STABLE and a.generation_id == b.generation_id == 2
    return a, b


# -- join, sync, heartbeat --------------------------------------------------------------------


def test_a_first_member_joins_syncs_and_is_stable(shell, clock):
    parked = shell.join(client_id="a")
    # The join parks; being the only member, it completed the rebalance itself.
    assert isinstance(parked, Parked) and parked.kind == Wait.JOIN
    assert parked.timeout_ms == REBALANCE_MS + JOIN_GRACE_MS
    joined = shell.joined(parked)
    assert (joined.generation_id, joined.member_id, joined.leader_id) == (1, "a-0", "a-0")
    assert (joined.protocol, joined.rebalance_protocol) == ("range", EAGER)
    group = shell.group()
    assert group.state == GroupState.STABLE and group.state_timestamp_ms == clock.wall_ms()
    assert shell.sync(joined) == SyncGroupResponse(tuple(TPS))
    assert shell.rebalances == 1 and len(shell.records) == 1  # the group's metadata record
    shell.heartbeat(joined)


def test_a_second_member_rebalances_the_group_and_splits_the_partitions(shell):
    a = shell.joined(shell.join(client_id="a"))
    b_parked = shell.join(client_id="b")
    assert shell.group().state == GroupState.PREPARING_REBALANCE
    with pytest.raises(KeyError):
        shell.answer(Wait.JOIN, b_parked.member_id)  # b waits for a to rejoin
    with pytest.raises(RebalanceInProgressError) as info:
        shell.heartbeat(a)  # how a learns it must rejoin
    assert info.value.kafka_name == "REBALANCE_IN_PROGRESS"
    with pytest.raises(RebalanceInProgressError):
        shell.sync(a)
    a2 = shell.joined(shell.join(a.member_id, client_id="a"))
    b = shell.joined(b_parked)
    assert a2.generation_id == b.generation_id == 2 and a2.leader_id == b.leader_id == a.member_id
    assert shell.assignment(a.member_id) | shell.assignment(b.member_id) == set(TPS)
    assert len(shell.assignment(a.member_id)) == len(shell.assignment(b.member_id)) == 2


def test_a_stale_generation_is_fenced(shell):
    a, b = stable_pair(shell)
    stale = JoinGroupResult(1, a.member_id, "range", a.leader_id, EAGER)
    with pytest.raises(IllegalGenerationError) as info:
        shell.heartbeat(stale)
    assert info.value.kafka_name == "ILLEGAL_GENERATION"
    with pytest.raises(IllegalGenerationError):
        shell.sync(stale)
    with pytest.raises(IllegalGenerationError):
        shell.groups.validate_offset_commit(G, a.member_id, None, 1)
    with pytest.raises(IllegalGenerationError):
        shell.groups.validate_txn_offset_commit(G, a.member_id, None, 1)
    shell.groups.validate_txn_offset_commit(G, a.member_id, None, -1)  # no generation given: member checked only
    shell.groups.validate_offset_commit(G, b.member_id, None, 2)


def test_an_unknown_member_is_refused(shell):
    a = shell.joined(shell.join(client_id="a"))
    ghost = JoinGroupResult(1, "ghost", "range", a.leader_id, EAGER)
    for call in (
        lambda: shell.heartbeat(ghost),
        lambda: shell.sync(ghost),
        lambda: shell.leave("ghost"),
        lambda: shell.join("ghost"),
        lambda: shell.groups.validate_offset_commit(G, "ghost", None, 1),
        lambda: shell.groups.heartbeat(HeartbeatRequest("no-such-group", "ghost", None, 1)),
    ):
        with pytest.raises(UnknownMemberIdError) as info:
            call()
        assert info.value.kafka_name == "UNKNOWN_MEMBER_ID"


@pytest.mark.parametrize(
    "kw, error",
    [
        (dict(group=""), InvalidGroupIdError),
        (dict(protocols=()), InconsistentGroupProtocolError),
        (dict(metadata=(b"x", b"y")), InvalidRequestError),  # one metadata per protocol
    ],
)
def test_bad_joins_are_refused(shell, kw, error):
    with pytest.raises(error):
        shell.join(**kw)


def test_a_member_that_supports_no_common_protocol_is_refused(shell):
    shell.joined(shell.join(client_id="a", protocols=("range",)))
    with pytest.raises(InconsistentGroupProtocolError) as info:
        shell.join(client_id="b", protocols=("roundrobin",))
    assert info.value.kafka_name == "INCONSISTENT_GROUP_PROTOCOL"


def test_the_protocol_every_member_supports_with_the_most_votes_wins(shell):
    a = shell.joined(shell.join(client_id="a", protocols=("roundrobin", "range")))
    b_parked = shell.join(client_id="b", protocols=("range", "roundrobin"))
    c_parked = shell.join(client_id="c", protocols=("range",))
    # c supports only range: the candidates are [range]; roundrobin is not among them.
    a = shell.joined(shell.join(a.member_id, client_id="a", protocols=("roundrobin", "range")))
    assert a.protocol == shell.joined(b_parked).protocol == shell.joined(c_parked).protocol == "range"


def test_a_cooperative_assignor_hands_a_moving_partition_over_in_a_second_rebalance(shell):
    coop = ("cooperative-sticky",)
    a = shell.joined(shell.join(client_id="a", protocols=coop))
    assert a.rebalance_protocol == COOPERATIVE
    owned = tuple(shell.assignment(a.member_id))
    b_parked = shell.join(client_id="b", protocols=coop)
    a = shell.joined(shell.join(a.member_id, client_id="a", protocols=coop, owned_partitions=owned))
    b = shell.joined(b_parked)
    # a keeps what it keeps; what moves is not given to b until a has revoked it.
    assert len(shell.assignment(a.member_id)) == 2 and shell.assignment(b.member_id) == set()
    # a revoked what moves and rejoins; the rebalance waits for b too.
    kept = tuple(shell.assignment(a.member_id))
    a_parked = shell.join(a.member_id, client_id="a", protocols=coop, owned_partitions=kept)
    assert shell.answers == {}
    b = shell.joined(shell.join(b.member_id, client_id="b", protocols=coop))
    assert shell.joined(a_parked).generation_id == b.generation_id == 3
    assert shell.assignment(a.member_id) == set(kept) and len(shell.assignment(b.member_id)) == 2


# -- timeouts, by the clock ---------------------------------------------------------------------


def test_a_member_without_heartbeats_is_removed_at_its_session_timeout(shell, clock):
    a, b = stable_pair(shell)
    assert shell.groups.next_deadline() == clock.monotonic() + SESSION_MS / 1000
    clock.advance(SESSION_MS - 500)
    shell.heartbeat(b)  # b is alive; a is silent
    clock.advance(499)
    shell.poll()
    assert set(shell.group().members) == {a.member_id, b.member_id}
    clock.advance(1)
    shell.poll()  # a's session is over
    assert set(shell.group().members) == {b.member_id}
    assert shell.group().state == GroupState.PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        shell.heartbeat(b)
    b3 = shell.joined(shell.join(b.member_id, client_id="b"))
    assert b3.generation_id == 3 and shell.assignment(b.member_id) == set(TPS)
    with pytest.raises(UnknownMemberIdError):
        shell.heartbeat(a)


def test_a_member_that_stops_polling_is_removed_at_max_poll_interval(shell, clock):
    a, b = stable_pair(shell)
    # a's heartbeat thread keeps going, but its application last polled longer and longer ago.
    for _ in range(9):
        clock.advance(1000)
        shell.heartbeat(a, poll_age_ms=_ * 1000 + 1000)
        shell.heartbeat(b)
        shell.poll()
    assert a.member_id in shell.group().members
    clock.advance(1000)
    shell.heartbeat(b)
    shell.poll()  # 10 s since a's last poll: max.poll.interval.ms (the rebalance timeout) is over
    assert set(shell.group().members) == {b.member_id}


def test_the_poll_deadline_counts_from_the_last_poll_not_the_heartbeat(shell, clock):
    a = shell.joined(shell.join(client_id="a", session_ms=60_000))
    clock.advance(1000)
    shell.heartbeat(a, poll_age_ms=REBALANCE_MS - 2000)  # it last polled 8 s ago
    assert shell.groups.next_deadline() == clock.monotonic() + 2.0
    clock.advance(2000)
    shell.poll()
    assert shell.group().state == GroupState.EMPTY and not shell.group().members


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(shell, clock):
    a, b = stable_pair(shell)
    c_parked = shell.join(client_id="c")
    assert shell.groups.next_deadline() <= clock.monotonic() + SESSION_MS / 1000
    # a rejoins; b keeps heartbeating (it is told to rejoin) but never does.
    a_parked = shell.join(a.member_id, client_id="a")
    for _ in range(REBALANCE_MS // 1000 - 1):
        clock.advance(1000)
        with pytest.raises(RebalanceInProgressError):
            shell.heartbeat(b)
        shell.poll()
    assert shell.group().state == GroupState.PREPARING_REBALANCE
    clock.advance(1000)
    shell.poll()
    a3, c = shell.joined(a_parked), shell.joined(c_parked)
    assert a3.generation_id == c.generation_id == 3
    assert set(shell.group().members) == {a.member_id, c.member_id}
    assert shell.assignment(a.member_id) | shell.assignment(c.member_id) == set(TPS)


def test_a_parked_join_is_not_timed_out_by_its_session(shell, clock):
    a, b = stable_pair(shell)
    a_parked = shell.join(a.member_id, client_id="a")
    clock.advance(SESSION_MS * 2)  # longer than a's session, shorter than the rebalance timeout
    shell.poll()
    # b (not in a join, silent) is gone; a waited in its join and is still a member.
    assert set(shell.group().members) == {a.member_id}
    assert shell.joined(a_parked).generation_id == 3


def test_the_initial_rebalance_delay_holds_a_new_groups_first_join(clock):
    shell = Shell(clock, initial_delay_ms=3000)
    a_parked = shell.join(client_id="a")
    assert shell.answers == {} and shell.groups.next_deadline() == clock.monotonic() + 3.0
    clock.advance(1000)
    b_parked = shell.join(client_id="b")  # joins within the delay: one rebalance for both
    clock.advance(1999)
    shell.poll()
    assert shell.answers == {}
    clock.advance(1)
    shell.poll()
    a, b = shell.joined(a_parked), shell.joined(b_parked)
    assert a.generation_id == b.generation_id == 1 and shell.rebalances == 1


def test_a_member_id_handed_out_first_expires_if_unused(shell, clock):
    """KIP-394: a Kafka client's first join gets its id and must come back with it."""
    wire = dict(metadata=(b"m",), require_known_member_id=True)
    first = shell.join(client_id="k", **wire)
    assert first.member_id_required and first.generation_id == -1 and not shell.group().members
    clock.advance(SESSION_MS)
    shell.poll()
    with pytest.raises(UnknownMemberIdError):
        shell.join(first.member_id, client_id="k", **wire)  # too late: the id lapsed
    second = shell.join(client_id="k", **wire)
    joined = shell.joined(shell.join(second.member_id, client_id="k", **wire))
    assert joined.member_id == second.member_id and joined.generation_id == 1


# -- static members, leaving ------------------------------------------------------------------


def test_a_static_member_restarts_into_its_partitions_without_a_rebalance(shell):
    a = shell.joined(shell.join(instance="ia", client_id="a"))
    b_parked = shell.join(instance="ib", client_id="b")
    a = shell.joined(shell.join(a.member_id, instance="ia", client_id="a"))
    b = shell.joined(b_parked)
    before = shell.assignment(a.member_id)
    rebalances = shell.rebalances
    # a restarts: no member id, the same instance id and subscription.
    again = shell.join(instance="ia", client_id="a")
    assert isinstance(again, JoinGroupResult) and again.generation_id == a.generation_id
    assert again.member_id != a.member_id and shell.assignment(again.member_id) == before
    assert shell.rebalances == rebalances and shell.group().state == GroupState.STABLE
    assert shell.group().static == {"ia": again.member_id, "ib": b.member_id}
    # The old instance is a zombie now.
    with pytest.raises(FencedInstanceIdError) as info:
        shell.heartbeat(a, instance="ia")
    assert info.value.kafka_name == "FENCED_INSTANCE_ID"
    with pytest.raises(FencedInstanceIdError):
        shell.groups.validate_offset_commit(G, a.member_id, "ia", a.generation_id)
    with pytest.raises(FencedInstanceIdError):
        shell.join(a.member_id, instance="ia", client_id="a")


def test_a_static_member_that_changed_its_subscription_rebalances(shell):
    a = shell.joined(shell.join(instance="ia", client_id="a"))
    again = shell.join(instance="ia", client_id="a", topics=(T, "u"))
    assert isinstance(again, Parked)  # the join waits for a rebalance ...
    joined = shell.joined(again)  # ... which, a being alone, it completes itself
    assert joined.generation_id == a.generation_id + 1
    assert shell.assignment(joined.member_id) == set(TPS) | {TopicPartition("u", 0), TopicPartition("u", 1)}


def test_a_static_member_that_restarts_while_parked_fences_its_old_join(shell):
    a, b = stable_pair(shell)  # dynamic members
    c_parked = shell.join(instance="ic", client_id="c")  # parked: a and b must rejoin
    c_again = shell.join(instance="ic", client_id="c")  # c restarted before the rebalance completed
    with pytest.raises(FencedInstanceIdError):
        shell.joined(c_parked)
    assert shell.group().static == {"ic": c_again.member_id} and c_parked.member_id not in shell.group().members
    a_parked = shell.join(a.member_id, client_id="a")
    b3 = shell.joined(shell.join(b.member_id, client_id="b"))
    a3, c3 = shell.joined(a_parked), shell.joined(c_again)
    assert a3.generation_id == b3.generation_id == c3.generation_id == 3


def test_leaving_rebalances_at_once(shell):
    a, b = stable_pair(shell)
    shell.leave(b.member_id)
    assert set(shell.group().members) == {a.member_id}
    assert shell.group().state == GroupState.PREPARING_REBALANCE
    a3 = shell.joined(shell.join(a.member_id, client_id="a"))
    assert a3.generation_id == 3 and shell.assignment(a.member_id) == set(TPS)
    with pytest.raises(UnknownMemberIdError):
        shell.heartbeat(b)


def test_the_last_member_leaving_empties_the_group(shell, clock):
    a = shell.joined(shell.join(client_id="a"))
    clock.advance(5000)
    shell.heartbeat(a)
    shell.leave(a.member_id)
    group = shell.group()
    assert group.state == GroupState.EMPTY and group.generation == 2 and not group.members
    assert group.state_timestamp_ms == clock.wall_ms()  # offset expiry counts from here


def test_a_leaving_member_that_was_parked_in_a_join_gets_unknown_member(shell):
    a, b = stable_pair(shell)
    a_parked = shell.join(a.member_id, client_id="a")
    shell.leave(a.member_id)
    with pytest.raises(UnknownMemberIdError):
        shell.joined(a_parked)
    assert shell.joined(shell.join(b.member_id, client_id="b")).generation_id == 3


# -- groups of Kafka clients (the leader member assigns) ---------------------------------------


def test_a_group_of_kafka_clients_waits_for_its_leaders_assignment(shell):
    wire = lambda meta: dict(metadata=(meta,), protocols=("range",))  # noqa: E731
    a = shell.joined(shell.join(client_id="a", **wire(b"A")))
    assert shell.group().state == GroupState.COMPLETING_REBALANCE
    assert a.members == ((a.member_id, None, b"A"),)  # the leader sees every member's metadata
    shell.sync(a, assignments={a.member_id: b"all"})
    b_parked = shell.join(client_id="b", **wire(b"B"))
    a = shell.joined(shell.join(a.member_id, client_id="a", **wire(b"A")))
    b = shell.joined(b_parked)
    assert sorted(a.members) == sorted([(a.member_id, None, b"A"), (b.member_id, None, b"B")]) and b.members == ()
    # A commit while the leader has not assigned yet is refused.
    with pytest.raises(RebalanceInProgressError):
        shell.groups.validate_offset_commit(G, b.member_id, None, b.generation_id)
    follower = shell.sync(b)
    assert isinstance(follower, Parked) and follower.kind == Wait.SYNC and follower.timeout_ms == REBALANCE_MS
    leader = shell.sync(
        a,
        assignments={a.member_id: b"first", b.member_id: b"second"},
        assigned_partitions={a.member_id: tuple(TPS[:2]), b.member_id: tuple(TPS[2:])},
    )
    assert leader == SyncGroupResponse(tuple(TPS[:2]), b"first")
    assert shell.answer(Wait.SYNC, b.member_id) == SyncGroupResponse(tuple(TPS[2:]), b"second")
    assert shell.group().state == GroupState.STABLE


def test_a_rebalance_answers_followers_waiting_in_sync(shell):
    wire = dict(metadata=(b"m",))
    a = shell.joined(shell.join(client_id="a", **wire))
    shell.sync(a)
    b_parked = shell.join(client_id="b", **wire)
    a = shell.joined(shell.join(a.member_id, client_id="a", **wire))
    b = shell.joined(b_parked)
    assert isinstance(shell.sync(b), Parked)
    shell.join(client_id="c", **wire)  # a new member: the group rebalances before the leader assigns
    with pytest.raises(RebalanceInProgressError):
        raise shell.answer(Wait.SYNC, b.member_id)


def test_rayqueue_consumers_and_kafka_clients_do_not_share_a_group(shell):
    shell.joined(shell.join(client_id="a"))
    with pytest.raises(InconsistentGroupProtocolError):
        shell.join(client_id="k", metadata=(b"m",))


# -- state transitions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "start, target",
    [
        (GroupState.EMPTY, GroupState.STABLE),
        (GroupState.EMPTY, GroupState.COMPLETING_REBALANCE),
        (GroupState.STABLE, GroupState.EMPTY),
        (GroupState.COMPLETING_REBALANCE, GroupState.EMPTY),
        (GroupState.DEAD, GroupState.PREPARING_REBALANCE),
    ],
)
def test_kafkas_invalid_group_transitions_are_refused(start, target):
    group = ClassicGroup("g", state=start)
    with pytest.raises(IllegalGroupStateError):
        group.transition_to(target)
    assert group.state == start


# -- offsets -----------------------------------------------------------------------------------


def commit(shell: Shell, offsets: dict[TopicPartition, int], group: str = G) -> dict:
    """An offset commit as the shell makes it: stamped, written, then applied."""
    values = shell.offsets.stamp({tp: OffsetAndMetadata(o, f"m{o}") for tp, o in offsets.items()})
    shell.records += offset_records(group, values)
    shell.offsets.apply_commit(group, values)
    return values


def test_commits_are_stamped_and_fetched(shell, clock):
    values = commit(shell, {TPS[0]: 5, TPS[1]: 7})
    assert values[TPS[0]] == OffsetAndMetadata(5, "m5", clock.wall_ms(), -1)
    clock.advance(10)
    commit(shell, {TPS[1]: 9})
    fetched = shell.offsets.fetch(G, None)
    assert {tp: om.offset for tp, om in fetched.items()} == {TPS[0]: 5, TPS[1]: 9}
    assert fetched[TPS[1]].commit_timestamp == clock.wall_ms()
    assert set(shell.offsets.fetch(G, [TPS[1], TPS[2]])) == {TPS[1]}  # partitions without one are absent
    assert shell.offsets.fetch("other", None) == {}
    # A standalone commit created the group, Empty.
    assert shell.group().state == GroupState.EMPTY


@pytest.mark.parametrize(
    "offsets",
    [
        {TPS[0]: OffsetAndMetadata(-1)},
        {TPS[0]: OffsetAndMetadata(True)},
        {TPS[0]: OffsetAndMetadata("5")},
        {("t", 0): OffsetAndMetadata(1)},
        {TPS[0]: 5},
        [(TPS[0], OffsetAndMetadata(1))],
    ],
)
def test_malformed_commits_are_invalid_requests(shell, offsets):
    with pytest.raises(InvalidRequestError):
        shell.offsets.stamp(offsets)


def test_a_standalone_commit_is_refused_while_the_group_has_members(shell):
    a = shell.joined(shell.join(client_id="a"))
    with pytest.raises(UnknownMemberIdError):
        shell.groups.validate_offset_commit(G, "", None, -1)
    with pytest.raises(NonEmptyGroupError) as info:
        shell.offsets.check_alter(G)
    assert info.value.kafka_name == "NON_EMPTY_GROUP"
    shell.groups.validate_offset_commit(G, a.member_id, None, a.generation_id)
    with pytest.raises(IllegalGenerationError):
        shell.groups.validate_offset_commit("no-group", "m", None, 1)
    shell.groups.validate_offset_commit("no-group", "", None, -1)  # standalone, no members: fine


def test_a_commit_keeps_the_member_alive(shell, clock):
    a = shell.joined(shell.join(client_id="a"))
    clock.advance(SESSION_MS - 1)
    shell.groups.validate_offset_commit(G, a.member_id, None, a.generation_id)
    clock.advance(SESSION_MS - 1)
    shell.poll()
    assert a.member_id in shell.group().members


def test_transactional_offsets_stay_pending_until_the_commit(shell):
    commit(shell, {TPS[0]: 1})
    pending = shell.offsets.stamp({TPS[0]: OffsetAndMetadata(10), TPS[1]: OffsetAndMetadata(11)})
    shell.offsets.add_pending(7, G, pending)
    assert shell.offsets.fetch(G, None)[TPS[0]].offset == 1  # invisible until the marker
    with pytest.raises(UnstableOffsetCommitError) as info:
        shell.offsets.fetch(G, [TPS[1]], require_stable=True)
    assert info.value.kafka_name == "UNSTABLE_OFFSET_COMMIT" and info.value.retriable
    assert shell.offsets.fetch(G, [TPS[2]], require_stable=True) == {}  # another partition is stable
    assert shell.offsets.end_pending(7, committed=True) == 2
    assert {tp: om.offset for tp, om in shell.offsets.fetch(G, None, require_stable=True).items()} == {
        TPS[0]: 10,
        TPS[1]: 11,
    }
    assert shell.offsets.pending == {}


def test_transactional_offsets_vanish_on_abort(shell):
    commit(shell, {TPS[0]: 1})
    shell.offsets.add_pending(7, G, shell.offsets.stamp({TPS[0]: OffsetAndMetadata(10)}))
    shell.offsets.add_pending(8, G, shell.offsets.stamp({TPS[1]: OffsetAndMetadata(20)}))
    assert shell.offsets.end_pending(7, committed=False) == 1
    assert shell.offsets.end_pending(7, committed=False) == 0  # a second marker: nothing left
    assert {tp: om.offset for tp, om in shell.offsets.fetch(G, None).items()} == {TPS[0]: 1}
    assert shell.offsets.end_pending(8, committed=True) == 1
    assert shell.offsets.fetch(G, [TPS[1]])[TPS[1]].offset == 20


def test_a_marker_ends_only_the_groups_of_its_own_partition(clock):
    groups = GroupMetadataManager(clock)
    partition = {"g0": 0, "g1": 1}
    offsets = OffsetMetadataManager(clock, groups, RETENTION_MS, partition.__getitem__)
    offsets.add_pending(7, "g0", {TPS[0]: OffsetAndMetadata(1)})
    offsets.add_pending(7, "g1", {TPS[0]: OffsetAndMetadata(2)})
    assert offsets.end_pending(7, committed=True, partition=1) == 1  # the marker in partition 1
    assert offsets.fetch("g1", None)[TPS[0]].offset == 1 + 1 and offsets.fetch("g0", None) == {}
    assert offsets.end_pending(7, committed=True, partition=0) == 1
    assert offsets.pending == {}


def test_a_transactional_commit_of_a_zombie_member_is_fenced(shell):
    a, b = stable_pair(shell)
    shell.leave(b.member_id)
    with pytest.raises(UnknownMemberIdError):
        shell.groups.validate_txn_offset_commit(G, b.member_id, None, b.generation_id)
    shell.groups.validate_txn_offset_commit(G, "", None, -1)  # no member id: a plain producer's commit


def test_offsets_of_an_empty_group_expire_after_the_retention(shell, clock):
    commit(shell, {TPS[0]: 1, TPS[1]: 2})
    clock.advance(1000)
    commit(shell, {TPS[1]: 3})  # a later commit of one partition
    clock.advance(RETENTION_MS - 1000)
    (expired,) = shell.offsets.expired()
    assert expired.partitions == (TPS[0],) and not expired.whole_group
    shell.offsets.remove(G, expired.partitions)
    assert shell.offsets.expired() == []
    clock.advance(1000)
    (expired,) = shell.offsets.expired()
    assert expired.partitions == (TPS[1],) and expired.whole_group
    shell.offsets.remove_group(G)
    assert shell.groups.get(G) is None and shell.offsets.fetch(G, None) == {}


def test_offsets_of_a_group_with_members_do_not_expire_and_the_clock_starts_when_it_empties(shell, clock):
    a = shell.joined(shell.join(client_id="a", session_ms=RETENTION_MS * 3))
    commit(shell, {TPS[0]: 1})
    clock.advance(RETENTION_MS * 2)
    assert shell.offsets.expired() == []  # a member: never
    shell.leave(a.member_id)
    emptied = clock.wall_ms()
    assert shell.offsets.expired(emptied + RETENTION_MS - 1) == []
    assert [e.partitions for e in shell.offsets.expired(emptied + RETENTION_MS)] == [(TPS[0],)]


def test_offset_delete_keeps_subscribed_topics_and_drops_the_rest(shell):
    with pytest.raises(GroupIdNotFoundError):
        shell.offsets.check_delete(G, [TPS[0]])
    a = shell.joined(shell.join(client_id="a"))
    commit(shell, {TPS[0]: 1, TopicPartition("u", 0): 2})
    out, gone = shell.offsets.check_delete(G, [TPS[0], TopicPartition("u", 0), TopicPartition("u", 1)])
    assert isinstance(out[TPS[0]], GroupSubscribedToTopicError)
    assert out[TopicPartition("u", 0)] is None and out[TopicPartition("u", 1)] is None
    assert gone == [TopicPartition("u", 0)]  # u-1 had no offset to delete
    shell.offsets.remove(G, gone)
    assert set(shell.offsets.fetch(G, None)) == {TPS[0]}
    assert a.member_id in shell.group().members


def test_delete_groups_refuses_groups_with_members_and_unknown_ones(shell):
    shell.joined(shell.join(client_id="a"))
    commit(shell, {TPS[0]: 1}, group="idle")
    out = shell.state.check_delete_groups([G, "idle", "nope"])
    assert isinstance(out[G], NonEmptyGroupError) and out["idle"] is None
    assert isinstance(out["nope"], GroupIdNotFoundError)


def test_lag_counts_committed_and_assigned_partitions(shell):
    a = shell.joined(shell.join(client_id="a", topics=("u",)))
    commit(shell, {TPS[0]: 4})
    partitions = shell.offsets.lag_partitions(G)
    assert partitions == {TPS[0], TopicPartition("u", 0), TopicPartition("u", 1)}
    lag = shell.offsets.lag(G, partitions, {TPS[0]: 10, TopicPartition("u", 0): 3})
    assert (lag[TPS[0]].committed, lag[TPS[0]].lag) == (4, 6)
    assert (lag[TopicPartition("u", 0)].committed, lag[TopicPartition("u", 0)].lag) == (None, 3)
    assert lag[TopicPartition("u", 1)].lag == 0
    assert a.member_id in shell.group().members


# -- the records replay into the same state ---------------------------------------------------


def test_the_written_records_replay_into_the_same_groups_and_offsets(shell, clock):
    a, b = stable_pair(shell)
    commit(shell, {TPS[0]: 5, TPS[3]: 9})
    commit(shell, {TPS[1]: 1}, group="idle")
    restarted = Shell(ManualClock(clock.wall_ms() + 60_000, clock.monotonic() + 60))
    for key, value in shell.records:
        restarted.state.replay(key, value)
    restarted.state.loaded()
    group = restarted.group()
    assert (group.state, group.generation, group.leader) == (GroupState.STABLE, 2, a.leader_id)
    assert set(group.members) == {a.member_id, b.member_id}
    assert restarted.assignment(a.member_id) == shell.assignment(a.member_id)
    assert restarted.offsets.fetch(G, None) == shell.offsets.fetch(G, None)
    assert restarted.offsets.fetch("idle", None) == shell.offsets.fetch("idle", None)
    # Sessions count from the load: the members carry on in their generation.
    restarted.heartbeat(a)
    restarted.clock.advance(SESSION_MS)
    restarted.poll()
    assert not restarted.group().members


def test_tombstones_replay_as_deletions(shell):
    state = shell.state
    commit(shell, {TPS[0]: 5})
    state.replay(offset_key(G, TPS[0]), None)
    assert state.groups.get(G) is None  # nothing left of the group
    shell.joined(shell.join(client_id="a"))
    commit(shell, {TPS[1]: 6})
    state.replay(group_key(G), None)  # the members go; the offsets stay
    assert not shell.group().members and shell.group().state == GroupState.EMPTY
    assert set(shell.offsets.fetch(G, None)) == {TPS[1]}
    state.replay(offset_key(G, TPS[1]), None)
    assert state.groups.get(G) is None


def test_a_member_that_joins_while_the_group_is_deleted_keeps_the_group(shell, clock):
    """Expiry and DeleteGroups decide, write their tombstones, then remove: a member that
    joined while they wrote keeps its group (its next record supersedes the tombstone)."""
    commit(shell, {TPS[0]: 1})
    clock.advance(RETENTION_MS)
    (decided,) = shell.offsets.expired()
    assert decided.whole_group
    a = shell.joined(shell.join(client_id="a"))  # joins while the tombstones are written
    assert shell.offsets.expired_of(G) is None  # asked again before the next write: not expired
    shell.offsets.remove_group(G)
    assert shell.offsets.fetch(G, None) == {} and a.member_id in shell.group().members
