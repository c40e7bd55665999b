"""The package's shape, checked from the source: layers import downward only, no module
imports a module that imports it back (directly or through others), no package imports a
package that imports it back, importing a light storage module loads nothing heavy, no
source module grows past 1,000 lines, and nothing in ``actors/`` reads the clock except
``actors/clock.py``.

Imports are read with ``ast``, so deferred imports inside functions and ``TYPE_CHECKING``
blocks count too: a circle held together by a deferred import is still a circle.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rayqueue", "actors", "storage")
SOURCE_DIRS = (*PACKAGES, "scripts")
MAX_LINES = 1_000
# Modules allowed over MAX_LINES until they are split (empty: none). Empty it as they are
# split (the test fails for a listed module that is no longer over, so the list stays true).
OVERSIZED: set[str] = set()
# The one module of actors/ that reads the clock; the rest take a Clock (or use its SYSTEM).
CLOCK_MODULE = "actors/clock.py"
# Modules still reading the clock directly until they move onto actors/clock.py (empty:
# none). A path here covers the module and, once it is a package,
# everything under it; the test fails for a listed path that reads no clock any more.
CLOCK_READERS_PENDING: set[str] = set()
# Packages whose state machines are plain classes on an injected clock (actors/clock.py): only
# their ``actor`` module (the Ray shell) may import Ray or asyncio, and none reads the clock.
STATE_MACHINE_PACKAGES = ("actors/controller", "actors/group_coordinator", "actors/transaction_coordinator")
SHELL_MODULE = "actor.py"
# Modules that read the time: reading it is the clock's job (Kafka's Time / MockTime).
CLOCK_MODULES = ("time", "datetime")
# The one module that launches Ray actors and looks them up (actors.launch), and what may
# still do it elsewhere, with the reason.
LAUNCH_MODULE = "actors/launch.py"
LAUNCH_ALLOWED: dict[str, str] = {}
# A package may import only itself and the packages after it.
LAYERS = {"rayqueue": {"rayqueue", "actors", "storage"}, "actors": {"actors", "storage"}, "storage": {"storage"}}
# Tiers whose own top-level modules lie below their packages: ``actors/*.py`` (protocol, types,
# config, launch, ...) is what actors/broker, actors/controller, actors/gateway and the
# coordinators share, so none of those modules imports one of the packages. (rayqueue's
# top-level modules include what sits above its client packages, ``cluster`` and ``data``.)
BASE_BELOW_PACKAGES = ("actors",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` is or lies in (``a.b.C`` -> ``a.b``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports. ``from pkg import sub`` imports ``pkg.sub``
    when it is a module; otherwise the name comes from ``pkg`` itself."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != module:
                out.add(resolved)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_layers_import_downward_only() -> None:
    upward = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if target.split(".")[0] not in LAYERS[module.split(".")[0]]
    ]
    assert upward == []


def test_storage_does_not_import_ray() -> None:
    found = []
    for path in sorted((ROOT / "storage").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [f"{path.name}: {name}" for name in names if name == "ray" or name.startswith("ray.")]
    assert found == []


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    assert _cycles(_graph()) == []


def _package_of(module: str, modules: dict[str, Path]) -> str | None:
    """The tier's package a module belongs to (``actors.gateway.handlers.fetch`` ->
    ``actors.gateway``: a package's own subpackages are part of it); None for a tier's own
    top-level modules (``actors.protocol``) and the tier itself."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    if len(parts) == 2 and modules[module].name != "__init__.py":
        return None
    return ".".join(parts[:2])


