"""The typed requests and responses at the actor boundary, after Kafka's own messages.

Every method of a partition replica, the controller and the two coordinators that serves one
of Kafka's requests takes one of these frozen dataclasses, never a list of positional
arguments, and answers one of them (or a result type of ``actors.types``); what is
rayqueue's own (lifecycle, tools, test hooks: ``describe``, ``stop_broker``, ...) keeps its
one or two plain arguments. They are named after Kafka's
APIs and their fields carry Kafka's field names in snake_case, so that a translator from
Kafka's wire protocol (``actors/gateway/``) maps a wire request onto them field for field,
and the Python clients send exactly what the gateway sends.

Kafka's requests are batched (many topics, many partitions per request). Each class here is
the part of a Kafka request for one partition or one concern: ``ProduceRequest`` is one
partition's records with the request's ``acks`` and ``timeout_ms``; ``CreateTopicsRequest``
is one ``CreatableTopic``; the group and transaction requests are whole, as rayqueue's
coordinators take them. A broker host's calls carry many partitions at once, each with its
one-partition request of this module (``actors.protocol_broker``: PartitionRequests,
FetchMessagesRequest, LeaderAndIsrRequest). Where rayqueue needs more than Kafka's fields (an
append's ``origin``, a produce call's ``order``), the extra fields are named for what they
are.

The answers that already had a type keep it: ListOffsets answers ``OffsetAndTimestamp``,
Metadata ``ClusterMetadata``, CreateTopics and CreatePartitions ``TopicMetadata``,
JoinGroup ``JoinGroupResult``, DescribeGroups ``GroupDescription``, InitProducerId
``ProducerIdAndEpoch``, DescribeTransactions ``TransactionDescription`` (all in
``actors.types``).

Requests are plain data and a caller may put anything in them: every actor refuses a
request of the wrong type (``require``, InvalidRequestError), and the replica checks every
field of its requests against Kafka's field types and ranges (``checked()``) before it acts.
A request is built once per call (per batch set on the data path), never per record.

Protocol states are enums: ``IsolationLevel``, ``TransactionResult`` and ``AlterConfigOp``
carry Kafka's wire values (the gateway passes them straight); ``ReplicaRole``, ``GroupState``
and ``TransactionState`` Kafka's names; ``AppendOrigin`` is defined in ``storage`` (which
cannot import this module) and re-exported here.
"""

from __future__ import annotations

import collections
import enum
import numbers
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from actors.types import OffsetAndMetadata, TopicPartition
from storage.errors import InvalidFetchSizeError, InvalidRequestError, InvalidRequiredAcksError, KafkaError
from storage.log import MAX_TIMESTAMP
from storage.producer_state import AppendOrigin

__all__ = [
    "AbortedTransaction",
    "AddOffsetsToTxnRequest",
    "AddPartitionsToTxnRequest",
    "AllocateProducerIdsRequest",
    "AllocateProducerIdsResponse",
    "AlterConfigOp",
    "AlterPartitionReassignmentsRequest",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "AlterableConfig",
    "AppendOrigin",
    "CompleteTxnRequest",
    "CreatePartitionsRequest",
    "CreateTopicsRequest",
    "DeleteGroupsRequest",
    "DeleteRecordsRequest",
    "DeleteRecordsResponse",
    "DeleteTopicsRequest",
    "DescribeClusterRequest",
    "DescribeConfigsRequest",
    "DescribeGroupsRequest",
    "DescribeTransactionsRequest",
    "ElectLeadersRequest",
    "EndTxnRequest",
    "EpochEndOffset",
    "FetchRequest",
    "FetchResponse",
    "GroupState",
    "HeartbeatRequest",
    "IncrementalAlterConfigsRequest",
    "InitProducerIdRequest",
    "IsolationLevel",
    "JoinGroupRequest",
    "LeaveGroupRequest",
    "ListGroupsRequest",
    "ListOffsetsRequest",
    "ListPartitionReassignmentsRequest",
    "MetadataRequest",
    "OffsetCommitRequest",
    "OffsetFetchRequest",
    "OffsetForLeaderEpochRequest",
    "ProduceOrder",
    "ProduceTurns",
    "ProduceRequest",
    "ProduceResponse",
    "ReplicaRole",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TransactionResult",
    "TransactionState",
    "TxnOffsetCommitRequest",
    "WriteTxnMarkersRequest",
]

