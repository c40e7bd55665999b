"""``value_schema_id_prefix`` mode: record values in the schema registry's wire format (Confluent's:
a 0 byte, the schema id in 4 big-endian bytes, then the encoded value) become typed columns.

Served: Avro (fastavro decodes; references to other subjects' named types are followed) and
JSON Schema (the value is JSON text). A schema's columns are Iceberg's types for its fields:
Avro records and JSON objects are structs, arrays lists, Avro maps maps; the value's own fields
are the table's top-level columns (a value that is not a record or object is one column,
``value``), every column optional. The table's schema grows as the subject's schemas do
(Iceberg's union by name: new fields added, ints widened to longs, floats to doubles).

A record this mode cannot type is invalid (the translator sends it to the dead-letter table or
drops it, as the topic says): a value not in the wire format, a schema id the registry does not
know, a schema with no Iceberg form (recursive types, unions of several types other than null,
Avro's null and empty records, Protobuf, which is not served), a schema whose columns clash with
the table's (a string column cannot become an int), or bytes its schema cannot decode. A null
value (a tombstone) is a row with every value column null. A registry that cannot be reached is
no reason to call a record invalid: the step fails and is tried again.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from actors.iceberg import layout
from storage.records.columns import RecordColumns

logger = logging.getLogger(__name__)

MAGIC = 0
PREFIX = 5
VALUE_COLUMN = "value"
# Schemas one translator keeps parsed (a hostile producer naming many ids cannot grow it further).
MAX_CACHED_SCHEMAS = 1000
# Avro references followed at most this deep (the registry bounds them too).
MAX_REFERENCE_DEPTH = 32


class SchemaNotFoundError(LookupError):
    """The registry does not know the schema id (its error 40403)."""


class UnsupportedSchemaError(ValueError):
    """A schema with no Iceberg form here."""


@dataclass(frozen=True, slots=True)
class ValueSchema:
    """One registered schema as this mode uses it: how to decode a value, and its columns."""

    schema_id: int
    decode: Callable[[bytes], Any] | None  # None: the schema cannot be used (``error`` says why)
    columns: pa.Schema | None  # the value's columns (top level of the table)
    error: str = ""


class ValueDecoder:
    """Typed rows of records in the wire format; ``schemas`` looks schemas up by id
    (``schema(id)`` and ``version(subject, version)``, the registry's answers as dicts;
    SchemaNotFoundError for an unknown id)."""

    def __init__(self, schemas: Any) -> None:
        self._schemas = schemas
        self._cache: dict[int, ValueSchema] = {}
        self._evolved: set[int] = set()  # schema ids whose columns the table has taken

    def rows(
        self, columns: RecordColumns, topic: str, partition: int, evolve: Callable[[pa.Schema], pa.Schema]
    ) -> tuple[pa.Table, list[tuple[int, str]]]:
        """The table's rows of ``columns`` (value columns and the ``rayqueue`` struct) and the
        (row, reason) of each record that cannot be typed. ``evolve`` grows the table to hold a
        schema and answers the table's Arrow schema (ValueError when it cannot)."""
        values = columns.value.to_pylist()
        invalid: list[tuple[int, str]] = []
        by_schema: dict[int, list[int]] = {}
        tombstones: list[int] = []
        for row, value in enumerate(values):
            if value is None:
                tombstones.append(row)
            elif len(value) < PREFIX or value[0] != MAGIC:
                invalid.append((row, "not in the schema registry's wire format (a 0 byte and a 4-byte schema id)"))
            else:
                by_schema.setdefault(int.from_bytes(value[1:PREFIX], "big"), []).append(row)
        table_schema = evolve(layout.VALUE_MODE_SCHEMA)
        decoded: dict[int, dict[str, Any]] = {row: {} for row in tombstones}
        for schema_id, rows in sorted(by_schema.items()):
            schema = self._schema(schema_id)
            if schema.decode is None:
                invalid.extend((row, schema.error) for row in rows)
                continue
            if schema_id not in self._evolved:
                try:
                    table_schema = evolve(_with_place(schema.columns))
                except Exception as exc:  # noqa: BLE001 - pyiceberg's ValidationError and ValueError alike
                    reason = f"schema {schema_id} does not fit the table: {exc}"[:300]
                    invalid.extend((row, reason) for row in rows)
                    continue
                self._evolved.add(schema_id)
            for row in rows:
                try:
                    decoded[row] = schema.decode(values[row][PREFIX:])
                except Exception as exc:  # noqa: BLE001 - whatever the bytes make the decoder raise
                    invalid.append((row, f"cannot decode under schema {schema_id}: {type(exc).__name__}: {exc}"[:300]))
        value_schema = pa.schema([f for f in table_schema if f.name != layout.RAYQUEUE])
        good = sorted(decoded)
        table, bad = _to_arrow([decoded[row] for row in good], value_schema)
        if bad:
            kept = [i for i in range(len(good)) if i not in bad]
            invalid.extend((good[i], reason) for i, reason in bad.items())
            good = [good[i] for i in kept]
            table = table.take(pa.array(np.asarray(kept, np.int64))) if kept else value_schema.empty_table()
        place = layout.place(layout.take(columns, np.asarray(good, np.int64)), topic, partition, with_key=True)
        table = table.append_column(pa.field(layout.RAYQUEUE, layout.PLACE_WITH_KEY), place)
        invalid.sort()
        return table, invalid

    def schema_changed(self) -> None:
        """Forget which schemas the table took (it may have been altered under them)."""
        self._evolved.clear()

    def _schema(self, schema_id: int) -> ValueSchema:
        found = self._cache.get(schema_id)
        if found is not None:
            return found
        try:
            answer = self._schemas.schema(schema_id) if self._schemas is not None else None
            if answer is None:
                raise SchemaNotFoundError(f"schema {schema_id}: no schema registry is running")
            found = _value_schema(schema_id, answer, self._schemas)
        except SchemaNotFoundError as exc:
            found = ValueSchema(schema_id, None, None, f"schema id {schema_id} is not in the schema registry ({exc})")
        except UnsupportedSchemaError as exc:
            found = ValueSchema(schema_id, None, None, f"schema {schema_id} has no Iceberg form: {exc}"[:300])
        if len(self._cache) >= MAX_CACHED_SCHEMAS:
            self._cache.pop(next(iter(self._cache)))
        self._cache[schema_id] = found
        return found


