"""Running tests over both twins of the hot paths: the pure-Python reference and the compiled one.

A module with a twin picks it once at import (``storage.extensions.pick``).
:func:`use` (``storage.extensions.using``) sets every twinned name to one twin in the module
that picked it, for the duration of a test; the ``twin`` fixture (``tests/conftest.py``)
also points the requesting test module's own imports of a twinned class (the builder) at it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

# Every module that has a twin, imported now so that its twins are registered before a
# fixture switches them.
import storage.cleaner  # noqa: F401
import storage.log_validator  # noqa: F401
import storage.records.builder  # noqa: F401
import storage.records.columns  # noqa: F401
import storage.records.reader  # noqa: F401
from storage import extensions

KINDS = ("pure", "compiled")


def compiled_available() -> bool:
    """Whether every pure module found its compiled twin at import."""
    return extensions.compiled_available()


def default_kind() -> str:
    """The twin the process picked at import."""
    return "compiled" if compiled_available() else "pure"


def pair(module: str, name: str) -> tuple[object, object]:
    """(pure, compiled) of ``module``'s twinned ``name`` (the compiled one must be built)."""
    return extensions.twin_of("pure", module, name), extensions.twin_of("compiled", module, name)


@contextlib.contextmanager
def use(kind: str, *test_modules: ModuleType) -> Iterator[None]:
    """Run the ``kind`` twins for a while: every twinned name in its own module, and the
    twinned names ``test_modules`` imported (``from ... import RecordBatchBuilder``)."""
    saved = []
    try:
        for (module, name), (pure, compiled) in extensions.PAIRS.items():
            for test_module in test_modules:
                current = getattr(test_module, name, None)
                if current is not None and (current is pure or current is compiled):
                    saved.append((test_module, name, current))
                    setattr(test_module, name, extensions.twin_of(kind, module, name))
        with extensions.using(kind):
            yield
    finally:
        for test_module, name, value in reversed(saved):
            setattr(test_module, name, value)
