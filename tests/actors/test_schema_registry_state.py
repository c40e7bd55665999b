"""The schema registry's state machine without Ray: ids, versions, deletes, configs, modes,
references, and the replay of ``_schemas`` (compacted or not) giving back the same state."""

from __future__ import annotations

import json

import pytest

from actors.internal_records import READ_ERRORS
from actors.schema_registry import errors
from actors.schema_registry import records as R
from actors.schema_registry.model import Compatibility, Mode, SchemaType
from actors.schema_registry.state import Change, RegistryState


def avro(*fields: tuple[str, str] | tuple[str, str, object], name: str = "User") -> dict:
    spec = []
    for f in fields:
        item = {"name": f[0], "type": f[1]}
        if len(f) > 2:
            item["default"] = f[2]
        spec.append(item)
    return {"schema": json.dumps({"type": "record", "name": name, "fields": spec})}


class Registry:
    """A state plus the log it was built from (what _schemas would hold)."""

    def __init__(self, default: Compatibility = Compatibility.BACKWARD) -> None:
        self.state = RegistryState(default)
        self.log: list[tuple[bytes, bytes | None]] = []

    def run(self, change: Change):
        for record in change.records:
            self.log.append(R.encode(record))
        self.state.apply_all(change.records)
        return change.answer

    def replayed(self, compact: bool = False) -> RegistryState:
        log = self.log
        if compact:  # what compaction leaves: the last value of each key, tombstones dropped
            last = {}
            for key, value in log:
                last.pop(key, None)
                last[key] = value
            log = [(k, v) for k, v in last.items() if v is not None]
        state = RegistryState(self.state.default_compatibility)
        for key, value in log:
            state.apply(R.decode(key, value))
        return state


def code_of(exc_info) -> int:
    return exc_info.value.error_code


def test_register_gives_ids_and_versions_and_reuses_an_id_across_subjects():
    reg = Registry()
    assert reg.run(reg.state.register("a-value", avro(("x", "int")))) == {"id": 1}
    # The same schema again: no new version, same id.
    change = reg.state.register("a-value", avro(("x", "int")))
    assert change.records == () and change.answer == {"id": 1}
    # Whitespace does not make another schema.
    spaced = {"schema": json.dumps(json.loads(avro(("x", "int"))["schema"]), indent=4)}
    assert reg.state.register("a-value", spaced).records == ()
    # Under another subject: a new version there, the same global id.
    assert reg.run(reg.state.register("b-value", avro(("x", "int")))) == {"id": 1}
    assert reg.run(reg.state.register("a-value", avro(("x", "int"), ("y", "string", "")))) == {"id": 2}
    assert reg.state.list_subjects() == ["a-value", "b-value"]
    assert reg.state.list_versions("a-value") == [1, 2]
    latest = reg.state.get_version("a-value", "latest")
    assert latest["version"] == 2 and latest["id"] == 2 and "schemaType" not in latest
    assert reg.state.get_version("a-value", -1) == latest
    assert reg.state.id_versions(1) == [("a-value", 1), ("b-value", 1)]


def test_incompatible_schemas_are_refused_with_409_and_the_reason():
    reg = Registry()
    reg.run(reg.state.register("s", avro(("x", "int"))))
    with pytest.raises(errors.RegistryError) as refused:
        reg.state.register("s", avro(("x", "int"), ("y", "string")))
    assert refused.value.status == 409 and code_of(refused) == 409
    assert (
        "READER_FIELD_MISSING_DEFAULT_VALUE" in refused.value.message and "oldSchemaVersion: 1" in refused.value.message
    )


