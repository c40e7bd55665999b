"""Kafka's ACL vocabulary: resource types, pattern types, operations, permissions, the ACL
binding and the binding filter (``org.apache.kafka.common.acl`` / ``.resource``), with
Kafka's wire values, so the gateway passes them through and the controller stores them.

An :class:`AclBinding` is one ACL: a resource pattern (type, name, LITERAL or PREFIXED) and
an entry (principal, host, operation, ALLOW or DENY). An :class:`AclBindingFilter` selects
bindings for DescribeAcls and DeleteAcls with Kafka's ANY and MATCH semantics. No Ray here:
the controller, the gateways and the CLI all use these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from storage.errors import InvalidRequestError

WILDCARD = "*"  # a LITERAL resource name matching every name; a host matching every host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the only name of the CLUSTER resource
NAME_MAX = 1000  # a resource name, principal or host longer than this is refused


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType, with its wire values."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's PatternType: LITERAL and PREFIXED patterns; ANY and MATCH only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation, with its wire values (ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    """Kafka's AclPermissionType (ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The resource types an ACL of this cluster may name (delegation tokens and users are not served).
ACL_RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)


def _enum(kind: type[enum.IntEnum], value: Any, what: str) -> Any:
    """``value`` (a member, its wire number or its name) as a member of ``kind``;
    InvalidRequestError for anything else (UNKNOWN, as Kafka reads an unknown code)."""
    if isinstance(value, kind):
        return value
    try:
        if isinstance(value, str):
            return kind[value.strip().upper().replace("-", "_")]
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError
        return kind(value)
    except (KeyError, ValueError, TypeError):
        raise InvalidRequestError(f"unknown {what} {value!r:.40}") from None


def split_principal(principal: str) -> tuple[str, str]:
    """(type, name) of a principal in Kafka's ``Type:name`` form; InvalidRequestError
    when it has no type (Kafka's SecurityUtils.parseKafkaPrincipal)."""
    if not isinstance(principal, str) or ":" not in principal:
        raise InvalidRequestError(f"could not parse principal {principal!r:.80}: expected Type:name, e.g. User:alice")
    kind, name = principal.split(":", 1)
    if not kind or not name:
        raise InvalidRequestError(f"could not parse principal {principal!r:.80}: expected Type:name")
    return kind, name


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequestError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > NAME_MAX:
        raise InvalidRequestError(f"{what} is longer than {NAME_MAX} characters")
    return value


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (Kafka's AclBinding: a ResourcePattern and an AccessControlEntry)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(
        cls,
        resource_type: Any,
        name: Any,
        pattern_type: Any,
        principal: Any,
        host: Any,
        operation: Any,
        permission: Any,
    ) -> AclBinding:
        """A binding as CreateAcls may create one (Kafka's AclControlManager.validateNewAcl
        and the CLUSTER name rule of its AclApis); InvalidRequestError otherwise."""
        rtype = _enum(ResourceType, resource_type, "resource type")
        if rtype not in ACL_RESOURCE_TYPES:
            raise InvalidRequestError(f"invalid resource type {rtype.name} for an ACL")
        ptype = _enum(PatternType, pattern_type, "pattern type")
        if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidRequestError(f"invalid patternType {ptype.name}: an ACL is LITERAL or PREFIXED")
        op = _enum(AclOperation, operation, "operation")
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidRequestError(f"invalid operation {op.name} for an ACL")
        perm = _enum(AclPermissionType, permission, "permission type")
        if perm not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidRequestError(f"invalid permissionType {perm.name} for an ACL")
        name = _text(name, "resource name")
        if not name:
            raise InvalidRequestError("resource name should not be empty")
        if rtype is ResourceType.CLUSTER and name != CLUSTER_NAME:
            raise InvalidRequestError(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        split_principal(_text(principal, "principal"))
        host = _text(host, "host")
        if not host:
            raise InvalidRequestError("host should not be empty (use * for every host)")
        return cls(rtype, name, ptype, principal, host, op, perm)

    def to_record(self) -> dict[str, Any]:
        """The binding's fields as the controller's metadata record stores them."""
        return {
            "resource_type": int(self.resource_type),
            "resource_name": self.name,
            "pattern_type": int(self.pattern_type),
            "principal": self.principal,
            "host": self.host,
            "operation": int(self.operation),
            "permission_type": int(self.permission),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> AclBinding:
        """The binding a checked ``acl`` record carries (InvalidRequestError, a ValueError,
        for one that is no valid ACL: the replay skips it)."""
        return cls.of(
            record["resource_type"],
            record["resource_name"],
            record["pattern_type"],
            record["principal"],
            record["host"],
            record["operation"],
            record["permission_type"],
        )

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name}) on {self.resource_type.name}:{self.pattern_type.name}:{self.name}"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None and ANY match everything; a pattern type of ANY
    matches the name exactly under every pattern type, MATCH every pattern that would
    apply to the named resource (the literal name, the ``*`` wildcard, prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(
        cls,
        resource_type: Any = ResourceType.ANY,
        name: Any = None,
        pattern_type: Any = PatternType.ANY,
        principal: Any = None,
        host: Any = None,
        operation: Any = AclOperation.ANY,
        permission: Any = AclPermissionType.ANY,
    ) -> AclBindingFilter:
        """A filter with its enums converted and checked: an UNKNOWN anywhere is
        InvalidRequestError, as Kafka refuses a filter it cannot read."""
        out = cls(
            _enum(ResourceType, resource_type, "resource type"),
            None if name is None else _text(name, "resource name"),
            _enum(PatternType, pattern_type, "pattern type"),
            None if principal is None else _text(principal, "principal"),
            None if host is None else _text(host, "host"),
            _enum(AclOperation, operation, "operation"),
            _enum(AclPermissionType, permission, "permission type"),
        )
        unknown = [
            what
            for what, value in (
                ("resource type", out.resource_type),
                ("pattern type", out.pattern_type),
                ("operation", out.operation),
                ("permission type", out.permission),
            )
            if value == 0
        ]
        if unknown:
            raise InvalidRequestError(f"the filter has an UNKNOWN {unknown[0]}")
        return out

    def matches(self, acl: AclBinding) -> bool:
        """Whether ``acl`` is one this filter selects (Kafka's AclBindingFilter.matches)."""
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not acl.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern is not acl.pattern_type:
            return False
        if self.name is None:
            return True
        if pattern is PatternType.ANY or pattern is acl.pattern_type:
            return self.name == acl.name
        # MATCH: every pattern that applies to a resource of this name.
        if acl.pattern_type is PatternType.LITERAL:
            return acl.name == self.name or acl.name == WILDCARD
        return self.name.startswith(acl.name)

    def _matches_entry(self, acl: AclBinding) -> bool:
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not acl.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission is acl.permission


ANY_ACL = AclBindingFilter()  # Kafka's AclBindingFilter.ANY

__all__ = [
    "ACL_RESOURCE_TYPES",
    "ANY_ACL",
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "split_principal",
]
