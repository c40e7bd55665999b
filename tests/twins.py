"""Running tests over both twins of the hot paths: the pure-Python reference and the compiled one.

A pure module rebinds its hot names to the compiled twin at import (``storage.extensions``),
and other modules import those names. :func:`use` points every loaded module of the project
(and of the tests) at one twin or the other, so the same test runs against both.
"""

from __future__ import annotations

import sys

# Every module that has a twin, imported now so that its twins are registered before a
# fixture swaps them (a module imported later would bind the process's default twin).
import storage.cleaner  # noqa: F401
import storage.log  # noqa: F401
import storage.record_batch  # noqa: F401
import storage.segment  # noqa: F401
from storage import extensions

PROJECT_PACKAGES = ("storage", "actors", "rayqueue", "tests", "scripts")
KINDS = ("pure", "compiled")


def compiled_available() -> bool:
    """Whether every pure module found its compiled twin at import."""
    return bool(extensions.ACTIVE) and all(kind == "compiled" for kind in extensions.ACTIVE.values())


def use(kind: str) -> int:
    """Bind every project module's twinned names to the ``kind`` twin; return how many were rebound."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    wanted = {}
    for pure, compiled in extensions.TWINS.values():
        target = pure if kind == "pure" else compiled
        wanted[id(pure)] = target
        wanted[id(compiled)] = target
    changed = 0
    for (module_name, name), (pure, compiled) in extensions.TWINS.items():
        owner_name, _, attribute = name.rpartition(".")
        if owner_name:  # a method: set on its class, which every importer shares
            owner = getattr(sys.modules[module_name], owner_name)
            target = pure if kind == "pure" else compiled
            if owner.__dict__.get(attribute) is not target:
                setattr(owner, attribute, target)
                changed += 1
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".", 1)[0] not in PROJECT_PACKAGES:
            continue
        namespace = getattr(module, "__dict__", None)
        if namespace is None:
            continue
        for attr, value in list(namespace.items()):
            target = wanted.get(id(value))
            if target is not None and target is not value:
                namespace[attr] = target
                changed += 1
    return changed


def default_kind() -> str:
    """The twin the process picked at import."""
    return "compiled" if compiled_available() else "pure"
