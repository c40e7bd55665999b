"""The broker's host actors called directly: replica data path, fencing, bad input, failures."""

from __future__ import annotations

import time

import pytest
import ray

from actors.broker.partition import HostServices, PartitionReplica
from actors.broker.replica_ref import ReplicaRef
from actors.controller import assign_replicas, new_cluster_id, validate_topic_name
from actors.controller.configuration_control import altered
from actors.controller.quorum_controller import QuorumController
from actors.metadata_log import MetadataLog
from actors.names import broker_actor_name
from actors.protocol import (
    AlterableConfig,
    AlterConfigOp,
    AlterPartitionRequest,
    AlterPartitionResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DescribeConfigsRequest,
    FetchRequest,
    IncrementalAlterConfigsRequest,
    ListOffsetsRequest,
    ProduceOrder,
    ProduceRequest,
)
from actors.protocol_broker import LeaderAndIsrPartitionState
from rayqueue import TopicPartition
from rayqueue.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from storage import RecordBatchBuilder, iter_batches
from tests.helpers import close_replica, hosted_replica, kill_broker, set_role, wait_for


def batch(values: list[bytes], timestamp: int | None = None) -> bytes:
    builder = RecordBatchBuilder()
    for v in values:
        builder.append(v, timestamp=timestamp)
    return builder.build()


def leader_of(cluster, topic: str, partition: int = 0):
    meta = cluster.metadata([topic]).topics[topic].partitions[partition]
    return meta.leader_handle, meta.leader_epoch


def test_produce_then_fetch_returns_the_same_bytes(cluster, new_topic):
    topic = new_topic()
    leader, epoch = leader_of(cluster, topic)
    first = batch([b"a", b"b", b"c"])
    second = batch([b"d"])
    r1 = ray.get(leader.produce.remote(ProduceRequest(first, 1, 30000, epoch)))
    r2 = ray.get(leader.produce.remote(ProduceRequest(second, -1, 30000, epoch)))
    assert (r1.base_offset, r1.last_offset, r2.base_offset) == (0, 2, 3)
    fetched = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0)))
    assert fetched.high_watermark == 4 and fetched.log_start_offset == 0
    batches = list(iter_batches(fetched.records))
    assert [b.base_offset for b in batches] == [0, 3]
    # The broker patched only baseOffset and partitionLeaderEpoch: the rest is the producer's bytes.
    assert fetched.records[61 : len(first)] == first[61:] and fetched.records[17:21] == first[17:21]
    assert [r.value for b in batches for r in b] == [b"a", b"b", b"c", b"d"]


def test_calls_without_idempotence_are_appended_in_their_order(cluster, new_topic):
    """Ray may start calls out of order; a producer without idempotence numbers them and the
    leader appends them in that order (Kafka's TCP order), never waiting long for a lost one."""
    topic = new_topic()
    leader, epoch = leader_of(cluster, topic)
    # Calls 1 and 2 of session "s" reach the leader first: they wait for call 0.
    later = [
        leader.produce.remote(ProduceRequest(batch([b"%d" % n]), 1, 30000, epoch, "client", ProduceOrder("s", n, 0)))
        for n in (2, 1)
    ]
    ready, _ = ray.wait(later, num_returns=1, timeout=0.5)
    assert not ready
    first = leader.produce.remote(ProduceRequest(batch([b"0"]), 1, 30000, epoch, "client", ProduceOrder("s", 0, 0)))
    assert [r.base_offset for r in ray.get([first, *reversed(later)], timeout=30)] == [0, 1, 2]
    # A call whose predecessors never come (lost before they reached the leader) goes ahead
    # after its timeout, as Kafka's reordering after a failed request.
    alone = ray.get(
        leader.produce.remote(ProduceRequest(batch([b"9"]), 1, 300, epoch, "client", ProduceOrder("lost", 9, 7))),
        timeout=30,
    )
    assert alone.base_offset == 3
    # Another session is not held up by "s", and "s" goes on in order from where it was.
    other = ray.get(
        leader.produce.remote(ProduceRequest(batch([b"x"]), 1, 30000, epoch, "client", ProduceOrder("t", 0, 0))),
        timeout=30,
    )
    assert other.base_offset == 4
    assert (
        ray.get(
            leader.produce.remote(ProduceRequest(batch([b"3"]), 1, 30000, epoch, "client", ProduceOrder("s", 3, 3)))
        ).base_offset
        == 5
    )
    fetched = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0)))
    assert [r.value for b in iter_batches(fetched.records) for r in b] == [b"0", b"1", b"2", b"9", b"x", b"3"]


