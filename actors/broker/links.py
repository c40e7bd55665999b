"""How a host reaches the other hosts and the controller, without knowing how they are reached.

A host calls two kinds of peers: the hosts its followers fetch from (the leader's host:
``fetch_messages`` for the follower broker's partitions, ``offsets_for_leader_epoch`` and
``list_offsets`` when a follower truncates or starts over, ``wake_replica_fetch``, and
``inter_broker_endpoint`` to fetch over Kafka's protocol instead: ``actors.broker.inter_broker``)
and the controller (``alter_partition``, a leader's ISR change; ``scram_credential`` for the
inter-broker listener's SCRAM logins). In a Ray actor those are actor
handles, called with ``.remote()``, whose failures are Ray's (the Ray shell, ``actor.py``,
turns them into Kafka's NetworkError); in a test without Ray they are the other hosts'
:class:`~actors.broker.replica_manager.ReplicaManager` objects and a fake controller, called
directly. :class:`Links` turns what a LeaderAndIsr carries (a ReplicaRef's ``host``, the
controller's handle) into the peer to call; the plain one here hands the object back as it
is, which is what tests driving hosts by hand need.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

from actors.broker.replica_ref import actor_key
from actors.protocol import AlterPartitionRequest, AlterPartitionResponse, EpochEndOffset
from actors.protocol_broker import FetchMessagesRequest, PartitionRequests
from actors.protocol_security import ScramCredential
from actors.types import OffsetAndTimestamp


class HostLink(Protocol):
    """What a follower's host calls on its leader's host."""

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        """Kafka's fetchMessages for the follower broker's partitions (see ReplicaManager)."""
        ...

    def wake_replica_fetch(self, replica_id: int) -> None:
        """Answer the follower broker's waiting fetch now (fire and forget)."""
        ...

    async def offsets_for_leader_epoch(self, request: PartitionRequests[Any]) -> list[EpochEndOffset | Exception]:
        """Where each asked epoch ended in the leader's log."""
        ...

    async def list_offsets(self, request: PartitionRequests[Any]) -> list[OffsetAndTimestamp | Exception]:
        """ListOffsets for some partitions."""
        ...

    async def inter_broker_endpoint(self) -> tuple[str, int]:
        """Where the host's inter-broker listener takes its followers' fetches."""
        ...


class ControllerLink(Protocol):
    """What a leader calls on the controller."""

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """Kafka's AlterPartition: propose an ISR change."""
        ...

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A user's SCRAM credential (None: there is none)."""
        ...


class Links:
    """Peers as they are: a host handle is the other host's object, the controller handle a
    controller object (hosts driven by hand, in one process)."""

    def host(self, handle: Any) -> HostLink:
        """The peer for a ReplicaRef's ``host``."""
        return handle

    def controller(self, handle: Any) -> ControllerLink:
        """The peer for the controller's handle."""
        return handle

    def key(self, handle: Any) -> Hashable:
        """What identifies a host (one fetcher per source host)."""
        return actor_key(handle)

    def schema_registry(self, namespace: str) -> Any:
        """The schema registry's schemas by id (``schema(id)``, ``version(subject, version)``),
        for Iceberg topics' typed values; None: no registry (hosts driven by hand)."""
        return None
