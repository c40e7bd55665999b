"""Every transactional id's state and the rules of the transactional API, as a plain state
machine (Kafka's ``TransactionStateManager`` with the decisions of its ``TransactionCoordinator``).

Each request is decided here and comes back as what to do: a :class:`TxnTransit` (the next
metadata of an id, which takes effect with :meth:`TransactionStateManager.complete_transition`
once its ``__transaction_state`` record is durable), the :class:`TxnMarkers` a transaction
owes its partitions, or the answer. The actor shell performs the writes and markers and may
batch them as it likes (several ids' records in one append, the markers of one broker in one
call); nothing here waits, writes or reads the time except through the injected clock.

Fencing is by producer epoch: a call whose producer id is not the id's gets
InvalidProducerIdMappingError, one whose epoch is not the current one ProducerFencedError
(a newer instance took over, or the coordinator aborted its transaction on timeout).

EndTxn is answered once its PrepareCommit/PrepareAbort is durable, as Kafka answers it; the
completion (markers, CompleteCommit/CompleteAbort) runs after the answer. The manager keeps
which ids have a completion claimed (:meth:`TransactionStateManager.claim_completion`), so
that the shell starts one per id and never loses one: a call that finds an id in a Prepare
state with none claimed starts it.

A completion whose markers are written while the id's next AddPartitionsToTxn or
AddOffsetsToTxn waits for its turn need not write CompleteCommit/CompleteAbort itself: it
records that the markers are done (:meth:`TransactionStateManager.record_markers_done`, in
memory only) and the add writes the CompleteX and its own Ongoing in one append
(:meth:`TransactionStateManager.plan_add`), the log keeping Kafka's shape. Until then the id
is in its Prepare state, with the CompleteX still owed: every other call sees what it sees
today, and a completion claimed then writes only the CompleteX.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from actors.clock import Clock
from actors.names import OFFSETS_TOPIC
from actors.protocol import TransactionResult, TransactionState
from actors.transaction_coordinator.records import Record, decode_key, decode_value, record
from actors.transaction_coordinator.transaction_metadata import (
    NO_PRODUCER_ID,
    OPEN_STATES,
    PREPARE_STATES,
    TransactionMetadata,
)
from actors.types import ProducerIdAndEpoch, TopicPartition, TransactionDescription
from storage.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
)

logger = logging.getLogger(__name__)

_IDLE_STATES = frozenset({TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT})


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """A decided transition of one id (Kafka's TxnTransitMetadata): ``target`` becomes the
    id's state once :attr:`record` is durable. ``previous`` is the state it was decided from."""

    previous: TransactionMetadata | None
    target: TransactionMetadata

    @property
    def record(self) -> Record:
        """The ``__transaction_state`` record to append (a tombstone for Dead)."""
        return record(self.target)

    @property
    def transactional_id(self) -> str:
        """The id it moves."""
        return self.target.transactional_id


@dataclass(frozen=True, slots=True)
class TxnMarkers:
    """The markers a PrepareCommit/PrepareAbort owes (Kafka's TxnMarkerEntry; the coordinator
    epoch is the shell's to add): one per partition, all of ``result``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    result: TransactionResult
    partitions: tuple[TopicPartition, ...]

    @property
    def touches_offsets(self) -> bool:
        """A partition is ``__consumer_offsets``: the group coordinator must hear of the end."""
        return any(tp.topic == OFFSETS_TOPIC for tp in self.partitions)


@dataclass(frozen=True, slots=True)
class EndTxnPlan:
    """What an EndTxn takes: ``prepare`` (Ongoing -> PrepareX) to write first, if any; then,
    when ``complete``, the markers and the CompleteX are owed (the completion, which runs after
    the answer); neither: a retry of an end that completed, answered at once."""

    prepare: TxnTransit | None
    complete: bool


@dataclass(frozen=True, slots=True)
class AddPlan:
    """What an AddPartitionsToTxn/AddOffsetsToTxn takes, written in one append in this order:
    ``complete``, the CompleteX the previous transaction still owes (its markers are done),
    then ``add``, the transaction with the partitions (None: nothing changes). ``refused``:
    the add's error, answered once ``complete`` is durable (the add itself is not written)."""

    complete: TxnTransit | None
    add: TxnTransit | None
    refused: KafkaError | None = None

    @property
    def transits(self) -> tuple[TxnTransit, ...]:
        """The transits to write (their records in one append) and apply, in order."""
        return tuple(t for t in (self.complete, self.add) if t is not None)


# A completion that failed (the state partition's append, say) is tried again after
# _COMPLETION_BACKOFF_MS doubling per attempt up to _COMPLETION_BACKOFF_MAX_MS (Kafka retries
# its markers every retry.backoff.ms; the cap keeps a long outage from being hammered).
_COMPLETION_BACKOFF_MS = 100
_COMPLETION_BACKOFF_MAX_MS = 5000


def completion_backoff_ms(attempt: int) -> int:
    """How long a completion waits before its attempt ``attempt + 1`` (``attempt`` >= 1 failed)."""
    return min(_COMPLETION_BACKOFF_MAX_MS, _COMPLETION_BACKOFF_MS << min(max(attempt - 1, 0), 16))


class TransactionStateManager:
    """The transactional ids of the cluster and their transactions (see the module docstring).

    ``max_timeout_ms`` is ``transaction.max.timeout.ms``, ``id_expiration_ms``
    ``transactional.id.expiration.ms``.
    """

    def __init__(self, clock: Clock, max_timeout_ms: int = 900_000, id_expiration_ms: int = 604_800_000) -> None:
        self._clock = clock
        self._max_timeout_ms = max_timeout_ms
        self._id_expiration_ms = id_expiration_ms
        self.txns: dict[str, TransactionMetadata] = {}
        self._completing: set[str] = set()  # ids whose completion is claimed (running or about to)
        # Ids in a Prepare state whose markers are all written (and the group coordinator
        # told): only the CompleteX is owed. In memory only: after a restart the markers are
        # written again, which the partitions take as a duplicate.
        self._markers_done: set[str] = set()

    def __len__(self) -> int:
        return len(self.txns)

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's metadata, if it is known."""
        return self.txns.get(transactional_id)

    # -- the log --------------------------------------------------------------------------

    def replay(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one ``__transaction_state`` record read on load; one that is not what the
        coordinator writes raises ValueError/TypeError/KeyError and changes nothing."""
        tid = decode_key(key)
        if value is None:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = decode_value(tid, value, self._clock.wall_ms())
        self._markers_done.discard(tid)

    def complete_transition(self, transit: TxnTransit) -> TransactionMetadata:
        """The transit's record is durable: its metadata is the id's state (a Dead id is
        forgotten). ConcurrentTransactionsError if the id moved since the transit was decided."""
        tid = transit.transactional_id
        if self.txns.get(tid) is not transit.previous:
            raise ConcurrentTransactionsError(f"{tid!r} changed while its transition was written; retry")
        if transit.target.state == TransactionState.DEAD:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = transit.target
        self._markers_done.discard(tid)  # they were the previous state's
        return transit.target

    def pending_completions(self) -> list[str]:
        """Ids left in PrepareCommit/PrepareAbort (after a load: their markers are owed)."""
        return [tid for tid, txn in self.txns.items() if txn.state in PREPARE_STATES]

    # -- completions ----------------------------------------------------------------------

    def claim_completion(self, transactional_id: str) -> bool:
        """The id is in PrepareCommit/PrepareAbort and no completion is claimed: it is now
        (the caller must run one and :meth:`release_completion` when it ends). False when
        nothing is owed or a completion is claimed already: never two at once for one id."""
        txn = self.txns.get(transactional_id)
        if txn is None or txn.state not in PREPARE_STATES or transactional_id in self._completing:
            return False
        self._completing.add(transactional_id)
        return True

    def release_completion(self, transactional_id: str) -> None:
        """The claimed completion of the id ended (completed, or stopped to be resumed later)."""
        self._completing.discard(transactional_id)

    def completing(self, transactional_id: str) -> bool:
        """Whether a completion of the id is claimed."""
        return transactional_id in self._completing

    def completion_owed(self, transactional_id: str) -> bool:
        """The id is in PrepareCommit/PrepareAbort: its markers and CompleteX are still owed."""
        txn = self.txns.get(transactional_id)
        return txn is not None and txn.state in PREPARE_STATES

    def record_markers_done(self, transactional_id: str) -> bool:
        """Every marker of the id's PrepareCommit/PrepareAbort is written (and the group
        coordinator told): only its CompleteX is owed, which the id's next add may write with
        its own record. False (nothing recorded) outside a Prepare state. Cleared by the id's
        next transition."""
        if not self.completion_owed(transactional_id):
            return False
        self._markers_done.add(transactional_id)
        return True

    def markers_done(self, transactional_id: str) -> bool:
        """The id is in a Prepare state whose markers are all written: only the CompleteX is owed."""
        return transactional_id in self._markers_done

    # -- InitProducerId -------------------------------------------------------------------

    def validate_init(self, transactional_id: str, timeout_ms: int) -> None:
        """InvalidRequestError for an id that is not a string, InvalidTransactionTimeoutError
        for a timeout outside ``(0, transaction.max.timeout.ms]``."""
        if not isinstance(transactional_id, str):
            raise InvalidRequestError("transactional id must be a string")
        if not 0 < timeout_ms <= self._max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms} is outside (0, transaction.max.timeout.ms={self._max_timeout_ms}]"
            )

    def prepare_new(self, transactional_id: str, producer_id: int, timeout_ms: int) -> TxnTransit:
        """A first InitProducerId of the id: its producer id at epoch 0, Empty."""
        if transactional_id in self.txns:
            raise ConcurrentTransactionsError(f"{transactional_id!r} is already known")
        txn = TransactionMetadata(transactional_id, producer_id, 0, timeout_ms, last_update_ms=self._clock.wall_ms())
        return TxnTransit(None, txn)

    def check_init(self, transactional_id: str, producer_id: int, producer_epoch: int) -> ProducerIdAndEpoch | None:
        """KIP-360: a caller that names its current id and epoch asks for a bump. The answer
        at once for a retry of a bump that went through; ProducerFencedError when they are not
        the current ones (a newer instance took over); None: go on."""
        txn = self.txns[transactional_id]
        if producer_id == NO_PRODUCER_ID:
            return None
        current = (txn.producer_id, txn.producer_epoch)
        last = (txn.last_producer_id, txn.last_producer_epoch)
        if (producer_id, producer_epoch) == last and txn.state == TransactionState.EMPTY:
            return ProducerIdAndEpoch(*current)
        if (producer_id, producer_epoch) != current:
            raise ProducerFencedError(
                f"{transactional_id!r}: producer {producer_id} epoch {producer_epoch} is not the current "
                f"{current[0]} epoch {current[1]}"
            )
        return None

    def prepare_fence(self, transactional_id: str) -> TxnTransit:
        """An open transaction of an older instance (or one past its timeout) is aborted under
        a bumped epoch (PrepareEpochFence, then PrepareAbort), so that its zombie can neither
        write more nor commit; the markers follow."""
        txn = self.txns[transactional_id]
        fenced = txn.prepare_fence_epoch().prepare_abort_or_commit(False, self._clock.wall_ms())
        return TxnTransit(txn, fenced)

    def needs_new_producer_id(self, transactional_id: str) -> bool:
        """The id's epoch is exhausted: its next instance starts a new producer id."""
        return self.txns[transactional_id].epoch_exhausted()

    def prepare_init(self, transactional_id: str, timeout_ms: int, new_producer_id: int | None = None) -> TxnTransit:
        """The new instance's producer id and epoch, Empty: the epoch bumped, or
        ``new_producer_id`` at epoch 0 when the epoch is exhausted (the caller asked
        :meth:`needs_new_producer_id`). The transaction must be over (InvalidTxnStateError)."""
        txn = self.txns[transactional_id]
        now = self._clock.wall_ms()
        if txn.epoch_exhausted():
            if new_producer_id is None:
                raise ValueError(f"{transactional_id!r}: its epoch is exhausted; a new producer id is needed")
            return TxnTransit(txn, txn.prepare_producer_id_rotation(new_producer_id, timeout_ms, now))
        return TxnTransit(txn, txn.prepare_increment_epoch(timeout_ms, now))

    # -- AddPartitionsToTxn, EndTxn -------------------------------------------------------

    def owned(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        """The id's metadata, if ``producer_id``/``producer_epoch`` are its current ones."""
        txn = self.txns.get(transactional_id)
        if txn is None:
            raise InvalidProducerIdMappingError(f"producer {producer_id} is not the producer of {transactional_id!r}")
        self._check_owner(txn, producer_id, producer_epoch)
        return txn

    @staticmethod
    def _check_owner(txn: TransactionMetadata, producer_id: int, producer_epoch: int) -> None:
        if txn.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer {producer_id} is not the producer of {txn.transactional_id!r}"
            )
        if producer_epoch != txn.producer_epoch:
            raise ProducerFencedError(
                f"{txn.transactional_id!r}: epoch {producer_epoch} is not the current {txn.producer_epoch}; a newer "
                "producer took over or the transaction timed out"
            )

    def prepare_add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> TxnTransit | None:
        """AddPartitionsToTxn (and AddOffsetsToTxn): the partitions join the transaction,
        which starts if none is open. None when they are in it already."""
        txn = self.owned(transactional_id, producer_id, producer_epoch)
        return self._add_to(txn, partitions)

    def _add_to(self, txn: TransactionMetadata, partitions: Iterable[TopicPartition]) -> TxnTransit | None:
        wanted = frozenset(partitions)
        if txn.state in PREPARE_STATES:
            raise ConcurrentTransactionsError(f"{txn.transactional_id!r}: the previous transaction is still completing")
        if txn.state == TransactionState.DEAD:
            raise InvalidTxnStateError(f"{txn.transactional_id!r} is dead")
        if txn.state == TransactionState.ONGOING and wanted <= txn.partitions:
            return None
        return TxnTransit(txn, txn.prepare_add_partitions(wanted, self._clock.wall_ms()))

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> None:
        """KIP-890's verification for a partition leader (Kafka's
        handleVerifyPartitionsInTransaction): the partitions are in the ongoing transaction
        of this producer id and epoch, else INVALID_PRODUCER_ID_MAPPING (another producer or
        an unknown id), PRODUCER_FENCED (another epoch), CONCURRENT_TRANSACTIONS (one still
        completing) or INVALID_TXN_STATE (not added, or no transaction open)."""
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidRequestError("verifying a transaction needs its transactional id")
        txn = self.owned(transactional_id, producer_id, producer_epoch)
        if txn.state in PREPARE_STATES:
            raise ConcurrentTransactionsError(f"{transactional_id!r}: the previous transaction is still completing")
        missing = set(partitions) - txn.partitions if txn.state == TransactionState.ONGOING else set(partitions)
        if missing:
            listed = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(missing)[:10])
            raise InvalidTxnStateError(f"{listed} is not in an ongoing transaction of {transactional_id!r}")

    def plan_add(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> AddPlan:
        """AddPartitionsToTxn/AddOffsetsToTxn, folding in the CompleteX the previous
        transaction owes when its markers are done: the add is decided against that CompleteX
        (as if it were durable), and both go in one append. Refused (fenced, a wrong producer
        id...), the CompleteX is still to write, and the error comes back in the plan; with
        nothing to fold in, a refusal raises as :meth:`prepare_add_partitions` does."""
        txn = self.txns.get(transactional_id)
        if txn is None or not self.markers_done(transactional_id):
            return AddPlan(None, self.prepare_add_partitions(transactional_id, producer_id, producer_epoch, partitions))
        complete = TxnTransit(txn, txn.prepare_complete(self._clock.wall_ms()))
        try:
            self._check_owner(complete.target, producer_id, producer_epoch)
            add = self._add_to(complete.target, partitions)
        except KafkaError as exc:
            return AddPlan(complete, None, exc)
        return AddPlan(complete, add)

    def end_txn_at_once(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> bool:
        """EndTxn decided without waiting for the id's other calls (its completion may hold the
        id's turn): True when it is answered (the current producer asks again for the outcome
        that is decided: its PrepareX is durable, or the transaction completed; Kafka's EndTxn
        retry succeeds); raises as :meth:`end_txn` when the id is in a Prepare state, where
        nothing but the completion moves it (the other outcome: InvalidTxnStateError; a stale
        producer: fenced); False: :meth:`end_txn` decides in turn."""
        txn = self.txns.get(transactional_id)
        if txn is None:
            return False
        if txn.state in PREPARE_STATES:
            return self.end_txn(transactional_id, producer_id, producer_epoch, commit).prepare is None
        done = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
        return txn.state == done and (txn.producer_id, txn.producer_epoch) == (producer_id, producer_epoch)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> EndTxnPlan:
        """EndTxn: commit or abort. An Ongoing transaction prepares (the answer once that is
        durable, the completion after it); a retry of an end that completed is answered at
        once; one whose completion is owed is answered at once too, the completion still to
        run; anything else (nothing open, or the other outcome already decided) is
        InvalidTxnStateError."""
        txn = self.owned(transactional_id, producer_id, producer_epoch)
        if txn.state == TransactionState.ONGOING:
            return EndTxnPlan(TxnTransit(txn, txn.prepare_abort_or_commit(commit, self._clock.wall_ms())), True)
        if txn.state == (TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT):
            return EndTxnPlan(None, False)
        if txn.state == (TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT):
            return EndTxnPlan(None, True)
        raise InvalidTxnStateError(
            f"{transactional_id!r}: cannot {'commit' if commit else 'abort'} in state {txn.state}"
        )

    def markers(self, transactional_id: str) -> TxnMarkers:
        """The markers a PrepareCommit/PrepareAbort owes its partitions."""
        txn = self.txns[transactional_id]
        if txn.state not in PREPARE_STATES:
            raise InvalidTxnStateError(f"{transactional_id!r}: no markers are owed in state {txn.state}")
        result = TransactionResult.COMMIT if txn.committing else TransactionResult.ABORT
        return TxnMarkers(transactional_id, txn.producer_id, txn.producer_epoch, result, tuple(sorted(txn.partitions)))

    def prepare_complete(self, transactional_id: str) -> TxnTransit:
        """Every marker is written: CompleteCommit/CompleteAbort."""
        txn = self.txns[transactional_id]
        return TxnTransit(txn, txn.prepare_complete(self._clock.wall_ms()))

    # -- timers ---------------------------------------------------------------------------

    def _now(self, now_ms: int | None) -> int:
        return self._clock.wall_ms() if now_ms is None else now_ms

    def timed_out(self, now_ms: int | None = None) -> list[str]:
        """Ids whose transaction is open for longer than its timeout."""
        now = self._now(now_ms)
        return [tid for tid, txn in self.txns.items() if txn.timed_out(now)]

    def prepare_timeout_abort(self, transactional_id: str, now_ms: int | None = None) -> TxnTransit | None:
        """Abort a transaction past its timeout, with an epoch bump (its producer is fenced);
        None when it is no longer open and timed out."""
        txn = self.txns.get(transactional_id)
        if txn is None or not txn.timed_out(self._now(now_ms)):
            return None
        logger.info("%r: transaction open for more than %d ms; aborting", transactional_id, txn.timeout_ms)
        return self.prepare_fence(transactional_id)

    def expirable(self, now_ms: int | None = None) -> list[str]:
        """Ids with no open transaction, idle for ``transactional.id.expiration.ms``."""
        now = self._now(now_ms)
        return [tid for tid, txn in self.txns.items() if self._idle(txn, now)]

    def _idle(self, txn: TransactionMetadata, now_ms: int) -> bool:
        return txn.state in _IDLE_STATES and now_ms - txn.last_update_ms >= self._id_expiration_ms

    def prepare_expire(self, transactional_id: str, now_ms: int | None = None) -> TxnTransit | None:
        """Forget an idle id (Dead: its record becomes a tombstone); None when it is not idle."""
        txn = self.txns.get(transactional_id)
        if txn is None or not self._idle(txn, self._now(now_ms)):
            return None
        return TxnTransit(txn, txn.prepare_dead())

    # -- describing -----------------------------------------------------------------------

    def describe(self, transactional_ids: Iterable[str] | None) -> list[TransactionDescription]:
        """State of the given ids (Kafka's DescribeTransactions; all of them, as
        ListTransactions, when None); unknown ids show as Dead."""
        if transactional_ids is None:
            return [self.txns[t].describe() for t in sorted(self.txns)]
        out = []
        for tid in transactional_ids:
            txn = self.txns.get(tid)
            out.append(
                txn.describe()
                if txn is not None
                else TransactionDescription(tid, -1, -1, TransactionState.DEAD, 0, -1, ())
            )
        return out

    def open_transaction_starts(self) -> list[int]:
        """Start times of the open transactions (for the metrics)."""
        return [t.start_ms for t in self.txns.values() if t.state in OPEN_STATES]


__all__ = ["AddPlan", "EndTxnPlan", "TransactionStateManager", "TxnMarkers", "TxnTransit", "completion_backoff_ms"]
