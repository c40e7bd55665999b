"""The requests of a broker host's calls that carry many partitions, beside
:mod:`actors.protocol` (whose conventions they follow: frozen slotted dataclasses pickled as
the tuple of their fields).

Kafka's ReplicaManager takes a request's partitions together: ``appendRecords`` a map of
partitions to records, ``fetchMessages`` many partitions with one wait, and the controller's
LeaderAndIsr carries every partition a broker hosts. A broker's host (``actors.broker``) takes
the same shapes: :class:`PartitionRequests` pairs each partition with its one-partition
request of :mod:`actors.protocol` (a ProduceRequest, a WriteTxnMarkersRequest, a
ListOffsetsRequest, ...) and is answered with one answer per partition, in order: the
partition's response, or its error (a KafkaError object, never raised for one partition).
:class:`FetchMessagesRequest` is Kafka's FetchRequest for the partitions one host serves,
with one wait for all of them; :class:`LeaderAndIsrRequest` the controller's word to one host
about every partition of it whose state changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from actors.protocol import (
    CONSUMER_REPLICA_ID,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    NO_EPOCH,
    IsolationLevel,
    Message,
    int_field,
    principal_field,
)
from storage.errors import InvalidFetchSizeError, InvalidRequestError

R = TypeVar("R")

# Kafka's fetch.max.bytes default: what one fetch answer carries at most.
DEFAULT_FETCH_MAX_BYTES = 57671680


def partition_entry(entry: Any, kind: type | None = None) -> tuple[str, int, Any]:
    """One entry of a many-partition request, checked: ``(topic, partition, request)`` with a
    string topic, an int partition and (when ``kind`` is given) a ``kind`` request;
    InvalidRequestError otherwise (answered for that entry alone)."""
    if type(entry) is not tuple or len(entry) != 3:
        raise InvalidRequestError(f"an entry names (topic, partition, request), not {entry!r:.80}")
    topic, partition, request = entry
    if type(topic) is not str or type(partition) is not int:
        raise InvalidRequestError(f"a partition is named by its topic (str) and index (int), not {entry!r:.80}")
    if kind is not None and type(request) is not kind:
        raise InvalidRequestError(f"{topic}-{partition}: expected a {kind.__name__}, not {type(request).__name__}")
    return topic, partition, request


def entries_field(entries: Any) -> tuple[Any, ...]:
    """A request's entries as a tuple (InvalidRequestError for anything but a list or tuple)."""
    if not isinstance(entries, tuple | list):
        raise InvalidRequestError(f"a many-partition request carries a list of entries, not {entries!r:.60}")
    return tuple(entries)


@dataclass(frozen=True, slots=True)
class PartitionRequests(Message, Generic[R]):
    """One-partition requests for the partitions of one host: ``(topic, partition,
    request)`` each, answered in the same order, one answer per entry."""

    entries: tuple[tuple[str, int, R], ...]


@dataclass(frozen=True, slots=True)
class FetchPartition(Message):
    """One partition of a FetchMessagesRequest (Kafka's FetchPartition): where to read, how
    much, and the caller's leader epoch (-1: not checked)."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1048576
    current_leader_epoch: int = NO_EPOCH

    def checked(self) -> FetchPartition:
        """This partition with every field checked (InvalidFetchSizeError for the size,
        InvalidRequestError for the rest)."""
        if type(self.topic) is not str or type(self.partition) is not int:
            raise InvalidRequestError(f"a partition is named by its topic (str) and index (int), not {self!r:.80}")
        return FetchPartition(
            self.topic,
            self.partition,
            int_field("fetch_offset", self.fetch_offset, INT64_MIN, INT64_MAX),
            int_field("partition_max_bytes", self.partition_max_bytes, 0, INT32_MAX, InvalidFetchSizeError),
            int_field("current_leader_epoch", self.current_leader_epoch),
        )


@dataclass(frozen=True, slots=True)
class FetchMessagesRequest(Message):
    """Kafka's FetchRequest for the partitions one host serves, with one wait for them all
    (Kafka's ReplicaManager.fetchMessages).

    A consumer (``replica_id`` -1) reads up to the high watermark, or with READ_COMMITTED up
    to the last stable offset; a follower broker (its id) reads up to the log end, and each
    partition's ``fetch_offset`` tells the leader its log end offset. The answer comes once
    ``min_bytes`` are readable over all partitions, a partition has an error, or
    ``max_wait_ms`` passed. ``max_bytes`` bounds the whole answer: the first batch always
    comes whole (KIP-74); past the budget a consumer's partition answers with no records (and
    its offsets), a follower's partition with data is left out (None: fetched first in the
    next round) while a caught-up one is still read.
    """

    partitions: tuple[FetchPartition, ...]
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    isolation_level: IsolationLevel | int = IsolationLevel.READ_UNCOMMITTED
    replica_id: int = CONSUMER_REPLICA_ID
    # A native consumer's principal, checked against the ACLs (None: a super user).
    principal: str | None = None

    def checked(self) -> FetchMessagesRequest:
        """The request-wide fields checked (the partitions are checked one by one, each
        answered with its own error)."""
        level = int_field("isolation_level", self.isolation_level, 0, 1)
        return FetchMessagesRequest(
            entries_field(self.partitions),
            int_field("max_wait_ms", self.max_wait_ms),
            int_field("min_bytes", self.min_bytes),
            int_field("max_bytes", self.max_bytes, 0, INT32_MAX),
            IsolationLevel(level),
            int_field("replica_id", self.replica_id),
            principal_field(self.principal),
        )


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionState(Message):
    """One partition's state in a LeaderAndIsrRequest (Kafka's LeaderAndIsrPartitionState):
    who leads at which epoch, the replicas and the ISR at a partition epoch, and the leader's
    ReplicaRef (a follower fetches from its host)."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0
    leader_handle: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class LeaderAndIsrRequest(Message):
    """The controller's word to one host (Kafka's LeaderAndIsr to one broker): the state of
    every partition of it that changed, in one call. ``controller`` is the controller's
    handle (leaders report ISR changes to it, and the host's ACL view loads from it);
    ``replication`` the broker's replica.* settings; ``retention_check_ms`` its
    log.retention.check.interval.ms. Answered per partition: a leader's log end offset, a
    follower's True (False: an older epoch, ignored), or the partition's error."""

    partitions: tuple[tuple[str, int, LeaderAndIsrPartitionState], ...]
    controller: Any = field(default=None, compare=False, repr=False)
    replication: Mapping[str, Any] | None = None
    retention_check_ms: int = 300000


@dataclass(frozen=True, slots=True)
class OpenReplica(Message):
    """A replica for a host to open (recover) from its directory under ``data_dir``, with its
    topic's effective config and topic id."""

    topic: str
    partition: int
    data_dir: str
    config: Mapping[str, Any]
    topic_id: str | None = None


def only_answer(answers: list[Any]) -> Any:
    """The answer of a many-partition call that carried one partition: its response, or its
    error raised."""
    if len(answers) != 1:
        raise InvalidRequestError(f"expected one answer, got {len(answers)}")
    answer = answers[0]
    if isinstance(answer, BaseException):
        raise answer
    return answer
