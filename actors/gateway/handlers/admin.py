"""Admin requests: topics, partitions, configs, records, the cluster.

CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs and
ElectLeaders go to the controller, one ``actors/protocol.py`` request per topic (any gateway serves
them: Metadata names the lowest broker as the controller, as KRaft names a random broker
to clients). The controller checks names, counts, assignments and configs, also for
``validate_only`` requests, which it answers without changing anything. DeleteRecords goes
to each partition's leader. These requests run alone on their connection (``exclusive``),
as every request does on a Kafka broker.

With an authorizer, as Kafka's KafkaApis: CreateTopics needs CREATE on the cluster or the
topic, DeleteTopics DELETE, CreatePartitions ALTER, DescribeConfigs DESCRIBE_CONFIGS and
IncrementalAlterConfigs ALTER_CONFIGS (on the topic; on the cluster for broker configs),
DeleteRecords DELETE, ElectLeaders ALTER on the cluster; refused ones get TOPIC_ or
CLUSTER_AUTHORIZATION_FAILED. Every controller call carries the client's principal, which
the controller checks again. Internal topics are Kafka's to keep: DeleteTopics and
DeleteRecords of one answer INVALID_TOPIC_EXCEPTION, whatever the authorizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.acl import CLUSTER_NAME
from actors.config import BROKER_CONFIG, LISTENER_PREFIX
from actors.gateway import authorization as authz
from actors.gateway.broker_view import (
    AUTHORIZED_OPERATIONS_OMITTED,
    BrokerView,
    listed_brokers,
    listener_of,
    topic_uuid,
)
from actors.gateway.codec import ZERO_MS, build, error_code, has_field, make, nested
from actors.gateway.errors import CONTROLLER_UNAVAILABLE, NONE, error_code_of, error_message_of
from actors.gateway.handlers.offsets import per_partition, per_topic
from actors.gateway.hosts import ReplicaCalls
from actors.gateway.server import Api, RequestContext
from actors.names import INTERNAL_TOPICS
from actors.protocol import (
    AlterableConfig,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)
from actors.types import TopicMetadata, TopicPartition
from storage import errors as kafka_errors
from storage.config import LOG_CONFIG, ConfigKey
from storage.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    InvalidTopicError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
DELETE_RECORDS_KEY = 21
DESCRIBE_CONFIGS_KEY = 32
CREATE_PARTITIONS_KEY = 37
ELECT_LEADERS_KEY = 43
INCREMENTAL_ALTER_CONFIGS_KEY = 44
DESCRIBE_CLUSTER_KEY = 60

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
MISMATCHED_ENDPOINT_TYPE = 114  # DescribeCluster asked a broker for the controllers (KIP-919)
BROKERS_ENDPOINT = 1
# DescribeConfigs' ConfigSource and ConfigType, as Kafka numbers them.
CONFIG_SOURCES = {"DYNAMIC_TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7, "password": 9}


# -- actor calls (one function each) --------------------------------------------------------


async def _create_topic(controller: Any, request: CreateTopicsRequest) -> TopicMetadata:
    return await controller.create_topic.remote(request)


async def _delete_topic(controller: Any, request: DeleteTopicsRequest) -> None:
    await controller.delete_topic.remote(request)


async def _create_partitions(controller: Any, request: CreatePartitionsRequest) -> TopicMetadata:
    return await controller.create_partitions.remote(request)


async def _describe_configs(controller: Any, request: DescribeConfigsRequest) -> dict[str, tuple[Any, str]]:
    return await controller.describe_configs.remote(request)


async def _alter_configs(controller: Any, request: IncrementalAlterConfigsRequest) -> dict[str, Any]:
    return await controller.alter_configs.remote(request)


async def _elect_leaders(controller: Any, request: ElectLeadersRequest) -> dict[TopicPartition, str | None]:
    return await controller.elect_leaders.remote(request)


async def _delete_records(replica: ReplicaCalls, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    return await replica.delete_records(request)


# -- helpers -------------------------------------------------------------------------------------


def config_string(value: Any) -> str | None:
    """A config value as Kafka writes it on the wire."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _code(exc: BaseException) -> int:
    return error_code_of(exc, unavailable=CONTROLLER_UNAVAILABLE)


