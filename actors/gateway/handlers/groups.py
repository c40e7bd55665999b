"""Consumer groups for Kafka clients, on rayqueue's group coordinator actor.

FindCoordinator (single key, and KIP-699's batched form) names, as Kafka does, the broker
leading the key's partition of ``__consumer_offsets`` (group ids) or
``__transaction_state`` (transactional ids), so clients spread over the gateways; every
gateway serves every group request all the same, by calling the one coordinator actor
(one Ray actor call per request, as a native consumer's). The internal topics are created
when the cluster starts; one found missing (data an older version wrote, or the topic
deleted) is created by the lookup, answering COORDINATOR_NOT_AVAILABLE meanwhile, as Kafka does.

The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) maps onto the
coordinator's client-assigned groups: a Kafka client's protocol metadata travels opaque,
the leader member gets every member's and sends the assignment back in SyncGroup. What
the gateway reads of the "consumer" protocol's subscription and assignment (topics,
partitions; kio's ConsumerProtocolSubscription/Assignment) only feeds DescribeGroups and
``rayqueue groups describe``. Offsets (OffsetCommit, OffsetFetch with KIP-709's
multi-group form, OffsetDelete) are the same ``__consumer_offsets`` records as native
commits; DescribeGroups, ListGroups and DeleteGroups are the coordinator's.

With an authorizer, as Kafka's KafkaApis: FindCoordinator needs DESCRIBE on the group (or
transactional id); JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit READ on the
group (OffsetCommit also READ on each topic, OffsetDelete READ on each topic and DELETE on
the group); OffsetFetch and DescribeGroups DESCRIBE; DeleteGroups DELETE; ListGroups shows
every group to a principal that may DESCRIBE the cluster, else the groups it may DESCRIBE.
"""

from __future__ import annotations

import functools
import importlib
from collections import defaultdict
from typing import Any

from kio.serial import entity_reader

from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView, listed_brokers, listener_of
from actors.gateway.codec import ZERO_MS, error_code, has_field, make, nested
from actors.gateway.errors import COORDINATOR_UNAVAILABLE, NONE, error_code_of, error_message_of
from actors.gateway.server import Api, RequestContext
from actors.names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, offsets_partition_for
from actors.protocol import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from actors.types import BrokerMetadata, GroupDescription, JoinGroupResult, OffsetAndMetadata, TopicPartition
from storage.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    KafkaError,
    MemberIdRequiredError,
    UnknownTopicIdError,
    UnstableOffsetCommitError,
)

FIND_COORDINATOR_KEY = 10
OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
JOIN_GROUP_KEY = 11
HEARTBEAT_KEY = 12
LEAVE_GROUP_KEY = 13
SYNC_GROUP_KEY = 14
DESCRIBE_GROUPS_KEY = 15
LIST_GROUPS_KEY = 16
DELETE_GROUPS_KEY = 42
OFFSET_DELETE_KEY = 47

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
CONSUMER_PROTOCOL = "consumer"
_LATEST_CONSUMER_PROTOCOL = 3  # newest ConsumerProtocol version kio has; newer ones read as it


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


def _code(exc: BaseException) -> int:
    return error_code_of(exc, unavailable=COORDINATOR_UNAVAILABLE)


# -- actor calls (one function each) --------------------------------------------------------


async def _join_group(coordinator: Any, request: JoinGroupRequest) -> JoinGroupResult:
    return await coordinator.join_group.remote(request)


async def _sync_group(coordinator: Any, request: SyncGroupRequest) -> SyncGroupResponse:
    return await coordinator.sync_group.remote(request)


async def _heartbeat(coordinator: Any, request: HeartbeatRequest) -> None:
    await coordinator.heartbeat.remote(request)


async def _leave_group(coordinator: Any, request: LeaveGroupRequest) -> None:
    await coordinator.leave_group.remote(request)


async def _commit_offsets(coordinator: Any, request: OffsetCommitRequest) -> dict[TopicPartition, KafkaError]:
    return await coordinator.commit_offsets.remote(request)


