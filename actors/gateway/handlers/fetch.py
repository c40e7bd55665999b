"""Fetch: the leader's stored batches, as they are on disk, to the client.

A request for one partition is one call to its leader replica's host, which reads whole
batches up to the high watermark (the last stable offset for read_committed, with the
aborted transactions of the range), fences stale leader epochs and long-polls. A request for
several is one call per host that leads some of them (``fetch_messages``: one with the
default placement, one host per broker): it reads them all and, with fewer than
``min_bytes``, parks as one operation until enough bytes are readable or ``max_wait_ms``
passed, as Kafka's DelayedFetch (however many partitions a request names, it holds one of
the host's calls). The listener's own host is called directly, in this process, and its
appends wake the parked fetch; other hosts by Ray (``actors.gateway.hosts``). The event
loop never blocks on any of it, so one client's long poll holds up no other.

Bounds: ``max_wait_ms`` is cut to ``rayqueue.fetch.wait.max.ms`` (Kafka's clients give up
on a request after ``request.timeout.ms``, 30 s by default, so no client waits longer). When
the connection closes, its fetch is cancelled with it: the local wait, or the remote host's
call (``ray.cancel``: Ray stops an async actor call's coroutine only when told; cancelling
the await alone leaves it parked in the host).

Byte limits as Kafka's: ``partition_max_bytes`` per partition, ``max_bytes`` (capped by the
broker's ``fetch.max.bytes``) for the response, counted in request order and cut at batch
boundaries; the first batch is returned even when larger (KIP-74). Fetch sessions
(KIP-227) are answered sessionless (session id 0): the client then sends full requests,
which the protocol allows.

Read-ahead: a consumer reading a backlog sends its next Fetch for the offset where the
last answer ended. When a partition of another host already had more readable data than
was returned, the listener asks that replica for the next range as soon as it answers, so
the Ray call overlaps the client's own work (a partition of the listener's own host is read
directly when asked: there is no call to overlap); the next request takes the answer if it asks for
exactly that (same offset, size, isolation, epoch), else it is dropped. An empty read-ahead
is never returned: the request then long-polls as usual. A connection holds at most
``READ_AHEAD_BYTES`` of read-ahead.

Not done: a consumer's ``last_fetched_epoch`` is not checked for divergence here (no
``diverging_epoch`` answer); clients validate their position with OffsetForLeaderEpoch
after a leader change, which the gateway serves.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.errors import NONE, error_code_of
from actors.gateway.hosts import Hosts
from actors.gateway.server import Api, RequestContext
from actors.protocol import FetchRequest, FetchResponse, IsolationLevel
from actors.protocol_broker import FetchMessagesRequest, FetchPartition
from storage.batch_header import batch_boundaries, read_header
from storage.errors import FetchSessionIdNotFoundError, UnknownTopicIdError

FETCH_KEY = 1
READ_COMMITTED = IsolationLevel.READ_COMMITTED
READ_AHEAD_BYTES = 16 * 1024 * 1024  # per connection
READ_AHEAD_DEPTH = 3  # ranges per partition
READ_AHEAD_CALLS = 64  # read-ahead calls one connection has under way, however small


# -- cancelling -----------------------------------------------------------------------------


async def _answer(future: asyncio.Future) -> Any:
    """A read-ahead's answer; when this wait is cancelled (the connection closed), the
    read-ahead is cancelled as well."""
    try:
        return await future
    except asyncio.CancelledError:
        future.cancel()
        raise


# -- the request ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Partition:
    """One partition of a fetch request and what became of it."""

    topic: str | None
    topic_id: Any
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int
    handle: Any = None
    code: int = NONE
    result: FetchResponse | None = None
    ahead: asyncio.Future | None = None  # a read-ahead answering this request
    next_offset: int = -1  # where the records returned end

    def request(self, isolation: int, max_wait_ms: int = 0, min_bytes: int = 1) -> FetchRequest:
        """This partition's FetchRequest."""
        return FetchRequest(self.offset, self.max_bytes, max_wait_ms, min_bytes, isolation, self.leader_epoch)

    def call(self, hosts: Hosts, max_wait_ms: int, min_bytes: int, isolation: int) -> Awaitable[FetchResponse]:
        """This partition's fetch from its leader replica."""
        return hosts.replica(self.handle).fetch(self.request(isolation, max_wait_ms, min_bytes))

    def asked(self) -> FetchPartition:
        """This partition in its host's fetch_messages."""
        return FetchPartition(self.topic, self.partition, self.offset, self.max_bytes, self.leader_epoch)  # type: ignore[arg-type]


