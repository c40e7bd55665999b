"""The one table from what an actor call raised to the Kafka error code a client gets.

Every rayqueue error already carries Kafka's code (``storage.errors``); Ray's own failures
are translated by what the call was for: a replica that is gone means the client must
look for the partition's leader again (NOT_LEADER_OR_FOLLOWER), a coordinator or the
controller that is gone means retry later.
"""

from __future__ import annotations

import asyncio
import logging

import ray

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
REPLICA_UNAVAILABLE = NotLeaderOrFollowerError.code
COORDINATOR_UNAVAILABLE = CoordinatorNotAvailableError.code
CONTROLLER_UNAVAILABLE = RequestTimedOutError.code

_RAY_UNAVAILABLE = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The Kafka error inside ``exc`` (Ray wraps an actor's exception), or None."""
    if isinstance(exc, KafkaError):
        return exc
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, KafkaError):
        return cause
    return None


def error_code_of(exc: BaseException, unavailable: int = REPLICA_UNAVAILABLE) -> int:
    """Kafka's error code for an exception raised by an actor call.

    ``unavailable`` is the code for an actor that died or cannot be reached. A client-side
    deadline (KafkaTimeoutError, asyncio's TimeoutError) is REQUEST_TIMED_OUT; anything
    unexpected is UNKNOWN_SERVER_ERROR, logged with its traceback.
    """
    error = kafka_error(exc)
    if error is not None:
        if isinstance(error, KafkaTimeoutError):
            return RequestTimedOutError.code
        return error.code
    if isinstance(exc, _RAY_UNAVAILABLE):
        return unavailable
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return RequestTimedOutError.code
    logger.error("unexpected error in a gateway request", exc_info=exc)
    return UnknownServerError.code


def error_message_of(exc: BaseException) -> str:
    """A short message for the response's error_message fields."""
    error = kafka_error(exc)
    if error is not None:
        return str(error.args[0]) if error.args else error.kafka_name
    return type(exc).__name__
