"""The ``rayqueue`` CLI, in-process (typer's CliRunner) against the session cluster.

The CLI's connect reuses the Ray this test process already runs, and its default
namespace "rayqueue" is the session cluster's. One test runs ``rayqueue start`` as a
real process with its own embedded Ray and stops it with SIGTERM.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from rayqueue import TopicPartition
from rayqueue.cli import app
from rayqueue.cluster import metrics_on_loopback
from rayqueue.partitioner import partition_for_key
from tests.helpers import consume_all, wait_for
from tests.rayqueue.processes import RAYQUEUE, Background, user_env

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
_names = itertools.count()


def rq(*args: str, input: str | None = None, ok: bool = True):
    """Run ``rayqueue ARGS``; with ``ok`` assert it succeeded."""
    result = runner.invoke(app, list(args), input=input)
    if ok:
        assert result.exit_code == 0, f"exit {result.exit_code}: {result.output}\n{result.exception!r}"
    return result


@pytest.fixture
def topic_name(admin):
    """A unique topic name, deleted after the test if the test created it."""
    names: list[str] = []

    def make() -> str:
        name = f"cli-{os.getpid()}-{next(_names)}"
        names.append(name)
        return name

    yield make
    existing = set(admin.list_topics())
    for name in names:
        if name in existing:
            admin.delete_topic(name)


def end_offsets(cluster, topic: str) -> dict[int, int]:
    consumer = cluster.consumer()
    tps = consumer.partitions_for_topic(topic)
    return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}


def read_all(cluster, topic: str, expected: int) -> list:
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign(consumer.partitions_for_topic(topic))
    return consume_all(consumer, expected)


# -- topics ---------------------------------------------------------------------------------


def test_topics_create_list_describe_alter_add_partitions_delete(cluster, admin, topic_name):
    name = topic_name()
    result = rq(
        "topics", "create", name, "--partitions", "3", "--replication-factor", "1", "--config", "retention.ms=60000"
    )
    assert f"Created topic {name}" in result.output
    meta = admin.describe_topics([name])[name]
    assert len(meta.partitions) == 3 and all(len(p.replicas) == 1 for p in meta.partitions)
    assert admin.describe_configs(name)["retention.ms"] == (60000, "DYNAMIC_TOPIC_CONFIG")

    assert name in rq("topics", "list").stdout.splitlines()

    out = rq("topics", "describe", name).stdout
    assert "PartitionCount: 3" in out and "ReplicationFactor: 1" in out and "retention.ms=60000" in out
    for p in meta.partitions:
        # each partition's row: partition, leader, epoch, replicas, ISR
        row = rf"│\s*{p.partition}\s*│\s*{p.leader}\s*│\s*{p.leader_epoch}\s*│\s*{','.join(map(str, p.replicas))}\s*│"
        assert re.search(row, out), out

    out = rq("topics", "describe", name, "--all-configs").stdout
    assert re.search(r"retention\.ms\s*│\s*60000\s*│\s*DYNAMIC_TOPIC_CONFIG", out)

    rq(
        "topics",
        "alter",
        name,
        "--set",
        "cleanup.policy=compact",
        "--set",
        "segment.ms=3600000",
        "--delete",
        "retention.ms",
    )
    configs = admin.describe_configs(name)
    assert configs["cleanup.policy"][1] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.ms"] == (3600000, "DYNAMIC_TOPIC_CONFIG")
    assert configs["retention.ms"][1] != "DYNAMIC_TOPIC_CONFIG"

    assert "now has 5 partitions" in rq("topics", "add-partitions", name, "--total", "5").output
    assert len(admin.describe_topics([name])[name].partitions) == 5

    assert f"Deleted topic {name}" in rq("topics", "delete", name).output
    assert name not in admin.list_topics()


def test_status_shows_cluster_brokers_and_counts(cluster):
    out = rq("status").stdout
    info = cluster.describe()
    assert info["cluster_id"] in out
    assert re.search(rf"Controller epoch:\s+{info['controller_epoch']}", out)
    for broker in info["brokers"]:
        assert broker.data_dir in out
    assert re.search(r"Under-replicated:\s+\d+", out) and re.search(r"Offline:\s+\d+", out)


# -- produce / consume --------------------------------------------------------------------


def test_produce_lines_then_consume_them_back_exactly(cluster, admin, topic_name):
    name = topic_name()
    admin.create_topic(name, 1, 1)
    lines = ["first", "second with spaces", "", "ünïcødé", "last line without newline"]
    result = rq("produce", name, input="\n".join(lines))
    assert "Produced 5 records" in result.output
    records = read_all(cluster, name, 5)
    assert [r.value for r in records] == [line.encode() for line in lines]
    assert all(r.key is None for r in records)

    out = rq("consume", name, "--from-beginning", "--max-messages", "5")
    assert out.stdout.splitlines() == lines
    assert "Processed a total of 5 messages" in out.stderr

    # --max-messages stops early
    out = rq("consume", name, "--from-beginning", "--max-messages", "2")
    assert out.stdout.splitlines() == lines[:2]


def test_produce_with_key_separator_partitions_by_key(cluster, admin, topic_name):
    name = topic_name()
    admin.create_topic(name, 3, 1)
    rq("produce", name, "--key-separator", ":", input="k1:v1\nk2:v2:with:colons\nk3:\n")
    records = read_all(cluster, name, 3)
    got = {r.key: (r.value, r.partition) for r in records}
    assert got == {
        b"k1": (b"v1", partition_for_key(b"k1", 3)),
        b"k2": (b"v2:with:colons", partition_for_key(b"k2", 3)),
        b"k3": (b"", partition_for_key(b"k3", 3)),
    }

    out = rq("consume", name, "--from-beginning", "--max-messages", "3", "--format", "kv", "--key-separator", "=")
    assert sorted(out.stdout.splitlines()) == ["k1=v1", "k2=v2:with:colons", "k3="]

    out = rq("consume", name, "--from-beginning", "--max-messages", "3", "--format", "json")
    objs = [json.loads(line) for line in out.stdout.splitlines()]
    assert {(o["key"], o["value"], o["partition"], o["offset"]) for o in objs} == {
        (k.decode(), v.decode(), p, 0) for k, (v, p) in got.items()
    }
    assert all(o["topic"] == name and o["timestampType"] == "CreateTime" for o in objs)


def test_produce_without_separator_on_a_line_fails_cleanly(cluster, admin, topic_name):
    name = topic_name()
    admin.create_topic(name, 1, 1)
    result = rq("produce", name, "--key-separator", "|", input="a|1\nno separator here\n", ok=False)
    assert result.exit_code == 1
    assert "no key separator '|' on line 2" in result.output
    assert "Traceback" not in result.output


def test_consume_from_offset_partition_timestamp_and_idle_timeout(cluster, admin, topic_name):
    name = topic_name()
    admin.create_topic(name, 2, 1)
    rq("produce", name, "--partition", "1", input="".join(f"v{i}\n" for i in range(10)))
    assert end_offsets(cluster, name) == {0: 0, 1: 10}

    out = rq("consume", name, "--partition", "1", "--offset", "7", "--max-messages", "3")
    assert out.stdout.splitlines() == ["v7", "v8", "v9"]

    # No --max-messages: --timeout-ms ends the run once the partition is drained.
    out = rq("consume", name, "--offset", "8", "--timeout-ms", "500")
    assert out.stdout.splitlines() == ["v8", "v9"]
    assert "Processed a total of 2 messages" in out.stderr

    out = rq("consume", name, "--timestamp", "0", "--max-messages", "10", "--format", "json")
    assert [json.loads(line)["offset"] for line in out.stdout.splitlines()] == list(range(10))

    result = rq("consume", name, "--from-beginning", "--offset", "3", ok=False)
    assert result.exit_code == 2  # a usage error


def test_consume_from_latest_sees_only_new_records(cluster, admin, topic_name):
    name = topic_name()
    admin.create_topic(name, 1, 1)
    rq("produce", name, input="old\n")
    result: dict = {}

    def consume() -> None:
        result["r"] = runner.invoke(app, ["consume", name, "--max-messages", "1", "--timeout-ms", "60000"])

    thread = threading.Thread(target=consume)
    thread.start()
    # The consumer fixes its start at the end offset first; keep producing until it has
    # seen one. (Through the library: CliRunner swaps sys.stdout process-wide.)
    producer = cluster.producer(linger_ms=0)
    deadline = time.monotonic() + 60
    while thread.is_alive() and time.monotonic() < deadline:
        producer.send(name, b"new").get(30)
        thread.join(0.5)
    producer.close()
    thread.join(5)
    assert result["r"].exit_code == 0, result["r"].output
    assert result["r"].stdout.splitlines() == ["new"]


# -- perf -----------------------------------------------------------------------------------

_PRODUCE_SUMMARY = re.compile(
    r"(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
    r"[\d.]+ ms 50th, [\d.]+ ms 95th, [\d.]+ ms 99th, [\d.]+ ms 99.9th\."
)


def test_perf_produce_and_consume_report_kafka_figures(cluster, admin, topic_name):
    name = topic_name()
    admin.create_topic(name, 3, 1)
    out = rq("perf", "produce", name, "--num-records", "2000", "--record-size", "100", "--linger-ms", "2").stdout
    match = _PRODUCE_SUMMARY.search(out)
    assert match and int(match.group(1)) == 2000, out
    out = rq("perf", "produce", name, "--num-records", "3000", "--record-size", "50", "--bulk").stdout
    match = _PRODUCE_SUMMARY.search(out)
    assert match and int(match.group(1)) == 3000, out
    assert sum(end_offsets(cluster, name).values()) == 5000

    out = rq("perf", "consume", name, "--messages", "5000").stdout
    lines = out.splitlines()
    header = lines.index(
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    fields = dict(zip(lines[header].split(", "), lines[header + 1].split(", "), strict=True))
    assert int(fields["data.consumed.in.nMsg"]) == 5000
    assert float(fields["data.consumed.in.MB"]) == pytest.approx((2000 * 100 + 3000 * 50) / 1024 / 1024, abs=1e-4)
    assert re.search(r"\d+ polls, [\d.]+ ms avg poll latency, .* ms 99th\.", out)


def test_perf_consume_warns_when_the_topic_runs_dry(cluster, admin, topic_name):
    name = topic_name()
    admin.create_topic(name, 1, 1)
    rq("produce", name, input="a\nb\n")
    result = rq("perf", "consume", name, "--messages", "10", "--timeout-ms", "300")
    assert "Exiting before consuming the expected number of messages" in result.stderr
    assert ", 2, " in result.stdout  # data.consumed.in.nMsg


# -- errors ---------------------------------------------------------------------------------


def _assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bad_topic_name_is_a_one_line_invalid_topic_error(cluster):
    result = rq("topics", "create", "bad name!", ok=False)
    _assert_one_line_error(result, "InvalidTopicError", "INVALID_TOPIC_EXCEPTION", "bad name!")


def test_unknown_config_key_suggests_the_nearest(cluster, admin, topic_name):
    name = topic_name()
    result = rq("topics", "create", name, "--config", "retention.msx=5", ok=False)
    _assert_one_line_error(result, "InvalidConfigError", "INVALID_CONFIG", "did you mean 'retention.ms'")
    assert name not in admin.list_topics()

    admin.create_topic(name, 1, 1)
    result = rq("topics", "alter", name, "--set", "cleanup.polcy=compact", ok=False)
    _assert_one_line_error(result, "did you mean 'cleanup.policy'")


def test_unknown_topic_errors(cluster):
    _assert_one_line_error(rq("topics", "describe", "no-such-topic", ok=False), "UnknownTopicOrPartitionError")
    _assert_one_line_error(
        rq("consume", "no-such-topic", "--max-messages", "1", ok=False), "UNKNOWN_TOPIC_OR_PARTITION"
    )


def test_bad_key_value_argument_is_a_usage_error(cluster):
    result = rq("topics", "create", "whatever", "--config", "novalue", ok=False)
    assert result.exit_code == 2 and "KEY=VALUE" in result.output


# -- start ----------------------------------------------------------------------------------


def test_start_in_the_foreground_stops_cleanly_on_sigterm(tmp_path):
    """A real `rayqueue start` with its own embedded Ray: ready, then SIGTERM, exit 0."""
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"
    stderr = open(tmp_path / "stderr.txt", "wb")  # a file, so a chatty stderr can never block the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "rayqueue.cli", "start", "--foreground", "--config", "configs/local.toml"]
        + ["-o", f"log.dirs={data}", "-o", "rayqueue.num.brokers=2", "--name", "rayqueue-cli-start-test"]
        # Free ports: the default 127.0.0.1:9092 may be taken on a shared machine.
        + ["--listeners", "PLAINTEXT://127.0.0.1:0"]
        # And Ray's choice of metrics port: 8080 may be taken too.
        + ["--metrics-export-port", "0"]
        # And a free port for the schema registry (8081 may be taken).
        + ["--schema-registry-listeners", "http://127.0.0.1:0"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.decode()) for line in proc.stdout], daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while not any(" ready " in line for line in seen):
            remaining = deadline - time.monotonic()
            assert remaining > 0 and proc.poll() is None, f"not ready: {seen} {(tmp_path / 'stderr.txt').read_text()}"
            try:
                seen.append(lines.get(timeout=min(remaining, 1.0)))
            except queue.Empty:
                pass
        assert "2 brokers" in seen[-1] and str(data) in seen[-1]
        # The next line names the gateways for Kafka clients, which answer there.
        while not any("bootstrap.servers=" in line for line in seen):
            assert time.monotonic() < deadline, seen
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1.0))
        servers = next(line for line in seen if "bootstrap.servers=" in line).split("bootstrap.servers=")[1].strip()
        assert len(servers.split(",")) == 2
        if shutil.which("kcat"):
            listed = subprocess.run(["kcat", "-b", servers, "-L"], capture_output=True, text=True, timeout=60)
            assert " 2 brokers:" in listed.stdout, listed.stderr
        # Then where Prometheus scrapes the embedded Ray's metrics, which answers there.
        while not any("Prometheus metrics: " in line for line in seen):
            assert time.monotonic() < deadline, seen
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1.0))
        url = re.search(r"Prometheus metrics: (\S+)", next(line for line in seen if "Prometheus metrics: " in line))[1]
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.status == 200 and b"# TYPE" in response.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, (tmp_path / "stderr.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        stderr.close()
    reader.join(10)
    while not lines.empty():
        seen.append(lines.get())
    assert any("Stopped." in line for line in seen), seen
    assert (data / "__cluster_metadata").exists() or any(data.iterdir())


def _outside_addresses() -> list[str]:
    """This machine's addresses that another machine could reach (not loopback, not link-local)."""
    found = []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                ip = ipaddress.ip_address(address.address.split("%")[0])
                if not (ip.is_loopback or ip.is_link_local):
                    found.append(str(ip))
    return found


