"""A simulated power cut for the storage tests: which of the writes a process made are on disk after it.

:class:`Disk` watches one directory while the code under test runs in it. It intercepts the
calls that make data durable or change names (``os.fsync``, ``mmap.mmap.flush``,
``os.replace``, ``os.rename``, ``os.unlink``) and keeps, per file, its content as of its
last sync, and per directory, its listing as of its last directory fsync plus the listing
after every name change since. Writes themselves are not intercepted: whatever a file holds
beyond its synced content is "unsynced" and a cut decides what of it survives.

Every intercepted call, and every :meth:`Disk.tick` the workload makes (after an
acknowledged append, say), is an event; the power goes out just before event ``cut_at``.
The disk image after the cut is then built the way a POSIX file system may leave it:

- names: the directory as of its last fsync with a prefix of the name changes made since
  applied (metadata is journaled in order: a rename is never kept while an earlier one is
  lost), so a file created, renamed or deleted since may or may not show;
- contents, per file: its last synced content, its latest content, or a torn mix of both
  (each 512-byte block from either, the length of either or one in between: unsynced pages
  written back in any order, a size change with or without its data, zero-filled blocks).

:class:`PowerCut` is raised from the event so the workload stops there; the image is taken
before it is raised, so whatever cleanup runs afterwards changes nothing.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import stat
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

BLOCK = 512  # granularity of a torn write (a sector); small, so tiny test files tear too


class PowerCut(BaseException):  # noqa: N818 - an event, not an error; BaseException so no `except Exception` eats it
    """The power went out at this call: the process is gone."""


@dataclass
class _File:
    """What the disk knows of one file (an inode)."""

    synced: bytes = b""  # content as of its last fsync/msync: what a cut is sure to keep
    last: bytes | None = None  # content when it lost its last name (it can still show after a cut)


_real = {
    "fsync": os.fsync,
    "replace": os.replace,
    "rename": os.rename,
    "unlink": os.unlink,
    "remove": os.remove,
    "mmap": mmap.mmap,
}


class Disk:
    """Power-loss simulation for the files in ``directory`` (see the module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        cut_at: int | None = None,
        seed: object = 0,
        unsynced: str | Callable[[str], str] | None = None,
        names: str | None = None,
    ) -> None:
        """``unsynced``: "drop" or "keep" every unsynced write (and name change) at the cut, or a
        function choosing one of them per file name; None: decide at random. ``names``: "drop" or
        "keep" the name changes whatever happens to the data."""
        assert callable(unsynced) or unsynced in (None, "drop", "keep")
        assert names in (None, "drop", "keep")
        self.unsynced = unsynced
        self.names = names or (unsynced if isinstance(unsynced, str) else None)
        self.dir = Path(directory).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cut_at = cut_at
        self.events = 0
        self.dead = False  # after the cut: every call passes through unrecorded
        self.image: dict[str, bytes] | None = None  # the disk as the cut left it
        self.cut_during: str | None = None  # the call the cut interrupted
        self.cut_in: list[str] = []  # the functions it interrupted, outermost first
        self._rng = random.Random(repr(seed))
        self._dir_ino = os.stat(self.dir).st_ino
        self._ids: dict[int, int] = {}  # st_ino -> file id (inode numbers are reused)
        self._files: dict[int, _File] = {}
        # What was there before the workload started counts as durable.
        self._synced_listing = self._listing()
        for name, fid in self._synced_listing.items():
            self._files[fid].synced = (self.dir / name).read_bytes()
        self._listings: list[dict[str, int]] = []  # after each name change since the last directory fsync
        self._maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()
        self._fds_before: set[str] = set()

    # -- bookkeeping ------------------------------------------------------------------------

    def _id(self, ino: int) -> int:
        fid = self._ids.get(ino)
        if fid is None:
            fid = self._ids[ino] = len(self._files)
            self._files[fid] = _File()
        return fid

    def _listing(self) -> dict[str, int]:
        out = {}
        for entry in os.scandir(self.dir):
            try:
                if entry.is_file(follow_symlinks=False):
                    out[entry.name] = self._id(entry.inode())
            except FileNotFoundError:  # pragma: no cover - removed while listing
                continue
        return out

    def _ours(self, path: object) -> Path | None:
        """``path`` if it names a file directly in the watched directory."""
        if isinstance(path, int):
            return None
        candidate = Path(os.fsdecode(path))
        if not candidate.is_absolute():
            candidate = Path.cwd() / candidate
        return candidate if candidate.parent.resolve() == self.dir else None

    def _losing_name(self, path: Path) -> None:
        """``path`` is about to be unlinked or replaced: keep its content, forget its inode number."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        if st.st_nlink <= 1:
            fid = self._id(st.st_ino)
            self._files[fid].last = path.read_bytes()
            del self._ids[st.st_ino]

    def _content_now(self, fid: int, names: dict[int, str]) -> bytes:
        name = names.get(fid)
        if name is not None:
            return (self.dir / name).read_bytes()
        file = self._files[fid]
        return file.last if file.last is not None else file.synced

    def _event(self, what: str) -> None:
        if self.dead:
            return
        self.events += 1
        if self.cut_at is not None and self.events >= self.cut_at:
            self.image = self._crash_image()
            self.cut_during = what
            self.cut_in = [frame.name for frame in traceback.extract_stack()]
            self.dead = True
            raise PowerCut(f"power cut at event {self.events} ({what})")

    def tick(self, what: str = "tick") -> None:
        """A point in the workload where the power may go out (after an acknowledged append, say)."""
        self._event(what)

    # -- the cut ----------------------------------------------------------------------------

    def _crash_image(self) -> dict[str, bytes]:
        rng = self._rng
        now = self._listing()
        candidates = [self._synced_listing, *self._listings, now]
        pick = {"drop": 0, "keep": len(candidates) - 1}.get(self.names or "", None)
        listing = candidates[rng.randrange(len(candidates)) if pick is None else pick]
        names = {fid: name for name, fid in now.items()}
        image = {}
        for name, fid in listing.items():
            synced = self._files[fid].synced
            latest = self._content_now(fid, names)
            choice = self.unsynced(name) if callable(self.unsynced) else self.unsynced
            if choice is None:
                image[name] = _survivor(synced, latest, rng)
            else:
                image[name] = synced if choice == "drop" else latest
        return image

    def write_image(self, target: str | os.PathLike[str]) -> Path:
        """Write the disk as the cut left it into ``target`` (a new directory); return it."""
        assert self.image is not None, "no power cut happened"
        target = Path(target)
        target.mkdir(parents=True)
        for name, data in self.image.items():
            (target / name).write_bytes(data)
        return target

    # -- the intercepted calls --------------------------------------------------------------

    def _fsync(self, fd: int) -> None:
        if self.dead:
            return _real["fsync"](fd)
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            if st.st_ino != self._dir_ino:
                return _real["fsync"](fd)
            self._event("fsync directory")
            _real["fsync"](fd)
            self._synced_listing, self._listings = self._listing(), []
            return None
        self._event("fsync")
        _real["fsync"](fd)
        self._synced(st.st_ino, f"/proc/self/fd/{fd}")
        return None

    def _synced(self, ino: int, path: str | Path) -> None:
        with open(path, "rb") as file:  # via /proc: the fd may be open for writing only
            self._files[self._id(ino)].synced = file.read()

    def _msync_done(self, ino: int) -> None:
        listing = self._listing()  # first: it numbers the files created since the last one
        fid = self._ids.get(ino)
        for name, listed in listing.items():
            if listed == fid:  # the mapping covers the whole file: its content is synced
                self._synced(ino, self.dir / name)

    def _rename(self, kind: str, src: object, dst: object, *args: object, **kwargs: object) -> None:
        ours = self._ours(dst)
        if self.dead or ours is None:
            return _real[kind](src, dst, *args, **kwargs)
        self._event(kind)
        self._losing_name(ours)
        _real[kind](src, dst, *args, **kwargs)
        self._listings.append(self._listing())
        return None

    def _unlink(self, kind: str, path: object, *args: object, **kwargs: object) -> None:
        ours = self._ours(path)
        if self.dead or ours is None:
            return _real[kind](path, *args, **kwargs)
        self._event(kind)
        self._losing_name(ours)
        _real[kind](path, *args, **kwargs)
        self._listings.append(self._listing())
        return None

    @contextlib.contextmanager
    def installed(self) -> Iterator[Disk]:
        """Intercept the calls while the block runs; a PowerCut raised inside ends the block quietly."""
        disk = self

        class TrackedMmap(_real["mmap"]):  # type: ignore[misc, valid-type]
            def __new__(cls, fileno: int, length: int, *args: object, **kwargs: object) -> TrackedMmap:
                obj = super().__new__(cls, fileno, length, *args, **kwargs)
                obj._ino = os.fstat(fileno).st_ino
                disk._maps.add(obj)
                return obj

            def flush(self, *args: object) -> None:
                disk._event("msync")
                super().flush(*args)
                if not disk.dead:
                    disk._msync_done(self._ino)

        patches = {
            (os, "fsync"): self._fsync,
            (os, "replace"): lambda s, d, *a, **k: self._rename("replace", s, d, *a, **k),
            (os, "rename"): lambda s, d, *a, **k: self._rename("rename", s, d, *a, **k),
            (os, "unlink"): lambda p, *a, **k: self._unlink("unlink", p, *a, **k),
            (os, "remove"): lambda p, *a, **k: self._unlink("remove", p, *a, **k),
            (mmap, "mmap"): TrackedMmap,
        }
        saved = {key: getattr(*key) for key in patches}
        self._fds_before = set(os.listdir("/proc/self/fd"))
        for (module, name), value in patches.items():
            setattr(module, name, value)
        try:
            yield self
        except PowerCut:
            pass
        finally:
            for (module, name), value in saved.items():
                setattr(module, name, value)
            self.dead = True

    def release(self) -> None:
        """Close what the cut left open: the maps, then the descriptors on files in the directory.

        A cut abandons the code under test mid-call, so its files stay open, as they would in
        a dead process until the kernel cleaned up. Maps go first: each holds a descriptor of
        its own that it closes when it goes.
        """
        for mapping in list(self._maps):
            with contextlib.suppress(Exception):
                mapping.close()
        root = str(self.dir)
        for fd in set(os.listdir("/proc/self/fd")) - self._fds_before:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(root + os.sep):
                with contextlib.suppress(OSError):
                    os.close(int(fd))


def _survivor(synced: bytes, latest: bytes, rng: random.Random) -> bytes:
    """What a file holds after the cut: its synced content, its latest, or a torn mix of the two."""
    if synced == latest:
        return latest
    mode = rng.randrange(3)
    if mode == 0:
        return synced
    if mode == 1:
        return latest
    # The length (metadata, journaled apart from the data) of either, or one in between: some of
    # the appends since the sync made it.
    shorter, longer = sorted((len(synced), len(latest)))
    length = rng.choice((shorter, longer, rng.randint(shorter, longer)))
    out = bytearray()
    for start in range(0, length, BLOCK):
        source = synced if rng.random() < 0.5 else latest
        block = source[start : min(start + BLOCK, length)]
        out += block + bytes(min(BLOCK, length - start) - len(block))  # past its end: never written, zeros
    return bytes(out)
