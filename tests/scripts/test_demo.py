"""``make demo`` prints only its own lines: a small run of scripts/demo.py as a user runs it,
its whole output checked for lines of Ray, Spark's JVMs (log4j), Hadoop and Python warnings.

Those are configured away where they come from (rayqueue/spark_log4j2.properties for Spark's
JVMs, the driver JVM's output in Ray's session logs, Ray's own logging settings), so any that
shows here is a regression. The demo runs on an embedded local Ray, end to end with Spark."""

from __future__ import annotations

import re
import sys

import pytest

from tests.rayqueue.processes import REPO, ray_lines, run, user_env

pytestmark = pytest.mark.spark

# Lines no part of the demo prints: Spark/log4j's console format and its status logger,
# Hadoop's native-library warning, Ray's C++ (glog) lines, Python's warnings.
FOREIGN = re.compile(
    r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR)"
    r"|StatusConsoleListener"
    r"|NativeCodeLoader"
    r"|Setting default log level"
    r"|sc\.setLogLevel"
    r"|gcs_client\.cc|GcsClient"
    r"|\w+Warning: "
    r"|Traceback",
    re.MULTILINE,
)


def test_the_demo_prints_only_its_own_lines(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    code, output = run([sys.executable, str(REPO / "scripts" / "demo.py"), "--records", "5000"], user_env(home), 900)
    assert code == 0, output
    assert "every event counted once" in output
    foreign = [line for line in output.splitlines() if FOREIGN.search(line)] + ray_lines(output)
    assert not foreign, "\n".join(foreign)
