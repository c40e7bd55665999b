"""``rayqueue users``: SCRAM users of the SASL listeners (Kafka's ``kafka-configs
--entity-type users`` with ``--add-config``/``--delete-config 'SCRAM-SHA-512=[...]'``)."""

from __future__ import annotations

from typing import Annotated

import typer

from actors.protocol_security import ScramMechanism
from rayqueue.cli.common import AddressOpt, NameOpt, connect_cluster, handle_errors, out

users_app = typer.Typer(help="SCRAM users of the SASL listeners.", no_args_is_help=True, rich_markup_mode="markdown")

MechanismOpt = Annotated[
    str, typer.Option("--mechanism", help="SCRAM-SHA-256 or SCRAM-SHA-512 (what the clients' sasl.mechanism names).")
]


@users_app.command("add")
@handle_errors
def users_add(
    user: Annotated[str, typer.Argument(help="User name (the principal is `User:<name>`).")],
    password: Annotated[
        str, typer.Option("--password", prompt=True, hide_input=True, confirmation_prompt=True, help="Password.")
    ],
    mechanism: MechanismOpt = "SCRAM-SHA-512",
    iterations: Annotated[int, typer.Option("--iterations", help="PBKDF2 iterations (4096-16384).")] = 4096,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Add a user, or change its password: salted here, kept salted by the controller."""
    connect_cluster(name, address).admin().add_scram_user(user, password, mechanism, iterations)
    out.print(f"User {user} ({mechanism}, {iterations} iterations) saved.")


@users_app.command("list")
@handle_errors
def users_list(name: NameOpt = "rayqueue", address: AddressOpt = None) -> None:
    """Every SCRAM user with its mechanisms and iteration counts."""
    users = connect_cluster(name, address).admin().describe_scram_users()
    if not users:
        out.print("No SCRAM users.")
    for user, infos in users.items():
        mechanisms = ", ".join(f"{ScramMechanism(m).mechanism_name} ({i} iterations)" for m, i in infos)
        out.print(f"{user}: {mechanisms}")


@users_app.command("remove")
@handle_errors
def users_remove(
    user: Annotated[str, typer.Argument(help="User name.")],
    mechanism: Annotated[
        list[str] | None, typer.Option("--mechanism", help="Only this mechanism's credential (repeatable).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Remove a user's credentials (all its mechanisms unless --mechanism names some)."""
    connect_cluster(name, address).admin().remove_scram_user(user, mechanism or None)
    out.print(f"User {user} removed.")
