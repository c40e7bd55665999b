"""The controller's state machines without Ray and without sleeping (as Kafka tests its
control managers): placement, deletion, elections, ISR rules on a manual clock,
min.insync.replicas, reassignment, configs, producer ids and the metadata log replay.

Each test drives the managers as the actor shell does: a manager decides (records), the
QuorumController writes them to the metadata log and replays them, and the set of live
replicas (``online``) is what the shell would hold."""

from __future__ import annotations

import json
import logging
import random
from collections import Counter

import pytest

from actors.acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType
from actors.broker.isr import IsrTracker
from actors.clock import ManualClock
from actors.controller import records
from actors.controller.configuration_control import DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG
from actors.controller.placement import assign_replicas
from actors.controller.quorum_controller import QuorumController
from actors.controller.records import NO_LEADER, PartitionRegistration
from actors.controller.replication_control import PartitionChange
from actors.metadata_log import MetadataLog
from actors.names import METADATA_TOPIC
from actors.protocol import (
    AllocateProducerIdsResponse,
    AlterableConfig,
    AlterConfigOp,
    AlterPartitionRequest,
    AlterPartitionResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
)
from storage import RecordBatchBuilder
from storage.errors import (
    ElectionNotNeededError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    PolicyViolationError,
    PreferredLeaderNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

NODES = ["node-a", "node-b", "node-c"]
ALIVE = set(NODES)
SET = AlterConfigOp.SET


def open_quorum(tmp_path, **config) -> QuorumController:
    values = {"log.dirs": str(tmp_path), "rayqueue.num.brokers": 3, **config}
    return QuorumController(values, rng=random.Random(7))


@pytest.fixture
def quorum(tmp_path):
    q = open_quorum(tmp_path)
    q.commit(q.cluster.register_brokers(NODES, 3))
    yield q
    q.close()


def create(q: QuorumController, name: str, partitions: int = 1, rf: int = 3, **kwargs) -> set:
    """Create a topic as the shell does: every replica comes up, each partition elects."""
    new = q.commit(q.replication.create_topic(CreateTopicsRequest(name, partitions, rf, **kwargs), ALIVE))
    online = set(new.replicas())
    for p in new.partitions():
        q.commit(q.replication.drop_offline(name, p, online))
        q.commit(q.replication.elect(name, p, online, bump=True))
    return online


def registration(q: QuorumController, topic: str, p: int = 0) -> PartitionRegistration:
    return q.partition(topic, p)


def down(online: set, topic: str, p: int, broker: int) -> set:
    return online - {(topic, p, broker)}


# -- placement ----------------------------------------------------------------------------


def test_default_assignment_spreads_leaders_and_replicas_over_the_brokers():
    brokers = [0, 1, 2, 3, 4, 5]
    assignment = assign_replicas(12, 3, brokers, start=0)
    assert all(len(set(r)) == 3 for r in assignment)
    assert Counter(r[0] for r in assignment) == dict.fromkeys(brokers, 2)  # leaders round-robin
    assert Counter(b for r in assignment for b in r) == dict.fromkeys(brokers, 6)  # replicas even
    # Kafka shifts the followers after each full round of leaders, so that the partitions a
    # broker leads do not all fail over to the same next broker.
    assert assignment[0][1:] != assignment[6][1:]
    # New partitions continue the pattern where the existing ones stopped.
    assert assign_replicas(6, 3, brokers, first_partition=6, start=0) == assignment[6:]
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 4, [0, 1, 2])


def test_created_topic_is_written_then_elects_the_preferred_replicas(quorum):
    new = quorum.replication.create_topic(CreateTopicsRequest("t", 3, 2), ALIVE)
    kinds = [r["type"] for r in new.records]
    assert kinds == ["topic", "partition", "partition", "partition"]
    assert all(r["leader"] == NO_LEADER and r["isr"] == r["replicas"] for r in new.records[1:])
    assert "t" not in quorum.replication.topics  # nothing applies before the commit
    planned = quorum.commit(new)
    online = set(planned.replicas())
    for p in planned.partitions():
        quorum.commit(quorum.replication.elect("t", p, online, bump=True))
    for p, replicas in enumerate(planned.assignment):
        part = registration(quorum, "t", p)
        assert (part.replicas, part.leader, part.leader_epoch, part.isr) == (replicas, replicas[0], 0, replicas)
    meta = quorum.replication.topic_metadata("t", dict.fromkeys(online, "handle"))
    assert meta.topic_id and [m.leader_handle for m in meta.partitions] == ["handle"] * 3


