"""``rayqueue groups``: list, describe, reset and delete consumer groups (kafka-consumer-groups)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from actors.types import TopicPartition
from rayqueue.cli.common import AddressOpt, NameOpt, connect_cluster, fail, handle_errors, out
from rayqueue.errors import GroupIdNotFoundError

groups_app = typer.Typer(
    help="List, describe, reset and delete consumer groups.", no_args_is_help=True, rich_markup_mode="markdown"
)


@groups_app.command("list")
@handle_errors
def groups_list(name: NameOpt = "rayqueue", address: AddressOpt = None) -> None:
    """Consumer groups with their state (kafka-consumer-groups --list)."""
    table = Table()
    for column in ("Group", "Type", "State", "Protocol type"):
        table.add_column(column)
    for group in sorted(connect_cluster(name, address).admin().list_groups(), key=lambda g: g.group_id):
        table.add_row(group.group_id, group.group_type, group.state, group.protocol_type)
    out.print(table)


@groups_app.command("describe")
@handle_errors
def groups_describe(
    group: Annotated[str, typer.Argument(help="Group id.")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """State, protocol, members with their assignment, and lag per partition (kafka-consumer-groups --describe)."""
    admin = connect_cluster(name, address).admin()
    desc = admin.describe_groups([group])[group]
    if desc.state == "Dead":
        # Dead is how the coordinator describes a group it does not know (no members, no offsets).
        raise GroupIdNotFoundError(f"consumer group {group!r} does not exist")
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
@handle_errors
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
        raise fail("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime-ms")
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
    result = connect_cluster(name, address).admin().reset_group_offsets(group, targets, **kwargs)
    table = Table()
    for column in ("Topic", "Partition", "New offset"):
        table.add_column(column)
    for tp, offset in sorted(result.items()):
        table.add_row(tp.topic, str(tp.partition), str(offset))
    out.print(table)


@groups_app.command("delete")
@handle_errors
def groups_delete(
    group: Annotated[list[str], typer.Argument(help="Group ids (must have no members).")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Delete empty groups and their committed offsets."""
    connect_cluster(name, address).admin().delete_groups(group)
    out.print(f"Deleted {len(group)} group(s): {', '.join(group)}")
