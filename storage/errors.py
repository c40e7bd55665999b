"""Kafka error types, one class per Kafka error code.

Every error carries Kafka's numeric ``code`` and whether it is ``retriable``. They live
here, in the lowest layer, because the storage engine raises most of them; the actor and
client layers reuse them and ``rayqueue.errors`` re-exports them all.

Errors must survive pickling (Ray re-raises an actor's exception in the caller, which
catches the original class), so each keeps its message in ``args`` and nothing else.
"""

from __future__ import annotations

import re

BY_CODE: dict[int, type[KafkaError]] = {}


class KafkaError(Exception):
    """Base class of every rayqueue error."""

    code: int = -1
    retriable: bool = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        BY_CODE.setdefault(cls.code, cls)

    @property
    def kafka_name(self) -> str:
        """Kafka's name for the error, e.g. ``OFFSET_OUT_OF_RANGE``."""
        return (type(self).__doc__ or "").split(":", 1)[0]

    def __str__(self) -> str:
        message = super().__str__()
        return f"[{self.kafka_name}] {message}" if message else self.kafka_name


class OffsetOutOfRangeError(KafkaError):
    """OFFSET_OUT_OF_RANGE: A fetch or seek named an offset outside [log start, log end]."""

    code, retriable = 1, False


class CorruptRecordError(KafkaError):
    """CORRUPT_MESSAGE: A record batch failed its CRC or is malformed."""

    code, retriable = 2, True


class UnknownTopicOrPartitionError(KafkaError):
    """UNKNOWN_TOPIC_OR_PARTITION: The topic or partition does not exist."""

    code, retriable = 3, True


class InvalidFetchSizeError(KafkaError):
    """INVALID_FETCH_SIZE: A fetch asked for a negative or zero size."""

    code, retriable = 4, False


class LeaderNotAvailableError(KafkaError):
    """LEADER_NOT_AVAILABLE: The partition has no leader right now (election under way)."""

    code, retriable = 5, True


class NotLeaderOrFollowerError(KafkaError):
    """NOT_LEADER_OR_FOLLOWER: This replica is not the partition's leader; refresh metadata."""

    code, retriable = 6, True


class RequestTimedOutError(KafkaError):
    """REQUEST_TIMED_OUT: The broker did not finish the request in time."""

    code, retriable = 7, True


class ReplicaNotAvailableError(KafkaError):
    """REPLICA_NOT_AVAILABLE: The replica is not available."""

    code, retriable = 9, True


class RecordTooLargeError(KafkaError):
    """MESSAGE_TOO_LARGE: A batch is larger than max.message.bytes."""

    code, retriable = 10, False


class NetworkError(KafkaError):
    """NETWORK_EXCEPTION: The actor serving the request died or could not be reached."""

    code, retriable = 13, True


class CoordinatorLoadInProgressError(KafkaError):
    """COORDINATOR_LOAD_IN_PROGRESS: The coordinator is loading its state (e.g. offsets)."""

    code, retriable = 14, True


class CoordinatorNotAvailableError(KafkaError):
    """COORDINATOR_NOT_AVAILABLE: The coordinator is not available."""

    code, retriable = 15, True


class NotCoordinatorError(KafkaError):
    """NOT_COORDINATOR: This is not the coordinator for the group or transactional id."""

    code, retriable = 16, True


class InvalidTopicError(KafkaError):
    """INVALID_TOPIC_EXCEPTION: The topic name is illegal or the topic is internal."""

    code, retriable = 17, False


class RecordListTooLargeError(KafkaError):
    """RECORD_LIST_TOO_LARGE: The produce request is larger than allowed."""

    code, retriable = 18, False


class NotEnoughReplicasError(KafkaError):
    """NOT_ENOUGH_REPLICAS: Fewer in-sync replicas than min.insync.replicas; nothing was appended."""

    code, retriable = 19, True


class NotEnoughReplicasAfterAppendError(KafkaError):
    """NOT_ENOUGH_REPLICAS_AFTER_APPEND: Appended, but the ISR shrank below min.insync.replicas before it replicated."""

    code, retriable = 20, True


