"""Access control at the listener, without Ray (issue 39, items 1, 2, 4, 5 and 6): the
handlers run against fake actors that record what reaches them.

- Every call a handler makes to the controller or a coordinator carries the client's
  principal (a ``ClientPrincipal``: the principal, the client's address, the gateway's ACL
  version); the listener's handles refuse a call without one, so a listener can never call
  as the super user a principal-less call is (item 1).
- AlterUserScramCredentials needs ALTER on the cluster and DescribeUserScramCredentials
  DESCRIBE, else CLUSTER_AUTHORIZATION_FAILED with nothing reaching the controller (item 1).
- ElectLeaders needs ALTER on the cluster, and a refusal looks the same for a topic that
  exists and one that does not (item 2).
- DescribeTransactions answers an unknown or refused id per id; OffsetFetch v1 of a group
  that may not be described answers GROUP_AUTHORIZATION_FAILED (item 4).
- The controller never deletes an internal topic, and DeleteRecords of one is
  INVALID_TOPIC_EXCEPTION (item 5).
- SCRAM's client-first with an authzid equal to the username logs in; a different one is
  refused (item 6).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import hashlib
import hmac
import os
import pickle
from types import SimpleNamespace

import pytest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from actors.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from actors.auth_helper import AuthHelper, ClientPrincipal
from actors.authorizer import StandardAuthorizer
from actors.gateway.broker_view import ListenerHandle, MissingPrincipalError
from actors.gateway.handlers import admin, groups, scram, transactions
from actors.names import INTERNAL_TOPICS
from actors.protocol import DescribeGroupsRequest
from storage.errors import InvalidTopicError
from tests.actors.test_controller_state import NODES, create, open_quorum
from tests.gateway.test_authorization import ALICE, HOST, _Coordinator, allow, context, view_with
from tests.gateway.test_security_server import _Scram, serve
from tests.gateway.wire import Wire, build_request

Op, Perm = AclOperation, AclPermissionType
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 31, 30
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_NOT_FOUND = 53, 105
INVALID_TOPIC_EXCEPTION = 17


def guarded(view):
    """The fake view with the listener's handles around its fakes, as BrokerView has them."""
    view.controller = ListenerHandle(view.controller)
    view.group_coordinator = ListenerHandle(view.group_coordinator)
    view.transaction_coordinator = ListenerHandle(view.transaction_coordinator)
    return view


# -- item 1: the principal travels; a listener never calls without one --------------------------


def test_a_listener_handle_refuses_a_call_without_the_clients_principal():
    calls: list = []
    handle = ListenerHandle(_Coordinator(calls))
    with pytest.raises(MissingPrincipalError):
        handle.describe_groups.remote(DescribeGroupsRequest(("g",)))
    with pytest.raises(MissingPrincipalError):  # a native-style principal is not a client's
        handle.describe_groups.remote(DescribeGroupsRequest(("g",), principal=ALICE))
    assert calls == []
    asyncio.run(handle.describe_groups.remote(DescribeGroupsRequest(("g",), principal=ClientPrincipal(ALICE, HOST))))
    assert [c[0] for c in calls] == ["describe_groups"]


def test_a_client_principal_keeps_its_host_and_acl_version_through_pickling():
    principal = ClientPrincipal(ALICE, HOST, (1, 7))
    copy = pickle.loads(pickle.dumps(principal))
    assert type(copy) is ClientPrincipal and copy == ALICE
    assert (copy.host, copy.acls) == (HOST, (1, 7))


