"""JSON Schema schemas: parsing (checked against their draft's metaschema by ``jsonschema``),
references, normalisation, and Confluent's compatibility rules.

A reference is a ``$ref`` to another document by the reference's name (``"$ref":
"address.json"``, or ``"address.json#/definitions/street"``); local ``#/...`` pointers resolve
within their own document. Every ``$ref`` must resolve when the schema is registered.

Compatibility follows Confluent's ``SchemaDiff`` in its default (strict) form: the old schema
is the writer (``original``), the new one the reader (``update``), and a change is compatible
when every document valid under the writer stays valid under the reader. ``json_compat`` holds
the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema.exceptions
import jsonschema.validators

from actors.schema_registry import errors
from actors.schema_registry.json_compat import compare
from actors.schema_registry.model import ParsedSchema, Reference, SchemaType, compact_json, load_json


class JsonDocument:
    """A JSON Schema document with the documents its references name, to resolve ``$ref``."""

    __slots__ = ("root", "dependencies")

    def __init__(self, root: Any, dependencies: Mapping[str, JsonDocument]) -> None:
        self.root = root
        self.dependencies = dependencies

    def resolve(self, ref: str) -> tuple[Any, JsonDocument]:
        """The schema ``ref`` points at and the document it lies in; KeyError when it does not resolve."""
        target, _, fragment = ref.partition("#")
        doc = self
        if target:
            doc = self.dependencies.get(target)
            if doc is None:
                raise KeyError(f"$ref {ref[:200]!r} names no reference of the schema")
        node = doc.root
        if fragment:
            if not fragment.startswith("/"):
                raise KeyError(f"$ref {ref[:200]!r}: only JSON pointers are resolved")
            for part in fragment[1:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and part in node:
                    node = node[part]
                elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                else:
                    raise KeyError(f"$ref {ref[:200]!r} does not resolve")
        return node, doc


def _refs(value: Any) -> list[str]:
    """Every ``$ref`` string in ``value`` (iteratively)."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def parse(
    text: str,
    references: tuple[Reference, ...] = (),
    dependencies: Mapping[str, ParsedSchema] | None = None,
    normalize: bool = False,
) -> ParsedSchema:
    """``text`` as a JSON Schema; 42201 when it is not JSON, not a schema of its draft
    (draft-07 when ``$schema`` names none), or a ``$ref`` does not resolve."""
    value = load_json(text)
    if not isinstance(value, (dict, bool)):
        raise errors.invalid_schema("a JSON Schema is an object or a boolean")
    deps = dict(dependencies or {})
    for name, dep in deps.items():
        if dep.schema_type is not SchemaType.JSON:
            raise errors.invalid_schema(f"reference {name[:100]!r} is not a JSON Schema")
    document = JsonDocument(value, {name: dep.model for name, dep in deps.items()})
    try:
        cls = jsonschema.validators.validator_for(value, default=jsonschema.validators.Draft7Validator)
        cls.check_schema(value)
    except jsonschema.exceptions.SchemaError as exc:
        raise errors.invalid_schema(f"{exc.message[:500]} at {'/'.join(str(p) for p in exc.path)}") from None
    except RecursionError:
        raise errors.invalid_schema("the schema nests too deeply") from None
    for ref in _refs(value):
        try:
            document.resolve(ref)
        except KeyError as exc:
            raise errors.invalid_schema(str(exc.args[0])) from None
    stored = compact_json(_sorted_keys(value) if normalize else value)
    return ParsedSchema(SchemaType.JSON, stored, stored, document, references, deps)


def check(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why documents valid under ``writer`` may be invalid under ``reader`` (empty: none)."""
    return [
        f"{{errorType:'{kind}', description:'at path {path or '#/'}'}}"
        for kind, path in compare(writer.model, reader.model)
    ]
