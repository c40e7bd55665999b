"""A leader's transaction verification (KIP-890; Kafka's ReplicaManager with its
AddPartitionsToTxnManager): before a producer's transactional batch opens a transaction in a
partition, the transaction coordinator confirms that the partition is in an ongoing
transaction of that producer id and epoch.

The log says when a confirmation is needed (``storage.producer_state``: a transactional
batch of a producer with no transaction open there raises VerificationRequired, nothing
written). :meth:`TransactionVerifier.append` then asks the coordinator (AddPartitionsToTxn
with ``verify_only``, as Kafka's v4 VerifyOnly), marks the guard confirmed and appends again;
the transaction's later batches find it open and pay no call. So a batch the coordinator
does not know of (a forged producer id, another producer's, a batch that arrives after its
transaction was aborted) is refused and never holds the last stable offset.

Answers, as Kafka's broker translates the coordinator's: INVALID_TXN_STATE (not in the
transaction, or no transactional id to ask with), PRODUCER_FENCED and
INVALID_PRODUCER_ID_MAPPING as they come; a coordinator that cannot answer now (restarting,
loading, a transaction still completing) is NOT_ENOUGH_REPLICAS, a retriable error that
makes every client retry the produce without refreshing its metadata.

``transaction.partition.verification.enable`` (Kafka's broker key, default true) turns it
off; the controller hands it to the leaders with the other replication settings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import ray

from actors import launch
from actors.errors import as_kafka_error
from actors.names import TRANSACTION_COORDINATOR_NAME
from actors.protocol import AddPartitionsToTxnRequest, ProduceRequest
from actors.types import TopicPartition
from storage import AppendOrigin, Log
from storage.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidTxnStateError,
    NotCoordinatorError,
    NotEnoughReplicasError,
)
from storage.log_results import LogAppendInfo
from storage.producer_state import VerificationRequired

logger = logging.getLogger(__name__)

VERIFICATION_KEY = "transaction.partition.verification.enable"
# The coordinator's answers a client should retry the produce on (Kafka's broker sends
# NOT_ENOUGH_REPLICAS for them: older clients retry it, and it refreshes no metadata).
_RETRIED = (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)
VERIFY_TIMEOUT_S = 30.0


class TransactionVerifier:
    """One replica's verifications: ``settings`` is the replica's replication settings (read
    on every append: the controller may change them), ``namespace`` where the transaction
    coordinator is."""

    def __init__(self, topic: str, partition: int, namespace: str, settings: Mapping[str, Any]) -> None:
        self._tp = TopicPartition(topic, partition)
        self._namespace = namespace
        self._settings = settings
        self._coordinator: Any = None

    @property
    def enabled(self) -> bool:
        """Whether a client's transactional batches are verified."""
        return self._settings.get(VERIFICATION_KEY, True) is True

    async def append(
        self, log: Log, request: ProduceRequest, leader_epoch: Callable[[], int], check_leader: Callable[[int], None]
    ) -> LogAppendInfo:
        """``log.append`` of a checked produce request, verifying the transaction first when
        the log asks for it. ``leader_epoch`` gives the epoch to stamp; ``check_leader``
        (called with the request's epoch) raises when this replica stopped leading while the
        coordinator was asked."""
        records, origin = request.records, request.origin
        verify = origin is AppendOrigin.CLIENT and self.enabled
        try:
            return log.append(records, leader_epoch=leader_epoch(), origin=origin, verify=verify)
        except VerificationRequired as needed:
            await self._confirm(log, needed, request.transactional_id)
        check_leader(request.current_leader_epoch)
        return self.retry(log, records, origin, leader_epoch())

    def retry(self, log: Log, records: bytes, origin: AppendOrigin, leader_epoch: int) -> LogAppendInfo:
        """``log.append`` again (a batch that waited for its predecessor, or a confirmed
        transaction), with no new verification: one still needed means the transaction ended
        meanwhile (INVALID_TXN_STATE)."""
        try:
            return log.append(
                records, leader_epoch=leader_epoch, origin=origin, verify=origin is AppendOrigin.CLIENT and self.enabled
            )
        except VerificationRequired as needed:
            raise InvalidTxnStateError(
                f"{self._tp.topic}-{self._tp.partition}: the transaction of producer {needed.producer_id} is no "
                "longer open here"
            ) from None

    async def _confirm(self, log: Log, needed: VerificationRequired, transactional_id: str | None) -> None:
        guard = needed.guard
        if not transactional_id:
            log.forget_verification(guard)
            raise InvalidTxnStateError(
                f"{self._tp.topic}-{self._tp.partition}: a transactional batch of producer {needed.producer_id} "
                "came without its transactional id; the transaction coordinator cannot vouch for it"
            )
        request = AddPartitionsToTxnRequest(
            transactional_id, needed.producer_id, needed.producer_epoch, (self._tp,), verify_only=True
        )
        try:
            await self._call(request)
        except Exception as raised:  # noqa: BLE001 - each answered as Kafka's broker answers it
            exc = as_kafka_error(raised, CoordinatorNotAvailableError, "transaction coordinator")
            if isinstance(exc, _RETRIED):
                raise NotEnoughReplicasError(
                    f"unable to verify that {self._tp.topic}-{self._tp.partition} is in the transaction: {exc}"
                ) from None
            log.forget_verification(guard)
            raise exc from None
        if not log.verified(guard):
            raise InvalidTxnStateError(
                f"{self._tp.topic}-{self._tp.partition}: the transaction of producer {needed.producer_id} ended "
                "while it was being verified"
            )

    async def _call(self, request: AddPartitionsToTxnRequest) -> None:
        """The coordinator's verification; a coordinator not reachable now is retriable."""
        try:
            if self._coordinator is None:
                self._coordinator = launch.find_actor(TRANSACTION_COORDINATOR_NAME, self._namespace)
                if self._coordinator is None:
                    raise CoordinatorNotAvailableError("no transaction coordinator is running")
            await asyncio.wait_for(self._coordinator.add_partitions_to_txn.remote(request), VERIFY_TIMEOUT_S)
        except (TimeoutError, ray.exceptions.RayActorError) as exc:
            self._coordinator = None  # looked up again next time (it may have restarted)
            raise CoordinatorNotAvailableError(f"the transaction coordinator did not answer: {exc}") from None


__all__ = ["VERIFICATION_KEY", "TransactionVerifier"]
