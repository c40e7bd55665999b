"""Running ``rayqueue`` and ``ray`` as a user does: separate processes, a user's environment.

The test session itself runs with RAY_AUTH_MODE=disabled (conftest); these helpers give the
processes they start the environment a real user has instead (no RAY_AUTH_MODE, their own
home directory), and collect everything they print.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.helpers import wait_for

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
RAYQUEUE = [sys.executable, "-m", "rayqueue.cli"]

# What Ray prints when it speaks on a terminal: its raylet's messages to drivers, its worker
# log prefixes, its Python loggers' format and its C++ (glog) format.
RAY_LINE = re.compile(
    r"\(raylet\)"
    r"|\(\w*\s?pid=\d+"
    r"|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING|ERROR)"
    r"|^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [IWEF] \d+"
    r"|worker processes have been started"
    r"|Token authentication",
    re.MULTILINE,
)


def ray_lines(text: str) -> list[str]:
    """The lines of ``text`` that Ray printed."""
    return [line for line in text.splitlines() if RAY_LINE.search(line)]


def user_env(home: Path) -> dict[str, str]:
    """A user's environment: nothing of the test session's Ray settings, ``home`` as HOME,
    and this checkout first on the import path (for the CLI and for Ray's workers)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_", "PYTEST_")) and k not in ("RAYQUEUE_NAMESPACE",)
    }
    env["HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args: list[str], env: dict[str, str], timeout: float = 180, stdin: str | None = None) -> tuple[int, str]:
    """Run a command to its end: (exit code, stdout and stderr interleaved)."""
    done = subprocess.run(
        args,
        cwd=REPO,
        env=env,
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout


class Background:
    """A long-running command (``ray start --block``, ``rayqueue start``) whose output goes to
    a file, so that a chatty process can never block on a full pipe."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._file = open(log, "wb")
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=self._file, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float) -> str:
        """Wait until the output contains ``text``; the output so far. Fails if the process ends."""
        try:
            wait_for(lambda: text in self.output() or self.proc.poll() is not None, timeout=timeout, interval=0.2)
        except AssertionError:
            raise AssertionError(f"no {text!r} within {timeout}s:\n{self.output()}") from None
        if text not in self.output():
            raise AssertionError(f"exited with {self.proc.returncode} before {text!r}:\n{self.output()}")
        return self.output()

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM by pid, then wait (SIGKILL if it will not end); its exit code."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._file.close()
        return self.proc.returncode
