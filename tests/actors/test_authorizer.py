"""The authorizer on its own (no Ray), after Kafka's StandardAuthorizerTest, its
AuthorizerInterfaceDefaultTest (authorizeByResourceType) and the AclBindingFilter tests."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.acl import (
    ANY_ACL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from actors.authorizer import (
    STANDARD_AUTHORIZER,
    StandardAuthorizer,
    authorizer_enabled,
    parse_super_users,
)
from storage.errors import InvalidConfigError, InvalidRequestError

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
HOST = "10.0.0.1"
_ids = itertools.count()


def acl(
    rtype: ResourceType,
    name: str,
    pattern: PatternType,
    principal: str,
    op: AclOperation,
    perm: AclPermissionType,
    host: str = "*",
) -> AclBinding:
    return AclBinding.of(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, **kwargs) -> StandardAuthorizer:
    auth = StandardAuthorizer(**kwargs)
    for a in acls:
        auth.add_acl(str(next(_ids)), a)
    return auth


def foo_acl(op: AclOperation, perm: AclPermissionType) -> AclBinding:
    """Kafka's test newFooAcl: TOPIC foo_ PREFIXED, User:bob, any host."""
    return acl(TOPIC, "foo_", PREFIXED, "User:bob", op, perm)


def bar_acl(op: AclOperation, perm: AclPermissionType) -> AclBinding:
    """Kafka's test newBarAcl: GROUP bar LITERAL, User:*, any host."""
    return acl(GROUP, "bar", LITERAL, "User:*", op, perm)


def test_configuration_keys():
    assert parse_super_users("User:alice; User:bob;;") == {"User:alice", "User:bob"}
    assert parse_super_users("") == frozenset()
    assert authorizer_enabled(STANDARD_AUTHORIZER)
    assert not authorizer_enabled("")
    with pytest.raises(InvalidConfigError):
        authorizer_enabled("com.example.MyAuthorizer")
    auth = StandardAuthorizer.from_config(
        {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin", "allow.everyone.if.no.acl.found": 0}
    )
    assert auth.enabled and auth.super_users == {"User:admin"} and not auth.allow_everyone_if_no_acl_found


def test_no_authorizer_allows_everything():
    auth = authorizer(foo_acl(Op.READ, DENY), enabled=False)
    assert auth.authorize("User:bob", HOST, Op.READ, TOPIC, "foo_bar")
    assert auth.authorize_by_resource_type("User:bob", HOST, Op.WRITE, TOPIC)


def test_no_acl_found_default_is_deny_and_can_be_overridden():
    assert not authorizer().authorize("User:bob", HOST, Op.READ, TOPIC, "t")
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize("User:bob", HOST, Op.READ, TOPIC, "t")
    # An ACL on the resource for someone else: the default no longer applies (Kafka's
    # hasResourceAcls), even with allow.everyone.if.no.acl.found.
    auth = authorizer(acl(TOPIC, "t", LITERAL, "User:alice", Op.READ, ALLOW), allow_everyone_if_no_acl_found=True)
    assert not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "t")
    assert auth.authorize("User:bob", HOST, Op.READ, TOPIC, "other")
    # A prefixed or wildcard ACL counts as an ACL of the resource too.
    auth = authorizer(acl(TOPIC, "t", PREFIXED, "User:alice", Op.READ, ALLOW), allow_everyone_if_no_acl_found=True)
    assert not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "tx")
    auth = authorizer(acl(TOPIC, "*", LITERAL, "User:alice", Op.READ, ALLOW), allow_everyone_if_no_acl_found=True)
    assert not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "anything")


def test_super_users_may_do_anything_even_against_deny():
    auth = authorizer(acl(TOPIC, "*", LITERAL, "User:*", Op.ALL, DENY), super_users={"User:admin"})
    assert auth.authorize("User:admin", HOST, Op.DELETE, TOPIC, "t")
    assert auth.authorize("User:admin", HOST, Op.ALTER, CLUSTER, "kafka-cluster")
    assert not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "t")


