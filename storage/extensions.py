"""Which twin of a hot path runs: the compiled extension or the pure-Python reference.

The record codec (the batch builder, and the per-record loops of the readers and of the
leader's record walk), the leader's request checks and the cleaner's offset map each exist
twice, as aiokafka's ``record`` package does it: a pure-Python implementation that is the
reference (readable, always there) and a Cython twin of it in the ``_compiled`` package
beside its module (``storage/records/_compiled/builder.pyx`` for
``storage/records/builder.py``, ...), built by ``pip install -e .`` (``make setup``). A twin
is a whole self-contained class (``RecordBatchBuilder``, ``SkimpyOffsetMap``) or a kernel
over a buffer (a function that walks every record of a batch); it never reaches into a
pure object's private attributes.

A module with a twin picks, once, at its import, which implementation each of its twinned
names is (:func:`load`, then :func:`pick`), as aiokafka's ``default_records`` picks its
``_crecords``; nothing is rebound afterwards. Tests and benchmarks that run both twins in one
process use :func:`using`, which sets each twinned name in its own module only, for a while.

``RAYQUEUE_NO_EXTENSIONS=1`` forces the pure-Python twins (as ``AIOKAFKA_NO_EXTENSIONS``
does). When the extensions are not built (no compiler when installing), or are older than
their sources, the pure twins run and one warning says so.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TypeVar

ENV_SWITCH = "RAYQUEUE_NO_EXTENSIONS"
NO_EXTENSIONS = os.environ.get(ENV_SWITCH, "").strip().lower() not in ("", "0", "false", "no")

# module name of each pure module -> "compiled" or "pure", as picked at its import.
ACTIVE: dict[str, str] = {}
# (module name, name) -> (pure object, compiled object or None), for every name a module picked.
PAIRS: dict[tuple[str, str], tuple[object, object | None]] = {}
_warned = False

T = TypeVar("T")


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


def pick(module: str, name: str, pure: T, compiled: ModuleType | None, compiled_name: str | None = None) -> T:
    """The implementation of ``module``'s twinned ``name`` this process runs, chosen once.

    ``compiled``'s ``compiled_name`` (default ``name``) when the compiled twin was loaded
    (:func:`load`), else ``pure``. Both are recorded in :data:`PAIRS` for :func:`using`.
    """
    twin = getattr(compiled, compiled_name or name) if compiled is not None else None
    PAIRS[(module, name)] = (pure, twin)
    return pure if twin is None else twin


def compiled_available() -> bool:
    """Whether every pure module imported so far found its compiled twin."""
    return bool(ACTIVE) and all(kind == "compiled" for kind in ACTIVE.values())


def twin_of(kind: str, module: str, name: str) -> object:
    """The ``kind`` ("pure" or "compiled") implementation of ``module``'s twinned ``name``."""
    pure, compiled = PAIRS[(module, name)]
    if kind == "pure":
        return pure
    if kind != "compiled":
        raise ValueError(f"kind must be 'pure' or 'compiled', not {kind!r}")
    if compiled is None:
        raise RuntimeError(f"the compiled twin of {module}.{name} is not in use: {ACTIVE}")
    return compiled


@contextlib.contextmanager
def using(kind: str) -> Iterator[None]:
    """Run the ``kind`` ("pure" or "compiled") twins for a while: for tests and benchmarks.

    Every twinned name is set to that twin in the module that picked it, and put back on
    exit. Only there: a module that imported a twinned class by name (``from
    storage.records.builder import RecordBatchBuilder``) keeps the one it imported; the
    kernels are looked up in their own module on every call, so they follow.
    """
    saved = []
    try:
        for (module, name), _ in PAIRS.items():
            namespace = sys.modules[module]
            saved.append((namespace, name, getattr(namespace, name)))
            setattr(namespace, name, twin_of(kind, module, name))
        yield
    finally:
        for namespace, name, value in reversed(saved):
            setattr(namespace, name, value)


__all__ = [
    "ACTIVE",
    "ENV_SWITCH",
    "NO_EXTENSIONS",
    "PAIRS",
    "ExtensionsWarning",
    "compiled_available",
    "load",
    "pick",
    "twin_of",
    "using",
]