async def _fetch_offsets(coordinator: Any, request: OffsetFetchRequest) -> dict[TopicPartition, OffsetAndMetadata]:
    return await coordinator.fetch_offsets.remote(request)


async def _delete_offsets(coordinator: Any, request: OffsetDeleteRequest) -> dict[TopicPartition, Any]:
    return await coordinator.delete_offsets.remote(request)


async def _describe_groups(coordinator: Any, request: DescribeGroupsRequest) -> list[GroupDescription]:
    return await coordinator.describe_groups.remote(request)


async def _list_groups(coordinator: Any, request: ListGroupsRequest) -> list[tuple[str, str, str, str]]:
    return await coordinator.list_groups.remote(request)


async def _delete_groups(coordinator: Any, request: DeleteGroupsRequest) -> dict[str, KafkaError | None]:
    return await coordinator.delete_groups.remote(request)


# -- the consumer protocol's embedded messages ------------------------------------------------


@functools.cache
def _consumer_protocol(kind: str, version: int) -> Any:
    module = importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")
    cls = next(v for k, v in vars(module).items() if k == f"ConsumerProtocol{kind.capitalize()}")
    return entity_reader(cls)


def _read_consumer_protocol(kind: str, data: bytes) -> Any | None:
    """A ConsumerProtocolSubscription/Assignment (int16 version, then the body), or None
    when ``data`` is not one (another protocol type's, or garbage)."""
    if len(data) < 2:
        return None
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        return None
    try:
        value, _ = _consumer_protocol(kind, min(version, _LATEST_CONSUMER_PROTOCOL))(bytes(data), 2)
    except Exception:  # noqa: BLE001 - not the consumer protocol: stays opaque
        return None
    return value


def subscription_of(metadata: bytes) -> tuple[tuple[str, ...], tuple[TopicPartition, ...]]:
    """(topics, owned partitions) of a consumer protocol subscription; empty when unreadable."""
    sub = _read_consumer_protocol("subscription", metadata)
    if sub is None:
        return (), ()
    owned = tuple(TopicPartition(t.topic, int(p)) for t in getattr(sub, "owned_partitions", ()) for p in t.partitions)
    return tuple(sub.topics), owned


def assignment_of(data: bytes) -> tuple[TopicPartition, ...] | None:
    """The partitions of a consumer protocol assignment; None when unreadable."""
    assignment = _read_consumer_protocol("assignment", data)
    if assignment is None:
        return None
    return tuple(TopicPartition(t.topic, int(p)) for t in assignment.assigned_partitions for p in t.partitions)


# -- FindCoordinator --------------------------------------------------------------------------


async def _ensure_topic(coordinator: Any) -> bool:
    return await coordinator.ensure_topic.remote()


async def _coordinator_of(view: BrokerView, key: str, key_type: int, listener: str | None = None) -> BrokerMetadata:
    """The broker whose gateway a client should take the key's requests to (its address on
    listener ``listener``).

    As Kafka's FindCoordinator: while the coordinator's internal topic does not exist it is
    created in the background and the answer is COORDINATOR_NOT_AVAILABLE (the client asks
    again), so that no group or transaction request waits for its replicas to start."""
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        raise InvalidRequestError(f"unknown coordinator key type {key_type}")
    if not key:
        raise InvalidRequestError("an empty coordinator key")
    topic = OFFSETS_TOPIC if key_type == KEY_TYPE_GROUP else TRANSACTION_STATE_TOPIC
    snapshot = await view.cluster([topic])
    brokers = {b.broker_id: b for b in listed_brokers(snapshot.brokers, listener)}
    partitions = snapshot.partitions_for(topic)
    if not partitions:
        # Kafka creates a missing internal topic on the lookup and answers
        # COORDINATOR_NOT_AVAILABLE until it exists: the client retries the lookup rather
        # than wait inside its first commit while the topic's replicas start (over 90 s on
        # a loaded machine; a Kafka client gives up on a request after 30 s).
        # The broker's own act, as Kafka's: the client needs no right to make it.
        internal = view.internal
        owner = internal.group_coordinator if key_type == KEY_TYPE_GROUP else internal.transaction_coordinator
        if not await _ensure_topic(owner):
            raise CoordinatorNotAvailableError(f"{topic} is being created")
        snapshot = await view.cluster([topic])
        brokers = {b.broker_id: b for b in listed_brokers(snapshot.brokers, listener)}
        partitions = snapshot.partitions_for(topic)
    if partitions:
        leader = partitions[offsets_partition_for(key, len(partitions))].leader
        if leader in brokers:
            return brokers[leader]
    if view.broker_id in brokers:
        return brokers[view.broker_id]
    raise CoordinatorNotAvailableError("no gateway is registered yet")