def test_transitive_levels_check_every_live_version_and_plain_ones_the_latest():
    reg = Registry()
    reg.run(reg.state.set_config("s", {"compatibility": "BACKWARD"}))
    reg.run(reg.state.register("s", avro(("x", "int"))))
    reg.run(reg.state.register("s", avro(("x", "int"), ("y", "string", "d"))))
    reg.run(reg.state.register("s", avro(("y", "string", "d"))))  # backward against v2 only: fine
    adds_x = avro(("y", "string", "d"), ("x", "string"))  # x without a default, and as a string
    # BACKWARD: only v3 is checked; x has no default, so even that fails.
    with pytest.raises(errors.RegistryError):
        reg.state.register("s", adds_x)
    with_default = avro(("y", "string", "d"), ("x", "string", "s"))
    assert reg.state.register("s", with_default).records  # v3 lacks x: a default is enough
    reg.run(reg.state.set_config("s", {"compatibility": "BACKWARD_TRANSITIVE"}))
    with pytest.raises(errors.RegistryError) as refused:  # v1 wrote x as an int
        reg.state.register("s", with_default)
    assert "oldSchemaVersion: 1" in refused.value.message
    # Soft-deleted versions are not checked any more (v2 wrote x as an int too).
    reg.run(reg.state.delete_version("s", 1))
    with pytest.raises(errors.RegistryError) as refused:
        reg.state.register("s", with_default)
    assert "oldSchemaVersion: 2" in refused.value.message
    reg.run(reg.state.delete_version("s", 2))
    assert reg.state.register("s", with_default).records


def test_soft_and_hard_deletes_follow_confluent_codes():
    reg = Registry()
    reg.run(reg.state.register("s", avro(("x", "int"))))
    reg.run(reg.state.register("s", avro(("x", "int"), ("y", "int", 0))))
    with pytest.raises(errors.RegistryError) as e:
        reg.state.delete_version("s", 1, permanent=True)
    assert code_of(e) == errors.SCHEMA_VERSION_NOT_SOFT_DELETED
    assert reg.run(reg.state.delete_version("s", 1)) == 1
    with pytest.raises(errors.RegistryError) as e:
        reg.state.delete_version("s", 1)
    assert code_of(e) == errors.VERSION_NOT_FOUND  # not among the live versions
    assert reg.state.list_versions("s") == [2] and reg.state.list_versions("s", deleted=True) == [1, 2]
    assert reg.state.get_version("s", 1, deleted=True)["id"] == 1
    with pytest.raises(errors.RegistryError) as e:
        reg.state.delete_subject("s", permanent=True)
    assert code_of(e) == errors.SUBJECT_NOT_SOFT_DELETED
    assert reg.run(reg.state.delete_subject("s")) == [2]
    with pytest.raises(errors.RegistryError) as e:
        reg.state.delete_subject("s")
    assert code_of(e) == errors.SUBJECT_SOFT_DELETED
    assert reg.state.list_subjects() == [] and reg.state.list_subjects(deleted=True) == ["s"]
    with pytest.raises(errors.RegistryError) as e:
        reg.state.get_version("s", "latest")
    assert code_of(e) == errors.SUBJECT_NOT_FOUND
    # Soft-deleted: the ids still resolve (consumers still read old data).
    assert reg.state.schema_json(1)["schema"]
    assert reg.run(reg.state.delete_subject("s", permanent=True)) == [1, 2]
    with pytest.raises(errors.RegistryError) as e:
        reg.state.schema_json(2)
    assert code_of(e) == errors.SCHEMA_NOT_FOUND
    assert reg.state.list_subjects(deleted=True) == []


def test_ids_are_never_reused_after_hard_deletes_compaction_and_failed_writes():
    reg = Registry()
    reg.run(reg.state.register("s", avro(("x", "int"))))
    reg.run(reg.state.register("t", avro(("y", "int"))))
    reg.run(reg.state.delete_subject("t"))
    reg.run(reg.state.delete_subject("t", permanent=True))
    for state in (reg.state, reg.replayed(), reg.replayed(compact=True)):
        assert state.max_id == 2
        assert state.register("u", avro(("z", "int"))).answer == {"id": 3}
    # A write that failed (it may still have landed) burns the id it took.
    change = reg.state.register("u", avro(("z", "int")))
    reg.state.burn_id(change.new_id)
    assert reg.state.register("u", avro(("z", "int"))).answer == {"id": 4}


