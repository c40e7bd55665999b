"""The benchmarks' Ray: one of their own, unless RAY_ADDRESS names a cluster to join."""

from __future__ import annotations

import os
import time

import psutil
import ray


def start_ray(attempts: int = 5) -> None:
    """Start an embedded Ray (8 logical CPUs on this 2-core machine, as the tests use) or join
    the cluster RAY_ADDRESS names. A bare ``ray.init()`` would attach to any Ray that
    ``ray start`` left running here and measure it instead.

    On a loaded machine the raylet gives up when its metrics agent takes more than a few seconds
    to start (it exits with "Timed out waiting for file .../metrics_agent_port", and ``ray.init``
    raises "The current node timed out during startup"): a fresh Ray is then tried again,
    ``attempts`` times in all.
    """
    address = os.environ.get("RAY_ADDRESS")
    for attempt in range(attempts):
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        try:
            ray.init(
                address=address or "local",
                num_cpus=None if address else 8,
                include_dashboard=False,
                log_to_driver=False,
            )
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
            if address or attempt == attempts - 1 or "timed out during startup" not in str(exc):
                raise
            ray.shutdown()
            _stop_new_children(before)
            time.sleep(10)


def _stop_new_children(before: set[int]) -> None:
    """Stop the processes the failed attempt started (its GCS, agents...), which
    ``ray.shutdown()`` does not know about when ``ray.init`` failed half-way."""
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    for proc in left:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(left, timeout=10)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
