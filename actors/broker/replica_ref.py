"""A handle on one partition replica inside its host, used like a Ray actor handle.

A host (``actors.broker.actor.BrokerHost``, a Ray actor) holds some of a broker's replicas:
all of them, a stable share of them, or just one, as ``rayqueue.broker.placement`` says.
Clients, coordinators and tools that address one replica call it through its ReplicaRef:
``ref.produce.remote(request)`` returns the ObjectRef of the host's one-partition call
(``partition_produce(topic, partition, request)``), as an actor handle's method would. Every
call a ref offers is written out below; callers that carry many partitions at once (the
gateway, the transaction coordinator's markers, follower hosts) group them by ``host`` and
call its many-partition methods instead.

The ref pickles (it travels in metadata and in LeaderAndIsr requests) and compares equal for
the same replica in the same host actor; a host started again gives new refs.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


class PartitionCall:
    """One of a host's one-partition calls, bound to a replica: ``.remote(*args)`` sends it."""

    __slots__ = ("_method", "_topic", "_partition")

    def __init__(self, method: Any, topic: str, partition: int) -> None:
        self._method = method
        self._topic = topic
        self._partition = partition

    def remote(self, *args: Any) -> Any:
        """Call the host's method for this replica; returns the call's ObjectRef."""
        return self._method.remote(self._topic, self._partition, *args)


class ReplicaRef:
    """Replica ``topic``-``partition`` of broker ``broker_id``, held by host actor ``host``."""

    __slots__ = ("host", "topic", "partition", "broker_id")

    def __init__(self, host: Any, topic: str, partition: int, broker_id: int) -> None:
        self.host = host
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id

    # -- the replica's calls (each the host's partition_* method) -------------------------

    @property
    def produce(self) -> PartitionCall:
        """``produce.remote(ProduceRequest)`` -> ProduceResponse (see PartitionReplica.produce)."""
        return PartitionCall(self.host.partition_produce, self.topic, self.partition)

    @property
    def fetch(self) -> PartitionCall:
        """``fetch.remote(FetchRequest)`` -> FetchResponse, long-polling as the request says."""
        return PartitionCall(self.host.partition_fetch, self.topic, self.partition)

    @property
    def list_offsets(self) -> PartitionCall:
        """``list_offsets.remote(ListOffsetsRequest)`` -> OffsetAndTimestamp."""
        return PartitionCall(self.host.partition_list_offsets, self.topic, self.partition)

    @property
    def offset_for_leader_epoch(self) -> PartitionCall:
        """``offset_for_leader_epoch.remote(OffsetForLeaderEpochRequest)`` -> EpochEndOffset."""
        return PartitionCall(self.host.partition_offset_for_leader_epoch, self.topic, self.partition)

    @property
    def delete_records(self) -> PartitionCall:
        """``delete_records.remote(DeleteRecordsRequest)`` -> DeleteRecordsResponse."""
        return PartitionCall(self.host.partition_delete_records, self.topic, self.partition)

    @property
    def write_txn_marker(self) -> PartitionCall:
        """``write_txn_marker.remote(WriteTxnMarkersRequest)`` -> the marker's ProduceResponse."""
        return PartitionCall(self.host.partition_write_txn_marker, self.topic, self.partition)

    @property
    def describe(self) -> PartitionCall:
        """``describe.remote(principal=None)`` -> the replica's offsets, role, epochs and ISR."""
        return PartitionCall(self.host.partition_describe, self.topic, self.partition)

    @property
    def read_local(self) -> PartitionCall:
        """``read_local.remote(offset, max_bytes)`` -> (records, next offset), whatever the role."""
        return PartitionCall(self.host.partition_read_local, self.topic, self.partition)

    @property
    def clean_now(self) -> PartitionCall:
        """``clean_now.remote(force=False)`` -> one cleaner pass's stats (None: nothing to do)."""
        return PartitionCall(self.host.partition_clean_now, self.topic, self.partition)

    @property
    def pause_fetching(self) -> PartitionCall:
        """``pause_fetching.remote(paused)``: fault injection, a follower cut off from its leader."""
        return PartitionCall(self.host.partition_pause_fetching, self.topic, self.partition)

    @property
    def delay_fetching(self) -> PartitionCall:
        """``delay_fetching.remote(delay_ms)``: fault injection, a slow network to the leader."""
        return PartitionCall(self.host.partition_delay_fetching, self.topic, self.partition)

    # -- identity -------------------------------------------------------------------------

    @property
    def host_key(self) -> Hashable:
        """What identifies the host actor (equal for every replica it holds)."""
        return actor_key(self.host)

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


def actor_key(handle: Any) -> Hashable:
    """What identifies a host actor: a Ray handle's actor id (the object itself for a plain
    ReplicaManager, as tests drive it without Ray)."""
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id if actor_id is not None else id(handle)
