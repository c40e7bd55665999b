"""Spark as a first program uses it: a script that launches a cluster, writes a DataFrame to a
topic and shuts the cluster down, run as its own process. Its output has neither Ray's
"`parallelism` is deprecated" notice (rayqueue's sink goes through RayDP's own conversion)
nor a traceback from RayDP's exit handler (shutting down an embedded Ray stops Spark first)."""

from __future__ import annotations

import sys

import pytest

from tests.rayqueue.processes import run, user_env

pytestmark = pytest.mark.spark

SCRIPT = """
import tempfile

import rayqueue
from rayqueue import spark as rq_spark

cluster = rayqueue.launch(log_dirs=tempfile.mkdtemp())
spark = rq_spark.session()
df = spark.createDataFrame([("k1", "v1"), ("k2", "v2")], ["key", "value"])
print("written", rq_spark.write(df, "first-run"))
cluster.shutdown()
print("shut down")
"""


def test_a_spark_script_ends_without_deprecation_notices_or_exit_tracebacks(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    code, output = run([sys.executable, "-c", SCRIPT], user_env(home), 600)
    assert code == 0, output
    assert "written 2" in output and output.rstrip().endswith("shut down"), output
    assert "parallelism" not in output, output
    assert "Traceback" not in output and "Exception ignored" not in output, output
