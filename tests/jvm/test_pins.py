"""The JVM pins agree with the Python ones."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from tests.jvm import maven


def test_spark_pin_equals_pyspark_pin():
    """Spark's Kafka connector must be the Spark PySpark runs (its jars go on spark.jars)."""
    pyproject = tomllib.loads((Path(maven.ROOT) / "pyproject.toml").read_text())
    pins = {}
    for spec in pyproject["project"]["dependencies"]:
        req = Requirement(spec)
        pins[req.name] = req.specifier
    (pyspark,) = list(pins["pyspark"])
    assert pyspark.operator == "==", f"pyspark must be pinned exactly, not {pyspark}"
    assert maven.versions()["spark"] == pyspark.version
