"""The schema registry as a plain state machine (no Ray, no HTTP, no clock).

It holds what ``_schemas`` says: schemas by global id, each subject's versions (an id and a
soft-deleted flag), the global and per-subject compatibility levels and modes, and the
highest id ever handed out. :meth:`RegistryState.apply` folds one record into it; the replay
of the topic at start and every write after it use the same function, so a restarted registry
is the one that stopped.

A command (:meth:`register`, :meth:`delete_version`, :meth:`set_config`, ...) checks the
request against the state and returns a :class:`Change`: the records to append and the answer
to give once they are durable. Commands do not change the state; the shell appends the
records and then applies them. Refusals are :class:`~actors.schema_registry.errors.RegistryError`
with Confluent's codes.

Ids: a new schema takes ``max_id + 1``; the same schema (same type, canonical form and
references) registered under another subject gets the id it already has. ``max_id`` counts
every id ever seen, also of versions since deleted for good, and ids a write may have taken
before it failed (:meth:`burn_id`): an id is never handed out twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.schema_registry import errors, formats, protobuf_format
from actors.schema_registry.model import (
    MAX_REFERENCE_DEPTH,
    MAX_REFERENCES,
    Compatibility,
    Mode,
    ParsedSchema,
    Reference,
    SchemaType,
)
from actors.schema_registry.records import (
    ClearSubjectRecord,
    ConfigRecord,
    DeleteSubjectRecord,
    IdWatermark,
    ModeRecord,
    Noop,
    Record,
    SchemaRecord,
    SchemaTombstone,
)

INT32_MAX = 2**31 - 1
LATEST = "latest"


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """A schema by id: its type, text and references."""

    schema_id: int
    schema_type: SchemaType
    text: str
    references: tuple[Reference, ...]


@dataclass(slots=True)
class VersionEntry:
    """One version of a subject."""

    schema_id: int
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class Change:
    """What a command asks for: records to append (in one batch), and the answer once applied."""

    records: tuple[Record, ...]
    answer: Any
    new_id: int | None = None  # an id this change hands out (burned if the write fails)


@dataclass(frozen=True, slots=True)
class Census:
    """How much the registry holds (its metrics' gauges)."""

    subjects: int  # with a live version
    live_versions: int
    deleted_versions: int  # soft-deleted
    schemas: Mapping[SchemaType, int]  # global ids by type, every type present


@dataclass(slots=True)
class _Config:
    compatibility: Compatibility
    normalize: bool | None = None


def check_subject(subject: Any) -> str:
    """A subject name, checked as Confluent does: a non-empty string without control
    characters (42208 otherwise)."""
    if not isinstance(subject, str) or not subject.strip() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in subject):
        raise errors.invalid_subject(str(subject))
    if len(subject) > 10000:
        raise errors.invalid_subject(subject)
    return subject