def test_find_result_implications():
    """Kafka's testFindResultImplication: READ/WRITE/DELETE/ALTER (and DESCRIBE) ALLOWs
    grant DESCRIBE, ALTER_CONFIGS grants DESCRIBE_CONFIGS; DENYs imply nothing."""
    for op in (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert authorizer(foo_acl(op, ALLOW)).authorize("User:bob", HOST, Op.DESCRIBE, TOPIC, "foo_bar")
    for op in (Op.CREATE, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert not authorizer(foo_acl(op, ALLOW)).authorize("User:bob", HOST, Op.DESCRIBE, TOPIC, "foo_bar")
    for op in (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert authorizer(foo_acl(op, ALLOW)).authorize("User:bob", HOST, Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")
    # Implication does not go the other way.
    assert not authorizer(foo_acl(Op.DESCRIBE, ALLOW)).authorize("User:bob", HOST, Op.READ, TOPIC, "foo_bar")
    assert not authorizer(foo_acl(Op.DESCRIBE_CONFIGS, ALLOW)).authorize(
        "User:bob", HOST, Op.ALTER_CONFIGS, TOPIC, "foo_bar"
    )
    # A DENY of READ does not deny DESCRIBE (granted by the ALLOW of WRITE).
    auth = authorizer(foo_acl(Op.READ, DENY), foo_acl(Op.WRITE, ALLOW))
    assert auth.authorize("User:bob", HOST, Op.DESCRIBE, TOPIC, "foo_bar")
    assert not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "foo_bar")
    # A DENY of ALTER_CONFIGS does not deny DESCRIBE_CONFIGS; an exact one does.
    auth = authorizer(foo_acl(Op.ALTER_CONFIGS, DENY), foo_acl(Op.DESCRIBE_CONFIGS, ALLOW))
    assert auth.authorize("User:bob", HOST, Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")
    assert not auth.authorize("User:bob", HOST, Op.ALTER_CONFIGS, TOPIC, "foo_bar")


def test_find_result_principal_matching():
    """Kafka's testFindResultPrincipalMatching."""
    auth = authorizer(foo_acl(Op.READ, ALLOW))
    assert auth.authorize("User:bob", HOST, Op.READ, TOPIC, "foo_bar")
    assert not auth.authorize("User:alice", HOST, Op.READ, TOPIC, "foo_bar")
    # The wildcard principal matches anyone.
    auth = authorizer(bar_acl(Op.READ, DENY), acl(GROUP, "bar", LITERAL, "User:alice", Op.READ, ALLOW))
    assert not auth.authorize("User:alice", HOST, Op.READ, GROUP, "bar")


def test_host_matching():
    auth = authorizer(acl(TOPIC, "t", LITERAL, "User:bob", Op.READ, ALLOW, host="10.0.0.1"))
    assert auth.authorize("User:bob", "10.0.0.1", Op.READ, TOPIC, "t")
    assert not auth.authorize("User:bob", "10.0.0.2", Op.READ, TOPIC, "t")
    auth = authorizer(
        acl(TOPIC, "t", LITERAL, "User:bob", Op.READ, ALLOW),
        acl(TOPIC, "t", LITERAL, "User:bob", Op.READ, DENY, host="10.0.0.2"),
    )
    assert auth.authorize("User:bob", "10.0.0.1", Op.READ, TOPIC, "t")
    assert not auth.authorize("User:bob", "10.0.0.2", Op.READ, TOPIC, "t")


def test_simple_authorizations():
    """Kafka's testSimpleAuthorizations."""
    auth = authorizer(
        foo_acl(Op.READ, ALLOW),
        foo_acl(Op.WRITE, ALLOW),
        bar_acl(Op.DESCRIBE_CONFIGS, ALLOW),
        bar_acl(Op.ALTER_CONFIGS, ALLOW),
    )
    assert auth.authorize("User:bob", HOST, Op.READ, TOPIC, "foo_")
    assert auth.authorize("User:fred", HOST, Op.ALTER_CONFIGS, GROUP, "bar")
    # The resource type matters: a GROUP ACL says nothing of a TOPIC of that name.
    assert not auth.authorize("User:fred", HOST, Op.ALTER_CONFIGS, TOPIC, "bar")


def test_topic_acl_with_operation_all():
    """Kafka's testTopicAclWithOperationAll."""
    auth = authorizer(
        acl(TOPIC, "foo", LITERAL, "User:*", Op.ALL, ALLOW),
        acl(TOPIC, "bar", PREFIXED, "User:alice", Op.ALL, ALLOW),
        acl(TOPIC, "baz", LITERAL, "User:bob", Op.ALL, ALLOW),
    )

    def results(principal, *actions):
        return [auth.authorize(principal, HOST, op, TOPIC, name) for op, name in actions]

    assert results("User:alice", (Op.WRITE, "foo"), (Op.DESCRIBE_CONFIGS, "bar"), (Op.DESCRIBE, "baz")) == [
        True,
        True,
        False,
    ]
    assert results("User:bob", (Op.WRITE, "foo"), (Op.READ, "bar"), (Op.DESCRIBE, "baz")) == [True, False, True]
    assert results("User:malory", (Op.DESCRIBE, "foo"), (Op.WRITE, "bar"), (Op.READ, "baz")) == [True, False, False]


def many_acls() -> StandardAuthorizer:
    """Kafka's createAuthorizerWithManyAcls."""
    return authorizer(
        acl(TOPIC, "green2", LITERAL, "User:*", Op.READ, ALLOW),
        acl(TOPIC, "green", PREFIXED, "User:bob", Op.READ, ALLOW),
        acl(TOPIC, "betamax4", LITERAL, "User:bob", Op.READ, ALLOW),
        acl(TOPIC, "betamax", LITERAL, "User:bob", Op.READ, ALLOW),
        acl(TOPIC, "beta", PREFIXED, "User:*", Op.READ, ALLOW),
        acl(TOPIC, "alpha", PREFIXED, "User:*", Op.READ, ALLOW),
        acl(TOPIC, "alp", PREFIXED, "User:bob", Op.READ, DENY),
        acl(GROUP, "*", LITERAL, "User:bob", Op.WRITE, ALLOW),
        acl(GROUP, "wheel", LITERAL, "User:*", Op.WRITE, DENY),
    )


def test_authorization_with_many_acls():
    """Kafka's testAuthorizationWithManyAcls: DENY wins over ALLOW wherever each comes from."""
    auth = many_acls()
    assert auth.authorize("User:bob", HOST, Op.READ, TOPIC, "green1")
    assert not auth.authorize("User:bob", HOST, Op.WRITE, GROUP, "wheel")
    assert not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "alpha")  # prefixed DENY "alp" beats ALLOW "alpha"
    assert auth.authorize("User:bob", HOST, Op.WRITE, GROUP, "arbitrary")  # the wildcard ALLOW
    assert not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "ala")
    assert auth.authorize("User:alice", HOST, Op.READ, TOPIC, "alpha")  # the DENY is bob's only
    assert auth.authorize("User:bob", HOST, Op.READ, TOPIC, "betamax")
    assert auth.authorize("User:alice", HOST, Op.READ, TOPIC, "betamax")  # prefixed "beta" for everyone
    assert not auth.authorize("User:alice", HOST, Op.READ, TOPIC, "green1")


def test_literal_acl_is_not_a_prefix():
    auth = authorizer(acl(TOPIC, "orders", LITERAL, "User:bob", Op.WRITE, ALLOW))
    assert auth.authorize("User:bob", HOST, Op.WRITE, TOPIC, "orders")
    assert not auth.authorize("User:bob", HOST, Op.WRITE, TOPIC, "orders-eu")
    assert not auth.authorize("User:bob", HOST, Op.WRITE, TOPIC, "order")


def test_add_replace_and_remove():
    auth = StandardAuthorizer()
    auth.add_acl("a", foo_acl(Op.READ, ALLOW))
    auth.add_acl("b", foo_acl(Op.READ, DENY))
    assert not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "foo_x")
    auth.remove_acl("b")
    assert auth.authorize("User:bob", HOST, Op.READ, TOPIC, "foo_x")
    auth.remove_acl("b")  # twice: nothing
    auth.remove_acl("a")
    assert len(auth) == 0 and not auth.authorize("User:bob", HOST, Op.READ, TOPIC, "foo_x")
    auth.replace({"c": bar_acl(Op.READ, ALLOW)})
    assert auth.acls() == [bar_acl(Op.READ, ALLOW)]
    assert auth.authorize("User:x", HOST, Op.READ, GROUP, "bar")


def test_list_acls_with_filters():
    """Kafka's testListAcls and AclBindingFilter's ANY / MATCH semantics."""
    foo_read, foo_write = foo_acl(Op.READ, ALLOW), foo_acl(Op.WRITE, ALLOW)
    bar_dc, bar_ac = bar_acl(Op.DESCRIBE_CONFIGS, DENY), bar_acl(Op.ALTER_CONFIGS, DENY)
    lit = acl(TOPIC, "foo_bar", LITERAL, "User:alice", Op.READ, ALLOW, host="10.0.0.9")
    star = acl(TOPIC, "*", LITERAL, "User:carol", Op.DESCRIBE, ALLOW)
    auth = authorizer(foo_read, foo_write, bar_dc, bar_ac, lit, star)
    assert auth.acls(ANY_ACL) == [foo_read, foo_write, bar_dc, bar_ac, lit, star]
    assert auth.acls(AclBindingFilter.of(TOPIC, None, PatternType.ANY)) == [foo_read, foo_write, lit, star]
    # ANY: this name exactly, under any pattern type.
    assert auth.acls(AclBindingFilter.of(TOPIC, "foo_", PatternType.ANY)) == [foo_read, foo_write]
    assert auth.acls(AclBindingFilter.of(TOPIC, "foo_bar", PatternType.ANY)) == [lit]
    # MATCH: every ACL that applies to a resource of this name.
    assert auth.acls(AclBindingFilter.of(TOPIC, "foo_bar", PatternType.MATCH)) == [foo_read, foo_write, lit, star]
    assert auth.acls(AclBindingFilter.of(TOPIC, "zzz", PatternType.MATCH)) == [star]
    # An exact pattern type.
    assert auth.acls(AclBindingFilter.of(TOPIC, "foo_", PREFIXED)) == [foo_read, foo_write]
    assert auth.acls(AclBindingFilter.of(TOPIC, "foo_", LITERAL)) == []
    # Entry fields.
    assert auth.acls(AclBindingFilter.of(principal="User:alice")) == [lit]
    assert auth.acls(AclBindingFilter.of(host="10.0.0.9")) == [lit]
    assert auth.acls(AclBindingFilter.of(operation=Op.WRITE)) == [foo_write]
    assert auth.acls(AclBindingFilter.of(permission=DENY)) == [bar_dc, bar_ac]
    assert auth.acls(AclBindingFilter.of(GROUP, permission=ALLOW)) == []


def test_new_acl_validation():
    """What CreateAcls refuses (INVALID_REQUEST), as Kafka's AclControlManager.validateNewAcl."""
    good = dict(
        resource_type=TOPIC,
        name="t",
        pattern_type=LITERAL,
        principal="User:a",
        host="*",
        operation=Op.READ,
        permission=ALLOW,
    )
    assert AclBinding.of(**good).name == "t"
    assert AclBinding.of(**{**good, "resource_type": 2, "operation": "read", "permission": "Allow"}) == AclBinding.of(
        **good
    )
    bad = [
        {"resource_type": ResourceType.ANY},
        {"resource_type": ResourceType.UNKNOWN},
        {"resource_type": ResourceType.USER},
        {"resource_type": 99},
        {"pattern_type": PatternType.MATCH},
        {"pattern_type": PatternType.ANY},
        {"operation": Op.ANY},
        {"operation": Op.UNKNOWN},
        {"permission": AclPermissionType.ANY},
        {"name": ""},
        {"principal": "alice"},
        {"principal": ":alice"},
        {"host": ""},
        {"resource_type": CLUSTER, "name": "my-cluster"},
        {"name": 5},
        {"name": "x" * 2000},
    ]
    for change in bad:
        with pytest.raises(InvalidRequestError):
            AclBinding.of(**{**good, **change})
    assert AclBinding.of(**{**good, "resource_type": CLUSTER, "name": "kafka-cluster"}).resource_type is CLUSTER
    with pytest.raises(InvalidRequestError):
        AclBindingFilter.of(operation=Op.UNKNOWN)
    with pytest.raises(InvalidRequestError):
        AclBindingFilter.of(resource_type=42)


def test_record_round_trip():
    a = acl(TXN, "tx-", PREFIXED, "User:app", Op.WRITE, DENY, host="192.168.1.1")
    assert AclBinding.from_record(a.to_record()) == a


# -- authorizeByResourceType (Kafka's AuthorizerInterfaceDefaultTest / BaseAuthorizerTest) ------


def test_by_resource_type_no_acl_found_override():
    assert not authorizer().authorize_by_resource_type("User:bob", HOST, Op.WRITE, TOPIC)
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize_by_resource_type("User:bob", HOST, Op.WRITE, TOPIC)


def test_by_resource_type_super_user():
    auth = authorizer(acl(TOPIC, "*", LITERAL, "User:*", Op.ALL, DENY), super_users={"User:admin"})
    assert auth.authorize_by_resource_type("User:admin", HOST, Op.WRITE, TOPIC)
    assert not auth.authorize_by_resource_type("User:bob", HOST, Op.WRITE, TOPIC)


def test_by_resource_type_literal_and_wildcard():
    assert authorizer(acl(TOPIC, "t", LITERAL, "User:bob", Op.WRITE, ALLOW)).authorize_by_resource_type(
        "User:bob", HOST, Op.WRITE, TOPIC
    )
    assert authorizer(acl(TOPIC, "t", LITERAL, "User:*", Op.ALL, ALLOW)).authorize_by_resource_type(
        "User:bob", HOST, Op.WRITE, TOPIC
    )
    # Not another operation, not another type, not another principal or host; no implication.
    for a in (
        acl(TOPIC, "t", LITERAL, "User:bob", Op.READ, ALLOW),
        acl(GROUP, "t", LITERAL, "User:bob", Op.WRITE, ALLOW),
        acl(TOPIC, "t", LITERAL, "User:alice", Op.WRITE, ALLOW),
        acl(TOPIC, "t", LITERAL, "User:bob", Op.WRITE, ALLOW, host="10.9.9.9"),
    ):
        assert not authorizer(a).authorize_by_resource_type("User:bob", HOST, Op.WRITE, TOPIC)
    assert not authorizer(acl(TOPIC, "t", LITERAL, "User:bob", Op.WRITE, ALLOW)).authorize_by_resource_type(
        "User:bob", HOST, Op.DESCRIBE, TOPIC
    )


def test_by_resource_type_deny_dominates():
    """A wildcard DENY dominates everything; a literal DENY its own name; a prefixed DENY
    every name it prefixes (Kafka's testAuthorizeByResourceType*DenyDominate)."""
    allow_t = acl(TOPIC, "t", LITERAL, "User:bob", Op.WRITE, ALLOW)
    allow_pre = acl(TOPIC, "abc", PREFIXED, "User:bob", Op.WRITE, ALLOW)

    def check(*acls):
        return authorizer(*acls).authorize_by_resource_type("User:bob", HOST, Op.WRITE, TOPIC)

    assert not check(allow_t, allow_pre, acl(TOPIC, "*", LITERAL, "User:*", Op.WRITE, DENY))
    assert not check(allow_t, acl(TOPIC, "t", LITERAL, "User:bob", Op.WRITE, DENY))
    assert not check(allow_t, acl(TOPIC, "t", PREFIXED, "User:bob", Op.WRITE, DENY))
    assert not check(allow_pre, acl(TOPIC, "ab", PREFIXED, "User:bob", Op.WRITE, DENY))
    assert check(allow_pre, acl(TOPIC, "abcd", PREFIXED, "User:bob", Op.WRITE, DENY))  # narrower deny
    assert check(allow_pre, acl(TOPIC, "abc", LITERAL, "User:bob", Op.WRITE, DENY))  # a literal does not cover a prefix
    assert check(allow_t, allow_pre, acl(TOPIC, "t", LITERAL, "User:bob", Op.WRITE, DENY))
    # A wildcard ALLOW grants unless a wildcard DENY is there.
    assert check(
        acl(TOPIC, "*", LITERAL, "User:bob", Op.WRITE, ALLOW), acl(TOPIC, "x", PREFIXED, "User:*", Op.WRITE, DENY)
    )


# -- the index answers as a scan of every ACL would -------------------------------------------


def reference(auth: StandardAuthorizer, principal: str, host: str, op: AclOperation, rtype, name: str) -> bool:
    """The rules of the module docstring, as a plain scan over every ACL."""
    if principal in auth.super_users:
        return True
    applying = [
        a
        for a in auth.acls()
        if a.resource_type is rtype
        and (
            (a.pattern_type is LITERAL and a.name in (name, "*"))
            or (a.pattern_type is PREFIXED and name.startswith(a.name))
        )
    ]
    mine = [a for a in applying if a.principal in (principal, "User:*") and a.host in (host, "*")]
    implied = {
        Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
        Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
    }
    if any(a.permission is DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    if any(a.permission is ALLOW and (a.operation in (op, Op.ALL) or a.operation in implied.get(op, ())) for a in mine):
        return True
    return not applying and auth.allow_everyone_if_no_acl_found


_names = st.sampled_from(["a", "ab", "abc", "abd", "b", "*", "ba"])
_ops = st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.DELETE])
_acls = st.builds(
    acl,
    st.sampled_from([TOPIC, GROUP]),
    _names,
    st.sampled_from([LITERAL, PREFIXED]),
    st.sampled_from(["User:bob", "User:alice", "User:*"]),
    _ops,
    st.sampled_from([ALLOW, DENY]),
    st.sampled_from(["*", HOST, "10.0.0.2"]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_acls, max_size=12),
    st.booleans(),
    st.sampled_from(["User:bob", "User:alice", "User:carol"]),
    st.sampled_from([HOST, "10.0.0.2"]),
    _ops.filter(lambda op: op is not Op.ALL),
    st.sampled_from([TOPIC, GROUP]),
    st.sampled_from(["a", "ab", "abc", "abcd", "b", "ba", "c", "*"]),
)
def test_index_agrees_with_a_scan(acls, allow_everyone, principal, host, op, rtype, name):
    auth = authorizer(*acls, allow_everyone_if_no_acl_found=allow_everyone)
    assert auth.authorize(principal, host, op, rtype, name) == reference(auth, principal, host, op, rtype, name)
