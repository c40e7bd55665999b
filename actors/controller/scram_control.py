"""SCRAM users (Kafka's ``ScramControlManager``): each user's credential per mechanism,
stored salted in the metadata log, so a restarted controller still knows every user.

A credential is what RFC 5802 lets a server keep: the salt, the iteration count, the stored
key ``H(HMAC(SaltedPassword, "Client Key"))`` and the server key ``HMAC(SaltedPassword,
"Server Key")``. The client salts the password (KIP-554's AlterUserScramCredentials carries
the salt and the salted password); the password itself never reaches rayqueue, and the
salted password is not kept either. Requests are checked and answered as Kafka does, per
user: one bad alteration of a user refuses all of that user's alterations in the request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from typing import Any

from actors.controller import records
from actors.controller.records import ControllerResult
from actors.protocol_security import (
    AlterUserScramCredentialsRequest,
    ScramCredential,
    ScramMechanism,
    UserScramCredentialsResult,
)
from storage.errors import (
    DuplicateResourceError,
    KafkaError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)

# Kafka's ScramMechanism bounds (the same for SHA-256 and SHA-512).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_HASHES = {ScramMechanism.SCRAM_SHA_256: hashlib.sha256, ScramMechanism.SCRAM_SHA_512: hashlib.sha512}


def credential_of(mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    """The stored and server keys of a salted password (RFC 5802, section 3)."""
    digest = _HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return ScramCredential(salt, digest(client_key).digest(), server_key, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class ScramControlManager:
    """user -> mechanism -> credential, rebuilt by :meth:`replay`."""

    def __init__(self) -> None:
        self.credentials: dict[str, dict[ScramMechanism, ScramCredential]] = {}

    def replay(self, record: dict[str, Any]) -> None:
        """Apply a checked ``user_scram_credential`` or ``remove_user_scram_credential``
        record (ValueError: an unknown mechanism, or a key that is not base64)."""
        mechanism = ScramMechanism.of_name(record["mechanism"])
        if mechanism is ScramMechanism.UNKNOWN:
            raise ValueError(f"unknown SCRAM mechanism {record['mechanism']!r:.40}")
        name = record["name"]
        if record["type"] == "remove_user_scram_credential":
            by_mechanism = self.credentials.get(name, {})
            by_mechanism.pop(mechanism, None)
            if not by_mechanism:
                self.credentials.pop(name, None)
            return
        credential = ScramCredential(
            base64.b64decode(record["salt"], validate=True),
            base64.b64decode(record["stored_key"], validate=True),
            base64.b64decode(record["server_key"], validate=True),
            record["iterations"],
        )
        self.credentials.setdefault(name, {})[mechanism] = credential

    # -- changes --------------------------------------------------------------------------

    def alter(self, request: AlterUserScramCredentialsRequest) -> ControllerResult[list[UserScramCredentialsResult]]:
        """Kafka's AlterUserScramCredentials: the records of every user whose alterations
        all pass, and one result per user named (in the order first named)."""
        users: dict[str, list[tuple[str, Any]]] = {}
        for deletion in request.deletions:
            users.setdefault(deletion.name, []).append(("delete", deletion))
        for upsertion in request.upsertions:
            users.setdefault(upsertion.name, []).append(("upsert", upsertion))
        out: list[dict[str, Any]] = []
        results = []
        for user, alterations in users.items():
            try:
                user_records = self._alter_user(user, alterations)
            except KafkaError as exc:
                results.append(UserScramCredentialsResult(user, exc.code, str(exc.args[0]) if exc.args else None))
                continue
            out.extend(user_records)
            results.append(UserScramCredentialsResult(user))
        return ControllerResult(out, results)

    def _alter_user(self, user: str, alterations: list[tuple[str, Any]]) -> list[dict[str, Any]]:
        if not isinstance(user, str) or not user:
            raise UnacceptableCredentialError("Username must not be empty")
        seen: set[int] = set()
        out = []
        for kind, alteration in alterations:
            mechanism = _mechanism(alteration.mechanism)
            if mechanism in seen:
                raise DuplicateResourceError("A user credential cannot be altered twice in the same request")
            seen.add(mechanism)
            if kind == "delete":
                if mechanism not in self.credentials.get(user, {}):
                    raise ResourceNotFoundError("Attempt to delete a user credential that does not exist")
                out.append(records.remove_user_scram_credential(user, mechanism.mechanism_name))
                continue
            iterations = alteration.iterations
            if type(iterations) is not int or iterations < MIN_ITERATIONS:
                raise UnacceptableCredentialError("Too few iterations")
            if iterations > MAX_ITERATIONS:
                raise UnacceptableCredentialError("Too many iterations")
            if not isinstance(alteration.salt, bytes) or not isinstance(alteration.salted_password, bytes):
                raise UnacceptableCredentialError("The salt and the salted password must be bytes")
            if not alteration.salt or not alteration.salted_password:
                raise UnacceptableCredentialError("The salt and the salted password must not be empty")
            credential = credential_of(mechanism, alteration.salt, alteration.salted_password, iterations)
            out.append(
                records.user_scram_credential(
                    user,
                    mechanism.mechanism_name,
                    _b64(credential.salt),
                    _b64(credential.stored_key),
                    _b64(credential.server_key),
                    iterations,
                )
            )
        return out

    # -- queries --------------------------------------------------------------------------

    def describe(self, users: Iterable[str] | None) -> list[UserScramCredentialsResult]:
        """Kafka's DescribeUserScramCredentials: every user with a credential (``users``
        None or empty), or the named ones (RESOURCE_NOT_FOUND for one without, and
        DUPLICATE_RESOURCE for one named twice)."""
        names = list(users or ())
        if not names:
            return [self._describe_one(user) for user in sorted(self.credentials)]
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        results = []
        for name in counts:
            if counts[name] > 1:
                message = "Cannot describe SCRAM credentials for the same user twice in a single request"
                results.append(UserScramCredentialsResult(name, DuplicateResourceError.code, message))
            elif name not in self.credentials:
                message = "Attempt to describe a user credential that does not exist"
                results.append(UserScramCredentialsResult(name, ResourceNotFoundError.code, message))
            else:
                results.append(self._describe_one(name))
        return results

    def _describe_one(self, user: str) -> UserScramCredentialsResult:
        infos = tuple(sorted((int(m), c.iterations) for m, c in self.credentials[user].items()))
        return UserScramCredentialsResult(user, credential_infos=infos)

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential a server checks ``user`` with, for a SASL mechanism name."""
        return self.credentials.get(user, {}).get(ScramMechanism.of_name(mechanism))


def _mechanism(value: Any) -> ScramMechanism:
    try:
        mechanism = ScramMechanism(value)
    except ValueError:
        mechanism = ScramMechanism.UNKNOWN
    if mechanism is ScramMechanism.UNKNOWN:
        raise UnsupportedSaslMechanismError("Unknown SCRAM mechanism")
    return mechanism
