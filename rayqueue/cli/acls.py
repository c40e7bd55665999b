"""``rayqueue acls``: add, list and remove ACLs with kafka-acls' options.

``add`` creates one ACL per resource, principal, host and operation, as kafka-acls does
(``--allow-host``/``--deny-host`` default to ``*``, ``--operation`` to ALL). ``list`` shows
the ACLs of the named resources (``--resource-pattern-type`` any/match as filters), or all.
``remove`` deletes the ACLs of the named resources, only those of the given principals,
hosts and operations when some are given (an omitted one matches any).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated

import typer

from actors.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from rayqueue.cli.common import AddressOpt, CliError, NameOpt, connect_cluster, handle_errors, out

acls_app = typer.Typer(
    help="Add, list and remove ACLs (kafka-acls).", no_args_is_help=True, rich_markup_mode="markdown"
)

Repeated = list[str] | None
TopicOpt = Annotated[Repeated, typer.Option("--topic", help="A topic (repeatable; * for every topic).")]
GroupOpt = Annotated[Repeated, typer.Option("--group", help="A consumer group (repeatable).")]
TxnOpt = Annotated[Repeated, typer.Option("--transactional-id", help="A transactional id (repeatable).")]
ClusterOpt = Annotated[bool, typer.Option("--cluster", help="The cluster resource (kafka-cluster).")]
PatternOpt = Annotated[
    str,
    typer.Option(
        "--resource-pattern-type",
        help="literal or prefixed (add); also any or match to list or remove (default: literal).",
    ),
]
AllowPrincipalOpt = Annotated[Repeated, typer.Option("--allow-principal", help="e.g. User:alice (repeatable).")]
DenyPrincipalOpt = Annotated[Repeated, typer.Option("--deny-principal", help="e.g. User:mallory (repeatable).")]
AllowHostOpt = Annotated[Repeated, typer.Option("--allow-host", help="An IP address the allow applies to.")]
DenyHostOpt = Annotated[Repeated, typer.Option("--deny-host", help="An IP address the deny applies to.")]
OperationOpt = Annotated[
    Repeated,
    typer.Option(
        "--operation",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
        "DescribeConfigs, AlterConfigs, IdempotentWrite, All (repeatable).",
    ),
]


def _operation(text: str) -> AclOperation:
    """A kafka-acls operation name (``Read``, ``DescribeConfigs``, ``describe-configs``...)."""
    key = "".join(c for c in text if c.isalnum()).upper()
    for op in AclOperation:
        if op.name.replace("_", "") == key and op not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return op
    raise CliError(f"unknown operation {text!r}")


def _pattern(text: str, for_filter: bool) -> PatternType:
    try:
        pattern = PatternType[text.strip().upper()]
    except KeyError:
        raise CliError(f"unknown resource pattern type {text!r}") from None
    allowed = {PatternType.LITERAL, PatternType.PREFIXED}
    if for_filter:
        allowed |= {PatternType.ANY, PatternType.MATCH}
    if pattern not in allowed:
        raise CliError(f"--resource-pattern-type {text} does not apply here")
    return pattern


def _resources(topic: Repeated, group: Repeated, txn: Repeated, cluster: bool) -> list[tuple[ResourceType, str]]:
    out_: list[tuple[ResourceType, str]] = [(ResourceType.TOPIC, t) for t in topic or ()]
    out_ += [(ResourceType.GROUP, g) for g in group or ()]
    out_ += [(ResourceType.TRANSACTIONAL_ID, t) for t in txn or ()]
    if cluster:
        out_.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out_


def _entries(
    allow_principal: Repeated, deny_principal: Repeated, allow_host: Repeated, deny_host: Repeated
) -> list[tuple[str, str, AclPermissionType]]:
    """(principal, host, permission) for every principal and host named."""
    out_ = [(p, h, AclPermissionType.ALLOW) for p in allow_principal or () for h in allow_host or [WILDCARD]]
    out_ += [(p, h, AclPermissionType.DENY) for p in deny_principal or () for h in deny_host or [WILDCARD]]
    return out_


def _print(bindings: list[AclBinding]) -> None:
    by_pattern: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = defaultdict(list)
    for b in bindings:
        by_pattern[(b.resource_type, b.name, b.pattern_type)].append(b)
    for (rtype, name, pattern), found in sorted(by_pattern.items()):
        out.print(
            f"Current ACLs for resource `ResourcePattern(resourceType={rtype.name}, name={name}, "
            f"patternType={pattern.name})`:"
        )
        for b in found:
            out.print(
                f"  (principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                f"permissionType={b.permission.name})"
            )
        out.print("")


@acls_app.command("add")
@handle_errors
def acls_add(
    allow_principal: AllowPrincipalOpt = None,
    deny_principal: DenyPrincipalOpt = None,
    allow_host: AllowHostOpt = None,
    deny_host: DenyHostOpt = None,
    operation: OperationOpt = None,
    topic: TopicOpt = None,
    group: GroupOpt = None,
    transactional_id: TxnOpt = None,
    cluster: ClusterOpt = False,
    resource_pattern_type: PatternOpt = "literal",
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Add ACLs: every principal and host with every operation on every resource named
    (kafka-acls --add)."""
    resources = _resources(topic, group, transactional_id, cluster)
    entries = _entries(allow_principal, deny_principal, allow_host, deny_host)
    if not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not entries:
        raise CliError("name a principal: --allow-principal or --deny-principal")
    pattern = _pattern(resource_pattern_type, for_filter=False)
    ops = [_operation(o) for o in operation or ["All"]]
    bindings = [
        AclBinding.of(rtype, rname, pattern, principal, host, op, perm)
        for rtype, rname in resources
        for principal, host, perm in entries
        for op in ops
    ]
    connect_cluster(name, address).admin().create_acls(bindings)
    out.print(f"Added {len(bindings)} ACL(s).")
    _print(bindings)


