"""The ``rayqueue`` command line: start a cluster, manage topics, produce, consume, measure.

Modelled on Kafka's tools (kafka-server-start, kafka-topics, kafka-console-producer,
kafka-console-consumer, kafka-producer-perf-test, kafka-consumer-perf-test). Every
command attaches to a running cluster by Ray namespace (``--name``) through
:func:`rayqueue.connect`; inside a process that already runs Ray (tests, notebooks) it
reuses that Ray. This is the one module that prints; the library only logs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import queue
import random
import signal
import string
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import numpy as np
import ray
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from tqdm import tqdm

from actors.config import load_toml
from actors.protocol import MetadataRequest
from actors.types import ClusterMetadata, TopicPartition
from rayqueue.cluster import Cluster, connect, is_loopback, join_ray, launch, metrics_on_loopback, start_embedded_ray
from rayqueue.console import DEFAULT_HOST as DEFAULT_CONSOLE_HOST
from rayqueue.console import DEFAULT_PORT as DEFAULT_CONSOLE_PORT
from rayqueue.errors import KafkaError, UnknownTopicOrPartitionError, as_kafka_error
from rayqueue.snapshot import (
    LISTENER_PROBE_TIMEOUT_S,
    ClusterSnapshot,
    RateSampler,
    TopicRate,
    listeners_down,
    take_snapshot,
)

if TYPE_CHECKING:
    from rayqueue.console.app import ConsoleServer

logger = logging.getLogger(__name__)

# How long a command waits for the controller actor to appear in the namespace. Short:
# a person typing `rayqueue status` wants to hear quickly that nothing runs there.
CONNECT_TIMEOUT_S = 10.0
DEFAULT_CONFIG = Path("configs/local.toml")
# Where `rayqueue start` listens for Kafka clients unless told otherwise (Kafka's own port).
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
# Where `rayqueue start`'s embedded Ray serves Prometheus metrics (the port Ray's docs use).
DEFAULT_METRICS_EXPORT_PORT = 8080

app = typer.Typer(
    help="rayqueue: a Kafka-style distributed commit log on Ray.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Markdown: docstring paragraphs reflow to the terminal width instead of keeping hard breaks.
    rich_markup_mode="markdown",
)
topics_app = typer.Typer(
    help="Create, list, describe, alter and delete topics.", no_args_is_help=True, rich_markup_mode="markdown"
)
perf_app = typer.Typer(
    help="Throughput and latency tests (kafka-*-perf-test).", no_args_is_help=True, rich_markup_mode="markdown"
)
groups_app = typer.Typer(
    help="List, describe, reset and delete consumer groups.", no_args_is_help=True, rich_markup_mode="markdown"
)
app.add_typer(topics_app, name="topics")
partitions_app = typer.Typer(
    help="Reassign replicas and elect leaders (kafka-reassign-partitions, kafka-leader-election).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
brokers_app = typer.Typer(help="Stop and start brokers.", no_args_is_help=True, rich_markup_mode="markdown")
transactions_app = typer.Typer(
    help="List and describe transactional producers.", no_args_is_help=True, rich_markup_mode="markdown"
)
app.add_typer(groups_app, name="groups")
app.add_typer(partitions_app, name="partitions")
app.add_typer(brokers_app, name="brokers")
app.add_typer(transactions_app, name="transactions")
app.add_typer(perf_app, name="perf")

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


def _quiet_ray() -> None:
    """Keep Ray's own chatter out of the terminal: its INFO lines stay in its log files.

    Authentication is left to Ray's rules (rayqueue.cluster): an embedded Ray keeps Ray's
    default, and joining a cluster uses the token Ray's own tools would find.
    """
    logging.getLogger("ray").setLevel(logging.WARNING)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fail(message: str) -> typer.Exit:
    err.print(Text(message, style="bold red"))
    return typer.Exit(1)


def _handle_errors(fn: F) -> F:
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
                raise _fail(_one_line(f"Error: {type(error).__name__} [{error.kafka_name}]: {message}")) from None
            if isinstance(error, CliError):
                raise _fail(_one_line(f"Error: {error}")) from None
            if isinstance(error, ConnectionError):
                raise _fail(_one_line(f"Error: cannot reach Ray: {error}")) from None
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
def _captured_warnings(logger_name: str) -> Iterator[list[str]]:
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


def _connect(name: str, address: str | None) -> Cluster:
    """Attach to the cluster in namespace ``name``, reusing Ray if this process already runs it."""
    if not ray.is_initialized():
        _quiet_ray()
        # "auto" finds the Ray started on this machine (ray start, or `rayqueue start`);
        # without it ensure_ray would start a fresh, empty Ray and find no cluster.
        address = address or os.environ.get("RAY_ADDRESS") or "auto"
    return connect(name, address=address, timeout_s=CONNECT_TIMEOUT_S)


def _parse_kv(items: Iterable[str] | None, what: str) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; values stay strings (the config layer converts)."""
    result: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        result[key.strip()] = value.strip()
    return result


def _text(data: bytes | None) -> str:
    """Bytes as text for a terminal: UTF-8, undecodable bytes escaped; None as Kafka's 'null'."""
    if data is None:
        return "null"
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="backslashreplace")
    return str(data)


def _topic_partitions(cluster: Cluster, topic: str, partition: int | None) -> list[TopicPartition]:
    meta = cluster.metadata([topic]).topics.get(topic)
    if meta is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    if partition is None:
        return [TopicPartition(topic, p.partition) for p in meta.partitions]
    if not 0 <= partition < len(meta.partitions):
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    return [TopicPartition(topic, partition)]


def _ids(ids: Iterable[int]) -> str:
    return ",".join(map(str, ids))


# -- start / stop / status ----------------------------------------------------------------