# -- protocol states --------------------------------------------------------------------------


class IsolationLevel(enum.IntEnum):
    """What a fetch or ListOffsets may read (Kafka's IsolationLevel, with its wire values)."""

    READ_UNCOMMITTED = 0  # up to the high watermark
    READ_COMMITTED = 1  # up to the last stable offset; aborted transactions listed


class ReplicaRole(enum.StrEnum):
    """What a partition replica is to its partition right now."""

    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"  # not told yet, or closed


class GroupState(enum.StrEnum):
    """A consumer group's state (Kafka's classic GroupState, named as DescribeGroups shows it)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class TransactionState(enum.StrEnum):
    """A transactional id's state at the transaction coordinator (Kafka's coordinator
    TransactionState, named as DescribeTransactions shows it). The producer's own states are
    another machine: ``rayqueue.producer.transaction_manager.TransactionState`` (Kafka's
    TransactionManager.State)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    # Fencing an older producer (its epoch bumped) before its open transaction is aborted;
    # in memory only, never written to __transaction_state.
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


class TransactionResult(enum.IntEnum):
    """How a transaction ended (Kafka's TransactionResult; the wire's boolean as an int)."""

    ABORT = 0
    COMMIT = 1


class AlterConfigOp(enum.IntEnum):
    """One config change of IncrementalAlterConfigs (Kafka's OpType, with its wire values)."""

    SET = 0
    DELETE = 1  # back to the broker default
    APPEND = 2  # list configs: add values not there yet
    SUBTRACT = 3  # list configs: remove values


# -- field checks -----------------------------------------------------------------------------

# The ranges of Kafka's wire fields (int16 producer epochs; int32 sizes, epochs and waits;
# int64 offsets, times and producer ids).
INT16_MAX = 2**15 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NO_EPOCH = -1  # a request without the caller's leader epoch: not fenced by epoch
TRANSACTIONAL_ID_MAX = 32767  # Kafka's string length limit
CONSUMER_REPLICA_ID = -1  # a fetch from a consumer, not a follower
_RECORD_TYPES = (bytes, bytearray, memoryview)


def int_field(
    name: str,
    value: Any,
    low: int = INT32_MIN,
    high: int = INT32_MAX,
    out_of_range: type[KafkaError] = InvalidRequestError,
) -> int:
    """``value`` as an int in [low, high] (Kafka's field ranges). A non-integer is
    InvalidRequestError, a value out of range ``out_of_range``: bad fields get a Kafka
    error, never a TypeError from deep inside an actor."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # numpy integers pass
        raise InvalidRequestError(f"{name} must be an integer, not {type(value).__name__} {value!r:.40}")
    value = int(value)
    if not low <= value <= high:
        raise out_of_range(f"{name}={value} is outside [{low}, {high}]")
    return value


def principal_field(value: Any) -> str | None:
    """A request's principal: None or ``Type:name`` (InvalidRequestError otherwise)."""
    if value is None:
        return None
    if not isinstance(value, str) or ":" not in value or len(value) > 1000:
        raise InvalidRequestError(f"principal must be Type:name, e.g. User:alice, not {value!r:.60}")
    return value


def _isolation(value: Any) -> IsolationLevel:
    return IsolationLevel(
        int_field("isolation_level", value, IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED)
    )


def require(request: Any, kind: type) -> None:
    """InvalidRequestError unless ``request`` is a ``kind``: a caller sending the wrong thing
    gets a Kafka error, never an AttributeError from deep inside an actor."""
    if type(request) is not kind:
        raise InvalidRequestError(f"expected a {kind.__name__}, not {type(request).__name__} {request!r:.60}")


def checked_request(request: Any, kind: type) -> Any:
    """``request`` with its fields checked (its ``checked()``), when it is a ``kind``."""
    require(request, kind)
    return request.checked()


