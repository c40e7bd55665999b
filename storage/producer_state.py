"""Producer state of one partition log: idempotence and transactions, as Kafka's ProducerStateManager.

Per producer id the log keeps a :class:`ProducerStateEntry`: the epoch, the metadata of
the producer's last five batches (first/last sequence, first/last offset, timestamp),
the coordinator epoch of its last marker, the first offset of its open transaction and
its last timestamp. On a leader append (``AppendOrigin.CLIENT``) each batch is checked against
it as Kafka does:

- an epoch older than the entry's is refused (InvalidProducerEpochError);
- a batch equal (same epoch, same first and last sequence) to one of the last five is a
  duplicate: the log appends nothing and answers with the original offsets;
- a new epoch must start at sequence 0 (unless the producer is unknown here); within an
  epoch the first sequence must follow the last one (int32 wrap to 0 allowed); anything
  else is OutOfOrderSequenceError;
- a transactional batch opens a transaction; a non-transactional batch while one is open
  is InvalidTxnStateError; a control batch (COMMIT/ABORT marker) completes it, and a
  marker from an older coordinator epoch is TransactionCoordinatorFencedError.

Origin ``COORDINATOR`` (markers, transactional offset commits) skips the sequence checks;
``REPLICATION`` (follower appends, log replay) skips every check and only updates state.
Checks run on a copy (:class:`ProducerAppendInfo`) before anything is written; the log
applies it after the write succeeded. The common batch (a known producer, same epoch, next
sequence, no transaction) takes a fast path: one dict lookup and a few int compares.

Transactions: open ones (``ongoing``) and completed ones whose marker the high watermark
has not passed yet (``unreplicated``) hold the first unstable offset, which bounds the
last stable offset read_committed consumers read up to.

Transaction verification (KIP-890, Kafka's VerificationStateEntry and VerificationGuard): on
an append that asks for it (``verify``), a producer's transactional batch that would open a
transaction here (the producer has none open in this partition) is appended only once the
transaction coordinator confirmed that the partition is in an ongoing transaction of that
producer id and epoch. The first such append raises :class:`VerificationRequired` with a
fresh guard (nothing written); the leader asks the coordinator, marks the guard verified
(:meth:`ProducerStateManager.verified`) and appends again. The entry is dropped as soon as a
transactional batch or a marker of that producer is written, so a marker written between the
coordinator's answer and the append makes the guard stale (InvalidTxnStateError), and the
next transaction verifies again; the transaction's later batches find it open and pay no
coordinator call. So no transaction the coordinator does not know is ever opened here (a
forged or late batch would hold the last stable offset for good).

Snapshots: ``<20-digit offset>.snapshot`` holds every entry as of that offset (version,
CRC-32C, entries; written to a temporary file, fsynced and renamed). The log takes one at
each roll and at clean close; on open it loads the newest valid one at or below where it
must start replaying and replays the log after it. A corrupt snapshot is deleted and the
next older one tried.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from storage.batch_header import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader, crc32c
from storage.checkpoint import write_atomically
from storage.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.log_files import SNAPSHOT_SUFFIX

log = logging.getLogger(__name__)


class AppendOrigin(enum.Enum):
    """Who asks for an append, which decides what the leader checks (Kafka's AppendOrigin).

    CLIENT: producer data (every record validated; epoch, sequence and transaction checks;
    control batches refused). COORDINATOR: the coordinators' markers and transactional
    offset commits (control batches allowed; epoch checks, no sequence). REPLICATION: a
    follower copying its leader, or a replay of the log (no checks: the leader made them).
    """

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
INT32_MAX = 2**31 - 1
_TXN_OR_CONTROL = TRANSACTIONAL_MASK | CONTROL_MASK

_SNAPSHOT_VERSION = 1
_SNAP_HEAD = struct.Struct(">hI")  # version, CRC-32C of everything after it
_SNAP_COUNT = struct.Struct(">i")
# producer id, epoch, coordinator epoch, last timestamp, txn first offset, batch count
_SNAP_ENTRY = struct.Struct(">qhiqqb")
_SNAP_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp


class BatchMetadata(NamedTuple):
    """One appended batch of a producer: sequence range, offset range and max timestamp."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction whose marker was just appended."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class TxnMetadata:
    """An open or unreplicated transaction: its producer, first offset and (once complete) marker offset."""

    __slots__ = ("producer_id", "first_offset", "last_offset")

    def __init__(self, producer_id: int, first_offset: int, last_offset: int = -1) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset
        self.last_offset = last_offset

    def __repr__(self) -> str:
        return f"TxnMetadata(producer_id={self.producer_id}, first={self.first_offset}, last={self.last_offset})"


def next_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past int32 max to 0, as Kafka's incrementSequence."""
    value = sequence + increment
    return value - (INT32_MAX + 1) if value > INT32_MAX else value


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (int32 max is followed by 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def read_marker(buf: bytes | bytearray | memoryview, position: int = 0) -> tuple[int, int]:
    """(control type, coordinator epoch) of the control batch at ``position``: type 0 abort, 1 commit."""
    from storage.records.reader import RecordBatch  # the codec: only control batches, which are tiny

    record = RecordBatch(buf, position).control_record()
    return record.type, record.coordinator_epoch


class ProducerStateEntry:
    """What the log remembers of one producer (Kafka's ProducerStateEntry)."""

    __slots__ = (
        "producer_id",
        "producer_epoch",
        "coordinator_epoch",
        "last_timestamp",
        "current_txn_first_offset",
        "batches",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = -1,
        coordinator_epoch: int = -1,
        last_timestamp: int = -1,
        current_txn_first_offset: int = -1,
        batches: list[BatchMetadata] | None = None,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset  # -1: no open transaction
        self.batches: list[BatchMetadata] = batches if batches is not None else []  # oldest first, at most 5

    @property
    def first_seq(self) -> int:
        """First sequence of the oldest retained batch, -1 when none."""
        return self.batches[0].first_seq if self.batches else -1

    @property
    def last_seq(self) -> int:
        """Last sequence of the newest batch, -1 when none."""
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        """Last offset of the newest data batch of the current epoch, -1 when none."""
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def is_empty(self) -> bool:
        """Whether no batch of the current epoch is retained."""
        return not self.batches

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def maybe_update_producer_epoch(self, epoch: int) -> bool:
        """Move to ``epoch`` (forgetting the batches of the old one); False if it is the current one."""
        if self.producer_epoch == epoch:
            return False
        self.batches = []
        self.producer_epoch = epoch
        return True

    def add_batch_metadata(self, batch: BatchMetadata) -> None:
        """Remember ``batch`` as the newest, keeping the last five."""
        batches = self.batches
        batches.append(batch)
        if len(batches) > NUM_BATCHES_TO_RETAIN:
            del batches[0]

    def update(self, nxt: ProducerStateEntry) -> None:
        """Take over the changes an append made on a copy (Kafka's ProducerStateEntry.update)."""
        self.maybe_update_producer_epoch(nxt.producer_epoch)
        for batch in nxt.batches:
            self.add_batch_metadata(batch)
        self.coordinator_epoch = nxt.coordinator_epoch
        self.current_txn_first_offset = nxt.current_txn_first_offset
        self.last_timestamp = nxt.last_timestamp

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"coordinator_epoch={self.coordinator_epoch}, txn_first_offset={self.current_txn_first_offset}, "
            f"last_timestamp={self.last_timestamp}, batches={self.batches})"
        )


class VerificationRequired(Exception):  # noqa: N818 - a request to verify, not a failure
    """An append whose transactional batch would open a transaction of ``producer_id`` that
    the transaction coordinator has not confirmed yet: nothing was written; verify ``guard``
    and append again."""

    def __init__(self, producer_id: int, producer_epoch: int, guard: VerificationGuard) -> None:
        super().__init__(f"producer {producer_id} epoch {producer_epoch}: the transaction needs verification")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.guard = guard


class VerificationGuard:
    """One verification of one producer's transaction in one partition (Kafka's
    VerificationGuard): unique, so a stale confirmation never applies to a newer attempt."""

    __slots__ = ("producer_id", "producer_epoch", "created_ms", "confirmed")

    def __init__(self, producer_id: int, producer_epoch: int, created_ms: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.created_ms = created_ms
        self.confirmed = False  # the coordinator said the partition is in the transaction

    def __repr__(self) -> str:
        state = "confirmed" if self.confirmed else "pending"
        return f"VerificationGuard(producer {self.producer_id} epoch {self.producer_epoch}, {state})"


# Producers a partition verifies at once: a bound on what failed or abandoned verifications
# (a hostile client's forged producer ids) hold until they expire; the oldest go first.
MAX_VERIFICATIONS = 10_000


class ProducerAppendInfo:
    """One producer's batches of one append, checked against its entry before the write (Kafka's)."""

    __slots__ = ("producer_id", "origin", "current", "updated", "started_txns", "transactional")

    def __init__(self, producer_id: int, current: ProducerStateEntry | None, origin: AppendOrigin) -> None:
        self.producer_id = producer_id
        self.origin = origin
        self.current = current if current is not None else ProducerStateEntry(producer_id)
        c = self.current
        # The batches of this append only; update() adds them to the current entry.
        self.updated = ProducerStateEntry(
            producer_id, c.producer_epoch, c.coordinator_epoch, c.last_timestamp, c.current_txn_first_offset
        )
        self.started_txns: list[TxnMetadata] = []
        self.transactional = False  # a transactional batch or a marker: its verification is done with

    def _check_producer_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch:
            message = (
                f"epoch {epoch} of producer {self.producer_id} at offset {offset} is older than "
                f"the last seen epoch {self.updated.producer_epoch}"
            )
            if self.origin is AppendOrigin.REPLICATION:
                log.warning("%s", message)
            else:
                raise InvalidProducerEpochError(message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated, self.current
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != -1:
                raise OutOfOrderSequenceError(
                    f"producer {self.producer_id} at offset {offset}: a new epoch {epoch} must start at "
                    f"sequence 0, not {first_seq} (current epoch {updated.producer_epoch})"
                )
            return
        if updated.batches:
            last_seq = updated.last_seq
        elif epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = -1
        # No epoch known (the producer's data was deleted by retention): any sequence goes.
        if current.producer_epoch != -1 and not in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {self.producer_id} at offset {offset}: sequence {first_seq} does not follow {last_seq}"
            )

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        """Check and record one data batch (Kafka's appendDataBatch)."""
        if self.origin is not AppendOrigin.REPLICATION:
            self._check_producer_epoch(epoch, first_offset)
            if self.origin is AppendOrigin.CLIENT:
                self._check_sequence(epoch, first_seq, first_offset)
        updated = self.updated
        updated.maybe_update_producer_epoch(epoch)
        updated.add_batch_metadata(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        updated.last_timestamp = timestamp
        if updated.current_txn_first_offset >= 0 and not is_transactional:
            message = (
                f"producer {self.producer_id} has a transaction open since offset "
                f"{updated.current_txn_first_offset}: expected a transactional write at offset {first_offset}"
            )
            if self.origin is not AppendOrigin.REPLICATION:
                raise InvalidTxnStateError(message)
            log.warning("%s", message)  # the leader wrote it: take it, the transaction stays open
        if updated.current_txn_first_offset < 0 and is_transactional:
            updated.current_txn_first_offset = first_offset
            self.started_txns.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(
        self, control_type: int, coordinator_epoch: int, epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Record a COMMIT (1) or ABORT (0) marker; the completed transaction, None for an empty one."""
        if self.origin is not AppendOrigin.REPLICATION:
            self._check_producer_epoch(epoch, offset)
        updated = self.updated
        if updated.coordinator_epoch > coordinator_epoch:
            message = (
                f"marker for producer {self.producer_id} at offset {offset} has coordinator epoch "
                f"{coordinator_epoch}, older than {updated.coordinator_epoch}"
            )
            if self.origin is AppendOrigin.REPLICATION:
                log.info("%s", message)
            else:
                raise TransactionCoordinatorFencedError(message)
        completed = None
        if updated.current_txn_first_offset >= 0:
            completed = CompletedTxn(self.producer_id, updated.current_txn_first_offset, offset, control_type == 0)
        updated.maybe_update_producer_epoch(epoch)
        updated.current_txn_first_offset = -1
        updated.coordinator_epoch = coordinator_epoch
        updated.last_timestamp = timestamp
        return completed

    def append(
        self, h: BatchHeader, marker: tuple[int, int] | None = None, timestamp: int | None = None
    ) -> CompletedTxn | None:
        """Check and record the batch ``h`` (``marker``: its control type and coordinator epoch)."""
        ts = h.max_timestamp if timestamp is None else timestamp
        if h.attributes & _TXN_OR_CONTROL:
            self.transactional = True
        if h.attributes & CONTROL_MASK:
            if marker is None:
                raise ValueError("a control batch needs its marker")
            control_type, coordinator_epoch = marker
            if control_type not in (0, 1):
                return None  # a control type this version does not know: no state change, as Kafka
            return self.append_end_txn_marker(control_type, coordinator_epoch, h.producer_epoch, h.base_offset, ts)
        self.append_data_batch(
            h.producer_epoch,
            h.base_sequence,
            h.last_sequence,
            ts,
            h.base_offset,
            h.base_offset + h.last_offset_delta,
            bool(h.attributes & TRANSACTIONAL_MASK),
        )
        return None


# The common append, one in-sequence batch of a known producer outside a transaction, is
# analysed into a plain (entry, BatchMetadata) tuple: the cheapest thing to build.
_FastUpdate = tuple
_new_tuple = tuple.__new__


class AppendAnalysis(NamedTuple):
    """The producer-state changes of one append, checked and waiting for the write to succeed."""

    infos: list[ProducerAppendInfo]
    completed: list[CompletedTxn]


class Duplicate(NamedTuple):
    """An append whose batch the log already holds: nothing is written."""

    batch: BatchMetadata


Analysis = tuple[ProducerStateEntry, BatchMetadata] | AppendAnalysis | Duplicate


class ProducerStateManager:
    """The producer entries, transactions and snapshots of one partition log (Kafka's ProducerStateManager)."""

    def __init__(self, directory: str | Path, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS):
        self.dir = Path(directory)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, TxnMetadata] = {}  # first offset -> open transaction
        self._unreplicated: dict[int, TxnMetadata] = {}  # first offset -> completed, marker not below the HW
        self._first_unstable: int | None = None
        self._verifications: dict[int, VerificationGuard] = {}  # producer id -> its verification

    # -- queries --------------------------------------------------------------------------

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        """A copy of producer id -> entry (the entries themselves are live)."""
        return dict(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The entry of ``producer_id``, or None."""
        return self._producers.get(producer_id)

    @property
    def is_empty(self) -> bool:
        """Whether no producer is known."""
        return not self._producers

    @property
    def ongoing_txns(self) -> list[TxnMetadata]:
        """Open transactions, by first offset."""
        return [self._ongoing[k] for k in sorted(self._ongoing)]

    @property
    def unreplicated_txns(self) -> list[TxnMetadata]:
        """Completed transactions whose marker the high watermark has not passed, by first offset."""
        return [self._unreplicated[k] for k in sorted(self._unreplicated)]

    @property
    def first_unstable_offset(self) -> int | None:
        """The lowest first offset of an open or unreplicated transaction, or None."""
        return self._first_unstable

    def _update_first_unstable(self) -> None:
        firsts = [*self._ongoing, *self._unreplicated]
        self._first_unstable = min(firsts) if firsts else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO right after ``completed``'s marker: the next other open transaction's first offset, or marker + 1."""
        for first in sorted(self._ongoing):
            if self._ongoing[first].producer_id != completed.producer_id:
                return first
        return completed.last_offset + 1

    def has_ongoing_txn(self, producer_id: int) -> bool:
        """Whether ``producer_id`` has a transaction open in this partition."""
        entry = self._producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    # -- transaction verification (KIP-890) -------------------------------------------------

    def verification(self, producer_id: int, producer_epoch: int, now_ms: int) -> VerificationGuard:
        """The producer's verification in progress, or a new one (a newer epoch starts over)."""
        guard = self._verifications.get(producer_id)
        if guard is None or guard.producer_epoch != producer_epoch:
            guard = VerificationGuard(producer_id, producer_epoch, now_ms)
            self._verifications.pop(producer_id, None)
            self._verifications[producer_id] = guard
            while len(self._verifications) > MAX_VERIFICATIONS:
                del self._verifications[next(iter(self._verifications))]
        return guard

    def verified(self, guard: VerificationGuard) -> bool:
        """The coordinator confirmed ``guard``'s transaction: its batches may open it here.
        False when the guard is no longer the producer's (a marker or a transactional write
        ended it meanwhile): the confirmation is stale."""
        if self._verifications.get(guard.producer_id) is not guard:
            return False
        guard.confirmed = True
        return True

    def forget_verification(self, guard: VerificationGuard) -> None:
        """Drop ``guard`` (the coordinator refused it)."""
        if self._verifications.get(guard.producer_id) is guard:
            del self._verifications[guard.producer_id]

    def _check_verified(self, h: BatchHeader, now_ms: int) -> None:
        """A transactional data batch that would open a transaction needs a confirmed guard."""
        pid = h.producer_id
        if self.has_ongoing_txn(pid):
            return
        guard = self._verifications.get(pid)
        if guard is not None and guard.confirmed:
            if guard.producer_epoch == h.producer_epoch:
                return
            raise InvalidTxnStateError(
                f"producer {pid}: epoch {h.producer_epoch} was not verified (epoch {guard.producer_epoch} was)"
            )
        raise VerificationRequired(pid, h.producer_epoch, self.verification(pid, h.producer_epoch, now_ms))

    # -- appends --------------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        """A ProducerAppendInfo checking batches of ``producer_id`` against its current entry."""
        return ProducerAppendInfo(producer_id, self._producers.get(producer_id), origin)

    def analyze(
        self,
        headers: list[BatchHeader],
        buf: bytes | bytearray | memoryview,
        origin: AppendOrigin,
        verify_at_ms: int | None = None,
    ) -> Analysis | None:
        """Check the batches of an append (offsets assigned) against the state; change nothing.

        Returns None when no batch has a producer id, a Duplicate when (origin CLIENT)
        a batch equals one of its producer's last five, else the changes for :meth:`apply`.
        Raises the Kafka error of the first batch that breaks a rule. ``buf`` holds the
        batches at their header positions (control batches are decoded from it). With
        ``verify_at_ms`` (origin CLIENT; the time now) a transactional batch that would open
        a transaction needs its producer's confirmed verification (VerificationRequired
        starts one; see the module docstring).
        """
        if len(headers) == 1:
            h = headers[0]
            pid = h.producer_id
            if pid < 0:
                if h.attributes & _TXN_OR_CONTROL and origin is not AppendOrigin.REPLICATION:
                    raise InvalidRecordError("a transactional or control batch needs a producer id")
                return None
            if origin is AppendOrigin.CLIENT and not h.attributes & _TXN_OR_CONTROL:
                entry = self._producers.get(pid)
                if (
                    entry is not None
                    and entry.producer_epoch == h.producer_epoch
                    and entry.current_txn_first_offset < 0
                ):
                    batches = entry.batches
                    seq = h.base_sequence
                    if batches and seq >= 0:
                        last = batches[-1].last_seq
                        if seq == last + 1 or (seq == 0 and last == INT32_MAX):
                            delta = h.last_offset_delta
                            last_seq = seq + delta
                            if last_seq > INT32_MAX:
                                last_seq -= INT32_MAX + 1
                            first = h.base_offset
                            return (
                                entry,
                                _new_tuple(BatchMetadata, (seq, last_seq, first, first + delta, h.max_timestamp)),
                            )
        elif not any(h.producer_id >= 0 or h.attributes & _TXN_OR_CONTROL for h in headers):
            return None
        return self._analyze(headers, buf, origin, verify_at_ms)

    def _analyze(
        self,
        headers: list[BatchHeader],
        buf: bytes | bytearray | memoryview,
        origin: AppendOrigin,
        verify_at_ms: int | None = None,
    ) -> Analysis:
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for h in headers:
            pid = h.producer_id
            is_control = bool(h.attributes & CONTROL_MASK)
            if pid < 0:
                if h.attributes & _TXN_OR_CONTROL and origin is not AppendOrigin.REPLICATION:
                    raise InvalidRecordError("a transactional or control batch needs a producer id")
                continue
            if origin is AppendOrigin.CLIENT and not is_control:
                if h.base_sequence < 0:
                    raise InvalidRecordError(f"invalid sequence number {h.base_sequence} in a batch of producer {pid}")
                entry = self._producers.get(pid)
                if entry is not None:
                    duplicate = entry.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence)
                    if duplicate is not None:
                        return Duplicate(duplicate)
                if verify_at_ms is not None and h.attributes & TRANSACTIONAL_MASK:
                    self._check_verified(h, verify_at_ms)
            info = infos.get(pid)
            if info is None:
                info = infos[pid] = self.prepare_update(pid, origin)
            marker = None
            if is_control:
                try:
                    marker = read_marker(buf, h.position)
                except (CorruptRecordError, ValueError) as exc:
                    if origin is AppendOrigin.REPLICATION:
                        log.warning("ignoring an unreadable control batch at offset %d: %s", h.base_offset, exc)
                        continue
                    raise CorruptRecordError(f"unreadable control batch at offset {h.base_offset}: {exc}") from exc
            done = info.append(h, marker)
            if done is not None:
                completed.append(done)
        return AppendAnalysis(list(infos.values()), completed)

    def apply(self, analysis: Analysis) -> Sequence[tuple[CompletedTxn, int]]:
        """Take over the changes of a written append; returns the completed transactions with their LSO.

        The caller records the aborted ones in the transaction index of the segment that
        holds their marker.
        """
        if type(analysis) is _FastUpdate:
            entry, batch = analysis
            batches = entry.batches
            batches.append(batch)
            if len(batches) > NUM_BATCHES_TO_RETAIN:
                del batches[0]
            entry.last_timestamp = batch.timestamp
            return ()
        assert type(analysis) is AppendAnalysis
        for info in analysis.infos:
            self.update(info)
        out = []
        for txn in analysis.completed:
            out.append((txn, self.last_stable_offset(txn)))
            self.complete_txn(txn)
        if out or any(info.started_txns for info in analysis.infos):
            self._update_first_unstable()
        return out

    def update(self, info: ProducerAppendInfo) -> None:
        """Merge a ProducerAppendInfo into the state (Kafka's update)."""
        current = self._producers.get(info.producer_id)
        if current is None:
            self._producers[info.producer_id] = info.updated
        else:
            current.update(info.updated)
        if info.transactional and self._verifications:
            # Written into (or ended): the transaction's next batches find it open; the next
            # transaction verifies anew, and a confirmation still on its way is stale.
            self._verifications.pop(info.producer_id, None)
        for txn in info.started_txns:
            self._ongoing[txn.first_offset] = txn
        if info.started_txns:
            self._update_first_unstable()

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Move a transaction from open to unreplicated (until the high watermark passes its marker)."""
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            log.warning("completed transaction %s was not open", completed)
            txn = TxnMetadata(completed.producer_id, completed.first_offset)
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn
        self._update_first_unstable()

    def load_batch(self, h: BatchHeader, marker: tuple[int, int] | None = None) -> tuple[CompletedTxn, int] | None:
        """Replay one batch read back from the log (origin replication); the completed txn and its LSO, if any."""
        if h.producer_id < 0:
            return None
        info = self.prepare_update(h.producer_id, AppendOrigin.REPLICATION)
        done = info.append(h, marker)
        self.update(info)
        if done is None:
            return None
        lso = self.last_stable_offset(done)
        self.complete_txn(done)
        return done, lso

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the high watermark."""
        if self._unreplicated:
            gone = [k for k, txn in self._unreplicated.items() if txn.last_offset < high_watermark]
            if gone:
                for k in gone:
                    del self._unreplicated[k]
                self._update_first_unstable()

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Completed transactions below the new log start are gone; so are snapshots below it."""
        self.on_high_watermark_updated(log_start_offset)
        self.delete_snapshots_before(log_start_offset)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producers without an open transaction idle for producer.id.expiration.ms; return how many."""
        limit = self.producer_id_expiration_ms
        expired = [
            pid
            for pid, e in self._producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= limit
        ]
        for pid in expired:
            del self._producers[pid]
        stale = [pid for pid, g in self._verifications.items() if now_ms - g.created_ms >= limit]
        for pid in stale:
            del self._verifications[pid]
        return len(expired)

    def clear(self) -> None:
        """Forget every producer and transaction (snapshots stay)."""
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._first_unstable = None
        self._verifications.clear()

    # -- snapshots ------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        """The snapshot file for ``offset``."""
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        out = []
        for path in self.dir.glob("*" + SNAPSHOT_SUFFIX):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    @property
    def latest_snapshot_offset(self) -> int | None:
        """The newest snapshot's offset, or None."""
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def take_snapshot(self, offset: int) -> Path | None:
        """Write the state as of ``offset`` (everything below it applied); None if that snapshot exists."""
        path = self.snapshot_path(offset)
        if path.exists():
            return None
        body = bytearray(_SNAP_COUNT.pack(len(self._producers)))
        for e in self._producers.values():
            body += _SNAP_ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                e.coordinator_epoch,
                e.last_timestamp,
                e.current_txn_first_offset,
                len(e.batches),
            )
            for b in e.batches:
                body += _SNAP_BATCH.pack(*b)
        data = _SNAP_HEAD.pack(_SNAPSHOT_VERSION, crc32c(body)) + body
        write_atomically(path, data)
        return path

    @staticmethod
    def read_snapshot(path: str | Path) -> list[ProducerStateEntry]:
        """The entries of a snapshot file; CorruptRecordError when it is torn, corrupt or of an unknown version."""
        data = Path(path).read_bytes()
        if len(data) < _SNAP_HEAD.size + _SNAP_COUNT.size:
            raise CorruptRecordError(f"{path}: {len(data)} bytes is too short for a snapshot")
        version, crc = _SNAP_HEAD.unpack_from(data)
        if version != _SNAPSHOT_VERSION:
            raise CorruptRecordError(f"{path}: unknown snapshot version {version}")
        body = memoryview(data)[_SNAP_HEAD.size :]
        if crc32c(body) != crc:
            raise CorruptRecordError(f"{path}: snapshot CRC mismatch")
        try:
            (count,) = _SNAP_COUNT.unpack_from(body)
            position = _SNAP_COUNT.size
            entries = []
            for _ in range(count):
                pid, epoch, coordinator_epoch, ts, txn_first, nbatches = _SNAP_ENTRY.unpack_from(body, position)
                position += _SNAP_ENTRY.size
                batches = []
                for _ in range(nbatches):
                    batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(body, position)))
                    position += _SNAP_BATCH.size
                entries.append(ProducerStateEntry(pid, epoch, coordinator_epoch, ts, txn_first, batches))
        except struct.error as exc:
            raise CorruptRecordError(f"{path}: truncated snapshot body: {exc}") from exc
        if position != len(body):
            raise CorruptRecordError(f"{path}: {len(body) - position} trailing bytes")
        return entries

    def load_latest_snapshot(self, at_most: int, now_ms: int | None = None) -> int | None:
        """Replace the state with the newest valid snapshot at or below ``at_most``; return its offset.

        Corrupt snapshots are deleted and the next older one tried; None (and an empty
        state) when none is usable. Expired producers are not loaded.
        """
        self.clear()
        for offset in reversed(self.snapshot_offsets()):
            if offset > at_most:
                continue
            path = self.snapshot_path(offset)
            try:
                entries = self.read_snapshot(path)
            except (OSError, CorruptRecordError) as exc:
                log.warning("%s: ignoring snapshot %s: %s", self.dir, path.name, exc)
                path.unlink(missing_ok=True)
                continue
            for entry in entries:
                if now_ms is not None and entry.current_txn_first_offset < 0:
                    if now_ms - entry.last_timestamp >= self.producer_id_expiration_ms:
                        continue
                self._producers[entry.producer_id] = entry
                if entry.current_txn_first_offset >= 0:
                    first = entry.current_txn_first_offset
                    self._ongoing[first] = TxnMetadata(entry.producer_id, first)
            self._update_first_unstable()
            return offset
        return None

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete the snapshots below ``offset``."""
        for snap in self.snapshot_offsets():
            if snap < offset:
                self.snapshot_path(snap).unlink(missing_ok=True)

    def delete_snapshots_after(self, offset: int) -> None:
        """Delete the snapshots above ``offset`` (the log was truncated there)."""
        for snap in self.snapshot_offsets():
            if snap > offset:
                self.snapshot_path(snap).unlink(missing_ok=True)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything and delete every snapshot: the log restarts empty at ``offset``."""
        self.clear()
        self.delete_snapshots_after(-1)

    def __iter__(self) -> Iterator[ProducerStateEntry]:
        return iter(list(self._producers.values()))

    def __len__(self) -> int:
        return len(self._producers)

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager({str(self.dir)!r}, producers={len(self._producers)}, "
            f"ongoing={len(self._ongoing)}, unreplicated={len(self._unreplicated)})"
        )


__all__ = [
    "AppendAnalysis",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "Duplicate",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TxnMetadata",
    "in_sequence",
    "next_sequence",
    "read_marker",
]
