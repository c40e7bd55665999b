"""The README's multi-node flow, command by command, on a Ray started with `ray start`.

`ray start --head` on Ray 2.60 turns token authentication on whenever the head has a token
(~/.ray/auth_token). The user here has one, as anyone who ever ran an embedded Ray does, and
exports nothing: `rayqueue start --address` and `rayqueue status --address` must find the
token as Ray's own tools do. A second `ray start --address` on this machine stands in for a
second node. Both Ray processes are stopped by their pids.
"""

from __future__ import annotations

import re
import shutil
import tempfile

import psutil
import pytest

from tests.helpers import wait_for
from tests.rayqueue.processes import RAY, RAYQUEUE, Background, free_port, run, user_env

pytestmark = pytest.mark.multinode

# configs/cluster.toml's shape, scaled to a 2-core test machine: its [topics.events] alone
# would be 36 replicas.
SMALL_CLUSTER = """
rayqueue.namespace = "rayqueue-readme"
rayqueue.num.brokers = 2
log.dirs = "{data}"
num.partitions = 2
default.replication.factor = 2
min.insync.replicas = 1
auto.create.topics.enable = false

[topics.events]
partitions = 2
replication.factor = 2
"""


def test_readme_multinode_flow_on_a_ray_with_token_authentication(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home)
    code, out = run([RAY, "get-auth-token", "--generate"], env, timeout=60)
    assert code == 0 and (home / ".ray" / "auth_token").exists(), out
    config = tmp_path / "cluster.toml"
    config.write_text(SMALL_CLUSTER.format(data=tmp_path / "data"))
    # Short: Ray's unix sockets live under it (a path of at most 107 bytes).
    ray_tmp = tempfile.mkdtemp(prefix="rq", dir="/tmp")
    port = free_port()
    head = Background(
        [RAY, "start", "--head", f"--port={port}", "--block", f"--temp-dir={ray_tmp}"]
        + ["--include-dashboard=false", "--disable-usage-stats"]
        # Free ports for what `ray start` would otherwise bind at fixed ones (10001, 52365).
        + [f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}"],
        env,
        tmp_path / "head.log",
    )
    worker = None
    try:
        started = head.wait_for("Ray runtime started", 120)
        assert "Token authentication is enabled" in started
        address = re.search(r"ray start --address='([^']+)'", started).group(1)
        # Ray's own rule for a node joining a cluster with tokens (the README says so).
        worker = Background(
            [RAY, "start", f"--address={address}", "--block", "--num-cpus=1"]
            + [f"--dashboard-agent-listen-port={free_port()}"],
            {**env, "RAY_AUTH_MODE": "token"},
            tmp_path / "worker.log",
        )
        worker.wait_for("Ray runtime started", 120)

        # Free ports for the gateways: the default listeners are 127.0.0.1:9092 and up.
        code, out = run(
            [
                *RAYQUEUE,
                "start",
                "--config",
                str(config),
                "--address",
                address,
                "--listeners",
                "PLAINTEXT://127.0.0.1:0",
                "--schema-registry-listeners",
                "",
            ],
            env,
        )
        assert code == 0, out
        assert "ready in namespace rayqueue-readme: 2 brokers, 3 topics" in out and "detached" in out

        # A separate command, after `rayqueue start` has exited: the brokers kept running.
        at = ["--address", address, "--name", "rayqueue-readme"]
        code, out = run([*RAYQUEUE, "status", *at], env)
        assert code == 0, out
        # events' 4 and the internal topics' 12 (3 partitions each, RF 3 capped at 2 brokers).
        assert re.search(r"Replicas open:\s+16 in 2 host actors", out) and re.search(r"Offline:\s+0", out), out
        # Brokers spread round-robin over the two nodes.
        nodes = set(re.findall(r"│\s+\d+ │ \S+ \((\w+)\)", out))
        assert len(nodes) == 2, out

        code, out = run([*RAYQUEUE, "produce", "events", "--acks", "all", *at], env, stdin="one\ntwo\n")
        assert code == 0 and "Produced 2 records" in out, out
        code, out = run([*RAYQUEUE, "consume", "events", "--from-beginning", "--max-messages", "2", *at], env)
        assert code == 0 and {"one", "two"} <= set(out.splitlines()), out

        code, out = run([*RAYQUEUE, "stop", "--delete-data", *at], env)
        assert code == 0 and "Stopped the rayqueue cluster" in out, out
    finally:
        if worker is not None:
            worker.stop()
        head.stop()
        # Stopped by pid, `ray start --block` takes its raylet, GCS and workers with it.
        wait_for(lambda: not ray_processes(ray_tmp), 60, what="the Ray processes to end")
        shutil.rmtree(ray_tmp, ignore_errors=True)


def ray_processes(ray_tmp: str) -> list[int]:
    """Processes whose command line names the session directory under ``ray_tmp``."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(ray_tmp in part for part in proc.info["cmdline"] or ()):
            found.append(proc.info["pid"])
    return found
