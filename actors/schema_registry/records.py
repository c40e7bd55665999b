"""The records of ``_schemas``, in Confluent's key and value format (JSON, UTF-8).

Keys carry a ``keytype``: ``SCHEMA`` (a subject's version: its id, type, references, schema
text and soft-deleted flag; a null value deletes the version for good), ``CONFIG`` and
``MODE`` (the global one with a null subject, or a subject's; a null value removes it),
``DELETE_SUBJECT`` (every version up to the value's ``version`` soft-deleted), ``CLEAR_SUBJECT``
(every version up to it deleted for good), ``NOOP`` (Confluent's leader-election marker,
nothing to apply). ``SCHEMA_ID_WATERMARK`` is rayqueue's own: the highest schema id handed
out, written when a version is deleted for good so that compaction cannot make an id
reusable; Confluent's and Karapace's readers skip a keytype they do not know.

Keys are serialised in one fixed order so that the same key is the same bytes (compaction
keeps the last value per key). :func:`decode` checks every field's type and raises one of
``internal_records.READ_ERRORS`` for a record it cannot read; the replay skips it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from actors.internal_records import field, json_object, loads
from actors.schema_registry.errors import RegistryError
from actors.schema_registry.model import Compatibility, Mode, Reference, SchemaType


@dataclass(frozen=True, slots=True)
class SchemaRecord:
    """A subject's version (``deleted``: soft-deleted)."""

    subject: str
    version: int
    schema_id: int
    schema_type: SchemaType
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class SchemaTombstone:
    """A subject's version deleted for good."""

    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """The global (``subject`` None) or a subject's compatibility; None level: removed."""

    subject: str | None
    compatibility: Compatibility | None
    normalize: bool | None = None


@dataclass(frozen=True, slots=True)
class ModeRecord:
    """The global (``subject`` None) or a subject's mode; None: removed."""

    subject: str | None
    mode: Mode | None


@dataclass(frozen=True, slots=True)
class DeleteSubjectRecord:
    """Every version of ``subject`` up to ``version`` soft-deleted."""

    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ClearSubjectRecord:
    """Every version of ``subject`` up to ``version`` deleted for good."""

    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class IdWatermark:
    """The highest schema id handed out so far."""

    max_id: int


@dataclass(frozen=True, slots=True)
class Noop:
    """Confluent's NOOP: nothing to apply."""


Record = (
    SchemaRecord
    | SchemaTombstone
    | ConfigRecord
    | ModeRecord
    | DeleteSubjectRecord
    | ClearSubjectRecord
    | IdWatermark
    | Noop
)
WATERMARK_KEYTYPE = "SCHEMA_ID_WATERMARK"


def _bytes(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode(record: Record) -> tuple[bytes, bytes | None]:
    """``(key, value)`` of ``record`` as Confluent writes them."""
    if isinstance(record, SchemaRecord):
        key = {"keytype": "SCHEMA", "subject": record.subject, "version": record.version, "magic": 1}
        value: dict[str, Any] = {"subject": record.subject, "version": record.version, "id": record.schema_id}
        if record.schema_type is not SchemaType.AVRO:
            value["schemaType"] = record.schema_type.value
        if record.references:
            value["references"] = [r.to_json() for r in record.references]
        value["schema"] = record.schema
        value["deleted"] = record.deleted
        return _bytes(key), _bytes(value)
    if isinstance(record, SchemaTombstone):
        return _bytes({"keytype": "SCHEMA", "subject": record.subject, "version": record.version, "magic": 1}), None
    if isinstance(record, ConfigRecord):
        key = {"keytype": "CONFIG", "subject": record.subject, "magic": 0}
        if record.compatibility is None:
            return _bytes(key), None
        value = {"compatibilityLevel": record.compatibility.value}
        if record.normalize is not None:
            value["normalize"] = record.normalize
        return _bytes(key), _bytes(value)
    if isinstance(record, ModeRecord):
        key = {"keytype": "MODE", "subject": record.subject, "magic": 0}
        return _bytes(key), None if record.mode is None else _bytes({"mode": record.mode.value})
    if isinstance(record, DeleteSubjectRecord):
        key = {"keytype": "DELETE_SUBJECT", "subject": record.subject, "magic": 0}
        return _bytes(key), _bytes({"subject": record.subject, "version": record.version})
    if isinstance(record, ClearSubjectRecord):
        key = {"keytype": "CLEAR_SUBJECT", "subject": record.subject, "magic": 0}
        return _bytes(key), _bytes({"subject": record.subject, "version": record.version})
    if isinstance(record, IdWatermark):
        return _bytes({"keytype": WATERMARK_KEYTYPE, "magic": 0}), _bytes({"max_id": record.max_id})
    return _bytes({"keytype": "NOOP", "magic": 0}), None


def _subject_or_none(key: dict[str, Any]) -> str | None:
    return field(key, "subject", (str, type(None)), None)


def _positive(value: int, what: str) -> int:
    if value < 1 or value > 2**31 - 1:
        raise ValueError(f"{what} {value} is out of range")
    return value


def decode(key_bytes: bytes | None, value_bytes: bytes | None) -> Record:
    """The record stored under ``key_bytes`` (a null value is a tombstone or a removal);
    ValueError / TypeError / KeyError for anything else (the replay skips it)."""
    key = json_object(key_bytes, "key")
    keytype = field(key, "keytype", str)
    if keytype == "SCHEMA":
        subject = field(key, "subject", str)
        version = _positive(field(key, "version", int), "version")
        if value_bytes is None:
            return SchemaTombstone(subject, version)
        value = json_object(value_bytes)
        refs = field(value, "references", (list, type(None)), None) or []
        try:
            references = tuple(Reference.from_json(r) for r in refs)
        except RegistryError as exc:
            raise ValueError(exc.message) from None
        schema = field(value, "schema", str)
        return SchemaRecord(
            field(value, "subject", str),
            _positive(field(value, "version", int), "version"),
            _positive(field(value, "id", int), "id"),
            SchemaType(field(value, "schemaType", (str, type(None)), None) or "AVRO"),
            schema,
            references,
            field(value, "deleted", bool, False),
        )
    if keytype == "CONFIG":
        subject = _subject_or_none(key)
        if value_bytes is None:
            return ConfigRecord(subject, None)
        value = json_object(value_bytes)
        level = field(value, "compatibilityLevel", (str, type(None)), None)
        normalize = field(value, "normalize", (bool, type(None)), None)
        return ConfigRecord(subject, Compatibility(level.upper()) if level else None, normalize)
    if keytype == "MODE":
        subject = _subject_or_none(key)
        if value_bytes is None:
            return ModeRecord(subject, None)
        return ModeRecord(subject, Mode(field(json_object(value_bytes), "mode", str).upper()))
    if keytype in ("DELETE_SUBJECT", "CLEAR_SUBJECT"):
        value = json_object(value_bytes)
        subject, version = field(value, "subject", str), _positive(field(value, "version", int), "version")
        return (
            DeleteSubjectRecord(subject, version)
            if keytype == "DELETE_SUBJECT"
            else ClearSubjectRecord(subject, version)
        )
    if keytype == WATERMARK_KEYTYPE:
        return IdWatermark(_positive(field(json_object(value_bytes), "max_id", int), "max_id"))
    if keytype == "NOOP":
        if value_bytes is not None:
            loads(value_bytes)  # whatever it holds, it must be JSON
        return Noop()
    raise ValueError(f"unknown keytype {keytype[:40]!r}")