def _duplicates(names: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    dup = set()
    for name in names:
        (dup if name in seen else seen).add(name)
    return dup


def _assignments(wire: Any) -> tuple[tuple[int, ...], ...] | None:
    """CreateTopics' replica assignment (partition index, broker ids) as the broker lists
    in partition order that CreateTopicsRequest takes; None when there is none."""
    if not wire:
        return None
    ordered = sorted(wire, key=lambda a: a.partition_index)
    if [a.partition_index for a in ordered] != list(range(len(ordered))):
        raise InvalidReplicaAssignmentError("the assignment must name partitions 0..n-1, each once")
    return tuple(tuple(int(b) for b in a.broker_ids) for a in ordered)


# -- CreateTopics ------------------------------------------------------------------------------


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    """CreateTopics v2-v7."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "topics")
    dup = _duplicates(t.name for t in request.topics)
    # CREATE on the cluster, or on each topic (Kafka's KafkaApis.handleCreateTopicsRequest).
    cluster_create = authz.authorized_cluster(ctx, authz.Op.CREATE, count=False)
    results = []
    for t in request.topics:
        if t.name in dup:
            results.append(_created(topic_cls, t.name, InvalidRequestError.code, "topic named twice", None))
            continue
        if not cluster_create and not authz.authorized(ctx, authz.Op.CREATE, authz.TOPIC, t.name):
            code = authz.denied_code(authz.TOPIC)
            results.append(_created(topic_cls, t.name, code, "not authorized to create the topic", None))
            continue
        try:
            asked = CreateTopicsRequest(
                t.name,
                int(t.num_partitions),
                int(t.replication_factor),
                _assignments(t.assignments),
                {c.name: c.value for c in t.configs},
                bool(request.validate_only),
                principal=authz.client(ctx),
            )
            meta = await _create_topic(view.controller, asked)
            view.invalidate(t.name)
            configs = {}
            if not asked.validate_only and authz.authorized(ctx, authz.Op.DESCRIBE_CONFIGS, authz.TOPIC, t.name):
                configs = await _topic_configs(ctx, t.name)
            results.append(_created(topic_cls, t.name, NONE, None, meta, configs))
        except Exception as exc:  # noqa: BLE001 - the topic's error code
            results.append(_created(topic_cls, t.name, _code(exc), error_message_of(exc), None))
    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=tuple(results))


async def _topic_configs(ctx: RequestContext, name: str) -> dict:
    try:
        return await _describe_configs(ctx.state.controller, DescribeConfigsRequest(name, principal=authz.client(ctx)))
    except Exception:  # noqa: BLE001 - the topic exists; its config list is a courtesy
        return {}


def _created(
    topic_cls: type,
    name: str,
    code: int,
    message: str | None,
    meta: TopicMetadata | None,
    configs: dict | None = None,
) -> Any:
    partitions = len(meta.partitions) if meta is not None else -1
    rf = len(meta.partitions[0].replicas) if meta is not None and meta.partitions else -1
    return build(
        topic_cls,
        {
            "name": name,
            "topic_id": topic_uuid(meta.topic_id) if meta is not None else None,
            "error_code": error_code(code),
            "error_message": message,
            "num_partitions": partitions,
            "replication_factor": rf,
            "configs": _created_configs(topic_cls, configs)
            if code == NONE and has_field(topic_cls, "configs")
            else None,
        },
    )


def _created_configs(topic_cls: type, configs: dict | None) -> tuple:
    return tuple(
        make(
            topic_cls,
            "configs",
            name=key,
            value=config_string(value),
            read_only=False,
            config_source=CONFIG_SOURCES.get(source, 0),
            is_sensitive=False,
        )
        for key, (value, source) in sorted((configs or {}).items())
    )


# -- DeleteTopics -------------------------------------------------------------------------------


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    """DeleteTopics v1-v6 (v6: by name or topic id)."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    if any(name is None for name, _ in wanted):
        await view.resolve_ids([tid for name, tid in wanted if name is None])
    results = []
    for name, tid in wanted:
        code, message = NONE, None
        try:
            if name is None:
                name = view.topic_name(tid)
                if not authz.authorized(ctx, authz.Op.DESCRIBE, authz.TOPIC, name):
                    # As Kafka: a topic id the principal may not describe is not known to it.
                    name = None
                    raise UnknownTopicIdError(f"unknown topic id {tid}")
            authz.check(ctx, authz.Op.DELETE, authz.TOPIC, name)
            meta = (await view.cluster([name])).topics.get(name)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            tid = topic_uuid(meta.topic_id)
            await _delete_topic(view.controller, DeleteTopicsRequest(name, principal=authz.client(ctx)))
        except Exception as exc:  # noqa: BLE001 - the topic's error code
            code, message = _code(exc), error_message_of(exc)
        finally:
            if name is not None:
                view.invalidate(name)
        results.append(
            make(resp_cls, "responses", name=name, topic_id=tid, error_code=error_code(code), error_message=message)
        )
    return ctx.schema.response_of(throttle_time=ZERO_MS, responses=tuple(results))


# -- CreatePartitions ---------------------------------------------------------------------------


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    """CreatePartitions v0-v3."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    dup = _duplicates(t.name for t in request.topics)
    results = []
    for t in request.topics:
        code, message = NONE, None
        try:
            if t.name in dup:
                raise InvalidRequestError("topic named twice")
            authz.check(ctx, authz.Op.ALTER, authz.TOPIC, t.name)
            assignments = None
            if t.assignments is not None:
                assignments = tuple(tuple(int(b) for b in a.broker_ids) for a in t.assignments)
            asked = CreatePartitionsRequest(
                t.name, int(t.count), assignments, bool(request.validate_only), principal=authz.client(ctx)
            )
            await _create_partitions(view.controller, asked)
            view.invalidate(t.name)
        except Exception as exc:  # noqa: BLE001 - the topic's error code
            code, message = _code(exc), error_message_of(exc)
        results.append(make(resp_cls, "results", name=t.name, error_code=error_code(code), error_message=message))
    return ctx.schema.response_of(throttle_time=ZERO_MS, results=tuple(results))


# -- DescribeConfigs ---------------------------------------------------------------------------


async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    """DescribeConfigs v1-v4: topics (with their sources) and brokers (static, read-only)."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    result_cls = nested(resp_cls, "results")
    documentation = bool(getattr(request, "include_documentation", False))
    results = []
    for r in request.resources:
        code, message, entries = NONE, None, []
        keys = tuple(r.configuration_keys) if r.configuration_keys is not None else None
        try:
            if r.resource_type == TOPIC_RESOURCE:
                authz.check(ctx, authz.Op.DESCRIBE_CONFIGS, authz.TOPIC, r.resource_name)
                asked = DescribeConfigsRequest(r.resource_name, keys, principal=authz.client(ctx))
                described = await _describe_configs(view.controller, asked)
                for key, (value, source) in sorted(described.items()):
                    entries.append((key, value, source, False, LOG_CONFIG.keys.get(key)))
            elif r.resource_type == BROKER_RESOURCE:
                authz.check(ctx, authz.Op.DESCRIBE_CONFIGS, authz.CLUSTER, CLUSTER_NAME)
                if r.resource_name and not r.resource_name.isdigit():
                    raise InvalidRequestError(f"broker resource name {r.resource_name!r} is not a broker id")
                for key, spec in sorted(BROKER_CONFIG.keys.items()):
                    value = view.config.get(key, spec.default)
                    source = "STATIC_BROKER_CONFIG" if value != spec.default else "DEFAULT_CONFIG"
                    entries.append((key, value, source, True, spec))
                for key, value in sorted(view.config.items()):
                    if key.startswith(LISTENER_PREFIX):  # a listener's own value of a key
                        spec = BROKER_CONFIG.keys[BROKER_CONFIG.split_listener_key(key)[1]]
                        entries.append((key, value, "STATIC_BROKER_CONFIG", True, spec))
            else:
                raise InvalidRequestError(f"config resource type {r.resource_type} is not served")
        except Exception as exc:  # noqa: BLE001 - the resource's error code
            code, message, entries = _code(exc), error_message_of(exc), []
        configs = tuple(
            _config_entry(result_cls, key, value, source, read_only, spec, documentation)
            for key, value, source, read_only, spec in entries
            if keys is None or key in keys
        )
        results.append(
            make(
                resp_cls,
                "results",
                error_code=error_code(code),
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=configs,
            )
        )
    return ctx.schema.response_of(throttle_time=ZERO_MS, results=tuple(results))


def _config_entry(
    result_cls: type, key: str, value: Any, source: str, read_only: bool, spec: ConfigKey | None, documentation: bool
) -> Any:
    # A PASSWORD key (the broker's private key and its password, ...) is described as Kafka
    # describes it: sensitive, without its value.
    sensitive = spec is not None and spec.type == "password"
    return make(
        result_cls,
        "configs",
        name=key,
        value=None if sensitive else config_string(value),
        read_only=read_only,
        config_source=CONFIG_SOURCES.get(source, 0),
        is_sensitive=sensitive,
        synonyms=(),
        config_type=CONFIG_TYPES.get(spec.type, 0) if spec is not None else 0,
        documentation=(spec.doc if spec is not None else None) if documentation else None,
    )


# -- IncrementalAlterConfigs ------------------------------------------------------------------


async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    """IncrementalAlterConfigs v0-v1 for topics (broker configs are static here)."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    results = []
    for r in request.resources:
        code, message = NONE, None
        try:
            if r.resource_type == BROKER_RESOURCE:
                authz.check(ctx, authz.Op.ALTER_CONFIGS, authz.CLUSTER, CLUSTER_NAME)
            elif r.resource_type == TOPIC_RESOURCE:
                authz.check(ctx, authz.Op.ALTER_CONFIGS, authz.TOPIC, r.resource_name)
            if r.resource_type != TOPIC_RESOURCE:
                raise InvalidRequestError("only topic configs can be altered; broker configs are static")
            changes = tuple(AlterableConfig(c.name, int(c.config_operation), c.value) for c in r.configs)
            asked = IncrementalAlterConfigsRequest(
                r.resource_name, changes, bool(request.validate_only), principal=authz.client(ctx)
            )
            await _alter_configs(view.controller, asked)
        except Exception as exc:  # noqa: BLE001 - the resource's error code
            code, message = _code(exc), error_message_of(exc)
        results.append(
            make(
                resp_cls,
                "responses",
                error_code=error_code(code),
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return ctx.schema.response_of(throttle_time=ZERO_MS, responses=tuple(results))


# -- DeleteRecords ------------------------------------------------------------------------------


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    """DeleteRecords v0-v2: each partition's log start moves (-1: to the high watermark)."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "topics")

    async def one(name: str, p: Any, code: int | None) -> Any:
        done = None
        if code is None and name in INTERNAL_TOPICS:
            code = InvalidTopicError.code  # Kafka's ReplicaManager: no client deletes their records
        if code is None:
            asked = DeleteRecordsRequest(p.offset)
            code, done = await per_partition(view, name, p.partition_index, lambda r: _delete_records(r, asked))
        return make(
            topic_cls,
            "partitions",
            partition_index=p.partition_index,
            low_watermark=done.low_watermark if done is not None else -1,
            error_code=error_code(code),
        )

    topics = await per_topic(view, resp_cls, request.topics, "name", "partition_index", one, ctx, authz.Op.DELETE)
    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=topics)