class Message:
    """The base of every request and response: pickled as the tuple of its fields, which Ray
    serializes in half the time a frozen dataclass's default state takes (one per call)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return type(self), tuple([getattr(self, name) for name in self.__slots__])


# -- partition replica: the data path ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceOrder(Message):
    """Where a produce call stands among its producer session's calls to one partition.

    A producer without idempotence numbers its calls per partition: call ``number`` is
    appended after the session's calls from ``oldest`` (the oldest it has unanswered) to
    ``number - 1``. Kafka gets that order from its TCP connection; Ray may start an async
    actor's calls out of order.
    """

    session: str
    number: int
    oldest: int

    def checked(self) -> ProduceOrder:
        """This order with its fields checked (InvalidRequestError)."""
        if not isinstance(self.session, str):
            raise InvalidRequestError(f"order session must be a string, not {self.session!r:.40}")
        return ProduceOrder(
            self.session,
            int_field("order number", self.number, 0, INT64_MAX),
            int_field("order oldest", self.oldest, 0, INT64_MAX),
        )


class ProduceTurns:
    """One producer session's produce calls, numbered per partition: the ``ProduceOrder`` each
    call carries (rayqueue's producer without idempotence, and each Kafka client connection
    at the gateway). Not thread-safe: the caller serialises ``take`` and ``done``."""

    __slots__ = ("session", "_next", "_open")

    def __init__(self, session: str) -> None:
        self.session = session
        self._next: dict[Hashable, int] = {}
        self._open: dict[Hashable, collections.deque[int]] = {}  # per partition, its unanswered numbers

    def take(self, partition: Hashable) -> ProduceOrder:
        """The order of a new call to ``partition``: the next number, after the oldest unanswered one."""
        number = self._next.get(partition, 0)
        self._next[partition] = number + 1
        unanswered = self._open.setdefault(partition, collections.deque())
        unanswered.append(number)
        return ProduceOrder(self.session, number, unanswered[0])

    def done(self, partition: Hashable, number: int) -> None:
        """Call ``number`` to ``partition`` has its answer (or failed): it no longer holds later ones."""
        unanswered = self._open[partition]
        unanswered.remove(number)
        if not unanswered:
            del self._open[partition]


@dataclass(frozen=True, slots=True)
class ProduceRequest(Message):
    """One partition's part of Kafka's ProduceRequest: whole record batches and how to
    acknowledge them.

    ``acks`` is 0, 1 or -1 (all). ``current_leader_epoch`` fences a caller with stale
    metadata (-1: not checked). ``origin`` is AppendOrigin.CLIENT (producer data) or
    COORDINATOR (transactional offset commits), or its value. ``order`` numbers the calls
    of a producer without idempotence (see ProduceOrder). ``transactional_id`` is the
    transactional producer's: with it the leader verifies a transaction's first batch with
    the transaction coordinator (KIP-890); a transactional batch without it is refused.
    """

    records: bytes
    acks: int = 1
    timeout_ms: int = 30000
    current_leader_epoch: int = NO_EPOCH
    origin: AppendOrigin | str = AppendOrigin.CLIENT
    order: ProduceOrder | None = None
    # A native producer's principal, checked against the ACLs (None: a super user).
    principal: str | None = None
    transactional_id: str | None = None

    def checked_order(self) -> ProduceOrder | None:
        """The call's order, checked first: a call refused for another reason must still
        release its turn."""
        if self.order is None:
            return None
        if type(self.order) is not ProduceOrder:
            raise InvalidRequestError(f"order must be a ProduceOrder, not {self.order!r:.60}")
        return self.order.checked()

    def checked(self) -> ProduceRequest:
        """This request with every field checked: InvalidRequiredAcksError for ``acks``,
        InvalidRequestError for the rest."""
        order = self.checked_order()
        acks = self.acks
        if isinstance(acks, bool) or not isinstance(acks, numbers.Integral) or acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks={acks!r:.20}; use 0, 1 or -1 (all)")
        try:
            origin = AppendOrigin(self.origin)
        except ValueError:
            origin = None
        if origin is not AppendOrigin.CLIENT and origin is not AppendOrigin.COORDINATOR:
            raise InvalidRequestError(f"produce origin {self.origin!r:.40}: use client or coordinator")
        if not isinstance(self.records, _RECORD_TYPES):
            raise InvalidRequestError(f"produce takes record batch bytes, not {type(self.records).__name__}")
        tid = self.transactional_id
        if tid is not None and (not isinstance(tid, str) or len(tid) > TRANSACTIONAL_ID_MAX):
            raise InvalidRequestError(f"transactional_id must be a string of at most {TRANSACTIONAL_ID_MAX} characters")
        return ProduceRequest(
            self.records,
            int(acks),
            int_field("timeout_ms", self.timeout_ms, 0),
            int_field("current_leader_epoch", self.current_leader_epoch),
            origin,
            order,
            principal_field(self.principal),
            tid,
        )


@dataclass(frozen=True, slots=True)
class ProduceResponse(Message):
    """One partition's part of Kafka's ProduceResponse: where the first batch landed (and
    the last offset of the last one)."""

    base_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class FetchRequest(Message):
    """One partition's part of Kafka's FetchRequest, with the request's wait and isolation.

    A consumer (``replica_id`` -1) reads up to the high watermark, or with READ_COMMITTED
    up to the last stable offset; a follower (its broker id) reads up to the log end, and
    its ``fetch_offset`` tells the leader its log end offset. The leader answers once
    ``min_bytes`` are readable or ``max_wait_ms`` passed; at least one whole batch comes
    back even past ``partition_max_bytes`` (KIP-74).
    """

    fetch_offset: int
    partition_max_bytes: int = 1048576
    max_wait_ms: int = 500
    min_bytes: int = 1
    isolation_level: IsolationLevel | int = IsolationLevel.READ_UNCOMMITTED
    current_leader_epoch: int = NO_EPOCH
    replica_id: int = CONSUMER_REPLICA_ID
    # A native consumer's principal, checked against the ACLs (None: a super user).
    principal: str | None = None

    def checked(self) -> FetchRequest:
        """This request with every field checked: InvalidFetchSizeError for a
        ``partition_max_bytes`` outside [0, 2**31 - 1], InvalidRequestError for the rest."""
        return FetchRequest(
            int_field("fetch_offset", self.fetch_offset, INT64_MIN, INT64_MAX),
            int_field("partition_max_bytes", self.partition_max_bytes, 0, INT32_MAX, InvalidFetchSizeError),
            int_field("max_wait_ms", self.max_wait_ms),
            int_field("min_bytes", self.min_bytes),
            _isolation(self.isolation_level),
            int_field("current_leader_epoch", self.current_leader_epoch),
            int_field("replica_id", self.replica_id),
            principal_field(self.principal),
        )


class AbortedTransaction(NamedTuple):
    """A transaction aborted within a fetch's range (Kafka's FetchResponse AbortedTransaction)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchResponse(Message):
    """One partition's part of Kafka's FetchResponse: whole record batches from the fetch
    offset, the partition's offsets, and the leader's epoch.

    ``aborted_transactions`` come only with READ_COMMITTED fetches (whose records stop at
    the last stable offset): those overlapping the returned batches.
    """

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    aborted_transactions: tuple[AbortedTransaction, ...] = ()


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest(Message):
    """One partition's part of Kafka's ListOffsets; answered with an OffsetAndTimestamp.

    ``timestamp``: -2 earliest, -1 latest (the high watermark, or the last stable offset
    with READ_COMMITTED), -3 the record with the largest timestamp (KIP-734), or a time in
    ms (the first offset whose timestamp is at least that).
    """

    timestamp: int
    current_leader_epoch: int = NO_EPOCH
    isolation_level: IsolationLevel | int = IsolationLevel.READ_UNCOMMITTED
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)

    def checked(self) -> ListOffsetsRequest:
        """This request with every field checked (InvalidRequestError; also for a negative
        timestamp other than -1, -2 and -3)."""
        timestamp = int_field("timestamp", self.timestamp, INT64_MIN, INT64_MAX)
        if timestamp < MAX_TIMESTAMP:
            raise InvalidRequestError(
                f"list_offsets timestamp {timestamp}: use a time in ms (>= 0), -1 latest, -2 earliest or -3 max"
            )
        return ListOffsetsRequest(
            timestamp,
            int_field("current_leader_epoch", self.current_leader_epoch),
            _isolation(self.isolation_level),
            principal_field(self.principal),
        )


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochRequest(Message):
    """One partition's part of Kafka's OffsetForLeaderEpoch: where ``leader_epoch`` ended."""

    leader_epoch: int
    current_leader_epoch: int = NO_EPOCH

    def checked(self) -> OffsetForLeaderEpochRequest:
        """This request with every field checked (InvalidRequestError)."""
        return OffsetForLeaderEpochRequest(
            int_field("leader_epoch", self.leader_epoch), int_field("current_leader_epoch", self.current_leader_epoch)
        )


