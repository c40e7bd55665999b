"""The names of a partition directory's files, as Kafka's ``LogFileUtils`` and ``LogSegment`` give them.

A segment is ``<20-digit base offset>`` plus a suffix: ``.log`` (the batches), ``.index``,
``.timeindex``, ``.txnindex``, and ``.snapshot`` for a producer-state snapshot taken at that
offset. Suffixes added after those mark a file in passing: ``.deleted`` (waiting for
file.delete.delay.ms), ``.cleaned`` (written by the cleaner, not yet swapped in) and
``.swap`` (being swapped in). The directory also holds one checkpoint file each for the
recovery point, the log start offset, the cleaner's position and the leader epochs, plus a
marker written by a clean shutdown.

Every module that names a file takes the name from here, so the loader, the cleaner and
the log agree on what a file is without importing each other.
"""

from __future__ import annotations

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
SNAPSHOT_SUFFIX = ".snapshot"

DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded name Kafka gives a segment's files."""
    return f"{offset:020d}"


def segment_file_name(offset: int, suffix: str) -> str:
    """``<20-digit offset><suffix>``: the name of one of a segment's files."""
    return f"{offset:020d}{suffix}"


def offset_from_file_name(name: str) -> int | None:
    """The base offset a segment file's name starts with; None for any other file."""
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() else None


__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_CHECKPOINT_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "INDEX_SUFFIXES",
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "LOG_START_OFFSET_FILE",
    "LOG_SUFFIX",
    "RECOVERY_POINT_FILE",
    "SNAPSHOT_SUFFIX",
    "SWAP_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "filename_prefix",
    "offset_from_file_name",
    "segment_file_name",
]
