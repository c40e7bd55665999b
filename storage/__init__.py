"""rayqueue's on-disk commit log: Kafka record batch v2, segments, indexes, recovery.

This package imports nothing from Ray or the layers above; it is usable on its own.

The names below are exported lazily (PEP 562): ``from storage import Log`` imports
``storage.log`` then, and importing a light module (``storage.errors``, ``storage.config``)
loads nothing else, pyarrow and numpy included.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each exported name -> the module that defines it.
_EXPORTS = {
    "AbortedTxn": "storage.txn_index",
    "AppendOrigin": "storage.producer_state",
    "BatchHeader": "storage.batch_header",
    "CompletedTxn": "storage.producer_state",
    "Config": "storage.config",
    "ConfigDef": "storage.config",
    "ConfigKey": "storage.config",
    "EARLIEST_TIMESTAMP": "storage.log_results",
    "FetchDataInfo": "storage.log_results",
    "KafkaError": "storage.errors",
    "LATEST_TIMESTAMP": "storage.log_results",
    "LOG_CONFIG": "storage.config",
    "Log": "storage.log",
    "LogAppendInfo": "storage.log_results",
    "MAX_TIMESTAMP": "storage.log_results",
    "ProducerStateEntry": "storage.producer_state",
    "ProducerStateManager": "storage.producer_state",
    "VerificationGuard": "storage.producer_state",
    "VerificationRequired": "storage.producer_state",
    "Record": "storage.records.reader",
    "RecordBatch": "storage.records.reader",
    "RecordBatchBuilder": "storage.records.builder",
    "RecordColumns": "storage.records.columns",
    "TimestampOffset": "storage.log_results",
    "TransactionIndex": "storage.txn_index",
    "build_control_batch": "storage.records.control",
    "decode_columns": "storage.records.columns",
    "is_legacy": "storage.legacy",
    "iter_batches": "storage.records.reader",
    "log_config": "storage.config",
    "read_legacy": "storage.legacy",
    "upconvert": "storage.legacy",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = sorted(_EXPORTS)