def _with_place(columns: pa.Schema) -> pa.Schema:
    return pa.schema([*columns, pa.field(layout.RAYQUEUE, layout.PLACE_WITH_KEY)])


def _to_arrow(rows: list[dict[str, Any]], schema: pa.Schema) -> tuple[pa.Table, dict[int, str]]:
    """``rows`` as a table of ``schema`` (one row each, in order), and the rows that do not
    fit it (index -> reason; their row in the table is all null)."""
    try:
        return pa.Table.from_pylist(rows, schema=schema), {}
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    bad: dict[int, str] = {}
    for i, row in enumerate(rows):
        try:
            pa.Table.from_pylist([row], schema=schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            bad[i] = f"a value does not fit its column: {exc}"[:300]
    return pa.Table.from_pylist([{} if i in bad else row for i, row in enumerate(rows)], schema=schema), bad


def _value_schema(schema_id: int, answer: dict[str, Any], schemas: Any) -> ValueSchema:
    kind = str(answer.get("schemaType") or "AVRO").upper()
    text = answer.get("schema")
    if not isinstance(text, str):
        raise UnsupportedSchemaError("the registry's answer has no schema text")
    if kind == "AVRO":
        return _avro(schema_id, text, answer.get("references") or [], schemas)
    if kind == "JSON":
        return _json_schema(schema_id, text)
    raise UnsupportedSchemaError(f"{kind} schemas are not served by Iceberg topics (Avro and JSON Schema are)")


# -- Avro -------------------------------------------------------------------------------------

_AVRO_PRIMITIVE = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_AVRO_NAMED = ("record", "error", "enum", "fixed")


def _avro(schema_id: int, text: str, references: list[Any], schemas: Any) -> ValueSchema:
    import fastavro

    try:
        main = json.loads(text)
    except ValueError as exc:
        raise UnsupportedSchemaError(f"not JSON: {exc}") from None
    named: dict[str, Any] = {}  # fastavro's named types (references first)
    definitions: dict[str, Any] = {}  # full name -> its JSON, for the column mapping
    _avro_references(references, schemas, named, definitions, 0)
    try:
        parsed = fastavro.parse_schema(main, named_schemas=named)
    except Exception as exc:  # noqa: BLE001 - fastavro's SchemaParseException and friends
        raise UnsupportedSchemaError(f"fastavro cannot parse it: {exc}") from None
    _avro_definitions(main, "", definitions)
    try:
        arrow = _avro_type(main, "", definitions, ())
    except RecursionError:
        raise UnsupportedSchemaError("nested too deeply") from None
    record = isinstance(arrow, pa.StructType) and _avro_is_record(main, definitions)
    columns = pa.schema(list(arrow)) if record else pa.schema([pa.field(VALUE_COLUMN, arrow)])

    def decode(payload: bytes) -> dict[str, Any]:
        buffer = io.BytesIO(payload)
        value = fastavro.schemaless_reader(buffer, parsed, None)
        if buffer.tell() != len(payload):
            raise ValueError(f"{len(payload) - buffer.tell()} bytes after the value")
        return value if record else {VALUE_COLUMN: value}

    return ValueSchema(schema_id, decode, columns)


def _avro_references(references: list[Any], schemas: Any, named: dict, definitions: dict, depth: int) -> None:
    import fastavro

    if depth > MAX_REFERENCE_DEPTH:
        raise UnsupportedSchemaError("references nested too deeply")
    for ref in references:
        if not isinstance(ref, dict):
            raise UnsupportedSchemaError("a reference is not an object")
        answer = schemas.version(ref.get("subject"), ref.get("version"))
        _avro_references(answer.get("references") or [], schemas, named, definitions, depth + 1)
        try:
            value = json.loads(answer["schema"])
            fastavro.parse_schema(value, named_schemas=named)
        except Exception as exc:  # noqa: BLE001
            raise UnsupportedSchemaError(f"reference {ref.get('name')!r:.100} cannot be parsed: {exc}") from None
        _avro_definitions(value, "", definitions)


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _avro_definitions(schema: Any, namespace: str, out: dict[str, Any]) -> None:
    """Every named type ``schema`` defines, by full name."""
    if isinstance(schema, list):
        for branch in schema:
            _avro_definitions(branch, namespace, out)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in _AVRO_NAMED and isinstance(schema.get("name"), str):
        full = _full_name(schema["name"], schema.get("namespace", namespace) or "")
        out[full] = schema
        namespace = full.rpartition(".")[0]
    if kind in ("record", "error"):
        for f in schema.get("fields") or []:
            if isinstance(f, dict):
                _avro_definitions(f.get("type"), namespace, out)
    elif kind == "array":
        _avro_definitions(schema.get("items"), namespace, out)
    elif kind == "map":
        _avro_definitions(schema.get("values"), namespace, out)
    elif isinstance(kind, (dict, list)):
        _avro_definitions(kind, namespace, out)


def _resolve(name: str, namespace: str, definitions: dict[str, Any]) -> tuple[Any, str]:
    for candidate in (_full_name(name, namespace), name):
        if candidate in definitions:
            return definitions[candidate], candidate
    raise UnsupportedSchemaError(f"unknown type {name!r:.100}")


def _avro_is_record(schema: Any, definitions: dict[str, Any]) -> bool:
    if isinstance(schema, str) and schema not in _AVRO_PRIMITIVE and schema != "null":
        schema = _resolve(schema, "", definitions)[0]
    return isinstance(schema, dict) and schema.get("type") in ("record", "error")


def _avro_type(schema: Any, namespace: str, definitions: dict[str, Any], seen: tuple[str, ...]) -> pa.DataType:
    """The Arrow (and so Iceberg) type of an Avro schema; UnsupportedSchemaError where none fits."""
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVE:
            return _AVRO_PRIMITIVE[schema]
        if schema == "null":
            raise UnsupportedSchemaError("a null type has no column")
        definition, full = _resolve(schema, namespace, definitions)
        if full in seen:
            raise UnsupportedSchemaError(f"{full} is recursive")
        return _avro_type(definition, full.rpartition(".")[0], definitions, seen)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise UnsupportedSchemaError("a union of several types other than null")
        return _avro_type(branches[0], namespace, definitions, seen)
    if not isinstance(schema, dict):
        raise UnsupportedSchemaError(f"not a schema: {schema!r:.100}")
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(kind, (dict, list)):
        return _avro_type(kind, namespace, definitions, seen)
    logical_type = _avro_logical(kind, logical, schema)
    if logical_type is not None:
        return logical_type
    if kind in _AVRO_PRIMITIVE:
        return _AVRO_PRIMITIVE[kind]
    if kind in ("record", "error"):
        full = _full_name(str(schema.get("name", "")), schema.get("namespace", namespace) or "")
        if full in seen:
            raise UnsupportedSchemaError(f"{full} is recursive")
        inner = full.rpartition(".")[0]
        fields = schema.get("fields") or []
        if not fields:
            raise UnsupportedSchemaError(f"record {full} has no fields")
        return pa.struct(
            [pa.field(str(f["name"]), _avro_type(f["type"], inner, definitions, (*seen, full))) for f in fields]
        )
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        size = schema.get("size")
        if not isinstance(size, int) or size < 1:
            raise UnsupportedSchemaError("a fixed of no bytes")
        return pa.binary(size)
    if kind == "array":
        return pa.list_(_avro_type(schema.get("items"), namespace, definitions, seen))
    if kind == "map":
        return pa.map_(pa.string(), _avro_type(schema.get("values"), namespace, definitions, seen))
    raise UnsupportedSchemaError(f"type {kind!r:.60}")


def _avro_logical(kind: Any, logical: Any, schema: dict[str, Any]) -> pa.DataType | None:
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("time-millis", "time-micros") and kind in ("int", "long"):
        return pa.time64("us")
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return layout.TIMESTAMP
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return pa.timestamp("us")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if not isinstance(precision, int) or not 1 <= precision <= 38 or not isinstance(scale, int):
            raise UnsupportedSchemaError("a decimal wider than 38 digits")
        return pa.decimal128(precision, scale)
    if logical == "uuid" and kind == "string":
        return pa.string()
    return None


# -- JSON Schema -------------------------------------------------------------------------------

_JSON_SCALARS = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}


