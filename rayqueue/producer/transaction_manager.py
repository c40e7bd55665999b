"""The producer's idempotence and transaction state, as Kafka's TransactionManager.

It holds the producer id and epoch (from the transaction coordinator), the next sequence
number of every partition, and for a transactional producer the transaction state machine
(Kafka's states and transitions), the partitions and groups already added to the current
transaction, and the error that put it in an abortable or fatal state. Coordinator calls
ride through retriable errors and coordinator restarts. The producer drives it: the
accumulator asks for sequences, the sender for producer ids and partition additions, the
Producer's user-facing calls for the transitions.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import ray

from actors.launch import find_actor
from actors.names import TRANSACTION_COORDINATOR_NAME
from actors.protocol import InitProducerIdRequest
from actors.types import TopicPartition
from rayqueue.connection import ClusterHandle
from rayqueue.errors import (
    ClusterAuthorizationFailedError,
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    as_kafka_error,
)

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
EPOCH_MAX = 2**15 - 1
# CONCURRENT_TRANSACTIONS means the previous transaction of the id is still completing (its
# markers are being written, a matter of milliseconds): retried sooner than retry.backoff.ms,
# as Kafka's client does (TransactionManager.ADD_PARTITIONS_RETRY_BACKOFF_MS).
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.02


class TransactionState(enum.Enum):
    """Kafka's producer-side transaction states."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState
# Target state -> the states it may be entered from (Kafka's TransactionManager.State.isTransitionValid).
_VALID_FROM: dict[TransactionState, frozenset[TransactionState]] = {
    S.UNINITIALIZED: frozenset(),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.INITIALIZING}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TransactionState),
}

# Errors that end a transactional producer for good (every later call raises them).
_FATAL = (ProducerFencedError, InvalidProducerEpochError)
# A coordinator call failing with one of these ends the producer too (Kafka's
# TransactionManager: fenced, an invalid state, or the transactional id or cluster refused).
_FATAL_CALL_ERRORS = (
    ProducerFencedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionalIdAuthorizationFailedError,
    ClusterAuthorizationFailedError,
)


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past INT32_MAX to 0, as Kafka's DefaultRecordBatch does."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def retry_backoff(error: BaseException, backoff_s: float) -> float:
    """How long to wait before retrying a coordinator call that failed with ``error``:
    retry.backoff.ms (``backoff_s``), or less for CONCURRENT_TRANSACTIONS."""
    if isinstance(error, ConcurrentTransactionsError):
        return min(backoff_s, CONCURRENT_TRANSACTIONS_BACKOFF_S)
    return backoff_s


def coordinator_call(
    lookup: Callable[[], Any],
    method: str,
    *args: Any,
    timeout_s: float,
    backoff_s: float,
    what: str,
) -> Any:
    """Call a coordinator actor method and wait, retrying retriable errors until ``timeout_s``.

    Retried: Kafka errors flagged retriable (CoordinatorLoadInProgress,
    ConcurrentTransactions, NotCoordinator, ...), a missing actor, and Ray's actor errors
    while the actor restarts. Anything else is raised as it is. The wait between attempts
    starts at ``backoff_s`` and doubles up to 1 s; CONCURRENT_TRANSACTIONS (the id's previous
    transaction is completing) is retried after 20 ms instead, as Kafka's client does.
    """
    deadline = time.monotonic() + timeout_s
    delay = backoff_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            handle = lookup()
            return ray.get(getattr(handle, method).remote(*args), timeout=max(0.001, remaining))
        except ray.exceptions.GetTimeoutError:
            raise KafkaTimeoutError(f"{what}: no answer within {timeout_s:.0f}s") from None
        except Exception as exc:  # noqa: BLE001 - sorted into retriable and not below
            error = as_kafka_error(exc)
            if not (isinstance(error, KafkaError) and error.retriable):
                raise error from None
        wait = retry_backoff(error, delay)
        if time.monotonic() + wait > deadline:
            raise KafkaTimeoutError(f"{what}: gave up after {timeout_s:.0f}s: {error}") from error
        logger.debug("%s: retrying after %s", what, error)
        time.sleep(wait)
        if not isinstance(error, ConcurrentTransactionsError):
            delay = min(delay * 2, 1.0)


