"""Kafka's ACL types for :meth:`Admin.create_acls`, ``describe_acls`` and ``delete_acls``
(defined in ``actors.acl``, where the controller and the gateways use them)."""

from actors.acl import (
    ANY_ACL,
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from actors.authorizer import STANDARD_AUTHORIZER

__all__ = [
    "ANY_ACL",
    "CLUSTER_NAME",
    "STANDARD_AUTHORIZER",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
]