class InvalidRequiredAcksError(KafkaError):
    """INVALID_REQUIRED_ACKS: acks must be 0, 1 or all (-1)."""

    code, retriable = 21, False


class IllegalGenerationError(KafkaError):
    """ILLEGAL_GENERATION: The member's generation is not the group's current one."""

    code, retriable = 22, False


class InconsistentGroupProtocolError(KafkaError):
    """INCONSISTENT_GROUP_PROTOCOL: The member's protocols share nothing with the group's."""

    code, retriable = 23, False


class InvalidGroupIdError(KafkaError):
    """INVALID_GROUP_ID: The group id is empty or illegal."""

    code, retriable = 24, False


class UnknownMemberIdError(KafkaError):
    """UNKNOWN_MEMBER_ID: The member id is not known to the group."""

    code, retriable = 25, False


class InvalidSessionTimeoutError(KafkaError):
    """INVALID_SESSION_TIMEOUT: The session timeout is outside the allowed range."""

    code, retriable = 26, False


class RebalanceInProgressError(KafkaError):
    """REBALANCE_IN_PROGRESS: The group is rebalancing; rejoin."""

    code, retriable = 27, False


class InvalidCommitOffsetSizeError(KafkaError):
    """INVALID_COMMIT_OFFSET_SIZE: The offset commit metadata is too large."""

    code, retriable = 28, False


class InvalidTimestampError(KafkaError):
    """INVALID_TIMESTAMP: A timestamp is out of the allowed range."""

    code, retriable = 32, False


class TopicAlreadyExistsError(KafkaError):
    """TOPIC_ALREADY_EXISTS: A topic with that name exists already."""

    code, retriable = 36, False


class InvalidPartitionsError(KafkaError):
    """INVALID_PARTITIONS: The partition count is invalid."""

    code, retriable = 37, False


class InvalidReplicationFactorError(KafkaError):
    """INVALID_REPLICATION_FACTOR: The replication factor is invalid or larger than the broker count."""

    code, retriable = 38, False


class InvalidReplicaAssignmentError(KafkaError):
    """INVALID_REPLICA_ASSIGNMENT: The replica assignment is invalid."""

    code, retriable = 39, False


class InvalidConfigError(KafkaError):
    """INVALID_CONFIG: A configuration key or value is invalid."""

    code, retriable = 40, False


class InvalidRequestError(KafkaError):
    """INVALID_REQUEST: The request is malformed."""

    code, retriable = 42, False


class UnsupportedForMessageFormatError(KafkaError):
    """UNSUPPORTED_FOR_MESSAGE_FORMAT: The message format does not support the request."""

    code, retriable = 43, False


class PolicyViolationError(KafkaError):
    """POLICY_VIOLATION: The request violates a configured policy."""

    code, retriable = 44, False


