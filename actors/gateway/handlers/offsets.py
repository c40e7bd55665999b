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

from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.errors import NONE, error_code_of
from actors.gateway.server import Api, RequestContext
from actors.protocol import EpochEndOffset, ListOffsetsRequest, OffsetForLeaderEpochRequest
from actors.types import OffsetAndTimestamp

LIST_OFFSETS_KEY = 2
OFFSET_FOR_LEADER_EPOCH_KEY = 23


# -- actor calls (one function each) --------------------------------------------------------


async def _list_offsets(replica: Any, request: ListOffsetsRequest) -> OffsetAndTimestamp:
    return await replica.list_offsets.remote(request)


async def _offset_for_leader_epoch(replica: Any, request: OffsetForLeaderEpochRequest) -> EpochEndOffset:
    return await replica.offset_for_leader_epoch.remote(request)


# -- shared: one call per partition -----------------------------------------------------------


async def per_partition(
    view: BrokerView, topic: str, partition: int, call: Callable[[Any], Awaitable[Any]]
) -> tuple[int, Any]:
    """(error code, result) of ``call(leader replica)`` for one partition led here."""
    try:
        leader = await view.leader(topic, partition)
        return NONE, await call(leader.leader_handle)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the partition's error code
        code = error_code_of(exc)
        view.on_partition_error(topic, code)
        return code, None


async def per_topic(
    resp_cls: type, topics: Any, name_field: str, answer: Callable[[str, Any], Awaitable[Any]]
) -> tuple:
    """The response's topics: ``answer(topic, partition request)`` for every partition of every
    topic, all at once, grouped back by topic (``name_field`` names the topic field)."""
    asked = [(getattr(t, name_field), t.partitions) for t in topics]
    answers = await asyncio.gather(*(answer(name, p) for name, parts in asked for p in parts))
    out, i = [], 0
    for name, parts in asked:
        out.append(make(resp_cls, "topics", **{name_field: name}, partitions=tuple(answers[i : i + len(parts)])))
        i += len(parts)
    return tuple(out)


# -- the requests ------------------------------------------------------------------------------


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    """ListOffsets v1-v7."""
    view: BrokerView = ctx.state
    isolation = int(getattr(request, "isolation_level", 0))
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "topics")

    async def one(name: str, p: Any) -> Any:
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

    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=await per_topic(resp_cls, request.topics, "name", one))


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    """OffsetForLeaderEpoch v2-v4 (consumers; follower fetching is Ray's business)."""
    view: BrokerView = ctx.state
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "topics")

    async def one(name: str, p: Any) -> Any:
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

    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=await per_topic(resp_cls, request.topics, "topic", one))


APIS = (
    Api(LIST_OFFSETS_KEY, 1, 7, handle_list_offsets),
    Api(OFFSET_FOR_LEADER_EPOCH_KEY, 2, 4, handle_offset_for_leader_epoch),
)
