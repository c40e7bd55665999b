"""``rayqueue brokers``: stop and start brokers."""

from __future__ import annotations

from typing import Annotated

import typer

from rayqueue.cli.common import AddressOpt, NameOpt, connect_cluster, handle_errors, out

brokers_app = typer.Typer(help="Stop and start brokers.", no_args_is_help=True, rich_markup_mode="markdown")


@brokers_app.command("stop")
@handle_errors
def brokers_stop(
    broker_id: Annotated[int, typer.Argument(help="Broker id.")], name: NameOpt = "rayqueue", address: AddressOpt = None
) -> None:
    """Stop every replica of one broker cleanly; leadership moves to other in-sync replicas."""
    connect_cluster(name, address).admin().stop_broker(broker_id)
    out.print(f"Broker {broker_id} stopped.")


@brokers_app.command("start")
@handle_errors
def brokers_start(
    broker_id: Annotated[int, typer.Argument(help="Broker id.")], name: NameOpt = "rayqueue", address: AddressOpt = None
) -> None:
    """Start a stopped broker: its replicas recover from disk and catch up."""
    connect_cluster(name, address).admin().start_broker(broker_id)
    out.print(f"Broker {broker_id} started.")
