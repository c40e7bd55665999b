"""``rayqueue start``, ``stop``, ``console``, ``status`` and ``health``: a cluster's lifecycle and state."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import ray
import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from actors.config import broker_config, load_toml
from actors.listeners import listener_protocols
from actors.protocol import MetadataRequest
from actors.types import ClusterMetadata
from rayqueue.cluster import Cluster, is_loopback, join_ray, launch, metrics_on_loopback, start_embedded_ray
from rayqueue.console import DEFAULT_HOST as DEFAULT_CONSOLE_HOST
from rayqueue.console import DEFAULT_PORT as DEFAULT_CONSOLE_PORT
from rayqueue.errors import as_kafka_error
from rayqueue.iceberg import MODE_KEY as ICEBERG_MODE
from rayqueue.iceberg import translation as iceberg_translation
from rayqueue.snapshot import (
    LISTENER_PROBE_TIMEOUT_S,
    PING_TIMEOUT_S,
    ClusterSnapshot,
    RateSampler,
    TopicRate,
    brokers_not_answering,
    listeners_down,
    take_snapshot,
)

if TYPE_CHECKING:
    from rayqueue.console.app import ConsoleServer

from rayqueue.cli.common import (
    DEFAULT_CONFIG,
    DEFAULT_LISTENERS,
    DEFAULT_METRICS_EXPORT_PORT,
    DEFAULT_SCHEMA_REGISTRY_LISTENERS,
    AddressOpt,
    CliError,
    NameOpt,
    connect_cluster,
    err,
    fail,
    handle_errors,
    join_ids,
    one_line,
    out,
    parse_kv,
    partition_table,
    quiet_ray,
)


@handle_errors
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
            help=f"Kafka protocol listeners of the brokers (default: the config's, else {DEFAULT_LISTENERS};"
            " consecutive ports per broker; port 0: free ports; '' for none).",
        ),
    ] = None,
    schema_registry_listeners: Annotated[
        str | None,
        typer.Option(
            "--schema-registry-listeners",
            help="Where the schema registry serves Confluent's REST API (default: the config's"
            f" schema.registry.listeners, else {DEFAULT_SCHEMA_REGISTRY_LISTENERS}; '' for none).",
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
    overrides: dict[str, Any] = parse_kv(override, "--override")
    if config is None and DEFAULT_CONFIG.exists():
        config = DEFAULT_CONFIG
    if config is not None and not config.is_file():
        raise CliError(
            f"no config file {config} (from {Path.cwd()}): give its path, or leave --config out for Kafka's"
            " defaults (the checkout's configs/ has examples)"
        )
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
    if schema_registry_listeners is not None:
        overrides["schema.registry.listeners"] = schema_registry_listeners
    elif "schema.registry.listeners" not in overrides and "schema.registry.listeners" not in values:
        overrides["schema.registry.listeners"] = DEFAULT_SCHEMA_REGISTRY_LISTENERS

    quiet_ray()
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
        _listeners_banner(cluster)
        registry_url = cluster.schema_registry_url
        if registry_url:
            out.print(f"Schema registry: {registry_url} (Confluent's REST API; `rayqueue schemas`)")
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


def _listeners_banner(cluster: Cluster) -> None:
    """Each Kafka listener's bootstrap address with its security protocol, for Kafka clients."""
    config = cluster.config
    protocols = listener_protocols(config["listeners"], config["listener.security.protocol.map"])
    for listener, protocol in protocols.items():
        servers = cluster.listener_bootstrap_servers(listener)
        if servers:
            out.print(f"Kafka clients ({listener}, security.protocol={protocol}): bootstrap.servers={servers}")


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


@handle_errors
def stop_cluster(
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
    delete_data: Annotated[bool, typer.Option("--delete-data", help="Also delete every partition's data.")] = False,
) -> None:
    """Stop a detached cluster: close every replica cleanly, then the controller."""
    cluster = connect_cluster(name, address)
    cluster.shutdown(delete_data=delete_data)
    out.print(f"Stopped the rayqueue cluster in namespace [bold]{name}[/].")


