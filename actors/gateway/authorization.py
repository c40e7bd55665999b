"""The gateway's authorization: its copy of the cluster's ACLs, and the checks every
handler calls (the one place Kafka's KafkaApis rules meet the authorizer).

The gateway's ``AclView`` (``actors.acl_view``) is loaded from the controller before the
gateway listens and kept fresh by a long poll: an ACL created or deleted anywhere takes
effect on a connected client's next request.

The checks take the request's context: its principal (``ctx.principal``, set by the
listener's authentication; ``User:ANONYMOUS`` without) and the client's address. The same
principal goes with every call the handler makes to the controller or a coordinator
(:func:`client`, a ``ClientPrincipal``), which check it again: a listener never calls an
actor as the super user a principal-less call is. A refusal
is counted by resource type (``rayqueue_authorization_denied_total``) and answered with
Kafka's code for the resource type (TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_
AUTHORIZATION_FAILED). Without ``authorizer.class.name`` every check passes at the cost of
one attribute read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.acl import CLUSTER_NAME, AclOperation, ResourceType
from actors.acl_view import AclView, watch_acls
from actors.auth_helper import (
    CLUSTER,
    DENIED,
    GROUP,
    TOPIC,
    TRANSACTIONAL_ID,
    ClientPrincipal,
    Op,
    authorize,
    denied,
)
from actors.metrics import count_authorization_denied

# -- the checks the handlers call ---------------------------------------------------------------


def _acls(ctx: Any) -> AclView | None:
    return getattr(ctx.state, "acls", None)


def client(ctx: Any) -> ClientPrincipal:
    """The request's principal as the controller and the coordinators take it: with the
    client's address and the version of the ACLs this gateway authorizes with."""
    view = _acls(ctx)
    version = view.version if view is not None and view.authorizer.enabled else None
    return ClientPrincipal(ctx.principal, ctx.connection.ip or "", version)


def authorized(ctx: Any, op: AclOperation, resource_type: ResourceType, name: str, count: bool = True) -> bool:
    """Whether the request's principal may do ``op`` to the resource; a refusal is counted
    (unless ``count`` is False: a filter leaving out what may not be seen is no refusal)."""
    view = _acls(ctx)
    if view is None or not view.authorizer.enabled:
        return True
    return authorize(view.authorizer, ctx.principal, ctx.connection.ip or "", op, resource_type, name, count=count)


def check(ctx: Any, op: AclOperation, resource_type: ResourceType, name: str) -> None:
    """Raise Kafka's *_AUTHORIZATION_FAILED for the resource type unless authorized."""
    if not authorized(ctx, op, resource_type, name):
        raise denied(ctx.principal, op, resource_type, [name])


def denied_code(resource_type: ResourceType) -> int:
    """Kafka's error code for a refused resource of this type."""
    return DENIED[resource_type].code


def authorized_cluster(ctx: Any, op: AclOperation, count: bool = True) -> bool:
    """Whether the principal may do ``op`` to the cluster (``kafka-cluster``)."""
    return authorized(ctx, op, CLUSTER, CLUSTER_NAME, count)


def visible(ctx: Any, op: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> list[str]:
    """The names the principal may do ``op`` to, in order; the others are left out
    silently (Metadata of all topics, ListGroups, ListTransactions)."""
    if not enabled(ctx):
        return list(names)
    return [n for n in names if authorized(ctx, op, resource_type, n, count=False)]


def unauthorized_topics(ctx: Any, op: AclOperation, names: Iterable[str]) -> set[str]:
    """The topics among ``names`` the principal may not ``op`` (each refusal counted once)."""
    if not enabled(ctx):
        return set()
    return {n for n in set(names) if not authorized(ctx, op, TOPIC, n)}


def authorized_by_resource_type(ctx: Any, op: AclOperation, resource_type: ResourceType) -> bool:
    """Whether the principal may do ``op`` to some resource of the type (Kafka's
    authorizeByResourceType); a refusal is counted."""
    view = _acls(ctx)
    if view is None or not view.authorizer.enabled:
        return True
    ok = view.authorizer.authorize_by_resource_type(ctx.principal, ctx.connection.ip or "", op, resource_type)
    if not ok:
        count_authorization_denied(resource_type.name)
    return ok


def enabled(ctx: Any) -> bool:
    """Whether the gateway authorizes at all."""
    view = _acls(ctx)
    return view is not None and view.authorizer.enabled


__all__ = [
    "watch_acls",
    "CLUSTER",
    "DENIED",
    "GROUP",
    "TOPIC",
    "TRANSACTIONAL_ID",
    "AclView",
    "Op",
    "authorized",
    "authorized_by_resource_type",
    "authorized_cluster",
    "check",
    "client",
    "denied_code",
    "enabled",
    "unauthorized_topics",
    "visible",
]
