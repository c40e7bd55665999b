"""ListOffsets and OffsetForLeaderEpoch, answered by each partition's leader replica.

ListOffsets: earliest (-2), latest (-1: the high watermark, or the last stable offset for
read_committed), max timestamp (-3, KIP-734), or the first offset at or after a
timestamp. OffsetForLeaderEpoch: where an epoch ended in the leader's log, which clients
use to detect a log that diverged under them after a leader change (KIP-320).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.errors import NONE, error_code_of
from actors.gateway.hosts import ReplicaCalls
from actors.gateway.server import PACE, Api, RequestContext
from actors.protocol import EpochEndOffset, ListOffsetsRequest, OffsetForLeaderEpochRequest
from actors.types import OffsetAndTimestamp

LIST_OFFSETS_KEY = 2
OFFSET_FOR_LEADER_EPOCH_KEY = 23
PARTITION_CALLS = 256  # replica calls of one request in flight at once


# -- replica calls (one function each) ------------------------------------------------------


async def _list_offsets(replica: ReplicaCalls, request: ListOffsetsRequest) -> OffsetAndTimestamp:
    return await replica.list_offsets(request)


async def _offset_for_leader_epoch(replica: ReplicaCalls, request: OffsetForLeaderEpochRequest) -> EpochEndOffset:
    return await replica.offset_for_leader_epoch(request)


# -- shared: one call per partition -----------------------------------------------------------


async def per_partition(
    view: BrokerView, topic: str, partition: int, call: Callable[[ReplicaCalls], Awaitable[Any]]
) -> tuple[int, Any]:
    """(error code, result) of ``call(leader replica's calls)`` for one partition led here
    (a direct call when this process holds it, else a Ray call)."""
    try:
        leader = await view.leader(topic, partition)
        return NONE, await call(view.hosts.replica(leader.leader_handle))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the partition's error code
        code = error_code_of(exc)
        view.on_partition_error(topic, code)
        return code, None


def _topic_denied(_: int) -> int:
    return authz.denied_code(authz.TOPIC)


async def per_topic(
    view: BrokerView,
    resp_cls: type,
    topics: Any,
    name_field: str,
    index_field: str,
    answer: Callable[[str, Any, int | None], Awaitable[Any]],
    ctx: RequestContext | None = None,
    op: authz.Op | None = None,
) -> tuple:
    """The response's topics: ``answer(topic, partition request, code)`` for every partition
    of every topic, grouped by topic (``name_field`` and ``index_field`` name the topic and
    partition fields). ``code`` is None for a partition led here (``answer`` then calls its
    replica; up to PARTITION_CALLS at once), else the error it gets without a call.

    Which partitions are led here is found once per topic (at most one metadata refresh,
    never one per partition), and a request naming tens of thousands of partitions yields
    to the event loop every PACE of them, so other connections are served meanwhile.

    With ``ctx`` and ``op``, a topic the principal may not ``op`` has every partition
    answered TOPIC_AUTHORIZATION_FAILED, without a call."""
    out = []
    for t in topics:
        name = getattr(t, name_field)
        parts = t.partitions
        if ctx is not None and op is not None and not authz.authorized(ctx, op, authz.TOPIC, name):
            refusal: Callable[[int], int | None] = _topic_denied
        else:
            refusal = await view.refusals(name, [getattr(p, index_field) for p in parts])
        entries: list[Any] = [None] * len(parts)
        calls = []
        for i, p in enumerate(parts):
            code = refusal(getattr(p, index_field))
            if code is None:
                calls.append(i)
            else:
                entries[i] = await answer(name, p, code)  # no call: runs through at once
            if i % PACE == PACE - 1:
                await asyncio.sleep(0)
        for at in range(0, len(calls), PARTITION_CALLS):
            batch = calls[at : at + PARTITION_CALLS]
            answers = await asyncio.gather(*(answer(name, parts[i], None) for i in batch))
            for i, entry in zip(batch, answers, strict=True):
                entries[i] = entry
        out.append(make(resp_cls, "topics", **{name_field: name}, partitions=tuple(entries)))
    return tuple(out)


# -- the requests ------------------------------------------------------------------------------


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    """ListOffsets v1-v7."""
    view: BrokerView = ctx.state
    isolation = int(getattr(request, "isolation_level", 0))
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "topics")

    async def one(name: str, p: Any, code: int | None) -> Any:
        found = None
        if code is None:
            asked = ListOffsetsRequest(p.timestamp, getattr(p, "current_leader_epoch", -1), isolation)
            code, found = await per_partition(view, name, p.partition_index, lambda r: _list_offsets(r, asked))
        if found is None:
            return make(topic_cls, "partitions", partition_index=p.partition_index, error_code=error_code(code))
        return make(
            topic_cls,
            "partitions",
            partition_index=p.partition_index,
            error_code=error_code(NONE),
            timestamp=found.timestamp,
            offset=found.offset,
            leader_epoch=found.leader_epoch,
        )

    topics = await per_topic(view, resp_cls, request.topics, "name", "partition_index", one, ctx, authz.Op.DESCRIBE)
    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=topics)


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    """OffsetForLeaderEpoch v2-v4 (consumers; follower fetching is Ray's business)."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "topics")

    async def one(name: str, p: Any, code: int | None) -> Any:
        found = None
        if code is None:
            asked = OffsetForLeaderEpochRequest(p.leader_epoch, p.current_leader_epoch)
            code, found = await per_partition(view, name, p.partition, lambda r: _offset_for_leader_epoch(r, asked))
        return make(
            topic_cls,
            "partitions",
            error_code=error_code(code),
            partition=p.partition,
            leader_epoch=found.leader_epoch if found is not None else -1,
            end_offset=found.end_offset if found is not None else -1,
        )

    topics = await per_topic(view, resp_cls, request.topics, "topic", "partition", one, ctx, authz.Op.DESCRIBE)
    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=topics)


APIS = (
    Api(LIST_OFFSETS_KEY, 1, 7, handle_list_offsets),
    Api(OFFSET_FOR_LEADER_EPOCH_KEY, 2, 4, handle_offset_for_leader_epoch),
)
