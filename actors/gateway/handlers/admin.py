"""Admin requests: topics, partitions, configs, records, the cluster.

CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs and IncrementalAlterConfigs
go to the controller (any gateway serves them: Metadata names the lowest broker as the
controller, as KRaft names a random broker to clients). DeleteRecords goes to each
partition's leader. ``validate_only`` requests check names, counts and configs the way
the controller would, and change nothing. These requests run alone on their connection
(``exclusive``), as every request does on a Kafka broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.config import BROKER_CONFIG
from actors.controller import validate_topic_name
from actors.gateway.codec import ZERO_MS, build, error_code, has_field, make, nested
from actors.gateway.errors import CONTROLLER_UNAVAILABLE, NONE, error_code_of, error_message_of
from actors.gateway.metadata import AUTHORIZED_OPERATIONS_OMITTED, BrokerView, listed_brokers, topic_uuid
from actors.gateway.offsets import per_partition, per_topic
from actors.gateway.server import Api, RequestContext
from actors.types import TopicMetadata
from storage.config import LOG_CONFIG, ConfigKey
from storage.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
DELETE_RECORDS_KEY = 21
DESCRIBE_CONFIGS_KEY = 32
CREATE_PARTITIONS_KEY = 37
INCREMENTAL_ALTER_CONFIGS_KEY = 44
DESCRIBE_CLUSTER_KEY = 60

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
MISMATCHED_ENDPOINT_TYPE = 114  # DescribeCluster asked a broker for the controllers (KIP-919)
BROKERS_ENDPOINT = 1
# DescribeConfigs' ConfigSource and ConfigType, as Kafka numbers them.
CONFIG_SOURCES = {"DYNAMIC_TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}


# -- actor calls (one function each) --------------------------------------------------------


async def _create_topic(
    controller: Any, name: str, partitions: int | None, rf: int | None, configs: dict, assignment: list | None
) -> TopicMetadata:
    return await controller.create_topic.remote(name, partitions, rf, configs, assignment)


async def _delete_topic(controller: Any, name: str) -> None:
    await controller.delete_topic.remote(name)


async def _create_partitions(controller: Any, name: str, total: int, assignment: list | None) -> TopicMetadata:
    return await controller.create_partitions.remote(name, total, assignment)


async def _describe_configs(controller: Any, name: str) -> dict[str, tuple[Any, str]]:
    return await controller.describe_configs.remote(name)


async def _alter_configs(controller: Any, name: str, set_configs: dict, delete_configs: list) -> dict:
    return await controller.alter_configs.remote(name, set_configs, delete_configs)


async def _delete_records(replica: Any, offset: int) -> int:
    return await replica.delete_records.remote(offset)


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


def _check_topic_configs(configs: dict[str, Any]) -> dict[str, Any]:
    """Topic configs in Kafka's names, converted and checked (InvalidConfigError)."""
    out = {}
    for key, value in configs.items():
        canonical = LOG_CONFIG.canonical(key)
        if canonical != key:
            raise InvalidConfigError(f"unknown topic config {key!r}")
        out[key] = LOG_CONFIG.keys[key].convert(value)
    return out