def _json_schema(schema_id: int, text: str) -> ValueSchema:
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise UnsupportedSchemaError(f"not JSON: {exc}") from None
    try:
        arrow = _json_type(schema)
    except RecursionError:
        raise UnsupportedSchemaError("nested too deeply") from None
    record = isinstance(arrow, pa.StructType)
    columns = pa.schema(list(arrow)) if record else pa.schema([pa.field(VALUE_COLUMN, arrow)])
    check = _json_checker(arrow)

    def decode(payload: bytes) -> dict[str, Any]:
        value = json.loads(payload)
        check(value)
        return value if record else {VALUE_COLUMN: value}

    return ValueSchema(schema_id, decode, columns)


def _json_type(schema: Any) -> pa.DataType:
    if not isinstance(schema, dict):
        raise UnsupportedSchemaError("a JSON schema that is not an object")
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise UnsupportedSchemaError("a type of several kinds other than null")
        kind = kinds[0]
    if kind in _JSON_SCALARS:
        return _JSON_SCALARS[kind]
    if kind == "object":
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            raise UnsupportedSchemaError("an object without properties")
        return pa.struct([pa.field(str(name), _json_type(sub)) for name, sub in props.items()])
    if kind == "array":
        return pa.list_(_json_type(schema.get("items")))
    raise UnsupportedSchemaError(f"JSON Schema type {kind!r:.60} (only object, array and scalar types are served)")


def _json_checker(arrow: pa.DataType) -> Callable[[Any], None]:
    """A check that a decoded JSON value has the schema's kinds where Arrow would convert
    instead (a bool is no integer, a number no string)."""

    def check(value: Any, kind: pa.DataType = arrow) -> None:
        if value is None:
            return
        if pa.types.is_struct(kind):
            if not isinstance(value, dict):
                raise ValueError(f"expected an object, got {type(value).__name__}")
            for f in kind:
                check(value.get(f.name), f.type)
        elif pa.types.is_list(kind):
            if not isinstance(value, list):
                raise ValueError(f"expected an array, got {type(value).__name__}")
            for item in value:
                check(item, kind.value_type)
        elif pa.types.is_string(kind):
            if not isinstance(value, str):
                raise ValueError(f"expected a string, got {type(value).__name__}")
        elif pa.types.is_boolean(kind):
            if not isinstance(value, bool):
                raise ValueError(f"expected a boolean, got {type(value).__name__}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {type(value).__name__}")

    return check
