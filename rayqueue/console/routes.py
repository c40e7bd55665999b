"""The console's JSON API. Reads come from snapshots; every change goes through Admin or a
Producer exactly as the CLI makes it, so validation and errors are Admin's (shown by the
page as messages). With a login (the cluster has authentication) each request acts through
its session's view, as ``User:<name>`` under the cluster's ACLs: the snapshots hold what
that principal may describe, the charts only its topics and groups, and a refused action
is answered 403 with Kafka's error name (TOPIC_AUTHORIZATION_FAILED...)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from actors.types import TopicPartition
from rayqueue.console.browse import browse
from rayqueue.console.login import session_of
from rayqueue.console.metrics import SOURCE_LABELS, SOURCE_METRICS, SOURCE_SNAPSHOTS
from rayqueue.console.state import ClusterView, ConsoleState, Sample
from rayqueue.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from rayqueue.snapshot import ClusterSnapshot

router = APIRouter(prefix="/api")


# What a principal may be refused while the rest of a page still shows.
AUTHORIZATION_ERRORS = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)


def _state(request: Request) -> ConsoleState:
    return request.app.state.console


def _view(request: Request) -> ClusterView:
    """What the request acts through: its session's view, else the console's own."""
    session = session_of(request)
    return session.view if session is not None else _state(request).view


def _snapshot(request: Request, max_age_s: float | None = None) -> ClusterSnapshot:
    """The request's principal's snapshot, cached for a sampling period (or ``max_age_s``)."""
    state = _state(request)
    return _view(request).snapshot(state.sample_interval_s if max_age_s is None else max_age_s)


def _changed(request: Request) -> None:
    """After a change: every cached snapshot that may show it is taken again."""
    _view(request).invalidate()
    _state(request).invalidate()


def _missing_topic(view: ClusterView, name: str) -> UnknownTopicOrPartitionError:
    """Why a topic is not in the principal's snapshot: TopicAuthorizationFailedError raised
    when it may not DESCRIBE the name (as Kafka's Metadata answers a named topic), else
    UnknownTopicOrPartitionError to raise."""
    view.admin.describe_topics([name])
    return UnknownTopicOrPartitionError(f"topic {name!r} does not exist")


def _missing_group(view: ClusterView, group_id: str) -> GroupIdNotFoundError:
    """As :func:`_missing_topic` for a group (GroupAuthorizationFailedError raised)."""
    view.admin.describe_groups([group_id])
    return GroupIdNotFoundError(f"group {group_id!r} does not exist")


def _configs_or_none(view: ClusterView, topic: str) -> dict[str, tuple[Any, str]] | None:
    """A topic's configs, None when the principal may not DESCRIBE_CONFIGS it."""
    try:
        return view.admin.describe_configs(topic)
    except AUTHORIZATION_ERRORS:
        return None


class NewTopicBody(BaseModel):
    """A topic to create: -1 / null partitions or replication factor take the broker's defaults."""

    name: str
    partitions: int | None = None
    replication_factor: int | None = None
    configs: dict[str, Any] = Field(default_factory=dict)


class AlterConfigsBody(BaseModel):
    """Config overrides to set and to remove (kafka-configs --alter)."""

    set: dict[str, Any] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)


class ProduceBody(BaseModel):
    """A test record: text key/value (null key when absent), optional partition and headers."""

    value: str | None = None
    key: str | None = None
    partition: int | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class ResetOffsetsBody(BaseModel):
    """kafka-consumer-groups --reset-offsets: which topics (all the group has offsets for when
    empty), the target, and the confirmation the page asked for."""

    group_id: str
    to: str  # earliest, latest or timestamp
    timestamp: int | None = None
    topics: list[str] = Field(default_factory=list)
    confirm: bool = False


def _json_safe(value: Any) -> Any:
    """Integers a browser's JSON cannot hold exactly (Long.MAX_VALUE defaults) as text."""
    return str(value) if isinstance(value, int) and abs(value) > 2**53 else value