def test_producer_without_idempotence_keeps_partition_order(cluster, new_topic):
    """acks=1 turns idempotence off; five calls in flight of batches large enough to travel
    through Ray's object store still land in send order."""
    topic = new_topic()
    producer = cluster.producer(acks=1, linger_ms=0, batch_size=200_000)
    assert not producer.config["enable.idempotence"]
    n = 100_000
    filler = b"x" * 300
    for i in range(n):
        producer.send(topic, b"%06d" % i + filler)
    producer.flush(60)
    producer.close()
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    got: list[int] = []
    for record in consumer:
        got.append(int(record.value[:6]))
        if len(got) == n:
            break
    consumer.close()
    assert got == list(range(n))


def test_fetch_long_polls_until_data_arrives(cluster, new_topic):
    topic = new_topic()
    leader, epoch = leader_of(cluster, topic)
    pending = leader.fetch.remote(FetchRequest(0, 1 << 20, 60000, 1))
    ready, _ = ray.wait([pending], timeout=0.5)
    assert not ready, "fetch at the log end must wait for data"
    ray.get(leader.produce.remote(ProduceRequest(batch([b"wake"]), 1, 30000, epoch)))
    # Answered long before its 60 s max wait: the produce woke it.
    result = ray.get(pending, timeout=20)
    assert [r.value for b in iter_batches(result.records) for r in b] == [b"wake"]


def test_fetch_returns_empty_after_max_wait_without_data(cluster, new_topic):
    leader, _ = leader_of(cluster, new_topic())
    result = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 100, 1)), timeout=20)
    assert result.records == b"" and result.high_watermark == 0


def test_stale_and_future_leader_epochs_are_fenced(cluster, new_topic):
    topic = new_topic()
    leader, epoch = leader_of(cluster, topic)
    broker = leader.broker_id
    # What the controller does on an election: the replica moves to a newer epoch.
    set_role(leader, LeaderAndIsrPartitionState(broker, epoch + 1, (broker,), (broker,)))
    with pytest.raises(FencedLeaderEpochError) as fenced:
        ray.get(leader.produce.remote(ProduceRequest(batch([b"x"]), 1, 30000, epoch)))
    assert fenced.value.retriable and fenced.value.code == 74
    with pytest.raises(UnknownLeaderEpochError):
        ray.get(leader.fetch.remote(FetchRequest(0, 1024, 0, 1, 0, epoch + 2)))
    ray.get(leader.produce.remote(ProduceRequest(batch([b"x"]), 1, 30000, epoch + 1)))


def test_bad_input_is_refused_and_leaves_the_log_untouched(cluster, new_topic):
    topic = new_topic(max_message_bytes=2000)
    leader, epoch = leader_of(cluster, topic)
    ray.get(leader.produce.remote(ProduceRequest(batch([b"good"]), 1, 30000, epoch)))
    corrupt = bytearray(batch([b"bad"]))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        ray.get(leader.produce.remote(ProduceRequest(bytes(corrupt), 1, 30000, epoch)))
    with pytest.raises(CorruptRecordError):
        ray.get(leader.produce.remote(ProduceRequest(b"\x00" * 10, 1, 30000, epoch)))
    with pytest.raises(RecordTooLargeError):
        ray.get(leader.produce.remote(ProduceRequest(batch([b"x" * 5000]), 1, 30000, epoch)))
    with pytest.raises(InvalidRequiredAcksError):
        ray.get(leader.produce.remote(ProduceRequest(batch([b"y"]), 2, 30000, epoch)))
    state = ray.get(leader.describe.remote())
    assert state["log_end_offset"] == 1
    fetched = ray.get(leader.fetch.remote(FetchRequest(0, 1 << 20, 0)))
    assert [r.value for b in iter_batches(fetched.records) for r in b] == [b"good"]
    # The replica survived all of it.
    assert ray.get(leader.host.ping.remote()) >= 0