@dataclass(frozen=True, slots=True)
class EpochEndOffset(Message):
    """Kafka's EpochEndOffset: the largest epoch not above the one asked for, and where it
    ended in the leader's log ((-1, -1) when the log holds no epoch that old)."""

    leader_epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest(Message):
    """One partition's part of Kafka's DeleteRecords: move the log start to ``offset``
    (-1: the high watermark)."""

    offset: int
    current_leader_epoch: int = NO_EPOCH
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)

    def checked(self) -> DeleteRecordsRequest:
        """This request with every field checked (InvalidRequestError)."""
        return DeleteRecordsRequest(
            int_field("offset", self.offset, INT64_MIN, INT64_MAX),
            int_field("current_leader_epoch", self.current_leader_epoch),
            principal_field(self.principal),
        )


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse(Message):
    """One partition's part of Kafka's DeleteRecordsResponse: the new log start offset."""

    low_watermark: int


@dataclass(frozen=True, slots=True)
class WriteTxnMarkersRequest(Message):
    """One partition's part of Kafka's WriteTxnMarkers: the COMMIT or ABORT marker of a
    producer's transaction, from the transaction coordinator; answered with the marker's
    ProduceResponse once the ISR has it."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    transaction_result: TransactionResult | int
    current_leader_epoch: int = NO_EPOCH
    timeout_ms: int = 30000

    def checked(self) -> WriteTxnMarkersRequest:
        """This request with every field checked (InvalidRequestError)."""
        result = self.transaction_result
        if isinstance(result, bool):  # the wire's boolean, as it comes
            result = int(result)
        result = int_field("transaction_result", result, TransactionResult.ABORT, TransactionResult.COMMIT)
        return WriteTxnMarkersRequest(
            int_field("producer_id", self.producer_id, 0, INT64_MAX),
            int_field("producer_epoch", self.producer_epoch, 0, INT16_MAX),
            int_field("coordinator_epoch", self.coordinator_epoch),
            TransactionResult(result),
            int_field("current_leader_epoch", self.current_leader_epoch),
            int_field("timeout_ms", self.timeout_ms, 0),
        )


# -- partition replica: replication (replica -> controller; the controller's LeaderAndIsr is in
# actors.protocol_broker) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest(Message):
    """A leader's ISR change (one partition of Kafka's AlterPartition), checked against the
    leader and partition epochs."""

    topic_name: str
    partition_index: int
    broker_id: int  # the leader asking
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse(Message):
    """The partition's state as committed: the ISR change, or the current state if refused."""

    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


