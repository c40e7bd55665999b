"""No test binds a default port of Kafka, rayqueue or Ray, checked from the sources.

A Kafka broker or a ``rayqueue start`` may run beside the suite (the benchmarks run one), so a
test that binds 9092 or 8080, or runs ``rayqueue start`` on its defaults, fails there with
"address already in use". Two checks, read with ``ast`` from tests/ and scripts/:

- no default port (``tests/ports.py``) appears as a literal, as a number or inside a string
  (``"PLAINTEXT://127.0.0.1:9092"``, ``"--port=8088"``), except in the files listed in
  ``PARSE_ONLY`` with the reason they bind nothing;
- every command line a test runs names free ports for what would otherwise take a default:
  ``rayqueue start`` its ``--listeners`` and (with its own Ray) ``--metrics-export-port``,
  ``--console`` its ``--console-port``, ``rayqueue console`` its ``--port``, ``ray start``
  its dashboard agent port (and, for a head, its GCS and client-server ports), and every
  ``ConsoleServer`` a port.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests import ports

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()
# Files that name default ports only to parse or plan them, never to bind one.
PARSE_ONLY = {
    "tests/gateway/test_codec.py": "parses listener strings and plans brokers' ports; binds nothing",
    "tests/ports.py": "defines the default ports (tests hold them, never bind them to serve)",
}


def _sources() -> list[Path]:
    files = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "scripts").rglob("*.py"))
    return [p for p in files if p != HERE and str(p.relative_to(ROOT)) not in PARSE_ONLY]


def _port_pattern(numbers: set[int]) -> re.Pattern[str]:
    alternatives = "|".join(str(n) for n in sorted(numbers))
    # A port in text: after ':' or '=' (host:port, --port=N) or the whole string, never part
    # of a longer number.
    return re.compile(rf"(?:^|[:=])(?:{alternatives})(?![\d])")


def _names_a_port(name: str | None) -> bool:
    return name is not None and "port" in name.lower()


def _port_numbers(tree: ast.AST, numbers: set[int]) -> list[ast.Constant]:
    """Default ports written as numbers where a port goes: a keyword or a variable, parameter
    or attribute named like a port, or next to a host in an address tuple. (A count such as
    10_001 partitions is left alone.)"""
    found = []
    for node in ast.walk(tree):
        candidates: list[ast.AST] = []
        if isinstance(node, ast.keyword) and _names_a_port(node.arg):
            candidates = [node.value]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id if isinstance(t, ast.Name) else getattr(t, "attr", None) for t in targets]
            # An annotation alone (``port: int`` in a dataclass) has no value to check.
            if node.value is not None and any(_names_a_port(n) for n in names):
                candidates = [node.value]
        elif isinstance(node, ast.arguments):
            params = node.posonlyargs + node.args
            pairs = list(zip(params[len(params) - len(node.defaults) :], node.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None]
            candidates = [d for a, d in pairs if _names_a_port(a.arg)]
        elif isinstance(node, ast.Tuple) and any(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
        ):
            candidates = list(node.elts)
        for candidate in candidates:
            for inner in ast.walk(candidate):
                value = getattr(inner, "value", None)
                if isinstance(inner, ast.Constant) and isinstance(value, int) and not isinstance(value, bool):
                    if value in numbers:
                        found.append(inner)
    return found


def literal_ports(source: str, numbers: set[int]) -> list[tuple[int, str]]:
    """(line, text) of every default port written as a literal in ``source``: as a number
    where a port goes, or inside a string (``host:9092``, ``--port=8088``, ``"8080"``)."""
    pattern = _port_pattern(numbers)
    tree = ast.parse(source)
    found = [(node.lineno, repr(node.value)) for node in _port_numbers(tree, numbers)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.search(node.value.strip()):
            found.append((node.lineno, repr(node.value)))
    return sorted(set(found))


def _tokens(node: ast.AST) -> list[str]:
    """A command line's words as far as the source spells them: string constants as they
    are, f-strings with ``{}`` for what they fill in, names as ``<name>``."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [t for element in node.elts for t in _tokens(element)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _tokens(node.left) + _tokens(node.right)
    if isinstance(node, ast.Starred):
        return _tokens(node.value)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)]
    if isinstance(node, ast.Name):
        return [f"<{node.id}>"]
    if isinstance(node, ast.Attribute):
        return [f"<{node.attr}>"]
    return ["<?>"]


def _has(tokens: list[str], option: str) -> bool:
    return any(t == option or t.startswith(option + "=") for t in tokens)


def _sets_listeners(tokens: list[str]) -> bool:
    return _has(tokens, "--listeners") or any(t.startswith("listeners=") for t in tokens)


# What names the rayqueue command in a command line: the module, the test helpers' constant,
# or typer's app handed to CliRunner.invoke.
RAYQUEUE_MARKERS = ("rayqueue.cli", "<RAYQUEUE>", "<app>")
RAY_MARKERS = ("<RAY>", "ray")


