"""Producer ids and transactions for Kafka clients, on the transaction coordinator actor.

InitProducerId without a transactional id: a fresh producer id at epoch 0 for an
idempotent producer (the Java client turns idempotence on by default), handed out from
the same blocks as rayqueue's own producers get; with one, the transactional id's
producer id with a bumped epoch, which fences older instances. AddPartitionsToTxn
(v0-v3, the client's form; v4's broker batch is not served), AddOffsetsToTxn, EndTxn and
TxnOffsetCommit are the coordinators' calls of the same names, so a Kafka client's
transaction is the transaction rayqueue's own producers and ``rayqueue transactions``
see. DescribeTransactions and ListTransactions read the coordinator's state.

With an authorizer, as Kafka's KafkaApis: every transactional request needs WRITE on its
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent InitProducerId
IDEMPOTENT_WRITE on the cluster or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED);
AddPartitionsToTxn WRITE on each topic (the others OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn
and TxnOffsetCommit READ on the group (and TxnOffsetCommit on each topic); Describe- and
ListTransactions DESCRIBE on the transactional ids.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.static.primitive import i32Timedelta

from actors.clock import SYSTEM
from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code, make, nested, topics_with_codes, topics_with_one_code
from actors.gateway.errors import COORDINATOR_UNAVAILABLE, NONE, error_code_of
from actors.gateway.server import Api, RequestContext
from actors.protocol import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)
from actors.types import OffsetAndMetadata, ProducerIdAndEpoch, TopicPartition, TransactionDescription
from storage.errors import (
    ClusterAuthorizationFailedError,
    OperationNotAttemptedError,
    TransactionalIdNotFoundError,
)

INIT_PRODUCER_ID_KEY = 22
ADD_PARTITIONS_TO_TXN_KEY = 24
ADD_OFFSETS_TO_TXN_KEY = 25
END_TXN_KEY = 26
TXN_OFFSET_COMMIT_KEY = 28
DESCRIBE_TRANSACTIONS_KEY = 65
LIST_TRANSACTIONS_KEY = 66
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


# -- actor calls (one function each) --------------------------------------------------------


async def _init_producer_id(coordinator: Any, request: InitProducerIdRequest) -> ProducerIdAndEpoch:
    return await coordinator.init_producer_id.remote(request)


async def _add_partitions(coordinator: Any, request: AddPartitionsToTxnRequest) -> None:
    await coordinator.add_partitions_to_txn.remote(request)


async def _add_offsets(coordinator: Any, request: AddOffsetsToTxnRequest) -> None:
    await coordinator.add_offsets_to_txn.remote(request)


async def _end_txn(coordinator: Any, request: EndTxnRequest) -> None:
    await coordinator.end_txn.remote(request)


async def _txn_offset_commit(group_coordinator: Any, request: TxnOffsetCommitRequest) -> None:
    await group_coordinator.txn_offset_commit.remote(request)


async def _describe(coordinator: Any, request: DescribeTransactionsRequest) -> list[TransactionDescription]:
    return await coordinator.describe_transactions.remote(request)


def _code(exc: BaseException) -> int:
    return error_code_of(exc, unavailable=COORDINATOR_UNAVAILABLE)


# -- the request ------------------------------------------------------------------------------


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    """InitProducerId v0-v5: idempotent producers, and transactional ones (fencing)."""
    view: BrokerView = ctx.state
    code, pid, epoch = NONE, -1, -1
    try:
        if request.transactional_id:
            authz.check(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, request.transactional_id)
        elif not authz.authorized_cluster(ctx, authz.Op.IDEMPOTENT_WRITE, count=False) and not (
            authz.authorized_by_resource_type(ctx, authz.Op.WRITE, authz.TOPIC)
        ):
            # An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
            raise ClusterAuthorizationFailedError(f"{ctx.principal} may not write idempotently")
        asked = InitProducerIdRequest(
            request.transactional_id or None,
            int(request.transaction_timeout.total_seconds() * 1000),
            int(getattr(request, "producer_id", -1)),
            int(getattr(request, "producer_epoch", -1)),
            principal=authz.client(ctx),
        )
        result = await _init_producer_id(view.transaction_coordinator, asked)
        pid, epoch = result.producer_id, result.epoch
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = error_code_of(exc, unavailable=COORDINATOR_UNAVAILABLE)
    return ctx.schema.response_of(
        throttle_time=ZERO_MS, error_code=error_code(code), producer_id=pid, producer_epoch=epoch
    )


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    """AddPartitionsToTxn v0-v3: every partition gets the one answer of the call."""
    view: BrokerView = ctx.state
    topics = request.v3_and_below_topics
    code = NONE
    codes: dict[str, int] = {}
    try:
        authz.check(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, request.v3_and_below_transactional_id)
        denied = authz.unauthorized_topics(ctx, authz.Op.WRITE, (t.name for t in topics))
        if denied:
            # As Kafka: the refused topics' error, OPERATION_NOT_ATTEMPTED for the others.
            codes = {t.name: OperationNotAttemptedError.code for t in topics}
            codes.update(dict.fromkeys(denied, authz.denied_code(authz.TOPIC)))
            raise OperationNotAttemptedError("some topics may not be written")
        await _add_partitions(
            view.transaction_coordinator,
            AddPartitionsToTxnRequest(
                request.v3_and_below_transactional_id,
                int(request.v3_and_below_producer_id),
                int(request.v3_and_below_producer_epoch),
                tuple(TopicPartition(t.name, int(p)) for t in topics for p in t.partitions),
                principal=authz.client(ctx),
            ),
        )
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    resp = ctx.schema.response
    topic_cls = nested(resp, "results_by_topic_v3_and_below")
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        results_by_topic_v3_and_below=tuple(
            make(
                resp,
                "results_by_topic_v3_and_below",
                name=t.name,
                results_by_partition=tuple(
                    make(
                        topic_cls,
                        "results_by_partition",
                        partition_index=p,
                        partition_error_code=error_code(codes.get(t.name, code)),
                    )
                    for p in t.partitions
                ),
            )
            for t in topics
        ),
    )


async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    """AddOffsetsToTxn v0-v3."""
    view: BrokerView = ctx.state
    code = NONE
    try:
        authz.check(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, request.transactional_id)
        authz.check(ctx, authz.Op.READ, authz.GROUP, request.group_id)
        await _add_offsets(
            view.transaction_coordinator,
            AddOffsetsToTxnRequest(
                request.transactional_id,
                int(request.producer_id),
                int(request.producer_epoch),
                request.group_id,
                principal=authz.client(ctx),
            ),
        )
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    return ctx.schema.response_of(throttle_time=ZERO_MS, error_code=error_code(code))


async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    """EndTxn v0-v3: answered once PrepareCommit/PrepareAbort is durable (the markers follow)."""
    view: BrokerView = ctx.state
    code = NONE
    try:
        authz.check(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, request.transactional_id)
        await _end_txn(
            view.transaction_coordinator,
            EndTxnRequest(
                request.transactional_id,
                int(request.producer_id),
                int(request.producer_epoch),
                bool(request.committed),
                principal=authz.client(ctx),
            ),
        )
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    return ctx.schema.response_of(throttle_time=ZERO_MS, error_code=error_code(code))


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    """TxnOffsetCommit v0-v3 (KIP-447's member and generation from v3), on the group coordinator."""
    view: BrokerView = ctx.state
    refused = None
    if not authz.authorized(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, request.transactional_id):
        refused = authz.denied_code(authz.TRANSACTIONAL_ID)
    elif not authz.authorized(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        refused = authz.denied_code(authz.GROUP)
    if refused is not None:
        return ctx.schema.response_of(
            throttle_time=ZERO_MS, topics=topics_with_one_code(ctx.schema.response, request.topics, refused)
        )
    denied = authz.unauthorized_topics(ctx, authz.Op.READ, (t.name for t in request.topics))
    offsets = {
        TopicPartition(t.name, int(p.partition_index)): OffsetAndMetadata(
            int(p.committed_offset), p.committed_metadata or "", -1, int(getattr(p, "committed_leader_epoch", -1))
        )
        for t in request.topics
        if t.name not in denied
        for p in t.partitions
    }
    code = NONE
    try:
        if denied and not offsets:
            raise OperationNotAttemptedError("no topic of the commit may be read")
        await _txn_offset_commit(
            view.group_coordinator,
            TxnOffsetCommitRequest(
                request.transactional_id,
                int(request.producer_id),
                int(request.producer_epoch),
                request.group_id,
                offsets,
                getattr(request, "member_id", ""),
                getattr(request, "group_instance_id", None),
                int(getattr(request, "generation_id", -1)),
                principal=authz.client(ctx),
            ),
        )
    except Exception as exc:  # noqa: BLE001 - every partition gets the error
        code = _code(exc)
    topic_denied = authz.denied_code(authz.TOPIC)
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        topics=topics_with_codes(ctx.schema.response, request.topics, lambda t: topic_denied if t in denied else code),
    )


async def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    """DescribeTransactions v0 (unknown ids: TRANSACTIONAL_ID_NOT_FOUND, as Kafka answers)."""
    view: BrokerView = ctx.state
    asked = tuple(request.transactional_ids)
    resp = ctx.schema.response
    state_cls = nested(resp, "transaction_states")
    refused = {t for t in asked if not authz.authorized(ctx, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID, t)}
    try:
        allowed = tuple(t for t in asked if t not in refused)
        found = {}
        if allowed:
            found = {
                d.transactional_id: d
                for d in await _describe(
                    view.transaction_coordinator, DescribeTransactionsRequest(allowed, authz.client(ctx))
                )
            }
        failed = NONE
    except Exception as exc:  # noqa: BLE001 - every id gets the error
        found, failed = {}, _code(exc)
    states = []
    for tid in asked:
        d = found.get(tid)
        if d is None or d.state == "Dead" or failed or tid in refused:
            code = failed or TransactionalIdNotFoundError.code
            if tid in refused:
                code = authz.denied_code(authz.TRANSACTIONAL_ID)
            states.append(
                make(
                    resp,
                    "transaction_states",
                    error_code=error_code(code),
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout=i32Timedelta.parse(datetime.timedelta(0)),
                    transaction_start_time=_EPOCH,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for tp in d.partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        # As Kafka: only the topics the principal may describe.
        by_topic = {t: by_topic[t] for t in authz.visible(ctx, authz.Op.DESCRIBE, authz.TOPIC, list(by_topic))}
        states.append(
            make(
                resp,
                "transaction_states",
                error_code=error_code(NONE),
                transactional_id=tid,
                transaction_state=str(d.state),
                transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=d.timeout_ms)),
                # -1 before the id's first transaction, as Kafka sends it (the tools print "None").
                transaction_start_time=_EPOCH + datetime.timedelta(milliseconds=d.start_ms),
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=tuple(make(state_cls, "topics", topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )
        )
    return ctx.schema.response_of(throttle_time=ZERO_MS, transaction_states=tuple(states))


async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    """ListTransactions v0-v1 (filters by state, producer id and, v1, duration)."""
    view: BrokerView = ctx.state
    states = {s.lower() for s in request.state_filters}
    pids = set(request.producer_id_filters)
    min_ms = int(getattr(request, "duration_filter", -1))
    now_ms = SYSTEM.wall_ms()
    code, described = NONE, []
    try:
        described = await _describe(view.transaction_coordinator, DescribeTransactionsRequest(None, authz.client(ctx)))
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        code = _code(exc)
    if described and authz.enabled(ctx):
        shown = set(
            authz.visible(ctx, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID, [d.transactional_id for d in described])
        )
        described = [d for d in described if d.transactional_id in shown]
    resp = ctx.schema.response
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(code),
        unknown_state_filters=(),
        transaction_states=tuple(
            make(
                resp,
                "transaction_states",
                transactional_id=d.transactional_id,
                producer_id=d.producer_id,
                transaction_state=str(d.state),
            )
            for d in described
            if (not states or str(d.state).lower() in states)
            and (not pids or d.producer_id in pids)
            and (min_ms < 0 or (d.start_ms >= 0 and now_ms - d.start_ms >= min_ms))
        ),
    )


APIS = (
    Api(INIT_PRODUCER_ID_KEY, 0, 5, handle_init_producer_id),
    Api(ADD_PARTITIONS_TO_TXN_KEY, 0, 3, handle_add_partitions_to_txn),
    Api(ADD_OFFSETS_TO_TXN_KEY, 0, 3, handle_add_offsets_to_txn),
    Api(END_TXN_KEY, 0, 3, handle_end_txn),
    Api(TXN_OFFSET_COMMIT_KEY, 0, 3, handle_txn_offset_commit),
    Api(DESCRIBE_TRANSACTIONS_KEY, 0, 0, handle_describe_transactions),
    Api(LIST_TRANSACTIONS_KEY, 0, 1, handle_list_transactions),
)
