"""Fixtures of the JVM tests: the pinned classpaths and compiled Java programs (``maven.py``).

Without java, javac or mvn these tests skip with the reason; under CI (``CI`` set, as
``.ci/run`` sets it) a missing piece fails them instead, so they never skip silently there.
"""

from __future__ import annotations

import os

import pytest

from tests.jvm import maven


def _unavailable(exc: Exception):
    if os.environ.get("CI"):
        pytest.fail(f"JVM pieces unavailable under CI: {exc}")
    pytest.skip(f"JVM pieces unavailable: {exc}")


@pytest.fixture
def java_services(tmp_path):
    """``java_services(classpath, main, args, name) -> JavaService``: background JVMs (not yet
    started), logging to ``<tmp_path>/<name>.log``; any still running are killed at the end."""
    from tests.jvm.service import JavaService

    made: list[JavaService] = []

    def make(classpath: str, main: str, args: list[str], name: str, env: dict | None = None) -> JavaService:
        service = JavaService(classpath, main, args, tmp_path / f"{name}.log", env)
        made.append(service)
        return service

    yield make
    for service in made:
        service.kill()


@pytest.fixture(scope="session")
def jvm_classpath():
    """``jvm_classpath(set_name) -> str``: a pinned set's classpath (paths into ~/.m2)."""

    def get(set_name: str) -> str:
        try:
            return maven.classpath(set_name)
        except maven.JvmUnavailable as exc:
            _unavailable(exc)

    return get


@pytest.fixture(scope="session")
def java_program(jvm_classpath):
    """``java_program(program_dir, set_name="kafka") -> str``: the classpath that runs the
    compiled programs of ``tests/jvm/java/<program_dir>/`` (their classes first)."""

    def get(program_dir: str, set_name: str = "kafka") -> str:
        cp = jvm_classpath(set_name)
        try:
            classes = maven.compile_java(program_dir, set_name)
        except maven.JvmUnavailable as exc:
            _unavailable(exc)
        return f"{classes}{os.pathsep}{cp}"

    return get


@pytest.fixture
def bootstrap(cluster) -> str:
    """``host:port,...`` of the session cluster's gateways (asked anew: a restarted gateway
    listens on a new free port)."""
    servers = cluster.bootstrap_servers
    assert servers, "the session cluster runs no gateways"
    return servers
