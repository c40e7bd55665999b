"""Every rayqueue error: one class per Kafka error code, with ``code`` and ``retriable``.

The broker's classes are defined in ``storage.errors`` (the lowest layer that raises them)
and re-exported here; the client-side ones (IllegalStateError, TransactionAbortedError) are
defined here. This is the module users import them from, and the one place where Ray's
errors become Kafka's (:func:`as_kafka_error`).
"""

from __future__ import annotations

import ray

import storage.errors as _errors
from storage.errors import *  # noqa: F403
from storage.errors import KafkaError, NetworkError


class IllegalStateError(KafkaError):
    """A client call that the client's state does not allow (Kafka's IllegalStateException)."""

    code, retriable = -1, False


class TransactionAbortedError(KafkaError):
    """TRANSACTION_ABORTED: the batch was not sent because its transaction is being aborted
    (Kafka's TransactionAbortedException; no wire error code)."""

    code, retriable = -1, False


def as_kafka_error(
    error: BaseException, unavailable: type[KafkaError] = NetworkError, what: str = "actor"
) -> BaseException:
    """The Kafka error an actor call's failure stands for.

    An error raised inside an actor comes back wrapped in Ray's RayTaskError: the error
    inside it is taken out (its message without Ray's traceback). An actor that died or
    cannot be reached (RayActorError, ActorUnavailableError) becomes the retriable
    ``unavailable`` (NetworkError; a coordinator's callers pass CoordinatorNotAvailableError),
    which makes clients look the actor up again. Anything else comes back as it is.
    """
    while isinstance(error, ray.exceptions.RayTaskError) and isinstance(error.cause, BaseException):
        error = error.cause
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, ray.exceptions.RayActorError):
        return unavailable(f"{what} unavailable: {type(error).__name__}")
    return error


def is_retriable(error: BaseException) -> bool:
    """Whether an actor call that failed with ``error`` may be tried again (after a metadata
    refresh): a retriable Kafka error, or an actor that died or is unreachable."""
    converted = as_kafka_error(error)
    return isinstance(converted, KafkaError) and converted.retriable


__all__ = [*_errors.__all__, "IllegalStateError", "TransactionAbortedError", "as_kafka_error", "is_retriable"]