def test_only_running_brokers_on_live_nodes_get_replicas(quorum):
    quorum.commit(quorum.cluster.set_alive(1, False))
    new = quorum.commit(quorum.replication.create_topic(CreateTopicsRequest("two", 4, 2), ALIVE))
    assert {b for r in new.assignment for b in r} == {0, 2}
    new = quorum.commit(quorum.replication.create_topic(CreateTopicsRequest("one", 2, 1), {"node-a"}))
    assert {b for r in new.assignment for b in r} == {0}
    with pytest.raises(InvalidReplicationFactorError, match="2 available"):
        quorum.replication.create_topic(CreateTopicsRequest("x", 1, 3), ALIVE)
    with pytest.raises(InvalidReplicationFactorError, match="no live brokers"):
        quorum.replication.create_topic(CreateTopicsRequest("x", 1, 1), {"node-b"})


def test_create_topic_refusals_carry_kafka_s_errors(quorum):
    create(quorum, "a.b")
    cases = [
        (CreateTopicsRequest("a.b"), TopicAlreadyExistsError),
        (CreateTopicsRequest("a_b"), InvalidTopicError),  # collides in metric names
        (CreateTopicsRequest("../etc"), InvalidTopicError),
        (CreateTopicsRequest("x" * 250), InvalidTopicError),
        (CreateTopicsRequest("x", 0), InvalidPartitionsError),
        (CreateTopicsRequest("x", True), InvalidPartitionsError),
        (CreateTopicsRequest("x", 1, 0), InvalidReplicationFactorError),
        (CreateTopicsRequest("x", 10_001, 1), PolicyViolationError),
        (CreateTopicsRequest("x", 1, 1, assignments=((0,),)), InvalidRequestError),
        (CreateTopicsRequest("x", assignments=((0, 0),)), InvalidReplicaAssignmentError),
        (CreateTopicsRequest("x", assignments=((0, 7),)), InvalidReplicaAssignmentError),
        (CreateTopicsRequest("x", assignments=((0, 1), (2,))), InvalidReplicaAssignmentError),
        (CreateTopicsRequest("x", assignments=(("0",),)), InvalidReplicaAssignmentError),
        (CreateTopicsRequest("x", configs={"retention.msx": 1}), InvalidConfigError),
        ("x", InvalidRequestError),
    ]
    for request, error in cases:
        with pytest.raises(error):
            quorum.replication.create_topic(request, ALIVE)
    assert list(quorum.replication.topics) == ["a.b"]
    # A replica list whose brokers are all down cannot be placed.
    quorum.commit(quorum.cluster.set_alive(2, False))
    with pytest.raises(InvalidReplicaAssignmentError, match="down"):
        quorum.replication.create_topic(CreateTopicsRequest("x", assignments=((2,),)), ALIVE)


def test_counts_left_at_minus_one_take_the_broker_defaults(tmp_path):
    q = open_quorum(tmp_path, **{"num.partitions": 4, "default.replication.factor": 2})
    try:
        q.commit(q.cluster.register_brokers(NODES, 3))
        new = q.commit(q.replication.create_topic(CreateTopicsRequest("d"), ALIVE))
        assert len(new.assignment) == 4 and {len(r) for r in new.assignment} == {2}
    finally:
        q.close()


def test_validate_only_writes_nothing(quorum, tmp_path):
    result = quorum.replication.create_topic(CreateTopicsRequest("v", 2, 3, validate_only=True), ALIVE)
    assert result.records == []
    planned = result.response.planned
    assert [p.leader for p in planned.partitions] == [NO_LEADER, NO_LEADER] and planned.topic_id == ""
    create(quorum, "grow", 1)
    grown = quorum.replication.create_partitions(CreatePartitionsRequest("grow", 3, validate_only=True), ALIVE)
    assert grown.records == [] and len(grown.response.assignment) == 2
    assert len(quorum.replication.topics["grow"].partitions) == 1


def test_create_partitions_grows_at_the_topic_s_replication_factor(quorum):
    create(quorum, "g", 1, 2)
    for request, error in [
        (CreatePartitionsRequest("g", 1), InvalidPartitionsError),
        (CreatePartitionsRequest("g", "3"), InvalidPartitionsError),
        (CreatePartitionsRequest("g", 3, assignments=((0, 1),)), InvalidReplicaAssignmentError),
        (CreatePartitionsRequest("g", 2, assignments=((0, 1, 2),)), InvalidReplicaAssignmentError),
        (CreatePartitionsRequest("nope", 2), UnknownTopicOrPartitionError),
    ]:
        with pytest.raises(error):
            quorum.replication.create_partitions(request, ALIVE)
    new = quorum.commit(quorum.replication.create_partitions(CreatePartitionsRequest("g", 3), ALIVE))
    assert list(new.partitions()) == [1, 2] and {len(r) for r in new.assignment} == {2}
    assert len(quorum.replication.topics["g"].partitions) == 3


