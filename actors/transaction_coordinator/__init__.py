"""The transaction coordinator: producer ids, transactional ids and their transactions (KIP-98).

Split as Kafka splits it: :mod:`.transaction_metadata` (one id's transaction and its state
machine, Kafka's ``TransactionMetadata``/``TransactionState``), :mod:`.state_manager` (every
id, and the decisions of InitProducerId, AddPartitionsToTxn, EndTxn, timeouts and expiry,
Kafka's ``TransactionStateManager``) and :mod:`.records` (the ``__transaction_state`` record
format). These are plain classes on an injected clock, without Ray; :mod:`.actor` is the Ray
actor shell, ``TransactionCoordinator``, that writes the records and the markers.

The actor is imported on first use of the name, so that importing the state machine (or the
record format) never loads Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors.transaction_coordinator.records import TXN_KEY_VERSION, transaction_key
from actors.transaction_coordinator.transaction_metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
)

if TYPE_CHECKING:
    from actors.transaction_coordinator.actor import TransactionCoordinator


def __getattr__(name: str) -> Any:
    if name == "TransactionCoordinator":
        from actors.transaction_coordinator.actor import TransactionCoordinator

        return TransactionCoordinator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TXN_KEY_VERSION",
    "TransactionCoordinator",
    "TransactionMetadata",
    "transaction_key",
]
