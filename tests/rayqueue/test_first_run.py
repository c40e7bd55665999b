"""What a new user meets first: the library and CLI called as the documentation writes them.

Each test is one rough edge a first run found: a client without ``cluster=``, a namespace
without a cluster, a topic created twice, ``consume --max-messages`` with fewer records,
a missing config file, an unknown group, ACLs without an authorizer, the start banner,
the help text, the console's API page and its rates. Against the session cluster (in Ray
namespace "rayqueue", where ``rayqueue.connect()`` and the CLI look by default).
"""

from __future__ import annotations

import itertools
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from rich.console import Console
from typer.testing import CliRunner

import rayqueue
import rayqueue.data
import rayqueue.spark
from rayqueue.cli import app, command
from rayqueue.cli import clients as cli_clients
from rayqueue.cli import cluster as cli_cluster
from rayqueue.errors import KafkaTimeoutError, SecurityDisabledError, TopicAlreadyExistsError
from rayqueue.snapshot import ClusterSnapshot, GroupOffsetView, GroupView, PartitionView, TopicView

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
_ids = itertools.count()


def rq(*args: str, **kwargs):
    """``rayqueue ARGS`` through the command the console script runs (typer's runner takes
    only a Typer app, and builds its command the plain way)."""
    with mock.patch("typer.testing._get_command", lambda _app: command()):
        return runner.invoke(app, list(args), prog_name="rayqueue", **kwargs)


@pytest.fixture
def topic(admin):
    name = f"first-run-{os.getpid()}-{next(_ids)}"
    admin.create_topic(name, 1, 1)
    yield name
    admin.delete_topic(name)


# -- clients without cluster= -------------------------------------------


def test_spark_and_ray_data_find_the_cluster_without_cluster_argument(cluster, topic):
    # kafka_options reads the gateways' addresses, which only a launched Cluster named.
    assert rayqueue.spark.kafka_options(subscribe=topic) == {
        "kafka.bootstrap.servers": cluster.bootstrap_servers,
        "subscribe": topic,
    }
    found = rayqueue.data._cluster_or_connect(None)
    assert found.namespace == cluster.namespace
    producer = found.producer()  # what stream() makes its transactional producer with
    producer.send(topic, b"v").get(30)
    producer.close()
    assert rayqueue.data.read(topic, starting_offsets="earliest").count() == 1


# -- connect() and the CLI say which Ray they searched -----------------------------


def test_connect_to_an_empty_namespace_names_the_ray_and_the_fix(cluster):
    import ray

    gcs = ray.get_runtime_context().gcs_address
    with pytest.raises(KafkaTimeoutError) as caught:
        rayqueue.connect("no-such-namespace", timeout_s=0.2)
    message = str(caught.value)
    assert gcs in message and "RAY_ADDRESS" in message and "address" in message
    result = rq("status", "--name", "no-such-namespace")
    assert result.exit_code == 1
    assert gcs in result.output and "--address" in result.output and "Traceback" not in result.output


# -- errors are Kafka's, not Ray's wrapper -----------------------------------------


def test_creating_a_topic_twice_raises_the_kafka_error_itself(admin, topic):
    with pytest.raises(TopicAlreadyExistsError) as caught:
        admin.create_topic(topic, 1, 1)
    assert type(caught.value) is TopicAlreadyExistsError  # not RayTaskError(TopicAlreadyExistsError)
    assert "\x1b[" not in str(caught.value) and "ray::" not in str(caught.value)


class _StopOnHint(Console):
    """The CLI's stderr console: records what it prints, and stops the command (Ctrl-C) once
    it says that it waits."""

    def __init__(self) -> None:
        super().__init__(stderr=True, highlight=False, soft_wrap=True)
        self.lines: list[str] = []

    def print(self, *objects, **kwargs) -> None:  # noqa: A003 - Console's own name
        text = " ".join(str(o) for o in objects)
        self.lines.append(text)
        if "waiting for more" in text:
            raise KeyboardInterrupt


def test_consume_max_messages_says_it_waits_for_more_records(cluster, topic, monkeypatch):
    producer = cluster.producer()
    for value in (b"a", b"b", b"c"):
        producer.send(topic, value).get(30)
    producer.close()
    monkeypatch.setattr(cli_clients, "IDLE_HINT_S", 0.5)
    stderr = _StopOnHint()
    monkeypatch.setattr(cli_clients, "err", stderr)
    result = rq("consume", topic, "--from-beginning", "--max-messages", "10")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["a", "b", "c"]
    hint = next(line for line in stderr.lines if "waiting for more" in line)
    assert "Read 3 of 10 messages" in hint and "--timeout-ms" in hint
    assert stderr.lines[-1] == "Processed a total of 3 messages"


# -- the CLI's own rough edges -----------------------------------------------------


def test_start_with_a_missing_config_file_is_one_line(tmp_path):
    missing = tmp_path / "configs" / "local.toml"
    # Free ports all the same, should the check ever let it start.
    result = rq(
        "start",
        "--config",
        str(missing),
        "--listeners",
        "PLAINTEXT://127.0.0.1:0",
        "--metrics-export-port",
        "0",
        "--schema-registry-listeners",
        "http://127.0.0.1:0",
    )
    assert result.exit_code == 1
    assert f"no config file {missing}" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 3


def test_describe_of_an_unknown_group_is_group_id_not_found(cluster):
    result = rq("groups", "describe", f"no-such-group-{os.getpid()}")
    assert result.exit_code == 1
    assert "GROUP_ID_NOT_FOUND" in result.output and "does not exist" in result.output


