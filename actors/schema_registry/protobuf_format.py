"""Protobuf schemas: parsing ``.proto`` text (with ``protoc``) or a base64
``FileDescriptorProto`` (what confluent-kafka's serializer registers), references as imports,
normalisation, and Confluent's Protobuf compatibility rules.

``.proto`` text is compiled by ``protoc`` (grpcio-tools' build of it) in a child process with a
time and memory bound, so a hostile schema can neither hang nor crash the registry; the
imports a schema names are its references, handed to ``protoc`` as compiled descriptors
(``--descriptor_set_in``), and Google's well-known types are found on its include path. A
base64 descriptor is decoded and checked by building it, with its references, into a fresh
descriptor pool. Either way the model is the schema's ``FileDescriptorProto``; two schemas are
the same when their descriptors are (whatever their text or form), and ``format=serialized``
serves the descriptor in base64.

Compatibility follows Confluent's Protobuf ``SchemaDiff`` (the old schema is the writer, the
new one the reader): a message or enum removed, a package changed, a field's kind or wire type
changed (int32/uint32/int64/uint64/bool, sint32/sint64, fixed32/sfixed32, fixed64/sfixed64 and
string/bytes are interchangeable), its message or enum type changed, a proto2 required field
added or removed, a field added to an existing oneof, moved into an existing oneof or several
moved into a new one, a oneof removed, an enum constant removed or renamed, are incompatible;
adding or removing other fields, renaming fields and adding messages, enums or enum constants
are compatible.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from actors.schema_registry import errors
from actors.schema_registry.model import MAX_DEPTH, ParsedSchema, Reference, SchemaType

PROTOC_TIMEOUT_S = 20.0
PROTOC_MEMORY_BYTES = 1 << 30
WELL_KNOWN_INCLUDE = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
MAIN_FILE = "schema.proto"
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
# protoc in a child: bounded memory, descriptors in, one descriptor out, errors on stderr.
_PROTOC = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from grpc_tools import protoc
sys.exit(protoc.main(["protoc"] + sys.argv[2:]))
"""

F = descriptor_pb2.FieldDescriptorProto
# Wire-compatible scalar groups (Confluent's and protobuf's own guidance).
_SCALAR_GROUP = {
    **dict.fromkeys((F.TYPE_INT32, F.TYPE_UINT32, F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_BOOL), "varint"),
    **dict.fromkeys((F.TYPE_SINT32, F.TYPE_SINT64), "zigzag"),
    **dict.fromkeys((F.TYPE_FIXED32, F.TYPE_SFIXED32), "fixed32"),
    **dict.fromkeys((F.TYPE_FIXED64, F.TYPE_SFIXED64), "fixed64"),
    **dict.fromkeys((F.TYPE_STRING, F.TYPE_BYTES), "bytes"),
    F.TYPE_FLOAT: "float",
    F.TYPE_DOUBLE: "double",
}


def _all_dependencies(dependencies: Mapping[str, ParsedSchema]) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """Every file reached through ``dependencies``, by the import name it is known by."""
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    stack = list(dependencies.items())
    while stack:
        name, dep = stack.pop()
        if dep.schema_type is not SchemaType.PROTOBUF:
            raise errors.invalid_schema(f"reference {name[:100]!r} is not a Protobuf schema")
        if name in files:
            continue
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.CopyFrom(dep.model)
        fdp.name = name
        files[name] = fdp
        stack.extend((dep.dependencies or {}).items())
    return files


def _ordered(files: dict[str, descriptor_pb2.FileDescriptorProto]) -> list[descriptor_pb2.FileDescriptorProto]:
    """``files``, each after the files it imports (cycles are refused by the state machine)."""
    out: list[descriptor_pb2.FileDescriptorProto] = []
    done: set[str] = set()

    def visit(name: str, depth: int) -> None:
        if name in done or name not in files or depth > 64:
            return
        done.add(name)
        for dep in files[name].dependency:
            visit(dep, depth + 1)
        out.append(files[name])

    for name in files:
        visit(name, 0)
    return out


