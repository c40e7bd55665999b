"""Small checkpoint files holding one offset, written atomically (as Kafka's CheckpointFile).

Format, as Kafka's offset checkpoint files: a version line (0), an entry count line (1)
and the value. A write goes to a temporary file that is fsynced and renamed over the old
one, so a crash leaves either the old or the new checkpoint, never a torn one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

_VERSION = 0


def fsync_path(path: str | Path) -> None:
    """fsync the file or directory at ``path`` (for one whose descriptor is not at hand)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str | Path) -> None:
    """fsync a directory so renames and new files in it survive a crash."""
    fsync_path(directory)


def write_atomically(path: str | Path, data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` so that a crash leaves the old or the new
    file, never a torn one: a temporary file is written, fsynced and renamed over it, and
    the directory fsynced."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_offset(path: str | Path, offset: int) -> None:
    """Atomically replace the checkpoint at ``path`` with ``offset``."""
    write_atomically(path, f"{_VERSION}\n1\n{offset}\n".encode("ascii"))


def read_offset(path: str | Path) -> int | None:
    """The offset in the checkpoint at ``path``, or None if it is missing or unreadable."""
    try:
        lines = Path(path).read_text(encoding="ascii").split()
        if len(lines) == 3 and int(lines[0]) == _VERSION and int(lines[1]) == 1:
            return int(lines[2])
        log.warning("ignoring malformed checkpoint %s", path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, UnicodeDecodeError):
        log.warning("ignoring unreadable checkpoint %s", path, exc_info=True)
    return None
