"""rayqueue.connection: the Ray that rayqueue starts on loopback, as the processes inside it see it."""

from __future__ import annotations

import json
import os
import sys
import textwrap

from tests.rayqueue.processes import REPO, Background

# A process of its own: the session's Ray runs on the machine's address, and a process holds
# one Ray. A Ray task starts a fresh Python that joins the Ray by its address, as Spark's
# Python workers do under RayDP (the executor, a Ray actor, starts them).
JOIN_FROM_INSIDE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    import ray
    from rayqueue.connection import start_embedded_ray

    JOIN = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "print(ray.util.get_node_ip_address()); ray.shutdown()"
    )

    @ray.remote(num_cpus=0)
    def join_from_inside(address):
        try:
            done = subprocess.run([sys.executable, "-c", JOIN, address], capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            return {"joined": None, "error": "ray.init did not return within 180 s"}
        return {"joined": done.stdout.strip() if done.returncode == 0 else None, "error": done.stderr[-2000:]}

    start_embedded_ray(num_cpus=1, loopback=True)
    try:
        gcs = ray.get_runtime_context().gcs_address
        outcome = ray.get(join_from_inside.remote(gcs))
        switch = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        print("RESULT " + json.dumps({"gcs": gcs, "driver_env": switch, **outcome}), flush=True)
    finally:
        ray.shutdown()
    """
)


def test_a_process_started_inside_a_loopback_ray_joins_it(tmp_path):
    """A Ray that rayqueue starts on loopback listens on 127.0.0.1 only; a process started
    inside it (by a task) that joins it by that address reaches it, where Ray's default
    would send it to the machine's outward address and leave it waiting. The driver's own
    environment is as it was before."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    env["RAY_AUTH_MODE"] = "disabled"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    child = Background([sys.executable, "-c", JOIN_FROM_INSIDE], env, tmp_path / "child.log")
    try:
        child.wait_for("RESULT ", 420)
        code = child.proc.wait(120)  # Ray shuts down
    finally:
        child.stop()
    output = child.output()
    result = json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
    assert result["gcs"].startswith("127.0.0.1:"), result
    assert result["joined"] == "127.0.0.1", result
    assert result["driver_env"] is None, result
    assert code == 0, output
