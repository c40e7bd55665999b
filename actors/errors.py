"""The one place where Ray's errors become Kafka's: :func:`as_kafka_error`.

It sits in ``actors`` so that both of the layers that call actors use it: rayqueue's
clients (through ``rayqueue.errors``, which re-exports it) and the Kafka protocol gateway
(``actors/gateway``), which may not import ``rayqueue``.
"""

from __future__ import annotations

import ray

from storage.errors import KafkaError, NetworkError

__all__ = ["as_kafka_error"]


def as_kafka_error(
    error: BaseException, unavailable: type[KafkaError] = NetworkError, what: str = "actor"
) -> BaseException:
    """The Kafka error an actor call's failure stands for.

    An error raised inside an actor comes back wrapped in Ray's RayTaskError: the error
    inside it is taken out (its message without Ray's traceback). An actor that died or
    cannot be reached (RayActorError, ActorUnavailableError) becomes the retriable
    ``unavailable`` (NetworkError; a coordinator's callers pass CoordinatorNotAvailableError,
    the gateway NotLeaderOrFollowerError for a replica), which makes clients look the actor
    up again. Anything else comes back as it is.
    """
    while isinstance(error, ray.exceptions.RayTaskError) and isinstance(error.cause, BaseException):
        error = error.cause
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, ray.exceptions.RayActorError):
        return unavailable(f"{what} unavailable: {type(error).__name__}")
    return error