def test_replay_rebuilds_the_same_state_compacted_or_not():
    reg = Registry()
    reg.run(reg.state.register("a", avro(("x", "int"))))
    reg.run(reg.state.register("a", avro(("x", "int"), ("y", "int", 1))))
    reg.run(reg.state.register("b", {"schemaType": "JSON", "schema": '{"type":"object"}'}))
    reg.run(reg.state.delete_version("a", 1))
    reg.run(reg.state.set_config(None, {"compatibility": "FULL"}))
    reg.run(reg.state.set_config("b", {"compatibility": "NONE", "normalize": True}))
    reg.run(reg.state.set_mode("a", {"mode": "READONLY"}))
    for state in (reg.replayed(), reg.replayed(compact=True)):
        assert state.list_subjects(deleted=True) == reg.state.list_subjects(deleted=True)
        assert state.list_versions("a", deleted=True) == [1, 2] and state.list_versions("a") == [2]
        assert state.schemas == reg.state.schemas
        assert state.compatibility(None) is Compatibility.FULL and state.compatibility("b") is Compatibility.NONE
        assert state.normalize_default("b") is True and state.mode("a") is Mode.READONLY
        assert state.max_id == reg.state.max_id


def test_records_use_confluents_key_and_value_format():
    reg = Registry()
    reg.run(reg.state.register("s", {"schemaType": "JSON", "schema": '{"type": "string"}'}))
    key, value = reg.log[0]
    assert json.loads(key) == {"keytype": "SCHEMA", "subject": "s", "version": 1, "magic": 1}
    assert json.loads(value) == {
        "subject": "s",
        "version": 1,
        "id": 1,
        "schemaType": "JSON",
        "schema": '{"type":"string"}',
        "deleted": False,
    }
    reg.run(reg.state.set_config(None, {"compatibility": "full"}))
    key, value = reg.log[-1]
    assert json.loads(key) == {"keytype": "CONFIG", "subject": None, "magic": 0}
    assert json.loads(value) == {"compatibilityLevel": "FULL"}
    # What Confluent itself writes is read: an Avro schema without schemaType, DELETE_SUBJECT, NOOP.
    state = RegistryState()
    state.apply(
        R.decode(
            b'{"keytype":"SCHEMA","subject":"c","version":1,"magic":1}',
            b'{"subject":"c","version":1,"id":7,"schema":"\\"string\\"","deleted":false}',
        )
    )
    state.apply(R.decode(b'{"keytype":"NOOP","magic":0}', None))
    state.apply(R.decode(b'{"keytype":"DELETE_SUBJECT","subject":"c","magic":0}', b'{"subject":"c","version":1}'))
    assert state.list_subjects(deleted=True) == ["c"] and state.list_subjects() == [] and state.max_id == 7


@pytest.mark.parametrize(
    "key, value",
    [
        (b"not json", b"{}"),
        (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b"{broken"),
        (b'{"keytype":"SCHEMA","subject":"s","version":"1","magic":1}', None),
        (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b'{"subject":"s","version":1,"id":true}'),
        (
            b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}',
            b'{"subject":"s","version":1,"id":0,"schema":""}',
        ),
        (
            b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}',
            b'{"subject":"s","version":1,"id":1,"schema":"x","schemaType":"XML"}',
        ),
        (
            b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}',
            b'{"subject":"s","version":1,"id":1,"schema":"x","references":[{"name":1}]}',
        ),
        (b'{"keytype":"CONFIG","subject":null,"magic":0}', b'{"compatibilityLevel":"SOMETIMES"}'),
        (b'{"keytype":"MODE","subject":null,"magic":0}', b'{"mode":7}'),
        (b'{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}', None),
        (b'{"keytype":"WHATEVER","magic":0}', b"{}"),
        (b"[1,2]", None),
        (None, b"{}"),
    ],
)
def test_an_unreadable_record_raises_what_the_replay_skips(key, value):
    with pytest.raises(READ_ERRORS):
        R.decode(key, value)


