"""Every API a listener advertises, sent by a client without any right (issue 39, items 1-5),
on a cluster of this module's own: StandardAuthorizer, ``super.users=User:admin``, a
PLAINTEXT listener (the client is ``User:ANONYMOUS``) and a SASL_PLAINTEXT listener (the
client logs in with SCRAM as ``User:nobody``, a user without ACLs).

Each answer is checked against Kafka's (``KAFKA``, written from Kafka's KafkaApis.scala and
ControllerApis.scala: each handler authorizes every resource it touches, and a refused
request gets the resource type's *_AUTHORIZATION_FAILED where the request and each named
resource carry an error). An API the listener advertises that the table does not know
fails the sweep: a new handler comes with its expected answer. Requests that name a topic
are sent for a topic that exists and one that does not: the answers must be the same, so
no refusal tells a client which topics exist.

Also here, end to end: AlterUserScramCredentials from such a client leaves admin's password
as it was (item 1); a forged transactional batch without a transactional id is refused and
leaves the last stable offset where it was (item 3); DeleteTopics of an internal topic is
INVALID_TOPIC_EXCEPTION for a super user too (item 5).
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import pytest
import ray
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from actors.names import INTERNAL_TOPICS
from storage import RecordBatchBuilder
from tests.gateway.test_security_server import scram_login
from tests.gateway.wire import Wire, build_request
from tests.helpers import authorizer_cluster, wait_for

NAMESPACE = "rayqueue-access-sweep"
PRESENT, ABSENT = "sweep-present", "sweep-absent"
GROUP, TID = "sweep-group", "sweep-txn"
PASSWORDS = {"admin": "admin-secret", "nobody": "nobody-secret"}
NONE = 0
INVALID_TOPIC_EXCEPTION = 17
INVALID_PRODUCER_ID_MAPPING = 49
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53
ILLEGAL_SASL_STATE = 34
INCONSISTENT_GROUP_PROTOCOL = 23
S5 = datetime.timedelta(seconds=5)
ZERO = datetime.timedelta(0)
_ids = itertools.count()


@pytest.fixture(scope="module")
def secured(ray_session):
    with authorizer_cluster(
        NAMESPACE,
        listeners="PLAIN://127.0.0.1:0,SASL://127.0.0.1:0",
        listener_security_protocol_map="PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        super_users="User:admin",
        sasl_enabled_mechanisms="SCRAM-SHA-512",
    ) as cluster:
        admin = cluster.admin()  # the driver: a super user inside the cluster
        admin.create_topic(PRESENT, 1, 1)
        for user, password in PASSWORDS.items():
            admin.add_scram_user(user, password)
        yield cluster


def connect(cluster, who: str) -> Wire:
    """A connection as ``anonymous`` (PLAINTEXT) or as a SCRAM user (SASL_PLAINTEXT)."""
    if who == "anonymous":
        return Wire(cluster.listener_bootstrap_servers("PLAIN"))
    wire = Wire(cluster.listener_bootstrap_servers("SASL"))
    assert scram_login(wire, who, PASSWORDS[who]).error_code == 0
    return wire


def batch(transactional: bool = False, producer_id: int = -1) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=transactional,
    )
    builder.append(b"sweep")
    return bytes(builder.build())


def error_codes(value: Any) -> tuple[int, ...]:
    """Every ``*error_code`` field in a response, sorted (the request's and each resource's)."""
    found: list[int] = []

    def walk(v: Any) -> None:
        if is_dataclass(v):
            for f in fields(v):
                item = getattr(v, f.name)
                if f.name.endswith("error_code"):
                    found.append(int(item))
                else:
                    walk(item)
        elif isinstance(v, tuple):
            for item in v:
                walk(item)

    walk(value)
    return tuple(sorted(found))


@dataclass(frozen=True)
class Case:
    """One request and Kafka's answer to a client without rights: its error codes, and
    optionally more (``check``)."""

    key: int
    version: int
    values: dict[str, Any]
    codes: tuple[int, ...]
    check: Callable[[Any], bool] | None = None


def topic_cases(t: str) -> list[Case]:
    """The requests naming topic ``t`` (sent for one that exists and one that does not)."""
    one = [{"name": t, "partitions": [{"partition_index": 0, "offset": -1}]}]
    return [
        Case(0, 9, {"acks": 1, "timeout": S5, "topic_data": [{"name": t, "partition_data": [{"index": 0, "records": batch()}]}]}, (TOPIC_AUTH,)),
        Case(
            1,
            12,
            {
                "replica_id": -1,
                "max_wait": ZERO,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "session_epoch": -1,
                "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [],
            },
            (NONE, TOPIC_AUTH),
        ),
        Case(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": t, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, (TOPIC_AUTH,)),
        Case(3, 12, {"topics": [{"name": t, "topic_id": uuid.UUID(int=0)}], "allow_auto_topic_creation": True, "include_topic_authorized_operations": False}, (TOPIC_AUTH,)),
        Case(19, 7, {"topics": [{"name": t, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}], "timeout": S5}, (NONE, TOPIC_AUTH)),  # and topic_config_error_code 0
        Case(20, 6, {"topics": [{"name": t, "topic_id": uuid.UUID(int=0)}], "timeout": S5}, (TOPIC_AUTH,)),
        Case(21, 2, {"topics": one, "timeout": S5}, (TOPIC_AUTH,)),
        Case(23, 4, {"replica_id": -1, "topics": [{"topic": t, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}, (TOPIC_AUTH,)),
        Case(32, 4, {"resources": [{"resource_type": 2, "resource_name": t, "configuration_keys": None}]}, (TOPIC_AUTH,)),
        Case(37, 3, {"topics": [{"name": t, "count": 2, "assignments": None}], "timeout": S5, "validate_only": False}, (TOPIC_AUTH,)),
        Case(43, 2, {"election_type": 0, "topic_partitions": [{"topic": t, "partitions": [0]}], "timeout": S5}, (CLUSTER_AUTH, CLUSTER_AUTH)),
        Case(44, 1, {"resources": [{"resource_type": 2, "resource_name": t, "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]}], "validate_only": False}, (TOPIC_AUTH,)),
    ]  # fmt: skip


def other_cases() -> list[Case]:
    """The requests that name no topic (or one in a group's or transaction's request)."""
    offsets = [
        {"name": PRESENT, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": None}]}
    ]
    acl = {
        "resource_type": 2,
        "resource_name": PRESENT,
        "principal": "User:nobody",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    acl_filter = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    member = {"group_id": GROUP, "generation_id": 1, "member_id": "m"}
    return [
        Case(3, 12, {"topics": None, "include_topic_authorized_operations": False}, (), lambda r: r.topics == ()),  # all topics: none shown
        Case(8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "topics": offsets}, (GROUP_AUTH,)),
        Case(9, 8, {"groups": [{"group_id": GROUP, "topics": None}]}, (GROUP_AUTH,)),
        Case(9, 7, {"group_id": GROUP, "topics": None}, (GROUP_AUTH,)),
        Case(9, 1, {"group_id": GROUP, "topics": [{"name": PRESENT, "partition_indexes": [0]}]}, (GROUP_AUTH,)),
        Case(10, 4, {"key_type": 0, "coordinator_keys": [GROUP]}, (GROUP_AUTH,)),
        Case(10, 4, {"key_type": 1, "coordinator_keys": [TID]}, (TXN_AUTH,)),
        Case(11, 9, {"group_id": GROUP, "session_timeout": datetime.timedelta(seconds=10), "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": "", "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}, (GROUP_AUTH,)),
        Case(12, 4, member, (GROUP_AUTH,)),
        Case(13, 5, {"group_id": GROUP, "members": [{"member_id": "m"}]}, (GROUP_AUTH,), lambda r: r.members == ()),
        Case(14, 5, {**member, "protocol_type": "consumer", "protocol_name": "range", "assignments": []}, (GROUP_AUTH,)),
        # Kafka checks SyncGroup v5's mandatory fields before it authorizes.
        Case(14, 5, {**member, "assignments": []}, (INCONSISTENT_GROUP_PROTOCOL,)),
        Case(15, 5, {"groups": [GROUP], "include_authorized_operations": False}, (GROUP_AUTH,)),
        Case(16, 4, {"states_filter": []}, (NONE,), lambda r: r.groups == ()),
        Case(18, 3, {"client_software_name": "sweep", "client_software_version": "1"}, (NONE,)),
        Case(22, 5, {"transactional_id": None, "transaction_timeout": S5}, (CLUSTER_AUTH,)),
        Case(22, 5, {"transactional_id": TID, "transaction_timeout": S5}, (TXN_AUTH,)),
        Case(24, 3, {"v3_and_below_transactional_id": TID, "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": PRESENT, "partitions": [0]}]}, (TXN_AUTH,)),
        Case(25, 3, {"transactional_id": TID, "producer_id": 1, "producer_epoch": 0, "group_id": GROUP}, (TXN_AUTH,)),
        Case(26, 3, {"transactional_id": TID, "producer_id": 1, "producer_epoch": 0, "committed": True}, (TXN_AUTH,)),
        Case(28, 3, {"transactional_id": TID, "group_id": GROUP, "producer_id": 1, "producer_epoch": 0, "generation_id": -1, "member_id": "", "topics": offsets}, (TXN_AUTH,)),
        Case(29, 3, acl_filter, (CLUSTER_AUTH,)),
        Case(30, 3, {"creations": [acl]}, (CLUSTER_AUTH,)),
        Case(31, 3, {"filters": [acl_filter]}, (CLUSTER_AUTH,)),
        Case(32, 4, {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}]}, (CLUSTER_AUTH,)),
        Case(42, 2, {"groups_names": [GROUP]}, (GROUP_AUTH,)),
        Case(43, 2, {"election_type": 0, "topic_partitions": None, "timeout": S5}, (CLUSTER_AUTH,)),
        Case(44, 1, {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "1"}]}], "validate_only": False}, (CLUSTER_AUTH,)),
        Case(47, 0, {"group_id": GROUP, "topics": [{"name": PRESENT, "partitions": [{"partition_index": 0}]}]}, (GROUP_AUTH,), lambda r: r.topics == ()),
        Case(50, 0, {"users": None}, (CLUSTER_AUTH,), lambda r: r.results == ()),
        Case(50, 0, {"users": [{"name": "admin"}]}, (CLUSTER_AUTH, CLUSTER_AUTH)),
        Case(51, 0, {"deletions": [], "upsertions": [{"name": "admin", "mechanism": 2, "iterations": 4096, "salt": b"s" * 32, "salted_password": b"p" * 64}]}, (CLUSTER_AUTH,)),
        Case(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1}, (NONE,)),
        Case(65, 0, {"transactional_ids": [TID]}, (TXN_AUTH,)),
        Case(66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}, (NONE,), lambda r: r.transaction_states == ()),
        Case(68, 1, {"group_id": GROUP, "member_id": "m", "member_epoch": 0, "rebalance_timeout": S5, "subscribed_topic_names": [PRESENT], "topic_partitions": []}, (GROUP_AUTH,)),
        Case(69, 1, {"group_ids": [GROUP], "include_authorized_operations": False}, (GROUP_AUTH,)),
    ]  # fmt: skip


# The listener's own authentication requests: on a PLAINTEXT listener Kafka's KafkaApis
# answers both ILLEGAL_SASL_STATE; on a SASL listener they are the login itself.
AUTHENTICATION = {
    17: Case(17, 1, {"mechanism": "SCRAM-SHA-512"}, (ILLEGAL_SASL_STATE,)),
    36: Case(36, 2, {"auth_bytes": b"x"}, (ILLEGAL_SASL_STATE,)),
}


def send(wire: Wire, case: Case) -> Any:
    return wire.call(build_request(case.key, case.version, **case.values))


@pytest.mark.parametrize("who", ["anonymous", "nobody"])
def test_every_advertised_api_answers_a_client_without_rights_as_kafka_does(secured, who):
    cases = [*other_cases(), *topic_cases(PRESENT)]
    with connect(secured, who) as wire:
        advertised = {
            int(k.api_key): (k.min_version, k.max_version)
            for k in wire.call(ApiVersionsRequest(client_software_name="sweep", client_software_version="1")).api_keys
        }
        known = {c.key for c in cases} | set(AUTHENTICATION)
        assert set(advertised) <= known, (
            f"API keys without Kafka's expected answer here: {sorted(set(advertised) - known)}"
        )
        if who == "anonymous":
            cases += [AUTHENTICATION[k] for k in sorted(AUTHENTICATION)]
        wrong = {}
        for case in cases:
            low, high = advertised[case.key]
            assert low <= case.version <= high, f"API {case.key} v{case.version} is not advertised ({low}-{high})"
            answer = send(wire, case)
            got = error_codes(answer)
            if got != case.codes or (case.check is not None and not case.check(answer)):
                wrong[f"{case.key} v{case.version}"] = (got, case.codes, answer)
        assert not wrong, wrong


@pytest.mark.parametrize("who", ["anonymous", "nobody"])
def test_refusals_tell_no_topic_that_exists_from_one_that_does_not(secured, who):
    with connect(secured, who) as wire:
        for present, absent in zip(topic_cases(PRESENT), topic_cases(ABSENT), strict=True):
            assert error_codes(send(wire, present)) == error_codes(send(wire, absent)) == present.codes, present


def test_no_client_without_the_cluster_changes_a_users_password(secured):
    """Item 1 end to end: the upsertion is refused, admin's password still logs in, and no
    user is added."""
    upsertions = [
        {"name": n, "mechanism": 2, "iterations": 4096, "salt": b"s" * 32, "salted_password": b"p" * 64}
        for n in ("admin", "intruder")
    ]
    upsert = Case(51, 0, {"deletions": [], "upsertions": upsertions}, ())
    for who in ("anonymous", "nobody"):
        with connect(secured, who) as wire:
            assert {r.user: int(r.error_code) for r in send(wire, upsert).results} == {
                "admin": CLUSTER_AUTH,
                "intruder": CLUSTER_AUTH,
            }
    with connect(secured, "admin") as wire:  # the old password still works; admin (a super user) may list
        listed = send(wire, Case(50, 0, {"users": None}, ()))
        assert int(listed.error_code) == 0 and sorted(r.user for r in listed.results) == ["admin", "nobody"]


def test_a_forged_transactional_batch_is_refused_and_leaves_the_lso_alone(secured):
    """Item 3 end to end: WRITE on the topic, no right on any transactional id, Produce v9
    without a transactional id and a batch with the transactional bit and a producer id
    nobody issued: TRANSACTIONAL_ID_AUTHORIZATION_FAILED; with a transactional id it may write,
    the coordinator's refusal. Nothing appended either way, and the last stable offset still
    follows the high watermark."""
    from rayqueue.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

    topic = f"forged-{next(_ids)}"
    admin = secured.admin()
    admin.create_topic(topic, 1, 1)
    writer = AclBinding.of(
        ResourceType.TOPIC, topic, PatternType.LITERAL, "User:nobody", "*", AclOperation.WRITE, AclPermissionType.ALLOW
    )
    admin.create_acls([writer])
    with connect(secured, "nobody") as wire:
        plain = Case(0, 9, {"acks": -1, "timeout": S5, "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch()}]}]}, ())  # fmt: skip
        wait_for(lambda: error_codes(send(wire, plain)) == (NONE,), 30, what="WRITE on the topic at the gateway")
        forged = Case(0, 9, {"transactional_id": None, "acks": -1, "timeout": S5, "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch(True, 987654321)}]}]}, ())  # fmt: skip
        assert error_codes(send(wire, forged)) == (TXN_AUTH,)
        # With a transactional id it may write, the leader asks the coordinator (KIP-890),
        # which knows no such producer for it: INVALID_PRODUCER_ID_MAPPING, nothing appended.
        own = AclBinding.of(ResourceType.TRANSACTIONAL_ID, "forger", PatternType.LITERAL, "User:nobody", "*", AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
        admin.create_acls([own])
        with_id = Case(0, 9, {**forged.values, "transactional_id": "forger"}, ())
        wait_for(lambda: error_codes(send(wire, with_id)) != (TXN_AUTH,), 30, what="WRITE on the transactional id")
        assert error_codes(send(wire, with_id)) == (INVALID_PRODUCER_ID_MAPPING,)
        assert error_codes(send(wire, plain)) == (NONE,)
    leader = secured.metadata([topic]).topics[topic].partitions[0].leader_handle
    described = ray.get(leader.describe.remote(), timeout=30)
    assert described["log_end_offset"] == described["high_watermark"] == described["last_stable_offset"] == 2


@pytest.mark.parametrize("topic", sorted(INTERNAL_TOPICS))
def test_no_client_deletes_an_internal_topic_not_even_a_super_user(secured, topic):
    with connect(secured, "admin") as wire:
        answer = send(wire, Case(20, 6, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}], "timeout": S5}, ()))
        assert error_codes(answer) == (INVALID_TOPIC_EXCEPTION,)
    assert topic in secured.metadata([topic]).topics