def _package_graph(graph: dict[str, set[str]], modules: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    """Package -> the packages it imports -> the module imports that make the edge."""
    out: dict[str, dict[str, list[str]]] = {}
    for module, targets in graph.items():
        source = _package_of(module, modules)
        if source is None:
            continue
        for target in targets:
            package = _package_of(target, modules)
            if package is not None and package != source:
                out.setdefault(source, {}).setdefault(package, []).append(f"{module} -> {target}")
    return out


def _package_cycles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The circles between packages, each with the imports that close it."""
    cycles = _cycles({source: set(targets) for source, targets in edges.items()})
    return [
        sorted(
            why
            for source in cycle
            for target, imports in edges.get(source, {}).items()
            if target in cycle
            for why in imports
        )
        for cycle in cycles
    ]


def test_no_package_imports_a_package_that_imports_it_back() -> None:
    """Between the packages of a tier (actors/broker, actors/controller, actors/gateway, ...),
    imports go one way: ``actors/controller`` may use ``actors/broker`` but then nothing in
    ``actors/broker`` uses ``actors/controller``, however indirectly."""
    modules = _modules()
    assert _package_cycles(_package_graph(_graph(), modules)) == []


def test_the_base_modules_of_actors_import_no_package_of_it() -> None:
    """``actors/config.py`` and the other shared modules sit below the packages that use them:
    one of them importing a package would close a circle through every package using it."""
    modules = _modules()
    upward = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if module.split(".")[0] in BASE_BELOW_PACKAGES and _package_of(module, modules) is None
        for target in targets
        if target.split(".")[0] == module.split(".")[0] and _package_of(target, modules) is not None
    ]
    assert upward == []


@pytest.mark.parametrize(
    "graph, packages, expected",
    [
        # a.x uses b.y, b.y uses a base module of the tier: no circle between packages.
        ({"t.a.x": {"t.b.y"}, "t.b.y": {"t.base"}, "t.base": set()}, ["t.a", "t.b"], []),
        # a.x -> b.y -> a.z: a circle between packages a and b, though no module circle.
        (
            {"t.a.x": {"t.b.y"}, "t.b.y": {"t.a.z"}, "t.a.z": set()},
            ["t.a", "t.b"],
            [["t.a.x -> t.b.y", "t.b.y -> t.a.z"]],
        ),
        # A subpackage is part of its package: a.sub.m <-> a.x is no circle between packages.
        ({"t.a.sub.m": {"t.a.x"}, "t.a.x": {"t.a.sub.m"}}, ["t.a", "t.a.sub"], []),
    ],
)
def test_the_package_cycle_finder_finds_circles(
    graph: dict[str, set[str]], packages: list[str], expected: list[list[str]]
) -> None:
    modules = {m: Path(f"{m.replace('.', '/')}.py") for m in graph}
    modules |= {p: Path(f"{p.replace('.', '/')}/__init__.py") for p in packages}
    assert _package_cycles(_package_graph(graph, modules)) == expected


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_finds_circles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(graph) == expected


def _line_counts() -> dict[str, int]:
    return {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for directory in SOURCE_DIRS
        for pattern in ("*.py", "*.pyx")
        for path in sorted((ROOT / directory).rglob(pattern))
    }


def test_no_source_module_is_over_1000_lines() -> None:
    over = {path: lines for path, lines in _line_counts().items() if lines > MAX_LINES}
    assert {path: lines for path, lines in over.items() if path not in OVERSIZED} == {}
    assert sorted(OVERSIZED - set(over)) == [], "split already: take it off OVERSIZED"


def _state_modules() -> list[Path]:
    return [
        path
        for package in STATE_MACHINE_PACKAGES
        for path in sorted((ROOT / package).glob("*.py"))
        if path.name != SHELL_MODULE
    ]


def _imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
    return names


def test_the_state_machine_packages_exist() -> None:
    """The lists below check something: every package is there, with a shell and state."""
    for package in STATE_MACHINE_PACKAGES:
        assert (ROOT / package / SHELL_MODULE).is_file(), package
    assert len(_state_modules()) > len(STATE_MACHINE_PACKAGES)


# The broker's host code is plain (Kafka's ReplicaManager and what it holds): only the Ray
# shell, the host actors' lifecycle, a driver's view of the listener hosts and the broker
# probe import Ray; the rest reaches other hosts through links.
BROKER_PACKAGE = "actors/broker"
BROKER_RAY_MODULES = ("actor.py", "lifecycle.py", "listening.py", "probe.py")


def test_the_broker_host_code_imports_no_ray() -> None:
    modules = [p for p in sorted((ROOT / BROKER_PACKAGE).glob("*.py")) if p.name not in BROKER_RAY_MODULES]
    assert len(modules) > 5, "the broker package is where it should be"
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in modules
        for name in _imported_names(path)
        if name.split(".")[0] == "ray"
    ]
    assert found == []


def test_state_modules_import_no_ray_and_no_asyncio() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _state_modules()
        for name in _imported_names(path)
        if name.split(".")[0] in ("ray", "asyncio")
    ]
    assert found == []


def test_state_modules_import_without_ray() -> None:
    """Every state module (and each package itself) imports with Ray unavailable, so nothing
    they import, however indirectly, loads Ray."""
    names = [_module_name(path) for path in _state_modules()]
    names += [package.replace("/", ".") for package in STATE_MACHINE_PACKAGES]
    code = (
        "import importlib, json, sys; sys.modules['ray'] = None; "
        f"[importlib.import_module(n) for n in {names!r}]; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'ray')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["ray"]  # only the blocked placeholder


def _clock_reads(path: Path) -> list[str]:
    """Imports of the time modules and event-loop clock reads (``loop.time()``) in ``path``."""
    found = [f"imports {name}" for name in _imported_names(path) if name.split(".")[0] in CLOCK_MODULES]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "time":
            if "loop" in ast.unparse(node.func.value):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_direct_clock_read_in_the_state_machine_packages() -> None:
    """The shells too read the injected clock, so that a test's ManualClock moves them all."""
    found = {
        str(path.relative_to(ROOT)): reads
        for package in STATE_MACHINE_PACKAGES
        for path in sorted((ROOT / package).glob("*.py"))
        if (reads := _clock_reads(path))
    }
    assert found == {}


@pytest.mark.parametrize(
    "source, reads",
    [
        ("import time\nx = time.monotonic()\n", 1),
        ("from time import perf_counter\n", 1),
        ("import asyncio\nx = asyncio.get_running_loop().time()\n", 1),
        ("from actors.clock import SYSTEM\nx = SYSTEM.monotonic()\n", 0),
    ],
)
def test_the_clock_read_finder_finds_reads(tmp_path: Path, source: str, reads: int) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert len(_clock_reads(path)) == reads


def _launches(path: Path) -> list[str]:
    """Ray actor launches and lookups in ``path``: ``ray.get_actor(...)``, ``ray.remote(...)``,
    ``x.options(...).remote(...)`` (Ray's; Spark's ``reader.options(...)`` is not), and a class
    decorated ``@ray.remote``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            call = ast.unparse(node.func)
            inner = node.func.value
            ray_options = (
                node.func.attr == "remote"
                and isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and inner.func.attr == "options"
            )
            if call in ("ray.get_actor", "ray.remote") or ray_options:
                found.append(f"line {node.lineno}: {call}(...)")
        elif isinstance(node, ast.ClassDef):
            found += [
                f"line {node.lineno}: @ray.remote class" for d in node.decorator_list if ast.unparse(d) == "ray.remote"
            ]
    return found


def test_actors_are_launched_and_looked_up_in_one_module() -> None:
    found = {
        rel: reads
        for package in ("actors", "rayqueue")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (rel := str(path.relative_to(ROOT))) != LAUNCH_MODULE
        and not any(
            rel == allowed or rel.startswith(allowed + "/") or rel == allowed + ".py" for allowed in LAUNCH_ALLOWED
        )
        and (reads := _launches(path))
    }
    assert found == {}
    assert _launches(ROOT / LAUNCH_MODULE), "the launch module launches nothing: the check above checks nothing"


@pytest.mark.parametrize(
    "source, launches",
    [
        ("import ray\nh = ray.get_actor('x', namespace='n')\n", 1),
        ("import ray\nh = ray.remote(C).options(name='x').remote()\n", 2),
        ("import ray\n@ray.remote\nclass A:\n    pass\n", 1),
        ("import ray\n@ray.remote\ndef task():\n    pass\n", 0),  # a task, not an actor
        ("from actors import launch\nh = launch.find_actor('x', 'n')\n", 0),
    ],
)
def test_the_launch_finder_finds_launches(tmp_path: Path, source: str, launches: int) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert len(_launches(path)) == launches


def test_a_light_storage_module_loads_neither_pyarrow_nor_numpy() -> None:
    """``import storage.errors`` (and the package) loads no codec, no Arrow, no numpy."""
    code = (
        "import json, sys, storage.errors, storage.config, storage.batch_header; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'numpy', 'storage'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(done.stdout)
    assert not [m for m in loaded if m.split(".")[0] in ("pyarrow", "numpy")], loaded
    assert "storage.log" not in loaded and "storage.records.builder" not in loaded, loaded


def test_the_log_loads_no_pyarrow() -> None:
    """The broker's log reads and validates batches with numpy at most; Arrow is the columns'."""
    code = "import sys, storage.log; print('pyarrow' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"


_CLOCK_CALLS = {
    ("time", name) for name in ("time", "monotonic", "perf_counter", "time_ns", "monotonic_ns", "perf_counter_ns")
} | {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today")}


def _direct_clock_reads(source: str) -> list[str]:
    """The direct clock reads in ``source``: ``time.monotonic()`` and its kin (however
    ``time`` was imported), ``datetime.now()``, and clock functions imported by name."""
    tree = ast.parse(source)
    aliases = {  # import time as clock: clock.monotonic() is time.monotonic()
        alias.asname: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.asname and alias.name in ("time", "datetime")
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            found += [
                f"line {node.lineno}: from {node.module} import {alias.name}"
                for alias in node.names
                if (node.module, alias.name) in _CLOCK_CALLS
            ]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name | ast.Attribute):
            owner = aliases.get(node.value.id, node.value.id) if isinstance(node.value, ast.Name) else node.value.attr
            if (owner, node.attr) in _CLOCK_CALLS:
                found.append(f"line {node.lineno}: {owner}.{node.attr}")
    return found


def _pending_clock_reader(relative: str) -> str | None:
    return next(
        (p for p in CLOCK_READERS_PENDING if relative == f"{p}.py" or relative.startswith(f"{p}/")),
        None,
    )


def test_nothing_in_actors_reads_the_clock_but_the_clock_module() -> None:
    """State machines take an injected Clock (tested on ManualClock); actors pass SYSTEM."""
    direct: dict[str, list[str]] = {}
    pending_clean = set(CLOCK_READERS_PENDING)
    for path in sorted((ROOT / "actors").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        if relative == CLOCK_MODULE:
            continue
        reads = _direct_clock_reads(path.read_text())
        pending = _pending_clock_reader(relative)
        if pending is not None:
            if reads:
                pending_clean.discard(pending)
            continue
        if reads:
            direct[relative] = reads
    assert direct == {}
    assert sorted(pending_clean) == [], "no direct clock read left: take it off CLOCK_READERS_PENDING"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import time\nt = time.monotonic()", ["line 2: time.monotonic"]),
        ("import time as t\nx = t.sleep(0)", []),
        ("import time as t\nx = t.perf_counter()", ["line 2: time.perf_counter"]),
        ("from time import perf_counter", ["line 1: from time import perf_counter"]),
        ("import datetime\nd = datetime.datetime.now()", ["line 2: datetime.now"]),
        ("from datetime import datetime\nd = datetime.utcnow()", ["line 2: datetime.utcnow"]),
        ("import time\nf = time.time_ns", ["line 2: time.time_ns"]),
        ("from actors.clock import SYSTEM\nt = SYSTEM.monotonic()", []),
        ("import datetime\nz = datetime.timedelta(0)", []),
    ],
)
def test_the_direct_clock_read_finder_finds_reads(source: str, expected: list[str]) -> None:
    assert _direct_clock_reads(source) == expected