def test_fetch_out_of_range(cluster, new_topic):
    leader, epoch = leader_of(cluster, new_topic())
    ray.get(leader.produce.remote(ProduceRequest(batch([b"a", b"b"]), 1, 30000, epoch)))
    with pytest.raises(OffsetOutOfRangeError):
        ray.get(leader.fetch.remote(FetchRequest(5, 1024, 0)))
    assert ray.get(leader.delete_records.remote(DeleteRecordsRequest(1, epoch))).low_watermark == 1
    with pytest.raises(OffsetOutOfRangeError):
        ray.get(leader.fetch.remote(FetchRequest(0, 1024, 0)))


def test_list_offsets_by_time(cluster, new_topic):
    leader, epoch = leader_of(cluster, new_topic())
    for ts in (1000, 2000, 3000):
        ray.get(leader.produce.remote(ProduceRequest(batch([b"v"], timestamp=ts), 1, 30000, epoch)))
    assert ray.get(leader.list_offsets.remote(ListOffsetsRequest(-2))).offset == 0
    assert ray.get(leader.list_offsets.remote(ListOffsetsRequest(-1))).offset == 3
    found = ray.get(leader.list_offsets.remote(ListOffsetsRequest(1500)))
    assert (found.offset, found.timestamp) == (1, 2000)
    assert ray.get(leader.list_offsets.remote(ListOffsetsRequest(9999))).offset == -1


def test_retention_runs_in_the_background(cluster, new_topic):
    topic = new_topic(retention_ms=1, segment_bytes=200, file_delete_delay_ms=0)
    leader, epoch = leader_of(cluster, topic)
    old = int(time.time() * 1000) - 3600_000
    for _ in range(5):
        ray.get(leader.produce.remote(ProduceRequest(batch([b"x" * 100], timestamp=old), 1, 30000, epoch)))
    # The session cluster checks retention every second; old segments go, offsets stay.
    wait_for(lambda: ray.get(leader.describe.remote())["log_start_offset"] > 0, 30, what="retention")
    assert ray.get(leader.describe.remote())["log_end_offset"] == 5


def test_topic_names_are_validated_as_kafka_does(admin):
    for bad in ["", ".", "..", "a/b", "../etc", "x" * 250, "sp ace", "é"]:
        with pytest.raises(InvalidTopicError):
            admin.create_topic(bad)
    validate_topic_name("ok_name-1.2")
    validate_topic_name("x" * 249)