async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    """FindCoordinator v0-v4 (v4: KIP-699's batch of keys)."""
    view: BrokerView = ctx.state
    key_type = int(getattr(request, "key_type", KEY_TYPE_GROUP))
    batched = has_field(ctx.schema.request, "coordinator_keys")
    keys = list(request.coordinator_keys) if batched else [request.key]
    answers = []
    for key in keys:
        try:
            if key_type == KEY_TYPE_GROUP:
                authz.check(ctx, authz.Op.DESCRIBE, authz.GROUP, key)
            elif key_type == KEY_TYPE_TRANSACTION:
                authz.check(ctx, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID, key)
            broker = await _coordinator_of(view, key, key_type, listener_of(ctx))
            answers.append((key, NONE, None, broker.broker_id, broker.host, broker.port))
        except Exception as exc:  # noqa: BLE001 - answered as its error code
            answers.append((key, _code(exc), error_message_of(exc), -1, "", -1))
    resp = ctx.schema.response
    if batched:
        return ctx.schema.response_of(
            throttle_time=ZERO_MS,
            coordinators=tuple(
                make(resp, "coordinators", key=k, node_id=n, host=h, port=p, error_code=error_code(c), error_message=m)
                for k, c, m, n, h, p in answers
            ),
        )
    _, code, message, node, host, port = answers[0]
    return ctx.schema.response_of(
        throttle_time=ZERO_MS, error_code=error_code(code), error_message=message, node_id=node, host=host, port=port
    )


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka's coordinator records it (InetAddress.toString() of the
    connection's peer: "/" and the address)."""
    peer = ctx.connection.peer
    return "" if peer == "?" else "/" + peer.rsplit(":", 1)[0]


async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    """JoinGroup v0-v9: client-assigned membership (KIP-394's member id handshake from v4,
    static members from v5)."""
    view: BrokerView = ctx.state
    protocols = tuple(p.name for p in request.protocols)
    metadata = tuple(bytes(p.metadata) for p in request.protocols)
    topics: tuple[str, ...] = ()
    owned: tuple[TopicPartition, ...] = ()
    if request.protocol_type == CONSUMER_PROTOCOL and metadata:
        topics, owned = subscription_of(metadata[0])
    session_ms = _ms(request.session_timeout)
    rebalance_ms = _ms(request.rebalance_timeout) if has_field(type(request), "rebalance_timeout") else session_ms
    values: dict[str, Any] = {
        "throttle_time": ZERO_MS,
        "generation_id": -1,
        "protocol_type": request.protocol_type,
        "protocol_name": "",
        "leader": "",
        "skip_assignment": False,
        "member_id": request.member_id,
        "members": (),
    }
    code = NONE
    try:
        authz.check(ctx, authz.Op.READ, authz.GROUP, request.group_id)
        result = await _join_group(
            view.group_coordinator,
            JoinGroupRequest(
                request.group_id,
                request.member_id,
                getattr(request, "group_instance_id", None),
                ctx.client_id or "",
                session_ms,
                rebalance_ms,
                protocols,
                topics,
                owned_partitions=owned,
                metadata=metadata,
                protocol_type=request.protocol_type,
                require_known_member_id=ctx.version >= 4,
                client_host=client_host(ctx),
                principal=authz.client(ctx),
            ),
        )
        values["member_id"] = result.member_id
        if result.member_id_required:
            code = MemberIdRequiredError.code
        else:
            resp = ctx.schema.response
            values.update(
                generation_id=result.generation_id,
                protocol_name=result.protocol,
                leader=result.leader_id,
                members=tuple(
                    make(resp, "members", member_id=mid, group_instance_id=iid, metadata=meta)
                    for mid, iid, meta in result.members
                ),
            )
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    return ctx.schema.response_of(error_code=error_code(code), **values)


