"""``rayqueue transactions``: list and describe transactional producers (kafka-transactions)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table

from rayqueue.cli.common import AddressOpt, NameOpt, connect_cluster, handle_errors, kafka_time, out

transactions_app = typer.Typer(
    help="List and describe transactional producers.", no_args_is_help=True, rich_markup_mode="markdown"
)


@transactions_app.command("list")
@handle_errors
def transactions_list(
    state: Annotated[list[str] | None, typer.Option("--state", help="Only ids in this state (repeatable).")] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Transactional ids with their producer id and state (kafka-transactions list)."""
    table = Table()
    for column in ("TransactionalId", "ProducerId", "TransactionState"):
        table.add_column(column, justify="right" if column == "ProducerId" else "left")
    listings = connect_cluster(name, address).admin().list_transactions(states=state or None)
    for t in sorted(listings, key=lambda t: t.transactional_id):
        table.add_row(t.transactional_id, str(t.producer_id), t.state)
    out.print(table)


@transactions_app.command("describe")
@handle_errors
def transactions_describe(
    transactional_id: Annotated[str, typer.Argument(help="Transactional id.")],
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Producer id and epoch, state, timeout, start time and partitions of one transactional id
    (kafka-transactions describe)."""
    d = connect_cluster(name, address).admin().describe_transactions([transactional_id])[transactional_id]
    started = kafka_time(datetime.fromtimestamp(d.start_ms / 1000)) if d.start_ms >= 0 else "-"
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