def test_start_serves_metrics_on_loopback_only_when_the_listeners_are(tmp_path):
    """`rayqueue start` on loopback listeners: the banner names where the metrics are, they
    answer there, and the port is closed on every other address of the machine."""
    outside = _outside_addresses()
    if not outside:
        pytest.skip("this machine has no address but loopback: nothing to try the metrics port from")
    home = tmp_path / "home"
    home.mkdir()
    start = Background(
        [*RAYQUEUE, "start", "--config", "configs/local.toml", "-o", f"log.dirs={tmp_path / 'data'}"]
        + ["-o", "rayqueue.num.brokers=1", "--name", "rayqueue-metrics-bind-test"]
        + ["--listeners", "PLAINTEXT://127.0.0.1:0", "--metrics-export-port", "0"]
        + ["--schema-registry-listeners", ""],
        user_env(home),
        tmp_path / "start.log",
    )
    try:
        banner = start.wait_for("Running in the foreground", 180)
        line = re.search(r"Prometheus metrics: (http://([\d.]+):(\d+)/metrics) \((.*)\)", banner)
        assert line is not None, banner
        url, host, port = line[1], line[2], int(line[3])
        assert host == "127.0.0.1" and line[4].startswith("loopback only"), line[0]
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.status == 200 and b"# TYPE" in response.read()
        for address in outside:
            with pytest.raises((ConnectionRefusedError, TimeoutError)):
                socket.create_connection((address, port), timeout=10).close()
    finally:
        code = start.stop()
    assert code == 0, start.output()


