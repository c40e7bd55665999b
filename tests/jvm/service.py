"""Long-running JVMs of the tests (a Kafka Streams application, a Connect worker).

Each runs in the background as Kafka's scripts start it (``java -cp <classpath> <main>``),
with its stdout and stderr in a log file under the test's temp dir, Log4j2 kept at WARN
(``log4j2.properties``; ``RAYQUEUE_JVM_LOG_LEVEL=INFO`` turns it up) and the settings that
suit a shared 2-core machine: a small heap, the serial collector, the C1 compiler only.
The ``java_services`` fixture kills every one still running when the test ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.helpers import wait_for
from tests.jvm.jvm import JVM_OPTIONS  # the same JVM settings as the short runs


class JavaService:
    """One background JVM: started, waited on (its log), stopped (SIGTERM) or killed (SIGKILL)."""

    def __init__(
        self, classpath: str, main: str, args: Sequence[str], log: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.classpath, self.main, self.args, self.log = classpath, main, list(args), log
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None

    def start(self) -> JavaService:
        """Start the JVM, appending to its log file (a restart keeps the earlier run's lines)."""
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.main} {' '.join(self.args)}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                ["java", *JVM_OPTIONS, "-cp", self.classpath, self.main, *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        return self

    @property
    def alive(self) -> bool:
        """Whether the JVM is still running."""
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        """The last lines of the log, for failure messages."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL: the JVM ends at once, no shutdown hook runs (a crashed machine)."""
        if self.alive:
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(60)

    def stop(self, timeout: float = 90.0) -> int:
        """SIGTERM and wait for the JVM's shutdown hooks to finish (SIGKILL after ``timeout``);
        returns the exit code."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode if self.process is not None else 0

    def wait_for_log(self, text: str, timeout: float, count: int = 1) -> None:
        """Wait until ``text`` appears ``count`` times in the log; fail with the log's tail on
        the deadline or if the JVM exits first."""

        def seen() -> int:
            try:
                return self.log.read_text(errors="replace").count(text)
            except FileNotFoundError:
                return 0

        try:
            wait_for(lambda: seen() >= count or not self.alive, timeout=timeout, interval=0.5)
        except AssertionError:
            raise AssertionError(f"{self.main}: no {text!r} within {timeout}s:\n{self.tail()}") from None
        if seen() < count:
            raise AssertionError(f"{self.main} exited ({self.process.returncode}) before {text!r}:\n{self.tail()}")
