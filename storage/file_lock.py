"""An advisory lock that makes one process the owner of a partition directory.

``fcntl.flock`` on a ``.lock`` file, exclusive and non-blocking. The kernel releases it
when the holder's file descriptor closes, including when the process dies, so a crashed
owner never leaves the directory locked. The holder writes its pid and hostname into the
file so the error a second opener gets names the owner.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from storage.errors import LogDirLockedError

LOCK_FILE = ".lock"


class FileLock:
    """An exclusive lock on ``<directory>/.lock``, held until :meth:`release`."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise LogDirLockedError naming the holder."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise LogDirLockedError(f"{self.path.parent} is locked by {holder}") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (closing the descriptor releases it)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None