async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    """Fetch v4-v17, sessionless."""
    view: BrokerView = ctx.state
    version = ctx.version
    max_wait_ms = min(
        max(0, int(request.max_wait.total_seconds() * 1000)), int(view.config["rayqueue.fetch.wait.max.ms"])
    )
    min_bytes = max(1, int(request.min_bytes))
    max_bytes = min(int(getattr(request, "max_bytes", 2**31 - 1)), int(view.config["fetch.max.bytes"]))
    isolation = int(getattr(request, "isolation_level", 0))  # the replica refuses a bad value
    session_id = int(getattr(request, "session_id", 0))
    if session_id != 0:
        # The gateway never hands out a session id, so a client cannot hold one of ours.
        return ctx.schema.response_of(
            throttle_time=ZERO_MS,
            error_code=error_code(FetchSessionIdNotFoundError.code),
            session_id=0,
            responses=(),
        )
    by_id = version >= 13
    if by_id:
        await view.resolve_ids([t.topic_id for t in request.topics])
    parts: list[_Partition] = []
    for t in request.topics:
        name, tid, code = (None, t.topic_id, NONE) if by_id else (t.topic, None, NONE)
        if by_id:
            try:
                name = view.topic_name(tid)
            except UnknownTopicIdError:
                code = UnknownTopicIdError.code
        for p in t.partitions:
            part = _Partition(
                name,
                tid,
                p.partition,
                p.fetch_offset,
                max(0, min(p.partition_max_bytes, max_bytes)),
                getattr(p, "current_leader_epoch", -1),
                code=code,
            )
            parts.append(part)
    if authz.enabled(ctx):
        # A consumer's fetch needs READ on each topic (followers are Ray's business here).
        readable: dict[str, bool] = {}
        for part in parts:
            if part.code == NONE and part.topic is not None:
                ok = readable.get(part.topic)
                if ok is None:
                    ok = readable[part.topic] = authz.authorized(ctx, authz.Op.READ, authz.TOPIC, part.topic)
                if not ok:
                    part.code = authz.denied_code(authz.TOPIC)
    for part in parts:
        if part.code == NONE:
            try:
                part.handle = (await view.leader(part.topic, part.partition)).leader_handle  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - the partition's error code
                part.code = error_code_of(exc)
    live = [p for p in parts if p.handle is not None]
    aheads = _read_aheads(ctx)
    for part in live:
        part.ahead = aheads.take(part, isolation)
    if len(live) == 1 and not await _take_ahead(view, live):
        await _read_one(view, live[0], max_wait_ms, min_bytes, isolation)
    elif len(live) > 1:
        await _read_many(view, live, (max_wait_ms, min_bytes, max_bytes), isolation)
    response = _response(ctx, parts, max_bytes, isolation, by_id)
    aheads.start(live, isolation)
    return response


async def _take_ahead(view: BrokerView, parts: list[_Partition]) -> bool:
    """Answer a one-partition request from its read-ahead; False when there is none, or it
    found nothing (the request then long-polls)."""
    part = parts[0]
    if part.ahead is None:
        return False
    ahead, part.ahead = part.ahead, None
    try:
        result = await ahead
    except Exception as exc:  # noqa: BLE001 - an error answers as a fresh call's would
        result = exc
    if not isinstance(result, BaseException) and not result.records:
        return False
    view.read_ahead_hits += 1
    _settle(view, part, result)
    return True


async def _read_one(view: BrokerView, part: _Partition, max_wait_ms: int, min_bytes: int, isolation: int) -> None:
    """One partition: its replica's fetch, long-polling in the replica."""
    try:
        result = await part.call(view.hosts, max_wait_ms, min_bytes, isolation)
    except Exception as exc:  # noqa: BLE001 - the partition's error code
        result = exc
    _settle(view, part, result)


