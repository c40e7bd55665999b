"""Small immutable results and metadata exchanged between actors and clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and partition number."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """An offset with the timestamp of its record (-1 when not looked up by time): what
    ListOffsets answers for one partition (Kafka's ListOffsetsPartitionResponse)."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """A logical broker: its id, the Ray node it is bound to and its data directory, and
    where its Kafka protocol gateway is reached (``host`` empty when it runs none)."""

    broker_id: int
    node_id: str
    data_dir: str
    alive: bool = True
    host: str = ""
    port: int = -1
    # Every listener of its gateway: (listener name, security protocol, host, port); empty
    # for a gateway registered with one address only (host, port).
    endpoints: tuple[tuple[str, str, str, int], ...] = ()

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """Where a client of listener ``listener`` reaches this broker (None: the broker has
        no such listener); ``None`` asks for the primary address."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        for name, _, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """Where a partition lives: replicas, ISR, leader (its actor handle) and epochs."""

    topic: str
    partition: int
    leader: int  # broker id, -1 when offline
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_handle: Any = field(default=None, compare=False, repr=False)
    partition_epoch: int = 0
    offline_replicas: tuple[int, ...] = ()

    @property
    def tp(self) -> TopicPartition:
        """The partition's TopicPartition."""
        return TopicPartition(self.topic, self.partition)

    @property
    def under_replicated(self) -> bool:
        """Fewer in-sync replicas than assigned replicas."""
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        """No live leader."""
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic's partitions, internal flag, non-default configs and topic id."""

    name: str
    partitions: tuple[PartitionMetadata, ...]
    internal: bool = False
    configs: dict[str, Any] = field(default_factory=dict, compare=False)
    topic_id: str = ""  # KIP-516: a recreated topic gets a new one


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """A metadata snapshot served by the controller and cached by clients."""

    cluster_id: str
    controller_epoch: int
    brokers: tuple[BrokerMetadata, ...]
    topics: dict[str, TopicMetadata]

    def partitions_for(self, topic: str) -> tuple[PartitionMetadata, ...]:
        """The partitions of ``topic`` (empty when unknown)."""
        meta = self.topics.get(topic)
        return meta.partitions if meta else ()


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset with its metadata string and commit time (Kafka's OffsetAndMetadata)."""

    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    """A completed join: the generation, this member's id and the group's chosen protocol."""

    generation_id: int
    member_id: str
    protocol: str
    leader_id: str
    rebalance_protocol: str  # "eager" or "cooperative"
    # Client-assigned groups: the leader gets every member's (id, instance id, metadata).
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    # KIP-394: the member was given ``member_id`` and must join again with it.
    member_id_required: bool = False


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member of a group as DescribeGroups shows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    subscription: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]
    metadata: bytes = b""  # a client-assigning member's opaque protocol metadata
    member_assignment: bytes = b""  # and its opaque assignment
    client_host: str = ""  # "/<address>" of a Kafka client's connection (Kafka's clientHost)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group: state, protocol, generation and members (Kafka's ConsumerGroupDescription)."""

    group_id: str
    state: str  # an actors.protocol.GroupState: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    protocol_type: str
    protocol: str
    generation_id: int
    leader_id: str
    members: tuple[MemberDescription, ...]
    group_type: str = "classic"  # Kafka's GroupType: classic, or consumer (KIP-848's protocol)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What a transactional producer needs of a consumer's group membership."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """A producer id with its epoch, as InitProducerId answers."""

    producer_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transactional id's current state (Kafka's TransactionDescription)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str  # an actors.protocol.TransactionState: Empty, Ongoing, PrepareCommit, ..., Dead
    timeout_ms: int
    start_ms: int  # when the ongoing transaction started; -1 when none is open
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's progress on one partition: committed offset (None if never), log end
    offset (the high watermark) and lag = log end - committed."""

    committed: int | None
    log_end_offset: int
    lag: int
