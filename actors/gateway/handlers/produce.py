"""Produce: the client's record batches, as the bytes it sent, to the leader's append.

Each partition of a request is one call to its leader replica on this broker; the replica
validates the batches (headers, CRCs, producer sequences) and appends them unchanged.
acks=0 gets no response (an error closes the connection, as Kafka does, so the client
notices and refreshes its metadata); acks=1 answers after the leader's append, acks=all
after the in-sync replicas have the batches.

Each partition's part of the request becomes one ``ProduceRequest`` (its record bytes as
they came, the request's acks, timeout and transactional id), the same request rayqueue's own
producer sends. The leader verifies a transaction's first batch with the transaction
coordinator (KIP-890, ``actors.txn_verification``).

Order: Kafka appends a connection's produce requests in the order they came. Ray may start
an async actor's calls in any order, so each call carries a ``ProduceOrder``: this
connection's number for the call on that partition and the oldest one still unanswered,
and the replica appends them in number order (PartitionReplica.produce).
"""

from __future__ import annotations

import asyncio
import datetime
import secrets
from typing import Any

from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.errors import NONE, error_code_of, error_message_of
from actors.gateway.server import Api, RequestContext
from actors.protocol import AppendOrigin, ProduceRequest, ProduceResponse, ProduceTurns
from storage.batch_header import ATTRIBUTES_OFFSET, CURRENT_MAGIC, MAGIC_OFFSET, TRANSACTIONAL_MASK
from storage.errors import InvalidRecordError

PRODUCE_KEY = 0


# -- actor calls (one function each) --------------------------------------------------------


async def _append(replica: Any, request: ProduceRequest) -> ProduceResponse:
    return await replica.produce.remote(request)


# -- per-connection call order --------------------------------------------------------------


def _turns(ctx: RequestContext) -> ProduceTurns:
    turns = ctx.connection.handler_state.get("produce")
    if turns is None:
        turns = ctx.connection.handler_state["produce"] = ProduceTurns(f"gateway-{secrets.token_hex(8)}")
    return turns


# -- the request ------------------------------------------------------------------------------


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    """Produce v3-v11."""
    view: BrokerView = ctx.state
    acks = int(request.acks)
    timeout_ms = max(0, int(request.timeout.total_seconds() * 1000))
    turns = _turns(ctx)
    calls = []
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
        if code is not None:
            calls.extend(_refused(topic.name, part.index, code) for part in topic.partition_data)
            continue
        for part in topic.partition_data:
            # Numbered before anything is awaited: in the order the requests came.
            order = turns.take((topic.name, part.index))
            records = part.records if part.records is not None else b""
            call = ProduceRequest(
                records, acks, timeout_ms, origin=AppendOrigin.CLIENT, order=order, transactional_id=tid
            )
            calls.append(_produce_partition(view, turns, topic.name, part.index, call))
    results = await asyncio.gather(*calls)
    if acks == 0:
        failed = [(name, index, code, message) for name, index, code, message, _ in results if code != NONE]
        if failed:
            name, index, code, message = failed[0]
            ctx.connection.fail(f"acks=0 produce to {name}-{index} failed with error {code}: {message}")
        return None
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "responses")
    by_topic: dict[str, list[Any]] = {}
    for name, index, code, message, result in results:
        by_topic.setdefault(name, []).append(_partition_response(topic_cls, index, code, message, result))
    return ctx.schema.response_of(
        responses=tuple(
            make(resp_cls, "responses", name=name, partition_responses=tuple(parts)) for name, parts in by_topic.items()
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


async def _refused(topic: str, index: int, code: int) -> tuple[str, int, int, str | None, None]:
    """A partition the principal may not write to: its error, nothing appended."""
    return topic, index, code, None, None


async def _produce_partition(
    view: BrokerView, turns: ProduceTurns, topic: str, index: int, request: ProduceRequest
) -> tuple[str, int, int, str | None, ProduceResponse | None]:
    """(topic, partition, error code, error message, response) of one partition's append."""
    try:
        # Checked here too (the replica checks again): a bad acks value or an empty
        # partition answers without a round trip to the leader.
        request.checked()
        if not request.records:
            raise InvalidRecordError("a produce request must carry at least one record batch")
        leader = await view.leader(topic, index)
        response = await _append(leader.leader_handle, request)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the partition's error code
        code = error_code_of(exc)
        view.on_partition_error(topic, code)
        return topic, index, code, error_message_of(exc), None
    finally:
        turns.done((topic, index), request.order.number)  # type: ignore[union-attr]
    return topic, index, NONE, None, response


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
