"""rayqueue's on-disk commit log: Kafka record batch v2, segments, indexes, recovery.

This package imports nothing from Ray or the layers above; it is usable on its own.
"""

from storage.batch_header import BatchHeader
from storage.config import LOG_CONFIG, Config, ConfigDef, ConfigKey, log_config
from storage.errors import KafkaError
from storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    Log,
    LogAppendInfo,
    TimestampOffset,
)

__all__ = [
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
