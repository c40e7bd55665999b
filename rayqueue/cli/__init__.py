"""The ``rayqueue`` command line: start a cluster, manage topics, produce, consume, measure.

Modelled on Kafka's tools (kafka-server-start, kafka-topics, kafka-console-producer,
kafka-console-consumer, kafka-producer-perf-test, kafka-consumer-perf-test). Every
command attaches to a running cluster by Ray namespace (``--name``) through
:func:`rayqueue.connect`; inside a process that already runs Ray (tests, notebooks) it
reuses that Ray. This is the one package that prints; the library only logs.

One module per command group (``cluster``: start/stop/console/status/health, ``clients``:
produce/consume, ``topics``, ``groups``, ``partitions``, ``brokers``, ``transactions``,
``acls``, ``perf``, ``users``, ``schemas``), what they share in ``common``; the app is assembled here, in the order ``--help``
lists the commands.
"""

from __future__ import annotations

import importlib.metadata
from typing import Annotated, Any

import typer

from rayqueue.cli import acls, brokers, clients, cluster, groups, partitions, perf, schemas, topics, transactions, users
from rayqueue.cli.cluster import status_view
from rayqueue.cli.common import DEFAULT_LISTENERS, DEFAULT_METRICS_EXPORT_PORT, CliError, quiet_ray

__all__ = ["DEFAULT_LISTENERS", "DEFAULT_METRICS_EXPORT_PORT", "CliError", "app", "command", "main", "status_view"]

app = typer.Typer(
    help="rayqueue: a Kafka-style distributed commit log on Ray.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Markdown: docstring paragraphs reflow to the terminal width instead of keeping hard breaks.
    rich_markup_mode="markdown",
)
app.command("start")(cluster.start)
app.command("stop")(cluster.stop_cluster)
app.command("console")(cluster.console_command)
app.command("status")(cluster.status)
app.command("health")(cluster.health)
app.command("produce")(clients.produce)
app.command("consume")(clients.consume)
app.add_typer(topics.topics_app, name="topics")
app.add_typer(groups.groups_app, name="groups")
app.add_typer(partitions.partitions_app, name="partitions")
app.add_typer(brokers.brokers_app, name="brokers")
app.add_typer(transactions.transactions_app, name="transactions")
app.add_typer(users.users_app, name="users")
app.add_typer(acls.acls_app, name="acls")
app.add_typer(schemas.schemas_app, name="schemas")
app.add_typer(perf.perf_app, name="perf")


def _version(value: bool) -> None:
    if value:
        try:
            version = importlib.metadata.version("rayqueue")
        except importlib.metadata.PackageNotFoundError:  # run from a checkout without installing it
            version = "unknown (not installed)"
        typer.echo(f"rayqueue {version}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", help="Print rayqueue's version and exit.", callback=_version, is_eager=True)
    ] = False,
) -> None:
    """rayqueue: a Kafka-style distributed commit log on Ray."""


def _flag_help_option(make: Any) -> Any:
    def help_option(ctx: Any) -> Any:
        option = make(ctx)
        if option is not None:
            option.metavar = ""
        return option

    return help_option


def command() -> Any:
    """The click command behind ``app``, as the console script runs it.

    An on/off flag takes no value, so its help shows no value type (Typer would show ``<bool>``).
    """
    root = typer.main.get_command(app)
    stack = [root]
    while stack:
        cmd = stack.pop()
        for param in cmd.params:
            if getattr(param, "is_flag", False):  # Typer's own click: its classes, not click's
                param.metavar = ""
        stack.extend(getattr(cmd, "commands", {}).values())
        cmd.get_help_option = _flag_help_option(cmd.get_help_option)  # made anew for each context
    return root


def main() -> None:
    """Entry point of the ``rayqueue`` console script."""
    quiet_ray()
    command()(prog_name="rayqueue")
