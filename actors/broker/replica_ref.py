"""A handle on one partition replica inside its broker's actor, used like a Ray actor handle.

A broker is one Ray actor (``actors.broker.Broker``) hosting every replica the broker holds,
as a Kafka broker's process does. Clients, coordinators and the controller still address one
replica: ``ref.produce.remote(request)`` returns the ObjectRef of the call, as an actor
handle's method would, and the broker runs it on that replica. The ref pickles (it travels in
metadata and in LeaderAndIsr requests) and compares equal for the same replica of the same
broker actor; a broker actor started again gives new refs.
"""

from __future__ import annotations

from typing import Any


class ReplicaRef:
    """Replica ``topic``-``partition`` on broker ``broker_id``, whose actor is ``host``."""

    __slots__ = ("host", "topic", "partition", "broker_id")

    def __init__(self, host: Any, topic: str, partition: int, broker_id: int) -> None:
        self.host = host
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id

    def __getattr__(self, method: str) -> _ReplicaMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _ReplicaMethod(self, method)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReplicaRef, (self.host, self.topic, self.partition, self.broker_id))

    def _key(self) -> tuple[Any, ...]:
        return (actor_key(self.host), self.topic, self.partition)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplicaRef) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"ReplicaRef({self.topic}-{self.partition} on broker {self.broker_id})"


class _ReplicaMethod:
    __slots__ = ("_ref", "_name")

    def __init__(self, ref: ReplicaRef, name: str) -> None:
        self._ref = ref
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Call the replica's method in its broker actor; returns the call's ObjectRef."""
        ref = self._ref
        return ref.host.call.remote(ref.topic, ref.partition, self._name, *args, **kwargs)


def actor_key(handle: Any) -> Any:
    """What identifies a broker actor: a Ray handle's actor id (the object itself for a plain
    Broker, as tests drive it without Ray)."""
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id if actor_id is not None else id(handle)
