"""rayqueue's on-disk commit log: Kafka record batch v2, segments, indexes, recovery.

This package imports nothing from Ray or the layers above; it is usable on its own.
"""

from storage.batch_header import BatchHeader
from storage.config import LOG_CONFIG, Config, ConfigDef, ConfigKey, log_config
from storage.errors import KafkaError
from storage.legacy import is_legacy, read_legacy, upconvert
from storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    Log,
    LogAppendInfo,
    TimestampOffset,
)
from storage.producer_state import AppendOrigin, CompletedTxn, ProducerStateEntry, ProducerStateManager
from storage.record_batch import (
    Record,
    RecordBatch,
    RecordBatchBuilder,
    RecordColumns,
    build_control_batch,
    decode_columns,
    iter_batches,
)
from storage.txn_index import AbortedTxn, TransactionIndex

__all__ = [
    "AbortedTxn",
    "AppendOrigin",
    "CompletedTxn",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TransactionIndex",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordColumns",
    "build_control_batch",
    "decode_columns",
    "iter_batches",
    "is_legacy",
    "read_legacy",
    "upconvert",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchDataInfo",
    "Log",
    "LogAppendInfo",
    "TimestampOffset",
    "LOG_CONFIG",
    "BatchHeader",
    "Config",
    "ConfigDef",
    "ConfigKey",
    "KafkaError",
    "log_config",
]