class TransactionManager:
    """Producer id, epoch, sequences and (with a transactional.id) the transaction state.

    Thread-safe: user calls and the sender thread share it; the fields the sender reads
    on every drain (``producer_id``, ``epoch``) change only while nothing is in flight.
    """

    def __init__(
        self,
        cluster: ClusterHandle,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        retry_backoff_s: float,
        max_block_s: float,
    ) -> None:
        self._cluster = cluster
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._backoff = max(retry_backoff_s, 0.01)
        self._max_block = max_block_s
        self.producer_id = -1
        self.epoch = -1
        self._sequences: dict[TopicPartition, int] = {}
        self._lock = threading.Lock()
        self.state = S.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.partitions: set[TopicPartition] = set()  # added to the coordinator's transaction
        self.groups: set[str] = set()  # add_offsets_to_txn done in this transaction
        # A batch with a sequence failed, so the broker's idea of the next sequence is
        # unknown: the epoch must be bumped and sequences restarted (KIP-360).
        self.epoch_bump_needed = False
        self._coordinator: Any = None
        # The producer's principal, on every coordinator request (None: a super user).
        self.principal: str | None = None

    # -- the coordinator ------------------------------------------------------------------

    @property
    def is_transactional(self) -> bool:
        """Whether the producer has a transactional.id."""
        return self.transactional_id is not None

    def coordinator(self) -> Any:
        """The transaction coordinator actor (looked up by name the first time)."""
        if self._coordinator is None:
            handle = getattr(self._cluster, "transaction_coordinator", None)
            if handle is None:
                handle = find_actor(TRANSACTION_COORDINATOR_NAME, self._cluster.namespace)
                if handle is None:
                    raise CoordinatorNotAvailableError(
                        f"no transaction coordinator in namespace {self._cluster.namespace!r}"
                    )
            self._coordinator = handle
        return self._coordinator

    def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """A coordinator call (``method`` with its ``request``) with Kafka's retries, bounded
        by max.block.ms."""
        return coordinator_call(
            self.coordinator,
            method,
            request,
            timeout_s=self._max_block if timeout_s is None else timeout_s,
            backoff_s=self._backoff,
            what=f"{method}({self.transactional_id!r})",
        )

    def init_producer_id(self, timeout_s: float | None = None) -> None:
        """Get a producer id and epoch (an idempotent producer's, or a bumped one for our id).

        With a known id and epoch (an epoch bump after an abort, KIP-360) they are passed
        along so that the coordinator bumps the epoch rather than fencing us.
        """
        request = InitProducerIdRequest(
            self.transactional_id, self.transaction_timeout_ms, self.producer_id, self.epoch, self.principal
        )
        result = self.call("init_producer_id", request, timeout_s=timeout_s)
        with self._lock:
            self.producer_id, self.epoch = result.producer_id, result.epoch
            self._sequences.clear()
            self.epoch_bump_needed = False

    # -- sequences ------------------------------------------------------------------------

    @property
    def has_producer_id(self) -> bool:
        """Whether a producer id has been assigned."""
        return self.producer_id >= 0

    def next_sequence(self, tp: TopicPartition, records: int) -> int:
        """The base sequence of the next batch of ``tp`` (``records`` long); advances it."""
        sequence = self._sequences.get(tp, 0)
        self._sequences[tp] = increment_sequence(sequence, records)
        return sequence

    def bump_idempotent_epoch(self) -> bool:
        """Restart every sequence under a new epoch (an idempotent producer bumps it itself).

        Returns False when the epoch is exhausted and a new producer id is needed instead.
        """
        with self._lock:
            self._sequences.clear()
            self.epoch_bump_needed = False
            if self.epoch >= EPOCH_MAX:
                self.producer_id, self.epoch = -1, -1
                return False
            self.epoch += 1
            return True

    # -- transaction state ----------------------------------------------------------------

    def _transition(self, target: TransactionState) -> None:
        if self.state is S.FATAL_ERROR and target is not S.FATAL_ERROR:
            self._raise_error()
        if self.state not in _VALID_FROM[target]:
            if self.state is S.ABORTABLE_ERROR:
                self._raise_error()
            raise IllegalStateError(
                f"transactional id {self.transactional_id!r}: invalid transition from {self.state.value} "
                f"to {target.value}"
            )
        self.state = target

    def _raise_error(self) -> None:
        error = self.last_error
        if isinstance(error, ProducerFencedError):
            raise ProducerFencedError(
                f"transactional id {self.transactional_id!r}: this producer was fenced by a newer instance: {error}"
            ) from error
        if self.state is S.FATAL_ERROR:
            raise KafkaError(
                f"transactional id {self.transactional_id!r}: the producer hit a fatal error and must be closed: "
                f"{error}"
            ) from error
        raise KafkaError(
            f"transactional id {self.transactional_id!r}: the transaction hit an error and must be aborted: {error}"
        ) from error

    def require_transactional(self, method: str) -> None:
        """IllegalStateError for a transactional call on a producer without transactional.id."""
        if not self.is_transactional:
            raise IllegalStateError(f"{method}() needs a transactional producer (set transactional.id)")

    def check_send(self) -> None:
        """Raise unless a record may be sent now (a transaction is open and healthy)."""
        state = self.state
        if state is S.IN_TRANSACTION:
            return
        if state in (S.FATAL_ERROR, S.ABORTABLE_ERROR):
            self._raise_error()
        if state in (S.UNINITIALIZED, S.INITIALIZING):
            raise IllegalStateError("cannot send before init_transactions() when a transactional.id is set")
        raise IllegalStateError(f"cannot send in state {state.value}: call begin_transaction() first")

    def begin_init(self) -> None:
        """UNINITIALIZED -> INITIALIZING (init_transactions may be called again after a timeout)."""
        with self._lock:
            self._transition(S.INITIALIZING)

    def complete_init(self) -> None:
        """INITIALIZING -> READY once the coordinator gave us our epoch."""
        with self._lock:
            self._transition(S.READY)

    def begin_transaction(self) -> None:
        """READY -> IN_TRANSACTION."""
        with self._lock:
            self._transition(S.IN_TRANSACTION)
            self.partitions = set()
            self.groups = set()

    def check_in_transaction(self, method: str) -> None:
        """Raise unless a transaction is open and healthy (for send_offsets_to_transaction)."""
        with self._lock:
            if self.state is S.IN_TRANSACTION:
                return
            if self.state in (S.FATAL_ERROR, S.ABORTABLE_ERROR):
                self._raise_error()
            raise IllegalStateError(f"cannot call {method}() in state {self.state.value}")

    def begin_commit(self) -> bool:
        """IN_TRANSACTION -> COMMITTING; False when a timed-out commit is being resumed."""
        with self._lock:
            if self.state is S.COMMITTING_TRANSACTION:
                return False
            self._transition(S.COMMITTING_TRANSACTION)
            return True

    def begin_abort(self) -> bool:
        """IN_TRANSACTION or ABORTABLE_ERROR -> ABORTING; False when resuming an abort."""
        with self._lock:
            if self.state is S.ABORTING_TRANSACTION:
                return False
            self._transition(S.ABORTING_TRANSACTION)
            return True

    def complete_transaction(self) -> None:
        """COMMITTING/ABORTING -> READY; the next transaction starts empty."""
        with self._lock:
            self._transition(S.READY)
            self.partitions = set()
            self.groups = set()
            self.last_error = None

    def raise_if_failed(self) -> None:
        """Raise the error that made the transaction abortable (or the producer fatal)."""
        with self._lock:
            if self.state in (S.FATAL_ERROR, S.ABORTABLE_ERROR):
                self._raise_error()

    @property
    def started(self) -> bool:
        """Whether the coordinator knows of this transaction (partitions or groups added)."""
        return bool(self.partitions or self.groups)

    @property
    def failed(self) -> BaseException | None:
        """The error batches not yet sent must fail with (abortable or fatal state), else None."""
        state = self.state
        if state is S.ABORTABLE_ERROR or state is S.FATAL_ERROR:
            return self.last_error
        if state is S.ABORTING_TRANSACTION:
            return self.last_error or TransactionAbortedError("the transaction is being aborted")
        return None

    def on_error(self, error: BaseException) -> None:
        """A produce or coordinator error inside the transaction: fatal or abortable, as Kafka sorts them."""
        if isinstance(error, TransactionAbortedError):
            return
        with self._lock:
            if isinstance(error, _FATAL):
                if not isinstance(error, ProducerFencedError):
                    error = ProducerFencedError(f"producer epoch {self.epoch} is stale: {error}")
                self.last_error = error
                self.state = S.FATAL_ERROR
            elif self.state is S.FATAL_ERROR:
                return
            elif self.state in _VALID_FROM[S.ABORTABLE_ERROR]:
                self.last_error = error
                self.state = S.ABORTABLE_ERROR
            elif self.last_error is None:
                self.last_error = error

    def on_fatal(self, error: BaseException) -> None:
        """An error after which the producer can only be closed."""
        with self._lock:
            if isinstance(error, InvalidProducerEpochError):
                error = ProducerFencedError(f"producer epoch {self.epoch} is stale: {error}")
            self.last_error = error
            self.state = S.FATAL_ERROR

    def handle_failed_call(self, exc: BaseException, fatal: bool = False) -> None:
        """A coordinator call of the transaction failed: fencing and an invalid state (or
        ``fatal``) end the producer, anything else makes the transaction abortable."""
        error = as_kafka_error(exc)
        if fatal or isinstance(error, _FATAL_CALL_ERRORS):
            self.on_fatal(error)
        else:
            self.on_error(error)

    def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Record partitions the coordinator added to the current transaction."""
        with self._lock:
            self.partitions.update(partitions)


__all__ = [
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionState",
    "coordinator_call",
    "increment_sequence",
    "retry_backoff",
]
