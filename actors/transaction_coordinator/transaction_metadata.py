"""One transactional id's transaction (Kafka's ``TransactionMetadata`` and ``TransactionState``).

Kafka's state machine, with its valid previous states::

    Empty/CompleteCommit/CompleteAbort -> Ongoing -> PrepareCommit -> CompleteCommit
                                                  -> PrepareAbort  -> CompleteAbort
                                         Ongoing -> PrepareEpochFence -> PrepareAbort

Metadata is immutable: each ``prepare_*`` method checks that the step is one the machine
has (InvalidTxnStateError otherwise) and returns the next metadata, which takes effect once
its record is durable. PrepareEpochFence is never written: it is the in-memory step of
fencing an older producer (a new instance's InitProducerId, a transaction past its timeout),
whose bumped epoch the PrepareAbort that follows carries, so that the markers fence the
producer. No clock is read here: times come from the caller.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from actors.protocol import TransactionState
from actors.types import TopicPartition, TransactionDescription
from storage.errors import InvalidTxnStateError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # producer epochs are int16

_COMPLETE = frozenset({TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT})
# Kafka's TransactionState.validPreviousStates.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.EMPTY: _COMPLETE,
    TransactionState.ONGOING: _COMPLETE | {TransactionState.ONGOING},
    TransactionState.PREPARE_COMMIT: frozenset({TransactionState.ONGOING}),
    TransactionState.PREPARE_ABORT: frozenset({TransactionState.ONGOING, TransactionState.PREPARE_EPOCH_FENCE}),
    TransactionState.COMPLETE_COMMIT: frozenset({TransactionState.PREPARE_COMMIT}),
    TransactionState.COMPLETE_ABORT: frozenset({TransactionState.PREPARE_ABORT}),
    TransactionState.DEAD: _COMPLETE,
    TransactionState.PREPARE_EPOCH_FENCE: frozenset({TransactionState.ONGOING}),
}
# A transaction is open in these: markers are (or will be) owed to its partitions.
OPEN_STATES = frozenset({TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT})
PREPARE_STATES = frozenset({TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT})


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """What the coordinator keeps per transactional id (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    # The id and epoch before the last rotation or bump, to recognise a retried InitProducerId.
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def describe(self) -> TransactionDescription:
        """As DescribeTransactions shows it."""
        return TransactionDescription(
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            self.state,
            self.timeout_ms,
            self.start_ms,
            tuple(sorted(self.partitions)),
        )

    @property
    def committing(self) -> bool:
        """A PrepareCommit (the markers it owes are COMMIT markers)."""
        return self.state == TransactionState.PREPARE_COMMIT

    def timed_out(self, now_ms: int) -> bool:
        """An open transaction older than its timeout."""
        return self.state == TransactionState.ONGOING and now_ms >= self.start_ms + self.timeout_ms

    def epoch_exhausted(self) -> bool:
        """Another bump would overflow int16: the next instance needs a new producer id."""
        return self.producer_epoch >= MAX_EPOCH - 1

    # -- transitions (Kafka's prepare* methods) -------------------------------------------

    def _to(self, state: TransactionState, **changes: Any) -> TransactionMetadata:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise InvalidTxnStateError(
                f"{self.transactional_id!r}: a transaction in state {self.state} cannot go to {state}"
            )
        return dataclasses.replace(self, state=state, **changes)

    def prepare_add_partitions(self, partitions: frozenset[TopicPartition], now_ms: int) -> TransactionMetadata:
        """Ongoing with ``partitions`` added (a transaction starts at its first partition)."""
        start = self.start_ms if self.state == TransactionState.ONGOING else now_ms
        return self._to(
            TransactionState.ONGOING, partitions=self.partitions | partitions, start_ms=start, last_update_ms=now_ms
        )

    def prepare_fence_epoch(self) -> TransactionMetadata:
        """PrepareEpochFence: the epoch bumped (capped at the int16 limit) so that what
        follows fences the producer that left the transaction open."""
        return self._to(
            TransactionState.PREPARE_EPOCH_FENCE,
            producer_epoch=min(self.producer_epoch + 1, MAX_EPOCH),
            last_producer_epoch=self.producer_epoch,
        )

    def prepare_abort_or_commit(self, commit: bool, now_ms: int) -> TransactionMetadata:
        """PrepareCommit or PrepareAbort: the decision, durable before any marker."""
        return self._to(
            TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT, last_update_ms=now_ms
        )

    def prepare_complete(self, now_ms: int) -> TransactionMetadata:
        """CompleteCommit or CompleteAbort, once every marker is written: no partitions left."""
        commit = self.state == TransactionState.PREPARE_COMMIT
        return self._to(
            TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT,
            partitions=frozenset(),
            last_update_ms=now_ms,
        )

    def prepare_increment_epoch(self, timeout_ms: int, now_ms: int) -> TransactionMetadata:
        """Empty with the epoch bumped: a new instance (InitProducerId) fences the older ones."""
        return self._to(
            TransactionState.EMPTY,
            producer_epoch=self.producer_epoch + 1,
            last_producer_id=self.producer_id,
            last_producer_epoch=self.producer_epoch,
            partitions=frozenset(),
            start_ms=-1,
            timeout_ms=timeout_ms,
            last_update_ms=now_ms,
        )

    def prepare_producer_id_rotation(self, producer_id: int, timeout_ms: int, now_ms: int) -> TransactionMetadata:
        """Empty with a new producer id at epoch 0: the epoch is exhausted."""
        return self._to(
            TransactionState.EMPTY,
            producer_id=producer_id,
            producer_epoch=0,
            last_producer_id=self.producer_id,
            last_producer_epoch=self.producer_epoch,
            partitions=frozenset(),
            start_ms=-1,
            timeout_ms=timeout_ms,
            last_update_ms=now_ms,
        )

    def prepare_dead(self) -> TransactionMetadata:
        """Dead: an idle id is forgotten (its record becomes a tombstone)."""
        return self._to(TransactionState.DEAD)


__all__ = [
    "MAX_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "OPEN_STATES",
    "PREPARE_STATES",
    "VALID_PREVIOUS_STATES",
    "TransactionMetadata",
]
