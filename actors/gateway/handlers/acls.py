"""CreateAcls, DescribeAcls and DeleteAcls, on the controller's ACLs (``kafka-acls`` and every
admin client's ACL calls).

As Kafka answers them: SECURITY_DISABLED for every entry when no authorizer is configured;
CLUSTER_AUTHORIZATION_FAILED unless the principal may ALTER the cluster (create, delete) or
DESCRIBE it (describe); INVALID_REQUEST for an ACL or filter that is not one (an UNKNOWN or
filter-only value, a CLUSTER resource not named ``kafka-cluster``, a principal without its
type). A gateway that changed the ACLs takes the controller's new copy before it answers,
so the client's next request is judged by them; the other gateways get it by their watch.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from actors.acl import AclBinding, AclBindingFilter
from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.errors import CONTROLLER_UNAVAILABLE, NONE, error_code_of, error_message_of
from actors.gateway.server import Api, RequestContext
from actors.protocol_security import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from storage.errors import ClusterAuthorizationFailedError, KafkaError, SecurityDisabledError

DESCRIBE_ACLS_KEY = 29
CREATE_ACLS_KEY = 30
DELETE_ACLS_KEY = 31
_NO_AUTHORIZER = "No Authorizer is configured (authorizer.class.name is empty)"


# -- actor calls (one function each) --------------------------------------------------------


async def _create_acls(controller: Any, request: CreateAclsRequest) -> list[KafkaError | None]:
    return await controller.create_acls.remote(request)


async def _delete_acls(controller: Any, request: DeleteAclsRequest) -> list[list[AclBinding]]:
    return await controller.delete_acls.remote(request)


async def _describe_acls(controller: Any, request: DescribeAclsRequest) -> list[AclBinding]:
    return await controller.describe_acls.remote(request)


# -- helpers -------------------------------------------------------------------------------------


def _code(exc: BaseException) -> int:
    return error_code_of(exc, unavailable=CONTROLLER_UNAVAILABLE)


def _refusal(ctx: RequestContext, op: authz.Op) -> KafkaError | None:
    """Why the whole request is refused: no authorizer, or the principal may not ``op`` the cluster."""
    if not authz.enabled(ctx):
        return SecurityDisabledError(_NO_AUTHORIZER)
    if not authz.authorized_cluster(ctx, op):
        return ClusterAuthorizationFailedError(f"{ctx.principal} may not {op.name} the cluster's ACLs")
    return None


def _filter_of(wire: Any) -> AclBindingFilter:
    return AclBindingFilter.of(
        int(wire.resource_type_filter),
        wire.resource_name_filter,
        int(getattr(wire, "pattern_type_filter", 3)),
        wire.principal_filter,
        wire.host_filter,
        int(wire.operation),
        int(wire.permission_type),
    )


async def _refresh(view: BrokerView) -> None:
    """Take the controller's ACLs now (this connection's next request sees the change)."""
    if view.acls is not None:
        try:
            view.acls.apply(await authz.watch_acls(view.internal.controller, None, 0.0))
        except Exception:  # noqa: BLE001 - the watch brings the change a moment later
            pass


# -- CreateAcls -----------------------------------------------------------------------------------


async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    """CreateAcls v1-v3."""
    view: BrokerView = ctx.state
    resp = ctx.schema.response
    refused = _refusal(ctx, authz.Op.ALTER)
    if refused is not None:
        results = [(refused.code, str(refused.args[0]))] * len(request.creations)
    else:
        creations: list[AclBinding | KafkaError] = []
        for c in request.creations:
            try:
                creations.append(
                    AclBinding.of(
                        int(c.resource_type),
                        c.resource_name,
                        int(getattr(c, "resource_pattern_type", 3)),
                        c.principal,
                        c.host,
                        int(c.operation),
                        int(c.permission_type),
                    )
                )
            except KafkaError as exc:
                creations.append(exc)
        try:
            answers = await _create_acls(view.controller, CreateAclsRequest(tuple(creations), authz.client(ctx)))
            results = [(NONE, None) if e is None else (e.code, error_message_of(e)) for e in answers]
        except Exception as exc:  # noqa: BLE001 - every entry gets the error
            results = [(_code(exc), error_message_of(exc))] * len(creations)
        await _refresh(view)
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        results=tuple(make(resp, "results", error_code=error_code(c), error_message=m) for c, m in results),
    )


# -- DescribeAcls ---------------------------------------------------------------------------------


async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    """DescribeAcls v1-v3: the matching ACLs grouped by resource pattern."""
    view: BrokerView = ctx.state
    resp = ctx.schema.response
    code, message, found = NONE, None, []
    refused = _refusal(ctx, authz.Op.DESCRIBE)
    try:
        if refused is not None:
            raise refused
        found = await _describe_acls(view.controller, DescribeAclsRequest(_filter_of(request), authz.client(ctx)))
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code, message, found = _code(exc), error_message_of(exc), []
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(code),
        error_message=message,
        resources=_resources(resp, found),
    )


def _resources(resp: type, found: list[AclBinding]) -> tuple:
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
    for b in found:
        by_pattern[(int(b.resource_type), b.name, int(b.pattern_type))].append(b)
    resource_cls = nested(resp, "resources")
    return tuple(
        make(
            resp,
            "resources",
            resource_type=rtype,
            resource_name=name,
            pattern_type=ptype,
            acls=tuple(
                make(
                    resource_cls,
                    "acls",
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permission),
                )
                for b in bindings
            ),
        )
        for (rtype, name, ptype), bindings in sorted(by_pattern.items())
    )


# -- DeleteAcls -----------------------------------------------------------------------------------


async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    """DeleteAcls v1-v3: per filter, the ACLs it removed."""
    view: BrokerView = ctx.state
    resp = ctx.schema.response
    result_cls = nested(resp, "filter_results")
    refused = _refusal(ctx, authz.Op.ALTER)
    outcomes: list[tuple[int, str | None, list[AclBinding]]] = []
    if refused is not None:
        outcomes = [(refused.code, str(refused.args[0]), [])] * len(request.filters)
    else:
        filters: list[AclBindingFilter | KafkaError] = []
        for f in request.filters:
            try:
                filters.append(_filter_of(f))
            except KafkaError as exc:
                filters.append(exc)
        valid = [f for f in filters if isinstance(f, AclBindingFilter)]
        try:
            deleted = iter(
                await _delete_acls(view.controller, DeleteAclsRequest(tuple(valid), authz.client(ctx))) if valid else ()
            )
            for f in filters:
                if isinstance(f, KafkaError):
                    outcomes.append((f.code, error_message_of(f), []))
                else:
                    outcomes.append((NONE, None, next(deleted)))
        except Exception as exc:  # noqa: BLE001 - every filter gets the error
            outcomes = [(_code(exc), error_message_of(exc), [])] * len(filters)
        await _refresh(view)
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        filter_results=tuple(
            make(
                resp,
                "filter_results",
                error_code=error_code(code),
                error_message=message,
                matching_acls=tuple(
                    make(
                        result_cls,
                        "matching_acls",
                        error_code=error_code(NONE),
                        error_message=None,
                        resource_type=int(b.resource_type),
                        resource_name=b.name,
                        pattern_type=int(b.pattern_type),
                        principal=b.principal,
                        host=b.host,
                        operation=int(b.operation),
                        permission_type=int(b.permission),
                    )
                    for b in matched
                ),
            )
            for code, message, matched in outcomes
        ),
    )


APIS = (
    Api(DESCRIBE_ACLS_KEY, 1, 3, handle_describe_acls),
    Api(CREATE_ACLS_KEY, 1, 3, handle_create_acls, exclusive=True),
    Api(DELETE_ACLS_KEY, 1, 3, handle_delete_acls, exclusive=True),
)
