"""One entry for the three formats: parse a schema string of a type, check a reader against a
writer, and the compatibility of a new schema with earlier ones under a level."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from actors.schema_registry import avro_format, errors, json_format, protobuf_format
from actors.schema_registry.model import Compatibility, ParsedSchema, Reference, SchemaType

_PARSERS = {
    SchemaType.AVRO: avro_format.parse,
    SchemaType.JSON: json_format.parse,
    SchemaType.PROTOBUF: protobuf_format.parse,
}
_CHECKS = {
    SchemaType.AVRO: avro_format.check,
    SchemaType.JSON: json_format.check,
    SchemaType.PROTOBUF: protobuf_format.check,
}


def parse(
    schema_type: SchemaType,
    text: str,
    references: tuple[Reference, ...] = (),
    dependencies: Mapping[str, ParsedSchema] | None = None,
    normalize: bool = False,
) -> ParsedSchema:
    """``text`` parsed as ``schema_type``; 42201 when it is not a schema of that type."""
    try:
        return _PARSERS[schema_type](text, references, dependencies, normalize)
    except RecursionError:
        raise errors.invalid_schema("the schema nests too deeply") from None


def check(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why ``reader`` cannot read what ``writer`` wrote (empty: it can)."""
    if reader.schema_type is not writer.schema_type:
        return [
            f"{{errorType:'TYPE_MISMATCH', description:'the schema type changed from "
            f"{writer.schema_type.value} to {reader.schema_type.value}'}}"
        ]
    try:
        return _CHECKS[reader.schema_type](reader, writer)
    except RecursionError:
        raise errors.invalid_schema("the schemas nest too deeply to compare") from None


def incompatibilities(
    level: Compatibility, new: ParsedSchema, earlier: Sequence[tuple[int, ParsedSchema]]
) -> list[str]:
    """Why ``new`` breaks ``level`` against the ``(version, schema)`` pairs given (the latest
    alone, or every one for a transitive level; the caller picks); empty when it does not."""
    if level is Compatibility.NONE:
        return []
    found: list[str] = []
    for version, old in earlier:
        messages = []
        if level.backward:
            messages += check(new, old)
        if level.forward:
            messages += check(old, new)
        if messages:
            found += messages
            found.append(f"{{oldSchemaVersion: {version}}}")
            found.append(f"{{oldSchema: '{old.text[:2000]}'}}")
    if found:
        found.append(f"{{compatibility: '{level.value}'}}")
    return found
