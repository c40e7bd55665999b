"""What every ``rayqueue`` command shares: the consoles, the common options, attaching to a
cluster, printing errors, and small formatting helpers."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import ray
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from actors.types import TopicPartition
from rayqueue.cluster import Cluster, connect
from rayqueue.errors import KafkaError, UnknownTopicOrPartitionError, as_kafka_error

# How long a command waits for the controller actor to appear in the namespace. Short:
# a person typing `rayqueue status` wants to hear quickly that nothing runs there.
CONNECT_TIMEOUT_S = 10.0
DEFAULT_CONFIG = Path("configs/local.toml")
# Where `rayqueue start` listens for Kafka clients unless told otherwise (Kafka's own port).
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
# Confluent's port: where `rayqueue start` serves the schema registry unless told otherwise.
DEFAULT_SCHEMA_REGISTRY_LISTENERS = "http://127.0.0.1:8081"
# Where `rayqueue start`'s embedded Ray serves Prometheus metrics (the port Ray's docs use).
DEFAULT_METRICS_EXPORT_PORT = 8080

# Rich consoles resolve sys.stdout/sys.stderr on every write, so CliRunner's capture works.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

NameOpt = Annotated[
    str,
    typer.Option("--name", envvar="RAYQUEUE_NAMESPACE", help="Ray namespace of the rayqueue cluster."),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        envvar="RAY_ADDRESS",
        help="Ray cluster address (host:port). Default: RAY_ADDRESS, else the Ray running on this machine.",
    ),
]

F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """A usage problem found by the CLI itself (not a Kafka error); printed without a traceback."""


# -- plumbing ---------------------------------------------------------------------------


def quiet_ray() -> None:
    """Keep Ray's own chatter out of the terminal: its INFO lines stay in its log files.

    Authentication is left to Ray's rules (rayqueue.cluster): an embedded Ray keeps Ray's
    default, and joining a cluster uses the token Ray's own tools would find.
    """
    logging.getLogger("ray").setLevel(logging.WARNING)


def one_line(text: str) -> str:
    """``text`` with its whitespace runs (newlines included) folded to single spaces."""
    return " ".join(text.split())


def fail(message: str) -> typer.Exit:
    """Print ``message`` in red on stderr; the ``typer.Exit(1)`` for the caller to raise."""
    err.print(Text(message, style="bold red"))
    return typer.Exit(1)


def handle_errors(fn: F) -> F:
    """Print Kafka errors (and other expected failures) as one red line; exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter):
            raise
        except Exception as exc:  # noqa: BLE001 - narrowed below, re-raised when unexpected
            # Out of Ray's wrapper (whose str() carries a traceback); a dead actor is a NetworkError.
            error = as_kafka_error(exc, what="rayqueue actor")
            if isinstance(error, KafkaError):
                message = error.args[0] if error.args else ""
                raise fail(one_line(f"Error: {type(error).__name__} [{error.kafka_name}]: {message}")) from None
            if isinstance(error, CliError):
                raise fail(one_line(f"Error: {error}")) from None
            if isinstance(error, ConnectionError):
                raise fail(one_line(f"Error: cannot reach Ray: {error}")) from None
            raise

    return wrapper  # type: ignore[return-value]


class _WarningsOf(logging.Handler):
    """Collects the warning lines of one library logger, for the CLI to print its own way."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def captured_warnings(logger_name: str) -> Iterator[list[str]]:
    """The warnings ``logger_name`` logs meanwhile, kept from the terminal's log output."""
    library = logging.getLogger(logger_name)
    handler, propagate = _WarningsOf(), library.propagate
    library.addHandler(handler)
    library.propagate = False
    try:
        yield handler.messages
    finally:
        library.removeHandler(handler)
        library.propagate = propagate


def connect_cluster(name: str, address: str | None) -> Cluster:
    """Attach to the cluster in namespace ``name``, reusing Ray if this process already runs it."""
    if not ray.is_initialized():
        quiet_ray()
        # "auto" finds the Ray started on this machine (ray start, or `rayqueue start`);
        # without it ensure_ray would start a fresh, empty Ray and find no cluster.
        address = address or os.environ.get("RAY_ADDRESS") or "auto"
    return connect(name, address=address, timeout_s=CONNECT_TIMEOUT_S)


def parse_kv(items: Iterable[str] | None, what: str) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; values stay strings (the config layer converts)."""
    result: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        result[key.strip()] = value.strip()
    return result


def as_text(data: bytes | None) -> str:
    """Bytes as text for a terminal: UTF-8, undecodable bytes escaped; None as Kafka's 'null'."""
    if data is None:
        return "null"
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="backslashreplace")
    return str(data)


def topic_partitions(cluster: Cluster, topic: str, partition: int | None) -> list[TopicPartition]:
    """Every partition of ``topic``, or just ``partition``; a Kafka error when either is missing."""
    meta = cluster.metadata([topic]).topics.get(topic)
    if meta is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    if partition is None:
        return [TopicPartition(topic, p.partition) for p in meta.partitions]
    if not 0 <= partition < len(meta.partitions):
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    return [TopicPartition(topic, partition)]


def join_ids(ids: Iterable[int]) -> str:
    """Broker ids as Kafka's tools print them: ``1,2,3``."""
    return ",".join(map(str, ids))


def partition_table(partitions: Iterable[Any], with_topic: bool = False) -> Table:
    """A table of partitions: leader, epoch, replicas, ISR (yellow when under-replicated), offline."""
    table = Table(title_justify="left")
    if with_topic:
        table.add_column("Topic", overflow="fold")
    for column in ("Partition", "Leader", "Epoch"):
        table.add_column(column, justify="right")
    for column in ("Replicas", "ISR", "Offline"):
        table.add_column(column)
    for p in partitions:
        leader = str(p.leader) if p.leader >= 0 else "[red]none[/]"
        isr = join_ids(p.isr)
        if p.under_replicated:
            isr = f"[yellow]{isr}[/]"
        row = [str(p.partition), leader, str(p.leader_epoch), join_ids(p.replicas), isr, join_ids(p.offline_replicas)]
        table.add_row(*([p.topic] if with_topic else []), *row)
    return table


def client_config(properties: list[str] | None, what: str, **options: Any) -> dict[str, Any]:
    """Client config from explicit options (when given) and KEY=VALUE properties."""
    config = {key.replace("_", "."): value for key, value in options.items() if value is not None}
    config.update(parse_kv(properties, what))
    return config


def kafka_time(moment: datetime) -> str:
    """Kafka's perf-test date format: yyyy-MM-dd HH:mm:ss:SSS."""
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"