def test_an_actor_checks_a_client_principal_with_its_host():
    """A host-specific ACL lets the client in at the actor too (a native principal, which
    has no address, only matches ``*`` ACLs)."""
    authorizer = StandardAuthorizer(enabled=True)
    authorizer.add_acl("1", AclBinding.of(GROUP, "g", PatternType.LITERAL, ALICE, HOST, Op.READ, Perm.ALLOW))

    async def source() -> StandardAuthorizer:
        return authorizer

    helper = AuthHelper(source)

    def authorized(principal) -> bool:
        return asyncio.run(helper.authorized(SimpleNamespace(principal=principal), Op.READ, GROUP, "g"))

    assert authorized(ClientPrincipal(ALICE, HOST))
    assert not authorized(ClientPrincipal(ALICE, "10.9.9.9"))
    assert not authorized(ALICE)


def test_an_actor_behind_the_gateways_acls_catches_up_before_it_checks():
    """The gateway authorized with ACL version (1, 5); the actor's copy is at (1, 4): it asks
    the controller once before it checks, so an ACL just created applies at once there too."""
    asked: list = []

    class Authorizers:
        version = (1, 4)

        async def __call__(self, at_least=None):
            asked.append(at_least)
            if at_least is not None and self.version < at_least:
                self.version = at_least
            authorizer = StandardAuthorizer(enabled=True)
            if self.version >= (1, 5):
                authorizer.add_acl("1", AclBinding.of(GROUP, "g", PatternType.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW))
            return authorizer

    helper = AuthHelper(Authorizers())
    who = SimpleNamespace(principal=ClientPrincipal(ALICE, HOST, (1, 5)))
    assert asyncio.run(helper.authorized(who, Op.READ, GROUP, "g"))
    assert asked == [(1, 5)]


def _handler_requests():
    """A request of every handler that calls the controller or a coordinator, each allowed."""
    return [
        (groups.handle_describe_groups, build_request(15, 5, groups=["g"], include_authorized_operations=False)),
        (groups.handle_list_groups, build_request(16, 4, states_filter=[])),
        (groups.handle_delete_groups, build_request(42, 2, groups_names=["g"])),
        (groups.handle_heartbeat, build_request(12, 4, group_id="g", generation_id=1, member_id="m")),
        (groups.handle_offset_fetch, build_request(9, 7, group_id="g", topics=None, require_stable=False)),
        (
            transactions.handle_end_txn,
            build_request(26, 3, transactional_id="t", producer_id=1, producer_epoch=0, committed=True),
        ),
        (transactions.handle_describe_transactions, build_request(65, 0, transactional_ids=["t"])),
        (scram.handle_describe_user_scram_credentials, build_request(50, 0, users=None)),
    ]


@pytest.mark.parametrize("handler, request_", _handler_requests())
def test_every_call_a_handler_makes_carries_the_clients_principal(handler, request_):
    view = guarded(
        view_with(allow(CLUSTER, "kafka-cluster", Op.ALL), allow(GROUP, "g", Op.ALL), allow(TXN, "t", Op.ALL))
    )
    view.invalidate = lambda name: None
    api_key, version = type(request_).__api_key__, type(request_).__version__
    # The fakes answer the same thing to every method: only the calls that reached them count.
    with contextlib.suppress(TypeError, AttributeError):
        asyncio.run(handler(context(view, api_key, version), request_))
    assert view.calls, "the handler reached no actor"
    for _method, *args in view.calls:
        principals = [a.principal for a in args if hasattr(a, "principal")]
        assert principals and all(type(p) is ClientPrincipal and p == ALICE and p.host == HOST for p in principals)


# -- item 1: SCRAM users need the cluster ---------------------------------------------------------


def _alter_users(names: list[str]):
    return build_request(
        51,
        0,
        deletions=[],
        upsertions=[
            {"name": n, "mechanism": 2, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 64}
            for n in names
        ],
    )