@app.command()
@_handle_errors
def start(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="TOML file of Kafka broker keys (default: configs/local.toml if present)."),
    ] = None,
    address: AddressOpt = None,
    foreground: Annotated[
        bool, typer.Option("--foreground", help="Stay attached and shut the cluster down on Ctrl-C / SIGTERM.")
    ] = False,
    name: Annotated[
        str | None, typer.Option("--name", help="Ray namespace (default: rayqueue.namespace of the config).")
    ] = None,
    override: Annotated[
        list[str] | None, typer.Option("--override", "-o", help="Broker config KEY=VALUE over the file (repeatable).")
    ] = None,
    listeners: Annotated[
        str | None,
        typer.Option(
            "--listeners",
            help=f"Kafka protocol listeners of the brokers' gateways (default: the config's, else {DEFAULT_LISTENERS};"
            " consecutive ports per broker; port 0: free ports; '' for none).",
        ),
    ] = None,
    console: Annotated[
        bool,
        typer.Option(
            "--console", help="Also serve the web console (on 127.0.0.1:8088 unless --console-port); stays attached."
        ),
    ] = False,
    console_port: Annotated[int, typer.Option("--console-port", help="Port of --console.")] = DEFAULT_CONSOLE_PORT,
    console_host: Annotated[
        str, typer.Option("--console-host", help="Interface of --console (0.0.0.0: every interface).")
    ] = DEFAULT_CONSOLE_HOST,
    console_allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--console-allowed-host",
            help="A Host name --console answers besides its address, localhost and 127.0.0.1 (repeatable;"
            " also rayqueue.console.allowed.hosts in the config).",
        ),
    ] = None,
    metrics_export_port: Annotated[
        int,
        typer.Option(
            "--metrics-export-port",
            help="Where the embedded Ray serves Prometheus metrics (/metrics); 0: a free port of Ray's choosing."
            " Ignored with --address (that Ray exports wherever it was started to).",
            min=0,
            max=65535,
        ),
    ] = DEFAULT_METRICS_EXPORT_PORT,
    metrics_host: Annotated[
        str | None,
        typer.Option(
            "--metrics-host",
            help="Interface of the embedded Ray's metrics endpoint: 127.0.0.1 (loopback; Ray's own ports too) or"
            " 0.0.0.0 (every interface; Ray's metrics agent binds no single other address). Default: loopback"
            " when every Kafka listener binds a loopback address, else every interface. Ignored with --address.",
        ),
    ] = None,
) -> None:
    """Launch a rayqueue cluster.

    With --address (a Ray cluster started by `ray start --head`) the actors are detached:
    they keep running after this command returns; stop them with `rayqueue stop`.
    Without an address Ray is embedded in this process, so the command stays in the
    foreground until Ctrl-C or SIGTERM, then shuts the cluster down cleanly. With --console
    the command also serves the web console and stays attached until Ctrl-C; a detached
    cluster keeps running after that.
    """
    overrides: dict[str, Any] = _parse_kv(override, "--override")
    if config is None and DEFAULT_CONFIG.exists():
        config = DEFAULT_CONFIG
    values = load_toml(config) if config is not None else {}
    log_dirs = overrides.get("log.dirs", values.get("log.dirs"))
    if log_dirs is not None:
        # Kafka resolves a relative log.dirs against the broker's working directory; the
        # actors run elsewhere, so pin it to the directory the operator ran this in.
        overrides["log.dirs"] = str(Path(log_dirs).expanduser().resolve())
    if name is not None:
        overrides["rayqueue.namespace"] = name
    if listeners is not None:
        overrides["listeners"] = listeners
    elif "listeners" not in overrides and not values.get("listeners"):
        overrides["listeners"] = DEFAULT_LISTENERS

    _quiet_ray()
    embedded = not address
    if embedded:
        # The metrics name every topic and group: they listen where the Kafka listeners do.
        loopback = metrics_on_loopback(overrides.get("listeners", values.get("listeners", ())), metrics_host)
        start_embedded_ray(metrics_export_port=metrics_export_port or None, loopback=loopback)
    else:
        join_ray(address)

    stop = threading.Event()
    server: ConsoleServer | None = None
    try:
        with err.status("starting brokers..."):
            cluster = launch(config if config is not None else values, **overrides)

        def on_signal(signum: int, frame: Any) -> None:
            stop.set()

        if embedded or foreground or console:
            # Replaces ray.init's SIGTERM handler (sys.exit), which would skip the clean
            # shutdown; installed before "ready" is printed so a prompt SIGTERM is ours.
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        info = cluster.describe()
        out.print(
            f"[bold green]rayqueue cluster {info['cluster_id']} ready[/] in namespace "
            f"[bold]{cluster.namespace}[/]: {len(info['brokers'])} brokers, {info['topics']} topics, "
            f"data in {info['data_root']}"
        )
        if cluster.bootstrap_servers:
            out.print(f"Kafka clients: bootstrap.servers={cluster.bootstrap_servers}")
        _metrics_banner(embedded)
        if console:
            hosts = [*cluster.config["rayqueue.console.allowed.hosts"], *(console_allowed_host or ())]
            server = _start_console(cluster, console_host, console_port, hosts)
        if not (embedded or foreground or console):
            out.print("The actors are detached and keep running; stop them with `rayqueue stop`.")
            sys.stdout.flush()
            return
        if embedded:
            # With several Ray instances on one machine "auto" may pick another one, so
            # tell the operator how to reach this one exactly.
            gcs = ray.get_runtime_context().gcs_address
            out.print(f"Ray is embedded in this process at {gcs} (other commands: --address {gcs} or RAY_ADDRESS).")
        if embedded or foreground:
            out.print("Running in the foreground; Ctrl-C or SIGTERM stops the cluster.")
        else:
            out.print("Serving the console; Ctrl-C stops it (the detached cluster keeps running).")
        sys.stdout.flush()  # whoever waits for "ready" reads a pipe, which is block-buffered

        while not stop.wait(0.5):  # a timed wait lets the signal handlers run promptly
            pass
        if server is not None:
            server.stop()
            server = None
        if embedded or foreground:
            out.print("Shutting down...")
            sys.stdout.flush()
            cluster.shutdown()
            out.print("[green]Stopped.[/]")
    finally:
        if server is not None:
            server.stop()
        # Embedded: stops Ray. With --address: only disconnects; detached actors stay up.
        ray.shutdown()


def _metrics_banner(embedded: bool) -> None:
    """Where Prometheus scrapes this node's metrics, and who else can."""
    here = ray.get_runtime_context().get_node_id()
    node = next(n for n in ray.nodes() if n["NodeID"] == here)
    address, port = node["NodeManagerAddress"], node["MetricsExportPort"]
    url = f"http://{f'[{address}]' if ':' in address else address}:{port}/metrics"
    if not embedded:
        where = "this node's; every Ray node exports its own, on the interfaces that Ray was started with"
    elif is_loopback(address):
        where = "loopback only: reachable from this machine alone; --metrics-host 0.0.0.0 opens it to the network"
    else:
        # Ray's metrics agent binds loopback or every interface, nothing in between.
        where = f"every interface, no authentication: anyone who can reach {address} can read it"
    out.print(f"Prometheus metrics: {url} ({where}).")


@app.command("stop")
@_handle_errors
def stop_cluster(
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
    delete_data: Annotated[bool, typer.Option("--delete-data", help="Also delete every partition's data.")] = False,
) -> None:
    """Stop a detached cluster: close every replica cleanly, then the controller."""
    cluster = _connect(name, address)
    cluster.shutdown(delete_data=delete_data)
    out.print(f"Stopped the rayqueue cluster in namespace [bold]{name}[/].")


def _console_banner(server: ConsoleServer, host_option: str = "--host", hosts_option: str = "--allowed-host") -> None:
    where = (
        f"loopback only: reachable from this machine alone; {host_option} 0.0.0.0 opens it to the network"
        if server.host in ("127.0.0.1", "::1", "localhost")
        else f"bound to {server.host}: anyone who can reach this address can change topics and offsets"
    )
    out.print(f"rayqueue console on [bold]{server.url}[/] ({where}).")
    # Browsers are refused under any other name (DNS rebinding); say so before someone tries.
    out.print(
        f"It answers to Host {escape(', '.join(server.allowed_hosts))} (more: {hosts_option}) and accepts changes"
        " only from its own pages (scripts send an Origin header naming it)."
    )