async def _read_many(view: BrokerView, parts: list[_Partition], wait: tuple[int, int, int], isolation: int) -> None:
    """Several partitions: the read-aheads made for them, then one fetch_messages call per
    leader host for the rest, long-polling for what ``min_bytes`` still misses."""
    max_wait_ms, min_bytes, max_bytes = wait
    ahead = [p for p in parts if p.ahead is not None]
    if ahead:
        view.read_ahead_hits += len(ahead)
        results = await asyncio.gather(*(_answer(p.ahead) for p in ahead), return_exceptions=True)
        for part, result in zip(ahead, results, strict=True):
            part.ahead = None
            _settle(view, part, result)
    got = sum(len(p.result.records) for p in ahead if p.result is not None)
    if got >= min_bytes or any(p.code != NONE for p in ahead):
        max_wait_ms = 0  # an error answers at once, as Kafka's DelayedFetch does
    by_host: dict[Any, list[_Partition]] = {}
    for part in parts:
        if part.result is None and part.code == NONE:
            by_host.setdefault(part.handle.host_key, []).append(part)
    groups = list(by_host.values())
    if not groups:
        return
    calls = [
        view.hosts.host(group[0].handle).fetch_messages(
            FetchMessagesRequest(
                tuple(p.asked() for p in group), max_wait_ms, max(0, min_bytes - got), max_bytes, isolation
            )
        )
        for group in groups
    ]
    if len(calls) == 1:
        try:
            answers = [await calls[0]]
        except Exception as exc:  # noqa: BLE001 - every partition's error
            answers = [exc]
    else:
        answers = await asyncio.gather(*calls, return_exceptions=True)
    for group, answer in zip(groups, answers, strict=True):
        for i, part in enumerate(group):
            _settle(view, part, answer if isinstance(answer, BaseException) else answer[i])


class _Chain:
    """The read-aheads of one partition: consecutive ranges, each started when the one
    before it answered with records and more was readable."""

    __slots__ = ("params", "ranges", "closed")

    def __init__(self, params: tuple) -> None:
        self.params = params  # (replica, partition max bytes, isolation, leader epoch)
        self.ranges: collections.deque[tuple[int, asyncio.Future]] = collections.deque()
        self.closed = False


class _ReadAheads:
    """One connection's read-aheads, by partition (see the module docstring)."""

    def __init__(self, hosts: Hosts) -> None:
        self._hosts = hosts
        self._chains: dict[tuple[str | None, int], _Chain] = {}
        self._held = 0  # ranges held or under way, over every chain

    def take(self, part: _Partition, isolation: int) -> asyncio.Future | None:
        """The read-ahead made for exactly this partition request, or None (a chain that
        does not continue at this offset with these parameters is dropped)."""
        tp = (part.topic, part.partition)
        chain = self._chains.get(tp)
        if chain is None:
            return None
        if chain.params != (part.handle, part.max_bytes, isolation, part.leader_epoch) or not chain.ranges:
            self._drop(tp)
            return None
        offset, future = chain.ranges[0]
        if offset != part.offset:
            self._drop(tp)
            return None
        chain.ranges.popleft()
        self._held -= 1
        self._extend(tp, chain)
        return future

    def start(self, parts: list[_Partition], isolation: int) -> None:
        """Read ahead for the partitions that returned records and have more readable now."""
        for part in parts:
            result = part.result
            tp = (part.topic, part.partition)
            if result is None or part.next_offset < 0 or tp in self._chains or self._hosts.is_local(part.handle):
                continue
            readable = result.last_stable_offset if isolation == READ_COMMITTED else result.high_watermark
            if readable > part.next_offset:
                chain = self._chains[tp] = _Chain((part.handle, part.max_bytes, isolation, part.leader_epoch))
                self._add(tp, chain, part.next_offset)

    def _add(self, tp: tuple[str | None, int], chain: _Chain, offset: int) -> None:
        replica, max_bytes, isolation, epoch = chain.params
        if (
            len(chain.ranges) >= READ_AHEAD_DEPTH
            or self._held >= READ_AHEAD_CALLS
            or (self._held + 1) * max_bytes > READ_AHEAD_BYTES
        ):
            return
        future = asyncio.ensure_future(
            self._hosts.replica(replica).fetch(FetchRequest(offset, max_bytes, 0, 1, isolation, epoch))
        )
        chain.ranges.append((offset, future))
        self._held += 1
        future.add_done_callback(lambda _: self._extend(tp, chain))

    def _extend(self, tp: tuple[str | None, int], chain: _Chain) -> None:
        """Continue the chain after its last range, once that answered with records."""
        if chain.closed or not chain.ranges:
            return
        _, last = chain.ranges[-1]
        if not last.done() or last.cancelled() or last.exception() is not None:
            return
        result = last.result()
        readable = result.last_stable_offset if chain.params[2] == READ_COMMITTED else result.high_watermark
        following = _next_offset(result.records) if result.records else -1
        if 0 <= following < readable:
            self._add(tp, chain, following)

    def _drop(self, tp: tuple[str | None, int]) -> None:
        chain = self._chains.pop(tp, None)
        if chain is None:
            return
        chain.closed = True
        for _, future in chain.ranges:
            future.cancel()
        self._held -= len(chain.ranges)
        chain.ranges.clear()

    def close(self) -> None:
        """Drop every read-ahead (the connection ended)."""
        for tp in list(self._chains):
            self._drop(tp)


