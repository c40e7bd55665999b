"""The documentation's examples run as written: README.md's tour and every runnable block of
docs/*.md, on a fresh cluster, in a network namespace of their own.

A block is runnable when an HTML comment right above its fence says so (invisible on GitHub
and on the MkDocs site)::

    <!-- runnable: GROUP [background ready="TEXT"] [session=NAME] [needs=kcat,spark-kafka-jars] -->

The blocks of one group run in document order, as a reader pastes them: a bash block with
bash in the group's working directory (a checkout's shape: ``.venv`` and ``configs/``), the
Python blocks in one Python session (each block continues the previous one's; a block with
``session=NAME`` runs in the session of that name, a new one at its first block), a
``background`` block as a terminal of its own that stays open (its ``ready`` text shown
first) until the group is done, then gets Ctrl-C.

The text names the ports a user meets (``rayqueue start`` on 9092, the console on 8088) while
a Kafka broker or another ``rayqueue start`` may run beside the suite: each group runs in a
network namespace of its own with only loopback (``unshare --net``), where those ports are
free and nothing outside reaches them, and in a mount namespace with a private ``/tmp/ray``,
so that "the Ray started on this machine" that ``rayqueue.connect()`` and the CLI find is the
group's own. That needs root (CI runs as root); elsewhere the test skips saying why, and under
CI it fails.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.rayqueue.processes import user_env

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKER = re.compile(
    r"<!-- runnable: (?P<group>[\w-]+)(?P<attrs>[^>]*?)\s*-->\s*\n```(?P<lang>\w+)[^\n]*\n(?P<code>.*?)\n```",
    re.S,
)
# A block's longest run (Spark's first session on a busy machine is the slow one).
BLOCK_TIMEOUT_S = 600
READY_TIMEOUT_S = 300
STOP_TIMEOUT_S = 120
SESSION_DONE = "@@rayqueue-snippet-done"
# The Python session a group's Python blocks run in: each block is one JSON line on stdin.
SESSION = f"""
import json, sys, traceback
namespace = {{"__name__": "__main__"}}
for line in sys.stdin:
    block = json.loads(line)
    try:
        exec(compile(block["code"], block["name"], "exec"), namespace)
        status = "ok"
    except BaseException:
        traceback.print_exc()
        status = "error"
    sys.stdout.flush()
    sys.stderr.flush()
    print("\\n{SESSION_DONE}", status, flush=True)