def test_the_metrics_cannot_be_bound_to_one_outside_address(monkeypatch):
    # Ray's metrics agent binds loopback or every interface; asking for one address says so
    # (before any Ray starts: with no RAY_ADDRESS the command would embed its own).
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    result = rq(
        "start",
        "--metrics-host",
        "192.0.2.77",
        "--listeners",
        "PLAINTEXT://127.0.0.1:0",
        "--metrics-export-port",
        "0",
        "--schema-registry-listeners",
        "",
        ok=False,
    )
    assert result.exit_code == 1 and "loopback (127.0.0.1) or on every interface (0.0.0.0)" in result.output


def test_the_metrics_bind_where_the_listeners_do():
    assert metrics_on_loopback("PLAINTEXT://127.0.0.1:0") and metrics_on_loopback("PLAINTEXT://localhost:0")
    assert metrics_on_loopback("PLAINTEXT://[::1]:0") and metrics_on_loopback("")  # no listener: nothing outside
    assert not metrics_on_loopback("PLAINTEXT://0.0.0.0:0") and not metrics_on_loopback("PLAINTEXT://10.1.2.3:0")
    assert not metrics_on_loopback("PLAINTEXT://127.0.0.1:0", "0.0.0.0")  # the operator's word wins
    assert metrics_on_loopback("PLAINTEXT://0.0.0.0:0", "127.0.0.1")


