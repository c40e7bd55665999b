"""Compatibility rules case by case: Avro (Avro's schema resolution, as Confluent runs it),
JSON Schema and Protobuf (Confluent's documented rules), the levels and their _TRANSITIVE
forms, normalisation and references. Each case is a writer (the old schema) and a reader
(the new one): compatible or not, and for the incompatible ones Confluent's name of why."""

from __future__ import annotations

import json

import pytest

from actors.schema_registry import errors, formats
from actors.schema_registry.model import Compatibility, Reference, SchemaType


def parse(kind: SchemaType, schema: object, **kwargs) -> object:
    # .proto text as it is; Avro and JSON schemas given as Python values, or as JSON text when
    # the test means the text itself (a string that does not parse stays a string).
    if kind is SchemaType.PROTOBUF or (isinstance(schema, str) and schema[:1] in '{["' and schema):
        text = schema
    else:
        text = json.dumps(schema)
    return formats.parse(kind, text, **kwargs)


def why(kind: SchemaType, writer: object, reader: object) -> list[str]:
    return formats.check(parse(kind, reader), parse(kind, writer))


def record(*fields: dict, name: str = "R") -> dict:
    return {"type": "record", "name": name, "fields": list(fields)}


# -- Avro -------------------------------------------------------------------------------------

AVRO_CASES = [
    # (what, writer, reader, incompatibility or None)
    ("same schema", record({"name": "a", "type": "int"}), record({"name": "a", "type": "int"}), None),
    ("field added with a default", record(), record({"name": "a", "type": "int", "default": 0}), None),
    (
        "field added without a default",
        record(),
        record({"name": "a", "type": "int"}),
        "READER_FIELD_MISSING_DEFAULT_VALUE",
    ),
    ("field removed", record({"name": "a", "type": "int"}), record(), None),
    ("int promoted to long", record({"name": "a", "type": "int"}), record({"name": "a", "type": "long"}), None),
    ("int promoted to double", record({"name": "a", "type": "int"}), record({"name": "a", "type": "double"}), None),
    (
        "long narrowed to int",
        record({"name": "a", "type": "long"}),
        record({"name": "a", "type": "int"}),
        "TYPE_MISMATCH",
    ),
    ("string read as bytes", record({"name": "a", "type": "string"}), record({"name": "a", "type": "bytes"}), None),
    ("string to int", record({"name": "a", "type": "string"}), record({"name": "a", "type": "int"}), "TYPE_MISMATCH"),
    (
        "renamed field with an alias",
        record({"name": "a", "type": "int"}),
        record({"name": "b", "type": "int", "aliases": ["a"]}),
        None,
    ),
    (
        "record renamed",
        record({"name": "a", "type": "int"}, name="R"),
        record({"name": "a", "type": "int"}, name="S"),
        "NAME_MISMATCH",
    ),
    (
        "enum symbol added",
        {"type": "enum", "name": "E", "symbols": ["A"]},
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        None,
    ),
    (
        "enum symbol removed",
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        {"type": "enum", "name": "E", "symbols": ["A"]},
        "MISSING_ENUM_SYMBOLS",
    ),
    (
        "enum symbol removed, reader has a default",
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
        None,
    ),
    ("union widened", ["null", "int"], ["null", "int", "string"], None),
    ("union narrowed", ["null", "int", "string"], ["null", "int"], "MISSING_UNION_BRANCH"),
    ("plain type into a union", "int", ["null", "int"], None),
    (
        "fixed size changed",
        {"type": "fixed", "name": "F", "size": 4},
        {"type": "fixed", "name": "F", "size": 8},
        "FIXED_SIZE_MISMATCH",
    ),
    ("array items promoted", {"type": "array", "items": "int"}, {"type": "array", "items": "long"}, None),
    ("map values changed", {"type": "map", "values": "int"}, {"type": "map", "values": "string"}, "TYPE_MISMATCH"),
]


