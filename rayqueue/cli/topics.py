"""``rayqueue topics``: create, list, describe, alter and delete topics (kafka-topics)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from rayqueue.cli.common import (
    AddressOpt,
    NameOpt,
    captured_warnings,
    connect_cluster,
    err,
    handle_errors,
    out,
    parse_kv,
    partition_table,
)
from rayqueue.errors import UnknownTopicOrPartitionError

topics_app = typer.Typer(
    help="Create, list, describe, alter and delete topics.", no_args_is_help=True, rich_markup_mode="markdown"
)


@topics_app.command("create")
@handle_errors
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
    admin = connect_cluster(name, address).admin()
    with captured_warnings("rayqueue.admin") as warnings:  # printed below, not through logging
        meta = admin.create_topic(topic, partitions, replication_factor, configs=parse_kv(config, "--config"))
    rf = len(meta.partitions[0].replicas) if meta.partitions else 0
    out.print(f"Created topic [bold]{topic}[/] ({len(meta.partitions)} partitions, replication factor {rf}).")
    for warning in warnings:
        err.print(Text(f"WARNING: {warning}", style="yellow"))


@topics_app.command("list")
@handle_errors
def topics_list(
    internal: Annotated[bool, typer.Option("--internal", help="Include internal topics.")] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Topic names, one per line (kafka-topics --list)."""
    for topic in connect_cluster(name, address).admin().list_topics(include_internal=internal):
        typer.echo(topic)


@topics_app.command("describe")
@handle_errors
def topics_describe(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    all_configs: Annotated[
        bool, typer.Option("--all-configs", help="Show every topic config with its source, not only overrides.")
    ] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Partitions with leader, leader epoch, replicas, ISR and offline replicas (kafka-topics --describe)."""
    admin = connect_cluster(name, address).admin()
    meta = admin.describe_topics([topic]).get(topic)
    if meta is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    rf = len(meta.partitions[0].replicas) if meta.partitions else 0
    overrides = ",".join(f"{k}={v}" for k, v in sorted(meta.configs.items()))
    out.print(
        f"Topic: [bold]{meta.name}[/]\tPartitionCount: {len(meta.partitions)}\tReplicationFactor: {rf}"
        f"\tConfigs: {overrides}" + ("\tInternal: true" if meta.internal else "")
    )
    out.print(partition_table(meta.partitions))
    if all_configs:
        table = Table(title="Configs", title_justify="left")
        table.add_column("Key")
        table.add_column("Value", overflow="fold")
        table.add_column("Source")
        for key, (value, source) in sorted(admin.describe_configs(topic).items()):
            table.add_row(key, str(value), source)
        out.print(table)


@topics_app.command("delete")
@handle_errors
def topics_delete(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Delete a topic and its data (kafka-topics --delete)."""
    connect_cluster(name, address).admin().delete_topic(topic)
    out.print(f"Deleted topic [bold]{topic}[/].")


@topics_app.command("alter")
@handle_errors
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
    admin = connect_cluster(name, address).admin()
    overrides = admin.alter_configs(topic, parse_kv(set_, "--set"), delete or [])
    shown = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "(none)"
    out.print(f"Updated topic [bold]{topic}[/]; config overrides: {shown}")


@topics_app.command("add-partitions")
@handle_errors
def topics_add_partitions(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    total: Annotated[int, typer.Option("--total", help="The new partition count (Kafka's --partitions).")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Grow a topic to --total partitions (kafka-topics --alter --partitions)."""
    meta = connect_cluster(name, address).admin().create_partitions(topic, total)
    out.print(f"Topic [bold]{topic}[/] now has {len(meta.partitions)} partitions.")
