"""``rayqueue partitions``: reassign replicas and elect leaders (kafka-reassign-partitions, kafka-leader-election)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from actors.types import TopicPartition
from rayqueue.cli.common import (
    AddressOpt,
    NameOpt,
    connect_cluster,
    fail,
    handle_errors,
    join_ids,
    out,
    partition_table,
)

partitions_app = typer.Typer(
    help="Reassign replicas and elect leaders (kafka-reassign-partitions, kafka-leader-election).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def _parse_tp(text: str) -> TopicPartition:
    topic, sep, partition = text.rpartition(":")
    if not sep or not partition.isdigit():
        raise fail(f"expected TOPIC:PARTITION, got {text!r}")
    return TopicPartition(topic, int(partition))


@partitions_app.command("reassign")
@handle_errors
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
            raise fail(f"expected TOPIC:PARTITION=BROKERS, got {move!r}")
        plan[_parse_tp(where)] = [int(b) for b in brokers.split(",") if b.strip()]
    admin = connect_cluster(name, address).admin()
    admin.alter_partition_reassignments(plan)
    out.print(f"Started {len(plan)} reassignment(s).")
    if not wait:
        return
    deadline = time.monotonic() + timeout_s
    while admin.list_partition_reassignments():
        if time.monotonic() > deadline:
            raise fail(f"reassignments still running after {timeout_s:.0f}s")
        time.sleep(0.5)
    metadata = admin.describe_topics(sorted({tp.topic for tp in plan}))
    out.print(partition_table([p for t in metadata.values() for p in t.partitions if p.tp in plan], with_topic=True))


@partitions_app.command("list-reassignments")
@handle_errors
def partitions_list_reassignments(name: NameOpt = "rayqueue", address: AddressOpt = None) -> None:
    """Reassignments still under way."""
    table = Table()
    for column in ("Partition", "Details"):
        table.add_column(column)
    for tp, info in sorted(connect_cluster(name, address).admin().list_partition_reassignments().items()):
        table.add_row(str(tp), ", ".join(f"{k}={join_ids(v)}" for k, v in info.items()))
    out.print(table)


@partitions_app.command("elect-leaders")
@handle_errors
def partitions_elect_leaders(
    partitions: Annotated[list[str] | None, typer.Argument(help="TOPIC:PARTITION ... (default: all).")] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Preferred-leader election: move leadership back to each partition's first replica."""
    wanted = [_parse_tp(p) for p in partitions] if partitions else None
    results = connect_cluster(name, address).admin().elect_leaders(wanted)
    table = Table()
    for column in ("Partition", "Result"):
        table.add_column(column)
    for tp, reason in sorted(results.items()):
        table.add_row(str(tp), "elected" if reason is None else reason)
    out.print(table)
