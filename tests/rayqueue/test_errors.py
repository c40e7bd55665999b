"""rayqueue.errors: the one conversion from Ray's errors to Kafka's, and the client-side errors."""

from __future__ import annotations

import pickle

import pytest
import ray

from rayqueue import errors
from rayqueue.errors import (
    CoordinatorNotAvailableError,
    IllegalStateError,
    NetworkError,
    NotLeaderOrFollowerError,
    PolicyViolationError,
    TransactionAbortedError,
    as_kafka_error,
    is_retriable,
)
from tests.helpers import wait_for


@ray.remote(num_cpus=0, max_restarts=0)
class Raiser:
    def kafka(self, retriable: bool) -> None:
        raise (NotLeaderOrFollowerError if retriable else PolicyViolationError)("raised in the actor")

    def other(self) -> None:
        raise ValueError("not a Kafka error")

    def pid(self) -> int:
        return 1


def caught(ref: ray.ObjectRef) -> BaseException:
    with pytest.raises(Exception) as info:  # noqa: PT011 - whatever Ray raises is the input here
        ray.get(ref, timeout=60)
    return info.value


def refused_call(actor) -> BaseException | None:
    """What a call to ``actor`` raises, or None when it is still answered."""
    try:
        ray.get(actor.pid.remote(), timeout=60)
    except Exception as exc:  # noqa: BLE001 - whatever Ray raises is the input here
        return exc
    return None


def test_ray_errors_become_the_kafka_errors_they_stand_for(ray_session):
    actor = Raiser.remote()
    leader_moved = caught(actor.kafka.remote(True))
    assert isinstance(leader_moved, ray.exceptions.RayTaskError)  # what the caller of ray.get sees
    converted = as_kafka_error(leader_moved)
    assert type(converted) is NotLeaderOrFollowerError and converted.args == ("raised in the actor",)
    assert is_retriable(leader_moved)
    refused = caught(actor.kafka.remote(False))
    assert type(as_kafka_error(refused)) is PolicyViolationError and not is_retriable(refused)
    other = caught(actor.other.remote())
    assert type(as_kafka_error(other)) is ValueError and not is_retriable(other)
    ray.kill(actor, no_restart=True)
    # The kill is asynchronous: a call made right after it may still be answered.
    dead = wait_for(lambda: refused_call(actor), timeout=60, what="the killed actor to refuse calls")
    assert isinstance(dead, ray.exceptions.RayActorError)
    assert type(as_kafka_error(dead)) is NetworkError and is_retriable(dead)
    coordinator = as_kafka_error(dead, CoordinatorNotAvailableError, "group coordinator")
    assert type(coordinator) is CoordinatorNotAvailableError and "group coordinator" in str(coordinator)
    assert coordinator.retriable
    plain = NotLeaderOrFollowerError("as it is")
    assert as_kafka_error(plain) is plain


@pytest.mark.parametrize("cls", [IllegalStateError, TransactionAbortedError])
def test_client_side_errors_live_in_rayqueue_errors_and_pickle(cls):
    assert cls.__name__ in errors.__all__ and not cls.retriable
    again = pickle.loads(pickle.dumps(cls("message")))
    assert type(again) is cls and again.args == ("message",)
    from rayqueue.producer.transaction_manager import TransactionAbortedError as reexported

    assert reexported is TransactionAbortedError