def parse_version(value: Any) -> int | str:
    """A version id of a path: 1..2^31-1, ``latest`` or -1 (latest); 42202 otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().lower() == LATEST:
        return LATEST
    else:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise errors.invalid_version(value) from None
    if number == -1:
        return LATEST
    if not 1 <= number <= INT32_MAX:
        raise errors.invalid_version(value)
    return number


def _schema_fields(stored: StoredSchema) -> dict[str, Any]:
    """A schema's fields as Confluent answers them: schemaType and references only when not
    the default (Avro, none), then the schema."""
    out: dict[str, Any] = {}
    if stored.schema_type is not SchemaType.AVRO:
        out["schemaType"] = stored.schema_type.value
    if stored.references:
        out["references"] = [r.to_json() for r in stored.references]
    out["schema"] = stored.text
    return out


@dataclass
class RegistryState:
    """The registry's state (see the module docstring)."""

    default_compatibility: Compatibility = Compatibility.BACKWARD
    schemas: dict[int, StoredSchema] = field(default_factory=dict)
    subjects: dict[str, dict[int, VersionEntry]] = field(default_factory=dict)
    configs: dict[str | None, _Config] = field(default_factory=dict)
    modes: dict[str | None, Mode] = field(default_factory=dict)
    max_id: int = 0
    _parsed: dict[int, ParsedSchema] = field(default_factory=dict, repr=False)

    # -- applying records ------------------------------------------------------------------

    def apply(self, record: Record) -> None:
        """Fold one record of ``_schemas`` into the state."""
        if isinstance(record, SchemaRecord):
            stored = StoredSchema(record.schema_id, record.schema_type, record.schema, record.references)
            if self.schemas.get(record.schema_id) != stored:
                self.schemas[record.schema_id] = stored
                self._parsed.pop(record.schema_id, None)
            versions = self.subjects.setdefault(record.subject, {})
            old = versions.get(record.version)
            versions[record.version] = VersionEntry(record.schema_id, record.deleted)
            if old is not None and old.schema_id != record.schema_id:
                self._forget_unused(old.schema_id)
            self.max_id = max(self.max_id, record.schema_id)
        elif isinstance(record, SchemaTombstone):
            self._remove_versions(record.subject, [record.version])
        elif isinstance(record, ConfigRecord):
            if record.compatibility is None:
                self.configs.pop(record.subject, None)
            else:
                self.configs[record.subject] = _Config(record.compatibility, record.normalize)
        elif isinstance(record, ModeRecord):
            if record.mode is None:
                self.modes.pop(record.subject, None)
            else:
                self.modes[record.subject] = record.mode
        elif isinstance(record, DeleteSubjectRecord):
            for version, entry in self.subjects.get(record.subject, {}).items():
                if version <= record.version:
                    entry.deleted = True
        elif isinstance(record, ClearSubjectRecord):
            versions = [v for v in self.subjects.get(record.subject, {}) if v <= record.version]
            self._remove_versions(record.subject, versions)
        elif isinstance(record, IdWatermark):
            self.max_id = max(self.max_id, record.max_id)
        elif not isinstance(record, Noop):
            raise TypeError(f"not a record of _schemas: {record!r}")

    def apply_all(self, records: Iterable[Record]) -> None:
        """Apply ``records`` in order."""
        for record in records:
            self.apply(record)

    def _remove_versions(self, subject: str, versions: Iterable[int]) -> None:
        entries = self.subjects.get(subject)
        if entries is None:
            return
        for version in list(versions):
            entry = entries.pop(version, None)
            if entry is not None:
                self._forget_unused(entry.schema_id)
        if not entries:
            del self.subjects[subject]

    def _forget_unused(self, schema_id: int) -> None:
        if not any(e.schema_id == schema_id for versions in self.subjects.values() for e in versions.values()):
            self.schemas.pop(schema_id, None)
            self._parsed.pop(schema_id, None)

    def burn_id(self, schema_id: int) -> None:
        """Never hand out ``schema_id`` again (a write that took it may have landed)."""
        self.max_id = max(self.max_id, schema_id)

    # -- reading ---------------------------------------------------------------------------

    def compatibility(self, subject: str | None) -> Compatibility:
        """The level that applies to ``subject``: its own, else the global one, else the default."""
        config = self.configs.get(subject) if subject is not None else None
        if config is None:
            config = self.configs.get(None)
        return config.compatibility if config is not None else self.default_compatibility

    def normalize_default(self, subject: str | None) -> bool:
        """Whether registrations normalise when the request does not say (the configs' ``normalize``)."""
        for key in (subject, None):
            config = self.configs.get(key)
            if config is not None and config.normalize is not None:
                return config.normalize
        return False

    def mode(self, subject: str | None) -> Mode:
        """The mode that applies to ``subject``: its own, else the global one (READWRITE)."""
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, Mode.READWRITE)

    def _versions(self, subject: str, deleted: bool = False) -> dict[int, VersionEntry]:
        return {v: e for v, e in sorted(self.subjects.get(subject, {}).items()) if deleted or not e.deleted}

    def list_subjects(self, deleted: bool = False, deleted_only: bool = False, prefix: str = "") -> list[str]:
        """Subjects with a live version (``deleted``: also those with only soft-deleted ones;
        ``deleted_only``: only those)."""
        out = []
        for subject, versions in sorted(self.subjects.items()):
            if not subject.startswith(prefix):
                continue
            live = any(not e.deleted for e in versions.values())
            if deleted_only:
                if any(e.deleted for e in versions.values()):
                    out.append(subject)
            elif live or deleted:
                out.append(subject)
        return out

    def list_versions(self, subject: str, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        """A subject's versions; 40401 when it has none to show."""
        check_subject(subject)
        versions = self.subjects.get(subject, {})
        if deleted_only:
            found = sorted(v for v, e in versions.items() if e.deleted)
        else:
            found = sorted(v for v, e in versions.items() if deleted or not e.deleted)
        if not found and not (deleted_only and versions):
            raise errors.subject_not_found(subject)
        return found

    def resolve_version(self, subject: str, version: Any, deleted: bool = False) -> tuple[int, VersionEntry]:
        """``(version, entry)`` named by ``version`` (a number, ``latest`` or -1); 40401 / 40402."""
        check_subject(subject)
        wanted = parse_version(version)
        versions = self._versions(subject, deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        if wanted == LATEST:
            number = max(versions)
            return number, versions[number]
        entry = versions.get(wanted)
        if entry is None:
            raise errors.version_not_found(subject, wanted)
        return wanted, entry

    def version_json(self, subject: str, version: int, entry: VersionEntry) -> dict[str, Any]:
        """A version as Confluent answers it (schemaType and references only when not default)."""
        stored = self.schemas[entry.schema_id]
        return {"subject": subject, "version": version, "id": entry.schema_id, **_schema_fields(stored)}

    def get_version(self, subject: str, version: Any, deleted: bool = False) -> dict[str, Any]:
        """``GET /subjects/{subject}/versions/{version}``."""
        number, entry = self.resolve_version(subject, version, deleted)
        return self.version_json(subject, number, entry)

    def schema_by_id(self, schema_id: int) -> StoredSchema:
        """The schema with ``schema_id``; 40403 when there is none."""
        stored = self.schemas.get(schema_id) if isinstance(schema_id, int) else None
        if stored is None:
            raise errors.schema_not_found()
        return stored

    def schema_json(self, schema_id: int) -> dict[str, Any]:
        """``GET /schemas/ids/{id}``."""
        return _schema_fields(self.schema_by_id(schema_id))

    def id_versions(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        """``(subject, version)`` of every version holding ``schema_id``; 40403 if none."""
        self.schema_by_id(schema_id)
        return [
            (subject, version)
            for subject, versions in sorted(self.subjects.items())
            for version, entry in sorted(versions.items())
            if entry.schema_id == schema_id and (deleted or not entry.deleted)
        ]

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the schemas (live or soft-deleted) that reference ``subject`` ``version``."""
        ids = {e.schema_id for versions in self.subjects.values() for e in versions.values()}
        return sorted(
            i for i in ids if any(r.subject == subject and r.version == version for r in self.schemas[i].references)
        )

    def list_schemas(self, prefix: str = "", deleted: bool = False, latest_only: bool = False) -> list[dict[str, Any]]:
        """``GET /schemas``: every version of the subjects under ``prefix``."""
        out = []
        for subject in self.list_subjects(deleted=deleted, prefix=prefix):
            versions = self._versions(subject, deleted)
            if latest_only and versions:
                versions = {max(versions): versions[max(versions)]}
            out += [self.version_json(subject, v, e) for v, e in versions.items()]
        return out

    def census(self) -> Census:
        """Subjects, versions and schemas held (one pass over the state)."""
        subjects = live = deleted = 0
        for versions in self.subjects.values():
            alive = sum(1 for e in versions.values() if not e.deleted)
            subjects += alive > 0
            live += alive
            deleted += len(versions) - alive
        schemas = dict.fromkeys(SchemaType, 0)
        for stored in self.schemas.values():
            schemas[stored.schema_type] += 1
        return Census(subjects, live, deleted, schemas)

    # -- parsing ---------------------------------------------------------------------------

    def parsed(self, schema_id: int, _chain: tuple[int, ...] = ()) -> ParsedSchema:
        """The stored schema ``schema_id`` parsed (cached); 42201 when it or a reference does not parse."""
        cached = self._parsed.get(schema_id)
        if cached is not None:
            return cached
        if schema_id in _chain:
            raise errors.invalid_schema(f"the references of schema {schema_id} form a cycle")
        stored = self.schema_by_id(schema_id)
        deps = self._dependencies(stored.references, (*_chain, schema_id))
        parsed = formats.parse(stored.schema_type, stored.text, stored.references, deps)
        self._parsed[schema_id] = parsed
        return parsed

    def _dependencies(self, references: tuple[Reference, ...], chain: tuple[int, ...] = ()) -> dict[str, ParsedSchema]:
        if len(chain) > MAX_REFERENCE_DEPTH:
            raise errors.invalid_schema(f"references nest deeper than {MAX_REFERENCE_DEPTH}")
        deps: dict[str, ParsedSchema] = {}
        for ref in references:
            try:
                _, entry = self.resolve_version(ref.subject, ref.version, deleted=True)
            except errors.RegistryError:
                raise errors.invalid_schema(
                    f"reference {ref.name[:100]!r} names subject {ref.subject[:100]!r} version {ref.version}, "
                    "which does not exist"
                ) from None
            deps[ref.name] = self.parsed(entry.schema_id, chain)
        return deps

    def parse_request(self, subject: str | None, body: Any, normalize: bool | None) -> ParsedSchema:
        """The schema of a register, lookup or compatibility request body; 42201 / 400."""
        if not isinstance(body, Mapping):
            raise errors.bad_request("the request body must be a JSON object")
        schema_type = SchemaType.of(body.get("schemaType"))
        text = body.get("schema")
        if not isinstance(text, str) or (not text.strip() and schema_type is not SchemaType.PROTOBUF):
            raise errors.invalid_schema("the request has no schema (field 'schema', a string)")
        refs = body.get("references") or []
        if not isinstance(refs, list) or len(refs) > MAX_REFERENCES:
            raise errors.invalid_schema(f"references must be a list of at most {MAX_REFERENCES}")
        references = tuple(Reference.from_json(r) for r in refs)
        if len({r.name for r in references}) != len(references):
            raise errors.invalid_schema("two references have the same name")
        if normalize is None:
            normalize = self.normalize_default(subject)
        deps = self._dependencies(references)
        return formats.parse(schema_type, text, references, deps, normalize)

    def _find_in_subject(self, subject: str, schema: ParsedSchema, deleted: bool = False) -> tuple[int, int] | None:
        for version, entry in self._versions(subject, deleted).items():
            stored = self.schemas[entry.schema_id]
            if stored.schema_type is schema.schema_type and stored.references == schema.references:
                if stored.text == schema.text or self._same(entry.schema_id, schema):
                    return version, entry.schema_id
        return None

    def _same(self, schema_id: int, schema: ParsedSchema) -> bool:
        try:
            return self.parsed(schema_id).identity() == schema.identity()
        except errors.RegistryError:
            return False  # a stored schema that no longer parses is no one's twin

    def _find_id(self, schema: ParsedSchema) -> int | None:
        candidates = [
            s
            for s in self.schemas.values()
            if s.schema_type is schema.schema_type and s.references == schema.references
        ]
        for stored in candidates:
            if stored.text == schema.text:
                return stored.schema_id
        for stored in candidates:
            if self._same(stored.schema_id, schema):
                return stored.schema_id
        return None

    # -- commands --------------------------------------------------------------------------

    def _check_writable(self, subject: str | None, import_allowed: bool = False) -> Mode:
        mode = self.mode(subject)
        if mode is Mode.READONLY or (mode is Mode.IMPORT and not import_allowed):
            where = f"Subject {subject}" if subject is not None else "The schema registry"
            raise errors.not_permitted(f"{where} is in {mode.value.lower()} mode")
        return mode

    def register(self, subject: str, body: Any, normalize: bool | None = None) -> Change:
        """``POST /subjects/{subject}/versions``: the schema's id (new, or the one it has);
        409 when it breaks the subject's compatibility level."""
        check_subject(subject)
        mode = self._check_writable(subject, import_allowed=True)
        schema = self.parse_request(subject, body, normalize)
        asked_id, asked_version = body.get("id"), body.get("version")
        for name, value in (("id", asked_id), ("version", asked_version)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise errors.bad_request(f"{name} must be a non-negative integer")
        if mode is Mode.IMPORT:
            return self._import(subject, schema, asked_id, asked_version)
        if asked_id not in (None, -1, 0):
            found = self._find_in_subject(subject, schema)
            if found is not None and found[1] == asked_id:
                return Change((), {"id": asked_id})
            raise errors.not_permitted(f"Subject {subject} is not in import mode: a schema id cannot be given")
        found = self._find_in_subject(subject, schema)
        if found is not None:
            return Change((), {"id": found[1]})
        live = self._versions(subject)
        level = self.compatibility(subject)
        earlier = list(live.items()) if level.transitive else list(live.items())[-1:]
        problems = formats.incompatibilities(
            level, schema, [(v, self.parsed(e.schema_id)) for v, e in reversed(earlier)]
        )
        if problems:
            raise errors.incompatible(
                f'Schema being registered is incompatible with an earlier schema for subject "{subject}", '
                f"details: [{', '.join(problems)}]"
            )
        version = max(self.subjects.get(subject, {}), default=0) + 1
        if version > INT32_MAX:
            raise errors.not_permitted(f"Subject {subject} has no version number left")
        schema_id = self._find_id(schema)
        new_id = None
        if schema_id is None:
            schema_id = new_id = self.max_id + 1
        record = SchemaRecord(subject, version, schema_id, schema.schema_type, schema.text, schema.references)
        return Change((record,), {"id": schema_id}, new_id)

    def _import(self, subject: str, schema: ParsedSchema, schema_id: int | None, version: int | None) -> Change:
        """IMPORT mode: the request names the id (and the version); no compatibility check."""
        if not schema_id:
            raise errors.not_permitted(f"Subject {subject} is in import mode: the request must give the schema id")
        existing = self.schemas.get(schema_id)
        if existing is not None and not (
            existing.schema_type is schema.schema_type
            and existing.references == schema.references
            and (existing.text == schema.text or self._same(schema_id, schema))
        ):
            raise errors.id_does_not_match(
                f"Schema id {schema_id} is already used by another schema; the import cannot reuse it"
            )
        versions = self.subjects.get(subject, {})
        if version in (None, 0, -1):
            version = max(versions, default=0) + 1
        if version > INT32_MAX:
            raise errors.invalid_version(version)
        if version in versions:
            if versions[version].schema_id == schema_id:
                return Change((), {"id": schema_id})
            raise errors.not_permitted(f"Subject {subject} already has a version {version} with another schema")
        record = SchemaRecord(subject, version, schema_id, schema.schema_type, schema.text, schema.references)
        return Change((record,), {"id": schema_id}, schema_id)

    def lookup(self, subject: str, body: Any, normalize: bool | None = None, deleted: bool = False) -> dict[str, Any]:
        """``POST /subjects/{subject}``: the version of the subject holding this schema; 40401 / 40403."""
        check_subject(subject)
        if subject not in self.subjects or not self._versions(subject, deleted):
            raise errors.subject_not_found(subject)
        schema = self.parse_request(subject, body, normalize)
        found = self._find_in_subject(subject, schema, deleted)
        if found is None:
            raise errors.schema_not_found()
        version, _ = found
        return self.version_json(subject, version, self.subjects[subject][version])

    def check_compatibility(self, subject: str, version: Any, body: Any, normalize: bool | None = None) -> list[str]:
        """``POST /compatibility/subjects/{subject}/versions[/{version}]``: why the schema breaks
        the subject's level against that version (``None``: those the level names); empty if it does not."""
        check_subject(subject)
        schema = self.parse_request(subject, body, normalize)
        level = self.compatibility(subject)
        live = self._versions(subject)
        if version is None:
            earlier = list(live.items()) if level.transitive else list(live.items())[-1:]
        else:
            number, entry = self.resolve_version(subject, version)
            earlier = [(number, entry)]
        return formats.incompatibilities(level, schema, [(v, self.parsed(e.schema_id)) for v, e in reversed(earlier)])

    def _check_not_referenced(self, subject: str, versions: Iterable[int]) -> None:
        for version in versions:
            if self.referenced_by(subject, version):
                raise errors.reference_exists(subject, version)

    def delete_version(self, subject: str, version: Any, permanent: bool = False) -> Change:
        """``DELETE /subjects/{subject}/versions/{version}[?permanent=true]``: soft, or for good
        (only once soft-deleted); answers the version number."""
        check_subject(subject)
        self._check_writable(subject)
        number, entry = self.resolve_version(subject, version, deleted=permanent)
        if not permanent and entry.deleted:
            raise errors.version_soft_deleted(subject, number)
        if permanent and not entry.deleted:
            raise errors.version_not_soft_deleted(subject, number)
        self._check_not_referenced(subject, [number])
        stored = self.schemas[entry.schema_id]
        if permanent:
            records: tuple[Record, ...] = (IdWatermark(self.max_id), SchemaTombstone(subject, number))
        else:
            records = (
                SchemaRecord(
                    subject, number, entry.schema_id, stored.schema_type, stored.text, stored.references, True
                ),
            )
        return Change(records, number)

    def delete_subject(self, subject: str, permanent: bool = False) -> Change:
        """``DELETE /subjects/{subject}[?permanent=true]``: every version, soft or for good
        (only once soft-deleted); answers the versions deleted."""
        check_subject(subject)
        self._check_writable(subject)
        versions = self.subjects.get(subject)
        if not versions:
            raise errors.subject_not_found(subject)
        live = sorted(v for v, e in versions.items() if not e.deleted)
        if not permanent:
            if not live:
                raise errors.subject_soft_deleted(subject)
            self._check_not_referenced(subject, live)
            return Change((DeleteSubjectRecord(subject, max(live)),), live)
        if live:
            raise errors.subject_not_soft_deleted(subject)
        every = sorted(versions)
        self._check_not_referenced(subject, every)
        records: list[Record] = [IdWatermark(self.max_id)]
        records += [SchemaTombstone(subject, v) for v in every]
        if subject in self.configs:
            records.append(ConfigRecord(subject, None))
        if subject in self.modes:
            records.append(ModeRecord(subject, None))
        return Change(tuple(records), every)

    def get_config(self, subject: str | None, default_to_global: bool = False) -> dict[str, Any]:
        """``GET /config[/{subject}]``: 40408 for a subject without its own level unless
        ``default_to_global``."""
        if subject is not None:
            check_subject(subject)
            config = self.configs.get(subject)
            if config is None and not default_to_global:
                raise errors.RegistryError(
                    404,
                    errors.SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                    f"Subject '{subject}' does not have subject-level compatibility configured",
                )
        out: dict[str, Any] = {"compatibilityLevel": self.compatibility(subject).value}
        normalize = self.normalize_default(subject)
        if normalize:
            out["normalize"] = True
        return out

    def set_config(self, subject: str | None, body: Any) -> Change:
        """``PUT /config[/{subject}]`` with ``{"compatibility": LEVEL[, "normalize": bool]}``."""
        if subject is not None:
            check_subject(subject)
        if not isinstance(body, Mapping):
            raise errors.bad_request("the request body must be a JSON object")
        level = Compatibility.of(body.get("compatibility", body.get("compatibilityLevel")))
        normalize = body.get("normalize")
        if normalize is not None and not isinstance(normalize, bool):
            raise errors.bad_request("normalize must be true or false")
        answer: dict[str, Any] = {"compatibility": level.value}
        if normalize is not None:
            answer["normalize"] = normalize
        return Change((ConfigRecord(subject, level, normalize),), answer)

    def delete_config(self, subject: str | None) -> Change:
        """``DELETE /config[/{subject}]``: back to the global (or default) level; answers the
        level that was set."""
        if subject is not None:
            check_subject(subject)
            if subject not in self.configs and subject not in self.subjects:
                raise errors.subject_not_found(subject)
        old = self.compatibility(subject)
        records = (ConfigRecord(subject, None),) if subject in self.configs else ()
        return Change(records, {"compatibilityLevel": old.value})

    def get_mode(self, subject: str | None, default_to_global: bool = False) -> dict[str, Any]:
        """``GET /mode[/{subject}]``: 40409 for a subject without its own mode unless ``default_to_global``."""
        if subject is not None:
            check_subject(subject)
            if subject not in self.modes and not default_to_global:
                raise errors.RegistryError(
                    404,
                    errors.SUBJECT_MODE_NOT_CONFIGURED,
                    f"Subject '{subject}' does not have subject-level mode configured",
                )
        return {"mode": self.mode(subject).value}

    def set_mode(self, subject: str | None, body: Any, force: bool = False) -> Change:
        """``PUT /mode[/{subject}]`` with ``{"mode": MODE}``; IMPORT only where there are no
        schemas yet, unless ``force``."""
        if subject is not None:
            check_subject(subject)
        if not isinstance(body, Mapping):
            raise errors.bad_request("the request body must be a JSON object")
        mode = Mode.of(body.get("mode"))
        if mode is Mode.IMPORT and not force and self.mode(subject) is not Mode.IMPORT:
            occupied = self._versions(subject, True) if subject is not None else self.schemas
            if occupied:
                where = f"subject {subject}" if subject is not None else "the registry"
                raise errors.not_permitted(f"Cannot import since {where} already has schemas (use force=true)")
        return Change((ModeRecord(subject, mode),), {"mode": mode.value})

    def delete_mode(self, subject: str) -> Change:
        """``DELETE /mode/{subject}``: back to the global mode; answers the mode that was set."""
        check_subject(subject)
        if subject not in self.modes and subject not in self.subjects:
            raise errors.subject_not_found(subject)
        old = self.mode(subject)
        records = (ModeRecord(subject, None),) if subject in self.modes else ()
        return Change(records, {"mode": old.value})

    def serialized(self, schema_id: int) -> str:
        """A Protobuf schema's descriptor in base64 (``format=serialized``); other types as stored."""
        stored = self.schema_by_id(schema_id)
        if stored.schema_type is not SchemaType.PROTOBUF:
            return stored.text
        return protobuf_format.serialized(self.parsed(schema_id))