# -- deletion -----------------------------------------------------------------------------


def test_delete_topic_answers_its_replicas_and_forgets_it(quorum):
    create(quorum, "gone", 2, 2)
    first_id = quorum.replication.topics["gone"].topic_id
    replicas = quorum.commit(quorum.replication.delete_topic("gone", enabled=True))
    assert sorted(replicas) == sorted(("gone", p, b) for p in range(2) for b in registration_replicas(replicas, p))
    assert len(replicas) == 4
    assert "gone" not in quorum.replication.topics and quorum.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError):
        quorum.configuration.overrides("gone")
    with pytest.raises(UnknownTopicOrPartitionError):
        quorum.replication.delete_topic("gone", enabled=True)
    create(quorum, "gone")
    assert quorum.replication.topics["gone"].topic_id != first_id  # KIP-516: a new topic
    with pytest.raises(PolicyViolationError):
        quorum.replication.delete_topic("gone", enabled=False)


def registration_replicas(replicas: list, p: int) -> list[int]:
    return [b for _, q, b in replicas if q == p]


# -- elections ----------------------------------------------------------------------------


def test_losing_the_leader_elects_the_next_in_sync_replica(quorum):
    online = create(quorum, "e")
    first = registration(quorum, "e")
    leader = first.leader
    quorum.commit(quorum.replication.remove_from_isr("e", 0, leader))
    part = registration(quorum, "e")
    assert part.leader == NO_LEADER and leader not in part.isr
    online = down(online, "e", 0, leader)
    election = quorum.commit(quorum.replication.elect("e", 0, online, bump=False))
    expected = [b for b in first.replicas if b != leader][0]  # replica order
    assert (election.leader, election.leader_epoch, election.unclean) == (expected, 1, False)
    part = registration(quorum, "e")
    assert (part.leader, part.leader_epoch) == (expected, 1)
    assert part.partition_epoch > first.partition_epoch
    # The same leader again: no record, no new epoch; a bump (a recreated leader) is a new term.
    assert quorum.replication.elect("e", 0, online, bump=False).records == []
    assert quorum.commit(quorum.replication.elect("e", 0, online, bump=True)).leader_epoch == 2


def test_the_isr_never_empties_and_an_out_of_sync_replica_is_not_elected(quorum):
    online = create(quorum, "u")
    replicas = registration(quorum, "u").replicas
    for b in replicas:
        quorum.commit(quorum.replication.remove_from_isr("u", 0, b))
    part = registration(quorum, "u")
    assert part.isr == [replicas[-1]] and part.leader == NO_LEADER  # the last member stays
    # Every replica but the last ISR member comes back: unclean election is off, so the
    # partition stays offline rather than lose the records only the ISR member has.
    online = down(online, "u", 0, replicas[-1])
    election = quorum.commit(quorum.replication.elect("u", 0, online, bump=False))
    assert election.leader == NO_LEADER and registration(quorum, "u").leader == NO_LEADER
    assert quorum.replication.partition_metadata("u", 0, dict.fromkeys(online, "h")).leader == NO_LEADER
    # Turned on for the topic: a live out-of-sync replica leads and becomes the whole ISR.
    change = (AlterableConfig("unclean.leader.election.enable", SET, "true"),)
    quorum.commit(quorum.configuration.alter("u", change))
    election = quorum.commit(quorum.replication.elect("u", 0, online, bump=False))
    assert election.unclean and election.leader == replicas[0]
    part = registration(quorum, "u")
    assert (part.leader, part.isr) == (replicas[0], [replicas[0]])