# -- controller --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataRequest(Message):
    """Kafka's MetadataRequest: the named topics (None: all); answered with ClusterMetadata.

    With ``allow_auto_topic_creation`` (and auto.create.topics.enable) unknown topics are
    created, as a Kafka broker does.
    """

    topics: tuple[str, ...] | None = None
    allow_auto_topic_creation: bool = False
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest(Message):
    """One topic of Kafka's CreateTopics (its CreatableTopic); answered with TopicMetadata.

    ``num_partitions`` and ``replication_factor`` -1 take the broker's num.partitions and
    default.replication.factor (KIP-464); ``assignments`` (broker ids per partition, in
    partition order) replaces both. ``validate_only`` (the request's, in Kafka) checks
    everything and creates nothing; the answer is the topic as it would be, without
    leaders or topic id.
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[tuple[int, ...], ...] | None = None
    configs: Mapping[str, Any] = field(default_factory=dict)
    validate_only: bool = False
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest(Message):
    """One topic of Kafka's DeleteTopics. An internal topic is refused unless
    ``internal_topics_allowed`` (Kafka's flag of the same name: rayqueue's own tools and
    tests, never a client)."""

    name: str
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)
    internal_topics_allowed: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest(Message):
    """One topic of Kafka's CreatePartitions: grow it to ``count`` partitions (the new ones
    on ``assignments`` when given); answered with TopicMetadata. ``validate_only`` checks
    and changes nothing (the answer is the topic as it is)."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None
    validate_only: bool = False
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest(Message):
    """One topic resource of Kafka's DescribeConfigs (``configuration_keys`` None: all);
    answered with ``{key: (value, source)}``."""

    resource_name: str
    configuration_keys: tuple[str, ...] | None = None
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class AlterableConfig(Message):
    """One config change of IncrementalAlterConfigs (``value`` unused by DELETE)."""

    name: str
    config_operation: AlterConfigOp | int
    value: Any = None


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsRequest(Message):
    """One topic resource of Kafka's IncrementalAlterConfigs, applied as one change;
    answered with the topic's config overrides after it (with ``validate_only``: checked,
    not applied, and answered with the overrides it would leave)."""

    resource_name: str
    configs: tuple[AlterableConfig, ...]
    validate_only: bool = False
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsRequest(Message):
    """Kafka's AllocateProducerIds: a block of producer ids for the transaction coordinator."""

    count: int = 1000


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse(Message):
    """The block [producer_id_start, producer_id_start + producer_id_len)."""

    producer_id_start: int
    producer_id_len: int


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest(Message):
    """Kafka's ElectLeaders (preferred election) of ``topic_partitions`` (None: all);
    answered per partition with None (moved) or the reason as an error class name."""

    topic_partitions: tuple[TopicPartition, ...] | None = None
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class DescribeClusterRequest(Message):
    """Kafka's DescribeCluster: cluster id, controller epoch, brokers and counts."""

    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class ListPartitionReassignmentsRequest(Message):
    """Kafka's ListPartitionReassignments: every ongoing reassignment."""

    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignmentsRequest(Message):
    """Kafka's AlterPartitionReassignments: each partition's new replica list."""

    reassignments: Mapping[TopicPartition, tuple[int, ...]]
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


