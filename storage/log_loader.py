"""Opening a partition directory's segments after a clean or an unclean shutdown (Kafka's ``LogLoader``).

:func:`load_segments` is the first thing :class:`storage.log.Log` does. In order:

1. the clean-shutdown marker is read and removed (a crash while loading is then recovered
   from like any other);
2. leftovers go: files of segments deleted before the restart (``.deleted``) and
   temporaries of interrupted writes (``.tmp``);
3. a compaction swap cut short is completed or rolled back (:func:`recover_interrupted_swap`);
4. indexes without their ``.log`` are deleted;
5. every segment's indexes are sanity-checked, and one that fails is rebuilt from the
   segment's batches with one WARNING line naming the file; after an unclean shutdown the
   segments from the one holding the recovery point on are scanned batch by batch and cut
   at the first invalid batch, and every segment after a cut one is deleted.

What the loader leaves to the log: the producer state (rebuilt from the segments it
scanned), the high watermark and the checkpoints it writes once loaded.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from storage.checkpoint import fsync_dir, read_offset
from storage.config import Config
from storage.log_files import (
    CLEAN_SHUTDOWN_FILE,
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIXES,
    LOG_START_OFFSET_FILE,
    LOG_SUFFIX,
    RECOVERY_POINT_FILE,
    SWAP_SUFFIX,
    offset_from_file_name,
    segment_file_name,
)
from storage.segment import LogSegment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedSegments:
    """What :func:`load_segments` found: the segments to open the log with, the last one active."""

    segments: tuple[LogSegment, ...]
    # Scanned batch by batch: their transaction indexes are rebuilt with the producer state.
    recovered: tuple[LogSegment, ...]
    # The log start offset checkpoint, or None if there is none.
    log_start_checkpoint: int | None


def load_segments(directory: Path, config: Config, now_ms: int) -> LoadedSegments:
    """Open ``directory``'s segments, check every index and recover what a crash may have torn."""
    marker = directory / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    if clean:
        # Gone for good before anything here changes a file: a crash while loading must
        # be recovered from like any other.
        marker.unlink()
        fsync_dir(directory)
    for path in directory.iterdir():
        if path.name.endswith((DELETED_SUFFIX, ".tmp")):
            path.unlink(missing_ok=True)
    recover_interrupted_swap(directory, config)
    bases = sorted(int(p.stem) for p in directory.glob("*" + LOG_SUFFIX) if p.stem.isdigit())
    for path in directory.iterdir():
        if path.suffix in INDEX_SUFFIXES and path.stem.isdigit() and int(path.stem) not in bases:
            path.unlink()  # an index without its log is useless
    segments = [LogSegment(directory, b, config, created_ms=now_ms, active=False) for b in bases]
    start_checkpoint = read_offset(directory / LOG_START_OFFSET_FILE)
    recovery_point = read_offset(directory / RECOVERY_POINT_FILE) or 0
    first_to_scan = len(segments)
    if not clean and segments:
        first_to_scan = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        log.info("%s: unclean shutdown, recovering from offset %d", directory, recovery_point)
    kept: list[LogSegment] = []
    scanned: list[LogSegment] = []
    for n, segment in enumerate(segments):
        unflushed = n >= first_to_scan
        if unflushed or segment.needs_recovery:
            if not unflushed:
                # A flushed segment whose index does not hold up: news worth one line.
                log.warning(
                    "%s; rebuilding the indexes of %s from its batches", segment.index_problem, segment.log_path
                )
            kept.append(segment)
            scanned.append(segment)
            if not recover_segment(segment, segments[n + 1] if n + 1 < len(segments) else None):
                # Its tail was lost, so everything after it is suspect (a follower refetches it).
                log.warning("%s: deleting %d segments after a corrupt batch", directory, len(segments) - n - 1)
                for later in segments[n + 1 :]:
                    later.delete()
                break
        else:
            # Loaded as it is: never appended to again, so its indexes stay trimmed as found.
            kept.append(segment)
    if not kept:
        kept.append(LogSegment(directory, max(start_checkpoint or 0, 0), config, created_ms=now_ms))
    kept[-1].make_active()
    return LoadedSegments(tuple(kept), tuple(scanned), start_checkpoint)


def recover_segment(segment: LogSegment, following: LogSegment | None) -> bool:
    """Rebuild ``segment``'s indexes from its batches, cut its invalid tail and make it durable.

    Returns False when the segment no longer ends where ``following`` begins (its tail
    was cut or lost): the caller drops every later segment.
    """
    segment.make_active()  # room to rebuild the indexes
    truncated = segment.recover()
    intact = following is None or (not truncated and segment.next_offset == following.base_offset)
    if following is not None and intact:
        # Its final time index entry and the trim, written before the flush makes them durable.
        segment.on_becoming_inactive()
    segment.flush()
    return intact


def recover_interrupted_swap(directory: Path, config: Config) -> None:
    """Undo or complete a compaction swap cut short by a crash, before the segments load.

    As Kafka's LogLoader: every ``.cleaned`` file is deleted, and so is every ``.swap``
    file whose base offset is at or above the lowest ``.cleaned`` one (that swap had not
    committed: the ``.log`` is renamed last). ``.swap`` index files without their
    ``.log.swap`` go too (the segment rebuilds them). A remaining ``<base>.log.swap`` has
    committed: the segments within its offset range [base, next offset) are deleted and
    the ``.swap`` suffix dropped.
    """
    cleaned = [p for p in directory.iterdir() if p.name.endswith(CLEANED_SUFFIX)]
    cleaned_bases = [b for b in (offset_from_file_name(p.name) for p in cleaned) if b is not None]
    for path in cleaned:
        path.unlink(missing_ok=True)
    swaps = [p for p in directory.iterdir() if p.name.endswith(SWAP_SUFFIX)]
    if not swaps and not cleaned:
        return
    lowest_cleaned = min(cleaned_bases, default=None)
    log_swaps = {offset_from_file_name(p.name) for p in swaps if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)}
    for path in swaps:
        base = offset_from_file_name(path.name)
        if base is None or (lowest_cleaned is not None and base >= lowest_cleaned) or base not in log_swaps:
            log.info("%s: rolling back interrupted swap file %s", directory, path.name)
            path.unlink(missing_ok=True)
    for base in sorted(b for b in log_swaps if b is not None):
        swap_log = directory / segment_file_name(base, LOG_SUFFIX + SWAP_SUFFIX)
        if not swap_log.exists():
            continue
        segment = LogSegment(directory, base, config, created_ms=0, active=False, file_suffix=SWAP_SUFFIX)
        if segment.needs_recovery:
            if not segment.indexes_missing:  # missing is expected: renamed to their final names already
                log.warning(
                    "%s; rebuilding the indexes of %s from its batches", segment.index_problem, segment.log_path
                )
            segment.make_active()
            segment.recover()
        end = segment.next_offset
        segment.close()
        log.info("%s: completing interrupted swap of offsets [%d, %d)", directory, base, end)
        for path in directory.iterdir():
            old = offset_from_file_name(path.name)
            if old is not None and base <= old < end and path.suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
                if path.name == segment_file_name(old, path.suffix):
                    path.unlink()
        for suffix in (*INDEX_SUFFIXES, LOG_SUFFIX):  # the .log last, so a second crash here redoes this
            swapped = directory / segment_file_name(base, suffix + SWAP_SUFFIX)
            if swapped.exists():
                os.replace(swapped, directory / segment_file_name(base, suffix))
    fsync_dir(directory)


__all__ = ["LoadedSegments", "load_segments", "recover_interrupted_swap", "recover_segment"]
