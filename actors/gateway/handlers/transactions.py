"""Producer ids for Kafka clients, from the transaction coordinator.

InitProducerId without a transactional id: a fresh producer id at epoch 0 for an
idempotent producer (the Java client turns idempotence on by default), handed out from
the same blocks as rayqueue's own producers get. With a transactional id it is part 2's
(transactions through the gateway are not served yet: FindCoordinator, AddPartitionsToTxn
and EndTxn are not advertised, so clients do not get this far).
"""

from __future__ import annotations

from typing import Any

from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code
from actors.gateway.errors import COORDINATOR_UNAVAILABLE, NONE, error_code_of
from actors.gateway.server import Api, RequestContext
from actors.protocol import InitProducerIdRequest
from actors.types import ProducerIdAndEpoch
from storage.errors import InvalidRequestError

INIT_PRODUCER_ID_KEY = 22


# -- actor calls (one function each) --------------------------------------------------------


async def _init_producer_id(coordinator: Any, request: InitProducerIdRequest) -> ProducerIdAndEpoch:
    return await coordinator.init_producer_id.remote(request)


# -- the request ------------------------------------------------------------------------------


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    """InitProducerId v0-v5, idempotent producers only."""
    view: BrokerView = ctx.state
    code, pid, epoch = NONE, -1, -1
    if request.transactional_id:
        code = InvalidRequestError.code
    else:
        try:
            asked = InitProducerIdRequest(
                None,
                int(request.transaction_timeout.total_seconds() * 1000),
                int(getattr(request, "producer_id", -1)),
                int(getattr(request, "producer_epoch", -1)),
            )
            result = await _init_producer_id(view.transaction_coordinator, asked)
            pid, epoch = result.producer_id, result.epoch
        except Exception as exc:  # noqa: BLE001 - answered as its error code
            code = error_code_of(exc, unavailable=COORDINATOR_UNAVAILABLE)
    return ctx.schema.response_of(
        throttle_time=ZERO_MS, error_code=error_code(code), producer_id=pid, producer_epoch=epoch
    )


APIS = (Api(INIT_PRODUCER_ID_KEY, 0, 5, handle_init_producer_id),)