def test_modes_refuse_writes_and_import_takes_the_given_ids():
    reg = Registry()
    reg.run(reg.state.register("s", avro(("x", "int"))))
    reg.run(reg.state.set_mode("s", {"mode": "READONLY"}))
    for command in (
        lambda: reg.state.register("s", avro(("x", "int"), ("y", "int", 0))),
        lambda: reg.state.delete_subject("s"),
    ):
        with pytest.raises(errors.RegistryError) as e:
            command()
        assert code_of(e) == errors.OPERATION_NOT_PERMITTED
    assert reg.run(reg.state.delete_mode("s")) == {"mode": "READONLY"}
    # IMPORT only where there are no schemas, unless forced.
    with pytest.raises(errors.RegistryError) as e:
        reg.state.set_mode(None, {"mode": "IMPORT"})
    assert code_of(e) == errors.OPERATION_NOT_PERMITTED
    with pytest.raises(errors.RegistryError) as e:
        reg.state.set_mode(None, {"mode": "SOMETIMES"})
    assert code_of(e) == errors.INVALID_MODE
    reg.run(reg.state.set_mode("imported", {"mode": "IMPORT"}))
    body = {**avro(("q", "int")), "id": 100, "version": 5}
    assert reg.run(reg.state.register("imported", body)) == {"id": 100}
    assert reg.state.list_versions("imported") == [5] and reg.state.max_id == 100
    # An id already holding another schema cannot be imported again.
    with pytest.raises(errors.RegistryError) as e:
        reg.state.register("imported", {**avro(("other", "int")), "id": 1})
    assert code_of(e) == errors.ID_DOES_NOT_MATCH
    reg.run(reg.state.set_mode("imported", {"mode": "READWRITE"}))
    assert reg.run(reg.state.register("fresh", avro(("f", "int")))) == {"id": 101}
    # Outside IMPORT an id cannot be chosen.
    with pytest.raises(errors.RegistryError) as e:
        reg.state.register("fresh2", {**avro(("g", "int")), "id": 500})
    assert code_of(e) == errors.OPERATION_NOT_PERMITTED


def test_configs_and_their_codes():
    reg = Registry()
    assert reg.state.get_config(None) == {"compatibilityLevel": "BACKWARD"}
    with pytest.raises(errors.RegistryError) as e:
        reg.state.get_config("s")
    assert code_of(e) == errors.SUBJECT_COMPATIBILITY_NOT_CONFIGURED
    assert reg.state.get_config("s", default_to_global=True) == {"compatibilityLevel": "BACKWARD"}
    with pytest.raises(errors.RegistryError) as e:
        reg.state.set_config("s", {"compatibility": "SIDEWAYS"})
    assert code_of(e) == errors.INVALID_COMPATIBILITY_LEVEL
    assert reg.run(reg.state.set_config("s", {"compatibility": "forward_transitive"})) == {
        "compatibility": "FORWARD_TRANSITIVE"
    }
    assert reg.state.get_config("s") == {"compatibilityLevel": "FORWARD_TRANSITIVE"}
    assert reg.run(reg.state.delete_config("s")) == {"compatibilityLevel": "FORWARD_TRANSITIVE"}
    assert reg.state.compatibility("s") is Compatibility.BACKWARD
    with pytest.raises(errors.RegistryError) as e:
        reg.state.get_mode("s")
    assert code_of(e) == errors.SUBJECT_MODE_NOT_CONFIGURED


def test_references_resolve_and_protect_what_they_reference():
    reg = Registry()
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "acme",
        "fields": [{"name": "street", "type": "string"}],
    }
    reg.run(reg.state.register("address", {"schema": json.dumps(address)}))
    user = {"type": "record", "name": "User", "namespace": "acme", "fields": [{"name": "home", "type": "Address"}]}
    ref = {"name": "acme.Address", "subject": "address", "version": 1}
    body = {"schema": json.dumps(user), "references": [ref]}
    assert reg.run(reg.state.register("user", body)) == {"id": 2}
    assert reg.state.get_version("user", 1)["references"] == [ref]
    assert reg.state.referenced_by("address", 1) == [2]
    # Without the reference the type is unknown.
    with pytest.raises(errors.RegistryError) as e:
        reg.state.register("user2", {"schema": json.dumps(user)})
    assert code_of(e) == errors.INVALID_SCHEMA
    # A reference to a version that does not exist.
    with pytest.raises(errors.RegistryError) as e:
        reg.state.register("user3", {"schema": json.dumps(user), "references": [{**ref, "version": 9}]})
    assert code_of(e) == errors.INVALID_SCHEMA
    # What is referenced cannot be deleted.
    for command in (lambda: reg.state.delete_version("address", 1), lambda: reg.state.delete_subject("address")):
        with pytest.raises(errors.RegistryError) as e:
            command()
        assert code_of(e) == errors.REFERENCE_EXISTS