@pytest.mark.parametrize(
    ("given", "env", "joined"),
    [
        ("127.0.0.1:6390", None, "127.0.0.1:6390"),
        ("localhost:6390", None, "127.0.0.1:6390"),
        ("auto", "127.0.0.1:6391", "127.0.0.1:6391"),
        ("192.0.2.7:6390", None, "192.0.2.7:6390"),
    ],
)
def test_a_ray_on_loopback_is_joined_at_loopback(monkeypatch, given, env, joined):
    """`rayqueue start` on loopback listeners runs its Ray on 127.0.0.1 only and prints that
    address; other commands given it must connect there, where Ray would otherwise connect to
    the machine's outward address, on which that Ray does not listen. Ray's resolution of the
    address is read inside ray.init (no Ray runs here); Ray's setting is restored after."""
    import ray
    from ray._private import ray_constants, services

    from rayqueue import connection

    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    monkeypatch.setattr(connection, "_check_ray_reachable", lambda address, token_on: None)
    # A CLI command joins before any Ray runs in its process; the suite's session Ray, when an
    # earlier test started it, would make Ray resolve loopback to that node's address.
    monkeypatch.setattr(ray._private.worker, "_global_node", None)
    resolved = []
    monkeypatch.setattr(
        ray, "init", lambda address, **_: resolved.append(services.canonicalize_bootstrap_address(address))
    )
    cluster_mode = ray_constants.ENABLE_RAY_CLUSTER
    cluster_env = os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR)
    connection.join_ray(given)
    assert resolved == [joined]
    assert ray_constants.ENABLE_RAY_CLUSTER == cluster_mode
    assert os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR) == cluster_env