# -- CreateTopics ------------------------------------------------------------------------------


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    """CreateTopics v2-v7."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "topics")
    dup = _duplicates(t.name for t in request.topics)
    results = []
    for t in request.topics:
        if t.name in dup:
            results.append(_created(topic_cls, t.name, InvalidRequestError.code, "topic named twice", None, view))
            continue
        try:
            meta = await _create_one(view, t, bool(request.validate_only))
            configs = await _topic_configs(view, t.name, meta)
            results.append(_created(topic_cls, t.name, NONE, None, meta, view, configs))
        except Exception as exc:  # noqa: BLE001 - the topic's error code
            results.append(_created(topic_cls, t.name, _code(exc), error_message_of(exc), None, view))
    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=tuple(results))


async def _create_one(view: BrokerView, t: Any, validate_only: bool) -> TopicMetadata | None:
    validate_topic_name(t.name)
    configs = _check_topic_configs({c.name: c.value for c in t.configs})
    assignment = None
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise InvalidRequestError("give either an assignment or num_partitions/replication_factor")
        ordered = sorted(t.assignments, key=lambda a: a.partition_index)
        if [a.partition_index for a in ordered] != list(range(len(ordered))):
            raise InvalidRequestError("the assignment must name partitions 0..n-1")
        assignment = [list(a.broker_ids) for a in ordered]
    partitions = None if t.num_partitions == -1 else int(t.num_partitions)
    rf = None if t.replication_factor == -1 else int(t.replication_factor)
    if partitions is not None and partitions < 1:
        raise InvalidPartitionsError(f"num_partitions={partitions}; must be at least 1")
    if rf is not None and rf < 1:
        raise InvalidReplicationFactorError(f"replication factor {rf}; must be at least 1")
    if validate_only:
        if t.name in (await view.cluster([t.name])).topics:
            raise TopicAlreadyExistsError(f"topic {t.name!r} already exists")
        return None
    meta = await _create_topic(view.controller, t.name, partitions, rf, configs, assignment)
    view.invalidate(t.name)
    return meta


async def _topic_configs(view: BrokerView, name: str, meta: TopicMetadata | None) -> dict:
    if meta is None:
        return {}
    try:
        return await _describe_configs(view.controller, name)
    except Exception:  # noqa: BLE001 - the topic exists; its config list is a courtesy
        return {}


def _created(
    topic_cls: type,
    name: str,
    code: int,
    message: str | None,
    meta: TopicMetadata | None,
    view: BrokerView,
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
            meta = (await view.cluster([name])).topics.get(name)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            tid = topic_uuid(meta.topic_id)
            await _delete_topic(view.controller, name)
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
            assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None
            meta = (await view.cluster([t.name])).topics.get(t.name)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {t.name!r}")
            if t.count <= len(meta.partitions):
                raise InvalidPartitionsError(f"topic {t.name!r} has {len(meta.partitions)} partitions; asked {t.count}")
            if assignment is not None and len(assignment) != t.count - len(meta.partitions):
                raise InvalidRequestError(
                    f"{len(assignment)} assignments for {t.count - len(meta.partitions)} new ones"
                )
            if not request.validate_only:
                await _create_partitions(view.controller, t.name, int(t.count), assignment)
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
        keys = set(r.configuration_keys) if r.configuration_keys is not None else None
        try:
            if r.resource_type == TOPIC_RESOURCE:
                described = await _describe_configs(view.controller, r.resource_name)
                for key, (value, source) in sorted(described.items()):
                    entries.append((key, value, source, False, LOG_CONFIG.keys.get(key)))
            elif r.resource_type == BROKER_RESOURCE:
                if r.resource_name and not r.resource_name.isdigit():
                    raise InvalidRequestError(f"broker resource name {r.resource_name!r} is not a broker id")
                for key, spec in sorted(BROKER_CONFIG.keys.items()):
                    value = view.config.get(key, spec.default)
                    source = "STATIC_BROKER_CONFIG" if value != spec.default else "DEFAULT_CONFIG"
                    entries.append((key, value, source, True, spec))
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
    return make(
        result_cls,
        "configs",
        name=key,
        value=config_string(value),
        read_only=read_only,
        config_source=CONFIG_SOURCES.get(source, 0),
        is_sensitive=False,
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
            if r.resource_type != TOPIC_RESOURCE:
                raise InvalidRequestError("only topic configs can be altered; broker configs are static")
            set_configs, delete_configs = await _alterations(view, r)
            if not request.validate_only:
                await _alter_configs(view.controller, r.resource_name, set_configs, delete_configs)
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


async def _alterations(view: BrokerView, r: Any) -> tuple[dict[str, Any], list[str]]:
    """The resource's operations as (keys to set, keys to delete), checked."""
    if _duplicates(c.name for c in r.configs):
        raise InvalidRequestError("a config is named twice")
    current: dict[str, tuple[Any, str]] | None = None
    set_configs: dict[str, Any] = {}
    delete_configs: list[str] = []
    for c in r.configs:
        if c.name not in LOG_CONFIG.keys:
            raise InvalidConfigError(f"unknown topic config {c.name!r}")
        spec = LOG_CONFIG.keys[c.name]
        if c.config_operation == SET:
            set_configs[c.name] = spec.convert(c.value)
        elif c.config_operation == DELETE:
            delete_configs.append(c.name)
        elif c.config_operation in (APPEND, SUBTRACT):
            if spec.type != "list":
                raise InvalidConfigError(f"{c.name} is not a list: APPEND and SUBTRACT do not apply")
            if current is None:
                current = await _describe_configs(view.controller, r.resource_name)
            items = list(current[c.name][0])
            change = list(spec.convert(c.value or ""))
            if c.config_operation == APPEND:
                items += [i for i in change if i not in items]
            else:
                items = [i for i in items if i not in change]
            set_configs[c.name] = spec.convert(items)
        else:
            raise InvalidRequestError(f"unknown config operation {c.config_operation}")
    return set_configs, delete_configs


# -- DeleteRecords ------------------------------------------------------------------------------


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    """DeleteRecords v0-v2: each partition's log start moves (-1: to the high watermark)."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "topics")

    async def one(name: str, p: Any) -> Any:
        code, low = await per_partition(view, name, p.partition_index, lambda r: _delete_records(r, p.offset))
        return make(
            topic_cls,
            "partitions",
            partition_index=p.partition_index,
            low_watermark=low if low is not None else -1,
            error_code=error_code(code),
        )

    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=await per_topic(resp_cls, request.topics, "name", one))


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
    brokers = listed_brokers(snapshot.brokers)
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
    Api(INCREMENTAL_ALTER_CONFIGS_KEY, 0, 1, handle_incremental_alter_configs, exclusive=True),
    Api(DESCRIBE_CLUSTER_KEY, 0, 2, handle_describe_cluster),
)