async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    """SyncGroup v0-v5: the leader's assignments in, each member's own out."""
    view: BrokerView = ctx.state
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    decoded = {}
    for mid, data in assignments.items():
        tps = assignment_of(data)
        if tps is not None:
            decoded[mid] = tps
    code, data = NONE, b""
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    try:
        if ctx.version >= 5 and (protocol_type is None or protocol_name is None):
            # Kafka's KafkaApis, before it authorizes: both are mandatory from v5.
            raise InconsistentGroupProtocolError("SyncGroup v5+ needs its protocol type and name")
        authz.check(ctx, authz.Op.READ, authz.GROUP, request.group_id)
        answer = await _sync_group(
            view.group_coordinator,
            SyncGroupRequest(
                request.group_id,
                request.member_id,
                getattr(request, "group_instance_id", None),
                int(request.generation_id),
                assignments if assignments else None,
                decoded or None,
                principal=authz.client(ctx),
                protocol_type=protocol_type,
                protocol_name=protocol_name,
            ),
        )
        data = answer.member_assignment
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(code),
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignment=data,
    )


async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    """Heartbeat v0-v4."""
    view: BrokerView = ctx.state
    code = NONE
    try:
        authz.check(ctx, authz.Op.READ, authz.GROUP, request.group_id)
        await _heartbeat(
            view.group_coordinator,
            HeartbeatRequest(
                request.group_id,
                request.member_id,
                getattr(request, "group_instance_id", None),
                int(request.generation_id),
                principal=authz.client(ctx),
            ),
        )
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    return ctx.schema.response_of(throttle_time=ZERO_MS, error_code=error_code(code))


async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    """LeaveGroup v0-v5 (v3+: a batch of members, static ones by instance id)."""
    view: BrokerView = ctx.state
    batched = has_field(type(request), "members")
    leaving = [(m.member_id, m.group_instance_id) for m in request.members] if batched else [(request.member_id, None)]
    if not authz.authorized(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        # As Kafka's LeaveGroupRequest.getErrorResponse: the request's error, no members.
        denied = error_code(authz.denied_code(authz.GROUP))
        if not batched:
            return ctx.schema.response_of(throttle_time=ZERO_MS, error_code=denied)
        return ctx.schema.response_of(throttle_time=ZERO_MS, error_code=denied, members=())
    codes = []
    for member_id, instance_id in leaving:
        try:
            await _leave_group(
                view.group_coordinator,
                LeaveGroupRequest(request.group_id, member_id, instance_id, principal=authz.client(ctx)),
            )
            codes.append(NONE)
        except Exception as exc:  # noqa: BLE001 - answered as its error code
            codes.append(_code(exc))
    if not batched:
        return ctx.schema.response_of(throttle_time=ZERO_MS, error_code=error_code(codes[0]))
    resp = ctx.schema.response
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(NONE),
        members=tuple(
            make(resp, "members", member_id=mid, group_instance_id=iid, error_code=error_code(c))
            for (mid, iid), c in zip(leaving, codes, strict=True)
        ),
    )


# -- offsets ----------------------------------------------------------------------------------


async def _topic_names(ctx: RequestContext, topics: Any) -> list[str | None]:
    """Each request topic's name: its own (up to OffsetCommit/OffsetFetch v9), or its topic
    id's (v10+; None for an id no topic has, answered UNKNOWN_TOPIC_ID)."""
    topics = list(topics or ())
    if not topics or has_field(type(topics[0]), "name"):
        return [t.name for t in topics]
    view: BrokerView = ctx.state
    await view.resolve_ids([t.topic_id for t in topics])
    names: list[str | None] = []
    for t in topics:
        try:
            names.append(view.topic_name(t.topic_id))
        except UnknownTopicIdError:
            names.append(None)
    return names


