"""Metadata: the brokers are the gateways, with leaders, replicas, ISR, leader epochs and
topic ids from the controller; topics a producer names are auto-created as Kafka does.

With an authorizer (as Kafka's KafkaApis): a named topic the principal may not DESCRIBE is
answered TOPIC_AUTHORIZATION_FAILED without being looked up or created; asked for all
topics, those are left out; auto-creation needs CREATE on the cluster or on the topic (a
missing topic without it is TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

from actors.gateway import authorization as authz
from actors.gateway.broker_view import (
    AUTHORIZED_OPERATIONS_OMITTED,
    BrokerView,
    listed_brokers,
    listener_of,
    topic_uuid,
)
from actors.gateway.codec import ZERO_MS, build, error_code, make, nested
from actors.gateway.errors import NONE, error_code_of
from actors.gateway.server import PACE, Api, RequestContext
from actors.names import INTERNAL_TOPICS
from actors.topics import validate_topic_name
from actors.types import PartitionMetadata
from storage.errors import InvalidTopicError, LeaderNotAvailableError, UnknownTopicIdError, UnknownTopicOrPartitionError

METADATA_KEY = 3


# -- the Metadata request --------------------------------------------------------------------


def _by_id(topic: Any) -> bool:
    """A topic asked for by id (v10+): a non-zero topic id and no name. Kafka's Java client
    leaves the name empty (not null) when it asks by id; the broker looks such topics up by id."""
    topic_id = getattr(topic, "topic_id", None)
    return topic_id is not None and topic_id.int != 0 and not getattr(topic, "name", None)


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    """Metadata v0-v13: brokers (the gateways), controller, cluster id, topics."""
    view: BrokerView = ctx.state
    version = ctx.version
    resp_cls = ctx.schema.response
    requested: list[str] | None
    errors: dict[str, int] = {}
    unknown_ids: list[uuid.UUID] = []
    hidden_ids: list[uuid.UUID] = []  # topic ids the principal may not DESCRIBE
    if request.topics is None or (version == 0 and not request.topics):
        requested = None
    else:
        requested = []
        ids = [t.topic_id for t in request.topics if _by_id(t)]
        if ids:
            await view.resolve_ids(ids)
        for i, t in enumerate(request.topics):
            if i % PACE == PACE - 1:
                await asyncio.sleep(0)  # a request may name 100,000 topics: other connections' turn
            name = getattr(t, "name", None)
            if _by_id(t):
                try:
                    name = view.topic_name(t.topic_id)
                except UnknownTopicIdError:
                    unknown_ids.append(t.topic_id)
                    continue
                if not authz.authorized(ctx, authz.Op.DESCRIBE, authz.TOPIC, name):
                    hidden_ids.append(t.topic_id)
                    continue
            elif not authz.authorized(ctx, authz.Op.DESCRIBE, authz.TOPIC, name):
                # Kafka neither creates nor looks up a topic the principal may not describe.
                errors[name] = authz.denied_code(authz.TOPIC)
            requested.append(name)
    auto_create = bool(getattr(request, "allow_auto_topic_creation", True))
    creatable = []
    for i, name in enumerate(requested or ()):
        if i % PACE == PACE - 1:
            await asyncio.sleep(0)
        if name in errors:
            continue
        try:
            validate_topic_name(name)
            creatable.append(name)
        except InvalidTopicError:
            errors[name] = InvalidTopicError.code
    # Auto-creation needs CREATE on the cluster or on the topic: the others are only looked up.
    looked_up: list[str] = []
    if auto_create and creatable and authz.enabled(ctx) and not authz.authorized_cluster(ctx, authz.Op.CREATE, False):
        looked_up = [n for n in creatable if not authz.authorized(ctx, authz.Op.CREATE, authz.TOPIC, n)]
        if looked_up:
            kept = set(looked_up)
            creatable = [n for n in creatable if n not in kept]
    try:
        snapshot = await view.cluster(
            None if requested is None else creatable, auto_create and bool(creatable), authz.client(ctx)
        )
    except Exception as exc:  # noqa: BLE001 - an auto-create that failed: answer without it
        if not (auto_create and creatable):
            raise
        code = error_code_of(exc)
        snapshot = await view.cluster(creatable, False)
        for name in creatable:
            if name not in snapshot.topics:
                errors[name] = code
    if looked_up:
        existing = await view.cluster(looked_up, False)
        snapshot = dataclasses.replace(snapshot, topics={**snapshot.topics, **existing.topics})
        for name in looked_up:
            if name not in existing.topics:
                errors[name] = authz.denied_code(authz.TOPIC)  # missing, and may not be created
    brokers = listed_brokers(snapshot.brokers, listener_of(ctx))
    reachable = {b.broker_id for b in brokers}
    topic_cls = nested(resp_cls, "topics")
    if requested is None:
        # All topics: the ones the principal may not describe are left out.
        names = authz.visible(ctx, authz.Op.DESCRIBE, authz.TOPIC, sorted(snapshot.topics))
    else:
        names = requested
    topics = []
    for i, name in enumerate(names):
        if i % PACE == PACE - 1:
            await asyncio.sleep(0)
        meta = snapshot.topics.get(name) if name not in errors else None
        if meta is None:
            code = errors.get(name, UnknownTopicOrPartitionError.code)
            topics.append(_topic(topic_cls, name, code, None, False, ()))
            continue
        partitions = tuple(_partition(topic_cls, p, reachable) for p in meta.partitions)
        topics.append(_topic(topic_cls, name, NONE, topic_uuid(meta.topic_id), name in INTERNAL_TOPICS, partitions))
    for topic_id in unknown_ids:
        topics.append(_topic(topic_cls, None, UnknownTopicIdError.code, topic_id, False, ()))
    for topic_id in hidden_ids:
        topics.append(_topic(topic_cls, None, authz.denied_code(authz.TOPIC), topic_id, False, ()))
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        brokers=tuple(
            make(resp_cls, "brokers", node_id=b.broker_id, host=b.host, port=b.port, rack=None) for b in brokers
        ),
        cluster_id=snapshot.cluster_id,
        controller_id=brokers[0].broker_id if brokers else -1,
        topics=tuple(topics),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        error_code=error_code(NONE),
    )


def _topic(
    topic_cls: type, name: str | None, code: int, topic_id: uuid.UUID | None, internal: bool, partitions: tuple
) -> Any:
    return build(
        topic_cls,
        {
            "error_code": error_code(code),
            "name": name,
            "topic_id": topic_id,
            "is_internal": internal,
            "partitions": partitions,
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        },
    )


def _partition(topic_cls: type, p: PartitionMetadata, reachable: set[int]) -> Any:
    leader = p.leader if p.leader in reachable else -1
    code = NONE if leader >= 0 else LeaderNotAvailableError.code
    return make(
        topic_cls,
        "partitions",
        error_code=error_code(code),
        partition_index=p.partition,
        leader_id=leader,
        leader_epoch=p.leader_epoch,
        replica_nodes=p.replicas,
        isr_nodes=p.isr,
        offline_replicas=p.offline_replicas,
    )


APIS = (Api(METADATA_KEY, 0, 13, handle_metadata),)
