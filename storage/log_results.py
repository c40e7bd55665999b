"""What a log's calls return (Kafka's ``LogAppendInfo``, ``FetchDataInfo``,
``TimestampAndOffset``) and the special timestamps ListOffsets takes.

Light on purpose: clients that need only the ListOffsets timestamps import this, not the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from storage.batch_header import BatchHeader

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1  # ListOffsets: the log end offset
MAX_TIMESTAMP = -3  # ListOffsets (KIP-734): the record with the largest timestamp


class LogAppendInfo(NamedTuple):
    """What an append did. ``headers`` are the appended batches' headers after offset assignment;
    their ``position`` is within the appended buffer.

    A named tuple, not a frozen dataclass: one is built per append on the produce path and
    a tuple costs a third as much to create.
    """

    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    max_timestamp: int
    batch_count: int
    size_bytes: int
    headers: list[BatchHeader]
    # True when the request repeated a batch the log holds: nothing was appended and the
    # offsets are the original batch's.
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The result of a read: whole batches starting with the one that holds ``fetch_offset``.

    ``first_offset`` is the base offset of the first batch returned (at or below
    ``fetch_offset``) and ``next_offset`` the offset to fetch next (just past the last
    batch returned); both are ``fetch_offset`` when ``records`` is empty.
    """

    records: bytes
    fetch_offset: int
    first_offset: int
    next_offset: int
    log_start_offset: int
    log_end_offset: int
    segment_base_offset: int = -1
    position: int = -1


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A ListOffsets answer: an offset and the timestamp found there (-1 for earliest/latest)."""

    timestamp: int
    offset: int


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchDataInfo",
    "LogAppendInfo",
    "TimestampOffset",
]