def _config_text(value: Any) -> Any:
    """A list config as Kafka writes it (``compact,delete``)."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value


_NO_RATES = {"messages_in": 0.0, "messages_out": 0.0, "bytes_in": None, "bytes_out": None}


def _source(sample: Sample | None) -> dict[str, str]:
    source = SOURCE_METRICS if sample is not None and sample.metrics is not None else SOURCE_SNAPSHOTS
    return {"source": source, "source_label": SOURCE_LABELS[source]}


def _topic_rates(sample: Sample, topic: str) -> dict[str, float | None]:
    """One topic's rates in a sample: messages and bytes in / bytes out from the metrics
    when they answered (else messages in from high watermarks, bytes unknown); messages
    out is always the groups' committed offsets moving (the metrics count bytes fetched)."""
    snap = sample.topic_rates.get(topic)
    out: dict[str, float | None] = {
        "messages_in": snap.messages_in if snap else 0.0,
        "messages_out": snap.messages_out if snap else 0.0,
        "bytes_in": None,
        "bytes_out": None,
    }
    if sample.metrics is not None:
        traffic = sample.metrics.topics.get(topic)
        out["messages_in"] = traffic.messages_in if traffic else 0.0
        out["bytes_in"] = traffic.bytes_in if traffic else 0.0
        out["bytes_out"] = traffic.bytes_out if traffic else 0.0
    return out


def _rates_of(state: ConsoleState) -> dict[str, dict[str, float | None]]:
    sample = state.latest()
    if sample is None:
        return {}
    names = set(sample.topic_rates) | (set(sample.metrics.topics) if sample.metrics else set())
    return {name: _topic_rates(sample, name) for name in names}