def test_topic_admin_errors(admin, new_topic):
    topic = new_topic(partitions=2)
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topic(topic)
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions(topic, 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_configs("no-such-topic")
    with pytest.raises(InvalidConfigError, match="retention.ms"):
        admin.create_topic(topic + "-x", configs={"retention.msx": 5})
    assert len(admin.create_partitions(topic, 3).partitions) == 3


def test_alter_configs_reaches_the_replicas(cluster, admin, new_topic):
    topic = new_topic()
    admin.alter_configs(topic, {"max.message.bytes": 100})
    assert admin.describe_configs(topic)["max.message.bytes"] == (100, "DYNAMIC_TOPIC_CONFIG")
    leader, epoch = leader_of(cluster, topic)
    with pytest.raises(RecordTooLargeError):
        ray.get(leader.produce.remote(ProduceRequest(batch([b"z" * 200]), 1, 30000, epoch)))
    admin.alter_configs(topic, delete_configs=["max.message.bytes"])
    ray.get(leader.produce.remote(ProduceRequest(batch([b"z" * 200]), 1, 30000, epoch)))


def test_default_replica_assignment_spreads_leaders_and_replicas():
    assignment = assign_replicas(6, 3, [0, 1, 2], start=0)
    assert [r[0] for r in assignment] == [0, 1, 2, 0, 1, 2]
    assert all(sorted(r) == [0, 1, 2] for r in assignment)
    # Kafka shifts the followers after each full round of leaders.
    assert assignment[0] != assignment[3]
    assert len(new_cluster_id()) == 22


def test_incremental_alter_configs_applies_kafka_s_four_operations_or_none():
    defaults = {"cleanup.policy": ("delete",), "retention.ms": 604800000}
    overrides = {"retention.ms": 1000, "segment.bytes": 2048}
    changes = (
        AlterableConfig("cleanup.policy", AlterConfigOp.APPEND, "compact"),  # from the default
        AlterableConfig("retention.ms", AlterConfigOp.DELETE),
        AlterableConfig("segment_bytes", AlterConfigOp.SET, "4096"),  # the keyword form, converted
    )
    assert altered(overrides, defaults, changes) == {"cleanup.policy": ["delete", "compact"], "segment.bytes": 4096}
    assert overrides == {"retention.ms": 1000, "segment.bytes": 2048}  # the input stays as it was
    both = {"cleanup.policy": ["delete", "compact"]}
    subtract = (AlterableConfig("cleanup.policy", AlterConfigOp.SUBTRACT, "delete"),)
    assert altered(both, defaults, subtract) == {"cleanup.policy": ["compact"]}
    append_again = (AlterableConfig("cleanup.policy", AlterConfigOp.APPEND, ["compact"]),)
    assert altered(both, defaults, append_again) == both  # nothing doubled
    for bad, error in (
        ((AlterableConfig("retention.ms", AlterConfigOp.APPEND, 5),), InvalidConfigError),  # not a list
        ((AlterableConfig("no.such.key", AlterConfigOp.SET, 1),), InvalidConfigError),
        ((AlterableConfig("retention.ms", AlterConfigOp.SET, "soon"),), InvalidConfigError),
        ((AlterableConfig("retention.ms", 7, 1),), InvalidRequestError),
        ((AlterableConfig("retention.ms", 0, 1), AlterableConfig("retention_ms", 1)), InvalidRequestError),
        (("retention.ms=1",), InvalidRequestError),
    ):
        with pytest.raises(error):
            altered(overrides, defaults, bad)


def test_describe_and_alter_configs_through_the_controller(cluster, new_topic):
    topic = new_topic()
    controller = cluster.controller
    chosen = ray.get(controller.describe_configs.remote(DescribeConfigsRequest(topic, ("cleanup.policy", "no.such"))))
    assert chosen == {"cleanup.policy": (("delete",), "DEFAULT_CONFIG")}
    append = IncrementalAlterConfigsRequest(
        topic, (AlterableConfig("cleanup.policy", AlterConfigOp.APPEND, "compact"),)
    )
    assert ray.get(controller.alter_configs.remote(append)) == {"cleanup.policy": ["delete", "compact"]}
    described = ray.get(controller.describe_configs.remote(DescribeConfigsRequest(topic)))
    assert described["cleanup.policy"] == (["delete", "compact"], "DYNAMIC_TOPIC_CONFIG")
    assert described["retention.ms"][1] == "DEFAULT_CONFIG"
    refused = IncrementalAlterConfigsRequest(
        topic,
        (
            AlterableConfig("retention.ms", AlterConfigOp.SET, 5000),
            AlterableConfig("segment.bytes", AlterConfigOp.APPEND, 1),
        ),
    )
    with pytest.raises(InvalidConfigError):
        ray.get(controller.alter_configs.remote(refused))
    assert ray.get(controller.describe_configs.remote(DescribeConfigsRequest(topic, ("retention.ms",)))) == {
        "retention.ms": (604800000, "DEFAULT_CONFIG")
    }  # nothing of the refused request applied


def test_validate_only_checks_everything_and_changes_nothing(cluster, admin, new_topic):
    """Kafka's validate_only on CreateTopics, CreatePartitions and IncrementalAlterConfigs:
    the same checks as the real request, and nothing written."""
    controller = cluster.controller
    name = f"validate-only-{time.monotonic_ns()}"
    planned = ray.get(
        controller.create_topic.remote(
            CreateTopicsRequest(name, 3, 2, configs={"retention.ms": 5000}, validate_only=True)
        )
    )
    assert [len(p.replicas) for p in planned.partitions] == [2, 2, 2]
    assert all(p.leader == -1 for p in planned.partitions) and planned.topic_id == ""
    assert planned.configs == {"retention.ms": 5000}
    assert name not in admin.list_topics()
    with pytest.raises(InvalidConfigError):
        ray.get(
            controller.create_topic.remote(CreateTopicsRequest(name, 1, 1, configs={"no.such": 1}, validate_only=True))
        )
    with pytest.raises(InvalidPartitionsError):
        ray.get(controller.create_topic.remote(CreateTopicsRequest(name, 0, 1, validate_only=True)))
    topic = new_topic(partitions=1)
    with pytest.raises(TopicAlreadyExistsError):
        ray.get(controller.create_topic.remote(CreateTopicsRequest(topic, 1, 1, validate_only=True)))
    grown = ray.get(controller.create_partitions.remote(CreatePartitionsRequest(topic, 4, validate_only=True)))
    assert len(grown.partitions) == 1 and len(admin.describe_topics([topic])[topic].partitions) == 1
    with pytest.raises(InvalidPartitionsError):
        ray.get(controller.create_partitions.remote(CreatePartitionsRequest(topic, 1, validate_only=True)))
    change = (AlterableConfig("retention.ms", AlterConfigOp.SET, 7000),)
    alter = IncrementalAlterConfigsRequest(topic, change, validate_only=True)
    assert ray.get(controller.alter_configs.remote(alter)) == {"retention.ms": 7000}
    assert admin.describe_configs(topic)["retention.ms"] == (604800000, "DEFAULT_CONFIG")
    bad = IncrementalAlterConfigsRequest(topic, (AlterableConfig("retention.ms", AlterConfigOp.SET, "x"),), True)
    with pytest.raises(InvalidConfigError):
        ray.get(controller.alter_configs.remote(bad))


def test_killed_replica_comes_back_with_every_acknowledged_record(failover_cluster, failover_topic):
    cluster, new_topic = failover_cluster, failover_topic
    topic = new_topic()
    producer = cluster.producer(linger_ms=1, retry_backoff_ms=50)
    acked = []
    for i in range(300):
        producer.send(topic, f"{i}".encode(), callback=lambda md, err: acked.append(md.offset) if md else None)
        if i == 150:
            leader, _ = leader_of(cluster, topic)
            kill_broker(leader)
    producer.flush(120)
    producer.close()
    assert len(acked) == 300
    # The controller restarted the replica (same broker, same data) and made it leader again.
    meta = wait_for(
        lambda: (
            cluster.metadata([topic]).topics[topic].partitions[0].leader_handle
            and cluster.metadata([topic]).topics[topic].partitions[0]
        ),
        60,
    )
    assert meta.leader_epoch >= 1
    fetched = ray.get(meta.leader_handle.fetch.remote(FetchRequest(0, 1 << 24, 0)))
    values = [int(r.value) for b in iter_batches(fetched.records) for r in b]
    assert set(values) == set(range(300))  # at least once: nothing acknowledged is lost
    first_seen = list(dict.fromkeys(values))
    assert first_seen == sorted(first_seen)  # retries kept the partition's order


def _partition_state(admin, topic: str) -> list[tuple]:
    """Replicas, leader, leader epoch and ISR of each partition, and the topic id."""
    meta = admin.describe_topics([topic])[topic]
    return [meta.topic_id] + [(p.replicas, p.leader, p.leader_epoch, tuple(sorted(p.isr))) for p in meta.partitions]


def test_controller_restart_keeps_all_metadata(cluster, new_topic):
    topic = new_topic(partitions=2, replication_factor=3, retention_ms=123456)
    admin = cluster.admin()
    wait_for(
        lambda: all(len(p.isr) == 3 for p in admin.describe_topics([topic])[topic].partitions), 30, what="full ISR"
    )
    state = _partition_state(admin, topic)
    before = cluster.describe()
    controller = cluster.controller
    ray.kill(controller, no_restart=False)  # Ray restarts it; it replays its metadata log
    after = wait_for(
        lambda: (d := cluster.describe())["controller_epoch"] > before["controller_epoch"] and d,
        60,
        what="controller restart",
    )
    assert after["cluster_id"] == before["cluster_id"]
    assert after["controller_epoch"] == before["controller_epoch"] + 1
    assert after["topics"] == before["topics"] and after["partitions"] == before["partitions"]
    # Assignment, leaders, leader epochs, ISR and topic id come back from the metadata log.
    assert _partition_state(admin, topic) == state
    assert admin.describe_configs(topic)["retention.ms"][0] == 123456
    meta = admin.describe_topics([topic])[topic]
    assert [p.leader >= 0 for p in meta.partitions] == [True, True]
    leader = meta.partitions[1].leader_handle
    ray.get(leader.produce.remote(ProduceRequest(batch([b"after restart"]), 1, 30000, meta.partitions[1].leader_epoch)))


def _replica(cluster, topic: str, partition: int, broker: int):
    """The replica in its broker's host actor, found by name (not through the controller), or None
    when it is not open there."""
    try:
        actor = ray.get_actor(broker_actor_name(broker), namespace=cluster.namespace)
        handle = ReplicaRef(actor, topic, partition, broker)
        return handle, ray.get(handle.describe.remote(), timeout=5)
    except (ValueError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, NotLeaderOrFollowerError):
        return None


def _led_past(cluster, topic: str, replicas, epoch: int):
    """(broker, handle, info) of a leader at an epoch above ``epoch`` that every live replica
    follows, seen on the replicas themselves; None while there is none."""
    seen = {b: r for b in replicas if (r := _replica(cluster, topic, 0, b)) is not None}
    leaders = [(b, h, i) for b, (h, i) in seen.items() if i["role"] == "leader" and i["leader_epoch"] > epoch]
    if len(leaders) != 1:
        return None
    b, _, info = leaders[0]
    followers = [i for o, (_, i) in seen.items() if o != b]
    if any((i["role"], i["leader_id"], i["leader_epoch"]) != ("follower", b, info["leader_epoch"]) for i in followers):
        return None
    return leaders[0]


def _all_in_sync(cluster, topic: str, replicas, leader: int) -> bool:
    seen = {b: r[1] for b in replicas if (r := _replica(cluster, topic, 0, b)) is not None}
    ends = {i["log_end_offset"] for i in seen.values()}
    return len(seen) == len(replicas) and sorted(seen[leader]["isr"]) == sorted(replicas) and len(ends) == 1


@pytest.mark.parametrize("failover_cluster", ["broker"], indirect=True)
def test_restarted_controller_comes_up_and_watches_replicas_without_a_client(
    failover_cluster, failover_admin, failover_topic
):
    """Ray restarts a killed controller; with no client calling it, it must still attach to the
    replicas, elect when a leader dies and accept ISR changes from leaders (alter_partition)."""
    cluster, admin, new_topic = failover_cluster, failover_admin, failover_topic
    topic = new_topic(1, 3)
    meta = admin.describe_topics([topic])[topic].partitions[0]
    replicas = meta.replicas
    ray.get(meta.leader_handle.produce.remote(ProduceRequest(batch([b"before"]), -1, 30000, meta.leader_epoch)))
    before = cluster.describe()["controller_epoch"]
    ray.kill(cluster.controller, no_restart=False)
    # From here until the end nothing calls the controller. The leader dies while the
    # controller restarts: it is either seen dying or recreated at start, with a new epoch
    # either way (followers of a recreated leader must fetch from the new actor).
    kill_broker(meta.leader_handle)
    broker, leader, info = wait_for(
        lambda: _led_past(cluster, topic, replicas, meta.leader_epoch), 60, what="a leader after the restart"
    )
    ray.get(leader.produce.remote(ProduceRequest(batch([b"first"]), -1, 30000, info["leader_epoch"])))
    # Every replica, the killed one included, gets back in sync: its ISR return went
    # through alter_partition on the restarted controller.
    wait_for(lambda: _all_in_sync(cluster, topic, replicas, broker), 60, what="all replicas in sync")
    # The restarted controller watches the replicas: a second leader death, now surely after
    # it came up, moves leadership to another in-sync replica.
    kill_broker(leader)
    broker2, leader2, info2 = wait_for(
        lambda: _led_past(cluster, topic, replicas, info["leader_epoch"]), 60, what="a leader after the second kill"
    )
    assert broker2 != broker
    ray.get(leader2.produce.remote(ProduceRequest(batch([b"second"]), -1, 30000, info2["leader_epoch"])))
    wait_for(lambda: _all_in_sync(cluster, topic, replicas, broker2), 60, what="all replicas in sync again")
    values = [r.value for b in iter_batches(ray.get(leader2.read_local.remote(0))[0]) for r in b]
    assert values == [b"before", b"first", b"second"]
    # Only now a client asks: the metadata agrees with what the replicas showed.
    assert cluster.describe()["controller_epoch"] == before + 1
    after = admin.describe_topics([topic])[topic].partitions[0]
    assert (after.leader, after.leader_epoch, sorted(after.isr)) == (broker2, info2["leader_epoch"], sorted(replicas))


def test_follower_fetches_from_a_recreated_leader_at_the_same_epoch(ray_session, tmp_path):
    """A leader's host actor recreated at the same epoch and broker id is a new handle: a
    follower told about it must fetch from it, not keep retrying the dead one."""
    config = {"segment.bytes": 1 << 20}
    leader = hosted_replica(0, "t", 0, str(tmp_path / "b0"), config)
    follower = hosted_replica(1, "t", 0, str(tmp_path / "b1"), config)
    fast = {"replica.fetch.wait.max.ms": 50}

    def state(leader: object) -> LeaderAndIsrPartitionState:
        return LeaderAndIsrPartitionState(0, 0, (0, 1), (0, 1), leader_handle=leader)

    try:
        set_role(leader, state(leader), fast)
        set_role(follower, state(leader), fast)
        ray.get(leader.produce.remote(ProduceRequest(batch([b"a"]), 1, 30000, 0)))
        wait_for(lambda: ray.get(follower.describe.remote())["log_end_offset"] == 1, 30, what="first fetch")
        close_replica(leader)
        kill_broker(leader)
        leader = hosted_replica(0, "t", 0, str(tmp_path / "b0"), config)
        set_role(leader, state(leader), fast)
        ray.get(leader.produce.remote(ProduceRequest(batch([b"b"]), 1, 30000, 0)))
        assert set_role(follower, state(leader), fast)
        wait_for(
            lambda: ray.get(follower.describe.remote())["log_end_offset"] == 2, 30, what="fetch from the new leader"
        )
        records = ray.get(follower.read_local.remote(0))[0]
        assert [r.value for b in iter_batches(records) for r in b] == [b"a", b"b"]
    finally:
        for handle in (leader, follower):
            kill_broker(handle)


def test_alter_partition_refuses_stale_epochs_and_wrong_leaders(cluster, admin, new_topic):
    """Kafka's AlterPartition fencing: a change from anyone but the current leader at the
    current leader and partition epochs returns the committed state and changes nothing."""
    topic = new_topic(1, 3)
    meta = admin.describe_topics([topic])[topic].partitions[0]
    controller = cluster.controller
    committed = AlterPartitionResponse(meta.leader_epoch, meta.partition_epoch, tuple(meta.isr))
    shrunk = (meta.leader,)
    other = next(b for b in meta.replicas if b != meta.leader)
    stale = [
        (meta.leader, meta.leader_epoch, meta.partition_epoch - 1),  # stale partition epoch
        (meta.leader, meta.leader_epoch, meta.partition_epoch + 1),  # partition epoch from the future
        (meta.leader, meta.leader_epoch - 1, meta.partition_epoch),  # a deposed leader's epoch
        (other, meta.leader_epoch, meta.partition_epoch),  # not the leader
    ]
    for leader_id, leader_epoch, partition_epoch in stale:
        answer = ray.get(
            controller.alter_partition.remote(
                AlterPartitionRequest(topic, 0, leader_id, leader_epoch, partition_epoch, shrunk)
            )
        )
        assert answer == committed, (leader_id, leader_epoch, partition_epoch)
    after = admin.describe_topics([topic])[topic].partitions[0]
    assert (after.leader_epoch, after.partition_epoch, tuple(after.isr)) == (
        committed.leader_epoch,
        committed.partition_epoch,
        committed.isr,
    )
    with pytest.raises(UnknownTopicOrPartitionError):
        ray.get(
            controller.alter_partition.remote(
                AlterPartitionRequest(topic, 5, meta.leader, meta.leader_epoch, meta.partition_epoch, ())
            )
        )
    # The same change from the current leader at the current epochs is taken.
    answer = ray.get(
        controller.alter_partition.remote(
            AlterPartitionRequest(topic, 0, meta.leader, meta.leader_epoch, meta.partition_epoch, shrunk)
        )
    )
    assert answer == AlterPartitionResponse(meta.leader_epoch, meta.partition_epoch + 1, shrunk)


def test_metadata_log_without_topic_ids_loads_and_gets_them(tmp_path):
    """A metadata log written before topic ids (KIP-516) still loads: each topic gets an id
    once, written to the log, and keeps it across restarts."""
    log = MetadataLog(tmp_path / "__cluster_metadata-0")
    for record in [
        {"type": "cluster", "cluster_id": new_cluster_id()},
        {"type": "controller_epoch", "epoch": 1},
        {"type": "broker", "broker_id": 0, "node_id": "n", "data_dir": str(tmp_path / "broker-0"), "alive": True},
        {"type": "topic", "name": "old", "configs": {}},
        {
            "type": "partition",
            "topic": "old",
            "partition": 0,
            "replicas": [0],
            "leader": 0,
            "leader_epoch": 0,
            "isr": [0],
            "partition_epoch": 0,
        },
    ]:
        log.append(record)
    log.close()
    ids = []
    for _ in range(2):  # the controller's state without its actor: the replay and its writes
        quorum = QuorumController({"log.dirs": str(tmp_path)})
        ids.append(quorum.replication.topic_metadata("old", {}).topic_id)
        quorum.close()
    assert ids[0] and ids[0] == ids[1] and not ids[0].startswith("-")
    log = MetadataLog(tmp_path / "__cluster_metadata-0")
    assert [r for r in log.replay() if r["type"] == "topic_id"] == [
        {"type": "topic_id", "name": "old", "topic_id": ids[0]}
    ]
    log.close()


def test_replica_keeps_its_topics_directory_and_removes_a_deleted_ones(tmp_path):
    """partition.metadata: a directory without one (written before topic ids) is adopted, one
    with the same topic id is reopened, one with another id is a deleted topic's stray."""
    directory = tmp_path / "t-0"

    def open_replica(topic_id):
        replica = PartitionReplica("t", 0, str(tmp_path), {}, topic_id, HostServices.alone(0))
        return replica, replica._log.log_end_offset

    replica, _ = open_replica(None)  # no topic id known: nothing checked or written
    replica._log.append(batch([b"a", b"b"]), leader_epoch=0)
    replica._log.close()
    assert not (directory / "partition.metadata").exists()
    replica, end = open_replica("first-id")
    assert end == 2 and (directory / "partition.metadata").read_text() == "version: 0\ntopic_id: first-id\n"
    replica._log.close()
    replica, end = open_replica("first-id")
    assert end == 2
    replica._log.close()
    replica, end = open_replica("second-id")
    assert end == 0 and (directory / "partition.metadata").read_text() == "version: 0\ntopic_id: second-id\n"
    replica._log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-0"]
