"""Fixtures of the gateway tests: the session cluster's bootstrap servers, and kcat."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def bootstrap(cluster) -> str:
    """``host:port,...`` of the session cluster's gateways (asked anew: a restarted gateway
    listens on a new free port)."""
    servers = cluster.bootstrap_servers
    assert servers, "the session cluster runs no gateways"
    return servers


@pytest.fixture(scope="session")
def kcat() -> str:
    """The kcat binary; the test is skipped when it is not installed."""
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (apt-get install kcat; .ci/run installs it when run as root)")
    return path
