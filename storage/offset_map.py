"""What the cleaner's offset map and its compiled twin share (Kafka's ``OffsetMap``): the
default size, the key digest and the error of a full map. ``SkimpyOffsetMap`` itself is in
:mod:`storage.cleaner`, its compiled twin in ``storage/_compiled/cleaner.pyx``; both import
these from here, so neither imports the other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

DEFAULT_OFFSET_MAP_ENTRIES = 1_000_000  # about 150 MB of Python objects at most

HashFn = Callable[[bytes], bytes]
CheckFn = Callable[[bytes], int]


def md5_digest(key: bytes) -> bytes:
    """The map's key digest: MD5, as Kafka's SkimpyOffsetMap (16 bytes; hashlib's is OpenSSL's,
    which the compiled twin calls directly)."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMapFullError(Exception):
    """The offset map has no room for another key."""


__all__ = ["DEFAULT_OFFSET_MAP_ENTRIES", "CheckFn", "HashFn", "OffsetMapFullError", "md5_digest"]
