"""The ``__transaction_state`` record format.

One record per transactional id (partition = ``abs(javaHashCode(id)) % partitions``, as
``__consumer_offsets`` does for groups), in the compacted internal topic: key JSON
``[0, transactional id]`` (Kafka's TransactionLogKey version 0), value the id's metadata as
compact JSON with sorted keys, or a tombstone once the id is forgotten (Dead). The reader
checks every field before anything is built (``actors.internal_records``), so that a record
is applied whole or skipped whole on load.
"""

from __future__ import annotations

import json
from typing import Any

from actors import internal_records as stored
from actors.protocol import TransactionState
from actors.transaction_coordinator.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
)
from actors.types import TopicPartition

TXN_KEY_VERSION = 0  # Kafka's TransactionLogKey version

Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def transaction_key(transactional_id: str) -> bytes:
    """Key of a transactional id's state record: JSON ``[0, id]``."""
    return _dumps([TXN_KEY_VERSION, transactional_id])


def decode_key(key: bytes | None) -> str:
    """The transactional id of a key; ValueError for anything that is not ``[0, id]``."""
    k = stored.loads(key, "key")
    if not isinstance(k, list) or len(k) != 2 or type(k[0]) is not int or k[0] != TXN_KEY_VERSION:
        raise ValueError(f"the key is {k!r:.60}, not [{TXN_KEY_VERSION}, transactional id]")
    if not isinstance(k[1], str):
        raise ValueError(f"the key is {k!r:.60}, not [{TXN_KEY_VERSION}, transactional id]")
    return k[1]


def encode_value(txn: TransactionMetadata) -> bytes | None:
    """The value written for ``txn``: its metadata, or a tombstone when it is Dead.
    ValueError for PrepareEpochFence, a step that lives in memory only."""
    if txn.state == TransactionState.DEAD:
        return None
    if txn.state == TransactionState.PREPARE_EPOCH_FENCE:
        raise ValueError(f"{txn.transactional_id!r}: state {txn.state} is never written")
    return _dumps(
        {
            "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "last_producer_id": txn.last_producer_id,
            "last_producer_epoch": txn.last_producer_epoch,
            "timeout_ms": txn.timeout_ms,
            "state": txn.state,
            "partitions": sorted([tp.topic, tp.partition] for tp in txn.partitions),
            "start_ms": txn.start_ms,
            "last_update_ms": txn.last_update_ms,
        }
    )


def record(txn: TransactionMetadata) -> Record:
    """The ``(key, value)`` record that makes ``txn`` the id's state."""
    return transaction_key(txn.transactional_id), encode_value(txn)


def decode_value(transactional_id: str, value: bytes | None, now_ms: int) -> TransactionMetadata:
    """Inverse of :func:`encode_value` for a live id (``now_ms`` stands in for a missing
    update time); ValueError/TypeError/KeyError for a record that is not one."""
    d = stored.json_object(value)
    state = TransactionState(stored.field(d, "state", str))
    if state == TransactionState.PREPARE_EPOCH_FENCE:
        raise ValueError(f"state {state} is never written")
    return TransactionMetadata(
        transactional_id,
        stored.field(d, "producer_id", int),
        stored.field(d, "producer_epoch", int),
        stored.field(d, "timeout_ms", int),
        state,
        frozenset(TopicPartition(t, p) for t, p in stored.topic_partitions(d.get("partitions", []), "partitions")),
        stored.field(d, "start_ms", int, -1),
        stored.field(d, "last_update_ms", int, now_ms),
        stored.field(d, "last_producer_id", int, NO_PRODUCER_ID),
        stored.field(d, "last_producer_epoch", int, NO_PRODUCER_EPOCH),
    )


__all__ = ["TXN_KEY_VERSION", "Record", "decode_key", "decode_value", "encode_value", "record", "transaction_key"]