def _read_aheads(ctx: RequestContext) -> _ReadAheads:
    aheads = ctx.connection.handler_state.get("fetch")
    if aheads is None:
        aheads = ctx.connection.handler_state["fetch"] = _ReadAheads(ctx.state.hosts)
        ctx.connection.on_close.append(aheads.close)
    return aheads


def _settle(view: BrokerView, part: _Partition, result: Any) -> None:
    if isinstance(result, BaseException):
        part.code = error_code_of(result)
        part.result = None
        if part.topic is not None:
            view.on_partition_error(part.topic, part.code)
    else:
        part.code = NONE
        part.result = result


def _response(ctx: RequestContext, parts: list[_Partition], max_bytes: int, isolation: int, by_id: bool) -> Any:
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    aborted_cls = nested(part_cls, "aborted_transactions")
    budget = max_bytes
    first = True
    topics: list[tuple[Any, list[Any]]] = []
    for part in parts:
        key = part.topic_id if by_id else part.topic
        if not topics or topics[-1][0] != key:
            topics.append((key, []))
        result = part.result
        if result is None:
            topics[-1][1].append(
                make(
                    topic_cls,
                    "partitions",
                    partition_index=part.partition,
                    error_code=error_code(part.code),
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    records=b"",
                )
            )
            continue
        records: Any = result.records
        if len(records) > budget:
            records = _cut(records, budget, keep_one=first)
        if records:
            first = False
            budget -= len(records)
            part.next_offset = _next_offset(records)
        aborted = None
        if isolation == READ_COMMITTED:
            aborted = tuple(
                aborted_cls(producer_id=pid, first_offset=offset) for pid, offset in result.aborted_transactions
            )
        topics[-1][1].append(
            make(
                topic_cls,
                "partitions",
                partition_index=part.partition,
                error_code=error_code(NONE),
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                log_start_offset=result.log_start_offset,
                aborted_transactions=aborted,
                preferred_read_replica=-1,
                records=records,
            )
        )
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(NONE),
        session_id=0,
        responses=tuple(
            make(resp_cls, "responses", topic=key, topic_id=key, partitions=tuple(items)) for key, items in topics
        ),
    )


def _next_offset(records: Any) -> int:
    """The offset after the last whole batch of ``records`` (-1 when there is none)."""
    bounds = batch_boundaries(records)
    return read_header(records, bounds[-1][0]).next_offset if bounds else -1


def _cut(records: bytes, budget: int, keep_one: bool) -> memoryview | bytes:
    """The whole batches of ``records`` that fit ``budget`` (at least one when ``keep_one``),
    as a view: no copy."""
    end = 0
    for position, size in batch_boundaries(records):
        if position + size > budget and not (keep_one and end == 0):
            break
        end = position + size
    return memoryview(records)[:end] if end else b""


APIS = (Api(FETCH_KEY, 4, 17, handle_fetch),)