def _sum(rows: list[dict[str, float | None]], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return sum(values) if values or not rows else None


@router.get("/overview")
def overview(request: Request) -> dict[str, Any]:
    """Cluster id, controller epoch, brokers, URPs and offline partitions, rates."""
    state = _state(request)
    snap = _snapshot(request)
    data = snap.to_dict()
    user_topics = [t for t in snap.topics.values() if not t.internal]
    # Internal topics' traffic (offset commits, transaction state) is not the users' messages.
    rates = {name: r for name, r in _rates_of(state).items() if name in {t.name for t in user_topics}}
    latest = state.latest()
    metrics = latest.metrics if latest is not None else None
    return {
        "cluster_id": snap.cluster_id,
        "namespace": snap.namespace,
        "controller_epoch": snap.controller_epoch,
        "taken_at": snap.taken_at,
        "brokers": data["brokers"],
        "topics": len(user_topics),
        "partitions": sum(len(t.partitions) for t in user_topics),
        "under_replicated": data["under_replicated"],
        "offline": data["offline"],
        "groups": len(snap.groups),
        "open_transactions": sum(1 for t in snap.transactions if t.age_ms is not None),
        "messages_in_per_sec": sum(r["messages_in"] for r in rates.values()),
        "messages_out_per_sec": sum(r["messages_out"] for r in rates.values()),
        "bytes_in_per_sec": None if metrics is None else _sum(list(rates.values()), "bytes_in") or 0.0,
        "bytes_out_per_sec": None if metrics is None else _sum(list(rates.values()), "bytes_out") or 0.0,
        "produce_p99_ms": None if metrics is None else metrics.produce_p99_ms,
        "fetch_p99_ms": None if metrics is None else metrics.fetch_p99_ms,
        # What the metrics say of replication (the lists above come from the snapshot).
        "metrics": None
        if metrics is None
        else {"under_replicated": metrics.under_replicated, "offline": metrics.offline, "endpoints": metrics.endpoints},
        **_source(latest),
        "rates": rates,
        "errors": list(snap.errors) + ([f"sampling: {state.last_error}"] if state.last_error else []),
    }


@router.get("/topics")
def list_topics(request: Request, internal: bool = False) -> dict[str, Any]:
    """Topics with partitions, replication factor, size, messages, retention and cleanup policy."""
    state = _state(request)
    view = _view(request)
    snap = _snapshot(request)
    rates = _rates_of(state)
    topics = []
    for t in snap.topics.values():
        if t.internal and not internal:
            continue
        # Without DESCRIBE_CONFIGS on the topic its retention and cleanup policy show as null.
        configs = _configs_or_none(view, t.name) or {}
        topics.append(
            {
                "name": t.name,
                "internal": t.internal,
                "partitions": len(t.partitions),
                "replication_factor": t.replication_factor,
                "size_bytes": t.size_bytes,
                "messages": t.messages,
                "retention_ms": configs.get("retention.ms", (None, ""))[0],
                "cleanup_policy": _config_text(configs.get("cleanup.policy", (None, ""))[0]),
                "under_replicated": sum(p.under_replicated and not p.offline for p in t.partitions),
                "offline": sum(p.offline for p in t.partitions),
                "iceberg": t.iceberg,
                **rates.get(t.name, _NO_RATES),
            }
        )
    return {"topics": topics}


@router.post("/topics", status_code=201)
def create_topic(request: Request, body: NewTopicBody) -> dict[str, Any]:
    """Create a topic through Admin (its validation, its errors)."""
    meta = _view(request).admin.create_topic(body.name, body.partitions, body.replication_factor, configs=body.configs)
    _changed(request)
    rf = len(meta.partitions[0].replicas) if meta.partitions else 0
    return {"name": meta.name, "partitions": len(meta.partitions), "replication_factor": rf}


@router.get("/topics/{name}")
def describe_topic(request: Request, name: str) -> dict[str, Any]:
    """One topic: per-partition placement and log offsets, configs with their sources, rates."""
    state = _state(request)
    snap = _snapshot(request)
    if name not in snap.topics:
        # The snapshot may predate a topic just made elsewhere: look once more.
        snap = _snapshot(request, max_age_s=0)
    topic = snap.topics.get(name)
    if topic is None:
        raise _missing_topic(_view(request), name)
    data = snap.to_dict()["topics"][name]
    configs = _configs_or_none(_view(request), name)
    return {
        **data,
        "size_bytes": topic.size_bytes,
        "messages": topic.messages,
        # None: the principal may describe the topic but not its configs.
        "configs": None
        if configs is None
        else {k: {"value": _json_safe(v), "source": src} for k, (v, src) in sorted(configs.items())},
        "rates": {**_rates_of(state).get(name, _NO_RATES), **_source(state.latest())},
    }


@router.post("/topics/{name}/configs")
def alter_topic_configs(request: Request, name: str, body: AlterConfigsBody) -> dict[str, Any]:
    """Set / remove config overrides (all or nothing, as Admin.alter_configs)."""
    overrides = _view(request).admin.alter_configs(name, body.set, body.delete)
    _changed(request)
    return {"name": name, "overrides": overrides}


@router.delete("/topics/{name}")
def delete_topic(request: Request, name: str, confirm: str = "") -> dict[str, Any]:
    """Delete a topic; ``confirm`` must repeat its name (the page asks for it)."""
    if confirm != name:
        raise InvalidRequestError(f"deleting topic {name!r} needs confirm={name!r}")
    _view(request).admin.delete_topic(name)
    _changed(request)
    return {"deleted": name}


@router.get("/topics/{name}/records")
def read_records(
    request: Request,
    name: str,
    partition: int = 0,
    mode: str = "newest",
    offset: int | None = None,
    timestamp: int | None = None,
    limit: int = Query(20),
    key: str | None = None,
) -> dict[str, Any]:
    """Browse one partition: by offset, by timestamp or the newest N; optional key filter."""
    return browse(_view(request), name, partition, mode, offset, timestamp, limit, key or None)


@router.post("/topics/{name}/records", status_code=201)
def produce_record(request: Request, name: str, body: ProduceBody) -> dict[str, Any]:
    """Produce one test record (acks as the producer's default: all) and say where it landed."""
    view = _view(request)
    if name not in view.admin.describe_topics([name]):
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    md = (
        view.producer()
        .send(
            name,
            None if body.value is None else body.value.encode(),
            key=None if body.key is None else body.key.encode(),
            headers=[(k, v.encode()) for k, v in body.headers.items()],
            partition=body.partition,
        )
        .get(timeout=30)
    )
    _changed(request)
    return {"topic": md.topic, "partition": md.partition, "offset": md.offset, "timestamp": md.timestamp}


@router.get("/groups")
def list_groups(request: Request) -> dict[str, Any]:
    """Groups with state, protocol, member count and total lag."""
    snap = _snapshot(request)
    return {
        "groups": [
            {
                "group_id": g.group_id,
                "state": g.state,
                "protocol_type": g.protocol_type,
                "protocol": g.protocol,
                "members": len(g.members),
                "lag": g.lag,
            }
            for g in snap.groups.values()
        ]
    }


@router.get("/groups/{group_id:path}")
def describe_group(request: Request, group_id: str) -> dict[str, Any]:
    """One group: members and assignments, committed offset and lag per partition."""
    snap = _snapshot(request)
    if group_id not in snap.groups:
        snap = _snapshot(request, max_age_s=0)
    data = snap.to_dict()["groups"].get(group_id)
    if data is None:
        raise _missing_group(_view(request), group_id)
    return data


@router.post("/group-offsets/reset")
def reset_group_offsets(request: Request, body: ResetOffsetsBody) -> dict[str, Any]:
    """Reset an inactive group's offsets to earliest, latest or a timestamp, once confirmed.

    Refused with NonEmptyGroupError while the group has members, as kafka-consumer-groups
    refuses; without ``topics`` every topic the group has committed offsets for."""
    if not body.confirm:
        raise InvalidRequestError("resetting offsets needs confirm=true")
    if body.to not in ("earliest", "latest", "timestamp"):
        raise InvalidRequestError(f"to must be earliest, latest or timestamp, got {body.to!r}")
    if body.to == "timestamp" and body.timestamp is None:
        raise InvalidRequestError("to=timestamp needs a timestamp (ms since the epoch)")
    admin = _view(request).admin
    targets: list[TopicPartition | str] = list(body.topics)
    if not targets:
        targets = sorted(admin.list_group_offsets(body.group_id))
    if not targets:
        raise InvalidRequestError(f"group {body.group_id!r} has no committed offsets; name the topics to reset")
    kwargs: dict[str, Any] = {"timestamp": body.timestamp} if body.to == "timestamp" else {"to": body.to}
    result = admin.reset_group_offsets(body.group_id, targets, **kwargs)
    _changed(request)
    return {
        "group_id": body.group_id,
        "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in sorted(result.items())],
    }


@router.get("/transactions")
def list_transactions(request: Request) -> dict[str, Any]:
    """Transactional ids with producer id/epoch, state and the open transaction's age."""
    snap = _snapshot(request)
    return {"transactions": snap.to_dict()["transactions"]}


@router.get("/history")
def history(request: Request, topic: str | None = None, group: str | None = None) -> JSONResponse:
    """The sampled history the charts draw, oldest first: a topic's rates (messages in/out,
    bytes in/out per second), a group's total lag (and per partition), or with neither the
    totals over all user topics and the produce / fetch p99. Each point says its ``source``
    (``metrics`` or ``snapshots``); the answer's ``source`` / ``source_label`` are the
    latest point's, which the charts are labelled with. A session sees the history of
    the topics and groups its principal may describe, and totals over those."""
    state = _state(request)
    visible: set[str] | None = None  # user topics the principal may describe (None: all)
    if session_of(request) is not None:
        snap = _snapshot(request)
        if topic and topic not in snap.topics:
            raise _missing_topic(_view(request), topic)
        if group is not None and group not in snap.groups:
            raise _missing_group(_view(request), group)
        visible = set(snap.topics)
    points: list[dict[str, Any]] = []
    samples = list(state.history)
    for s in samples:
        point: dict[str, Any] = {"t": s.taken_at}
        if group is not None:
            if s.metrics is not None and group in s.metrics.group_lag:
                point.update(
                    lag=s.metrics.group_lag[group],
                    partitions=s.metrics.partition_lag.get(group, {}),
                    source=SOURCE_METRICS,
                )
            elif group in s.group_lag:
                point.update(lag=s.group_lag[group], partitions=s.partition_lag.get(group, {}), source=SOURCE_SNAPSHOTS)
            else:
                continue  # not there yet (or deleted): no point rather than a made-up 0
        else:
            if topic:
                names = [topic]
            else:
                names = [
                    n
                    for n in set(s.topic_rates) | set(s.metrics.topics if s.metrics else ())
                    if not n.startswith("__") and (visible is None or n in visible)
                ]
            rows = [_topic_rates(s, n) for n in names]
            point.update(
                messages_in=sum(r["messages_in"] for r in rows),
                messages_out=sum(r["messages_out"] for r in rows),
                bytes_in=None if s.metrics is None else _sum(rows, "bytes_in") or 0.0,
                bytes_out=None if s.metrics is None else _sum(rows, "bytes_out") or 0.0,
                source=SOURCE_METRICS if s.metrics is not None else SOURCE_SNAPSHOTS,
                # What the rates are averaged over: the metrics' window, else the tick.
                window_s=s.metrics.window_s if s.metrics is not None else s.window_s,
            )
            if not topic:
                point.update(
                    produce_p99_ms=s.metrics.produce_p99_ms if s.metrics else None,
                    fetch_p99_ms=s.metrics.fetch_p99_ms if s.metrics else None,
                )
        points.append(point)
    latest = points[-1]["source"] if points else _source(samples[-1] if samples else None)["source"]
    return JSONResponse(
        {
            "interval_s": state.sample_interval_s,
            "source": latest,
            "source_label": SOURCE_LABELS[latest],
            "points": points,
        }
    )
