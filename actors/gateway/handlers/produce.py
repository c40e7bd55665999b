"""Produce: the client's record batches, as the bytes they came in, to the leaders' appends.

A request's partitions are sent to their leaders' hosts together: one ``append_records`` call
per host, carrying every partition of the request that host leads (Kafka's ReplicaManager
takes a request's partitions at once, ``appendRecords``): a direct call on the listener's
own host, a Ray call on another (``actors.gateway.hosts``); each replica validates its batches
(headers, CRCs, producer sequences) and appends them unchanged, and each partition is
answered on its own. acks=0 gets no response (an error closes the connection, as Kafka does,
so the client notices and refreshes its metadata); acks=1 answers after the leaders'
appends, acks=all after the in-sync replicas have the batches.

Each partition's part of the request becomes one ``ProduceRequest`` (its record bytes as
they came, the request's acks, timeout and transactional id), the same request rayqueue's own
producer sends. The leader verifies a transaction's first batch with the transaction
coordinator (KIP-890, ``actors.txn_verification``).

Order: Kafka appends a connection's produce requests in the order they came. The listener
processes one request per connection at a time by default; with more in flight, or across
Ray (which may start an async actor's calls in any order), each partition's request carries a ``ProduceOrder``:
this connection's number for the call on that partition and the oldest one still
unanswered, and the replica appends them in number order (PartitionReplica.produce).
"""

from __future__ import annotations

import asyncio
import datetime
import secrets
from dataclasses import dataclass
from typing import Any

from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.errors import NONE, error_code_of, error_message_of
from actors.gateway.server import Api, RequestContext
from actors.protocol import AppendOrigin, ProduceRequest, ProduceResponse, ProduceTurns
from actors.protocol_broker import PartitionRequests
from storage.batch_header import ATTRIBUTES_OFFSET, CURRENT_MAGIC, MAGIC_OFFSET, TRANSACTIONAL_MASK
from storage.errors import InvalidRecordError

PRODUCE_KEY = 0


# -- per-connection call order --------------------------------------------------------------


def _turns(ctx: RequestContext) -> ProduceTurns:
    turns = ctx.connection.handler_state.get("produce")
    if turns is None:
        turns = ctx.connection.handler_state["produce"] = ProduceTurns(f"gateway-{secrets.token_hex(8)}")
    return turns


# -- the request ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Partition:
    """One partition of a produce request and what became of it."""

    topic: str
    index: int
    request: ProduceRequest | None = None  # None: refused before it was numbered
    code: int = NONE
    message: str | None = None
    result: ProduceResponse | None = None
    leader: Any = None  # its leader's ReplicaRef

    def fail(self, view: BrokerView, exc: BaseException) -> None:
        """The partition's error: its code (and forget the metadata it may have been sent by)."""
        self.code = error_code_of(exc)
        self.message = error_message_of(exc)
        view.on_partition_error(self.topic, self.code)


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    """Produce v3-v11."""
    view: BrokerView = ctx.state
    acks = int(request.acks)
    timeout_ms = max(0, int(request.timeout.total_seconds() * 1000))
    turns = _turns(ctx)
    parts: list[_Partition] = []
    # Kafka's KafkaApis: transactional records need their transactional id and WRITE on it
    # (else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED: a batch with the
    # transactional bit and no id is a forged one), and every topic WRITE; a refused
    # partition is answered without reaching its leader.
    refused: int | None = None
    tid = request.transactional_id or None
    if _has_transactional_records(request) and (
        tid is None or not authz.authorized(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, tid)
    ):
        refused = authz.denied_code(authz.TRANSACTIONAL_ID)
    for topic in request.topic_data:
        code = refused
        if code is None and not authz.authorized(ctx, authz.Op.WRITE, authz.TOPIC, topic.name):
            code = authz.denied_code(authz.TOPIC)
        for part in topic.partition_data:
            if code is not None:
                parts.append(_Partition(topic.name, part.index, code=code))
                continue
            # Numbered before anything is awaited: in the order the requests came.
            order = turns.take((topic.name, part.index))
            records = part.records if part.records is not None else b""
            call = ProduceRequest(
                records, acks, timeout_ms, origin=AppendOrigin.CLIENT, order=order, transactional_id=tid
            )
            parts.append(_Partition(topic.name, part.index, call))
    try:
        await _produce(view, [p for p in parts if p.request is not None])
    finally:
        for part in parts:
            if part.request is not None:
                turns.done((part.topic, part.index), part.request.order.number)  # type: ignore[union-attr]
    if acks == 0:
        failed = [p for p in parts if p.code != NONE]
        if failed:
            first = failed[0]
            ctx.connection.fail(
                f"acks=0 produce to {first.topic}-{first.index} failed with error {first.code}: {first.message}"
            )
        return None
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "responses")
    by_topic: dict[str, list[Any]] = {}
    for part in parts:
        by_topic.setdefault(part.topic, []).append(
            _partition_response(topic_cls, part.index, part.code, part.message, part.result)
        )
    return ctx.schema.response_of(
        responses=tuple(
            make(resp_cls, "responses", name=name, partition_responses=tuple(items)) for name, items in by_topic.items()
        ),
        throttle_time=ZERO_MS,
    )