def test_acls_without_an_authorizer_are_security_disabled(cluster, admin):
    result = rq("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t")
    assert result.exit_code == 1
    assert "SECURITY_DISABLED" in result.output
    with pytest.raises(SecurityDisabledError):
        admin.describe_acls()


@dataclass
class _ListenersOnly:
    """The part of a Cluster the start banner reads."""

    config: dict
    servers: dict

    def listener_bootstrap_servers(self, listener: str) -> str:
        return self.servers[listener]


def test_start_banner_names_every_listener(monkeypatch):
    printed: list[str] = []
    monkeypatch.setattr(cli_cluster.out, "print", lambda text, **_: printed.append(text))
    fake = _ListenersOnly(
        {
            "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0,MTLS://127.0.0.1:0",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL,MTLS:SSL",
        },
        {"INTERNAL": "127.0.0.1:9101", "EXTERNAL": "127.0.0.1:9102", "MTLS": "127.0.0.1:9103"},
    )
    cli_cluster._listeners_banner(fake)
    assert printed == [
        "Kafka clients (INTERNAL, security.protocol=PLAINTEXT): bootstrap.servers=127.0.0.1:9101",
        "Kafka clients (EXTERNAL, security.protocol=SASL_SSL): bootstrap.servers=127.0.0.1:9102",
        "Kafka clients (MTLS, security.protocol=SSL): bootstrap.servers=127.0.0.1:9103",
    ]


def _help_commands(root, prefix=()):
    yield prefix, root
    for name, sub in getattr(root, "commands", {}).items():
        yield from _help_commands(sub, (*prefix, name))


def test_help_shows_every_option_text_as_written_and_a_version():
    checked = 0
    for path, cmd in _help_commands(command()):
        result = rq(*path, "--help", env={"COLUMNS": "400"})
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, path  # a flag takes no value
        # Markdown would eat <SEP> and <name> as HTML tags: every <word> of a help text shows.
        shown = " ".join(result.output.replace("│", " ").split())
        for param in cmd.params:
            for tag in re.findall(r"<\w+>", getattr(param, "help", None) or ""):
                assert tag in shown, (path, param.name, tag)
                checked += 1
    assert checked >= 3
    result = rq("--version")
    assert result.exit_code == 0 and re.fullmatch(r"rayqueue \S+\n", result.output)


def test_the_shipped_configs_describe_brokers_hosting_replicas():
    for path in sorted((REPO / "configs").glob("*.toml")):
        text = path.read_text()
        assert "worker process" not in text and "replica actor" not in text, path.name
    sasl = (REPO / "configs" / "sasl_ssl.toml").read_text()
    # Debian's kcat cannot do SCRAM (librdkafka 2.0.2): the file tells kcat users PLAIN.
    kcat_lines = [line for line in sasl.splitlines() if "kcat" in line]
    assert kcat_lines and any("PLAIN" in line for line in kcat_lines)


# -- the console -------------------------------------------------------------------


def test_console_api_docs_load_nothing_from_the_network(cluster):
    from fastapi.testclient import TestClient

    from rayqueue.console.app import create_app

    with TestClient(create_app(cluster, sample_interval_s=5), base_url="http://localhost") as client:
        page = client.get("/api/docs")
        assert page.status_code == 200
        assert "/api/overview" in page.text and "/api/openapi.json" in page.text
        assert "<script" not in page.text and "cdn" not in page.text.lower()
        assert not re.search(r"""(src|href)=["']?https?://""", page.text)
        assert client.get("/api/openapi.json").json()["paths"]


def _snapshot(at: float, high_watermark: int, committed: int) -> ClusterSnapshot:
    partition = PartitionView("t", 0, 0, 0, (0,), (0,), (), False, False, 0, high_watermark, high_watermark)
    topic = TopicView("t", "id-t", False, 1, {}, (partition,))
    group = GroupView(
        "g", "Stable", "consumer", "range", 1, (), (GroupOffsetView("t", 0, committed, high_watermark, 0, None),)
    )
    return ClusterSnapshot(time.time(), at, "c", "rayqueue", 1, (), {"t": topic}, {"g": group}, ())


def test_console_rates_average_commits_made_in_bursts(cluster, monkeypatch):
    """A consumer that commits every 6 s while 100 records/s come in: the committed rate is
    ~100/s on every tick, not 0 on most ticks and 300/s on the others."""
    from rayqueue.console.state import ConsoleState

    state = ConsoleState(cluster, sample_interval_s=2.0, metrics_endpoints=lambda: [])
    clock = {"t": 1000.0}
    monkeypatch.setattr(
        state,
        "snapshot",
        lambda max_age_s=None: _snapshot(
            clock["t"], int(100 * (clock["t"] - 1000)), int(600 * ((clock["t"] - 1000) // 6))
        ),
    )
    monkeypatch.setattr(state.metrics, "read", lambda: None)
    committed = []
    try:
        for _ in range(40):  # 80 s of 2-second ticks
            sample = state.sample()
            if sample is not None and clock["t"] - 1000 >= 30:
                committed.append(sample.topic_rates["t"].messages_out)
                assert sample.topic_rates["t"].messages_in == pytest.approx(100)
            clock["t"] += 2.0
    finally:
        state.close()
    assert committed and all(70 <= rate <= 130 for rate in committed), committed
