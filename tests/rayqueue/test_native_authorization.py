"""rayqueue's native clients with a principal: every Admin call, the Consumer's
group and list-offsets calls and the Producer's idempotent and transactional calls are
checked by the actors against the cluster's ACLs with Kafka's rules and errors.

One cluster of this module's own, launched with Kafka's StandardAuthorizer and no Kafka
listener: only Ray calls. The ACLs are made by ``cluster.admin()`` (no principal: a super
user). Each test uses principals of its own, so a grant of an earlier test that a replica's
or coordinator's copy of the ACLs still holds for a moment cannot change its outcome. The
controller checks with the ACLs it owns (a change applies to the very next call); a
replica or a coordinator with its copy, kept fresh by a long poll (a change applies within
one controller round trip), so waits for a grant to arrive there have a deadline.
"""

from __future__ import annotations

import itertools

import pytest
import ray

from actors.protocol import DeleteRecordsRequest, FetchRequest, ListOffsetsRequest
from rayqueue import OffsetAndMetadata, TopicPartition
from rayqueue.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from rayqueue.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tests.helpers import authorizer_cluster, scrape, wait_for

NAMESPACE = "rayqueue-native-acl-test"
Op, Perm = AclOperation, AclPermissionType
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
_ids = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


def user() -> str:
    return f"User:{fresh('u')}"


def acl(rtype, name, principal, op, perm=Perm.ALLOW, pattern=PatternType.LITERAL) -> AclBinding:
    return AclBinding.of(rtype, name if rtype is not CLUSTER else "kafka-cluster", pattern, principal, "*", op, perm)


@pytest.fixture(scope="module")
def secured(ray_session):
    with authorizer_cluster(NAMESPACE) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def root(secured):
    """The super user's Admin (no principal)."""
    return secured.admin()


def grant(root, *bindings: AclBinding) -> None:
    root.create_acls(list(bindings))


def eventually(call, what: str, timeout: float = 30.0):
    """``call()``'s answer once it stops failing: a grant reaching a replica's or
    coordinator's copy of the ACLs (one controller round trip)."""
    return wait_for(lambda: (call(),), timeout=timeout, interval=0.05, what=what)[0]


def new_topic(root, partitions: int = 1) -> str:
    name = fresh("t")
    root.create_topic(name, partitions, 1)
    return name


