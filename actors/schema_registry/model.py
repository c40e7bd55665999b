"""The registry's vocabulary: schema types, references, a parsed schema, compatibility levels
and modes, and the limits every parser keeps (no Ray, no HTTP).

A :class:`ParsedSchema` is what a format module (``avro_format``, ``json_format``,
``protobuf_format``) makes of a schema string: the string to store and serve, the key that
says whether two registrations are the same schema (``canonical``), and the format's own model
that the compatibility checks read.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.schema_registry import errors

# Hostile-input bounds. A schema nested deeper than this (JSON objects and arrays, or
# Protobuf blocks) is refused before any parser or check recurses into it.
MAX_DEPTH = 64
# References of one schema, and how deep a chain of references may go.
MAX_REFERENCES = 1000
MAX_REFERENCE_DEPTH = 32


class SchemaType(enum.StrEnum):
    """The schema formats served, by Confluent's ``schemaType`` names."""

    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"

    @classmethod
    def of(cls, value: Any) -> SchemaType:
        """``schemaType`` of a request (absent: AVRO, as Confluent); 42201 for another."""
        if value is None:
            return cls.AVRO
        if isinstance(value, str):
            try:
                return cls(value.upper())
            except ValueError:
                pass
        raise errors.invalid_schema(f"unknown schema type {str(value)[:40]!r}: AVRO, JSON or PROTOBUF")


class Compatibility(enum.StrEnum):
    """Confluent's compatibility levels."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def of(cls, value: Any) -> Compatibility:
        """A level from its name (any case); 42203 otherwise."""
        if isinstance(value, str):
            try:
                return cls(value.upper())
            except ValueError:
                pass
        raise errors.invalid_compatibility_level(value)

    @property
    def transitive(self) -> bool:
        """Whether every earlier version is checked, not only the latest."""
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        """Whether the new schema must read what the old ones wrote."""
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        """Whether the old schemas must read what the new one writes."""
        return self.value.startswith(("FORWARD", "FULL"))


class Mode(enum.StrEnum):
    """Confluent's modes: READWRITE (default), READONLY (no writes), IMPORT (ids given)."""

    READWRITE = "READWRITE"
    READONLY = "READONLY"
    IMPORT = "IMPORT"

    @classmethod
    def of(cls, value: Any) -> Mode:
        """A mode from its name (any case); 42204 otherwise."""
        if isinstance(value, str):
            try:
                return cls(value.upper())
            except ValueError:
                pass
        raise errors.invalid_mode(value)


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema reference: the name the schema uses for it (an Avro full name, a JSON Schema
    ``$ref`` URL, a Protobuf import path) and the subject version that holds it."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        """Confluent's JSON form."""
        return {"name": self.name, "subject": self.subject, "version": self.version}

    @classmethod
    def from_json(cls, value: Any) -> Reference:
        """From Confluent's JSON form; 42201 when a field is missing or of the wrong type."""
        if not isinstance(value, Mapping):
            raise errors.invalid_schema("a reference is an object with name, subject and version")
        name, subject, version = value.get("name"), value.get("subject"), value.get("version")
        if not isinstance(name, str) or not name or not isinstance(subject, str) or not subject:
            raise errors.invalid_schema("a reference needs a non-empty name and subject")
        if isinstance(version, bool) or not isinstance(version, int):
            raise errors.invalid_schema(f"reference {name[:100]!r}: version must be an integer")
        return cls(name, subject, version)


@dataclass(frozen=True, slots=True)
class ParsedSchema:
    """A schema a format module accepted.

    ``text`` is stored in ``_schemas`` and served; ``canonical`` is equal for two schemas the
    registry takes as the same (whitespace, and for Protobuf its text or binary form, do not
    count); ``model`` is the format's parsed form for the compatibility checks;
    ``dependencies`` maps each reference name to the parsed schema it names.
    """

    schema_type: SchemaType
    text: str
    canonical: str
    model: Any
    references: tuple[Reference, ...] = ()
    dependencies: Mapping[str, ParsedSchema] | None = None

    def identity(self) -> tuple[str, str, tuple[Reference, ...]]:
        """What makes two registrations one schema (one id)."""
        return (self.schema_type.value, self.canonical, self.references)


def json_depth(value: Any) -> int:
    """How deeply JSON objects and arrays nest in ``value`` (counted without recursion)."""
    depth = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in item)
    return depth


def load_json(
    text: str,
    what: str = "schema",
    max_depth: int = MAX_DEPTH,
    invalid: Callable[[str], errors.RegistryError] = errors.invalid_schema,
) -> Any:
    """``text`` as JSON nested at most ``max_depth`` deep; ``invalid``'s error (42201 by
    default) otherwise."""
    if not isinstance(text, str):
        raise invalid(f"the {what} must be a string")
    try:
        value = json.loads(text)
    except RecursionError:
        raise invalid(f"the {what} nests deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise invalid(f"the {what} is not JSON: {exc}") from None
    if json_depth(value) > max_depth:
        raise invalid(f"the {what} nests deeper than {max_depth} levels")
    return value


def compact_json(value: Any, sort_keys: bool = False) -> str:
    """``value`` as JSON without whitespace (the form the registry stores)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)