def _start_console(cluster: Cluster, host: str, port: int, allowed_hosts: Iterable[str] = ()) -> ConsoleServer:
    from rayqueue.console.app import ConsoleServer  # the web stack only when asked for

    try:
        server = ConsoleServer(cluster, host, port, extra_hosts=allowed_hosts)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port} for the console: {exc.strerror or exc}") from None
    server.start()
    _console_banner(server, "--console-host", "--console-allowed-host or rayqueue.console.allowed.hosts")
    return server


@app.command("console")
@_handle_errors
def console_command(
    port: Annotated[int, typer.Option("--port", help="Port to serve on (0: a free one).")] = DEFAULT_CONSOLE_PORT,
    host: Annotated[
        str, typer.Option("--host", help="Interface to bind (default loopback; 0.0.0.0: every interface).")
    ] = DEFAULT_CONSOLE_HOST,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A Host name to answer besides the bound address, localhost, 127.0.0.1 and [::1] (repeatable;"
            " *.example.com: a domain; *: any). Other names are refused (DNS rebinding).",
        ),
    ] = None,
    name: Annotated[
        str,
        typer.Option(
            "--name", "--namespace", envvar="RAYQUEUE_NAMESPACE", help="Ray namespace of the rayqueue cluster."
        ),
    ] = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Serve the web console of a running cluster: overview, topics, message browser,
    consumer groups with lag charts, transactions. Foreground until Ctrl-C."""
    from rayqueue.console.app import ConsoleServer  # the web stack only when asked for

    cluster = _connect(name, address)
    try:
        server = ConsoleServer(cluster, host, port, extra_hosts=allowed_host or ())
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    _console_banner(server)
    out.print("Ctrl-C stops it.")
    sys.stdout.flush()
    server.serve()
    out.print("Stopped.")


@app.command()
@_handle_errors
def status(
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="A live view refreshing in place (Ctrl-C to leave).")
    ] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.2, help="Seconds between refreshes of --watch.")] = 2.0,
    count: Annotated[
        int | None, typer.Option("--count", min=1, help="With --watch: stop after this many refreshes.")
    ] = None,
) -> None:
    """Cluster id, controller epoch, brokers, topic/partition counts and unhealthy partitions.

    With --watch: brokers with their partitions and leaders, under-replicated and offline
    partitions in red, messages in/out per second per topic and groups with their lag,
    refreshed in place.
    """
    cluster = _connect(name, address)
    if watch:
        _watch_status(cluster, interval, count)
        return
    info = cluster.describe()
    meta: ClusterMetadata = cluster.metadata()
    node_ip = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()}

    out.print(f"Cluster id:        [bold]{info['cluster_id']}[/]")
    out.print(f"Namespace:         {name}")
    out.print(f"Controller epoch:  {info['controller_epoch']}")
    out.print(f"Data root:         {info['data_root']}")

    brokers = Table(title="Brokers", title_justify="left")
    brokers.add_column("ID", justify="right")
    brokers.add_column("Node")
    brokers.add_column("Data dir", overflow="fold")
    brokers.add_column("Alive")
    for b in sorted(info["brokers"], key=lambda b: b.broker_id):
        alive = "[green]yes[/]" if b.alive else "[red]no[/]"
        brokers.add_row(str(b.broker_id), f"{node_ip.get(b.node_id, '?')} ({b.node_id[:12]})", b.data_dir, alive)
    out.print(brokers)

    partitions = [p for t in meta.topics.values() for p in t.partitions]
    unhealthy = [p for p in partitions if p.offline or p.under_replicated]
    offline = sum(p.offline for p in partitions)
    under = sum(p.under_replicated for p in partitions)
    out.print(f"Topics:            {info['topics']}")
    out.print(f"Partitions:        {info['partitions']}")
    out.print(f"Replica actors:    {info['replica_actors']}")
    out.print(f"Under-replicated:  {'[yellow]' if under else ''}{under}{'[/]' if under else ''}")
    out.print(f"Offline:           {'[red]' if offline else ''}{offline}{'[/]' if offline else ''}")
    if unhealthy:
        table = _partition_table(sorted(unhealthy, key=lambda p: (p.topic, p.partition)), with_topic=True)
        table.title = "Unhealthy partitions"
        out.print(table)


def _watch_status(cluster: Cluster, interval: float, count: int | None) -> None:
    admin = cluster.admin()
    sampler = RateSampler()
    snap = take_snapshot(cluster, admin)
    shown = 0
    # transient=False: the last frame stays on the terminal after Ctrl-C.
    with Live(status_view(snap, sampler.sample(snap)), console=out, auto_refresh=False) as live:
        try:
            while True:
                live.refresh()
                shown += 1
                if count is not None and shown >= count:
                    return
                time.sleep(interval)  # the refresh period of a live view, not a wait on a condition
                snap = take_snapshot(cluster, admin)
                live.update(status_view(snap, sampler.sample(snap)))
        except KeyboardInterrupt:
            pass


def _rate(value: float) -> str:
    return f"{value:,.1f}"


def status_view(snap: ClusterSnapshot, topic_rates: Mapping[str, TopicRate]) -> Group:
    """One frame of ``rayqueue status --watch``: brokers, unhealthy partitions, per-topic
    rates and groups with lag, from one snapshot and the rates since the previous one."""
    when = datetime.fromtimestamp(snap.taken_at).strftime("%H:%M:%S")
    urps, offline = snap.under_replicated, snap.offline
    header = Text.assemble(
        ("rayqueue ", "bold"),
        f"cluster {snap.cluster_id}  namespace {snap.namespace}  controller epoch {snap.controller_epoch}  at {when}\n",
        "Under-replicated partitions: ",
        (str(len(urps)), "bold red" if urps else "green"),
        "   Offline partitions: ",
        (str(len(offline)), "bold red" if offline else "green"),
    )
    parts: list[Any] = [header]

    brokers = Table(title="Brokers", title_justify="left")
    for column in ("ID", "Node", "Alive", "Partitions", "Leaders"):
        brokers.add_column(column, justify="right" if column in ("ID", "Partitions", "Leaders") else "left")
    for b in snap.brokers:
        alive = Text("yes", style="green") if b.alive else Text("no", style="bold red")
        brokers.add_row(
            str(b.broker_id), f"{b.node_address} ({b.node_id[:12]})", alive, str(b.partitions), str(b.leaders)
        )
    parts.append(brokers)

    if urps or offline:
        bad = Table(title="Unhealthy partitions", title_justify="left", style="red")
        for column in ("Topic", "Partition", "Leader", "Replicas", "ISR", "Problem"):
            bad.add_column(column)
        for p in sorted(offline + urps, key=lambda p: (p.topic, p.partition)):
            bad.add_row(
                p.topic,
                str(p.partition),
                str(p.leader) if p.leader >= 0 else "none",
                _ids(p.replicas),
                _ids(p.isr),
                "offline" if p.offline else "under-replicated",
                style="bold red",
            )
        parts.append(bad)

    topics = Table(title="Topics (messages/s)", title_justify="left")
    for column in ("Topic", "Partitions", "High watermarks", "In/s", "Out/s"):
        topics.add_column(column, justify="left" if column == "Topic" else "right")
    for topic in snap.topics.values():
        if topic.internal:
            continue
        rate = topic_rates.get(topic.name)
        topics.add_row(
            topic.name,
            str(len(topic.partitions)),
            f"{topic.high_watermark_sum:,}",
            _rate(rate.messages_in) if rate else "-",
            _rate(rate.messages_out) if rate else "-",
        )
    parts.append(topics)

    groups = Table(title="Consumer groups", title_justify="left")
    for column in ("Group", "State", "Members", "Lag"):
        groups.add_column(column, justify="right" if column in ("Members", "Lag") else "left")
    for group in snap.groups.values():
        lag = Text(f"{group.lag:,}", style="yellow" if group.lag else "")
        groups.add_row(group.group_id, group.state, str(len(group.members)), lag)
    parts.append(groups)
    for error in snap.errors:
        parts.append(Text(f"could not read {error}", style="red"))
    return Group(*parts)


@app.command()
def health(
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the controller.", min=0.1)] = 10.0,
) -> None:
    """Readiness check: exit 0 when the controller answers, no partition is offline and every
    broker's Kafka listener answers an ApiVersions request; otherwise print the reasons and
    exit 1 (for a deployment's probe)."""
    try:
        cluster = _connect(name, address)
        # A bounded wait: a probe must answer, not ride through a long controller restart.
        meta: ClusterMetadata = ray.get(cluster.controller.get_metadata.remote(MetadataRequest()), timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - whatever keeps the controller from answering is the reason
        error = as_kafka_error(exc, what="rayqueue controller")
        raise _fail(
            _one_line(f"unhealthy: the controller of {name!r} does not answer: {type(error).__name__}: {error}")
        ) from None
    problems = []
    offline = sorted(f"{p.topic}-{p.partition}" for t in meta.topics.values() for p in t.partitions if p.offline)
    if offline:
        shown = ", ".join(offline[:20]) + (f" and {len(offline) - 20} more" if len(offline) > 20 else "")
        problems.append(f"unhealthy: {len(offline)} offline partition(s) (no live leader): {shown}")
    # Metadata sends Kafka clients to these addresses: each must really accept them.
    for broker, reason in listeners_down(meta, timeout_s=min(timeout, LISTENER_PROBE_TIMEOUT_S)):
        problems.append(
            _one_line(f"unhealthy: broker {broker.broker_id}'s listener {broker.host}:{broker.port} is down: {reason}")
        )
    if problems:
        for problem in problems[:-1]:
            err.print(Text(problem, style="bold red"))
        raise _fail(problems[-1])
    partitions = sum(len(t.partitions) for t in meta.topics.values())
    listening = sum(1 for b in meta.brokers if b.alive and b.host and b.port > 0)
    out.print(
        f"healthy: controller epoch {meta.controller_epoch}, {partitions} partitions, none offline, "
        f"{listening} listener(s) answering"
    )


def _partition_table(partitions: Iterable[Any], with_topic: bool = False) -> Table:
    table = Table(title_justify="left")
    if with_topic:
        table.add_column("Topic", overflow="fold")
    for column in ("Partition", "Leader", "Epoch"):
        table.add_column(column, justify="right")
    for column in ("Replicas", "ISR", "Offline"):
        table.add_column(column)
    for p in partitions:
        leader = str(p.leader) if p.leader >= 0 else "[red]none[/]"
        isr = _ids(p.isr)
        if p.under_replicated:
            isr = f"[yellow]{isr}[/]"
        row = [str(p.partition), leader, str(p.leader_epoch), _ids(p.replicas), isr, _ids(p.offline_replicas)]
        table.add_row(*([p.topic] if with_topic else []), *row)
    return table


# -- topics -----------------------------------------------------------------------------


@topics_app.command("create")
@_handle_errors
def topics_create(
    topic: Annotated[str, typer.Argument(help="Topic name ([a-zA-Z0-9._-], at most 249 characters).")],
    partitions: Annotated[
        int | None, typer.Option("--partitions", help="Partition count (default: the broker's num.partitions).")
    ] = None,
    replication_factor: Annotated[
        int | None,
        typer.Option("--replication-factor", help="Replicas per partition (default: default.replication.factor)."),
    ] = None,
    config: Annotated[list[str] | None, typer.Option("--config", help="Topic config KEY=VALUE (repeatable).")] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Create a topic (kafka-topics --create)."""
    admin = _connect(name, address).admin()
    with _captured_warnings("rayqueue.admin") as warnings:  # printed below, not through logging
        meta = admin.create_topic(topic, partitions, replication_factor, configs=_parse_kv(config, "--config"))
    rf = len(meta.partitions[0].replicas) if meta.partitions else 0
    out.print(f"Created topic [bold]{topic}[/] ({len(meta.partitions)} partitions, replication factor {rf}).")
    for warning in warnings:
        err.print(Text(f"WARNING: {warning}", style="yellow"))


@topics_app.command("list")
@_handle_errors
def topics_list(
    internal: Annotated[bool, typer.Option("--internal", help="Include internal topics.")] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Topic names, one per line (kafka-topics --list)."""
    for topic in _connect(name, address).admin().list_topics(include_internal=internal):
        typer.echo(topic)


@topics_app.command("describe")
@_handle_errors
def topics_describe(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    all_configs: Annotated[
        bool, typer.Option("--all-configs", help="Show every topic config with its source, not only overrides.")
    ] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Partitions with leader, leader epoch, replicas, ISR and offline replicas (kafka-topics --describe)."""
    admin = _connect(name, address).admin()
    meta = admin.describe_topics([topic]).get(topic)
    if meta is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    rf = len(meta.partitions[0].replicas) if meta.partitions else 0
    overrides = ",".join(f"{k}={v}" for k, v in sorted(meta.configs.items()))
    out.print(
        f"Topic: [bold]{meta.name}[/]\tPartitionCount: {len(meta.partitions)}\tReplicationFactor: {rf}"
        f"\tConfigs: {overrides}" + ("\tInternal: true" if meta.internal else "")
    )
    out.print(_partition_table(meta.partitions))
    if all_configs:
        table = Table(title="Configs", title_justify="left")
        table.add_column("Key")
        table.add_column("Value", overflow="fold")
        table.add_column("Source")
        for key, (value, source) in sorted(admin.describe_configs(topic).items()):
            table.add_row(key, str(value), source)
        out.print(table)


@topics_app.command("delete")
@_handle_errors
def topics_delete(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Delete a topic and its data (kafka-topics --delete)."""
    _connect(name, address).admin().delete_topic(topic)
    out.print(f"Deleted topic [bold]{topic}[/].")


@topics_app.command("alter")
@_handle_errors
def topics_alter(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="Set a topic config KEY=VALUE (repeatable).")] = None,
    delete: Annotated[
        list[str] | None, typer.Option("--delete", help="Remove a topic config override (repeatable).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Set or remove topic config overrides (kafka-configs --alter)."""
    if not set_ and not delete:
        raise typer.BadParameter("give at least one --set KEY=VALUE or --delete KEY")
    admin = _connect(name, address).admin()
    overrides = admin.alter_configs(topic, _parse_kv(set_, "--set"), delete or [])
    shown = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "(none)"
    out.print(f"Updated topic [bold]{topic}[/]; config overrides: {shown}")


@topics_app.command("add-partitions")
@_handle_errors
def topics_add_partitions(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    total: Annotated[int, typer.Option("--total", help="The new partition count (Kafka's --partitions).")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Grow a topic to --total partitions (kafka-topics --alter --partitions)."""
    meta = _connect(name, address).admin().create_partitions(topic, total)
    out.print(f"Topic [bold]{topic}[/] now has {len(meta.partitions)} partitions.")


# -- produce / consume --------------------------------------------------------------------


def _client_config(properties: list[str] | None, what: str, **options: Any) -> dict[str, Any]:
    """Client config from explicit options (when given) and KEY=VALUE properties."""
    config = {key.replace("_", "."): value for key, value in options.items() if value is not None}
    config.update(_parse_kv(properties, what))
    return config


@app.command()
@_handle_errors
def produce(
    topic: Annotated[str, typer.Argument(help="Topic to write to.")],
    key_separator: Annotated[
        str | None,
        typer.Option("--key-separator", help="Split each line into KEY<SEP>VALUE at the first SEP (Kafka: parse.key)."),
    ] = None,
    partition: Annotated[int | None, typer.Option("--partition", help="Write every record to this partition.")] = None,
    compression_type: Annotated[
        str | None, typer.Option("--compression-type", help="none, gzip, snappy, lz4 or zstd.")
    ] = None,
    acks: Annotated[str | None, typer.Option("--acks", help="0, 1 or all.")] = None,
    linger_ms: Annotated[int | None, typer.Option("--linger-ms")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size")] = None,
    producer_property: Annotated[
        list[str] | None, typer.Option("--producer-property", "-X", help="Producer config KEY=VALUE (repeatable).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Send lines from stdin as records: each line a value, or KEY<SEP>VALUE with --key-separator."""
    config = _client_config(
        producer_property,
        "--producer-property",
        compression_type=compression_type,
        acks=acks,
        linger_ms=linger_ms,
        batch_size=batch_size,
    )
    cluster = _connect(name, address)
    sep = key_separator.encode() if key_separator is not None else None
    stdin = getattr(sys.stdin, "buffer", None)
    lines: Iterable[Any] = stdin if stdin is not None else sys.stdin
    failures: list[BaseException] = []
    acked = 0

    def on_done(metadata: Any, error: BaseException | None) -> None:
        nonlocal acked
        if error is not None:
            failures.append(error)
        else:
            acked += 1

    sent = 0
    producer = cluster.producer(config)
    try:
        for number, raw in enumerate(lines, 1):
            line = raw if isinstance(raw, bytes) else raw.encode()
            line = line.rstrip(b"\n").rstrip(b"\r")
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    raise CliError(f"no key separator {key_separator!r} on line {number}: {_text(line)!r}")
            else:
                value = line
            producer.send(topic, value, key=key, partition=partition, callback=on_done)
            sent += 1
            if failures:
                break
    finally:
        producer.close()
    if failures:
        raise failures[0]
    err.print(f"Produced {acked} records to {topic}.")


@app.command()
@_handle_errors
def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the log start offset (default: only new records).")
    ] = False,
    offset: Annotated[
        str | None, typer.Option("--offset", help="Start offset: a number, 'earliest' or 'latest' (every partition).")
    ] = None,
    timestamp: Annotated[
        int | None,
        typer.Option("--timestamp", help="Start at the first record at or after this time (ms since epoch)."),
    ] = None,
    partition: Annotated[int | None, typer.Option("--partition", help="Read only this partition.")] = None,
    max_messages: Annotated[int | None, typer.Option("--max-messages", help="Exit after this many records.")] = None,
    timeout_ms: Annotated[
        int | None, typer.Option("--timeout-ms", help="Exit when no record arrives for this long (default: wait).")
    ] = None,
    format_: Annotated[
        str, typer.Option("--format", help="text (value), kv (key<SEP>value) or json (one object per record).")
    ] = "text",
    key_separator: Annotated[str, typer.Option("--key-separator", help="Separator of --format kv.")] = "\t",
    consumer_property: Annotated[
        list[str] | None, typer.Option("--consumer-property", "-X", help="Consumer config KEY=VALUE (repeatable).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Print records of a topic (kafka-console-consumer, assign mode: no consumer group)."""
    if format_ not in ("text", "kv", "json"):
        raise typer.BadParameter("must be text, kv or json", param_hint="--format")
    if sum((from_beginning, offset is not None, timestamp is not None)) > 1:
        raise typer.BadParameter("use only one of --from-beginning, --offset and --timestamp")
    start_offset: int | None = None
    if offset is not None and offset not in ("earliest", "latest"):
        try:
            start_offset = int(offset)
        except ValueError:
            raise typer.BadParameter("a number, 'earliest' or 'latest'", param_hint="--offset") from None
        if start_offset < 0:
            raise typer.BadParameter("must be >= 0", param_hint="--offset")
    cluster = _connect(name, address)
    consumer = cluster.consumer(_client_config(consumer_property, "--consumer-property"))
    tps = _topic_partitions(cluster, topic, partition)
    consumer.assign(tps)
    if from_beginning or offset == "earliest":
        consumer.seek_to_beginning()
    elif offset == "latest":
        consumer.seek_to_end()
    elif start_offset is not None:
        for tp in tps:
            consumer.seek(tp, start_offset)
    elif timestamp is not None:
        for tp, found in consumer.offsets_for_times({tp: timestamp for tp in tps}).items():
            if found is None:
                consumer.seek_to_end([tp])
            else:
                consumer.seek(tp, found.offset)
    else:
        consumer.seek_to_end()  # fixed now, so records produced from here on are all seen

    count = 0
    last_record = time.monotonic()
    try:
        while max_messages is None or count < max_messages:
            wait_ms = 500 if timeout_ms is None else max(1, min(500, timeout_ms))
            limit = None if max_messages is None else max_messages - count
            records = consumer.poll(wait_ms, max_records=limit)
            if records:
                last_record = time.monotonic()
                lines = [_format_record(r, format_, key_separator) for r in records]
                count += len(lines)
                sys.stdout.write("".join(lines))
                sys.stdout.flush()
            elif timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= timeout_ms:
                break
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    err.print(f"Processed a total of {count} messages")


def _format_record(record: Any, fmt: str, separator: str) -> str:
    if fmt == "text":
        return _text(record.value) + "\n"
    if fmt == "kv":
        return f"{_text(record.key)}{separator}{_text(record.value)}\n"
    obj = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestampType": "LogAppendTime" if record.timestamp_type == 1 else "CreateTime",
        "key": None if record.key is None else _text(record.key),
        "value": None if record.value is None else _text(record.value),
        "headers": {k: None if v is None else _text(v) for k, v in record.headers},
    }
    return json.dumps(obj, ensure_ascii=False) + "\n"


# -- perf ---------------------------------------------------------------------------------


class _ProducerStats:
    """Latency samples and Kafka-style windowed reports (as ProducerPerformance's Stats).

    Completions are recorded by one thread (the producer's sender, or the bulk watcher),
    so no lock is needed; the main thread reads only after the last completion.
    """

    def __init__(self, num_records: int, record_size: int, interval_s: float, report: Callable[[str], None]) -> None:
        self.latencies = np.zeros(num_records, dtype=np.float64)  # ms, by completion order
        self.count = 0
        self.record_size = record_size
        self.interval_s = interval_s
        self.report = report
        self.error: BaseException | None = None
        self.last_completion = time.monotonic()
        self._window_start = time.monotonic()
        self._window_count = 0
        self._window_total = 0.0
        self._window_max = 0.0

    def record(self, latency_ms: float, n: int = 1) -> None:
        """``n`` records completed, each with ``latency_ms``."""
        now = time.monotonic()
        self.latencies[self.count : self.count + n] = latency_ms
        self.count += n
        self.last_completion = now
        self._window_count += n
        self._window_total += latency_ms * n
        self._window_max = max(self._window_max, latency_ms)
        if now - self._window_start >= self.interval_s:
            elapsed = now - self._window_start
            rate = self._window_count / elapsed
            self.report(
                f"{self._window_count} records sent, {rate:.1f} records/sec "
                f"({rate * self.record_size / 1024 / 1024:.2f} MB/sec), "
                f"{self._window_total / self._window_count:.1f} ms avg latency, "
                f"{self._window_max:.1f} ms max latency."
            )
            self._window_start, self._window_count, self._window_total, self._window_max = now, 0, 0.0, 0.0

    def callback(self, sent_at: float) -> Callable[[Any, BaseException | None], None]:
        """A send-future callback that records this record's latency."""

        def done(metadata: Any, error: BaseException | None) -> None:
            if error is not None:
                if self.error is None:
                    self.error = error
                return
            self.record((time.monotonic() - sent_at) * 1000)

        return done

    def summary(self, elapsed_s: float) -> str:
        """Kafka's final line: totals, average/max latency and percentiles."""
        lat = self.latencies[: self.count]
        rate = self.count / elapsed_s if elapsed_s > 0 else 0.0
        p50, p95, p99, p999 = np.percentile(lat, [50, 95, 99, 99.9]) if self.count else (0.0,) * 4
        return (
            f"{self.count} records sent, {rate:f} records/sec ({rate * self.record_size / 1024 / 1024:.2f} MB/sec), "
            f"{lat.mean() if self.count else 0.0:.2f} ms avg latency, {lat.max() if self.count else 0.0:.2f} ms max latency, "
            f"{p50:.2f} ms 50th, {p95:.2f} ms 95th, {p99:.2f} ms 99th, {p999:.2f} ms 99.9th."
        )


class _Throttler:
    """Holds a sender to ``throughput`` records/s (Kafka's ThroughputThrottler); -1: no limit."""

    def __init__(self, throughput: float, start: float) -> None:
        self.throughput = throughput
        self.start = start

    def wait(self, sent: int) -> None:
        if self.throughput <= 0:
            return
        ahead = sent / self.throughput - (time.monotonic() - self.start)
        if ahead > 0.001:
            time.sleep(ahead)  # pacing a load generator, not waiting on a condition


def _progress(total: int, unit: str) -> tqdm:
    # disable=None: shown on a terminal, silent when stderr is a pipe or a test runner.
    return tqdm(total=total, unit=unit, unit_scale=True, file=sys.stderr, disable=None, leave=False, mininterval=0.5)


@perf_app.command("produce")
@_handle_errors
def perf_produce(
    topic: Annotated[str, typer.Argument(help="Topic to write to (created if auto.create.topics.enable).")],
    num_records: Annotated[int, typer.Option("--num-records", min=1, help="Records to send.")],
    record_size: Annotated[int, typer.Option("--record-size", min=0, help="Bytes per record value.")],
    throughput: Annotated[float, typer.Option("--throughput", help="Cap on records/s; -1 for no cap.")] = -1,
    acks: Annotated[str | None, typer.Option("--acks", help="0, 1 or all.")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size")] = None,
    linger_ms: Annotated[int | None, typer.Option("--linger-ms")] = None,
    compression_type: Annotated[str | None, typer.Option("--compression-type")] = None,
    bulk: Annotated[
        bool, typer.Option("--bulk", help="Use send_many (whole batches, per-batch latency) instead of send().")
    ] = False,
    reporting_interval: Annotated[
        int, typer.Option("--reporting-interval", help="Milliseconds between progress lines.")
    ] = 5000,
    producer_props: Annotated[
        list[str] | None,
        typer.Option("--producer-props", "--producer-property", "-X", help="Producer config KEY=VALUE (repeatable)."),
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Measure producer throughput and latency (kafka-producer-perf-test).

    Latency is per record, from send() to its acknowledgement (the future's callback);
    with --bulk it is per send_many() chunk, from the call to the chunk's acknowledgement.
    """
    config = _client_config(
        producer_props,
        "--producer-props",
        acks=acks,
        batch_size=batch_size,
        linger_ms=linger_ms,
        compression_type=compression_type,
    )
    cluster = _connect(name, address)
    producer = cluster.producer(config)
    # Kafka's perf test sends random upper-case letters, one payload reused for all records.
    rng = random.Random(0)
    payload = "".join(rng.choice(string.ascii_uppercase) for _ in range(record_size)).encode()
    stats = _ProducerStats(
        num_records, record_size, reporting_interval / 1000, lambda line: tqdm.write(line, file=sys.stdout)
    )
    try:
        producer.partitions_for(topic)  # metadata (and auto-creation) before the clock starts
        start = time.monotonic()
        throttler = _Throttler(throughput, start)
        with _progress(num_records, "rec") as bar:
            if bulk:
                _perf_send_bulk(producer, topic, payload, num_records, stats, throttler, bar)
            else:
                _perf_send(producer, topic, payload, num_records, stats, throttler, bar)
            producer.flush()
        if stats.error is not None:
            raise stats.error
        elapsed = stats.last_completion - start
    finally:
        producer.close()
    typer.echo(stats.summary(elapsed))


def _perf_send(
    producer: Any, topic: str, payload: bytes, n: int, stats: _ProducerStats, throttler: _Throttler, bar: tqdm
) -> None:
    step = 1000
    for i in range(n):
        producer.send(topic, payload, callback=stats.callback(time.monotonic()))
        if i % step == step - 1:
            bar.update(step)
            if stats.error is not None:
                return
            throttler.wait(i + 1)
    bar.update(n % step)


def _perf_send_bulk(
    producer: Any, topic: str, payload: bytes, n: int, stats: _ProducerStats, throttler: _Throttler, bar: tqdm
) -> None:
    # One chunk is about max.request.size of records: big enough to amortize the call,
    # small enough that per-chunk latency still says something.
    chunk = max(1, producer.config["max.request.size"] // (len(payload) + 16))
    pending: queue.Queue[tuple[Any, float, int] | None] = queue.Queue(maxsize=64)

    def watch() -> None:
        # Waits on chunks in send order, so each completion time is taken when it happens.
        while (item := pending.get()) is not None:
            result, sent_at, count = item
            try:
                result.get()
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                stats.error = stats.error or exc
                continue
            stats.record((time.monotonic() - sent_at) * 1000, count)

    watcher = threading.Thread(target=watch, name="perf-bulk-watcher", daemon=True)
    watcher.start()
    try:
        sent = 0
        while sent < n and stats.error is None:
            count = min(chunk, n - sent)
            sent_at = time.monotonic()
            pending.put((producer.send_many(topic, [payload] * count), sent_at, count))
            sent += count
            bar.update(count)
            throttler.wait(sent)
    finally:
        pending.put(None)
        watcher.join()


@perf_app.command("consume")
@_handle_errors
def perf_consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    messages: Annotated[int, typer.Option("--messages", min=1, help="Records to consume.")],
    timeout_ms: Annotated[
        int, typer.Option("--timeout-ms", help="Give up when no record arrives for this long (Kafka's --timeout).")
    ] = 10000,
    from_latest: Annotated[
        bool, typer.Option("--from-latest", help="Start at the end instead of the beginning.")
    ] = False,
    consumer_property: Annotated[
        list[str] | None, typer.Option("--consumer-property", "-X", help="Consumer config KEY=VALUE (repeatable).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Measure consumer throughput (kafka-consumer-perf-test) and poll latency percentiles."""
    cluster = _connect(name, address)
    consumer = cluster.consumer(_client_config(consumer_property, "--consumer-property"))
    tps = _topic_partitions(cluster, topic, None)
    consumer.assign(tps)
    if from_latest:
        consumer.seek_to_end()
    else:
        consumer.seek_to_beginning()
    count = 0
    nbytes = 0
    polls: list[float] = []  # ms per poll that returned records
    start_wall = end_wall = datetime.now()
    start = last_record = time.monotonic()
    timed_out = False
    try:
        with _progress(messages, "msg") as bar:
            while count < messages:
                t0 = time.monotonic()
                records = consumer.poll(100, max_records=messages - count)
                now = time.monotonic()
                if not records:
                    if (now - last_record) * 1000 >= timeout_ms:
                        timed_out = True
                        break
                    continue
                polls.append((now - t0) * 1000)
                last_record, end_wall = now, datetime.now()
                for r in records:
                    nbytes += (len(r.key) if r.key is not None else 0) + (len(r.value) if r.value is not None else 0)
                count += len(records)
                bar.update(len(records))
    finally:
        consumer.close()
    end = last_record
    if timed_out:
        err.print(
            f"[yellow]WARNING: Exiting before consuming the expected number of messages: "
            f"timeout ({timeout_ms} ms) exceeded.[/]"
        )
    elapsed = max(end - start, 1e-9)
    mb = nbytes / 1024 / 1024
    typer.echo(
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    # Assign mode has no rebalance, so fetch time is the whole run (as Kafka computes it).
    typer.echo(
        f"{_kafka_time(start_wall)}, {_kafka_time(end_wall)}, {mb:.4f}, {mb / elapsed:.4f}, {count}, "
        f"{count / elapsed:.4f}, 0, {elapsed * 1000:.0f}, {mb / elapsed:.4f}, {count / elapsed:.4f}"
    )
    if polls:
        lat = np.asarray(polls)
        p50, p95, p99 = np.percentile(lat, [50, 95, 99])
        typer.echo(
            f"{len(polls)} polls, {lat.mean():.2f} ms avg poll latency, {lat.max():.2f} ms max poll latency, "
            f"{p50:.2f} ms 50th, {p95:.2f} ms 95th, {p99:.2f} ms 99th."
        )


# -- transactions (kafka-transactions) -----------------------------------------------------


@transactions_app.command("list")
@_handle_errors
def transactions_list(
    state: Annotated[list[str] | None, typer.Option("--state", help="Only ids in this state (repeatable).")] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Transactional ids with their producer id and state (kafka-transactions list)."""
    table = Table()
    for column in ("TransactionalId", "ProducerId", "TransactionState"):
        table.add_column(column, justify="right" if column == "ProducerId" else "left")
    listings = _connect(name, address).admin().list_transactions(states=state or None)
    for t in sorted(listings, key=lambda t: t.transactional_id):
        table.add_row(t.transactional_id, str(t.producer_id), t.state)
    out.print(table)


@transactions_app.command("describe")
@_handle_errors
def transactions_describe(
    transactional_id: Annotated[str, typer.Argument(help="Transactional id.")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Producer id and epoch, state, timeout, start time and partitions of one transactional id
    (kafka-transactions describe)."""
    d = _connect(name, address).admin().describe_transactions([transactional_id])[transactional_id]
    started = _kafka_time(datetime.fromtimestamp(d.start_ms / 1000)) if d.start_ms >= 0 else "-"
    # One field per line: topic-partition lists are long and must not wrap mid-name.
    for label, value in (
        ("TransactionalId", d.transactional_id),
        ("ProducerId", d.producer_id),
        ("ProducerEpoch", d.producer_epoch),
        ("TransactionState", d.state),
        ("TransactionTimeoutMs", d.timeout_ms),
        ("TransactionStartTime", started),
        ("Partitions", ", ".join(str(tp) for tp in sorted(d.partitions)) or "-"),
    ):
        typer.echo(f"{label}: {value}")


# -- consumer groups (kafka-consumer-groups) -----------------------------------------------


@groups_app.command("list")
@_handle_errors
def groups_list(name: NameOpt = "rayqueue", address: AddressOpt = None) -> None:
    """Consumer groups with their state (kafka-consumer-groups --list)."""
    table = Table()
    for column in ("Group", "State", "Protocol type"):
        table.add_column(column)
    for group in sorted(_connect(name, address).admin().list_groups(), key=lambda g: g.group_id):
        table.add_row(group.group_id, group.state, group.protocol_type)
    out.print(table)


@groups_app.command("describe")
@_handle_errors
def groups_describe(
    group: Annotated[str, typer.Argument(help="Group id.")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """State, protocol, members with their assignment, and lag per partition (kafka-consumer-groups --describe)."""
    admin = _connect(name, address).admin()
    desc = admin.describe_groups([group])[group]
    out.print(
        f"Group: [bold]{group}[/]\tState: {desc.state}\tProtocol: {desc.protocol or '-'}"
        f"\tGeneration: {desc.generation_id}\tMembers: {len(desc.members)}"
    )
    owner = {}
    members = Table(title="Members", title_justify="left")
    for column in ("Member id", "Instance id", "Client id", "Partitions"):
        members.add_column(column, overflow="fold")
    for member in desc.members:
        for tp in member.assignment:
            owner[tp] = member.member_id
        parts = ", ".join(str(tp) for tp in sorted(member.assignment))
        members.add_row(member.member_id, member.group_instance_id or "-", member.client_id, parts or "-")
    out.print(members)
    lag = Table(title="Offsets", title_justify="left")
    for column in ("Topic", "Partition", "Committed", "Log end", "Lag", "Owner"):
        lag.add_column(column, justify="right" if column in ("Partition", "Committed", "Log end", "Lag") else "left")
    for tp, info in sorted(admin.group_lag(group).items()):
        committed = "-" if info.committed is None else str(info.committed)
        lag.add_row(tp.topic, str(tp.partition), committed, str(info.log_end_offset), str(info.lag), owner.get(tp, "-"))
    out.print(lag)


@groups_app.command("reset-offsets")
@_handle_errors
def groups_reset_offsets(
    group: Annotated[str, typer.Argument(help="Group id (must have no members).")],
    topic: Annotated[list[str], typer.Option("--topic", help="Topic (all its partitions) or topic:partition.")],
    to_earliest: Annotated[bool, typer.Option("--to-earliest")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset")] = None,
    to_timestamp: Annotated[
        int | None, typer.Option("--to-datetime-ms", help="First offset at or after this time (ms).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Move an empty group's committed offsets (kafka-consumer-groups --reset-offsets --execute)."""
    chosen = [to_earliest, to_latest, to_offset is not None, to_timestamp is not None]
    if sum(chosen) != 1:
        raise _fail("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime-ms")
    targets: list[TopicPartition | str] = []
    for item in topic:
        topic_name, _, partition = item.partition(":")
        targets.append(TopicPartition(topic_name, int(partition)) if partition else topic_name)
    kwargs: dict[str, Any] = {}
    if to_earliest or to_latest:
        kwargs["to"] = "earliest" if to_earliest else "latest"
    elif to_offset is not None:
        kwargs["offset"] = to_offset
    else:
        kwargs["timestamp"] = to_timestamp
    result = _connect(name, address).admin().reset_group_offsets(group, targets, **kwargs)
    table = Table()
    for column in ("Topic", "Partition", "New offset"):
        table.add_column(column)
    for tp, offset in sorted(result.items()):
        table.add_row(tp.topic, str(tp.partition), str(offset))
    out.print(table)


@groups_app.command("delete")
@_handle_errors
def groups_delete(
    group: Annotated[list[str], typer.Argument(help="Group ids (must have no members).")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Delete empty groups and their committed offsets."""
    _connect(name, address).admin().delete_groups(group)
    out.print(f"Deleted {len(group)} group(s): {', '.join(group)}")


# -- replication: reassignment, leader election, brokers ------------------------------------


def _parse_tp(text: str) -> TopicPartition:
    topic, sep, partition = text.rpartition(":")
    if not sep or not partition.isdigit():
        raise _fail(f"expected TOPIC:PARTITION, got {text!r}")
    return TopicPartition(topic, int(partition))


@partitions_app.command("reassign")
@_handle_errors
def partitions_reassign(
    moves: Annotated[list[str], typer.Argument(help="TOPIC:PARTITION=BROKER,BROKER,... (first is preferred leader).")],
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until every move has finished.")] = True,
    timeout_s: Annotated[float, typer.Option("--timeout-s")] = 300.0,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Move partitions to new replica sets: new replicas catch up, then the old ones go."""
    plan = {}
    for move in moves:
        where, sep, brokers = move.partition("=")
        if not sep:
            raise _fail(f"expected TOPIC:PARTITION=BROKERS, got {move!r}")
        plan[_parse_tp(where)] = [int(b) for b in brokers.split(",") if b.strip()]
    admin = _connect(name, address).admin()
    admin.alter_partition_reassignments(plan)
    out.print(f"Started {len(plan)} reassignment(s).")
    if not wait:
        return
    deadline = time.monotonic() + timeout_s
    while admin.list_partition_reassignments():
        if time.monotonic() > deadline:
            raise _fail(f"reassignments still running after {timeout_s:.0f}s")
        time.sleep(0.5)
    metadata = admin.describe_topics(sorted({tp.topic for tp in plan}))
    out.print(_partition_table([p for t in metadata.values() for p in t.partitions if p.tp in plan], with_topic=True))


@partitions_app.command("list-reassignments")
@_handle_errors
def partitions_list_reassignments(name: NameOpt = "rayqueue", address: AddressOpt = None) -> None:
    """Reassignments still under way."""
    table = Table()
    for column in ("Partition", "Details"):
        table.add_column(column)
    for tp, info in sorted(_connect(name, address).admin().list_partition_reassignments().items()):
        table.add_row(str(tp), ", ".join(f"{k}={_ids(v)}" for k, v in info.items()))
    out.print(table)


@partitions_app.command("elect-leaders")
@_handle_errors
def partitions_elect_leaders(
    partitions: Annotated[list[str] | None, typer.Argument(help="TOPIC:PARTITION ... (default: all).")] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Preferred-leader election: move leadership back to each partition's first replica."""
    wanted = [_parse_tp(p) for p in partitions] if partitions else None
    results = _connect(name, address).admin().elect_leaders(wanted)
    table = Table()
    for column in ("Partition", "Result"):
        table.add_column(column)
    for tp, reason in sorted(results.items()):
        table.add_row(str(tp), "elected" if reason is None else reason)
    out.print(table)


@brokers_app.command("stop")
@_handle_errors
def brokers_stop(
    broker_id: Annotated[int, typer.Argument(help="Broker id.")], name: NameOpt = "rayqueue", address: AddressOpt = None
) -> None:
    """Stop every replica of one broker cleanly; leadership moves to other in-sync replicas."""
    _connect(name, address).admin().stop_broker(broker_id)
    out.print(f"Broker {broker_id} stopped.")


@brokers_app.command("start")
@_handle_errors
def brokers_start(
    broker_id: Annotated[int, typer.Argument(help="Broker id.")], name: NameOpt = "rayqueue", address: AddressOpt = None
) -> None:
    """Start a stopped broker: its replicas recover from disk and catch up."""
    _connect(name, address).admin().start_broker(broker_id)
    out.print(f"Broker {broker_id} started.")


def _kafka_time(moment: datetime) -> str:
    """Kafka's perf-test date format: yyyy-MM-dd HH:mm:ss:SSS."""
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"


def main() -> None:
    """Entry point of the ``rayqueue`` console script."""
    _quiet_ray()
    app()


if __name__ == "__main__":
    main()