def _commit_topics(resp: type, topics: Any, names: list[str | None], code_of: Any) -> tuple[Any, ...]:
    """The ``topics`` of an OffsetCommit response, each partition answered ``code_of(name,
    partition)`` (by name up to v9, by topic id from v10)."""
    topic_cls = nested(resp, "topics")
    return tuple(
        make(
            resp,
            "topics",
            name=name or "",
            topic_id=getattr(t, "topic_id", None),
            partitions=tuple(
                make(
                    topic_cls,
                    "partitions",
                    partition_index=p.partition_index,
                    error_code=error_code(code_of(name, int(p.partition_index))),
                )
                for p in t.partitions
            ),
        )
        for t, name in zip(topics, names, strict=True)
    )


async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    """OffsetCommit v2-v10 (one call to the coordinator for the whole request; v9+: a consumer
    group member's epoch, v10: topics by id)."""
    view: BrokerView = ctx.state
    names = await _topic_names(ctx, request.topics)
    resp = ctx.schema.response
    if not authz.authorized(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        code = authz.denied_code(authz.GROUP)
        return ctx.schema.response_of(
            throttle_time=ZERO_MS, topics=_commit_topics(resp, request.topics, names, lambda _n, _p: code)
        )
    denied = authz.unauthorized_topics(ctx, authz.Op.READ, (n for n in names if n is not None))
    offsets = {}
    for t, name in zip(request.topics, names, strict=True):
        if name is None or name in denied:
            continue  # answered UNKNOWN_TOPIC_ID / TOPIC_AUTHORIZATION_FAILED, nothing committed
        for p in t.partitions:
            offsets[TopicPartition(name, int(p.partition_index))] = OffsetAndMetadata(
                int(p.committed_offset),
                p.committed_metadata or "",
                -1,
                int(getattr(p, "committed_leader_epoch", -1)),
            )
    code, refused = NONE, {}
    try:
        if offsets or not (denied or None in names):
            refused = await _commit_offsets(
                view.group_coordinator,
                OffsetCommitRequest(
                    request.group_id,
                    offsets,
                    request.member_id,
                    getattr(request, "group_instance_id", None),
                    int(request.generation_id_or_member_epoch),
                    api_version=ctx.version,
                    principal=authz.client(ctx),
                ),
            )
    except Exception as exc:  # noqa: BLE001 - every partition gets the error
        code = _code(exc)
    topic_denied = authz.denied_code(authz.TOPIC)

    def code_of(name: str | None, partition: int) -> int:
        if name is None:
            return UnknownTopicIdError.code
        if name in denied:
            return topic_denied
        error = (refused or {}).get(TopicPartition(name, partition))
        return error.code if error is not None else code

    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=_commit_topics(resp, request.topics, names, code_of))


