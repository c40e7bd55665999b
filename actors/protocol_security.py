"""The controller's security messages, beside :mod:`actors.protocol` (whose conventions they
follow: frozen slotted dataclasses pickled as the tuple of their fields): the ACL requests
(CreateAcls, DeleteAcls, DescribeAcls) and the copy of the ACLs a gateway authorizes with,
and the SCRAM users' requests and credentials.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from actors.acl import AclBinding, AclBindingFilter
from actors.protocol import Message
from storage.errors import KafkaError

# -- controller: ACLs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateAclsRequest(Message):
    """Kafka's CreateAcls: the ACLs to create (an entry the gateway could not read is its
    KafkaError, answered back in its place); answered with None or an error per entry."""

    creations: tuple[AclBinding | KafkaError, ...]
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class DeleteAclsRequest(Message):
    """Kafka's DeleteAcls: answered with, per filter, the ACLs it matched and removed."""

    filters: tuple[AclBindingFilter, ...]
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class DescribeAclsRequest(Message):
    """Kafka's DescribeAcls: answered with the ACLs the filter matches."""

    filter: AclBindingFilter
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class AclsSnapshot(Message):
    """Every ACL by id, at ``version`` (the controller's epoch and its count of ACL
    changes): what a gateway authorizes with."""

    version: tuple[int, int]
    acls: Mapping[str, AclBinding]
    # The broker's authorizer settings, for copies made without the broker configuration:
    # (an authorizer is configured, super.users, allow.everyone.if.no.acl.found).
    settings: tuple[bool, tuple[str, ...], bool] = (False, (), False)


# -- controller: SCRAM users -------------------------------------------------------


class ScramMechanism(enum.IntEnum):
    """Kafka's ScramMechanism, with its wire values."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name (``SCRAM-SHA-256``)."""
        return self.name.replace("_", "-")

    @classmethod
    def of_name(cls, name: str) -> ScramMechanism:
        """The mechanism of a SASL mechanism name (UNKNOWN for any other)."""
        try:
            return cls[name.upper().replace("-", "_")]
        except KeyError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ScramCredentialUpsertion(Message):
    """A user's credential for one mechanism, salted by the client (KIP-554 sends the salt
    and the salted password, never the password)."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class ScramCredentialDeletion(Message):
    """A user's credential for one mechanism, to remove."""

    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class AlterUserScramCredentialsRequest(Message):
    """Kafka's AlterUserScramCredentials: deletions and upsertions, answered per user."""

    deletions: tuple[ScramCredentialDeletion, ...] = ()
    upsertions: tuple[ScramCredentialUpsertion, ...] = ()
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class UserScramCredentialsResult(Message):
    """One user's answer to AlterUserScramCredentials or DescribeUserScramCredentials
    (``credential_infos``: (mechanism, iterations) pairs, for Describe)."""

    user: str
    error_code: int = 0
    error_message: str | None = None
    credential_infos: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeUserScramCredentialsRequest(Message):
    """Kafka's DescribeUserScramCredentials (``users`` None or empty: every user with one)."""

    users: tuple[str, ...] | None = None
    principal: str | None = None  # a native client's, checked against the ACLs (None: a super user)


@dataclass(frozen=True, slots=True)
class ScramCredential(Message):
    """What a server checks a SCRAM client with (RFC 5802): never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


__all__ = [
    "AclsSnapshot",
    "AlterUserScramCredentialsRequest",
    "CreateAclsRequest",
    "DeleteAclsRequest",
    "DescribeAclsRequest",
    "DescribeUserScramCredentialsRequest",
    "ScramCredential",
    "ScramCredentialDeletion",
    "ScramCredentialUpsertion",
    "ScramMechanism",
    "UserScramCredentialsResult",
]