def log_end(root, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return root.describe_partition_logs([tp])[tp].log_end_offset


def write(secured, topic: str, *values: bytes) -> None:
    producer = secured.producer()
    try:
        for v in values:
            producer.send(topic, v).get(30)
    finally:
        producer.close()


# -- topics: the controller ----------------------------------------------------------------------


def test_topic_calls_are_checked_by_the_controller(secured, root):
    alice = user()
    admin = secured.admin(principal=alice)
    name = fresh("created")
    with pytest.raises(TopicAuthorizationFailedError):
        admin.create_topic(name, 1, 1)
    assert name not in root.list_topics()
    # Granted while the client lives: its next call is allowed (the controller's own ACLs).
    grant(root, acl(TOPIC, name, alice, Op.CREATE))
    admin.create_topic(name, 1, 1)  # CREATE without DESCRIBE_CONFIGS: no min-ISR warning, no error
    assert name in root.list_topics()
    # CREATE on the cluster creates any topic.
    bob = user()
    grant(root, acl(CLUSTER, "", bob, Op.CREATE))
    secured.admin(principal=bob).create_topic(fresh("any"), 1, 1)

    # Listing and describing: only what the principal may DESCRIBE (CREATE implies nothing);
    # a named one is refused.
    other = new_topic(root)
    assert name not in admin.list_topics()
    grant(root, acl(TOPIC, name, alice, Op.DESCRIBE))
    assert name in admin.list_topics() and other not in admin.list_topics()
    assert set(admin.describe_topics()) == {name}
    with pytest.raises(TopicAuthorizationFailedError, match=other):
        admin.describe_topics([name, other])
    grant(root, acl(TOPIC, other, alice, Op.DESCRIBE))
    assert set(admin.describe_topics([name, other])) == {name, other}

    # Configs: DESCRIBE_CONFIGS to read them, ALTER_CONFIGS (which implies it) to change them.
    with pytest.raises(TopicAuthorizationFailedError):
        admin.describe_configs(name)
    with pytest.raises(TopicAuthorizationFailedError):
        admin.alter_configs(name, {"retention.ms": 1})
    assert root.describe_configs(name)["retention.ms"][0] == 604800000
    grant(root, acl(TOPIC, name, alice, Op.ALTER_CONFIGS))
    assert admin.alter_configs(name, {"retention.ms": 60000}) == {"retention.ms": 60000}
    assert admin.describe_configs(name)["retention.ms"][0] == 60000

    # Partitions: ALTER. Deleting: DELETE, and a refused delete leaves the topic.
    with pytest.raises(TopicAuthorizationFailedError):
        admin.create_partitions(name, 2)
    with pytest.raises(TopicAuthorizationFailedError):
        admin.delete_topic(name)
    assert len(root.describe_topics([name])[name].partitions) == 1
    grant(root, acl(TOPIC, name, alice, Op.ALTER), acl(TOPIC, name, alice, Op.DELETE))
    assert len(admin.create_partitions(name, 2).partitions) == 2
    admin.delete_topic(name)
    assert name not in root.list_topics()


def test_a_producers_auto_creation_needs_create(secured, root):
    alice = user()
    name = fresh("auto")
    producer = secured.producer(principal=alice, enable_idempotence=False, retries=0, max_block_ms=5000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(name, b"x").get(30)
        assert name not in root.list_topics()
        grant(root, acl(TOPIC, name, alice, Op.CREATE), acl(TOPIC, name, alice, Op.WRITE))
        assert eventually(lambda: producer.send(name, b"y").get(30), "the write ACL at the leader").offset == 0
    finally:
        producer.close()
    assert name in root.list_topics()


# -- records: the partition leaders -----------------------------------------------------------------


def test_record_calls_are_checked_by_the_leader(secured, root):
    alice = user()
    admin = secured.admin(principal=alice)
    topic = new_topic(root)
    tp = TopicPartition(topic, 0)
    write(secured, topic, b"a", b"b", b"c")
    with pytest.raises(TopicAuthorizationFailedError):
        admin.list_offsets({tp: -1})
    with pytest.raises(TopicAuthorizationFailedError):
        admin.describe_partition_logs([tp])
    with pytest.raises(TopicAuthorizationFailedError):
        admin.delete_records({tp: 2})
    assert root.describe_partition_logs([tp])[tp].log_start_offset == 0
    # Those were refused by the controller (the topic's metadata needs DESCRIBE); the leader
    # checks each call as well, for a driver that holds its handle.
    leader = root.replica_handles(tp)[0]
    for ref in (
        leader.list_offsets.remote(ListOffsetsRequest(-1, principal=alice)),
        leader.describe.remote(alice),
        leader.delete_records.remote(DeleteRecordsRequest(2, principal=alice)),
        leader.fetch.remote(FetchRequest(0, principal=alice)),
    ):
        with pytest.raises(TopicAuthorizationFailedError):
            ray.get(ref, timeout=60)

    # Everything on the topic but DELETE: DENY beats ALLOW.
    grant(root, acl(TOPIC, topic, alice, Op.ALL), acl(TOPIC, topic, alice, Op.DELETE, Perm.DENY))
    assert eventually(lambda: admin.list_offsets({tp: -1}), "the grant at the leader")[tp].offset == 3
    assert admin.describe_partition_logs([tp])[tp].log_end_offset == 3
    with pytest.raises(TopicAuthorizationFailedError):
        admin.delete_records({tp: 2})
    assert root.describe_partition_logs([tp])[tp].log_start_offset == 0
    # A DENY of WRITE added while the producer lives: refused, and nothing is appended.
    producer = secured.producer(principal=alice, enable_idempotence=False, retries=0)
    try:
        assert producer.send(topic, b"d").get(30).offset == 3  # ALL allows WRITE
        grant(root, acl(TOPIC, topic, alice, Op.WRITE, Perm.DENY))
        wait_for(lambda: _refused(producer, topic), timeout=30, what="the DENY at the leader")
        before = log_end(root, topic)
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"refused").get(30)
        assert log_end(root, topic) == before
    finally:
        producer.close()


def _refused(producer, topic: str) -> bool:
    """Whether a send is refused now (until the DENY arrives, sends are appended)."""
    try:
        producer.send(topic, b"before the deny").get(30)
    except TopicAuthorizationFailedError:
        return True
    return False


def test_a_consumers_list_offsets_need_describe(secured, root):
    alice = user()
    topic = new_topic(root)
    tp = TopicPartition(topic, 0)
    write(secured, topic, b"a")
    consumer = secured.consumer(principal=alice)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            consumer.end_offsets([tp])
        grant(root, acl(TOPIC, topic, alice, Op.DESCRIBE))
        assert eventually(lambda: consumer.end_offsets([tp]), "DESCRIBE at the leader") == {tp: 1}
    finally:
        consumer.close()


# -- consumer groups: the group coordinator ------------------------------------------------------------


def test_a_consumer_without_read_on_its_group_cannot_join(secured, root):
    alice = user()
    topic = new_topic(root)
    group = fresh("g")
    write(secured, topic, b"one", b"two")
    grant(root, acl(TOPIC, topic, alice, Op.READ))
    consumer = secured.consumer(principal=alice, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.subscribe([topic])
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(100):
                consumer.poll(100)
        assert root.describe_groups([group])[group].state == "Dead"  # never joined
    finally:
        consumer.close()
    grant(root, acl(GROUP, group, alice, Op.READ))
    probe = secured.admin(principal=alice)  # READ implies DESCRIBE: the coordinator has the grant
    eventually(lambda: probe.list_group_offsets(group), "READ on the group at the coordinator")
    consumer = secured.consumer(principal=alice, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.subscribe([topic])
        got: list = []
        wait_for(lambda: got.extend(consumer.poll(200)) or len(got) == 2, timeout=60, what="the group's records")
        consumer.commit()
        assert consumer.committed([TopicPartition(topic, 0)])[TopicPartition(topic, 0)].offset == 2
    finally:
        consumer.close()


def test_group_admin_calls(secured, root):
    alice, ops = user(), user()
    topic = new_topic(root)
    tp = TopicPartition(topic, 0)
    mine, theirs = fresh("mine"), fresh("theirs")
    for group in (mine, theirs):
        root.alter_group_offsets(group, {tp: 0})
    admin = secured.admin(principal=alice)
    # Listing: only the groups the principal may DESCRIBE, every group with DESCRIBE on the cluster.
    assert {g.group_id for g in admin.list_groups()} & {mine, theirs} == set()
    grant(root, acl(GROUP, mine, alice, Op.DESCRIBE))
    wait_for(lambda: {g.group_id for g in admin.list_groups()} & {mine, theirs} == {mine}, what="DESCRIBE mine")
    grant(root, acl(CLUSTER, "", ops, Op.DESCRIBE))
    ops_admin = secured.admin(principal=ops)
    wait_for(lambda: {mine, theirs} <= {g.group_id for g in ops_admin.list_groups()}, what="DESCRIBE the cluster")
    # Describing a group named: DESCRIBE on it.
    assert admin.describe_groups([mine])[mine].state == "Empty"
    with pytest.raises(GroupAuthorizationFailedError, match=theirs):
        admin.describe_groups([mine, theirs])
    # Offsets: DESCRIBE on the group and the topic to read them; the topic left out without.
    assert admin.list_group_offsets(mine) == {}
    with pytest.raises(TopicAuthorizationFailedError):
        admin.list_group_offsets(mine, [tp])
    with pytest.raises(TopicAuthorizationFailedError):
        admin.group_lag(mine, [topic])
    grant(root, acl(TOPIC, topic, alice, Op.DESCRIBE))
    wait_for(lambda: tp in admin.list_group_offsets(mine), what="DESCRIBE on the topic at the coordinator")
    assert admin.list_group_offsets(mine)[tp].offset == 0
    # Changing them: READ on the group and the topic.
    with pytest.raises(GroupAuthorizationFailedError):
        admin.alter_group_offsets(mine, {tp: 1})
    grant(root, acl(GROUP, mine, alice, Op.READ))
    wait_for(lambda: _refused_by_topic(admin, mine, tp), timeout=30, what="READ on the group")
    grant(root, acl(TOPIC, topic, alice, Op.READ))
    eventually(lambda: admin.alter_group_offsets(mine, {tp: 1}), "READ on the topic")
    assert root.list_group_offsets(mine)[tp].offset == 1
    # Deleting: DELETE on each group; a refused one stays, the others go.
    with pytest.raises(GroupAuthorizationFailedError):
        admin.delete_groups([mine])
    grant(root, acl(GROUP, mine, alice, Op.DELETE))
    eventually(lambda: admin.delete_groups([mine]), "DELETE on the group")
    with pytest.raises(GroupAuthorizationFailedError):
        admin.delete_groups([theirs])
    assert theirs in {g.group_id for g in root.list_groups()}
    assert mine not in {g.group_id for g in root.list_groups()}


def _refused_by_topic(admin, group: str, tp: TopicPartition) -> bool:
    """Whether altering the group's offsets is refused for the topic (refused for the
    group: the grant of READ on it has not arrived yet)."""
    try:
        admin.alter_group_offsets(group, {tp: 1})
    except TopicAuthorizationFailedError:
        return True
    except GroupAuthorizationFailedError:
        return False
    raise AssertionError("offsets altered without READ on the topic")


# -- idempotence and transactions: the transaction coordinator -------------------------------------------


def test_idempotence_needs_idempotent_write_or_write_on_some_topic(secured, root):
    alice, bob = user(), user()
    topic = new_topic(root)
    grant(root, acl(TOPIC, topic, alice, Op.DESCRIBE))  # its metadata, not WRITE
    refused = secured.producer(principal=alice, enable_idempotence=True, max_block_ms=5000)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            refused.send(topic, b"x").get(30)
    finally:
        refused.close()
    grant(root, acl(TOPIC, topic, bob, Op.WRITE))
    allowed = secured.producer(principal=bob)  # idempotent by default: WRITE on a topic is enough
    try:
        assert eventually(lambda: allowed.send(topic, b"y").get(30), "WRITE at the leader").offset == 0
    finally:
        allowed.close()
    assert log_end(root, topic) == 1


def test_transactions(secured, root):
    alice, bob = user(), user()
    topic, other = new_topic(root), new_topic(root)
    tp = TopicPartition(topic, 0)
    refused_tid, tid, group, refused_group = fresh("tx"), fresh("tx"), fresh("g"), fresh("g")
    producer = secured.producer(principal=alice, transactional_id=refused_tid, max_block_ms=10000)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close()
    # One CreateAcls: one version of the ACLs, which the coordinators take whole.
    grant(
        root,
        acl(TXN, tid, bob, Op.WRITE),
        acl(TOPIC, topic, bob, Op.WRITE),
        acl(TOPIC, topic, bob, Op.READ),
        acl(TOPIC, other, bob, Op.DESCRIBE),
        acl(GROUP, group, bob, Op.READ),
    )
    admin = secured.admin(principal=bob)
    eventually(lambda: admin.describe_transactions([tid]), "the grants at the transaction coordinator")
    eventually(lambda: admin.list_group_offsets(group), "the grants at the group coordinator")
    producer = secured.producer(principal=bob, transactional_id=tid, max_block_ms=10000)
    try:
        producer.init_transactions()
        # A partition of a topic without WRITE never joins the transaction: it must abort.
        producer.begin_transaction()
        producer.send(other, b"refused")
        with pytest.raises(KafkaError):
            producer.commit_transaction()
        producer.abort_transaction()
        assert log_end(root, other) == 0
        # Offsets need READ on the group.
        producer.begin_transaction()
        producer.send(topic, b"aborted")
        with pytest.raises(GroupAuthorizationFailedError):
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(1)}, refused_group)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(1)}, group)
        producer.commit_transaction()
    finally:
        producer.close()
    # The offset is the group's once the commit's marker is in (it follows the commit's answer).
    assert wait_for(lambda: root.list_group_offsets(group).get(tp), 60, what="the committed offset").offset == 1
    assert refused_group not in {g.group_id for g in root.list_groups()}

    # Describing: DESCRIBE on the transactional id (WRITE implies it); listing leaves out
    # the ids the principal may not describe.
    # CompleteCommit is written after the group coordinator hears of the commit: wait for it.
    wait_for(lambda: admin.describe_transactions([tid])[tid].state == "CompleteCommit", 60, what="CompleteCommit")
    assert [t.transactional_id for t in admin.list_transactions()] == [tid]
    stranger = secured.admin(principal=user())
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        stranger.describe_transactions([tid])
    assert stranger.list_transactions() == []