@pytest.mark.parametrize("what, writer, reader, problem", AVRO_CASES, ids=[c[0] for c in AVRO_CASES])
def test_avro(what, writer, reader, problem):
    found = why(SchemaType.AVRO, writer, reader)
    if problem is None:
        assert found == [], found
    else:
        assert found and problem in found[0], found


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"type": "record", "name": "R"}',
        '{"type": "record", "name": "R", "fields": [{"name": "x", "type": "int", "default": "one"}]}',
        '{"type": "enum", "name": "E", "symbols": ["A", "A"]}',
        '{"type": "record", "name": "R", "fields": [{"name": "x", "type": "Nowhere"}]}',
        '{"type": "fixed", "name": "F"}',
        '{"type": "wibble"}',
        '{"type": "record", "name": "1R", "fields": []}',
    ],
)
def test_avro_schemas_that_do_not_parse_are_42201(bad):
    with pytest.raises(errors.RegistryError) as e:
        formats.parse(SchemaType.AVRO, bad)
    assert e.value.error_code == errors.INVALID_SCHEMA


def test_avro_references_are_named_types_of_other_subjects():
    address = parse(
        SchemaType.AVRO, {"type": "record", "name": "acme.Address", "fields": [{"name": "s", "type": "string"}]}
    )
    ref = (Reference("acme.Address", "address", 1),)
    user = {"type": "record", "name": "acme.User", "fields": [{"name": "home", "type": "acme.Address"}]}
    old = parse(SchemaType.AVRO, user, references=ref, dependencies={"acme.Address": address})
    new_user = {**user, "fields": [*user["fields"], {"name": "age", "type": "int", "default": 0}]}
    new = parse(SchemaType.AVRO, new_user, references=ref, dependencies={"acme.Address": address})
    assert formats.check(new, old) == []
    # The referenced type itself is compared too.
    address2 = parse(
        SchemaType.AVRO, {"type": "record", "name": "acme.Address", "fields": [{"name": "s", "type": "int"}]}
    )
    changed = parse(SchemaType.AVRO, user, references=ref, dependencies={"acme.Address": address2})
    assert formats.check(changed, old)


# -- the levels ------------------------------------------------------------------------------


def test_levels_pick_the_direction_and_the_versions():
    v1 = parse(SchemaType.AVRO, record({"name": "a", "type": "int"}))
    v2 = parse(SchemaType.AVRO, record({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}))
    adds_required = parse(SchemaType.AVRO, record({"name": "a", "type": "int"}, {"name": "c", "type": "int"}))
    drops_required = parse(SchemaType.AVRO, record())
    earlier = [(2, v2), (1, v1)]

    def ok(level: str, new, versions=earlier) -> bool:
        return formats.incompatibilities(Compatibility(level), new, versions) == []

    # A required field added: old data has no value for it (backward), old readers skip it (forward).
    assert not ok("BACKWARD", adds_required) and ok("FORWARD", adds_required) and not ok("FULL", adds_required)
    # A field without a default removed: new data lacks it for old readers.
    assert ok("BACKWARD", drops_required) and not ok("FORWARD", drops_required)
    assert ok("NONE", adds_required) and ok("NONE", drops_required)
    # The _TRANSITIVE forms look at every version handed to them; the message names the version.
    only_v2 = parse(SchemaType.AVRO, record({"name": "b", "type": "int", "default": 0}))
    assert ok("FORWARD", only_v2, earlier[:1]) is False  # v2's reader needs a, which only_v2 lacks
    found = formats.incompatibilities(Compatibility.FULL_TRANSITIVE, adds_required, earlier)
    assert "{oldSchemaVersion: 2}" in found and "{oldSchemaVersion: 1}" in found
    assert found[-1] == "{compatibility: 'FULL_TRANSITIVE'}"


def test_another_schema_type_is_incompatible():
    avro = parse(SchemaType.AVRO, "string")
    js = parse(SchemaType.JSON, {"type": "string"})
    assert formats.incompatibilities(Compatibility.BACKWARD, js, [(1, avro)])
    assert formats.incompatibilities(Compatibility.NONE, js, [(1, avro)]) == []


# -- JSON Schema ------------------------------------------------------------------------------

