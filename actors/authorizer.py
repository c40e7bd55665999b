"""The authorizer: Kafka's StandardAuthorizer rules over a set of ACLs (no Ray here).

Authorization is on when the broker key ``authorizer.class.name`` names Kafka's
``org.apache.kafka.metadata.authorizer.StandardAuthorizer``; with it empty everything is
allowed, as a Kafka broker without an authorizer allows everything. When on, for a
principal (``User:alice``) from a host asking to do an operation to a resource:

- a principal listed in ``super.users`` (``User:a;User:b``) may do everything;
- the ACLs that apply are those of the resource's type whose pattern is the LITERAL name,
  the LITERAL ``*``, or a PREFIXED prefix of the name, for the principal or ``User:*``,
  from the host or ``*``;
- an applying DENY for the operation (or ALL) refuses, whatever ALLOWs there are;
- else an applying ALLOW for the operation, ALL, or an operation that implies it (READ,
  WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; only
  ALLOWs imply: a DENY of READ does not deny DESCRIBE) permits;
- else, when the resource has no ACL at all (for anyone), ``allow.everyone.if.no.acl.found``
  (default false) decides; when it has some, the answer is no.

:meth:`StandardAuthorizer.authorize_by_resource_type` is Kafka's
``Authorizer.authorizeByResourceType`` (whether the principal may do the operation to some
resource of the type: idempotent InitProducerId asks it for WRITE on any topic).

ACLs are indexed by resource type, then by literal name and by prefix, so a check costs a
few dictionary lookups (one per distinct prefix length), not a scan of every ACL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from storage.errors import InvalidConfigError

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# Kafka's ZooKeeper-era name for the same rules, still found in older configs.
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
AUTHORIZERS = (STANDARD_AUTHORIZER, ACL_AUTHORIZER)

_ALLOW, _DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
_ALL = AclOperation.ALL
# Which ALLOWed operations also grant the asked one (Kafka's IMPLIES_DESCRIBE / _CONFIGS).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


def parse_super_users(value: Any) -> frozenset[str]:
    """``super.users`` as Kafka reads it: principals separated by semicolons (a list is
    taken as it is); blanks are dropped."""
    if value is None:
        return frozenset()
    items = value.split(";") if isinstance(value, str) else list(value)
    return frozenset(s.strip() for s in items if isinstance(s, str) and s.strip())


def authorizer_enabled(class_name: Any) -> bool:
    """Whether ``authorizer.class.name`` turns authorization on: empty is off, Kafka's
    StandardAuthorizer (or AclAuthorizer) on; any other class is InvalidConfigError (this
    broker cannot load Java classes, and silently allowing everything would be worse)."""
    name = (class_name or "").strip()
    if not name:
        return False
    if name not in AUTHORIZERS:
        raise InvalidConfigError(f"authorizer.class.name={name!r}: only {STANDARD_AUTHORIZER} (or empty) is served")
    return True


@dataclass(slots=True)
class _TypeIndex:
    """The ACLs of one resource type: by literal name, by prefix, and the prefix lengths."""

    literal: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: list[int] = field(default_factory=list)

    def add(self, acl: AclBinding) -> None:
        table = self.literal if acl.pattern_type is PatternType.LITERAL else self.prefixed
        table.setdefault(acl.name, []).append(acl)
        if acl.pattern_type is PatternType.PREFIXED:
            self.prefix_lengths = sorted({len(p) for p in self.prefixed})

    def remove(self, acl: AclBinding) -> None:
        table = self.literal if acl.pattern_type is PatternType.LITERAL else self.prefixed
        found = table.get(acl.name)
        if found is None:
            return
        found.remove(acl)
        if not found:
            del table[acl.name]
            if acl.pattern_type is PatternType.PREFIXED:
                self.prefix_lengths = sorted({len(p) for p in self.prefixed})

    def applying(self, name: str) -> Iterable[list[AclBinding]]:
        """The ACL lists whose pattern applies to ``name``."""
        found = self.literal.get(name)
        if found:
            yield found
        if name != WILDCARD:
            found = self.literal.get(WILDCARD)
            if found:
                yield found
        for length in self.prefix_lengths:
            if length > len(name):
                break
            found = self.prefixed.get(name[:length])
            if found:
                yield found


def _entry_result(acl: AclBinding, principal: str, host: str, op: AclOperation) -> AclPermissionType | None:
    """ALLOW or DENY when ``acl`` applies to this principal, host and operation; None when
    it does not (Kafka's StandardAuthorizerData.findResult; the name already matched)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation is not _ALL:
        if acl.permission is _ALLOW:
            implied = IMPLIED_BY.get(op)
            if implied is not None:
                if acl.operation not in implied:
                    return None
            elif acl.operation is not op:
                return None
        elif acl.operation is not op:
            return None
    return acl.permission


class StandardAuthorizer:
    """Kafka's StandardAuthorizer: ACLs by id, super users, the no-ACL default."""

    def __init__(
        self,
        enabled: bool = True,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[str, AclBinding] = {}
        self._index: dict[ResourceType, _TypeIndex] = {}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> StandardAuthorizer:
        """The authorizer a broker configuration sets (``authorizer.class.name``,
        ``super.users``, ``allow.everyone.if.no.acl.found``), without ACLs yet."""
        return cls(
            authorizer_enabled(config.get("authorizer.class.name", "")),
            parse_super_users(config.get("super.users", "")),
            bool(config.get("allow.everyone.if.no.acl.found", False)),
        )

    # -- the ACLs -------------------------------------------------------------------------

    def add_acl(self, acl_id: str, acl: AclBinding) -> None:
        """Add (or replace) the ACL with this id."""
        self.remove_acl(acl_id)
        self._acls[acl_id] = acl
        self._index.setdefault(acl.resource_type, _TypeIndex()).add(acl)

    def remove_acl(self, acl_id: str) -> None:
        """Remove the ACL with this id (nothing when there is none)."""
        acl = self._acls.pop(acl_id, None)
        if acl is not None:
            self._index[acl.resource_type].remove(acl)

    def replace(self, acls: Mapping[str, AclBinding]) -> None:
        """Take ``acls`` (id -> binding) as the whole set."""
        self._acls = {}
        self._index = {}
        for acl_id, acl in acls.items():
            self.add_acl(acl_id, acl)

    def acls(self, selector: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs a filter selects (all without one)."""
        return [a for a in self._acls.values() if selector is None or selector.matches(a)]

    def __len__(self) -> int:
        return len(self._acls)

    # -- decisions ------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``op`` to the resource."""
        if not self.enabled or principal in self.super_users:
            return True
        index = self._index.get(resource_type)
        if index is None:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        has_acls = False
        for acls in index.applying(name):
            has_acls = True
            for acl in acls:
                result = _entry_result(acl, principal, host, op)
                if result is _DENY:
                    return False
                if result is _ALLOW:
                    allowed = True
        if allowed:
            return True
        return not has_acls and self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(
        self, principal: str, host: str, op: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type may have ``op`` done to it by the principal
        (Kafka's Authorizer.authorizeByResourceType): an ALLOW for the operation or ALL
        (implied operations do not count here) that no DENY covers: a literal ``*`` DENY
        covers everything, a literal DENY its own name, a PREFIXED DENY every name it
        prefixes."""
        # Kafka asks authorize() about a made-up name first, so super users, no authorizer
        # and allow.everyone.if.no.acl.found answer as they do for any resource.
        if self.authorize(principal, host, op, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allows: list[AclBinding] = []
        for acl in self._acls.values():
            if acl.resource_type is not resource_type:
                continue
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation is not op and acl.operation is not _ALL:
                continue
            if acl.permission is _DENY:
                if acl.pattern_type is PatternType.LITERAL and acl.name == WILDCARD:
                    return False
                (deny_literal if acl.pattern_type is PatternType.LITERAL else deny_prefixed).add(acl.name)
            else:
                allows.append(acl)
        if any(a.pattern_type is PatternType.LITERAL and a.name == WILDCARD for a in allows):
            return True
        for acl in allows:
            if acl.pattern_type is PatternType.LITERAL and acl.name in deny_literal:
                continue
            if any(acl.name[:n] in deny_prefixed for n in range(1, len(acl.name) + 1)):
                continue
            return True
        return False


__all__ = [
    "ACL_AUTHORIZER",
    "AUTHORIZERS",
    "IMPLIED_BY",
    "STANDARD_AUTHORIZER",
    "StandardAuthorizer",
    "authorizer_enabled",
    "parse_super_users",
]
