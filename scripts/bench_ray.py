"""The benchmarks' Ray: one of their own, unless RAY_ADDRESS names a cluster to join."""

from __future__ import annotations

import os

import ray


def start_ray() -> None:
    """Start an embedded Ray (8 logical CPUs on this 2-core machine, as the tests use) or join
    the cluster RAY_ADDRESS names. A bare ``ray.init()`` would attach to any Ray that
    ``ray start`` left running here and measure it instead."""
    address = os.environ.get("RAY_ADDRESS")
    ray.init(
        address=address or "local",
        num_cpus=None if address else 8,
        include_dashboard=False,
        log_to_driver=False,
    )