class OutOfOrderSequenceError(KafkaError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER: A producer's sequence number skipped ahead."""

    code, retriable = 45, False


class DuplicateSequenceError(KafkaError):
    """DUPLICATE_SEQUENCE_NUMBER: A producer resent a batch already appended."""

    code, retriable = 46, False


class InvalidProducerEpochError(KafkaError):
    """INVALID_PRODUCER_EPOCH: The producer's epoch is older than the current one."""

    code, retriable = 47, False


class InvalidTxnStateError(KafkaError):
    """INVALID_TXN_STATE: The transaction is not in a state that allows the request."""

    code, retriable = 48, False


class InvalidProducerIdMappingError(KafkaError):
    """INVALID_PRODUCER_ID_MAPPING: The producer id does not match the transactional id."""

    code, retriable = 49, False


class InvalidTransactionTimeoutError(KafkaError):
    """INVALID_TRANSACTION_TIMEOUT: transaction.timeout.ms is larger than the broker allows."""

    code, retriable = 50, False


class ConcurrentTransactionsError(KafkaError):
    """CONCURRENT_TRANSACTIONS: Another transaction for this id is still completing."""

    code, retriable = 51, True


class TransactionCoordinatorFencedError(KafkaError):
    """TRANSACTION_COORDINATOR_FENCED: A marker came from a coordinator epoch older than the one the partition saw."""

    code, retriable = 52, False


class KafkaStorageError(KafkaError):
    """KAFKA_STORAGE_ERROR: A disk error on the broker (disk full, permission, I/O)."""

    code, retriable = 56, True


class LogDirNotFoundError(KafkaError):
    """LOG_DIR_NOT_FOUND: The log directory does not exist."""

    code, retriable = 57, False


class UnknownProducerIdError(KafkaError):
    """UNKNOWN_PRODUCER_ID: The broker has no state for this producer id."""

    code, retriable = 59, False


class ReassignmentInProgressError(KafkaError):
    """REASSIGNMENT_IN_PROGRESS: A reassignment of this partition is under way."""

    code, retriable = 60, False


class NonEmptyGroupError(KafkaError):
    """NON_EMPTY_GROUP: The group still has members."""

    code, retriable = 68, False


class GroupIdNotFoundError(KafkaError):
    """GROUP_ID_NOT_FOUND: The group does not exist."""

    code, retriable = 69, False


class GroupSubscribedToTopicError(KafkaError):
    """GROUP_SUBSCRIBED_TO_TOPIC: The consumer group is actively subscribed to the topic."""

    code, retriable = 86, False


class FencedLeaderEpochError(KafkaError):
    """FENCED_LEADER_EPOCH: The request's leader epoch is older than the replica's."""

    code, retriable = 74, True


class UnknownLeaderEpochError(KafkaError):
    """UNKNOWN_LEADER_EPOCH: The request's leader epoch is newer than the replica's."""

    code, retriable = 75, True


class UnsupportedCompressionTypeError(KafkaError):
    """UNSUPPORTED_COMPRESSION_TYPE: The compression codec is unknown."""

    code, retriable = 76, False


class OffsetNotAvailableError(KafkaError):
    """OFFSET_NOT_AVAILABLE: The offset is not available yet (e.g. high watermark behind)."""

    code, retriable = 78, True


class MemberIdRequiredError(KafkaError):
    """MEMBER_ID_REQUIRED: Join again with the member id the coordinator handed out."""

    code, retriable = 79, False


class PreferredLeaderNotAvailableError(KafkaError):
    """PREFERRED_LEADER_NOT_AVAILABLE: The preferred leader is not in the ISR."""

    code, retriable = 80, True


class GroupMaxSizeReachedError(KafkaError):
    """GROUP_MAX_SIZE_REACHED: The group has group.max.size members already."""

    code, retriable = 81, False


class FencedInstanceIdError(KafkaError):
    """FENCED_INSTANCE_ID: Another member took this group.instance.id."""

    code, retriable = 82, False


class EligibleLeadersNotAvailableError(KafkaError):
    """ELIGIBLE_LEADERS_NOT_AVAILABLE: No replica of the partition may be elected leader."""

    code, retriable = 83, True


class ElectionNotNeededError(KafkaError):
    """ELECTION_NOT_NEEDED: The preferred replica is already the leader."""

    code, retriable = 84, True


class UnstableOffsetCommitError(KafkaError):
    """UNSTABLE_OFFSET_COMMIT: A transactional offset commit for the partition is pending."""

    code, retriable = 88, True


class ProducerFencedError(KafkaError):
    """PRODUCER_FENCED: A newer producer with the same transactional.id exists."""

    code, retriable = 90, False


class InvalidRecordError(KafkaError):
    """INVALID_RECORD: A record failed the broker's validation (e.g. a null key on a compacted topic)."""

    code, retriable = 87, False


class TransactionalIdNotFoundError(KafkaError):
    """TRANSACTIONAL_ID_NOT_FOUND: The transactional id is unknown."""

    code, retriable = 105, False


class UnsupportedVersionError(KafkaError):
    """UNSUPPORTED_VERSION: The API version of a request is not served."""

    code, retriable = 35, False


class FetchSessionIdNotFoundError(KafkaError):
    """FETCH_SESSION_ID_NOT_FOUND: The fetch session is unknown (the gateway keeps none)."""

    code, retriable = 70, True


class UnknownTopicIdError(KafkaError):
    """UNKNOWN_TOPIC_ID: No topic has this topic id (KIP-516)."""

    code, retriable = 100, True


# -- KIP-848's consumer group protocol: raised by the group coordinator ----------------------


class FencedMemberEpochError(KafkaError):
    """FENCED_MEMBER_EPOCH: The member epoch is fenced; the member must give up its partitions and rejoin."""

    code, retriable = 110, False


class UnreleasedInstanceIdError(KafkaError):
    """UNRELEASED_INSTANCE_ID: Another member still holds this group.instance.id; it must leave first."""

    code, retriable = 111, False


class UnsupportedAssignorError(KafkaError):
    """UNSUPPORTED_ASSIGNOR: The group coordinator has no server-side assignor of that name."""

    code, retriable = 112, False


class StaleMemberEpochError(KafkaError):
    """STALE_MEMBER_EPOCH: The member epoch is stale; retry with the epoch of the last heartbeat."""

    code, retriable = 113, False


class InvalidRegularExpressionError(KafkaError):
    """INVALID_REGULAR_EXPRESSION: The subscribed topic regex is not a valid RE2J expression."""

    code, retriable = 128, False


# -- authentication: raised by the gateway's SASL and the controller's SCRAM users --


class UnsupportedSaslMechanismError(KafkaError):
    """UNSUPPORTED_SASL_MECHANISM: The broker does not support the requested SASL mechanism."""

    code, retriable = 33, False


class IllegalSaslStateError(KafkaError):
    """ILLEGAL_SASL_STATE: Request is not valid given the current SASL state."""

    code, retriable = 34, False


class SaslAuthenticationError(KafkaError):
    """SASL_AUTHENTICATION_FAILED: SASL Authentication failed."""

    code, retriable = 58, False


class ResourceNotFoundError(KafkaError):
    """RESOURCE_NOT_FOUND: A request illegally referred to a resource that does not exist."""

    code, retriable = 91, False


class DuplicateResourceError(KafkaError):
    """DUPLICATE_RESOURCE: A request illegally referred to the same resource twice."""

    code, retriable = 92, False


class UnacceptableCredentialError(KafkaError):
    """UNACCEPTABLE_CREDENTIAL: Requested credential would not meet criteria for acceptability."""

    code, retriable = 93, False


class UnknownServerError(KafkaError):
    """UNKNOWN_SERVER_ERROR: An unexpected error on the broker."""

    code, retriable = -1, False


class KafkaTimeoutError(KafkaError):
    """KAFKA_TIMEOUT: A client-side deadline passed (Kafka's TimeoutException)."""

    code, retriable = -2, True


class UnknownMagicError(CorruptRecordError):
    """CORRUPT_MESSAGE: a record batch has a magic byte this version cannot read."""


class LogDirLockedError(KafkaStorageError):
    """KAFKA_STORAGE_ERROR: another process owns this partition directory."""

    retriable = False


class TopicAuthorizationFailedError(KafkaError):
    """TOPIC_AUTHORIZATION_FAILED: The principal may not do this to the topic."""

    code, retriable = 29, False


class GroupAuthorizationFailedError(KafkaError):
    """GROUP_AUTHORIZATION_FAILED: The principal may not do this to the group."""

    code, retriable = 30, False


class ClusterAuthorizationFailedError(KafkaError):
    """CLUSTER_AUTHORIZATION_FAILED: The principal may not do this to the cluster."""

    code, retriable = 31, False


class TransactionalIdAuthorizationFailedError(KafkaError):
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED: The principal may not use this transactional id."""

    code, retriable = 53, False


class SecurityDisabledError(KafkaError):
    """SECURITY_DISABLED: No authorizer is configured (authorizer.class.name is empty)."""

    code, retriable = 54, False


class OperationNotAttemptedError(KafkaError):
    """OPERATION_NOT_ATTEMPTED: Not attempted because another part of the request failed."""

    code, retriable = 55, False


def error_for_code(code: int, message: str = "") -> KafkaError:
    """Build the error instance for a Kafka error ``code``."""
    return BY_CODE.get(code, UnknownServerError)(message)


__all__ = ["BY_CODE", "KafkaError", "error_for_code"] + sorted(
    name for name, value in dict(globals()).items() if re.fullmatch(r"[A-Z]\w*Error", name)
)
