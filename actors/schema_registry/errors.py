"""Confluent Schema Registry's errors: an HTTP status and an ``error_code`` in a JSON body.

Every refusal of the registry is a :class:`RegistryError` whose body is Confluent's
``{"error_code": 42201, "message": "..."}``; the REST layer answers it as it is, so the
serializers of confluent-kafka and the other clients see the codes they know
(``SchemaRegistryError.error_code``). The codes are Confluent's (``io.confluent.kafka.
schemaregistry.rest.exceptions.Errors``).
"""

from __future__ import annotations

from typing import Any

# Confluent's error codes.
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
SCHEMA_VERSION_SOFT_DELETED = 40406
SCHEMA_VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_DOES_NOT_MATCH = 42207
INVALID_SUBJECT = 42208
SCHEMA_TOO_LARGE = 42209
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
UNAUTHORIZED = 401
FORBIDDEN = 40301
BAD_REQUEST = 400
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
PAYLOAD_TOO_LARGE = 413
UNSUPPORTED_MEDIA_TYPE = 415
INTERNAL_ERROR = 500


class RegistryError(Exception):
    """A refusal with Confluent's HTTP status and error code; pickles (Ray re-raises it)."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(status, error_code, message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, Any]:
        """The JSON body Confluent answers."""
        return {"error_code": self.error_code, "message": self.message}

    def __str__(self) -> str:
        return f"{self.error_code}: {self.message}"


def subject_not_found(subject: str) -> RegistryError:
    """40401: no such subject (or only soft-deleted versions when those are not asked for)."""
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: Any) -> RegistryError:
    """40402: the subject has no such version."""
    return RegistryError(404, VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    """40403: no schema with that id (or that content, for a lookup)."""
    return RegistryError(404, SCHEMA_NOT_FOUND, detail)


def subject_soft_deleted(subject: str) -> RegistryError:
    """40404: the subject was soft-deleted already."""
    return RegistryError(
        404,
        SUBJECT_SOFT_DELETED,
        f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently",
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    """40405: a permanent delete of a subject that was not soft-deleted first."""
    return RegistryError(
        404,
        SUBJECT_NOT_SOFT_DELETED,
        f"Subject '{subject}' was not deleted first before being permanently deleted",
    )


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    """40406: the version was soft-deleted already."""
    return RegistryError(
        404,
        SCHEMA_VERSION_SOFT_DELETED,
        f"Subject '{subject}' Version {version} was soft deleted. Set permanent=true to delete permanently",
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    """40407: a permanent delete of a version that was not soft-deleted first."""
    return RegistryError(
        404,
        SCHEMA_VERSION_NOT_SOFT_DELETED,
        f"Subject '{subject}' Version {version} was not deleted first before being permanently deleted",
    )


def invalid_schema(detail: str) -> RegistryError:
    """42201: the schema does not parse, or its type or references are wrong."""
    return RegistryError(422, INVALID_SCHEMA, f"Invalid schema: {detail}")


def invalid_version(version: Any) -> RegistryError:
    """42202: not a version number, ``latest`` or -1."""
    text = str(version)
    return RegistryError(
        422,
        INVALID_VERSION,
        f"The specified version '{text[:100]}' is not a valid version id. Allowed values are between "
        '[1, 2^31-1] and the string "latest"',
    )


def invalid_subject(subject: str) -> RegistryError:
    """42208: an empty subject, or one with control characters."""
    return RegistryError(422, INVALID_SUBJECT, f"The specified subject '{subject[:100]}' is not a valid subject")


def invalid_compatibility_level(level: Any) -> RegistryError:
    """42203: not one of NONE, BACKWARD, FORWARD, FULL and their _TRANSITIVE forms."""
    return RegistryError(
        422,
        INVALID_COMPATIBILITY_LEVEL,
        f"Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, "
        f"forward_transitive, and full_transitive (got {str(level)[:60]!r})",
    )


def invalid_mode(mode: Any) -> RegistryError:
    """42204: not READWRITE, READONLY or IMPORT."""
    return RegistryError(
        422, INVALID_MODE, f"Invalid mode. Valid values are READWRITE, READONLY and IMPORT (got {str(mode)[:60]!r})"
    )


def not_permitted(detail: str) -> RegistryError:
    """42205: the operation is not allowed in the subject's mode (or at all)."""
    return RegistryError(422, OPERATION_NOT_PERMITTED, detail)


def reference_exists(subject: str, version: int) -> RegistryError:
    """42206: another schema references this version."""
    return RegistryError(
        422,
        REFERENCE_EXISTS,
        f"One or more references exist to the schema {{subject={subject},version={version}}}",
    )


def id_does_not_match(detail: str) -> RegistryError:
    """42207: an IMPORT names an id already used by another schema."""
    return RegistryError(422, ID_DOES_NOT_MATCH, detail)


def incompatible(detail: str) -> RegistryError:
    """409: the schema breaks the subject's compatibility level."""
    return RegistryError(409, INCOMPATIBLE_SCHEMA, detail)


def bad_request(detail: str) -> RegistryError:
    """400: the request body is not what the route reads."""
    return RegistryError(400, BAD_REQUEST, detail)


def store_error(detail: str) -> RegistryError:
    """50001: the write to ``_schemas`` failed (the cluster did not take it)."""
    return RegistryError(500, STORE_ERROR, f"Error while writing to the schemas topic: {detail}")


def loading() -> RegistryError:
    """50002: the registry is still replaying ``_schemas`` (try again)."""
    return RegistryError(500, OPERATION_TIMEOUT, "The schema registry is loading its state; try again")


def unauthorized() -> RegistryError:
    """401: no or wrong credentials (basic auth against the cluster's SCRAM users)."""
    return RegistryError(401, UNAUTHORIZED, "Unauthorized")


def forbidden(principal: str, operation: str, resource: str) -> RegistryError:
    """403 / 40301: the ACLs do not let ``principal`` do ``operation`` to ``resource``."""
    return RegistryError(403, FORBIDDEN, f"User {principal} is denied operation {operation} on {resource}")
