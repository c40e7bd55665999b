"""Who calls the registry, and what they may do.

Authentication is HTTP basic auth checked against the cluster's SCRAM users: the password is
verified against the salted credential the controller keeps (salt, iterations, stored key
and server key; never the password), as the console's login does. scramp derives the keys
from the password with the credential's salt and iteration count and both are compared in
constant time; an unknown user costs the same derivation against a throw-away credential. A
password verified once is remembered (as a keyed hash, never in clear) while the user's
credential stays the same, for at most ``VERIFIED_TTL_S``, so a client's every request does
not cost a key derivation.

Authorization uses the cluster's ACLs (Kafka's StandardAuthorizer: ``super.users``,
``allow.everyone.if.no.acl.found``) with Kafka's resource types: a subject is checked as the
TOPIC resource of the same name (a PREFIXED topic ACL on ``orders`` also covers the subjects
``orders-key`` and ``orders-value`` of TopicNameStrategy), the registry-wide settings as the
CLUSTER resource. Operations: READ a subject's schemas (and look one up, or test one for
compatibility), WRITE (register), DELETE, DESCRIBE (list it and its versions),
DESCRIBE_CONFIGS / ALTER_CONFIGS (its compatibility level and mode; on CLUSTER: the global
ones). A schema by id is readable by whoever may READ a subject that holds it. Redpanda's
registry has two resource types of its own (``subject`` and ``registry``) with the same
operations; rayqueue keeps Kafka's resource types so that Kafka's tools and clients manage
these ACLs as they are.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from scramp import ScramException, ScramMechanism

from actors.acl import CLUSTER_NAME, AclOperation, ResourceType
from actors.clock import SYSTEM, Clock
from actors.protocol_security import ScramCredential
from actors.schema_registry import errors

MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
VERIFIED_TTL_S = 60.0
MAX_VERIFIED = 10000
MAX_HEADER = 8192

SUBJECT = ResourceType.TOPIC
REGISTRY = ResourceType.CLUSTER
REGISTRY_NAME = CLUSTER_NAME

Credentials = Callable[[str, str], Awaitable[ScramCredential | None]]


def _matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    try:
        _, stored_key, server_key, _ = ScramMechanism(mechanism).make_auth_info(
            password, credential.iterations, credential.salt
        )
    except ScramException:
        return False
    stored_ok = hmac.compare_digest(stored_key, credential.stored_key)
    server_ok = hmac.compare_digest(server_key, credential.server_key)
    return stored_ok and server_ok


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``(user, password)`` of an ``Authorization: Basic ...`` header, or None."""
    if not header or len(header) > MAX_HEADER:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep and user else None


class BasicAuthenticator:
    """Checks basic-auth credentials against SCRAM credentials (see the module docstring)."""

    def __init__(self, credentials: Credentials, clock: Clock = SYSTEM) -> None:
        self._credentials = credentials
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[tuple[str, bytes], tuple[bytes, float]] = OrderedDict()
        salt, stored, server, iterations = ScramMechanism(MECHANISMS[0]).make_auth_info(secrets.token_urlsafe(32))
        self._decoy = ScramCredential(salt, stored, server, iterations)

    async def principal(self, header: str | None) -> str:
        """``User:<name>`` for a valid ``Authorization`` header; 401 otherwise."""
        parsed = parse_basic(header)
        if parsed is None:
            raise errors.unauthorized()
        user, password = parsed
        found = None
        for mechanism in MECHANISMS:
            credential = await self._credentials(user, mechanism)
            if isinstance(credential, ScramCredential):
                found = (mechanism, credential)
                break
        mechanism, credential = found if found is not None else (MECHANISMS[0], self._decoy)
        digest = hmac.new(self._key, password.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        now = self._clock.monotonic()
        remembered = self._verified.get((user, digest))
        if found is not None and remembered is not None and remembered[0] == credential.stored_key:
            if now < remembered[1]:
                return f"User:{user}"
        ok = await asyncio.to_thread(_matches, mechanism, credential, password)
        if not ok or found is None:
            raise errors.unauthorized()
        self._verified[(user, digest)] = (credential.stored_key, now + VERIFIED_TTL_S)
        while len(self._verified) > MAX_VERIFIED:
            self._verified.popitem(last=False)
        return f"User:{user}"


class Access:
    """The ACL checks of one caller (``principal`` None: no authentication, everything allowed)."""

    def __init__(self, authorizer: Any, principal: str | None, host: str) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host

    def allowed(self, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether the caller may do ``op`` to the resource."""
        if self.principal is None or self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, op, resource_type, name)

    def subject(self, op: AclOperation, subject: str) -> None:
        """403 unless the caller may do ``op`` to ``subject``."""
        if not self.allowed(op, SUBJECT, subject):
            raise errors.forbidden(str(self.principal), op.name, f"Subject:{subject}")

    def registry(self, op: AclOperation) -> None:
        """403 unless the caller may do ``op`` to the registry-wide settings."""
        if not self.allowed(op, REGISTRY, REGISTRY_NAME):
            raise errors.forbidden(str(self.principal), op.name, "Registry")


OPEN = Access(None, None, "*")
