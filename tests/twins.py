"""Running tests over both twins of the hot paths: the pure-Python reference and the compiled one.

A pure module rebinds its hot names to the compiled twin at import (``storage.extensions``),
and other modules import those names. :func:`use` (``storage.extensions.use``) points every
loaded module of the project (and of the tests) at one twin or the other, so the same test
runs against both.
"""

from __future__ import annotations

# Every module that has a twin, imported now so that its twins are registered before a
# fixture swaps them (a module imported later would bind the process's default twin).
import storage.cleaner  # noqa: F401
import storage.log  # noqa: F401
import storage.record_batch  # noqa: F401
import storage.segment  # noqa: F401
from storage import extensions

KINDS = ("pure", "compiled")


def compiled_available() -> bool:
    """Whether every pure module found its compiled twin at import."""
    return extensions.compiled_available()


def use(kind: str) -> int:
    """Bind every project module's twinned names to the ``kind`` twin; return how many were rebound."""
    return extensions.use(kind)


def default_kind() -> str:
    """The twin the process picked at import."""
    return "compiled" if compiled_available() else "pure"
