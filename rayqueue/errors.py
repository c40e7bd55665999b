"""Every rayqueue error: one class per Kafka error code, with ``code`` and ``retriable``.

The broker's classes are defined in ``storage.errors`` (the lowest layer that raises them)
and re-exported here; the client-side ones (IllegalStateError, TransactionAbortedError) are
defined here. This is the module users import them from. Ray's errors become Kafka's in
:func:`as_kafka_error` (defined in ``actors.errors``, where the Kafka protocol gateway uses
it too, and re-exported here).
"""

from __future__ import annotations

import storage.errors as _errors
from actors.errors import as_kafka_error
from storage.errors import *  # noqa: F403
from storage.errors import KafkaError


class IllegalStateError(KafkaError):
    """A client call that the client's state does not allow (Kafka's IllegalStateException)."""

    code, retriable = -1, False


class TransactionAbortedError(KafkaError):
    """TRANSACTION_ABORTED: the batch was not sent because its transaction is being aborted
    (Kafka's TransactionAbortedException; no wire error code)."""

    code, retriable = -1, False


def is_retriable(error: BaseException) -> bool:
    """Whether an actor call that failed with ``error`` may be tried again (after a metadata
    refresh): a retriable Kafka error, or an actor that died or is unreachable."""
    converted = as_kafka_error(error)
    return isinstance(converted, KafkaError) and converted.retriable


__all__ = [*_errors.__all__, "IllegalStateError", "TransactionAbortedError", "as_kafka_error", "is_retriable"]