# -- ElectLeaders ------------------------------------------------------------------------------

PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    """ElectLeaders v0-v2.

    Preferred elections are the controller's (``elect_leaders``): each partition answered
    NONE (moved), ELECTION_NOT_NEEDED or PREFERRED_LEADER_NOT_AVAILABLE; asked for every
    partition (a null list), the ones already led by their preferred replica are left out, as
    Kafka's controller does. Unclean elections: rayqueue's controller makes them itself when
    ``unclean.leader.election.enable`` allows, so a partition with a leader is
    ELECTION_NOT_NEEDED and one without is ELIGIBLE_LEADERS_NOT_AVAILABLE. Unknown partitions
    are UNKNOWN_TOPIC_OR_PARTITION each, the others still elected. When the controller cannot
    be asked, every partition named gets its error (all partitions: the top-level error, v1+).
    Without ALTER on the cluster: CLUSTER_AUTHORIZATION_FAILED (top-level, and each partition
    named), before anything is looked up.
    """
    view: BrokerView = ctx.state
    unclean = int(getattr(request, "election_type", PREFERRED_ELECTION)) == UNCLEAN_ELECTION
    everything = request.topic_partitions is None
    wanted: list[tuple[str, int]] = []
    if not everything:
        wanted = list(dict.fromkeys((t.topic, int(p)) for t in request.topic_partitions for p in t.partitions))
    results: dict[tuple[str, int], tuple[int, str | None]] = {}
    top_code = NONE
    if not authz.authorized_cluster(ctx, authz.Op.ALTER):
        # As Kafka's KafkaApis: ALTER on the cluster first, nothing looked up (so the answer
        # tells no topic that exists from one that does not); the request's error and each
        # partition named with it.
        top_code = authz.denied_code(authz.CLUSTER)
        message = f"{ctx.principal} may not ALTER the cluster"
        return _elected(ctx, top_code, {tp: (top_code, message) for tp in wanted})
    try:
        snapshot = await view.cluster(None if everything else sorted({name for name, _ in wanted}))
        if everything:
            wanted = [(name, p) for name, meta in snapshot.topics.items() for p in range(len(meta.partitions))]
        electable = []
        for name, p in wanted:
            meta = snapshot.topics.get(name)
            if meta is None or not 0 <= p < len(meta.partitions):
                results[(name, p)] = (UnknownTopicOrPartitionError.code, f"unknown partition {name}-{p}")
            elif unclean and meta.partitions[p].leader >= 0:
                results[(name, p)] = (ElectionNotNeededError.code, f"{name}-{p} has a leader")
            elif unclean:
                results[(name, p)] = (
                    EligibleLeadersNotAvailableError.code,
                    f"{name}-{p}: no live in-sync replica; the controller elects an out-of-sync one itself "
                    "when unclean.leader.election.enable is true",
                )
            else:
                electable.append(TopicPartition(name, p))
        if electable:
            elected = await _elect_leaders(
                view.controller, ElectLeadersRequest(None if everything else tuple(electable), authz.client(ctx))
            )
            for tp, reason in elected.items():
                if reason is None:
                    results[(tp.topic, tp.partition)] = (NONE, None)
                else:
                    error = getattr(kafka_errors, reason, kafka_errors.UnknownServerError)
                    results[(tp.topic, tp.partition)] = (error.code, f"{tp.topic}-{tp.partition}: {error.__doc__}")
                view.invalidate(tp.topic)
    except Exception as exc:  # noqa: BLE001 - the controller could not be asked
        top_code, message = _code(exc), error_message_of(exc)
        results = {tp: (top_code, message) for tp in wanted}
    if everything:
        # Kafka's controller leaves out what needed no election when asked for everything.
        results = {tp: r for tp, r in results.items() if r[0] != ElectionNotNeededError.code}
    return _elected(ctx, top_code if everything else NONE, results)


