"""A partition's directory on a broker's disk: where it is, the topic id it belongs to
(Kafka's ``PartitionMetadataFile``, KIP-516), and removing the directories of replicas this
broker no longer hosts (a topic deleted or moved while the broker was down)."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path

from storage.checkpoint import fsync_dir, write_atomically
from storage.errors import KafkaStorageError, LogDirLockedError
from storage.file_lock import FileLock

logger = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"


def partition_dir(data_dir: str, topic: str, partition: int) -> Path:
    """Kafka's partition directory: ``<log.dir>/<topic>-<partition>``."""
    return Path(data_dir) / f"{topic}-{partition}"


def read_topic_id(directory: Path) -> str | None:
    """The topic id in the directory's ``partition.metadata`` (Kafka's PartitionMetadataFile),
    or None when there is none (a new directory, or one written before topic ids)."""
    try:
        text = (directory / PARTITION_METADATA_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    if fields.get("version") != "0" or not fields.get("topic_id"):
        raise KafkaStorageError(f"malformed {directory / PARTITION_METADATA_FILE}: {text!r}")
    return fields["topic_id"]


def write_topic_id(directory: Path, topic_id: str) -> None:
    """Write ``partition.metadata`` atomically."""
    write_atomically(directory / PARTITION_METADATA_FILE, f"version: 0\ntopic_id: {topic_id}\n".encode())


def remove_stray(directory: Path, topic_id: str | None) -> bool:
    """Delete ``directory`` if it belongs to a deleted topic of the same name (its topic id is
    not ``topic_id``); True if it did. Renamed first (Kafka's ``-stray`` suffix) so that a crash
    midway never leaves half of the old log where the new topic's replica would open it."""
    for leftover in directory.parent.glob(f"{directory.name}.*-stray"):
        shutil.rmtree(leftover, ignore_errors=True)  # an earlier removal cut short
    if topic_id is None or not directory.exists():
        return False
    found = read_topic_id(directory)
    if found is None or found == topic_id:
        return False
    stray = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-stray")
    os.replace(directory, stray)
    fsync_dir(directory.parent)
    shutil.rmtree(stray, ignore_errors=True)
    logger.warning("%s held topic id %s, not %s: a deleted topic's stray replica, removed", directory, found, topic_id)
    return True


def remove_stray_partitions(data_dir: str | Path, hosted: set[str]) -> list[str]:
    """Delete the partition directories in a broker's ``data_dir`` that it no longer hosts
    (``hosted``: the ``<topic>-<partition>`` names assigned to it), as Kafka's broker does
    with stray logs when it starts: a topic deleted, or a replica moved away, while this
    broker was down. Returns the names removed.

    Only directories that are partition logs (a ``<topic>-<n>`` name holding a segment or
    ``partition.metadata``) are touched; one whose lock a live replica holds is left (and
    logged). Each is renamed ``-stray`` before it is deleted, and leftovers of a removal cut
    short are deleted too.
    """
    root = Path(data_dir)
    if not root.is_dir():
        return []
    removed = []
    for entry in sorted(root.iterdir()):
        try:
            if _remove_if_stray(root, entry, hosted):
                removed.append(entry.name)
        except OSError as exc:  # one entry's trouble does not stop the sweep
            logger.warning("could not check or remove %s: %s", entry, exc)
    return removed


def _remove_if_stray(root: Path, entry: Path, hosted: set[str]) -> bool:
    """remove_stray_partitions for one entry of ``root``; True if it was removed."""
    if not entry.is_dir() or entry.name in hosted:
        return False
    if entry.name.endswith("-stray"):
        shutil.rmtree(entry, ignore_errors=True)  # an earlier removal cut short
        return False
    topic, _, number = entry.name.rpartition("-")
    if not topic or not number.isdigit():
        return False
    if not (entry / PARTITION_METADATA_FILE).exists() and not any(entry.glob("*.log")):
        return False
    lock = FileLock(entry)
    try:
        lock.acquire()
    except LogDirLockedError as exc:
        logger.warning("%s is not assigned to this broker but is open: left as it is (%s)", entry, exc)
        return False
    try:
        stray = entry.with_name(f"{entry.name}.{uuid.uuid4().hex}-stray")
        os.replace(entry, stray)
        fsync_dir(root)
    finally:
        lock.release()
    shutil.rmtree(stray, ignore_errors=True)
    logger.warning("%s: a replica this broker no longer hosts (topic deleted or moved), removed", entry)
    return True