def test_groups_list_describe_reset_and_delete(cluster, new_topic):
    topic = new_topic(partitions=2)
    producer = cluster.producer()
    producer.send_many(topic, [b"%d" % i for i in range(40)], partition=0).get(60)
    producer.send_many(topic, [b"%d" % i for i in range(10)], partition=1).get(60)
    group = f"cli-group-{os.getpid()}"
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe([topic])
    consume_all(consumer, 50)
    consumer.commit()
    listed = rq("groups", "list").output
    assert group in listed and "Stable" in listed
    described = rq("groups", "describe", group).output
    assert f"Group: {group}" in described and "Members: 1" in described and "Lag" in described
    # Not allowed while the group has a member, as in Kafka.
    busy = rq("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", ok=False)
    assert busy.exit_code == 1 and "NON_EMPTY_GROUP" in busy.output
    consumer.close()
    rq("groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "5")
    lag = cluster.admin().group_lag(group)
    assert (lag[TopicPartition(topic, 0)].committed, lag[TopicPartition(topic, 0)].lag) == (5, 35)
    rq("groups", "reset-offsets", group, "--topic", topic, "--to-latest")
    assert all(info.lag == 0 for info in cluster.admin().group_lag(group).values())
    rq("groups", "delete", group)
    assert group not in rq("groups", "list").output


def test_brokers_stop_start_elect_leaders_and_reassign(cluster, admin, new_topic):
    from tests.helpers import wait_for

    topic = new_topic(partitions=1, replication_factor=3)
    tp = TopicPartition(topic, 0)

    def partition():
        return admin.describe_topics([topic])[topic].partitions[0]

    preferred = partition().replicas[0]
    rq("brokers", "stop", str(preferred))
    moved = wait_for(lambda: (p := partition()).leader not in (-1, preferred) and p, 60, what="leader moved")
    assert preferred not in moved.isr
    # status and describe show the partition as under-replicated with the stopped broker offline.
    status = rq("status").stdout
    under = int(re.search(r"Under-replicated:\s+(\d+)", status).group(1))
    assert under >= 1 and "Unhealthy partitions" in status
    ids = ",".join
    row = (
        rf"│\s*0\s*│\s*{moved.leader}\s*│\s*{moved.leader_epoch}\s*│\s*{ids(map(str, moved.replicas))}\s*│"
        rf"\s*{ids(map(str, moved.isr))}\s*│\s*{preferred}\s*│"  # ISR without it, and it in Offline
    )
    described = rq("topics", "describe", topic).stdout
    assert re.search(row, described), described
    rq("brokers", "start", str(preferred))
    wait_for(lambda: len(partition().isr) == 3, 60, what="broker back in the ISR")
    result = rq("partitions", "elect-leaders", f"{topic}:0").output
    assert str(tp) in result
    wait_for(lambda: partition().leader == preferred, 60, what="preferred leader")
    single = new_topic(partitions=1)
    old = admin.describe_topics([single])[single].partitions[0].replicas[0]
    target = (old + 1) % 3
    cluster.producer().send(single, b"before the move").get(60)
    rq("partitions", "reassign", f"{single}:0={target}", "--timeout-s", "120")
    after = admin.describe_topics([single])[single].partitions[0]
    assert after.replicas == (target,) and after.leader == target
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(single, 0)])
    assert [r.value for r in consume_all(consumer, 1)] == [b"before the move"]


def test_transactions_list_and_describe(cluster, new_topic):
    topic = new_topic(partitions=2)
    txn_id = f"cli-txn-{os.getpid()}"
    producer = cluster.producer(transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"a", partition=0).get(30)
        producer.send(topic, b"b", partition=1).get(30)
        ongoing = rq("transactions", "describe", txn_id).output
        assert "Ongoing" in ongoing and f"{topic}-0" in ongoing and f"{topic}-1" in ongoing
        assert txn_id in rq("transactions", "list", "--state", "Ongoing").output
        producer.commit_transaction()
        # CompleteCommit once the markers are in (they follow the commit's answer).
        wait_for(lambda: "CompleteCommit" in rq("transactions", "describe", txn_id).output, 60, what="CompleteCommit")
        assert txn_id not in rq("transactions", "list", "--state", "Ongoing").output
        assert txn_id in rq("transactions", "list").output
    finally:
        producer.close(10)
