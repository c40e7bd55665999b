"""The actors' checks of native principals (``actors.auth_helper``) on their own, no Ray:
Kafka's error per resource type, the super user without a principal, filtering, counting,
and the ACL copy loaded once and kept fresh."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace

import pytest

from actors.acl import CLUSTER_NAME, AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from actors.auth_helper import AuthHelper, Caller, LazyAclView
from actors.authorizer import STANDARD_AUTHORIZER, StandardAuthorizer
from actors.protocol import DescribeGroupsRequest, ListOffsetsRequest, ProduceRequest
from actors.protocol_security import AclsSnapshot
from storage.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tests.actors.test_authorizer import authorizer

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
Op, Perm = AclOperation, AclPermissionType
ALICE = "User:alice"
_ids = itertools.count()


def acl(rtype, name, op, perm=Perm.ALLOW, principal=ALICE, host="*", pattern=PatternType.LITERAL) -> AclBinding:
    return AclBinding.of(rtype, name, pattern, principal, host, op, perm)


class FakeRecorder:
    """What ``count_authorization_denied`` needs of a Recorder: ``add`` and the counter."""

    def __init__(self) -> None:
        self.metrics = SimpleNamespace(authorization_denied="authorization_denied")
        self.added: list[tuple] = []

    def add(self, counter, value, tags) -> None:
        self.added.append((counter, value, dict(tags)))


def helper(auth: StandardAuthorizer, recorder: FakeRecorder | None = None) -> AuthHelper:
    async def source() -> StandardAuthorizer:
        return auth

    return AuthHelper(source, recorder, "7")


def run(coro):
    return asyncio.run(coro)


def test_no_principal_is_a_super_user_and_loads_nothing():
    async def never() -> StandardAuthorizer:
        raise AssertionError("a request without a principal must not load the ACLs")

    auth = AuthHelper(never)
    nobody = ProduceRequest(b"")
    run(auth.check(nobody, Op.WRITE, TOPIC, "t"))
    run(auth.check_cluster(nobody, Op.ALTER))
    assert run(auth.visible(nobody, Op.DESCRIBE, TOPIC, ["a", "b"])) == ["a", "b"]
    assert run(auth.refused(nobody, Op.READ, GROUP, ["g"])) == set()
    assert run(auth.authorized_by_resource_type(nobody, Op.WRITE, TOPIC))


def test_without_an_authorizer_everything_is_allowed():
    auth = helper(authorizer(enabled=False))
    run(auth.check(Caller(ALICE, "X"), Op.DELETE, TOPIC, "t"))
    run(auth.check_all(Caller(ALICE, "X"), Op.READ, GROUP, ["g1", "g2"]))


@pytest.mark.parametrize(
    ("rtype", "name", "error"),
    [
        (TOPIC, "t", TopicAuthorizationFailedError),
        (GROUP, "g", GroupAuthorizationFailedError),
        (CLUSTER, CLUSTER_NAME, ClusterAuthorizationFailedError),
        (TXN, "tx", TransactionalIdAuthorizationFailedError),
    ],
)
def test_each_resource_type_has_kafkas_error(rtype, name, error):
    auth = helper(authorizer(acl(rtype, name, Op.ALL)))
    run(auth.check(Caller(ALICE, "X"), Op.ALTER, rtype, name))
    with pytest.raises(error, match="User:bob may not ALTER"):
        run(auth.check(Caller("User:bob", "X"), Op.ALTER, rtype, name))


def test_deny_beats_allow_and_implied_describe():
    auth = helper(authorizer(acl(TOPIC, "*", Op.READ), acl(TOPIC, "secret", Op.READ, Perm.DENY)))
    who = ListOffsetsRequest(-1, principal=ALICE)
    run(auth.check(who, Op.DESCRIBE, TOPIC, "open"))  # READ implies DESCRIBE
    with pytest.raises(TopicAuthorizationFailedError):
        run(auth.check(who, Op.READ, TOPIC, "secret"))
    with pytest.raises(TopicAuthorizationFailedError, match="'a', 'secret'"):
        run(auth.check_all(who, Op.WRITE, TOPIC, ["secret", "a"]))


def test_a_host_acl_does_not_apply_to_a_native_caller():
    # Ray calls carry no client address: only ACLs for every host match.
    auth = helper(authorizer(acl(TOPIC, "t", Op.READ, host="10.0.0.1")))
    with pytest.raises(TopicAuthorizationFailedError):
        run(auth.check(Caller(ALICE, "Fetch"), Op.READ, TOPIC, "t"))


def test_visible_and_refused():
    auth = helper(authorizer(acl(GROUP, "team-", Op.DESCRIBE, pattern=PatternType.PREFIXED)))
    who = DescribeGroupsRequest(("team-a", "other", "team-b"), ALICE)
    assert run(auth.visible(who, Op.DESCRIBE, GROUP, list(who.groups))) == ["team-a", "team-b"]
    assert run(auth.refused(who, Op.DESCRIBE, GROUP, who.groups)) == {"other"}
    assert run(auth.refused(who, Op.DELETE, GROUP, who.groups)) == set(who.groups)


def test_by_resource_type_allows_idempotence_with_some_write():
    auth = helper(authorizer(acl(TOPIC, "mine", Op.WRITE)))
    assert run(auth.authorized_by_resource_type(Caller(ALICE, "InitProducerId"), Op.WRITE, TOPIC))
    assert not run(auth.authorized_by_resource_type(Caller("User:bob", "InitProducerId"), Op.WRITE, TOPIC))


def test_refusals_are_counted_with_the_request_name():
    recorder = FakeRecorder()
    auth = helper(authorizer(acl(TOPIC, "t", Op.READ)), recorder)
    bob = DescribeGroupsRequest(("g",), "User:bob")
    run(auth.authorized(bob, Op.READ, TOPIC, "t"))
    run(auth.authorized(bob, Op.READ, TOPIC, "t", count=False))  # a filter's: no refusal
    run(auth.visible(bob, Op.READ, TOPIC, ["t"]))  # nor this
    run(auth.refused(Caller("User:bob", "OffsetCommit"), Op.READ, GROUP, ["g1", "g2", "g1"]))
    run(auth.authorized_by_resource_type(Caller("User:bob", "InitProducerId"), Op.WRITE, TOPIC))
    run(auth.authorized(Caller(ALICE, "Fetch"), Op.READ, TOPIC, "t"))  # allowed: not counted
    assert [(tags["request"], tags["resource_type"]) for _, _, tags in recorder.added] == [
        ("DescribeGroups", "TOPIC"),
        ("OffsetCommit", "GROUP"),
        ("OffsetCommit", "GROUP"),
        ("InitProducerId", "TOPIC"),
    ]
    assert {(tags["broker"], tags["path"]) for _, _, tags in recorder.added} == {("7", "actor")}


def test_bad_principals_and_names_are_invalid_requests():
    auth = helper(authorizer())
    with pytest.raises(InvalidRequestError, match="principal"):
        run(auth.check(Caller("alice", "X"), Op.READ, TOPIC, "t"))
    with pytest.raises(InvalidRequestError, match="TOPIC name is a string"):
        run(auth.check(Caller(ALICE, "X"), Op.READ, TOPIC, 42))
    with pytest.raises(InvalidRequestError):
        run(auth.visible(Caller(ALICE, "X"), Op.READ, GROUP, ["g", None]))


class FakeController:
    """A controller's ``watch_acls`` long poll: answers at once when the caller's version
    is not the current one, else when the ACLs change."""

    def __init__(self, settings=(True, (), False)) -> None:
        self.acls: dict[str, AclBinding] = {}
        self.version = (1, 0)
        self.settings = settings
        self.loads = 0
        self.changed: asyncio.Event | None = None
        self.watch_acls = SimpleNamespace(remote=self._watch)

    async def _watch(self, known, timeout_s):
        if known is None:
            self.loads += 1
        if self.changed is None:
            self.changed = asyncio.Event()
        if known == self.version:
            try:
                await asyncio.wait_for(self.changed.wait(), timeout_s)
            except TimeoutError:
                pass
        return AclsSnapshot(self.version, dict(self.acls), self.settings)

    def add(self, binding: AclBinding) -> None:
        self.acls[str(next(_ids))] = binding
        self.version = (1, self.version[1] + 1)
        event, self.changed = self.changed, None
        if event is not None:
            event.set()


def test_lazy_view_loads_once_and_follows_changes():
    async def scenario():
        controller = FakeController()
        view = LazyAclView(lambda: controller)
        auth = AuthHelper(view)
        who = Caller(ALICE, "Produce")
        # Several first requests at once: one load.
        outcomes = await asyncio.gather(*(auth.authorized(who, Op.WRITE, TOPIC, "t") for _ in range(5)))
        assert outcomes == [False] * 5 and controller.loads == 1
        controller.add(acl(TOPIC, "t", Op.WRITE))
        deadline = asyncio.get_running_loop().time() + 5
        while not await auth.authorized(who, Op.WRITE, TOPIC, "t"):
            assert asyncio.get_running_loop().time() < deadline, "the new ACL never arrived"
            await asyncio.sleep(0.01)
        assert controller.loads == 1
        view.close()

    run(scenario())


def test_lazy_view_with_a_configuration_without_authorizer_never_loads():
    def no_controller():
        raise AssertionError("no authorizer configured: nothing to load")

    view = LazyAclView(no_controller, {"authorizer.class.name": ""})
    run(AuthHelper(view).check(Caller(ALICE, "X"), Op.ALTER, CLUSTER, CLUSTER_NAME))
    configured = LazyAclView(FakeController, {"authorizer.class.name": STANDARD_AUTHORIZER})
    with pytest.raises(ClusterAuthorizationFailedError):
        run(AuthHelper(configured).check(Caller(ALICE, "X"), Op.ALTER, CLUSTER, CLUSTER_NAME))
