"""Running tests over both twins of the hot paths: the pure-Python reference and the compiled one.

A module with a twin picks it once at import (``storage.extensions.pick``), and nothing
rebinds it in production. For a test, :func:`use` sets every twinned name to one twin in the
module that picked it (``storage.extensions.using``: the kernels, looked up there on every
call, follow) and, in the modules that imported the builder class by name to build batches
(:data:`BUILDER_IMPORTERS`, and the requesting test module), that name too; all is put back
after the test. The ``twin`` fixture (``tests/conftest.py``) runs a module's tests once per twin.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

# Every module that has a twin, imported now so that its twins are registered before a
# fixture switches them.
import actors.internal_topic
import rayqueue.producer.accumulator
import storage.cleaner
import storage.legacy
import storage.log_validator  # noqa: F401
import storage.records.builder  # noqa: F401
import storage.records.columns  # noqa: F401
import storage.records.reader  # noqa: F401
from storage import extensions

# The modules that build batches with the builder class they imported by name.
BUILDER_IMPORTERS: tuple[ModuleType, ...] = (
    actors.internal_topic,
    rayqueue.producer.accumulator,
    storage.cleaner,
    storage.legacy,
)

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
    twinned names that :data:`BUILDER_IMPORTERS` and ``test_modules`` imported."""
    saved = []
    try:
        for (module, name), (pure, compiled) in extensions.PAIRS.items():
            for test_module in (*BUILDER_IMPORTERS, *test_modules):
                current = getattr(test_module, name, None)
                if current is not None and (current is pure or current is compiled):
                    saved.append((test_module, name, current))
                    setattr(test_module, name, extensions.twin_of(kind, module, name))
        with extensions.using(kind):
            yield
    finally:
        for test_module, name, value in reversed(saved):
            setattr(test_module, name, value)