"""


@dataclass
class Block:
    """One runnable fenced block."""

    page: Path
    line: int
    group: str
    lang: str
    code: str
    background: bool = False
    ready: str | None = None
    session: str = "main"
    needs: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def parse_blocks(page: Path) -> list[Block]:
    """The runnable blocks of ``page``, in order."""
    text = page.read_text()
    blocks = []
    for match in MARKER.finditer(text):
        attrs = match["attrs"]
        ready = re.search(r'ready="([^"]*)"', attrs)
        needs = re.search(r"needs=([\w,-]+)", attrs)
        session = re.search(r"session=([\w-]+)", attrs)
        blocks.append(
            Block(
                page,
                text.count("\n", 0, match.start("code")) + 1,
                match["group"],
                match["lang"],
                match["code"],
                background=" background" in f" {attrs}",
                ready=ready[1] if ready else None,
                session=session[1] if session else "main",
                needs=needs[1].split(",") if needs else [],
            )
        )
    return blocks


def groups() -> list[tuple[str, list[Block]]]:
    """(``page:group``, its blocks) for every group of every page."""
    out: dict[str, list[Block]] = {}
    for page in PAGES:
        for block in parse_blocks(page):
            out.setdefault(f"{page.relative_to(REPO)}:{block.group}", []).append(block)
    return list(out.items())


def _spark_kafka_jars() -> bool:
    from rayqueue.spark import kafka_connector_jars

    try:
        kafka_connector_jars()
    except Exception:  # noqa: BLE001 - any reason the jars cannot be had: the block is skipped
        return False
    return True


def _spark_iceberg_jars() -> bool:
    from rayqueue.spark import iceberg_runtime_jars

    try:
        iceberg_runtime_jars()
    except Exception:  # noqa: BLE001 - any reason the runtime cannot be had: the block is skipped
        return False
    return True


NEEDS = {
    "kcat": lambda: shutil.which("kcat") is not None,
    "spark-kafka-jars": _spark_kafka_jars,
    "spark-iceberg-jars": _spark_iceberg_jars,
}


def _namespaces_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root for a network namespace of its own (unshare --net); CI runs as root"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux, iproute2)"
    return None


class Namespace:
    """A network namespace with only loopback up, a mount namespace with a private /tmp/ray
    and a PID namespace (so that Ray's search for "the Ray on this machine", which looks at
    /tmp/ray and at the running processes, finds the group's own), held by a sleeping
    process; commands enter it with nsenter."""

    def __init__(self) -> None:
        Path("/tmp/ray").mkdir(exist_ok=True)  # the mount point of the private one
        self.unshare = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--mount",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "sh",
                "-c",
                "ip link set lo up && mount -t tmpfs tmpfs /tmp/ray && echo up && exec sleep infinity",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.unshare.stdout.readline().strip()
        if line != "up":
            self.unshare.kill()
            raise RuntimeError(f"could not make the namespaces (unshare said {line!r})")
        # The holder is unshare's child, the namespaces' first process.
        task = Path(f"/proc/{self.unshare.pid}/task/{self.unshare.pid}/children")
        self.holder = int(task.read_text().split()[0])
        self.net = os.stat(f"/proc/{self.holder}/ns/net").st_ino

    def enter(self, argv: list[str], cwd: Path) -> list[str]:
        """``argv`` run inside the namespaces, in ``cwd`` (entering a mount namespace starts at /)."""
        ns = f"/proc/{self.holder}/ns"
        return [
            "nsenter",
            f"--net={ns}/net",
            f"--mount={ns}/mnt",
            f"--pid={ns}/pid",
            f"--wd={cwd}",
            "--",
            *argv,
        ]

    def members(self) -> list[int]:
        """Every process in the network namespace but the holder and unshare."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in (self.holder, self.unshare.pid):
                continue
            try:
                if os.stat(entry / "ns" / "net").st_ino == self.net:
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    def close(self) -> None:
        """Kill whatever still runs in the namespaces, then the holder (PID 1 there: its end
        ends every process left in its PID namespace)."""
        for pid in self.members():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.unshare.kill()
        try:
            os.kill(self.holder, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.unshare.wait(30)


class Output:
    """A process's merged output, read by a thread, for waiting on a line with a deadline."""

    def __init__(self, proc: subprocess.Popen, log: Path) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.log = log
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        with self.log.open("a") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float) -> list[str]:
        """The lines up to the first that contains ``text``; AssertionError at the deadline or EOF."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} within {timeout:.0f} s; output:\n{''.join(seen)}") from None
            if line is None:
                raise AssertionError(f"ended before {text!r}; output:\n{''.join(seen)}")
            seen.append(line)
            if text in line:
                return seen


def _run_group(blocks: list[Block], tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    work.mkdir()
    (work / ".venv").symlink_to(sys.prefix)  # what `make demo` / `make test` set up
    (work / "configs").symlink_to(REPO / "configs")
    (work / "scripts").symlink_to(REPO / "scripts")
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home)
    logs = tmp_path / "logs"
    logs.mkdir()
    ns = Namespace()
    background: list[subprocess.Popen] = []
    sessions: dict[str, tuple[subprocess.Popen, Output]] = {}
    try:
        for block in blocks:
            missing = [need for need in block.needs if not NEEDS[need]()]
            if missing:
                if os.environ.get("CI"):
                    pytest.fail(f"{block.name} needs {', '.join(missing)}")
                print(f"skipped {block.name}: needs {', '.join(missing)}")
                continue
            if block.lang == "bash" and block.background:
                proc = subprocess.Popen(
                    ns.enter(["bash", "-c", block.code], work),
                    cwd=work,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
                background.append(proc)
                out = Output(proc, logs / f"background-{len(background)}.log")
                out.wait_for(block.ready or "", READY_TIMEOUT_S)
            elif block.lang == "bash":
                result = subprocess.run(
                    ns.enter(["bash", "-e", "-o", "pipefail", "-c", block.code], work),
                    cwd=work,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=BLOCK_TIMEOUT_S,
                )
                assert result.returncode == 0, (
                    f"{block.name} exited {result.returncode}:\n{result.stdout}{result.stderr}"
                )
                assert "Traceback" not in result.stdout + result.stderr, f"{block.name}:\n{result.stderr}"
            elif block.lang == "python":
                if block.session not in sessions:
                    proc = subprocess.Popen(
                        ns.enter([str(work / ".venv" / "bin" / "python"), "-u", "-c", SESSION], work),
                        cwd=work,
                        env=env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                    )
                    sessions[block.session] = proc, Output(proc, logs / f"python-{block.session}.log")
                session, session_out = sessions[block.session]
                session.stdin.write(json.dumps({"name": block.name, "code": block.code}) + "\n")
                session.stdin.flush()
                lines = session_out.wait_for(SESSION_DONE, BLOCK_TIMEOUT_S)
                status = lines[-1].split()[-1]
                assert status == "ok", f"{block.name} raised:\n{''.join(lines)}"
            else:
                pytest.fail(f"{block.name}: no runner for {block.lang} blocks")
    finally:
        for session, _ in sessions.values():
            session.stdin.close()
            try:
                session.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                session.kill()
        for proc in reversed(background):  # Ctrl-C, as the reader stops them
            try:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(STOP_TIMEOUT_S)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        ns.close()


def _marks(blocks: list[Block]) -> list[pytest.MarkDecorator]:
    return [pytest.mark.spark] if any("spark" in b.code for b in blocks) else []


@pytest.mark.parametrize("blocks", [pytest.param(blocks, id=name, marks=_marks(blocks)) for name, blocks in groups()])
@pytest.mark.timeout(1800)
def test_the_documented_blocks_run_as_written(blocks, tmp_path):
    reason = _namespaces_unavailable()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    _run_group(blocks, tmp_path)


def test_the_tour_is_marked_runnable():
    """The README's tour (every Python and bash block after its heading) is run by the test above."""
    text = (REPO / "README.md").read_text()
    tour = text[text.index("## A five-minute tour") : text.index("## Status")]
    fences = re.findall(r"^```(\w+)", tour, re.M)
    runnable = [b for b in parse_blocks(REPO / "README.md") if b.group == "tour"]
    assert len(runnable) == len(fences) >= 6


def test_the_marker_parser_reads_groups_and_attributes(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        'Start:\n\n<!-- runnable: g background ready="up and running" -->\n```bash\nserve\n```\n\n'
        "<!-- runnable: g session=other needs=kcat,spark-kafka-jars -->\n```python\nprint(1)\nprint(2)\n```\n\n"
        "```python\nnot runnable\n```\n"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys.modules[__name__], "REPO", tmp_path)
        first, second = parse_blocks(page)
    assert (first.group, first.lang, first.code, first.background, first.ready) == (
        "g",
        "bash",
        "serve",
        True,
        "up and running",
    )
    assert (second.lang, second.code, second.background, second.needs) == (
        "python",
        "print(1)\nprint(2)",
        False,
        ["kcat", "spark-kafka-jars"],
    )
