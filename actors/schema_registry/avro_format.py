"""Avro schemas: parsing (with references), Confluent's normalisation, and compatibility by
Avro's schema resolution rules.

Two well-kept libraries do the work: ``avro`` (Apache Avro's own Python package) parses a
schema into the model its ``ReaderWriterCompatibilityChecker`` reads, the port of Java's
``SchemaCompatibility`` that Confluent's registry runs (field defaults, aliases, enum symbols
and defaults, unions, fixed sizes, numeric promotions int -> long -> float -> double,
string <-> bytes); ``fastavro`` checks what Java's parser checks and ``avro`` does not:
default values must match their field's type. A reference is an Avro named type (its full
name) defined by another subject's version; the referenced schemas are parsed first into the
same namespace of names, as Confluent does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import avro.compatibility
import avro.errors
import avro.schema
import fastavro.schema
from avro.name import Names

from actors.schema_registry import errors
from actors.schema_registry.model import ParsedSchema, Reference, SchemaType, compact_json, load_json

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Parsing Canonical Form's order of attributes; every other attribute follows, sorted.
_ORDER = ("name", "type", "fields", "symbols", "items", "values", "size")


def _dependency_order(dependencies: Mapping[str, ParsedSchema]) -> list[ParsedSchema]:
    """Every schema reached through ``dependencies``, each after its own dependencies."""
    ordered: list[ParsedSchema] = []
    seen: set[int] = set()

    def visit(schema: ParsedSchema) -> None:
        # References are bounded in depth by the state machine (MAX_REFERENCE_DEPTH).
        if id(schema) in seen:
            return
        seen.add(id(schema))
        for dep in (schema.dependencies or {}).values():
            visit(dep)
        ordered.append(schema)

    for dep in dependencies.values():
        visit(dep)
    return ordered


def parse(
    text: str,
    references: tuple[Reference, ...] = (),
    dependencies: Mapping[str, ParsedSchema] | None = None,
    normalize: bool = False,
) -> ParsedSchema:
    """``text`` as an Avro schema; 42201 with the parser's reason when it is not one."""
    value = load_json(text)
    deps = _dependency_order(dependencies or {})
    names = Names(validate_names=True)
    named: dict[str, Any] = {}
    try:
        for dep in deps:
            if dep.schema_type is not SchemaType.AVRO:
                raise errors.invalid_schema("an Avro schema can only reference Avro schemas")
            dep_json = json.loads(dep.text)
            avro.schema.make_avsc_object(dep_json, names)
            fastavro.schema.parse_schema(dep_json, named_schemas=named)
        model = avro.schema.make_avsc_object(value, names)
        fastavro.schema.parse_schema(value, named_schemas=named)
    except errors.RegistryError:
        raise
    except RecursionError:
        raise errors.invalid_schema("the schema nests too deeply") from None
    except (avro.errors.AvroException, fastavro.schema.SchemaParseException, fastavro.schema.UnknownType) as exc:
        raise errors.invalid_schema(f"{type(exc).__name__}: {exc}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # The libraries assume well-formed JSON shapes in places ("fields" not a list...).
        raise errors.invalid_schema(f"not an Avro schema: {type(exc).__name__}: {exc}") from None
    stored = compact_json(normalized(value) if normalize else value)
    return ParsedSchema(SchemaType.AVRO, stored, stored, model, references, dependencies or {})


def normalized(value: Any, namespace: str | None = None) -> Any:
    """Confluent's normalised Avro: full names, primitives written alone, attributes in
    Parsing Canonical Form's order (the rest sorted after them), aliases full and sorted;
    defaults, docs, logical types and other properties kept."""
    if isinstance(value, str):
        return value if value in PRIMITIVES or "." in value or not namespace else f"{namespace}.{value}"
    if isinstance(value, list):
        return [normalized(v, namespace) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    if isinstance(kind, str) and kind in PRIMITIVES and set(value) == {"type"}:
        return kind
    out: dict[str, Any] = {}
    inner = namespace
    if kind in ("record", "error", "enum", "fixed") and isinstance(value.get("name"), str):
        name = value["name"]
        space = value.get("namespace", namespace)
        full = name if "." in name or not space else f"{space}.{name}"
        inner = full.rpartition(".")[0] or None
        out["name"] = full
        if isinstance(value.get("aliases"), list):
            out["aliases"] = sorted(
                a if not isinstance(a, str) or "." in a or not inner else f"{inner}.{a}" for a in value["aliases"]
            )
    for key in _ORDER:
        if key in value and key not in out:
            if key == "type":
                out["type"] = normalized(value["type"], namespace) if not isinstance(kind, str) else kind
            elif key == "fields" and isinstance(value["fields"], list):
                out["fields"] = [_field(f, inner) for f in value["fields"]]
            elif key in ("items", "values"):
                out[key] = normalized(value[key], inner)
            else:
                out[key] = value[key]
    for key in sorted(value):
        if key not in out and key != "namespace":
            out[key] = value[key]
    return out


def _field(field: Any, namespace: str | None) -> Any:
    if not isinstance(field, dict):
        return field
    out = {k: field[k] for k in ("name",) if k in field}
    if "type" in field:
        out["type"] = normalized(field["type"], namespace)
    for key in sorted(field):
        if key not in out:
            out[key] = sorted(field[key]) if key == "aliases" and isinstance(field[key], list) else field[key]
    return out


def check(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can), by
    Avro's resolution rules, in Confluent's message form."""
    result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(reader.model, writer.model)
    if result.compatibility is not avro.compatibility.SchemaCompatibilityType.incompatible:
        return []
    locations = ", ".join(sorted(result.locations))
    details = "; ".join(sorted(str(m) for m in result.messages))
    return [
        f"{{errorType:'{kind.name.upper()}', description:'{_describe(kind)} at path {locations}', "
        f"additionalInfo:'{details}'}}"
        for kind in dict.fromkeys(result.incompatibilities)
    ]


_DESCRIPTIONS = {
    "reader_field_missing_default_value": "The reader has a field with no default value that the writer does not have",
    "type_mismatch": "The types of the reader and the writer do not match",
    "name_mismatch": "The names of the reader and the writer do not match",
    "fixed_size_mismatch": "The sizes of the reader's and the writer's fixed types differ",
    "missing_enum_symbols": "The reader's enum lacks symbols of the writer's and has no default",
    "missing_union_branch": "The reader's union lacks a branch of the writer's type",
}


def _describe(kind: Any) -> str:
    return _DESCRIPTIONS.get(kind.value, kind.value.replace("_", " "))