OBJ = {"type": "object", "properties": {"a": {"type": "string"}}}
CLOSED = {**OBJ, "additionalProperties": False}
JSON_CASES = [
    ("same", OBJ, OBJ, None),
    ("anything to the empty schema", OBJ, {}, None),
    ("type extended integer to number", {"type": "integer"}, {"type": "number"}, None),
    ("type narrowed number to integer", {"type": "number"}, {"type": "integer"}, "TYPE_NARROWED"),
    ("type changed", {"type": "string"}, {"type": "integer"}, "TYPE_CHANGED"),
    ("type union extended", {"type": "string"}, {"type": ["string", "null"]}, None),
    ("type union narrowed", {"type": ["string", "null"]}, {"type": "string"}, "TYPE_NARROWED"),
    ("maxLength added", {"type": "string"}, {"type": "string", "maxLength": 5}, "MAX_LENGTH_ADDED"),
    ("maxLength increased", {"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 9}, None),
    (
        "maxLength decreased",
        {"type": "string", "maxLength": 9},
        {"type": "string", "maxLength": 5},
        "MAX_LENGTH_DECREASED",
    ),
    ("maxLength removed", {"type": "string", "maxLength": 9}, {"type": "string"}, None),
    (
        "minLength increased",
        {"type": "string", "minLength": 1},
        {"type": "string", "minLength": 2},
        "MIN_LENGTH_INCREASED",
    ),
    ("minLength decreased", {"type": "string", "minLength": 2}, {"type": "string", "minLength": 1}, None),
    ("pattern added", {"type": "string"}, {"type": "string", "pattern": "^a"}, "PATTERN_ADDED"),
    ("pattern changed", {"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "^b"}, "PATTERN_CHANGED"),
    ("pattern removed", {"type": "string", "pattern": "^a"}, {"type": "string"}, None),
    ("maximum decreased", {"type": "number", "maximum": 10}, {"type": "number", "maximum": 5}, "MAXIMUM_DECREASED"),
    ("maximum increased", {"type": "number", "maximum": 5}, {"type": "number", "maximum": 10}, None),
    ("minimum added", {"type": "number"}, {"type": "number", "minimum": 0}, "MINIMUM_ADDED"),
    ("minimum decreased", {"type": "number", "minimum": 5}, {"type": "number", "minimum": 0}, None),
    (
        "exclusiveMinimum increased",
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "number", "exclusiveMinimum": 1},
        "EXCLUSIVE_MINIMUM_INCREASED",
    ),
    ("multipleOf reduced", {"type": "number", "multipleOf": 4}, {"type": "number", "multipleOf": 2}, None),
    (
        "multipleOf expanded",
        {"type": "number", "multipleOf": 2},
        {"type": "number", "multipleOf": 4},
        "MULTIPLE_OF_EXPANDED",
    ),
    (
        "multipleOf changed",
        {"type": "number", "multipleOf": 3},
        {"type": "number", "multipleOf": 4},
        "MULTIPLE_OF_CHANGED",
    ),
    ("enum extended", {"enum": ["a"]}, {"enum": ["a", "b"]}, None),
    ("enum narrowed", {"enum": ["a", "b"]}, {"enum": ["a"]}, "ENUM_ARRAY_NARROWED"),
    ("enum changed", {"enum": ["a", "b"]}, {"enum": ["a", "c"]}, "ENUM_ARRAY_CHANGED"),
    (
        "property added to an open content model",
        OBJ,
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
    ),
    (
        "property with an empty schema added to an open content model",
        OBJ,
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {}}},
        None,
    ),
    (
        "optional property added to a closed content model",
        CLOSED,
        {**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
        None,
    ),
    (
        "required property added to a closed content model",
        CLOSED,
        {**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["b"]},
        "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
    ),
    (
        "required property with a default added to a closed content model",
        CLOSED,
        {**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer", "default": 0}}, "required": ["b"]},
        None,
    ),
    ("property removed from an open content model", OBJ, {"type": "object"}, None),
    (
        "property removed from a closed content model",
        CLOSED,
        {"type": "object", "additionalProperties": False},
        "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    ),
    (
        "property added and covered by a partially open content model",
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"b": {"type": "string"}}, "additionalProperties": {"type": "string"}},
        None,
    ),
    (
        "property added and not covered by a partially open content model",
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
        "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    ),
    ("required attribute added", OBJ, {**OBJ, "required": ["a"]}, "REQUIRED_ATTRIBUTE_ADDED"),
    ("required attribute removed", {**OBJ, "required": ["a"]}, OBJ, None),
    ("additionalProperties false to true", CLOSED, OBJ, None),
    ("additionalProperties true to false", OBJ, CLOSED, "ADDITIONAL_PROPERTIES_REMOVED"),
    (
        "additionalProperties narrowed",
        OBJ,
        {**OBJ, "additionalProperties": {"type": "string"}},
        "ADDITIONAL_PROPERTIES_NARROWED",
    ),
    (
        "items type changed",
        {"type": "array", "items": {"type": "string"}},
        {"type": "array", "items": {"type": "integer"}},
        "TYPE_CHANGED",
    ),
    ("maxItems added", {"type": "array"}, {"type": "array", "maxItems": 3}, "MAX_ITEMS_ADDED"),
    ("uniqueItems added", {"type": "array"}, {"type": "array", "uniqueItems": True}, "UNIQUE_ITEMS_ADDED"),
    (
        "tuple item added to a closed content model",
        {"type": "array", "items": [{"type": "string"}], "additionalItems": False},
        {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False},
        None,
    ),
    (
        "tuple item added to an open content model",
        {"type": "array", "items": [{"type": "string"}]},
        {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
        "ITEM_ADDED_TO_OPEN_CONTENT_MODEL",
    ),
    (
        "tuple item removed from a closed content model",
        {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False},
        {"type": "array", "items": [{"type": "string"}], "additionalItems": False},
        "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    ),
    ("oneOf extended", {"oneOf": [{"type": "string"}]}, {"oneOf": [{"type": "string"}, {"type": "integer"}]}, None),
    (
        "oneOf narrowed",
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        {"oneOf": [{"type": "string"}]},
        "SUM_TYPE_NARROWED",
    ),
    ("allOf narrowed", {"allOf": [{"type": "string"}, {"maxLength": 3}]}, {"allOf": [{"type": "string"}]}, None),
    (
        "allOf extended",
        {"allOf": [{"type": "string"}]},
        {"allOf": [{"type": "string"}, {"maxLength": 3}]},
        "PRODUCT_TYPE_EXTENDED",
    ),
    ("allOf to anyOf", {"allOf": [{"type": "string"}]}, {"anyOf": [{"type": "string"}]}, None),
    ("anyOf to allOf", {"anyOf": [{"type": "string"}]}, {"allOf": [{"type": "string"}]}, "COMBINED_TYPE_CHANGED"),
    ("a type widened into a oneOf", {"type": "string"}, {"oneOf": [{"type": "string"}, {"type": "integer"}]}, None),
    ("not added", {"type": "string"}, {"type": "string", "not": {"maxLength": 2}}, "NOT_TYPE_EXTENDED"),
    ("dependency array added", OBJ, {**OBJ, "dependencies": {"a": ["b"]}}, "DEPENDENCY_ARRAY_ADDED"),
    (
        "a property's type changed under a $ref",
        {"definitions": {"x": {"type": "string"}}, "type": "object", "properties": {"a": {"$ref": "#/definitions/x"}}},
        {"definitions": {"x": {"type": "integer"}}, "type": "object", "properties": {"a": {"$ref": "#/definitions/x"}}},
        "TYPE_CHANGED",
    ),
]


@pytest.mark.parametrize("what, writer, reader, problem", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_json_schema(what, writer, reader, problem):
    found = why(SchemaType.JSON, writer, reader)
    if problem is None:
        assert found == [], found
    else:
        assert any(problem in f for f in found), found


def test_json_schema_recursion_through_ref_terminates():
    tree = {
        "definitions": {
            "node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
            }
        },
        "$ref": "#/definitions/node",
    }
    assert why(SchemaType.JSON, tree, tree) == []
    bigger = json.loads(json.dumps(tree))
    bigger["definitions"]["node"]["properties"]["name"] = {"type": "string"}
    assert any("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" in f for f in why(SchemaType.JSON, tree, bigger))


def test_json_schema_references_and_bad_schemas():
    address = parse(SchemaType.JSON, {"type": "object", "properties": {"street": {"type": "string"}}})
    ref = (Reference("address.json", "address", 1),)
    user = {"type": "object", "properties": {"home": {"$ref": "address.json"}}}
    parsed = parse(SchemaType.JSON, user, references=ref, dependencies={"address.json": address})
    assert formats.check(parsed, parsed) == []
    for bad in (
        user,  # the $ref names no reference
        {"type": "strnig"},
        {"properties": 5},
        {"$ref": "#/definitions/missing"},
        "[1, 2]",
        '"just a string"',
    ):
        with pytest.raises(errors.RegistryError) as e:
            parse(SchemaType.JSON, bad)
        assert e.value.error_code == errors.INVALID_SCHEMA


def test_json_schema_normalisation_sorts_keys():
    a = parse(
        SchemaType.JSON,
        '{"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}',
        normalize=True,
    )
    b = parse(
        SchemaType.JSON,
        '{"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "type": "object"}',
        normalize=True,
    )
    assert a.identity() == b.identity()
    assert (
        parse(SchemaType.JSON, '{"type":"object","title":"x"}').identity()
        != parse(SchemaType.JSON, '{"title":"x","type":"object"}').identity()
    )


# -- Protobuf ---------------------------------------------------------------------------------


def proto(body: str, package: str = "acme") -> str:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'


BASE = "message M { int32 a = 1; string s = 2; oneof o { int64 x = 3; string y = 4; } }\nenum E { E0 = 0; E1 = 1; }"
PROTO_CASES = [
    ("same", BASE, BASE, None),
    ("field added", BASE, BASE.replace("string s = 2;", "string s = 2; bytes b = 9;"), None),
    ("field removed", BASE, BASE.replace("string s = 2;", ""), None),
    ("field renamed", BASE, BASE.replace("string s = 2;", "string t = 2;"), None),
    ("int32 to int64 (same wire type)", BASE, BASE.replace("int32 a = 1;", "int64 a = 1;"), None),
    ("string to bytes", BASE, BASE.replace("string s = 2;", "bytes s = 2;"), None),
    ("int32 to string", BASE, BASE.replace("int32 a = 1;", "string a = 1;"), "FIELD_SCALAR_KIND_CHANGED"),
    ("int32 to sint32", BASE, BASE.replace("int32 a = 1;", "sint32 a = 1;"), "FIELD_SCALAR_KIND_CHANGED"),
    ("scalar to message", BASE, BASE.replace("int32 a = 1;", "M a = 1;"), "FIELD_KIND_CHANGED"),
    ("message removed", BASE + "\nmessage N { int32 z = 1; }", BASE, "MESSAGE_REMOVED"),
    ("message added", BASE, BASE + "\nmessage N { int32 z = 1; }", None),
    ("enum constant added", BASE, BASE.replace("E1 = 1;", "E1 = 1; E2 = 2;"), None),
    ("enum constant removed", BASE, BASE.replace(" E1 = 1;", ""), "ENUM_CONST_REMOVED"),
    ("enum constant renamed", BASE, BASE.replace("E1 = 1;", "EONE = 1;"), "ENUM_CONST_CHANGED"),
    ("enum removed", BASE, BASE.split("\nenum")[0], "ENUM_REMOVED"),
    (
        "field added to an existing oneof",
        BASE,
        BASE.replace("string y = 4;", "string y = 4; int32 z = 5;"),
        "ONEOF_FIELD_ADDED",
    ),
    ("field removed from a oneof", BASE, BASE.replace("string y = 4;", ""), None),
    (
        "field moved into an existing oneof",
        BASE,
        BASE.replace("string s = 2; oneof o { int64 x = 3;", "oneof o { string s = 2; int64 x = 3;"),
        "FIELD_MOVED_TO_EXISTING_ONEOF",
    ),
    (
        "one field moved into a new oneof",
        "message M { int32 a = 1; string s = 2; }",
        "message M { oneof n { int32 a = 1; } string s = 2; }",
        None,
    ),
    (
        "two fields moved into a new oneof",
        "message M { int32 a = 1; string s = 2; }",
        "message M { oneof n { int32 a = 1; string s = 2; } }",
        "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
    ),
]


@pytest.mark.parametrize("what, writer, reader, problem", PROTO_CASES, ids=[c[0] for c in PROTO_CASES])
def test_protobuf(what, writer, reader, problem):
    found = why(SchemaType.PROTOBUF, proto(writer), proto(reader))
    if problem is None:
        assert found == [], found
    else:
        assert any(problem in f for f in found), found


def test_protobuf_package_changed_and_proto2_required_fields():
    assert "PACKAGE_CHANGED" in why(SchemaType.PROTOBUF, proto(BASE), proto(BASE, package="other"))[0]
    p2 = 'syntax = "proto2"; package p; message M { optional int32 a = 1; }'
    added = 'syntax = "proto2"; package p; message M { optional int32 a = 1; required int32 b = 2; }'
    assert "REQUIRED_FIELD_ADDED" in why(SchemaType.PROTOBUF, p2, added)[0]
    assert "REQUIRED_FIELD_REMOVED" in why(SchemaType.PROTOBUF, added, p2)[0]


def test_protobuf_text_and_base64_descriptor_are_one_schema_and_references_are_imports():
    dep = parse(SchemaType.PROTOBUF, proto("message Addr { string street = 1; }"))
    ref = (Reference("addr.proto", "addr", 1),)
    text = proto(
        'import "addr.proto";\nimport "google/protobuf/timestamp.proto";\n'
        "message User { Addr home = 1; google.protobuf.Timestamp seen = 2; }"
    )
    user = parse(SchemaType.PROTOBUF, text, references=ref, dependencies={"addr.proto": dep})
    from actors.schema_registry.protobuf_format import serialized

    binary = parse(SchemaType.PROTOBUF, serialized(user), references=ref, dependencies={"addr.proto": dep})
    assert binary.identity() == user.identity()
    spaced = parse(
        SchemaType.PROTOBUF,
        text.replace(" = ", "   =   ") + "// a comment\n",
        references=ref,
        dependencies={"addr.proto": dep},
    )
    assert spaced.identity() == user.identity()
    # Without the reference the import is unknown, as text or as a descriptor.
    for bad in (text, serialized(user)):
        with pytest.raises(errors.RegistryError) as e:
            parse(SchemaType.PROTOBUF, bad)
        assert e.value.error_code == errors.INVALID_SCHEMA


@pytest.mark.parametrize(
    "bad",
    [
        'syntax = "proto3"; message M { int32 a = 1',
        'syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }',
        'syntax = "proto3"; message M { Unknown a = 1; }',
        "message " + "M { message " * 200 + "}" * 200,
        'syntax = "proto3";\x00',
        "AAAA////",
    ],
)
def test_protobuf_schemas_that_do_not_compile_are_42201(bad):
    with pytest.raises(errors.RegistryError) as e:
        formats.parse(SchemaType.PROTOBUF, bad)
    assert e.value.error_code == errors.INVALID_SCHEMA


def test_protobuf_normalisation_orders_fields_by_number():
    a = parse(SchemaType.PROTOBUF, proto("message M { int32 b = 2; int32 a = 1; }"), normalize=True)
    b = parse(SchemaType.PROTOBUF, proto("message M { int32 a = 1; int32 b = 2; }"), normalize=True)
    assert a.identity() == b.identity()
    plain = parse(SchemaType.PROTOBUF, proto("message M { int32 b = 2; int32 a = 1; }"))
    assert plain.identity() != b.identity()
