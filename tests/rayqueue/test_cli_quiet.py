"""What a new user sees: `rayqueue start` and the CLI print rayqueue's lines, not Ray's.

Runs the commands as separate processes with a user's environment (Ray's default token
authentication included), as a person following the README would, while the ports
`rayqueue start` takes by default (Kafka's 9092 and up, the metrics' 8080, the console's 8088)
are held by someone else, as on a machine where a Kafka broker or another `rayqueue start`
runs: the commands are given free ports and need none of those.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.request

import pytest

from scripts.make_test_ca import make_test_pki
from tests import ports
from tests.rayqueue.processes import RAYQUEUE, Background, ray_lines, run, user_env


@pytest.fixture
def default_ports_taken():
    """rayqueue's default ports, listened on by this test where no one else has them yet."""
    with ports.hold(sorted(ports.rayqueue_default_ports())) as held:
        yield held


def test_start_and_cli_commands_print_no_ray_lines(tmp_path, default_ports_taken):
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home)
    ns = ["--name", "rayqueue-quiet-test"]
    start = Background(
        [*RAYQUEUE, "start", "--config", "configs/local.toml", "-o", f"log.dirs={tmp_path / 'data'}", *ns]
        # Free ports: Kafka's default listeners and Ray's usual metrics port are taken (above).
        + ["--listeners", "PLAINTEXT://127.0.0.1:0", "--metrics-export-port", "0"]
        + ["--schema-registry-listeners", "http://127.0.0.1:0"],
        env,
        tmp_path / "start.log",
    )
    outputs: dict[str, str] = {}
    try:
        ready = start.wait_for("Running in the foreground", 180)
        address = re.search(r"--address (\S+) or RAY_ADDRESS", ready).group(1)
        servers = re.search(r"bootstrap\.servers=(\S+)", ready).group(1).split(",")
        assert len(servers) == 3 and not {int(s.rsplit(":", 1)[1]) for s in servers} & set(default_ports_taken)
        at = ["--address", address, *ns]
        # The brokers, gateways and coordinators: a worker process each, more than Ray's
        # default expects of a 2-core machine.
        code, outputs["topics create"] = run(
            [*RAYQUEUE, "topics", "create", "quiet", "--partitions", "6"] + ["--replication-factor", "3", *at], env
        )
        assert code == 0 and "Created topic quiet (6 partitions, replication factor 3)" in outputs["topics create"]
        code, outputs["produce"] = run([*RAYQUEUE, "produce", "quiet", *at], env, stdin="a\nb\nc\n")
        assert code == 0 and "Produced 3 records" in outputs["produce"]
        code, outputs["consume"] = run(
            [*RAYQUEUE, "consume", "quiet", "--from-beginning", "--max-messages", "3", *at], env
        )
        assert code == 0 and {"a", "b", "c"} <= set(outputs["consume"].splitlines())
        code, outputs["status"] = run([*RAYQUEUE, "status", *at], env)
        # quiet's 18, the internal topics' 6 (configs/local.toml: 3 partitions each, RF 1) and
        # the schema registry's _schemas (1 partition, RF 3), created when the cluster starts.
        assert code == 0 and re.search(r"Replicas open:\s+27 in 3 host actors", outputs["status"])
        assert re.search(r"Placement:\s+broker", outputs["status"])
        code, outputs["health"] = run([*RAYQUEUE, "health", *at], env)
        assert code == 0 and "healthy:" in outputs["health"] and "none offline" in outputs["health"]
        outputs["console"] = _console_serves_the_cluster(at, env, tmp_path)
        outputs["console https"] = _console_serves_https(at, env, tmp_path)
    finally:
        code = start.stop()
        outputs["start"] = start.output()
    assert code == 0 and "Stopped." in outputs["start"], outputs["start"]
    noise = {command: ray_lines(text) for command, text in outputs.items() if ray_lines(text)}
    assert not noise, noise


def _console_serves_the_cluster(at: list[str], env: dict[str, str], tmp_path) -> str:
    """`rayqueue console` attaches, says it binds loopback only, serves the page and the API
    with the cluster's numbers, and stops cleanly on SIGTERM; returns what it printed."""
    console = Background([*RAYQUEUE, "console", "--port", "0", *at], env, tmp_path / "console.log")
    try:
        banner = console.wait_for("Ctrl-C stops it", 120)
        assert "loopback only" in banner, banner
        url = re.search(r"rayqueue console on (http://127\.0\.0\.1:\d+)", banner).group(1)
        with urllib.request.urlopen(f"{url}/", timeout=30) as page:
            assert page.status == 200 and "rayqueue" in page.read().decode()
        with urllib.request.urlopen(f"{url}/api/overview", timeout=60) as answer:
            overview = json.load(answer)
        assert overview["namespace"] == at[-1]
        # quiet's 6 partitions and the schema registry's _schemas (an ordinary topic, as Confluent's).
        assert len(overview["brokers"]) == 3 and overview["topics"] == 2 and overview["partitions"] == 7
    finally:
        code = console.stop()
    assert code == 0 and "Stopped." in console.output(), console.output()
    return console.output()


def _console_serves_https(at: list[str], env: dict[str, str], tmp_path) -> str:
    """`rayqueue console --config FILE` with the cluster config's PEM key
    (ssl.keystore.location, the key encrypted: ssl.key.password from -o) serves HTTPS that
    a client trusting the test CA reads; returns what it printed."""
    pki = make_test_pki(tmp_path / "pki", key_password="console-key-secret")
    config = tmp_path / "secure.toml"
    config.write_text(f'"ssl.keystore.location" = "{pki.broker}"\n')
    command = [
        *RAYQUEUE,
        "console",
        "--port",
        "0",
        "--config",
        str(config),
        "-o",
        "ssl.key.password=console-key-secret",
    ]
    console = Background([*command, *at], env, tmp_path / "console-https.log")
    try:
        banner = console.wait_for("Ctrl-C stops it", 120)
        port = re.search(r"rayqueue console on https://127\.0\.0\.1:(\d+)", banner).group(1)
        trusted = ssl.create_default_context(cafile=str(pki.ca))
        with urllib.request.urlopen(f"https://localhost:{port}/api/session", timeout=30, context=trusted) as answer:
            assert json.load(answer) == {"authentication": False, "user": None, "principal": None}
    finally:
        code = console.stop()
    assert code == 0 and "Stopped." in console.output(), console.output()
    return console.output()