def _console_banner(server: ConsoleServer, host_option: str = "--host", hosts_option: str = "--allowed-host") -> None:
    loopback = server.host in ("127.0.0.1", "::1", "localhost")
    if loopback:
        where = f"loopback only: reachable from this machine alone; {host_option} 0.0.0.0 opens it to the network"
    elif server.login_required:
        where = f"bound to {server.host}: anyone who can reach this address gets its login page"
    else:
        where = f"bound to {server.host}: anyone who can reach this address can change topics and offsets"
    out.print(f"rayqueue console on [bold]{server.url}[/] ({where}).")
    # Browsers are refused under any other name (DNS rebinding); say so before someone tries.
    out.print(
        f"It answers to Host {escape(', '.join(server.allowed_hosts))} (more: {hosts_option}) and accepts changes"
        " only from its own pages (scripts send an Origin header naming it)."
    )
    if server.login_required:
        out.print(
            "The cluster has authentication: the console asks for a SCRAM user's password (`rayqueue users add`)"
            " and acts as that user under the cluster's ACLs."
        )
        if not server.tls and not loopback:
            out.print(
                "[yellow]Without TLS the passwords cross the network in clear text:[/] give the console PEM keys"
                " (ssl.keystore.location in --config, or -o ssl.keystore.location=FILE)."
            )


def _console_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """ConsoleServer's TLS context, session lifetime and trusted proxies from a broker config."""
    from rayqueue.console.app import console_ssl_context  # the web stack only when asked for

    return {
        "ssl_context": console_ssl_context(config),
        "session_lifetime_ms": config["rayqueue.console.session.lifetime.ms"],
        "trusted_proxies": config["rayqueue.console.trusted.proxies"],
    }


def _start_console(cluster: Cluster, host: str, port: int, allowed_hosts: Iterable[str] = ()) -> ConsoleServer:
    from rayqueue.console.app import ConsoleServer  # the web stack only when asked for

    settings = _console_settings(cluster.config)
    try:
        server = ConsoleServer(cluster, host, port, extra_hosts=allowed_hosts, **settings)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port} for the console: {exc.strerror or exc}") from None
    server.start()
    _console_banner(server, "--console-host", "--console-allowed-host or rayqueue.console.allowed.hosts")
    return server


@handle_errors
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
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="The cluster's TOML config: its ssl.keystore.* keys (PEM) make the console serve HTTPS; also"
            " rayqueue.console.allowed.hosts and rayqueue.console.session.lifetime.ms.",
        ),
    ] = None,
    override: Annotated[
        list[str] | None,
        typer.Option(
            "--override",
            "-o",
            help="A config KEY=VALUE over the file (repeatable), e.g. -o ssl.keystore.location=console.pem.",
        ),
    ] = None,
) -> None:
    """Serve the web console of a running cluster: overview, topics, message browser,
    consumer groups with lag charts, transactions. Foreground until Ctrl-C.

    When the cluster has authentication (an authorizer, or SASL listeners) the console asks
    for a SCRAM user's password and acts as that user. With PEM keys in Kafka's names
    (ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key;
    ssl.key.password) it serves HTTPS."""
    from rayqueue.console.app import ConsoleServer  # the web stack only when asked for

    values = load_toml(config) if config is not None else {}
    values.pop("topics", None)  # topics to create at launch: not the console's business
    values.update(parse_kv(override, "--override"))
    settings_config = broker_config(values)
    settings = _console_settings(settings_config)
    hosts = [*settings_config["rayqueue.console.allowed.hosts"], *(allowed_host or ())]
    cluster = connect_cluster(name, address)
    try:
        server = ConsoleServer(cluster, host, port, extra_hosts=hosts, **settings)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    _console_banner(server)
    out.print("Ctrl-C stops it.")
    sys.stdout.flush()
    server.serve()
    out.print("Stopped.")