async def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    asked: list[tuple[str, list[int]]] | None,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[int, dict[str, list[tuple[int, OffsetAndMetadata | None, int]]]]:
    """(group error, topic -> [(partition, committed or None, error)]) of one group: DESCRIBE
    on the group, and on each topic (a named topic refused is TOPIC_AUTHORIZATION_FAILED;
    asked for all, the refused topics are left out)."""
    view: BrokerView = ctx.state
    out: dict[str, list[tuple[int, OffsetAndMetadata | None, int]]] = defaultdict(list)
    if not authz.authorized(ctx, authz.Op.DESCRIBE, authz.GROUP, group_id):
        return authz.denied_code(authz.GROUP), {}
    if asked is not None:
        denied = authz.unauthorized_topics(ctx, authz.Op.DESCRIBE, (t for t, _ in asked))
        for t, ps in asked:
            if t in denied:
                out[t].extend((p, None, authz.denied_code(authz.TOPIC)) for p in ps)
        asked = [(t, ps) for t, ps in asked if t not in denied]
        if not asked:
            return NONE, out
    partitions = None if asked is None else tuple(TopicPartition(t, p) for t, ps in asked for p in ps)
    try:
        committed = await _fetch_offsets(
            view.group_coordinator,
            OffsetFetchRequest(
                group_id,
                partitions,
                require_stable,
                principal=authz.client(ctx),
                member_id=member[0],
                member_epoch=member[1],
            ),
        )
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
        if asked is None or code != UnstableOffsetCommitError.code:
            return code, {}
        # KIP-447: a pending transactional commit is the partitions' error, retried by the client.
        for t, ps in asked:
            out[t].extend((p, None, code) for p in ps)
        return NONE, out
    if asked is None:
        shown = set(authz.visible(ctx, authz.Op.DESCRIBE, authz.TOPIC, {tp.topic for tp in committed}))
        for tp, om in sorted(committed.items()):
            if tp.topic in shown:
                out[tp.topic].append((tp.partition, om, NONE))
    else:
        for t, ps in asked:
            out[t].extend((p, committed.get(TopicPartition(t, p)), NONE) for p in ps)
    return NONE, out


def _fetched_topics(
    resp_cls: type, field: str, topics: dict[str, list[tuple[int, Any, int]]], ids: dict[str, Any] | None = None
) -> tuple:
    topic_cls = nested(resp_cls, field)
    return tuple(
        make(
            resp_cls,
            field,
            name=name,
            topic_id=(ids or {}).get(name),
            partitions=tuple(
                make(
                    topic_cls,
                    "partitions",
                    partition_index=p,
                    committed_offset=om.offset if om is not None else -1,
                    committed_leader_epoch=om.leader_epoch if om is not None else -1,
                    metadata=om.metadata if om is not None else "",
                    error_code=error_code(code),
                )
                for p, om, code in parts
            ),
        )
        for name, parts in topics.items()
    )


async def _asked(
    ctx: RequestContext, topics: Any
) -> tuple[list[tuple[str, list[int]]] | None, dict[str, Any], dict[str, list[tuple[int, Any, int]]]]:
    """The partitions asked for by name (None: all), the topic ids to answer with (v10+), and
    the answers of topic ids no topic has (UNKNOWN_TOPIC_ID)."""
    if topics is None:
        return None, {}, {}
    names = await _topic_names(ctx, topics)
    asked, ids, unknown = [], {}, {}
    for t, name in zip(topics, names, strict=True):
        partitions = [int(p) for p in t.partition_indexes]
        topic_id = getattr(t, "topic_id", None)
        if name is None:
            key = f"\0{topic_id}"  # no topic name can hold a NUL
            ids[key] = topic_id
            unknown[key] = [(p, None, UnknownTopicIdError.code) for p in partitions]
            continue
        asked.append((name, partitions))
        ids[name] = topic_id
    return asked, ids, unknown


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    """OffsetFetch v1-v10 (v8: several groups at once, KIP-709; v9: a consumer group member's
    id and epoch, checked; v10: topics by id)."""
    require_stable = bool(getattr(request, "require_stable", False))
    resp = ctx.schema.response
    view: BrokerView = ctx.state
    if has_field(type(request), "groups"):
        groups = []
        for g in request.groups:
            asked, ids, unknown = await _asked(ctx, g.topics)
            member = (getattr(g, "member_id", None), int(getattr(g, "member_epoch", -1)))
            code, topics = await _fetch_group(ctx, g.group_id, asked, require_stable, member)
            if g.topics is None and has_field(nested(nested(resp, "groups"), "topics"), "topic_id"):
                if any(view.uuid_of(name) is None for name in topics):
                    await view.cluster(None)
                ids = {name: view.uuid_of(name) for name in topics}
            if code == NONE:
                topics.update(unknown)
            groups.append(
                make(
                    resp,
                    "groups",
                    group_id=g.group_id,
                    topics=_fetched_topics(nested(resp, "groups"), "topics", topics, ids),
                    error_code=error_code(code),
                )
            )
        return ctx.schema.response_of(throttle_time=ZERO_MS, groups=tuple(groups))
    asked, _, _ = await _asked(ctx, request.topics)
    code, topics = await _fetch_group(ctx, request.group_id, asked, require_stable)
    if code != NONE and not has_field(resp, "error_code"):
        # v0-v1 have no request-level error: as Kafka's OffsetFetchRequest.getErrorResponse,
        # every partition asked carries it (GROUP_AUTHORIZATION_FAILED, ...).
        topics = {t: [(p, None, code) for p in ps] for t, ps in asked or ()}
    return ctx.schema.response_of(
        throttle_time=ZERO_MS, error_code=error_code(code), topics=_fetched_topics(resp, "topics", topics)
    )


