"""KIP-848's consumer group protocol for Kafka clients: ConsumerGroupHeartbeat (API 68) and
ConsumerGroupDescribe (API 69), v0-v1 as Kafka 4.4 serves them, on rayqueue's group coordinator.

The translation only: topic ids travel as UUIDs on the wire and as Kafka's
``Uuid.toString()`` (rayqueue's topic id strings) to the coordinator; the member's client id
and address come from the connection. With an authorizer, as Kafka's KafkaApis: READ on the
group for a heartbeat and DESCRIBE on every topic it subscribes to by name
(TOPIC_AUTHORIZATION_FAILED otherwise); DESCRIBE on each group described.
"""

from __future__ import annotations

import base64
import datetime
import uuid
from typing import Any

from kio.static.primitive import i32Timedelta

from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView, topic_uuid
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.errors import COORDINATOR_UNAVAILABLE, NONE, error_code_of, error_message_of
from actors.gateway.handlers.groups import client_host
from actors.gateway.server import Api, RequestContext
from actors.protocol_consumer_groups import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicAssignment,
)
from storage.errors import TopicAuthorizationFailedError

CONSUMER_GROUP_HEARTBEAT_KEY = 68
CONSUMER_GROUP_DESCRIBE_KEY = 69
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _code(exc: BaseException) -> int:
    return error_code_of(exc, unavailable=COORDINATOR_UNAVAILABLE)


def topic_id_string(topic_id: uuid.UUID | None) -> str:
    """A wire topic id as rayqueue's topic id string (Kafka's ``Uuid.toString()``)."""
    if topic_id is None:
        return ""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


# -- actor calls (one function each) --------------------------------------------------------


async def _heartbeat(coordinator: Any, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    return await coordinator.consumer_group_heartbeat.remote(request)


async def _describe(coordinator: Any, request: ConsumerGroupDescribeRequest) -> list[ConsumerGroupDescription]:
    return await coordinator.consumer_group_describe.remote(request)


# -- ConsumerGroupHeartbeat -----------------------------------------------------------------


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    """ConsumerGroupHeartbeat v0-v1 (v1: the member names itself and may subscribe by regex)."""
    view: BrokerView = ctx.state
    resp = ctx.schema.response
    names = request.subscribed_topic_names
    try:
        authz.check(ctx, authz.Op.READ, authz.GROUP, request.group_id)
        if names and authz.unauthorized_topics(ctx, authz.Op.DESCRIBE, names):
            raise TopicAuthorizationFailedError("the member may not describe every topic it subscribes to")
        owned = None
        if request.topic_partitions is not None:
            owned = tuple(
                (topic_id_string(t.topic_id), tuple(int(p) for p in t.partitions)) for t in request.topic_partitions
            )
        answer = await _heartbeat(
            view.group_coordinator,
            ConsumerGroupHeartbeatRequest(
                request.group_id,
                request.member_id,
                int(request.member_epoch),
                request.instance_id,
                request.rack_id,
                _ms(request.rebalance_timeout),
                tuple(names) if names is not None else None,
                getattr(request, "subscribed_topic_regex", None),
                request.server_assignor,
                owned,
                ctx.client_id or "",
                client_host(ctx),
                ctx.version,
                principal=authz.client(ctx),
            ),
        )
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        return ctx.schema.response_of(
            throttle_time=ZERO_MS,
            error_code=error_code(_code(exc)),
            error_message=error_message_of(exc),
            member_id=None,
            member_epoch=0,
            heartbeat_interval=ZERO_MS,
            assignment=None,
        )
    assignment = None
    if answer.assignment is not None:
        assignment_cls = nested(resp, "assignment")
        assignment = assignment_cls(
            topic_partitions=tuple(
                make(assignment_cls, "topic_partitions", topic_id=topic_uuid(t.topic_id), partitions=t.partitions)
                for t in answer.assignment
            )
        )
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(NONE),
        error_message=None,
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval=_timedelta(answer.heartbeat_interval_ms),
        assignment=assignment,
    )


def _timedelta(ms: int) -> Any:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


# -- ConsumerGroupDescribe -----------------------------------------------------------------


def _assignment(member_cls: type, topics: tuple[TopicAssignment, ...]) -> Any:
    assignment_cls = nested(member_cls, "assignment")
    return assignment_cls(
        topic_partitions=tuple(
            make(
                assignment_cls,
                "topic_partitions",
                topic_id=topic_uuid(t.topic_id),
                topic_name=t.topic_name,
                partitions=t.partitions,
            )
            for t in topics
        )
    )


async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    """ConsumerGroupDescribe v0-v1 (v1: each member's type, classic or consumer)."""
    view: BrokerView = ctx.state
    resp = ctx.schema.response
    group_cls = nested(resp, "groups")
    member_cls = nested(group_cls, "members")
    asked = tuple(request.group_ids)
    allowed = tuple(g for g in asked if authz.authorized(ctx, authz.Op.DESCRIBE, authz.GROUP, g))
    denied = error_code(authz.denied_code(authz.GROUP))
    found: dict[str, Any] = {}
    failure: BaseException | None = None
    try:
        if allowed:
            asked_request = ConsumerGroupDescribeRequest(allowed, principal=authz.client(ctx))
            found = {d.group_id: d for d in await _describe(view.group_coordinator, asked_request)}
    except Exception as exc:  # noqa: BLE001 - every group gets the error
        failure = exc

    def described(group_id: str) -> Any:
        empty = {
            "group_id": group_id,
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "assignor_name": "",
            "members": (),
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }
        if group_id not in allowed:
            return make(resp, "groups", error_code=denied, error_message=None, **empty)
        if failure is not None:
            return make(
                resp, "groups", error_code=error_code(_code(failure)), error_message=error_message_of(failure), **empty
            )
        d = found[group_id]
        if d.error is not None:
            return make(
                resp, "groups", error_code=error_code(_code(d.error)), error_message=error_message_of(d.error), **empty
            )
        return make(
            resp,
            "groups",
            error_code=error_code(NONE),
            error_message=None,
            group_id=d.group_id,
            group_state=d.group_state,
            group_epoch=d.group_epoch,
            assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name,
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
            members=tuple(
                make(
                    group_cls,
                    "members",
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=_assignment(member_cls, m.assignment),
                    target_assignment=_assignment(member_cls, m.target_assignment),
                    member_type=m.member_type,
                )
                for m in d.members
            ),
        )

    return ctx.schema.response_of(throttle_time=ZERO_MS, groups=tuple(described(g) for g in asked))


APIS = (
    Api(CONSUMER_GROUP_HEARTBEAT_KEY, 0, 1, handle_consumer_group_heartbeat),
    Api(CONSUMER_GROUP_DESCRIBE_KEY, 0, 1, handle_consumer_group_describe),
)