def test_a_reference_cycle_in_the_topic_is_an_error_not_a_hang():
    # The API cannot make one (a reference names an existing version); records can.
    state = RegistryState()
    for subject, other in (("a", "b"), ("b", "a")):
        schema_id = 1 if subject == "a" else 2
        ref = [{"name": f"{other}.json", "subject": other, "version": 1}]
        value = {"subject": subject, "version": 1, "id": schema_id, "schemaType": "JSON", "references": ref}
        value["schema"] = json.dumps({"$ref": f"{other}.json"})
        key = json.dumps({"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1}).encode()
        state.apply(R.decode(key, json.dumps(value).encode()))
    with pytest.raises(errors.RegistryError) as e:
        state.parsed(1)
    assert code_of(e) == errors.INVALID_SCHEMA and "cycle" in e.value.message
    body = {
        "schemaType": "JSON",
        "schema": '{"$ref": "a.json"}',
        "references": [{"name": "a.json", "subject": "a", "version": 1}],
    }
    with pytest.raises(errors.RegistryError) as e:
        state.register("c", body)
    assert code_of(e) == errors.INVALID_SCHEMA


def test_lookup_and_normalisation():
    reg = Registry()
    schema = {"type": "record", "name": "R", "namespace": "n", "fields": [{"type": {"type": "int"}, "name": "x"}]}
    reg.run(reg.state.register("s", {"schema": json.dumps(schema)}, normalize=True))
    stored = reg.state.get_version("s", 1)["schema"]
    assert stored == '{"name":"n.R","type":"record","fields":[{"name":"x","type":"int"}]}'
    # The same schema written otherwise is the same once normalised, and only then.
    reordered = {"fields": [{"name": "x", "type": "int"}], "name": "R", "namespace": "n", "type": "record"}
    assert reg.state.lookup("s", {"schema": json.dumps(reordered)}, normalize=True)["version"] == 1
    with pytest.raises(errors.RegistryError) as e:
        reg.state.lookup("s", {"schema": json.dumps(reordered)})
    assert code_of(e) == errors.SCHEMA_NOT_FOUND
    with pytest.raises(errors.RegistryError) as e:
        reg.state.lookup("nothing", {"schema": json.dumps(reordered)})
    assert code_of(e) == errors.SUBJECT_NOT_FOUND


@pytest.mark.parametrize(
    "subject, version, code",
    [
        ("", 1, errors.INVALID_SUBJECT),
        ("bad\x00name", 1, errors.INVALID_SUBJECT),
        ("s", "first", errors.INVALID_VERSION),
        ("s", 0, errors.INVALID_VERSION),
        ("s", 2**31, errors.INVALID_VERSION),
        ("s", 7, errors.VERSION_NOT_FOUND),
        ("nobody", 1, errors.SUBJECT_NOT_FOUND),
    ],
)
def test_bad_subjects_and_versions_get_confluent_codes(subject, version, code):
    reg = Registry()
    reg.run(reg.state.register("s", avro(("x", "int"))))
    with pytest.raises(errors.RegistryError) as e:
        reg.state.get_version(subject, version)
    assert code_of(e) == code


def test_the_census_counts_live_subjects_versions_and_schemas_by_type():
    reg = Registry()
    empty = reg.state.census()
    assert (empty.subjects, empty.live_versions, empty.deleted_versions) == (0, 0, 0)
    assert empty.schemas == {SchemaType.AVRO: 0, SchemaType.JSON: 0, SchemaType.PROTOBUF: 0}
    reg.run(reg.state.register("a", avro(("x", "int"))))
    reg.run(reg.state.register("a", avro(("x", "int"), ("y", "int", 0))))
    reg.run(reg.state.register("b", avro(("x", "int"))))  # the same schema: the same id
    reg.run(reg.state.register("j", {"schema": '{"type": "object"}', "schemaType": "JSON"}))
    reg.run(reg.state.delete_version("a", 1))
    reg.run(reg.state.delete_subject("b"))
    census = reg.state.census()
    assert (census.subjects, census.live_versions, census.deleted_versions) == (2, 2, 2)
    assert census.schemas == {SchemaType.AVRO: 2, SchemaType.JSON: 1, SchemaType.PROTOBUF: 0}
    reg.run(reg.state.delete_subject("b", permanent=True))
    assert reg.state.census().deleted_versions == 1 and reg.state.census().subjects == 2