async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    """OffsetDelete v0."""
    view: BrokerView = ctx.state
    if not authz.authorized(ctx, authz.Op.DELETE, authz.GROUP, request.group_id):
        # As Kafka's KafkaApis: the request's error alone, no topic looked at.
        refused = error_code(authz.denied_code(authz.GROUP))
        return ctx.schema.response_of(error_code=refused, throttle_time=ZERO_MS, topics=())
    denied = authz.unauthorized_topics(ctx, authz.Op.READ, (t.name for t in request.topics))
    asked = [
        TopicPartition(t.name, int(p.partition_index))
        for t in request.topics
        if t.name not in denied
        for p in t.partitions
    ]
    code, results = NONE, {}
    try:
        if asked or not denied:
            results = await _delete_offsets(
                view.group_coordinator, OffsetDeleteRequest(request.group_id, tuple(asked), principal=authz.client(ctx))
            )
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    resp = ctx.schema.response
    topic_cls = nested(resp, "topics")

    def part_code(tp: TopicPartition) -> int:
        if tp.topic in denied:
            return authz.denied_code(authz.TOPIC)
        error = results.get(tp)
        return error.code if isinstance(error, KafkaError) else NONE

    return ctx.schema.response_of(
        error_code=error_code(code),
        throttle_time=ZERO_MS,
        topics=tuple(
            make(
                resp,
                "topics",
                name=t.name,
                partitions=tuple(
                    make(
                        topic_cls,
                        "partitions",
                        partition_index=p.partition_index,
                        error_code=error_code(part_code(TopicPartition(t.name, int(p.partition_index)))),
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )


# -- DescribeGroups, ListGroups, DeleteGroups -------------------------------------------------


async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    """DescribeGroups v0-v6 (unknown groups, and consumer groups of KIP-848's protocol, are
    Dead, as Kafka answers; from v6 with GROUP_ID_NOT_FOUND and its message)."""
    view: BrokerView = ctx.state
    resp = ctx.schema.response
    group_cls = nested(resp, "groups")
    allowed = [g for g in request.groups if authz.authorized(ctx, authz.Op.DESCRIBE, authz.GROUP, g)]
    refused = [g for g in request.groups if g not in set(allowed)]
    try:
        described = await _describe_groups(
            view.group_coordinator, DescribeGroupsRequest(tuple(allowed), principal=authz.client(ctx))
        )
    except Exception as exc:  # noqa: BLE001 - every group gets the error
        code = error_code(_code(exc))
        return ctx.schema.response_of(
            throttle_time=ZERO_MS,
            groups=tuple(
                make(
                    resp,
                    "groups",
                    error_code=code,
                    group_id=g,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                )
                for g in request.groups
            ),
        )
    denied = error_code(authz.denied_code(authz.GROUP))
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        groups=tuple(
            make(
                resp,
                "groups",
                error_code=denied,
                group_id=g,
                group_state="",
                protocol_type="",
                protocol_data="",
                members=(),
                authorized_operations=-(2**31),
            )
            for g in refused
        )
        + tuple(
            _not_classic(ctx, d)
            if d.group_type != "classic" or (d.state == "Dead" and not d.protocol_type)
            else make(
                resp,
                "groups",
                error_code=error_code(NONE),
                group_id=d.group_id,
                group_state=str(d.state),
                protocol_type=d.protocol_type,
                protocol_data=d.protocol,
                authorized_operations=-(2**31),
                members=tuple(
                    make(
                        group_cls,
                        "members",
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.member_assignment,
                    )
                    for m in d.members
                ),
            )
            for d in described
        ),
    )


def _not_classic(ctx: RequestContext, d: GroupDescription) -> Any:
    """An unknown group, or a consumer group, as DescribeGroups shows it (Kafka's
    ``classicGroup()`` refusing it): Dead, and from v6 GROUP_ID_NOT_FOUND with its message."""
    why = (
        f"Group {d.group_id} not found." if d.group_type == "classic" else f"Group {d.group_id} is not a classic group."
    )
    code = GroupIdNotFoundError.code if ctx.version >= 6 else NONE
    return make(
        ctx.schema.response,
        "groups",
        error_code=error_code(code),
        error_message=why if ctx.version >= 6 else None,
        group_id=d.group_id,
        group_state="Dead",
        protocol_type="",
        protocol_data="",
        members=(),
        authorized_operations=-(2**31),
    )


async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    """ListGroups v0-v5 (v4: KIP-518's state filter; v5: KIP-848's group types, classic or
    consumer, and their filter)."""
    view: BrokerView = ctx.state
    wanted = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    code, groups = NONE, []
    try:
        groups = await _list_groups(view.group_coordinator, ListGroupsRequest(principal=authz.client(ctx)))
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    if groups and authz.enabled(ctx) and not authz.authorized_cluster(ctx, authz.Op.DESCRIBE, count=False):
        # Without DESCRIBE on the cluster, only the groups the principal may describe.
        shown = set(authz.visible(ctx, authz.Op.DESCRIBE, authz.GROUP, [g[0] for g in groups]))
        groups = [g for g in groups if g[0] in shown]
    resp = ctx.schema.response
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(code),
        groups=tuple(
            make(resp, "groups", group_id=gid, protocol_type=ptype, group_state=str(state), group_type=gtype)
            for gid, state, ptype, gtype in groups
            if (not wanted or str(state).lower() in wanted) and (not types or gtype in types)
        ),
    )


async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    """DeleteGroups v0-v2."""
    view: BrokerView = ctx.state
    names = tuple(request.groups_names)
    allowed = tuple(g for g in names if authz.authorized(ctx, authz.Op.DELETE, authz.GROUP, g))
    codes = dict.fromkeys(names, authz.denied_code(authz.GROUP))
    try:
        if allowed:
            results = await _delete_groups(
                view.group_coordinator, DeleteGroupsRequest(allowed, principal=authz.client(ctx))
            )
            codes.update({g: (e.code if isinstance(e, KafkaError) else NONE) for g, e in results.items()})
    except Exception as exc:  # noqa: BLE001 - every group gets the error
        codes.update(dict.fromkeys(allowed, _code(exc)))
    resp = ctx.schema.response
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        results=tuple(make(resp, "results", group_id=g, error_code=error_code(codes.get(g, NONE))) for g in names),
    )


APIS = (
    Api(FIND_COORDINATOR_KEY, 0, 4, handle_find_coordinator),
    Api(JOIN_GROUP_KEY, 0, 9, handle_join_group),
    Api(SYNC_GROUP_KEY, 0, 5, handle_sync_group),
    Api(HEARTBEAT_KEY, 0, 4, handle_heartbeat),
    Api(LEAVE_GROUP_KEY, 0, 5, handle_leave_group),
    Api(OFFSET_COMMIT_KEY, 2, 10, handle_offset_commit),
    Api(OFFSET_FETCH_KEY, 1, 10, handle_offset_fetch),
    Api(OFFSET_DELETE_KEY, 0, 0, handle_offset_delete),
    Api(DESCRIBE_GROUPS_KEY, 0, 6, handle_describe_groups),
    Api(LIST_GROUPS_KEY, 0, 5, handle_list_groups),
    Api(DELETE_GROUPS_KEY, 0, 2, handle_delete_groups),
)