def test_alter_user_scram_credentials_needs_alter_on_the_cluster():
    view = guarded(view_with(allow(CLUSTER, "kafka-cluster", Op.DESCRIBE)))  # DESCRIBE is not enough
    view.scram_credentials = None
    response = asyncio.run(
        scram.handle_alter_user_scram_credentials(context(view, 51, 0), _alter_users(["admin", "new"]))
    )
    assert {r.user: int(r.error_code) for r in response.results} == {
        "admin": CLUSTER_AUTHORIZATION_FAILED,
        "new": CLUSTER_AUTHORIZATION_FAILED,
    }
    assert view.calls == []
    view = guarded(view_with(allow(CLUSTER, "kafka-cluster", Op.ALTER)))
    view.scram_credentials = None
    view.controller._handle._answer = []
    asyncio.run(scram.handle_alter_user_scram_credentials(context(view, 51, 0), _alter_users(["admin"])))
    assert [c[0] for c in view.calls] == ["alter_user_scram_credentials"]


def test_describe_user_scram_credentials_needs_describe_on_the_cluster():
    view = guarded(view_with(allow(TOPIC, "t", Op.ALL)))
    for users in (None, [{"name": "admin"}]):
        response = asyncio.run(
            scram.handle_describe_user_scram_credentials(context(view, 50, 0), build_request(50, 0, users=users))
        )
        assert int(response.error_code) == CLUSTER_AUTHORIZATION_FAILED
        assert [int(r.error_code) for r in response.results] == [CLUSTER_AUTHORIZATION_FAILED] * len(users or ())
    assert view.calls == []


# -- item 2: ElectLeaders ---------------------------------------------------------------------------


def test_elect_leaders_needs_alter_on_the_cluster_and_tells_nothing_of_topics():
    view = guarded(view_with(allow(TOPIC, "exists", Op.ALL)))  # everything on the topic, nothing on the cluster
    looked_up = []

    async def cluster(topics, *args):
        looked_up.append(topics)
        raise AssertionError("nothing is looked up for a refused election")

    view.cluster = cluster
    answers = {}
    for name in ("exists", "does-not-exist"):
        request = build_request(
            43, 2, election_type=0, topic_partitions=[{"topic": name, "partitions": [0]}], timeout_ms=1000
        )
        response = asyncio.run(admin.handle_elect_leaders(context(view, 43, 2), request))
        answers[name] = (
            int(response.error_code),
            [
                (r.topic, [(int(p.partition_id), int(p.error_code)) for p in r.partition_result])
                for r in response.replica_election_results
            ],
        )
    assert answers["exists"] == (CLUSTER_AUTHORIZATION_FAILED, [("exists", [(0, CLUSTER_AUTHORIZATION_FAILED)])])
    assert answers["does-not-exist"] == (
        CLUSTER_AUTHORIZATION_FAILED,
        [("does-not-exist", [(0, CLUSTER_AUTHORIZATION_FAILED)])],
    )
    everything = asyncio.run(
        admin.handle_elect_leaders(
            context(view, 43, 2), build_request(43, 2, election_type=0, topic_partitions=None, timeout_ms=1000)
        )
    )
    assert int(everything.error_code) == CLUSTER_AUTHORIZATION_FAILED and everything.replica_election_results == ()
    assert looked_up == [] and view.calls == []


# -- item 4 -----------------------------------------------------------------------------------------


def test_describe_transactions_answers_unknown_and_refused_ids_per_id():
    view = guarded(view_with(allow(TXN, "mine", Op.DESCRIBE)))
    view.transaction_coordinator._handle._answer = []  # "mine" is not known to the coordinator
    request = build_request(65, 0, transactional_ids=["mine", "theirs"])
    response = asyncio.run(transactions.handle_describe_transactions(context(view, 65, 0), request))
    assert {s.transactional_id: int(s.error_code) for s in response.transaction_states} == {
        "mine": TRANSACTIONAL_ID_NOT_FOUND,
        "theirs": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }


