"""The group coordinator's messages of KIP-848's consumer group protocol, beside
:mod:`actors.protocol` (whose conventions they follow: frozen slotted dataclasses pickled as
the tuple of their fields, Kafka's field names in snake_case).

ConsumerGroupHeartbeat and ConsumerGroupDescribe as the coordinator actor takes and answers
them. Partitions travel by topic id (rayqueue's topic ids are Kafka's ``Uuid.toString()``);
answers name the topic too, so that rayqueue's own consumer needs no id lookup. Errors are
raised as the KafkaError of Kafka's error code (``storage.errors``).
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.protocol import Message
from storage.errors import KafkaError

# A member's owned or assigned partitions as a heartbeat carries them: (topic id, partitions).
TopicIdPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatRequest(Message):
    """Kafka's ConsumerGroupHeartbeat (v0-v1).

    ``member_epoch`` is 0 to join, -1 to leave, -2 for a static member that will come back;
    the optional fields are None when unchanged since the last heartbeat (Kafka's rules).
    ``topic_partitions`` are the partitions the member owns now. ``client_id`` and
    ``client_host`` are the connection's (DescribeGroups and ConsumerGroupDescribe show
    them); ``api_version`` the request's (v1+: the member names itself).
    """

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: TopicIdPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class TopicAssignment(Message):
    """One topic's partitions of an assignment, by id and name."""

    topic_id: str
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse(Message):
    """The member's id and epoch, the heartbeat interval, and its assignment when it changed
    (or the request was a full one; None otherwise, as Kafka's)."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: tuple[TopicAssignment, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeRequest(Message):
    """Kafka's ConsumerGroupDescribe; answered with a ConsumerGroupDescription per group."""

    group_ids: tuple[str, ...]
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberDescription(Message):
    """One member as ConsumerGroupDescribe shows it (``member_type`` 0: classic, 1: consumer)."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[TopicAssignment, ...]
    target_assignment: tuple[TopicAssignment, ...]
    member_type: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription(Message):
    """One group as ConsumerGroupDescribe shows it, or its ``error`` (GroupIdNotFoundError for
    a group that is not a consumer group, as Kafka answers)."""

    group_id: str
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ConsumerGroupMemberDescription, ...] = ()
    error: KafkaError | None = None


__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescription",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "ConsumerGroupMemberDescription",
    "TopicAssignment",
    "TopicIdPartitions",
]
