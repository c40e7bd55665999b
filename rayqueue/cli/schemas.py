"""``rayqueue schemas``: the cluster's schema registry (subjects, versions, schemas, compatibility
levels and modes), through the registry actor's own calls (the same state functions its REST
API runs), as the cluster's super user."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import ray
import typer
from rich.table import Table

from actors import launch
from actors.names import SCHEMA_REGISTRY_NAME
from actors.schema_registry.errors import RegistryError
from rayqueue.cli.common import AddressOpt, CliError, NameOpt, connect_cluster, handle_errors, out

schemas_app = typer.Typer(
    help="The schema registry: subjects, versions, schemas, compatibility.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

CALL_TIMEOUT_S = 60.0
SubjectArg = Annotated[str, typer.Argument(help="Subject, e.g. orders-value (TopicNameStrategy: `<topic>-value`).")]


def _registry(name: str, address: str | None) -> Any:
    cluster = connect_cluster(name, address)
    handle = launch.find_actor(SCHEMA_REGISTRY_NAME, cluster.namespace)
    if handle is None:
        raise CliError(
            f"the cluster in namespace {name!r} runs no schema registry (schema.registry.listeners is empty)"
        )
    return handle


def _call(handle: Any, method: str, *args: Any) -> Any:
    try:
        return ray.get(getattr(handle, method).remote(*args), timeout=CALL_TIMEOUT_S)
    except RegistryError as exc:
        raise CliError(f"{exc.error_code}: {exc.message}") from None


@schemas_app.command("list")
@handle_errors
def schemas_list(
    deleted: Annotated[
        bool, typer.Option("--deleted", help="Also subjects whose versions are all soft-deleted.")
    ] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Every subject: its versions, latest schema id and type, and compatibility level."""
    handle = _registry(name, address)
    urls = _call(handle, "urls")
    out.print(f"Schema registry: {', '.join(urls) or 'not listening yet'}")
    rows = _call(handle, "overview")
    table = Table(title="Subjects", title_justify="left")
    for column in ("Subject", "Versions", "Latest id", "Type", "Compatibility"):
        table.add_column(column)
    shown = 0
    for row in rows:
        if not row["versions"] and not deleted:
            continue
        versions = ", ".join(map(str, row["versions"]))
        if deleted and row["deleted_versions"]:
            versions += f" (deleted: {', '.join(map(str, row['deleted_versions']))})"
        table.add_row(row["subject"], versions, str(row["latest_id"]), row["schema_type"], row["compatibility"])
        shown += 1
    if shown:
        out.print(table)
    else:
        out.print("No subjects.")


@schemas_app.command("versions")
@handle_errors
def schemas_versions(
    subject: SubjectArg,
    deleted: Annotated[bool, typer.Option("--deleted", help="Also soft-deleted versions.")] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """A subject's versions."""
    out.print(" ".join(map(str, _call(_registry(name, address), "versions", subject, deleted))))


@schemas_app.command("get")
@handle_errors
def schemas_get(
    subject: Annotated[str | None, typer.Argument(help="Subject (or --id).")] = None,
    version: Annotated[str, typer.Option("--version", "-v", help="Version number or latest.")] = "latest",
    schema_id: Annotated[int | None, typer.Option("--id", help="A schema by its global id instead.")] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """A subject's version (or a schema by id) as the REST API answers it, in JSON."""
    handle = _registry(name, address)
    if schema_id is not None:
        answer = _call(handle, "schema", schema_id)
    elif subject is not None:
        answer = _call(handle, "get_version", subject, version)
    else:
        raise CliError("name a subject or give --id")
    out.print_json(json.dumps(answer))


@schemas_app.command("register")
@handle_errors
def schemas_register(
    subject: SubjectArg,
    file: Annotated[Path, typer.Argument(help="The schema file (.avsc, .json, .proto).", exists=True, dir_okay=False)],
    schema_type: Annotated[
        str | None, typer.Option("--type", "-t", help="AVRO, JSON or PROTOBUF (default: from the file's extension).")
    ] = None,
    reference: Annotated[
        list[str] | None,
        typer.Option("--reference", "-r", help="A reference NAME=SUBJECT:VERSION (repeatable)."),
    ] = None,
    normalize: Annotated[bool, typer.Option("--normalize", help="Normalise the schema before registering.")] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Register a schema from a file under a subject; prints its global id."""
    if schema_type is None:
        schema_type = {".proto": "PROTOBUF", ".json": "JSON"}.get(file.suffix.lower(), "AVRO")
    references = []
    for item in reference or ():
        ref_name, sep, rest = item.partition("=")
        ref_subject, sep2, ref_version = rest.rpartition(":")
        if not (sep and sep2 and ref_name and ref_subject and ref_version.isdigit()):
            raise CliError(f"--reference {item!r}: expected NAME=SUBJECT:VERSION")
        references.append({"name": ref_name, "subject": ref_subject, "version": int(ref_version)})
    text = file.read_text(encoding="utf-8")
    handle = _registry(name, address)
    schema_id = _call(handle, "register", subject, text, schema_type.upper(), references, normalize or None)
    versions = _call(handle, "versions", subject)
    out.print(f"Registered under {subject}: id {schema_id} (versions {', '.join(map(str, versions))}).")


@schemas_app.command("delete")
@handle_errors
def schemas_delete(
    subject: SubjectArg,
    version: Annotated[str | None, typer.Option("--version", "-v", help="Only this version (or latest).")] = None,
    permanent: Annotated[
        bool, typer.Option("--permanent", help="Delete for good (what was soft-deleted before).")
    ] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Soft-delete a subject (or one version); with --permanent delete it for good."""
    handle = _registry(name, address)
    how = "permanently" if permanent else "soft"
    if version is None:
        versions = _call(handle, "delete_subject", subject, permanent)
        out.print(f"Deleted {subject} ({how}): versions {', '.join(map(str, versions))}.")
    else:
        number = _call(handle, "delete_version", subject, version, permanent)
        out.print(f"Deleted {subject} version {number} ({how}).")


@schemas_app.command("config")
@handle_errors
def schemas_config(
    subject: Annotated[str | None, typer.Argument(help="Subject (default: the global level).")] = None,
    level: Annotated[
        str | None,
        typer.Option(
            "--set", help="NONE, BACKWARD, FORWARD, FULL or their _TRANSITIVE forms (without it: show the level)."
        ),
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Show or set the compatibility level (global, or a subject's)."""
    handle = _registry(name, address)
    where = subject if subject is not None else "global"
    if level is not None:
        out.print(f"Compatibility ({where}): {_call(handle, 'set_config', subject, level)}")
    else:
        out.print(f"Compatibility ({where}): {_call(handle, 'get_config', subject)}")


@schemas_app.command("mode")
@handle_errors
def schemas_mode(
    subject: Annotated[str | None, typer.Argument(help="Subject (default: the global mode).")] = None,
    mode: Annotated[
        str | None, typer.Option("--set", help="READWRITE, READONLY or IMPORT (without it: show the mode).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="IMPORT even where schemas exist.")] = False,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Show or set the mode (global, or a subject's)."""
    handle = _registry(name, address)
    where = subject if subject is not None else "global"
    if mode is not None:
        out.print(f"Mode ({where}): {_call(handle, 'set_mode', subject, mode, force)}")
    else:
        out.print(f"Mode ({where}): {_call(handle, 'get_mode', subject)}")