@acls_app.command("list")
@handle_errors
def acls_list(
    topic: TopicOpt = None,
    group: GroupOpt = None,
    transactional_id: TxnOpt = None,
    cluster: ClusterOpt = False,
    resource_pattern_type: PatternOpt = "literal",
    principal: Annotated[Repeated, typer.Option("--principal", help="Only this principal's ACLs.")] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """The ACLs of the named resources, or all ACLs (kafka-acls --list)."""
    resources = _resources(topic, group, transactional_id, cluster)
    admin = connect_cluster(name, address).admin()
    pattern = _pattern(resource_pattern_type, for_filter=True)
    principals: list[str | None] = list(principal) if principal else [None]
    if resources:
        filters = [AclBindingFilter.of(rtype, rname, pattern, p) for rtype, rname in resources for p in principals]
    else:
        filters = [AclBindingFilter.of(principal=p) for p in principals]
    found: list[AclBinding] = []
    for f in filters:
        found.extend(b for b in admin.describe_acls(f) if b not in found)
    _print(found)


@acls_app.command("remove")
@handle_errors
def acls_remove(
    allow_principal: AllowPrincipalOpt = None,
    deny_principal: DenyPrincipalOpt = None,
    allow_host: AllowHostOpt = None,
    deny_host: DenyHostOpt = None,
    operation: OperationOpt = None,
    topic: TopicOpt = None,
    group: GroupOpt = None,
    transactional_id: TxnOpt = None,
    cluster: ClusterOpt = False,
    resource_pattern_type: PatternOpt = "literal",
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Remove the ACLs of the named resources; with principals, hosts or operations, only
    theirs (kafka-acls --remove)."""
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    pattern = _pattern(resource_pattern_type, for_filter=True)
    ops: list[AclOperation] = [_operation(o) for o in operation] if operation else [AclOperation.ANY]
    entries: list[tuple[str | None, str | None, AclPermissionType]] = [
        (p, h, AclPermissionType.ALLOW) for p in allow_principal or () for h in allow_host or [None]
    ]
    entries += [(p, h, AclPermissionType.DENY) for p in deny_principal or () for h in deny_host or [None]]
    if not entries:
        entries = [(None, None, AclPermissionType.ANY)]
    filters = [
        AclBindingFilter.of(rtype, rname, pattern, p, h, op, perm)
        for rtype, rname in resources
        for p, h, perm in entries
        for op in ops
    ]
    removed = connect_cluster(name, address).admin().delete_acls(filters)
    out.print(f"Removed {len(removed)} ACL(s).")
    _print(removed)
