"""Authorization at the gateway, on a cluster of this module's own launched with
Kafka's StandardAuthorizer and no super users.

Kafka clients connect unauthenticated here, as ``User:ANONYMOUS`` (authentication is the
listeners' business); the ACLs are made for that principal, through rayqueue's Admin (which
holds the Ray token: a super user) or through the clients' own admin ACL calls. What is
checked, with real clients: a principal without WRITE gets TOPIC_AUTHORIZATION_FAILED and
nothing is appended; DENY beats ALLOW; PREFIXED ACLs; a group without READ cannot join; an
ACL added while a client is connected takes effect on its next request; Metadata leaves out
what may not be described, and auto-creation needs CREATE; the ACLs survive a controller
restart.
"""

from __future__ import annotations

import itertools

import pytest
import ray

from actors import launch as actor_launch
from actors.gateway.broker_view import topic_uuid
from actors.names import CONTROLLER_NAME, broker_actor_name
from rayqueue import TopicPartition
from rayqueue.acl import (
    ANY_ACL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.gateway.wire import Wire, build_request, parse_bootstrap
from tests.helpers import authorizer_cluster, wait_for

NAMESPACE = "rayqueue-acl-test"
ANON = "User:ANONYMOUS"
METADATA, CREATE_ACLS, DESCRIBE_ACLS = 3, 30, 29
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31
Op, Perm = AclOperation, AclPermissionType
_ids = itertools.count()


def name(prefix: str = "acl") -> str:
    return f"{prefix}-{next(_ids)}"


def allow(rtype: ResourceType, resource: str, *ops: AclOperation, pattern=PatternType.LITERAL) -> list[AclBinding]:
    return [AclBinding.of(rtype, resource, pattern, ANON, "*", op, Perm.ALLOW) for op in ops]


@pytest.fixture(scope="module")
def secured(ray_session):
    with authorizer_cluster(NAMESPACE, listeners="PLAINTEXT://127.0.0.1:0") as cluster:
        yield cluster


def settle(cluster) -> None:
    """Wait until the gateway authorizes with the controller's ACLs (its watch is a long poll:
    this takes one round trip)."""
    controller = actor_launch.find_actor(CONTROLLER_NAME, NAMESPACE)
    host = actor_launch.find_actor(broker_actor_name(0), NAMESPACE)  # serves broker 0's listener
    # Retried: just after a restart this process's handle answers "the actor was restarted" once.
    wanted = wait_for(
        lambda: ray.get(controller.watch_acls.remote(None, 0.0), timeout=30), timeout=60, what="the controller's ACLs"
    ).version
    wait_for(
        lambda: tuple(ray.get(host.listener_stats.remote(), timeout=30)["acl_version"] or ()) == tuple(wanted),
        timeout=30,
        what="the gateway's copy of the ACLs",
    )


def grant(cluster, acls: list[AclBinding]) -> None:
    cluster.admin().create_acls(acls)
    settle(cluster)


@pytest.fixture
def admin(secured):
    """The cluster's Admin; every ACL is removed after the test."""
    admin = secured.admin()
    yield admin
    admin.delete_acls([ANY_ACL])
    settle(secured)


def log_end(cluster, topic: str) -> int:
    logs = cluster.admin().describe_partition_logs([TopicPartition(topic, 0)])
    return logs[TopicPartition(topic, 0)].log_end_offset


def native_write(cluster, topic: str, value: bytes) -> None:
    """Write with rayqueue's producer (no principal: a super user)."""
    producer = cluster.producer()
    try:
        producer.send(topic, value).get(30)
    finally:
        producer.close()


def produce_confluent(bootstrap: str, topic: str, values: list[bytes]) -> list:
    """Produce with confluent-kafka; the delivery errors (None for delivered)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000, "retries": 0})
    results: list = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, _msg: results.append(err))
    producer.flush(30)
    return results


# -- the clients' admin ACL calls ----------------------------------------------------------------


def test_confluent_admin_acl_calls_need_cluster_alter_and_describe(secured, admin):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBinding as CAclBinding
    from confluent_kafka.admin import AclBindingFilter as CAclBindingFilter
    from confluent_kafka.admin import AclOperation as COp
    from confluent_kafka.admin import AclPermissionType as CPerm
    from confluent_kafka.admin import AdminClient, ResourcePatternType
    from confluent_kafka.admin import ResourceType as CType

    client = AdminClient({"bootstrap.servers": secured.bootstrap_servers})
    binding = CAclBinding(CType.TOPIC, "orders", ResourcePatternType.PREFIXED, "User:alice", "*", COp.READ, CPerm.ALLOW)
    everything = CAclBindingFilter(CType.ANY, None, ResourcePatternType.ANY, None, None, COp.ANY, CPerm.ANY)
    # No ACL lets ANONYMOUS touch the cluster's ACLs.
    with pytest.raises(KafkaException) as refused:
        client.create_acls([binding])[binding].result(30)
    assert refused.value.args[0].code() == CLUSTER_AUTHORIZATION_FAILED
    # (confluent-kafka's describe_acls answers [] for a refused DescribeAcls: asked on the wire.)
    assert _describe_acls_code(secured) == CLUSTER_AUTHORIZATION_FAILED
    assert admin.describe_acls() == []

    grant(secured, allow(ResourceType.CLUSTER, "kafka-cluster", Op.ALTER))  # ALTER implies DESCRIBE
    assert client.create_acls([binding])[binding].result(30) is None
    listed = client.describe_acls(everything).result(30)
    assert binding in listed and len(listed) == 2
    mine = AclBinding.of(ResourceType.TOPIC, "orders", PatternType.PREFIXED, "User:alice", "*", Op.READ, Perm.ALLOW)
    assert mine in admin.describe_acls()
    # MATCH: the ACLs that apply to a topic named orders-eu.
    match = CAclBindingFilter(CType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None, COp.ANY, CPerm.ANY)
    assert client.describe_acls(match).result(30) == [binding]
    # A CLUSTER ACL must name kafka-cluster: INVALID_REQUEST for that binding only.
    wrong = CAclBinding(CType.BROKER, "x", ResourcePatternType.LITERAL, "User:a", "*", COp.ALTER, CPerm.ALLOW)
    with pytest.raises(KafkaException):
        client.create_acls([wrong])[wrong].result(30)
    by_principal = CAclBindingFilter(CType.ANY, None, ResourcePatternType.ANY, "User:alice", None, COp.ANY, CPerm.ANY)
    assert client.delete_acls([by_principal])[by_principal].result(30) == [binding]
    assert mine not in admin.describe_acls()


def _describe_acls_code(cluster) -> int:
    with Wire(parse_bootstrap(cluster.bootstrap_servers)) as wire:
        answer = wire.call(
            build_request(
                DESCRIBE_ACLS,
                3,
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            )
        )
    return int(answer.error_code)


def test_kafka_python_admin_acl_calls(secured, admin):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KType

    grant(secured, allow(ResourceType.CLUSTER, "kafka-cluster", Op.ALTER))
    client = KafkaAdminClient(bootstrap_servers=secured.bootstrap_servers, request_timeout_ms=30000)
    try:
        acl = ACL(
            "User:bob",
            "*",
            ACLOperation.WRITE,
            ACLPermissionType.DENY,
            ResourcePattern(KType.GROUP, "g1", ACLResourcePatternType.LITERAL),
        )
        result = client.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        found, error = client.describe_acls(
            ACLFilter(
                "User:bob",
                None,
                ACLOperation.ANY,
                ACLPermissionType.ANY,
                ResourcePatternFilter(KType.ANY, None, ACLResourcePatternType.ANY),
            )
        )
        assert [(a.principal, a.operation, a.permission_type, a.resource_pattern.resource_name) for a in found] == [
            ("User:bob", ACLOperation.WRITE, ACLPermissionType.DENY, "g1")
        ]
        assert AclBinding.of(ResourceType.GROUP, "g1", PatternType.LITERAL, "User:bob", "*", Op.WRITE, Perm.DENY) in (
            admin.describe_acls()
        )
    finally:
        client.close()


# -- produce, fetch, groups ----------------------------------------------------------------------


def test_produce_without_write_is_refused_appends_nothing_until_the_acl_is_added(secured, admin):
    topic = name("no-write")
    admin.create_topic(topic, 1, 1)
    grant(secured, allow(ResourceType.TOPIC, topic, Op.DESCRIBE))
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    producer = KafkaProducer(bootstrap_servers=secured.bootstrap_servers, retries=0, request_timeout_ms=15000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"refused").get(timeout=30)
        assert log_end(secured, topic) == 0
        # Granted while the producer stays connected: its next request is allowed.
        grant(secured, allow(ResourceType.TOPIC, topic, Op.WRITE))
        meta = producer.send(topic, b"allowed").get(timeout=30)
        assert meta.offset == 0
    finally:
        producer.close()
    assert log_end(secured, topic) == 1


def test_confluent_produce_without_write_gets_topic_authorization_failed(secured, admin):
    topic = name("confluent-no-write")
    admin.create_topic(topic, 1, 1)
    grant(secured, allow(ResourceType.TOPIC, topic, Op.DESCRIBE))
    errors = produce_confluent(secured.bootstrap_servers, topic, [b"a", b"b"])
    assert len(errors) == 2 and all(e is not None and e.code() == TOPIC_AUTHORIZATION_FAILED for e in errors)
    assert log_end(secured, topic) == 0


def test_deny_beats_allow(secured, admin):
    topic = name("deny")
    admin.create_topic(topic, 1, 1)
    grant(
        secured,
        [
            AclBinding.of(ResourceType.TOPIC, "*", PatternType.LITERAL, "User:*", "*", Op.ALL, Perm.ALLOW),
            AclBinding.of(ResourceType.TOPIC, topic, PatternType.LITERAL, ANON, "*", Op.WRITE, Perm.DENY),
        ],
    )
    errors = produce_confluent(secured.bootstrap_servers, topic, [b"x"])
    assert errors[0] is not None and errors[0].code() == TOPIC_AUTHORIZATION_FAILED
    assert log_end(secured, topic) == 0
    # READ is still allowed (the DENY is for WRITE only): a native write, read back by Kafka's client.
    native_write(secured, topic, b"native")
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=secured.bootstrap_servers, consumer_timeout_ms=10000)
    try:
        consumer.assign([_tp(topic)])
        consumer.seek_to_beginning()
        assert [r.value for r in consumer] == [b"native"]
    finally:
        consumer.close()


def _tp(topic: str):
    from kafka import TopicPartition as KTopicPartition

    return KTopicPartition(topic, 0)


def test_prefixed_acls(secured, admin):
    ours, theirs = name("team-a.orders"), name("team-b.orders")
    for t in (ours, theirs):
        admin.create_topic(t, 1, 1)
    grant(secured, allow(ResourceType.TOPIC, "team-a.", Op.WRITE, pattern=PatternType.PREFIXED))
    assert produce_confluent(secured.bootstrap_servers, ours, [b"1"]) == [None]
    errors = produce_confluent(secured.bootstrap_servers, theirs, [b"2"])
    assert errors[0] is not None and errors[0].code() == TOPIC_AUTHORIZATION_FAILED
    assert (log_end(secured, ours), log_end(secured, theirs)) == (1, 0)


def test_fetch_without_read_is_refused(secured, admin):
    topic = name("no-read")
    admin.create_topic(topic, 1, 1)
    native_write(secured, topic, b"secret")
    grant(secured, allow(ResourceType.TOPIC, topic, Op.DESCRIBE))
    from kafka import KafkaConsumer
    from kafka.errors import TopicAuthorizationFailedError

    consumer = KafkaConsumer(bootstrap_servers=secured.bootstrap_servers, consumer_timeout_ms=10000)
    try:
        consumer.assign([_tp(topic)])
        consumer.seek(_tp(topic), 0)
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(50):
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def test_a_group_without_read_cannot_join(secured, admin):
    topic, group = name("grouped"), name("group")
    admin.create_topic(topic, 1, 1)
    native_write(secured, topic, b"v")
    grant(secured, allow(ResourceType.TOPIC, topic, Op.READ))
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=secured.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(50):
                consumer.poll(timeout_ms=500)
        assert group not in {g.group_id for g in admin.list_groups()}
        # With READ on the group the same consumer joins and reads.
        grant(secured, allow(ResourceType.GROUP, group, Op.READ))
        got = []
        for _ in range(60):
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
            if got:
                break
        assert got == [b"v"]
    finally:
        consumer.close()


# -- Metadata: what may not be described is not shown; auto-creation needs CREATE ----------------


def _metadata(cluster, topics, auto_create=False) -> dict:
    with Wire(parse_bootstrap(cluster.bootstrap_servers)) as wire:
        answer = wire.call(
            build_request(
                METADATA,
                12,
                topics=None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                allow_auto_topic_creation=auto_create,
                include_topic_authorized_operations=False,
            )
        )
    return {t.name: int(t.error_code) for t in answer.topics}


def test_metadata_leaves_out_what_may_not_be_described(secured, admin):
    seen, hidden = name("seen"), name("hidden")
    for t in (seen, hidden):
        admin.create_topic(t, 1, 1)
    grant(secured, allow(ResourceType.TOPIC, seen, Op.READ))  # READ implies DESCRIBE
    everything = _metadata(secured, None)
    assert seen in everything and hidden not in everything
    assert all(t == seen for t in everything)  # internal topics are hidden too
    assert _metadata(secured, [seen, hidden]) == {seen: 0, hidden: TOPIC_AUTHORIZATION_FAILED}
    # By topic id: refused without the name.
    tid = topic_uuid(admin.describe_topics([hidden])[hidden].topic_id)
    with Wire(parse_bootstrap(secured.bootstrap_servers)) as wire:
        answer = wire.call(
            build_request(
                METADATA,
                12,
                topics=[{"name": None, "topic_id": tid}],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    assert [(t.name, int(t.error_code)) for t in answer.topics] == [(None, TOPIC_AUTHORIZATION_FAILED)]


def test_auto_creation_needs_create(secured, admin):
    refused, created = name("auto-refused"), name("auto-ok")
    grant(
        secured,
        allow(ResourceType.TOPIC, "auto-", Op.DESCRIBE, pattern=PatternType.PREFIXED)
        + allow(ResourceType.TOPIC, created, Op.CREATE),
    )
    answer = _metadata(secured, [refused, created], auto_create=True)
    assert answer == {refused: TOPIC_AUTHORIZATION_FAILED, created: 0}
    topics = set(admin.list_topics())
    assert created in topics and refused not in topics


# -- durability ------------------------------------------------------------------------------------


def test_acls_survive_a_controller_restart(secured, admin):
    topic = name("durable")
    admin.create_topic(topic, 1, 1)
    acls = allow(ResourceType.TOPIC, topic, Op.WRITE, Op.DESCRIBE)
    grant(secured, acls)
    controller = actor_launch.find_actor(CONTROLLER_NAME, NAMESPACE)
    ray.kill(controller, no_restart=False)  # Ray restarts it; it replays its metadata log
    found = wait_for(lambda: _describe_or_none(admin), timeout=60, what="the restarted controller's ACLs")
    assert sorted(found, key=str) == sorted(acls, key=str)
    settle(secured)  # the gateway takes the restarted controller's copy (a new controller epoch)
    assert produce_confluent(secured.bootstrap_servers, topic, [b"after restart"]) == [None]
    admin.delete_acls([AclBindingFilter.of(ResourceType.TOPIC, topic, PatternType.LITERAL)])
    settle(secured)
    errors = produce_confluent(secured.bootstrap_servers, topic, [b"refused"])
    assert errors[0] is not None and errors[0].code() == TOPIC_AUTHORIZATION_FAILED


def _describe_or_none(admin):
    try:
        return admin.describe_acls() or None
    except Exception:  # noqa: BLE001 - the controller is restarting
        return None


# -- the CLI ---------------------------------------------------------------------------------------


def test_cli_acls_add_list_remove(secured, admin):
    from typer.testing import CliRunner

    from rayqueue.cli import app

    runner = CliRunner()

    def rq(*args: str, ok: bool = True):
        result = runner.invoke(app, [*args, "--name", NAMESPACE])
        assert (result.exit_code == 0) == ok, f"exit {result.exit_code}: {result.output}\n{result.exception!r}"
        return result.output

    added = rq(
        "acls", "add", "--allow-principal", "User:bob", "--deny-principal", "User:eve", "--deny-host", "10.1.1.1",
        "--operation", "Read", "--operation", "DescribeConfigs", "--topic", "sales.", "--group", "g",
        "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert "Added 8 ACL(s)" in added
    bob_read = AclBinding.of(ResourceType.TOPIC, "sales.", PatternType.PREFIXED, "User:bob", "*", Op.READ, Perm.ALLOW)
    eve_deny = AclBinding.of(
        ResourceType.GROUP, "g", PatternType.PREFIXED, "User:eve", "10.1.1.1", Op.DESCRIBE_CONFIGS, Perm.DENY
    )
    assert {bob_read, eve_deny} <= set(admin.describe_acls()) and len(admin.describe_acls()) == 8
    listed = rq("acls", "list", "--topic", "sales.eu", "--resource-pattern-type", "match")
    assert "ResourcePattern(resourceType=TOPIC, name=sales., patternType=PREFIXED)" in listed
    assert "principal=User:bob, host=*, operation=READ, permissionType=ALLOW" in listed
    assert "GROUP" not in listed
    assert "User:eve" in rq("acls", "list", "--principal", "User:eve")
    removed = rq(
        "acls", "remove", "--allow-principal", "User:bob", "--topic", "sales.", "--resource-pattern-type", "prefixed"
    )
    assert "Removed 2 ACL(s)" in removed
    assert bob_read not in admin.describe_acls() and len(admin.describe_acls()) == 6
    assert "Removed 4 ACL(s)" in rq("acls", "remove", "--group", "g", "--resource-pattern-type", "prefixed")
    assert "Removed 2 ACL(s)" in rq("acls", "remove", "--topic", "sales.", "--resource-pattern-type", "any")
    assert admin.describe_acls() == []
    # Refused, with one line: no principal; a cluster ACL of a bad operation name.
    assert "name a principal" in rq("acls", "add", "--topic", "t", ok=False)
    assert "unknown operation" in rq(
        "acls", "add", "--allow-principal", "User:a", "--cluster", "--operation", "Fly", ok=False
    )


# -- rayqueue's native clients with a principal ----------------------------------------------------


def test_native_producer_and_consumer_with_a_principal_are_checked(secured, admin):
    from rayqueue.errors import TopicAuthorizationFailedError

    topic = name("native")
    admin.create_topic(topic, 1, 1)
    grant(
        secured,
        [
            AclBinding.of(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:app", "*", Op.WRITE, Perm.ALLOW),
            AclBinding.of(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:app", "*", Op.READ, Perm.ALLOW),
        ],
    )
    allowed = secured.producer(principal="User:app")
    refused = secured.producer(principal="User:intruder", retries=0)
    try:
        assert allowed.send(topic, b"by app").get(30).offset == 0
        with pytest.raises(TopicAuthorizationFailedError):
            refused.send(topic, b"by intruder").get(30)
    finally:
        allowed.close()
        refused.close()
    assert log_end(secured, topic) == 1

    def read(principal):
        consumer = secured.consumer(principal=principal, enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek(TopicPartition(topic, 0), 0)
            got: list = []
            for _ in range(40):
                got.extend(r.value for r in consumer.poll(timeout_ms=250))
                if got:
                    return got
            return got
        finally:
            consumer.close()

    assert read("User:app") == [b"by app"]
    with pytest.raises(TopicAuthorizationFailedError):
        read("User:intruder")
    # Without a principal, a native client holds the Ray token: a super user.
    native_write(secured, topic, b"no principal")
    assert read(None) == [b"by app", b"no principal"]