# -- the cluster ---------------------------------------------------------------------------------


def test_cluster_calls_need_the_cluster(secured, root):
    alice, ops = user(), user()
    admin, ops_admin = secured.admin(principal=alice), secured.admin(principal=ops)
    topic = new_topic(root)
    tp = TopicPartition(topic, 0)
    refused = [
        admin.describe_cluster,
        admin.describe_acls,
        lambda: admin.create_acls([acl(TOPIC, "x", alice, Op.READ)]),
        lambda: admin.delete_acls([]),
        admin.describe_scram_users,
        lambda: admin.add_scram_user("mallory", "secret"),
        lambda: admin.elect_leaders([tp]),
        admin.list_partition_reassignments,
        lambda: admin.alter_partition_reassignments({tp: [0]}),
        lambda: admin.replica_handles(tp),
        lambda: admin.stop_broker(0),
    ]
    for call in refused:
        with pytest.raises(ClusterAuthorizationFailedError):
            call()
    assert "mallory" not in root.describe_scram_users()
    grant(root, acl(CLUSTER, "", ops, Op.ALTER))  # ALTER implies DESCRIBE
    assert ops_admin.describe_cluster()["brokers"]
    ops_admin.add_scram_user("carol", "secret")
    assert "carol" in ops_admin.describe_scram_users()
    ops_admin.create_acls([acl(TOPIC, "x", alice, Op.READ)])
    assert acl(TOPIC, "x", alice, Op.READ) in ops_admin.describe_acls()
    assert ops_admin.elect_leaders([tp]) == {tp: "ElectionNotNeededError"}
    assert ops_admin.list_partition_reassignments() == {}
    with pytest.raises(ClusterAuthorizationFailedError):
        ops_admin.replica_handles(tp)  # a replica's handle bypasses every check: CLUSTER_ACTION


def test_native_refusals_are_counted(secured, root, metrics_export_port):
    alice = user()
    topic = new_topic(root)
    grant(root, acl(TOPIC, topic, alice, Op.DESCRIBE))
    admin = secured.admin(principal=alice)
    with pytest.raises(TopicAuthorizationFailedError):
        admin.describe_configs(topic)  # refused by the controller
    with pytest.raises(TopicAuthorizationFailedError):
        admin.delete_records({TopicPartition(topic, 0): 0})  # by the leader, on broker 0

    def counted() -> dict[str, float]:
        found: dict[str, float] = {}
        for s in scrape(metrics_export_port).get("ray_rayqueue_authorization_denied_total", []):
            if s.labels.get("cluster") == NAMESPACE:
                if s.labels.get("path") == "actor" and s.labels.get("resource_type") == "TOPIC":
                    key = f"{s.labels['broker']}:{s.labels['request']}"
                    found[key] = found.get(key, 0) + s.value
        return found

    wait_for(
        lambda: counted().get("controller:DescribeConfigs", 0) >= 1 and counted().get("0:DeleteRecords", 0) >= 1,
        timeout=90,
        interval=0.5,
        what="the native refusals in ray_rayqueue_authorization_denied_total",
    )