def test_offset_fetch_v1_of_a_group_that_may_not_be_described_is_group_authorization_failed():
    view = guarded(view_with(allow(TOPIC, "t", Op.ALL)))
    request = build_request(9, 1, group_id="g", topics=[{"name": "t", "partition_indexes": [0, 1]}])
    response = asyncio.run(groups.handle_offset_fetch(context(view, 9, 1), request))
    assert [(t.name, [(int(p.partition_index), int(p.error_code)) for p in t.partitions]) for t in response.topics] == [
        ("t", [(0, GROUP_AUTHORIZATION_FAILED), (1, GROUP_AUTHORIZATION_FAILED)])
    ]
    assert view.calls == []


# -- item 5: internal topics -----------------------------------------------------------------------


@pytest.mark.parametrize("topic", sorted(INTERNAL_TOPICS))
def test_an_internal_topic_is_never_deleted(tmp_path, topic):
    """The controller's rule, whoever asks (with or without an authorizer): the topic and
    its records stay."""
    quorum = open_quorum(tmp_path)
    try:
        quorum.commit(quorum.cluster.register_brokers(NODES, 3))
        create(quorum, topic, 2, 1)
        with pytest.raises(InvalidTopicError, match="internal"):
            quorum.replication.delete_topic(topic, enabled=True)
        assert topic in quorum.replication.topics
    finally:
        quorum.close()


def test_delete_records_of_an_internal_topic_is_invalid_topic():
    view = guarded(view_with(allow(CLUSTER, "kafka-cluster", Op.ALL), allow(TOPIC, "*", Op.ALL)))

    async def led_here(topic, partitions):
        return lambda index: None  # every partition led by this broker

    view.refusals = led_here
    topic = sorted(INTERNAL_TOPICS)[0]
    request = build_request(
        21,
        2,
        topics=[{"name": topic, "partitions": [{"partition_index": 0, "offset": -1}]}],
        timeout=datetime.timedelta(seconds=1),
    )
    response = asyncio.run(admin.handle_delete_records(context(view, 21, 2), request))
    assert [int(p.error_code) for t in response.topics for p in t.partitions] == [INVALID_TOPIC_EXCEPTION]
    assert view.calls == []


# -- item 6: SCRAM's authzid ---------------------------------------------------------------------


def scram_login_as(wire: Wire, user: str, password: str, authzid: str):
    """A SCRAM-SHA-512 login whose client-first names ``authzid`` (``n,a=<authzid>,n=<user>,...``),
    as RFC 5802 writes it (scramp's client cannot send one); the last answer. The server's
    final message is checked: it proves the server knows the user's key."""
    assert wire.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
    gs2 = f"n,a={authzid},"
    bare = f"n={user},r={base64.b64encode(os.urandom(18)).decode()}"
    first = wire.call(SaslAuthenticateRequest(auth_bytes=(gs2 + bare).encode()))
    if first.error_code:
        return first
    server_first = first.auth_bytes.decode()
    attrs = dict(item.split("=", 1) for item in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={attrs['r']}"
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth_message, "sha512").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    final = wire.call(SaslAuthenticateRequest(auth_bytes=f"{without_proof},p={proof}".encode()))
    if final.error_code == 0:
        server_key = hmac.new(salted, b"Server Key", "sha512").digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, "sha512").digest()).decode()
        assert final.auth_bytes.decode() == f"v={expected}"
    return final


def test_scram_with_an_authzid_equal_to_the_username_logs_in_and_another_is_refused():
    with serve("SASL_PLAINTEXT", scram=_Scram({"alice": "alice-secret"})) as (server, address):
        with Wire(address) as wire:
            assert scram_login_as(wire, "alice", "alice-secret", "alice").error_code == 0
            assert sorted(c.principal for c in list(server.connections)) == ["User:alice"]
        with Wire(address) as wire:
            answer = scram_login_as(wire, "alice", "alice-secret", "admin")
            assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
            assert "authorization id that is different from username" in answer.error_message
            assert wire.closed_by_peer()
        with Wire(address) as wire:  # the authzid changes nothing about the password check
            assert scram_login_as(wire, "alice", "wrong", "alice").error_code == 58