# -- group coordinator -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequest(Message):
    """Kafka's JoinGroup, with the consumer protocol's subscription spelled out (rayqueue's
    coordinator assigns on the server); answered with JoinGroupResult once the rebalance
    completes.

    ``member_id`` is "" for a new member. ``protocols`` are assignor names in preference
    order; ``assignors`` carries user-supplied assignor objects by name. ``topics`` or a
    ``pattern`` is the subscription; ``owned_partitions`` what the member holds now (the
    cooperative protocol keeps it).

    A Kafka client (through the gateway) assigns on the client instead: ``metadata`` holds
    its opaque protocol metadata, one per entry of ``protocols``, and the group's leader
    member gets every member's and sends the assignment in SyncGroup. ``topics`` is then
    what the gateway read of the subscription (for DescribeGroups). With
    ``require_known_member_id`` (JoinGroup v4+, KIP-394) a new member without a
    ``group_instance_id`` is first given its id and asked to join again with it.
    ``client_host`` is where the member connects from as Kafka shows it ("/" and the
    address; DescribeGroups' client host); empty for rayqueue's own consumers.
    """

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[str, ...]
    topics: tuple[str, ...]
    pattern: str | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    assignors: Mapping[str, Any] | None = None
    metadata: tuple[bytes, ...] | None = None
    protocol_type: str = "consumer"
    require_known_member_id: bool = False
    client_host: str = ""
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class SyncGroupRequest(Message):
    """Kafka's SyncGroup: this member's assignment for ``generation_id``.

    In a group of client-assigning members (Kafka clients) the leader sends
    ``assignments`` (member id -> opaque assignment) and, where the gateway could read them
    (protocol type "consumer"), ``assigned_partitions`` for DescribeGroups and lag."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    assignments: Mapping[str, bytes] | None = None
    assigned_partitions: Mapping[str, tuple[TopicPartition, ...]] | None = None
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)
    # SyncGroup v5+: the protocol the member was told in its JoinGroup answer (checked in a
    # consumer group, as Kafka's; None: not sent).
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class SyncGroupResponse(Message):
    """The member's assignment (Kafka's SyncGroupResponse, decoded; ``member_assignment``
    is the leader's opaque bytes in a client-assigned group)."""

    assignment: tuple[TopicPartition, ...]
    member_assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest(Message):
    """Kafka's Heartbeat; ``poll_age_ms`` (rayqueue's) is the time since the member's
    application last polled, which the coordinator holds against max.poll.interval.ms."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    poll_age_ms: int = 0
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest(Message):
    """Kafka's LeaveGroup for one member."""

    group_id: str
    member_id: str
    group_instance_id: str | None = None
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest(Message):
    """Kafka's OffsetCommit for one group. Generation -1 with no member id is a standalone
    commit (allowed only while the group has no members). Answered with the partitions
    refused one by one (a consumer group's commit of an earlier member epoch), if any."""

    group_id: str
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    member_id: str = ""
    group_instance_id: str | None = None
    generation_id: int = -1  # a consumer group member's member epoch (KIP-848)
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)
    api_version: int | None = None  # the Kafka request's version (None: rayqueue's own client)


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest(Message):
    """Kafka's TxnOffsetCommit: offsets committed as part of a producer's transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    member_id: str = ""
    group_instance_id: str | None = None
    generation_id: int = -1
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest(Message):
    """Kafka's OffsetFetch for one group (``partitions`` None: all); answered with the
    committed ``{partition: OffsetAndMetadata}``. ``require_stable`` is KIP-447's."""

    group_id: str
    partitions: tuple[TopicPartition, ...] | None = None
    require_stable: bool = False
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)
    # OffsetFetch v9+ (KIP-848): a consumer group member's id and epoch, checked as Kafka does.
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class GroupLagRequest(Message):
    """A group's lag (as ``kafka-consumer-groups --describe`` shows it), computed by the group
    coordinator; answered with ``{partition: PartitionLag}`` for the partitions the group
    committed for or is assigned, plus every partition of ``topics``."""

    group_id: str
    topics: tuple[str, ...] = ()
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest(Message):
    """Kafka's DescribeGroups; answered with a GroupDescription per group."""

    groups: tuple[str, ...]
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class ListGroupsRequest(Message):
    """Kafka's ListGroups; answered with (group id, state, protocol type) per group."""

    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest(Message):
    """Kafka's DeleteGroups; answered per group with None or its error."""

    groups_names: tuple[str, ...]
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest(Message):
    """Kafka's OffsetDelete: drop a group's committed offsets of ``partitions``; answered per
    partition with None or its error (GroupSubscribedToTopicError while a member of the
    group subscribes to the partition's topic)."""

    group_id: str
    partitions: tuple[TopicPartition, ...]
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class CompleteTxnRequest(Message):
    """The transaction coordinator's word to the group coordinator that a producer's
    transaction ended and its marker is in ``__consumer_offsets`` (what Kafka's broker does
    on a WriteTxnMarkers for an offsets partition)."""

    producer_id: int
    transaction_result: TransactionResult | int


# -- transaction coordinator -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest(Message):
    """Kafka's InitProducerId: a fresh id for an idempotent producer (``transactional_id``
    None), or the transactional id's with a bumped epoch. ``producer_id``/``producer_epoch``
    are the caller's current ones when it asks for a bump after an error (KIP-360)."""

    transactional_id: str | None = None
    transaction_timeout_ms: int = 60000
    producer_id: int = -1
    producer_epoch: int = -1
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnRequest(Message):
    """Kafka's AddPartitionsToTxn (one transaction)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)
    # KIP-890's VerifyOnly (a partition leader asking before a transaction's first batch):
    # whether the partitions are in the ongoing transaction of this producer id and epoch;
    # nothing is added.
    verify_only: bool = False


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnRequest(Message):
    """Kafka's AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class EndTxnRequest(Message):
    """Kafka's EndTxn: commit (``committed``) or abort the open transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class DescribeTransactionsRequest(Message):
    """Kafka's DescribeTransactions (``transactional_ids`` None: every one, as ListTransactions)."""

    transactional_ids: tuple[str, ...] | None = None
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)