def _has_transactional_records(request: Any) -> bool:
    """Whether some partition's first batch is transactional (Kafka's
    RequestUtils.hasTransactionalRecords); one byte read per partition."""
    for topic in request.topic_data:
        for part in topic.partition_data:
            records = part.records
            if (
                records is not None
                and len(records) > ATTRIBUTES_OFFSET + 1
                and records[MAGIC_OFFSET] == CURRENT_MAGIC
                and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK
            ):
                return True
    return False


async def _produce(view: BrokerView, parts: list[_Partition]) -> None:
    """Append every partition: their leaders looked up, then one call per leader host."""

    async def route(part: _Partition) -> None:
        try:
            # Checked here too (the replica checks again): a bad acks value or an empty
            # partition answers without a round trip to the leader.
            part.request.checked()  # type: ignore[union-attr]
            if not part.request.records:  # type: ignore[union-attr]
                raise InvalidRecordError("a produce request must carry at least one record batch")
            part.leader = (await view.leader(part.topic, part.index)).leader_handle
        except Exception as exc:  # noqa: BLE001 - every failure becomes the partition's error code
            part.fail(view, exc)

    if len(parts) == 1:
        await route(parts[0])
    else:
        await asyncio.gather(*(route(part) for part in parts))
    by_host: dict[Any, tuple[Any, list[_Partition]]] = {}
    for part in parts:
        if part.leader is not None:
            by_host.setdefault(part.leader.host_key, (part.leader, []))[1].append(part)

    async def send(leader: Any, group: list[_Partition]) -> None:
        request = PartitionRequests(tuple((p.topic, p.index, p.request) for p in group))
        try:
            answers = await view.hosts.host(leader).append_records(request)
        except Exception as exc:  # noqa: BLE001 - the host died or failed: every partition's error
            answers = [exc] * len(group)
        for part, answer in zip(group, answers, strict=True):
            if isinstance(answer, BaseException):
                part.fail(view, answer)
            else:
                part.result = answer

    if len(by_host) == 1:
        await send(*next(iter(by_host.values())))
    else:
        await asyncio.gather(*(send(leader, group) for leader, group in by_host.values()))


def _partition_response(
    topic_cls: type, index: int, code: int, message: str | None, result: ProduceResponse | None
) -> Any:
    if result is None:
        return make(
            topic_cls,
            "partition_responses",
            index=index,
            error_code=error_code(code),
            base_offset=-1,
            log_append_time=None,
            log_start_offset=-1,
            record_errors=(),
            error_message=message,
        )
    append_time = None
    if result.log_append_time_ms >= 0:
        append_time = datetime.datetime.fromtimestamp(result.log_append_time_ms / 1000, tz=datetime.UTC)
    return make(
        topic_cls,
        "partition_responses",
        index=index,
        error_code=error_code(NONE),
        base_offset=result.base_offset,
        log_append_time=append_time,
        log_start_offset=result.log_start_offset,
        record_errors=(),
        error_message=None,
    )


APIS = (Api(PRODUCE_KEY, 3, 11, handle_produce),)
