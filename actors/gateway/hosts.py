"""How the listener's handlers reach the hosts that hold the partitions a request names.

The Kafka listener runs in a broker host's own process (``actors.broker.actor`` composes the
host's ReplicaManager and the listener), as a Kafka broker's SocketServer, KafkaApis and
ReplicaManager share one process. A partition that process holds is called directly on its
ReplicaManager (:class:`LocalReplicas`): no Ray call, no pickling, and a fetch's long poll is
woken by the local append. A partition held by another host (another broker's, or another of
this broker's under ``rayqueue.broker.placement=hosts``) is reached by a Ray call on that
host's actor handle, one call per host per request for the calls that carry many partitions.

Handlers never tell the two apart: :meth:`Hosts.host` gives the calls that carry many
partitions of one host (``append_records``, ``fetch_messages``), :meth:`Hosts.replica` the
one-partition calls of a ReplicaRef (``fetch``, ``list_offsets``, ``offset_for_leader_epoch``,
``delete_records``), both as coroutines. A fetch is cancellable: cancelling its await (the
connection closed) cancels the local wait, or the remote call in its host (``ray.cancel``:
Ray stops an async actor call's coroutine only when told). An append is not: it runs to its
end in the host even when the connection that sent it is gone (Kafka processes a request
whose connection closed and drops the answer), so its local call is shielded.

This package imports nothing of ``actors.broker``: the local host is whatever offers
:class:`LocalReplicas`, and a host is recognised by the ReplicaRef's ``host_key``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Hashable
from typing import Any, Protocol

import ray

from actors.protocol import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)
from actors.protocol_broker import FetchMessagesRequest, PartitionRequests
from actors.types import OffsetAndTimestamp


class LocalReplicas(Protocol):
    """What the listener calls on the replicas of its own process (the host's ReplicaManager)."""

    async def append_records(self, request: PartitionRequests[ProduceRequest]) -> list[Any]:
        """Each partition's batches appended; one answer (or error) per partition."""
        ...

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        """Many partitions read with one wait; one answer (or error) per partition."""
        ...

    async def partition_fetch(self, topic: str, partition: int, request: FetchRequest) -> FetchResponse:
        """One partition's fetch, long-polling as ``request`` says."""
        ...

    async def partition_list_offsets(
        self, topic: str, partition: int, request: ListOffsetsRequest
    ) -> OffsetAndTimestamp:
        """One partition's ListOffsets."""
        ...

    async def partition_offset_for_leader_epoch(
        self, topic: str, partition: int, request: OffsetForLeaderEpochRequest
    ) -> EpochEndOffset:
        """One partition's OffsetForLeaderEpoch."""
        ...

    async def partition_delete_records(
        self, topic: str, partition: int, request: DeleteRecordsRequest
    ) -> DeleteRecordsResponse:
        """One partition's DeleteRecords."""
        ...


async def ray_answer(ref: Any) -> Any:
    """A Ray call's answer; when this wait is cancelled, the call is cancelled in its actor."""
    try:
        return await ref
    except asyncio.CancelledError:
        cancel_ray_call(ref)
        raise


def cancel_ray_call(ref: Any) -> None:
    """Cancel a Ray call no longer needed (an answer nobody will read)."""
    try:
        ray.cancel(ref)
    except Exception:  # noqa: BLE001 - already finished, or not cancellable: harmless
        pass


async def _shielded(call: Awaitable[Any]) -> Any:
    """``call`` run to its end even if the request that made it is cancelled."""
    return await asyncio.shield(asyncio.ensure_future(call))


class HostCalls(Protocol):
    """The calls that carry many partitions of one host."""

    async def append_records(self, request: PartitionRequests[ProduceRequest]) -> list[Any]:
        """Kafka's appendRecords on the host."""
        ...

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        """Kafka's fetchMessages on the host (cancellable)."""
        ...


class ReplicaCalls(Protocol):
    """The one-partition calls of one replica."""

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        """The replica's fetch, long-polling (cancellable)."""
        ...

    async def list_offsets(self, request: ListOffsetsRequest) -> OffsetAndTimestamp:
        """The replica's ListOffsets."""
        ...

    async def offset_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> EpochEndOffset:
        """The replica's OffsetForLeaderEpoch."""
        ...

    async def delete_records(self, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        """The replica's DeleteRecords."""
        ...


class _LocalHost:
    """The calls on the listener's own ReplicaManager."""

    __slots__ = ("_local",)

    def __init__(self, local: LocalReplicas) -> None:
        self._local = local

    async def append_records(self, request: PartitionRequests[ProduceRequest]) -> list[Any]:
        return await _shielded(self._local.append_records(request))

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        return await self._local.fetch_messages(request)


class _RemoteHost:
    """The calls on another host's actor, one Ray call each."""

    __slots__ = ("_handle",)

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    async def append_records(self, request: PartitionRequests[ProduceRequest]) -> list[Any]:
        # Not cancelled with the request: the append goes on in the host whatever this wait does.
        return await self._handle.append_records.remote(request)

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        return await ray_answer(self._handle.fetch_messages.remote(request))


class _LocalReplica:
    """One replica of the listener's own process."""

    __slots__ = ("_local", "_topic", "_partition")

    def __init__(self, local: LocalReplicas, topic: str, partition: int) -> None:
        self._local, self._topic, self._partition = local, topic, partition

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        return await self._local.partition_fetch(self._topic, self._partition, request)

    async def list_offsets(self, request: ListOffsetsRequest) -> OffsetAndTimestamp:
        return await _shielded(self._local.partition_list_offsets(self._topic, self._partition, request))

    async def offset_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> EpochEndOffset:
        return await _shielded(self._local.partition_offset_for_leader_epoch(self._topic, self._partition, request))

    async def delete_records(self, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        return await _shielded(self._local.partition_delete_records(self._topic, self._partition, request))


class _RemoteReplica:
    """One replica of another host, through its ReplicaRef's Ray calls."""

    __slots__ = ("_ref",)

    def __init__(self, ref: Any) -> None:
        self._ref = ref

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        return await ray_answer(self._ref.fetch.remote(request))

    async def list_offsets(self, request: ListOffsetsRequest) -> OffsetAndTimestamp:
        return await self._ref.list_offsets.remote(request)

    async def offset_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> EpochEndOffset:
        return await self._ref.offset_for_leader_epoch.remote(request)

    async def delete_records(self, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        return await self._ref.delete_records.remote(request)


class Hosts:
    """The hosts a listener reaches: its own (``local``, whose ReplicaRefs carry ``local_key``
    as their ``host_key``) by direct calls, the others by Ray calls. Without a local host
    (a listener outside any host, as tests run one) every host is remote."""

    def __init__(self, local: LocalReplicas | None = None, local_key: Hashable | None = None) -> None:
        self._local = local
        self._local_key = local_key
        self._local_host = _LocalHost(local) if local is not None else None
        self.local_calls = 0  # many-partition and one-partition calls served in this process
        self.remote_calls = 0  # Ray calls to other hosts

    def is_local(self, ref: Any) -> bool:
        """Whether the replica of ReplicaRef ``ref`` lives in this process."""
        return self._local is not None and ref.host_key == self._local_key

    def host(self, ref: Any) -> HostCalls:
        """The many-partition calls of the host holding ReplicaRef ``ref``'s replica."""
        if self.is_local(ref):
            self.local_calls += 1
            return self._local_host  # type: ignore[return-value]
        self.remote_calls += 1
        return _RemoteHost(ref.host)

    def replica(self, ref: Any) -> ReplicaCalls:
        """The one-partition calls of ReplicaRef ``ref``'s replica."""
        if self.is_local(ref):
            self.local_calls += 1
            return _LocalReplica(self._local, ref.topic, ref.partition)  # type: ignore[arg-type]
        self.remote_calls += 1
        return _RemoteReplica(ref)


__all__ = ["HostCalls", "Hosts", "LocalReplicas", "ReplicaCalls", "cancel_ray_call", "ray_answer"]