def _elected(ctx: RequestContext, top_code: int, results: dict[tuple[str, int], tuple[int, str | None]]) -> Any:
    """ElectLeaders' answer: the request's error (v1+) and each partition's."""
    resp_cls = ctx.schema.response
    result_cls = nested(resp_cls, "replica_election_results")
    by_topic: dict[str, list[Any]] = {}
    for (name, p), (code, message) in results.items():
        by_topic.setdefault(name, []).append(
            make(result_cls, "partition_result", partition_id=p, error_code=error_code(code), error_message=message)
        )
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(top_code),
        replica_election_results=tuple(
            make(resp_cls, "replica_election_results", topic=name, partition_result=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


# -- DescribeCluster ----------------------------------------------------------------------------


async def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    """DescribeCluster v0-v2: the brokers (gateways) and the cluster id."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    endpoint_type = int(getattr(request, "endpoint_type", BROKERS_ENDPOINT))
    if endpoint_type != BROKERS_ENDPOINT:
        return ctx.schema.response_of(
            throttle_time=ZERO_MS,
            error_code=error_code(MISMATCHED_ENDPOINT_TYPE),
            error_message="this is a broker endpoint; rayqueue's controller has no Kafka listener",
            endpoint_type=endpoint_type,
            cluster_id="",
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    snapshot = await view.cluster([])
    brokers = listed_brokers(snapshot.brokers, listener_of(ctx))
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(NONE),
        error_message=None,
        endpoint_type=BROKERS_ENDPOINT,
        cluster_id=snapshot.cluster_id,
        controller_id=brokers[0].broker_id if brokers else -1,
        brokers=tuple(
            make(resp_cls, "brokers", broker_id=b.broker_id, host=b.host, port=b.port, rack=None, is_fenced=False)
            for b in brokers
        ),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


APIS = (
    Api(CREATE_TOPICS_KEY, 2, 7, handle_create_topics, exclusive=True),
    Api(DELETE_TOPICS_KEY, 1, 6, handle_delete_topics, exclusive=True),
    Api(DELETE_RECORDS_KEY, 0, 2, handle_delete_records, exclusive=True),
    Api(DESCRIBE_CONFIGS_KEY, 1, 4, handle_describe_configs),
    Api(CREATE_PARTITIONS_KEY, 0, 3, handle_create_partitions, exclusive=True),
    Api(ELECT_LEADERS_KEY, 0, 2, handle_elect_leaders, exclusive=True),
    Api(INCREMENTAL_ALTER_CONFIGS_KEY, 0, 1, handle_incremental_alter_configs, exclusive=True),
    Api(DESCRIBE_CLUSTER_KEY, 0, 2, handle_describe_cluster),
)
