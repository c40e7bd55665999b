"""The leader epoch cache: at which offset each leader epoch began (Kafka's LeaderEpochFileCache).

A replica keeps one entry ``(epoch, start_offset)`` per leader epoch it holds records
of, in the ``leader-epoch-checkpoint`` file of its partition directory. Followers use
it to find where their log diverged from a new leader's (KIP-101/KIP-279): the leader
answers "the end offset of epoch E" from its cache, never from the high watermark,
which a follower learns late and which would cut committed records or keep divergent
ones.

File format, as Kafka's: a version line (0), an entry count line, then one
``epoch start_offset`` line per entry, written to a temporary file, fsynced and renamed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from storage.checkpoint import write_atomically
from storage.log_files import LEADER_EPOCH_CHECKPOINT_FILE

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_VERSION = 0


class LeaderEpochFileCache:
    """Epoch start offsets of one replica, kept in memory and checkpointed on every change."""

    def __init__(self, directory: str | Path) -> None:
        self._path = Path(directory) / LEADER_EPOCH_CHECKPOINT_FILE
        self._entries: list[tuple[int, int]] = self._read()

    # -- queries --------------------------------------------------------------------------

    @property
    def entries(self) -> list[tuple[int, int]]:
        """``(epoch, start_offset)`` pairs, oldest first."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or UNDEFINED_EPOCH when empty."""
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(largest epoch <= epoch, the offset where it ended)``.

        The end of the newest epoch is the log end; the end of an older one is the start
        of the next epoch. An epoch older than every entry answers
        ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)``.
        """
        if not self._entries or epoch < self._entries[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self._entries[-1][0]:
            return self._entries[-1][0], log_end_offset
        for i in range(len(self._entries) - 1, -1, -1):
            if self._entries[i][0] <= epoch:
                return self._entries[i][0], self._entries[i + 1][1]
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET  # unreachable: the first entry is <= epoch

    # -- changes --------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` unless an entry for it (or later) exists.

        Returns whether the cache changed. Entries that would start at or after the new
        one belong to a suffix that was truncated and are dropped, as Kafka does.
        """
        if epoch < 0 or (self._entries and self._entries[-1][0] >= epoch):
            return False
        while self._entries and self._entries[-1][1] >= start_offset:
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._write()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [e for e in self._entries if e[1] < end_offset]
        if kept != self._entries:
            self._entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly below ``start_offset``; the one covering it now starts there."""
        kept: list[tuple[int, int]] = []
        for i, (epoch, start) in enumerate(self._entries):
            nxt = self._entries[i + 1][1] if i + 1 < len(self._entries) else None
            if nxt is not None and nxt <= start_offset:
                continue
            kept.append((epoch, max(start, start_offset)))
        if kept != self._entries:
            self._entries = kept
            self._write()

    def clear(self) -> None:
        """Forget every epoch (the log was emptied)."""
        if self._entries:
            self._entries = []
            self._write()

    # -- file -----------------------------------------------------------------------------

    def _read(self) -> list[tuple[int, int]]:
        try:
            lines = self._path.read_text(encoding="ascii").splitlines()
        except FileNotFoundError:
            return []
        try:
            if int(lines[0]) != _VERSION:
                raise ValueError(f"version {lines[0]}")
            count = int(lines[1])
            entries = [(int(a), int(b)) for a, b in (line.split() for line in lines[2 : 2 + count])]
            if len(entries) != count:
                raise ValueError("short file")
            return entries
        except (ValueError, IndexError):
            # A torn file cannot happen (atomic rename); a hand-edited one is dropped, which
            # makes the follower fall back to the high watermark, as Kafka does without a cache.
            log.warning("ignoring malformed %s", self._path, exc_info=True)
            return []

    def _write(self) -> None:
        body = "".join(f"{e} {o}\n" for e, o in self._entries)
        write_atomically(self._path, f"{_VERSION}\n{len(self._entries)}\n{body}".encode("ascii"))