def command_problems(source: str) -> list[tuple[int, str]]:
    """(line, problem) for each command line or ConsoleServer in ``source`` that would bind a default port."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func == "ConsoleServer":
            if len(node.args) < 3 and not any(k.arg == "port" for k in node.keywords):
                problems.append((node.lineno, "ConsoleServer without a port binds the console's default"))
            continue
        tokens = [t for arg in node.args for t in _tokens(arg)]
        # A CLI helper called with the words alone: rq("start", ...).
        starts = [0] if func == "rq" else [i + 1 for i, t in enumerate(tokens) if t in RAYQUEUE_MARKERS]
        for i in starts:
            command, rest = tokens[i : i + 1], tokens[i + 1 :]
            if command == ["start"]:
                if not _sets_listeners(rest):
                    problems.append((node.lineno, "`rayqueue start` without --listeners takes 9092 and up"))
                if not _has(rest, "--address") and not _has(rest, "--metrics-export-port"):
                    problems.append((node.lineno, "`rayqueue start` without --metrics-export-port takes 8080"))
                if not _has(rest, "--schema-registry-listeners") and not any(
                    t.startswith("schema.registry.listeners=") for t in rest
                ):
                    problems.append((node.lineno, "`rayqueue start` without --schema-registry-listeners takes 8081"))
                if "--console" in rest and not _has(rest, "--console-port"):
                    problems.append((node.lineno, "`rayqueue start --console` without --console-port takes 8088"))
            elif command == ["console"] and not _has(rest, "--port"):
                problems.append((node.lineno, "`rayqueue console` without --port takes 8088"))
        for i in (i + 1 for i, t in enumerate(tokens) if t in RAY_MARKERS):
            if tokens[i : i + 1] != ["start"]:
                continue
            rest = tokens[i + 1 :]
            needed = ["--dashboard-agent-listen-port"]
            if "--head" in rest:
                needed += ["--port", "--ray-client-server-port"]
                if not _has(rest, "--include-dashboard") and not _has(rest, "--dashboard-port"):
                    needed.append("--dashboard-port")
            problems += [
                (node.lineno, f"`ray start` without {o} takes Ray's default") for o in needed if not _has(rest, o)
            ]
    return problems


def test_no_test_names_a_default_port():
    numbers = set(ports.default_ports())
    found = {
        f"{path.relative_to(ROOT)}:{line}": text
        for path in _sources()
        for line, text in literal_ports(path.read_text(), numbers)
    }
    assert not found, f"default ports written into tests or scripts (take free ports, or see PARSE_ONLY): {found}"


def test_every_command_line_takes_free_ports():
    found = {
        f"{path.relative_to(ROOT)}:{line}": problem
        for path in _sources()
        for line, problem in command_problems(path.read_text())
    }
    assert not found, found


def test_the_parse_only_files_exist():
    # An entry for a file that is gone would let a new file of that name through unchecked.
    assert all((ROOT / name).exists() for name in PARSE_ONLY)


@pytest.mark.parametrize(
    "source",
    [
        'launch(listeners="PLAINTEXT://127.0.0.1:9092")',
        "ray.init(_metrics_export_port=8080)",
        'run(["--port", "8088"])',
        'f(f"--port=8265")',
        "sock.bind(('127.0.0.1', 9093))",
        "server = ConsoleServer(cluster, host, port=8088)",
        "METRICS_PORT = 8080",
        "def serve(port: int = 6379): ...",
        "self.console_port = 8088",
        "console_port: int = 8088",
    ],
)
def test_the_literal_check_finds_a_default_port(source):
    assert literal_ports(source, set(ports.default_ports()))


def test_the_literal_check_leaves_other_numbers_alone():
    source = (
        'n = 3000\nm = "offset 19092"\nurl = "http://127.0.0.1:0"\nsize = 65536\nt = "10.0.0.1"\n'
        "admin.create_topic(name, 10_001, 1)\nrecords = [8080] * 3\nport: int\n"
    )
    assert literal_ports(source, set(ports.default_ports())) == []


@pytest.mark.parametrize(
    "source, problem",
    [
        ('Background([*RAYQUEUE, "start", "--config", "x.toml"], env, log)', "--listeners"),
        ('run([*RAYQUEUE, "start", "--listeners", "PLAINTEXT://127.0.0.1:0"], env)', "--metrics-export-port"),
        ('rq("start", "--console", "--listeners", "x", "--metrics-export-port", "0")', "--console-port"),
        ('rq("start", "--listeners", "x", "--metrics-export-port", "0")', "--schema-registry-listeners"),
        ('run([sys.executable, "-m", "rayqueue.cli", "console", "--name", "x"], env)', "--port"),
        ('runner.invoke(app, ["console"])', "--port"),
        ('Background([RAY, "start", "--head", "--block"], env, log)', "--port"),
        ('Background([RAY, "start", f"--address={a}"], env, log)', "--dashboard-agent-listen-port"),
        ("ConsoleServer(cluster)", "ConsoleServer"),
    ],
)
def test_the_command_check_finds_a_default(source, problem):
    assert any(problem in p for _, p in command_problems(source)), command_problems(source)


def test_the_command_check_passes_free_ports():
    source = """
Background([*RAYQUEUE, "start", "--listeners", "PLAINTEXT://127.0.0.1:0", "--metrics-export-port", "0",
            "--schema-registry-listeners", "http://127.0.0.1:0"], e, l)
run([*RAYQUEUE, "start", "--address", a, "-o", "listeners=PLAINTEXT://127.0.0.1:0", "-o",
     "schema.registry.listeners="], e)
run([*RAYQUEUE, "console", "--port", "0"], e)
rq("brokers", "start", "1")
Background([RAY, "start", "--head", f"--port={p}", f"--ray-client-server-port={q}",
            f"--dashboard-agent-listen-port={r}", "--include-dashboard=false"], e, l)
ConsoleServer(cluster, "127.0.0.1", 0)
"""
    assert command_problems(source) == []