@handle_errors
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
    cluster = connect_cluster(name, address)
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
    out.print(f"Replicas open:     {info['replicas_open']} in {info['host_actors']} host actors")
    out.print(f"Placement:         {info['placement']} (rayqueue.broker.placement)")
    if info.get("listener_hosts"):
        out.print(f"Kafka listeners:   {info['listener_hosts']}, each in one of its broker's host actors")
    out.print(f"Under-replicated:  {'[yellow]' if under else ''}{under}{'[/]' if under else ''}")
    out.print(f"Offline:           {'[red]' if offline else ''}{offline}{'[/]' if offline else ''}")
    if unhealthy:
        table = partition_table(sorted(unhealthy, key=lambda p: (p.topic, p.partition)), with_topic=True)
        table.title = "Unhealthy partitions"
        out.print(table)
    iceberg = sorted(n for n, t in meta.topics.items() if t.configs.get(ICEBERG_MODE, "disabled") != "disabled")
    if iceberg:
        out.print(iceberg_table(iceberg_translation(iceberg, cluster)))


def iceberg_table(rows: Iterable[Any]) -> Table:
    """The Iceberg topics' translation, a row per partition whose leader translates it
    (``rayqueue.iceberg.PartitionTranslation``s, or the snapshot's dicts of the same fields):
    offsets and seconds behind, records that could not be typed, the last error."""
    table = Table(title="Iceberg topics (translation lag)", title_justify="left")
    for column in ("Topic", "Partition", "Lag", "Lag (s)", "Invalid", "Error"):
        table.add_column(column, justify="left" if column in ("Topic", "Error") else "right", overflow="fold")
    for r in rows:
        r = r if isinstance(r, Mapping) else {k: getattr(r, k) for k in r.__slots__}
        table.add_row(
            r["topic"],
            str(r["partition"]),
            Text(f"{r['lag_records']:,}", style="yellow" if r["lag_records"] else ""),
            f"{r['lag_seconds']:.1f}",
            f"{r['invalid_records']:,}",
            Text(r["error"] or "", style="red"),
        )
    return table


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
                join_ids(p.replicas),
                join_ids(p.isr),
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

    iceberg = [
        {"topic": p.topic, "partition": p.partition, **p.iceberg}
        for t in snap.topics.values()
        for p in t.partitions
        if p.iceberg is not None
    ]
    if iceberg:
        parts.append(iceberg_table(iceberg))

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


def health(
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the controller.", min=0.1)] = 10.0,
) -> None:
    """Readiness check: exit 0 when the controller answers, no partition is offline, every
    broker's Kafka listener answers an ApiVersions request and every broker's process answers a
    ping; otherwise print the reasons and exit 1 (for a deployment's probe)."""
    try:
        cluster = connect_cluster(name, address)
        # A bounded wait: a probe must answer, not ride through a long controller restart.
        meta: ClusterMetadata = ray.get(cluster.controller.get_metadata.remote(MetadataRequest()), timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - whatever keeps the controller from answering is the reason
        error = as_kafka_error(exc, what="rayqueue controller")
        raise fail(
            one_line(f"unhealthy: the controller of {name!r} does not answer: {type(error).__name__}: {error}")
        ) from None
    problems = []
    offline = sorted(f"{p.topic}-{p.partition}" for t in meta.topics.values() for p in t.partitions if p.offline)
    if offline:
        shown = ", ".join(offline[:20]) + (f" and {len(offline) - 20} more" if len(offline) > 20 else "")
        problems.append(f"unhealthy: {len(offline)} offline partition(s) (no live leader): {shown}")
    # Metadata sends Kafka clients to these addresses: each must really accept them.
    for broker, reason in listeners_down(meta, cluster.config, timeout_s=min(timeout, LISTENER_PROBE_TIMEOUT_S)):
        problems.append(
            one_line(f"unhealthy: broker {broker.broker_id}'s listener {broker.host}:{broker.port} is down: {reason}")
        )
    # A listener runs apart from its broker's process: that process must answer too.
    for broker, reason in brokers_not_answering(meta, cluster.namespace, timeout_s=min(timeout, PING_TIMEOUT_S)):
        problems.append(one_line(f"unhealthy: broker {broker.broker_id} does not answer: {reason}"))
    if problems:
        for problem in problems[:-1]:
            err.print(Text(problem, style="bold red"))
        raise fail(problems[-1])
    partitions = sum(len(t.partitions) for t in meta.topics.values())
    listening = sum(1 for b in meta.brokers if b.alive and b.host and b.port > 0)
    out.print(
        f"healthy: controller epoch {meta.controller_epoch}, {partitions} partitions, none offline, "
        f"{listening} listener(s) answering"
    )