def test_preferred_leader_election(quorum):
    online = create(quorum, "p")
    preferred = registration(quorum, "p").replicas[0]
    with pytest.raises(ElectionNotNeededError):
        quorum.replication.elect_preferred("p", 0, online)
    quorum.commit(quorum.replication.remove_from_isr("p", 0, preferred))
    without = down(online, "p", 0, preferred)
    quorum.commit(quorum.replication.elect("p", 0, without, bump=False))
    # Back but not yet in sync: not available.
    with pytest.raises(PreferredLeaderNotAvailableError):
        quorum.replication.elect_preferred("p", 0, online)
    part = registration(quorum, "p")
    request = AlterPartitionRequest("p", 0, part.leader, part.leader_epoch, part.partition_epoch, tuple(part.replicas))
    quorum.commit(quorum.replication.alter_partition(request, online))
    with pytest.raises(PreferredLeaderNotAvailableError):
        quorum.replication.elect_preferred("p", 0, without)  # in sync, but its actor is down
    epoch = registration(quorum, "p").leader_epoch
    election = quorum.commit(quorum.replication.elect_preferred("p", 0, online))
    assert (election.leader, election.leader_epoch) == (preferred, epoch + 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        quorum.replication.elect_preferred("p", 5, online)


# -- ISR: the leader's rules on a manual clock, the controller's commit -------------------


def test_a_follower_lagging_past_replica_lag_time_max_ms_leaves_the_isr():
    clock = ManualClock()
    tracker = IsrTracker(0, clock, lag_time_max_ms=10_000)
    tracker.set_membership([0, 1, 2], [0, 1, 2])
    assert tracker.out_of_sync([0, 1, 2]) == []  # a new member gets a full lag period
    clock.advance(6_000)
    tracker.on_fetch(1, offset=100, leader_leo=100)  # follower 1 is caught up
    tracker.on_fetch(2, offset=40, leader_leo=100)  # follower 2 is behind
    clock.advance(4_001)
    assert tracker.out_of_sync([0, 1, 2]) == [2]
    assert tracker.shrunk_isr([0, 1, 2]) == [0, 1]
    clock.advance(6_000)
    assert tracker.out_of_sync([0, 1, 2]) == [1, 2]  # nobody fetched for 10 s
    assert tracker.out_of_sync([0]) == []  # the leader is never out of sync


def test_a_follower_that_keeps_up_under_appends_stays_in_sync():
    """Caught up as of its previous fetch when it reached the end the leader had then."""
    clock = ManualClock()
    tracker = IsrTracker(0, clock, lag_time_max_ms=1_000)
    tracker.set_membership([0, 1], [0, 1])
    leo = 0
    for _ in range(20):
        clock.advance(300)
        previous, leo = leo, leo + 10  # the leader appends between fetches
        tracker.on_fetch(1, offset=previous, leader_leo=leo)
    assert tracker.out_of_sync([0, 1]) == []
    clock.advance(1_301)  # a fetch fell behind and nothing since
    assert tracker.out_of_sync([0, 1]) == [1]


def test_isr_expansion_and_the_high_watermark():
    clock = ManualClock()
    tracker = IsrTracker(0, clock)
    tracker.set_membership([0, 1, 2], [0, 1])
    assert tracker.high_watermark(50, [0, 1]) == -1  # follower 1 has not fetched yet
    tracker.on_fetch(1, 50, 50)
    tracker.on_fetch(2, 20, 50)
    assert tracker.high_watermark(50, [0, 1]) == 50
    assert not tracker.may_join(2, [0, 1], high_watermark=50, epoch_start_offset=10)
    tracker.on_fetch(2, 50, 60)
    assert tracker.may_join(2, [0, 1], high_watermark=50, epoch_start_offset=10)
    assert not tracker.may_join(2, [0, 1], high_watermark=50, epoch_start_offset=55)  # before this epoch
    assert not tracker.may_join(7, [0, 1], 0, 0) and tracker.on_fetch(7, 0, 0) is None  # no replica
    tracker.set_membership([0, 1], [0, 1])
    assert tracker.follower(2) is None


def test_alter_partition_applies_only_from_the_current_leader_at_the_current_epochs(quorum):
    online = create(quorum, "i")
    part = registration(quorum, "i")
    leader, follower = part.replicas[0], part.replicas[1]
    shrunk = tuple(b for b in part.replicas if b != follower)

    def ask(isr, leader_id=leader, leader_epoch=None, partition_epoch=None, live=online):
        current = registration(quorum, "i")
        request = AlterPartitionRequest(
            "i",
            0,
            leader_id,
            current.leader_epoch if leader_epoch is None else leader_epoch,
            current.partition_epoch if partition_epoch is None else partition_epoch,
            tuple(isr),
        )
        return quorum.commit(quorum.replication.alter_partition(request, live))

    stale = ask(shrunk, partition_epoch=part.partition_epoch - 1)
    assert stale == AlterPartitionResponse(part.leader_epoch, part.partition_epoch, tuple(part.isr))
    assert ask(shrunk, leader_id=follower).isr == tuple(part.isr)  # not the leader
    answer = ask(shrunk)
    assert answer == AlterPartitionResponse(part.leader_epoch, part.partition_epoch + 1, shrunk)
    assert registration(quorum, "i").isr == list(shrunk)
    # Expansion: only a live replica joins; the leader always stays; replica order is kept.
    assert ask([follower], live=down(online, "i", 0, follower)).isr == (leader,)
    assert ask(list(reversed(part.replicas))).isr == tuple(part.replicas)
    with pytest.raises(UnknownTopicOrPartitionError):
        quorum.replication.alter_partition(AlterPartitionRequest("i", 9, leader, 0, 0, ()), online)
    with pytest.raises(InvalidRequestError):
        quorum.replication.alter_partition(("i", 0), online)


def test_min_insync_replicas_shows_in_the_state_and_warns_at_creation(quorum, caplog):
    change = (AlterableConfig("min.insync.replicas", SET, 2),)
    online = create(quorum, "m", 2, 3)
    quorum.commit(quorum.configuration.alter("m", change))
    stats = quorum.replication.stats()
    assert (stats.under_replicated["m"], stats.under_min_isr["m"], stats.offline) == (0, 0, 0)
    assert sum(stats.leaders.values()) == 2 and sum(stats.hosted.values()) == 6
    # A leader's lag shrinks the ISR of partition 0 to the leader alone: below min.insync.replicas.
    part = registration(quorum, "m")
    alone = AlterPartitionRequest("m", 0, part.leader, part.leader_epoch, part.partition_epoch, (part.leader,))
    quorum.commit(quorum.replication.alter_partition(alone, online))
    stats = quorum.replication.stats()
    assert (stats.under_replicated["m"], stats.under_min_isr["m"]) == (1, 1)
    with caplog.at_level(logging.WARNING, logger="actors.controller.replication_control"):
        create(quorum, "w", 1, 1, configs={"min.insync.replicas": 2})
    assert "min.insync.replicas exceeds the replication factor" in caplog.text
    assert quorum.replication.stats().under_min_isr["w"] == 1


def test_partition_changes_are_classified_for_the_metrics(tmp_path):
    seen: list[tuple[str, int, PartitionChange]] = []
    q = open_quorum(tmp_path)
    q.on_partition_change = lambda topic, p, change: seen.append((topic, p, change))
    try:
        q.commit(q.cluster.register_brokers(NODES, 3))
        create(q, "c")
        leader = registration(q, "c").leader
        q.commit(q.replication.remove_from_isr("c", 0, leader))
    finally:
        q.close()
    changes = [change for _, _, change in seen]
    assert changes[0] == PartitionChange(False, False, False)  # a new partition
    assert PartitionChange(False, False, True) in changes  # the first election
    assert changes[-1] == PartitionChange(True, False, False)  # the leader left the ISR


# -- reassignment -------------------------------------------------------------------------


def test_reassignment_adds_waits_for_the_isr_moves_leadership_and_removes(tmp_path):
    q = open_quorum(tmp_path, **{"rayqueue.num.brokers": 4})
    try:
        q.commit(q.cluster.register_brokers([*NODES, "node-d"], 4))
        new = q.commit(q.replication.create_topic(CreateTopicsRequest("r", assignments=((0, 1),)), ALIVE | {"node-d"}))
        online = set(new.replicas())
        q.commit(q.replication.elect("r", 0, online, bump=True))
        with pytest.raises(InvalidReplicaAssignmentError):
            q.replication.reassign("r", 0, [2, 2])
        with pytest.raises(InvalidReplicaAssignmentError):
            q.replication.reassign("r", 0, None)
        with pytest.raises(UnknownTopicOrPartitionError):
            q.replication.reassign("r", 3, [2, 3])
        adding = q.commit(q.replication.reassign("r", 0, [2, 3]))
        assert adding == [2, 3]
        part = registration(q, "r")
        assert (part.replicas, part.target, part.leader) == ([2, 3, 0, 1], [2, 3], 0)
        assert q.replication.reassignments() == {
            ("r", 0): {"replicas": [2, 3, 0, 1], "adding": [2, 3], "removing": [0, 1]}
        }
        online |= {("r", 0, 2), ("r", 0, 3)}
        assert q.replication.complete_reassignment("r", 0, online).response is None  # not in sync yet
        part = registration(q, "r")
        join = AlterPartitionRequest("r", 0, 0, part.leader_epoch, part.partition_epoch, (0, 1, 2, 3))
        q.commit(q.replication.alter_partition(join, online))
        assert q.replication.reassignments()[("r", 0)]["adding"] == []
        done = q.commit(q.replication.complete_reassignment("r", 0, online))
        assert (done.target, done.removing, done.leader) == ([2, 3], [0, 1], 2)
        part = registration(q, "r")
        assert (part.replicas, part.isr, part.leader, part.leader_epoch, part.target) == ([2, 3], [2, 3], 2, 1, None)
        assert q.replication.reassignments() == {} and q.replication.reassigning() == []
        assert q.replication.hosted([0, 2]) == {0: set(), 2: {"r-0"}}
    finally:
        q.close()


def test_a_reassignment_whose_targets_are_not_live_leaves_the_partition_to_elect(quorum):
    new = quorum.commit(quorum.replication.create_topic(CreateTopicsRequest("z", assignments=((0,),)), ALIVE))
    online = set(new.replicas())
    quorum.commit(quorum.replication.elect("z", 0, online, bump=True))
    quorum.commit(quorum.replication.reassign("z", 0, [1]))
    part = registration(quorum, "z")
    # Broker 1 was in sync once, then its actor died before the move completed.
    join = AlterPartitionRequest("z", 0, 0, part.leader_epoch, part.partition_epoch, (0, 1))
    quorum.commit(quorum.replication.alter_partition(join, online | {("z", 0, 1)}))
    done = quorum.commit(quorum.replication.complete_reassignment("z", 0, online))
    assert (done.removing, done.leader) == ([0], NO_LEADER)
    assert registration(quorum, "z").replicas == [1]


# -- configs ------------------------------------------------------------------------------


def test_config_changes_are_checked_as_a_whole_with_kafka_s_errors(quorum):
    create(quorum, "cfg", configs={"retention.ms": 1000})
    configs = quorum.configuration
    for changes, error in [
        ((AlterableConfig("no.such.key", SET, 1),), InvalidConfigError),
        ((AlterableConfig("retention.ms", SET, "soon"),), InvalidConfigError),
        ((AlterableConfig("retention.ms", AlterConfigOp.APPEND, 5),), InvalidConfigError),  # not a list
        (
            (AlterableConfig("min.compaction.lag.ms", SET, 10), AlterableConfig("max.compaction.lag.ms", SET, 5)),
            InvalidConfigError,
        ),  # a rule between keys
        ((AlterableConfig("retention.ms", 9, 1),), InvalidRequestError),
        ((AlterableConfig("retention.ms", SET, 1), AlterableConfig("retention_ms", SET, 2)), InvalidRequestError),
        (("retention.ms=1",), InvalidRequestError),
    ]:
        with pytest.raises(error):
            configs.alter("cfg", changes)
    assert configs.overrides("cfg") == {"retention.ms": 1000}
    with pytest.raises(UnknownTopicOrPartitionError):
        configs.alter("nope", ())
    ops = (
        AlterableConfig("cleanup.policy", AlterConfigOp.APPEND, "compact"),
        AlterableConfig("retention.ms", AlterConfigOp.DELETE),
        AlterableConfig("segment_bytes", SET, "4096"),
    )
    planned = configs.alter("cfg", ops, validate_only=True)
    assert planned.records == [] and configs.overrides("cfg") == {"retention.ms": 1000}
    assert quorum.commit(configs.alter("cfg", ops)) == {"cleanup.policy": ["delete", "compact"], "segment.bytes": 4096}
    assert configs.effective("cfg")["segment.bytes"] == 4096
    quorum.commit(configs.alter("cfg", (AlterableConfig("cleanup.policy", AlterConfigOp.SUBTRACT, "delete"),)))
    assert configs.overrides("cfg")["cleanup.policy"] == ["compact"]
    with pytest.raises(InvalidConfigError):
        quorum.replication.create_topic(
            CreateTopicsRequest("bad", configs={"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5}), ALIVE
        )
    with pytest.raises(InvalidConfigError):
        quorum.replication.create_topic(CreateTopicsRequest("bad", configs=[("retention.ms", 1)]), ALIVE)


def test_described_configs_name_their_source(tmp_path):
    q = open_quorum(tmp_path, **{"log.segment.bytes": 2048})
    try:
        q.commit(q.cluster.register_brokers(NODES, 3))
        create(q, "d", configs={"retention.ms": 5})
        described = q.configuration.describe("d", ("retention.ms", "segment.bytes", "cleanup.policy", "no.such"))
        assert described == {
            "retention.ms": (5, DYNAMIC_TOPIC_CONFIG),
            "segment.bytes": (2048, STATIC_BROKER_CONFIG),
            "cleanup.policy": (("delete",), DEFAULT_CONFIG),
        }
        assert len(q.configuration.describe("d")) > 10
    finally:
        q.close()


# -- brokers and producer ids -------------------------------------------------------------


def test_brokers_register_round_robin_and_relaunch_forgets_listeners(quorum):
    brokers = quorum.cluster.brokers
    assert [(b.broker_id, b.node_id, b.alive) for b in brokers.values()] == [
        (0, "node-a", True),
        (1, "node-b", True),
        (2, "node-c", True),
    ]
    quorum.commit(quorum.cluster.register_listener(1, "h", 9))
    assert quorum.cluster.register_listener(1, "h", 9).records == []  # known already
    relaunch = quorum.cluster.register_brokers(["node-x"], 3)
    assert [r["type"] for r in relaunch.records] == ["broker", "broker", "listener", "broker"]
    quorum.commit(relaunch)
    assert {b.node_id for b in brokers.values()} == {"node-x"} and brokers[1].port == -1
    assert quorum.commit(quorum.cluster.add_broker("node-y", None, node_alive=True)) == 3
    for args, match in [
        (("node-y", 3, True), "exists"),
        (("node-z", None, False), "not alive"),
        (("n", -1, True), "non-negative"),
    ]:
        with pytest.raises(InvalidRequestError, match=match):
            quorum.cluster.add_broker(*args)
    with pytest.raises(InvalidRequestError):
        quorum.cluster.set_alive(9, False)
    assert quorum.cluster.live_brokers({"node-x"}) == [0, 1, 2]


def test_producer_id_blocks_follow_on_and_survive_a_restart(tmp_path):
    q = open_quorum(tmp_path)
    blocks = [q.commit(q.producer_ids.generate(1000)) for _ in range(2)]
    for bad in (0, -1, 1_000_001, True, "10"):
        with pytest.raises(InvalidRequestError):
            q.producer_ids.generate(bad)
    q.close()
    q = open_quorum(tmp_path)
    try:
        blocks.append(q.commit(q.producer_ids.generate(5)))
    finally:
        q.close()
    assert blocks == [
        AllocateProducerIdsResponse(0, 1000),
        AllocateProducerIdsResponse(1000, 1000),
        AllocateProducerIdsResponse(2000, 5),
    ]


# -- the metadata log ---------------------------------------------------------------------


def snapshot(q: QuorumController) -> dict:
    return {
        "cluster": (q.cluster.cluster_id, sorted(q.cluster.brokers.items())),
        "topics": {
            name: (t.topic_id, [records.partition(name, p, r) for p, r in enumerate(t.partitions)])
            for name, t in q.replication.topics.items()
        },
        "configs": {name: q.configuration.overrides(name) for name in q.replication.topics},
        "producer_ids": q.producer_ids.next_producer_id,
    }


def test_replaying_the_metadata_log_rebuilds_the_same_state(tmp_path):
    q = open_quorum(tmp_path, **{"rayqueue.num.brokers": 4})
    q.commit(q.cluster.register_brokers([*NODES, "node-d"], 4))
    q.commit(q.cluster.register_listener(0, "host", 9092))
    online = create(q, "kept", 3, 2, configs={"retention.ms": 7})
    create(q, "deleted", 1, 1)
    q.commit(q.replication.delete_topic("deleted", enabled=True))
    q.commit(q.replication.remove_from_isr("kept", 0, registration(q, "kept").leader))
    q.commit(q.replication.elect("kept", 0, down(online, "kept", 0, registration(q, "kept").replicas[0]), False))
    q.commit(q.replication.reassign("kept", 1, [3, 2]))
    q.commit(q.configuration.alter("kept", (AlterableConfig("cleanup.policy", SET, "compact"),)))
    q.commit(q.cluster.set_alive(2, False))
    q.commit(q.producer_ids.generate(10))
    before, epoch = snapshot(q), q.cluster.controller_epoch
    q.close()
    q = open_quorum(tmp_path, **{"rayqueue.num.brokers": 4})
    try:
        assert snapshot(q) == before
        assert q.cluster.controller_epoch == epoch + 1  # every start is a new controller epoch
        assert q.replication.reassignments().keys() == {("kept", 1)}
        assert q.skipped.count == 0
    finally:
        q.close()


def test_replay_skips_an_unreadable_record_with_a_log_line(tmp_path, caplog):
    q = open_quorum(tmp_path)
    q.commit(q.cluster.register_brokers(NODES, 3))
    create(q, "t")
    before = snapshot(q)
    q.close()
    metadata = MetadataLog(tmp_path / f"{METADATA_TOPIC}-0")
    bad = [b"{not json", json.dumps({"type": "topic_config", "name": "never-created", "configs": {}}).encode()]
    first = metadata._log.log_end_offset
    for value in bad:
        builder = RecordBatchBuilder()
        builder.append(value, key=b"junk")
        metadata._log.append(builder.build())
    metadata.close()
    with caplog.at_level(logging.ERROR, logger="actors.internal_records"):
        q = open_quorum(tmp_path)
    try:
        assert snapshot(q) == before and q.skipped.count == 2
        lines = [r.getMessage() for r in caplog.records if METADATA_TOPIC in r.getMessage()]
        assert len(lines) == 2 and str(first) in lines[0] and str(first + 1) in lines[1]
    finally:
        q.close()


def test_a_record_that_fails_its_check_changes_nothing(quorum):
    create(quorum, "t")
    before = snapshot(quorum)
    for record in [
        {"type": "partition", "topic": "t", "partition": 0, "replicas": ["0"], "leader": 0},
        {"type": "partition", **records.partition("missing", 0, registration(quorum, "t"))},
        {**records.partition("t", 5, registration(quorum, "t"))},
        {"type": "topic_config", "name": "missing", "configs": {}},
        {"type": "listener", "broker_id": 9, "host": "h", "port": 1},
        {"type": "controller_epoch", "epoch": True},
        {"type": "from-the-future"},
    ]:
        with pytest.raises((ValueError, TypeError, KeyError)):
            quorum.replay(record)
    assert snapshot(quorum) == before


# -- ACLs ---------------------------------------------------------------------------------


def _acl(name: str, principal: str = "User:alice", op=AclOperation.READ, pattern=PatternType.LITERAL) -> AclBinding:
    return AclBinding.of(ResourceType.TOPIC, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


def test_acls_are_created_once_deleted_by_filter_and_survive_a_restart(tmp_path):
    q = open_quorum(tmp_path)
    bad = InvalidRequestError("unreadable entry")
    version = q.acls.version
    results = q.commit(q.acls.create_acls([_acl("a"), _acl("b"), bad, _acl("a")]))
    assert results == [None, None, bad, None]
    assert sorted(b.name for b in q.acls.acls.values()) == ["a", "b"] and q.acls.version == version + 2
    # Creating an ACL that exists writes nothing (Kafka's CreateAcls is idempotent).
    again = q.acls.create_acls([_acl("a")])
    assert again.records == [] and again.response == [None]
    q.commit(q.acls.create_acls([_acl("p-", "User:bob", pattern=PatternType.PREFIXED)]))
    kept = dict(q.acls.acls)
    q.close()
    q = open_quorum(tmp_path)
    try:
        assert q.acls.acls == kept  # replayed from the metadata log, ids and all
        by_name = AclBindingFilter.of(ResourceType.TOPIC, "p-x", PatternType.MATCH)
        assert q.acls.describe(by_name) == [_acl("p-", "User:bob", pattern=PatternType.PREFIXED)]
        # Two filters matching the same ACL: listed under both, removed once.
        deleted = q.commit(
            q.acls.delete_acls([AclBindingFilter.of(name="a"), AclBindingFilter.of(principal="User:alice")])
        )
        assert deleted == [[_acl("a")], [_acl("a"), _acl("b")]]
        assert q.acls.describe(AclBindingFilter.of()) == [_acl("p-", "User:bob", pattern=PatternType.PREFIXED)]
        assert q.commit(q.acls.delete_acls([AclBindingFilter.of(name="nothing")])) == [[]]
    finally:
        q.close()
    q = open_quorum(tmp_path)
    try:
        assert list(q.acls.acls.values()) == [_acl("p-", "User:bob", pattern=PatternType.PREFIXED)]
    finally:
        q.close()


def test_an_acl_record_that_is_no_acl_is_refused(quorum):
    before = dict(quorum.acls.acls)
    good = records.acl("id-1", _acl("t"))
    for record in [
        {**good, "operation": 99},
        {**good, "pattern_type": PatternType.MATCH.value},
        {**good, "principal": "no-type"},
        {**good, "resource_name": 5},
        {"type": "remove_acl", "id": "never-created"},
    ]:
        with pytest.raises((ValueError, TypeError, KeyError)):
            quorum.replay(record)
    assert quorum.acls.acls == before