def _block_depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif char == "}":
            depth -= 1
    return deepest


def compile_text(text: str, files: dict[str, descriptor_pb2.FileDescriptorProto]) -> descriptor_pb2.FileDescriptorProto:
    """``.proto`` text compiled by protoc against ``files`` (its imports); 42201 with protoc's
    messages when it does not compile."""
    if "\x00" in text:
        raise errors.invalid_schema("a .proto file holds no NUL characters")
    if _block_depth(text) > MAX_DEPTH:
        raise errors.invalid_schema(f"the schema nests deeper than {MAX_DEPTH} levels")
    with tempfile.TemporaryDirectory(prefix="rayqueue-protoc-") as tmp:
        src = os.path.join(tmp, "src")
        os.mkdir(src)
        with open(os.path.join(src, MAIN_FILE), "w", encoding="utf-8") as fh:
            fh.write(text)
        args = [f"-I{src}", f"-I{WELL_KNOWN_INCLUDE}", f"--descriptor_set_out={os.path.join(tmp, 'out.pb')}"]
        if files:
            deps = descriptor_pb2.FileDescriptorSet(file=_ordered(files))
            with open(os.path.join(tmp, "deps.pb"), "wb") as fh:
                fh.write(deps.SerializeToString())
            args.append(f"--descriptor_set_in={os.path.join(tmp, 'deps.pb')}")
        try:
            done = subprocess.run(
                [sys.executable, "-c", _PROTOC, str(PROTOC_MEMORY_BYTES), *args, MAIN_FILE],
                capture_output=True,
                timeout=PROTOC_TIMEOUT_S,
                cwd=tmp,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise errors.invalid_schema(f"protoc did not finish within {PROTOC_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0:
            message = done.stderr.decode("utf-8", "replace").replace(src + os.sep, "").strip()
            raise errors.invalid_schema(" ".join(message.split())[:2000] or f"protoc exited with {done.returncode}")
        out = descriptor_pb2.FileDescriptorSet.FromString(open(os.path.join(tmp, "out.pb"), "rb").read())
    return out.file[-1]


def decode_descriptor(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """``text`` as a base64 ``FileDescriptorProto``, or None when it is not one."""
    if not text or not _BASE64.fullmatch(text):
        return None
    try:
        data = base64.b64decode("".join(text.split()), validate=True)
        return descriptor_pb2.FileDescriptorProto.FromString(data)
    except (binascii.Error, ValueError, DecodeError):
        return None


def _check_builds(
    fdp: descriptor_pb2.FileDescriptorProto, files: dict[str, descriptor_pb2.FileDescriptorProto]
) -> None:
    """Build ``fdp`` with its imports into a fresh pool; 42201 with the reason if it does not build."""
    pool = descriptor_pool.DescriptorPool()
    default = descriptor_pool.Default()
    added: set[str] = set()

    def add(proto: descriptor_pb2.FileDescriptorProto, depth: int) -> None:
        if proto.name in added or depth > 64:
            return
        added.add(proto.name)
        for dep in proto.dependency:
            if dep in files:
                add(files[dep], depth + 1)
            elif dep.startswith("google/protobuf/"):
                _import_well_known()
                try:
                    known = descriptor_pb2.FileDescriptorProto.FromString(default.FindFileByName(dep).serialized_pb)
                except KeyError:
                    raise errors.invalid_schema(f"import {dep!r} is not a reference of the schema") from None
                add(known, depth + 1)
            else:
                raise errors.invalid_schema(f"import {dep[:200]!r} is not a reference of the schema")
        pool.Add(proto)
        pool.FindFileByName(proto.name)  # builds (and so checks) the file now

    try:
        add(fdp, 0)
    except errors.RegistryError:
        raise
    except Exception as exc:  # noqa: BLE001 - protobuf's builders raise TypeError, KeyError...
        raise errors.invalid_schema(f"the descriptor does not build: {type(exc).__name__}: {exc}") from None


def _import_well_known() -> None:
    # Importing them registers Google's well-known files in the default pool.
    from google.protobuf import (  # noqa: F401
        any_pb2,
        api_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )


def _strip(fdp: descriptor_pb2.FileDescriptorProto, normalize: bool) -> descriptor_pb2.FileDescriptorProto:
    """The descriptor as identity compares it: no file name, no derived JSON names, no
    source info; normalised, fields and enum values in number order."""
    out = descriptor_pb2.FileDescriptorProto()
    out.CopyFrom(fdp)
    out.ClearField("name")
    out.ClearField("source_code_info")
    for message in _messages(out.message_type):
        for field in message.field:
            field.ClearField("json_name")
        if normalize:
            fields = sorted(message.field, key=lambda f: f.number)
            del message.field[:]
            message.field.extend(fields)
    if normalize:
        for enum in _enums(out):
            values = sorted(enum.value, key=lambda v: v.number)
            del enum.value[:]
            enum.value.extend(values)
    return out


def _messages(messages: Any) -> Iterator[descriptor_pb2.DescriptorProto]:
    stack = list(messages)
    while stack:
        message = stack.pop()
        yield message
        stack.extend(message.nested_type)


def _enums(fdp: descriptor_pb2.FileDescriptorProto) -> Iterator[descriptor_pb2.EnumDescriptorProto]:
    yield from fdp.enum_type
    for message in _messages(fdp.message_type):
        yield from message.enum_type


def parse(
    text: str,
    references: tuple[Reference, ...] = (),
    dependencies: Mapping[str, ParsedSchema] | None = None,
    normalize: bool = False,
) -> ParsedSchema:
    """``text`` (``.proto`` text or a base64 descriptor) as a Protobuf schema; 42201 when it
    does not compile or build."""
    if not isinstance(text, str):
        raise errors.invalid_schema("the schema must be a string")
    files = _all_dependencies(dependencies or {})
    fdp = decode_descriptor(text)
    if fdp is not None:
        _check_builds(fdp, files)
    else:
        fdp = compile_text(text, files)
    canonical = base64.b64encode(_strip(fdp, normalize).SerializeToString(deterministic=True)).decode("ascii")
    return ParsedSchema(SchemaType.PROTOBUF, text, canonical, fdp, references, dependencies or {})


def serialized(schema: ParsedSchema) -> str:
    """The schema's descriptor in base64 (``format=serialized``)."""
    return base64.b64encode(schema.model.SerializeToString(deterministic=True)).decode("ascii")


# -- compatibility ---------------------------------------------------------------------------


def _index(fdp: descriptor_pb2.FileDescriptorProto) -> tuple[dict[str, Any], dict[str, Any]]:
    """Full name -> message and full name -> enum, for every one the file defines."""
    messages: dict[str, Any] = {}
    enums: dict[str, Any] = {}
    prefix = f".{fdp.package}" if fdp.package else ""
    stack = [(prefix, m) for m in fdp.message_type]
    enums.update((f"{prefix}.{e.name}", e) for e in fdp.enum_type)
    while stack:
        scope, message = stack.pop()
        name = f"{scope}.{message.name}"
        messages[name] = message
        stack.extend((name, m) for m in message.nested_type)
        enums.update((f"{name}.{e.name}", e) for e in message.enum_type)
    return messages, enums


def _kind(field: Any) -> str:
    if field.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        return "message"
    return "enum" if field.type == F.TYPE_ENUM else "scalar"


def _oneof(message: Any, field: Any) -> str | None:
    if field.HasField("oneof_index") and not field.proto3_optional and field.oneof_index < len(message.oneof_decl):
        return message.oneof_decl[field.oneof_index].name
    return None


def check(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    found = [f"{{errorType:'{kind}', description:'at {where}'}}" for kind, where in diff(writer.model, reader.model)]
    return found


def diff(original: Any, update: Any) -> list[tuple[str, str]]:
    """The incompatible differences from writer descriptor ``original`` to reader ``update``."""
    if original.package != update.package:
        return [("PACKAGE_CHANGED", f"#/package {original.package!r} -> {update.package!r}")]
    out: list[tuple[str, str]] = []
    omessages, oenums = _index(original)
    umessages, uenums = _index(update)
    for name, om in omessages.items():
        um = umessages.get(name)
        if um is None:
            out.append(("MESSAGE_REMOVED", f"#/{name.lstrip('.')}"))
        else:
            _fields(name.lstrip("."), om, um, out)
    for name, oe in oenums.items():
        ue = uenums.get(name)
        where = f"#/{name.lstrip('.')}"
        if ue is None:
            out.append(("ENUM_REMOVED", where))
            continue
        uvalues = {v.number: v.name for v in ue.value}
        for value in oe.value:
            if value.number not in uvalues:
                out.append(("ENUM_CONST_REMOVED", f"{where}/{value.name}"))
            elif uvalues[value.number] != value.name:
                out.append(("ENUM_CONST_CHANGED", f"{where}/{value.name}"))
    return out


def _fields(name: str, om: Any, um: Any, out: list[tuple[str, str]]) -> None:
    ofields = {f.number: f for f in om.field}
    ufields = {f.number: f for f in um.field}
    ooneofs = {o.name for o in om.oneof_decl}
    uoneofs = {o.name for o in um.oneof_decl}
    moved_to_new: dict[str, int] = {}
    for number, of in ofields.items():
        where = f"#/{name}/{number}"
        uf = ufields.get(number)
        if uf is None:
            if of.label == F.LABEL_REQUIRED:
                out.append(("REQUIRED_FIELD_REMOVED", where))
            continue
        okind, ukind = _kind(of), _kind(uf)
        if okind != ukind:
            out.append(("FIELD_KIND_CHANGED", where))
        elif okind == "scalar" and _SCALAR_GROUP.get(of.type) != _SCALAR_GROUP.get(uf.type):
            out.append(("FIELD_SCALAR_KIND_CHANGED", where))
        elif okind != "scalar" and of.type_name != uf.type_name:
            out.append(("FIELD_NAMED_TYPE_CHANGED", where))
        if (of.label == F.LABEL_REPEATED) != (uf.label == F.LABEL_REPEATED) and _SCALAR_GROUP.get(of.type) not in (
            "bytes",
            None,
        ):
            out.append(("FIELD_NUMERIC_LABEL_CHANGED", where))
        if (of.label == F.LABEL_REQUIRED) != (uf.label == F.LABEL_REQUIRED):
            out.append(("REQUIRED_FIELD_ADDED" if uf.label == F.LABEL_REQUIRED else "REQUIRED_FIELD_REMOVED", where))
        oo, uo = _oneof(om, of), _oneof(um, uf)
        if oo is None and uo is not None:
            if uo in ooneofs:
                out.append(("FIELD_MOVED_TO_EXISTING_ONEOF", where))
            else:
                moved_to_new[uo] = moved_to_new.get(uo, 0) + 1
    for oneof, count in moved_to_new.items():
        if count > 1:
            out.append(("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"#/{name}/{oneof}"))
    for number, uf in ufields.items():
        if number in ofields:
            continue
        where = f"#/{name}/{number}"
        if uf.label == F.LABEL_REQUIRED:
            out.append(("REQUIRED_FIELD_ADDED", where))
        uo = _oneof(um, uf)
        if uo is not None and uo in ooneofs:
            out.append(("ONEOF_FIELD_ADDED", where))
    for oneof in sorted(ooneofs - uoneofs):
        # A proto3 optional field's synthetic oneof is not a oneof of the schema.
        if not any(_oneof(om, f) == oneof for f in om.field):
            continue
        out.append(("ONEOF_REMOVED", f"#/{name}/{oneof}"))
