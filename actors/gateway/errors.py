"""From what an actor call raised to the Kafka error code a client gets.

Every rayqueue error already carries Kafka's code (``storage.errors``), and Ray's own
failures become Kafka errors in ``actors.errors.as_kafka_error``, the one conversion the
Python clients use too. What the gateway adds is what a dead actor means to a Kafka
client, by the kind of actor called: a replica that is gone means the client must look
for the partition's leader again (NOT_LEADER_OR_FOLLOWER), a coordinator that is gone
COORDINATOR_NOT_AVAILABLE, the controller REQUEST_TIMED_OUT (retry later).
"""

from __future__ import annotations

import asyncio
import logging

from actors.errors import as_kafka_error
from actors.metrics import count_request_error
from storage.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownServerError,
)

logger = logging.getLogger(__name__)

NONE = 0
# What a dead or unreachable actor means, by the kind of actor called.
REPLICA_UNAVAILABLE: type[KafkaError] = NotLeaderOrFollowerError
COORDINATOR_UNAVAILABLE: type[KafkaError] = CoordinatorNotAvailableError
CONTROLLER_UNAVAILABLE: type[KafkaError] = RequestTimedOutError


def error_code_of(exc: BaseException, unavailable: type[KafkaError] = REPLICA_UNAVAILABLE) -> int:
    """Kafka's error code for an exception raised by an actor call.

    ``unavailable`` is the error for an actor that died or cannot be reached. A client-side
    deadline (KafkaTimeoutError, asyncio's TimeoutError) is REQUEST_TIMED_OUT; anything
    unexpected is UNKNOWN_SERVER_ERROR, logged with its traceback.
    """
    error = as_kafka_error(exc, unavailable)
    if isinstance(error, KafkaTimeoutError | TimeoutError | asyncio.TimeoutError):
        count_request_error(RequestTimedOutError())
        return RequestTimedOutError.code
    if isinstance(error, KafkaError):
        count_request_error(error)
        return error.code
    logger.error("unexpected error in a gateway request", exc_info=exc)
    count_request_error(UnknownServerError())
    return UnknownServerError.code


def error_message_of(exc: BaseException) -> str:
    """A short message for the response's error_message fields."""
    error = as_kafka_error(exc)
    if isinstance(error, KafkaError):
        return str(error.args[0]) if error.args else error.kafka_name
    return type(error).__name__
