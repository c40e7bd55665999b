"""Which twin of a hot path runs: the compiled extension or the pure-Python reference.

The record codec, the broker's append bookkeeping, the cleaner's offset map and the
producer's send path each exist twice, as aiokafka's ``record`` package does it: a
pure-Python module that is the reference (readable, always there) and a Cython twin named
after it (``storage/_compiled/record_batch.pyx`` for ``storage/record_batch.py``, ...),
built by ``pip install -e .`` (``make setup``). A pure module ends by asking :func:`load`
for its twin and, when it is there, rebinds its hot names to the compiled ones, so callers
import the same names either way.

``RAYQUEUE_NO_EXTENSIONS=1`` forces the pure-Python twins (as ``AIOKAFKA_NO_EXTENSIONS``
does). When the extensions are not built (no compiler when installing), or are older than
their sources, the pure twins run and one warning says so.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from pathlib import Path
from types import ModuleType

ENV_SWITCH = "RAYQUEUE_NO_EXTENSIONS"
NO_EXTENSIONS = os.environ.get(ENV_SWITCH, "").strip().lower() not in ("", "0", "false", "no")

# module name of each pure module -> "compiled" or "pure", as picked at its import.
ACTIVE: dict[str, str] = {}
# (pure module name, attribute) -> (pure object, compiled object), for every rebound name.
TWINS: dict[tuple[str, str], tuple[object, object]] = {}
_warned = False


class ExtensionsWarning(RuntimeWarning):
    """The compiled extensions are missing or stale: the pure-Python twins run (slower)."""


def _warn_once(message: str) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(
        f"rayqueue: {message}; running the pure-Python code instead, which is several times slower. "
        f"Build the extensions with `make setup` (pip install -e .; needs gcc and the Python headers), "
        f"or set {ENV_SWITCH}=1 to choose the pure-Python code and silence this warning.",
        ExtensionsWarning,
        stacklevel=3,
    )


def _stale(module: ModuleType) -> str | None:
    """The source of ``module`` when it is newer than the built extension (a checkout moved on)."""
    built = getattr(module, "__file__", None)
    if not built:
        return None
    source = Path(built).with_name(module.__name__.rsplit(".", 1)[-1] + ".pyx")
    try:
        return str(source) if source.stat().st_mtime > Path(built).stat().st_mtime else None
    except OSError:  # installed without its sources (a wheel): nothing to compare
        return None


def load(pure_module: str, compiled_module: str) -> ModuleType | None:
    """The compiled twin ``compiled_module`` of ``pure_module``, or None to run the pure one.

    None when ``RAYQUEUE_NO_EXTENSIONS`` is set (silently), or when the twin is not built or
    is older than its ``.pyx`` (with one warning per process).
    """
    if NO_EXTENSIONS:
        ACTIVE[pure_module] = "pure"
        return None
    try:
        module = importlib.import_module(compiled_module)
    except ImportError as exc:
        found = importlib.util.find_spec(compiled_module.rsplit(".", 1)[0]) is not None
        ACTIVE[pure_module] = "pure"
        _warn_once(f"the compiled extension {compiled_module} is not built ({exc})" if found else str(exc))
        return None
    source = _stale(module)
    if source is not None:
        ACTIVE[pure_module] = "pure"
        _warn_once(f"the compiled extension {compiled_module} is older than {source}")
        return None
    ACTIVE[pure_module] = "compiled"
    return module


def bind(namespace: dict[str, object], compiled: ModuleType | None, names: tuple[str, ...]) -> None:
    """Rebind ``names`` in a pure module's ``namespace`` to the compiled twin's, when there is one.

    A name may be ``Class.attribute`` (a method whose twin is a compiled function). A twin
    that needs some of the pure module's own objects lists them in its ``PURE_NAMES``; they
    are handed to it here, so that it never imports its pure module back. The pure objects
    stay recorded in :data:`TWINS` (the tests run both twins through it).
    """
    module = str(namespace["__name__"])
    if compiled is not None:
        for name in getattr(compiled, "PURE_NAMES", ()):
            setattr(compiled, name, namespace[name])
    for name in names:
        owner_name, _, attribute = name.rpartition(".")
        owner = namespace[owner_name] if owner_name else None
        pure = getattr(owner, attribute) if owner is not None else namespace[name]
        twin = pure if compiled is None else getattr(compiled, name.replace(".", "_"))
        TWINS[(module, name)] = (pure, twin)
        if owner is not None:
            setattr(owner, attribute, twin)
        else:
            namespace[name] = twin


def compiled_available() -> bool:
    """Whether every pure module imported so far found its compiled twin."""
    return bool(ACTIVE) and all(kind == "compiled" for kind in ACTIVE.values())


def use(kind: str, packages: tuple[str, ...] = ("storage", "actors", "rayqueue", "tests", "scripts")) -> int:
    """Switch this process to the ``kind`` ("pure" or "compiled") twins of every module imported
    so far, for benchmarks and tests that run both in one process; return how many bindings
    changed.

    Methods are set on their class; other names in every loaded module of ``packages`` (and
    ``__main__``) that hold one twin are pointed at the other. Objects already made stay what
    they are (a builder made before the switch keeps its class).
    """
    if kind not in ("pure", "compiled"):
        raise ValueError(f"kind must be 'pure' or 'compiled', not {kind!r}")
    if kind == "compiled" and not compiled_available():
        raise RuntimeError(f"the compiled twins are not all in use: {ACTIVE}")
    import sys

    wanted: dict[int, object] = {}
    changed = 0
    for (module_name, name), (pure, compiled) in TWINS.items():
        target = pure if kind == "pure" else compiled
        wanted[id(pure)] = wanted[id(compiled)] = target
        owner_name, _, attribute = name.rpartition(".")
        if owner_name:  # a method: set on its class, which every importer shares
            owner = getattr(sys.modules[module_name], owner_name)
            if owner.__dict__.get(attribute) is not target:
                setattr(owner, attribute, target)
                changed += 1
    for name, module in list(sys.modules.items()):
        if module is None or (name.split(".", 1)[0] not in packages and name != "__main__"):
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


__all__ = [
    "ACTIVE",
    "ENV_SWITCH",
    "NO_EXTENSIONS",
    "TWINS",
    "ExtensionsWarning",
    "bind",
    "compiled_available",
    "load",
    "use",
]
