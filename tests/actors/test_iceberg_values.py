"""value_schema_id_prefix without Ray: Avro and JSON Schema values in Confluent's wire format
become typed columns, the table's schema grows with the subject's schemas, and every record
that cannot be typed goes to the dead-letter table (or is dropped and counted) without stopping
the partition."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

import pytest

from actors.clock import ManualClock
from actors.iceberg.translators import Translators
from storage import Log, log_config
from tests.actors.iceberg_support import FakeRegistry, LogSource, append, avro_value, json_value, run, settle

VALUE_MODE = {"rayqueue_iceberg_mode": "value_schema_id_prefix"}

USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {
            "name": "address",
            "type": ["null", {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}],
            "default": None,
        },
    ],
}
# v2: id widened to long, a new field with a default, logical types.
USER_V2 = {
    **USER_V1,
    "fields": [
        {"name": "id", "type": "long"},
        *USER_V1["fields"][1:],
        {"name": "joined", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
        {"name": "balance", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "level", "type": {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"]}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
    ],
}
# A change Iceberg cannot follow: name becomes an int.
USER_BAD = {**USER_V1, "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "int"}]}
RECURSIVE = {
    "type": "record",
    "name": "Node",
    "fields": [{"name": "next", "type": ["null", "Node"], "default": None}],
}


@pytest.fixture
def registry() -> FakeRegistry:
    r = FakeRegistry()
    r.add(1, USER_V1)
    r.add(2, USER_V2)
    r.add(3, USER_BAD)
    r.add(4, RECURSIVE)
    r.add(5, "syntax = 'proto3'; message M { int32 a = 1; }", kind="PROTOBUF")
    return r


def host(root: Path, clock: ManualClock, registry: FakeRegistry) -> Translators:
    t = Translators(1, clock, registry)
    t.configure({"log.dirs": str(root)})
    return t


def table_rows(t: Translators, name: str) -> list[dict]:
    table = t.catalog().load(name)
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["rayqueue"]["offset"]) if table else []


def test_avro_values_become_columns_and_the_schema_grows(tmp_path: Path, registry: FakeRegistry) -> None:
    log = Log(tmp_path / "users-0", log_config())
    v1 = {"id": 7, "name": "ann", "tags": ["a", "b"], "address": {"city": "Oslo"}}
    append(log, [avro_value(USER_V1, 1, v1)], keys=[b"u7"], headers=[("trace", b"t1")])
    clock = ManualClock()
    t = host(tmp_path, clock, registry)
    source = LogSource(log, "users", **VALUE_MODE)
    run(settle(t, [source], clock))
    v2 = {
        "id": 2**40,
        "name": "bo",
        "tags": [],
        "address": None,
        "joined": 1_700_000_000_000,
        "balance": decimal.Decimal("12.34"),
        "level": "HIGH",
        "scores": {"x": 1.5},
    }
    append(log, [avro_value(USER_V2, 2, v2), None])  # and a tombstone
    run(settle(t, [source], clock))
    rows = table_rows(t, "users")
    assert [r["rayqueue"]["offset"] for r in rows] == [0, 1, 2]
    first, second, tombstone = rows
    assert first["id"] == 7 and first["name"] == "ann" and first["tags"] == ["a", "b"]
    assert first["address"] == {"city": "Oslo"} and first["joined"] is None
    assert first["rayqueue"]["key"] == b"u7" and first["rayqueue"]["headers"] == [{"key": "trace", "value": b"t1"}]
    assert second["id"] == 2**40 and second["level"] == "HIGH" and second["balance"] == decimal.Decimal("12.34")
    assert second["joined"] == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)
    assert dict(second["scores"]) == {"x": 1.5}
    assert tombstone["id"] is None and tombstone["name"] is None
    schema = t.catalog().load("users").schema()
    assert str(schema.find_field("id").field_type) == "long"  # widened from int
    assert t.describe("users", 0)["invalid_records"] == 0


def test_records_that_cannot_be_typed_go_to_the_dead_letter_table(tmp_path: Path, registry: FakeRegistry) -> None:
    log = Log(tmp_path / "bad-0", log_config())
    good = {"id": 1, "name": "ok", "tags": [], "address": None}
    values = [
        avro_value(USER_V1, 1, good),
        b"plain text, no wire format",
        b"\x00\x00\x00\x00\x63" + b"\x02",  # schema id 99: unknown
        b"\x00\x00\x00\x00\x01" + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # garbage under schema 1
        avro_value(USER_BAD, 3, {"id": 1, "name": 5}),  # a string column cannot become an int
        b"\x00\x00\x00\x00\x04\x00",  # a recursive schema
        b"\x00\x00\x00\x00\x05\x00\x02",  # Protobuf: not served
        avro_value(USER_V1, 1, good) + b"trailing",
        avro_value(USER_V1, 1, {**good, "id": 2}),
    ]
    append(log, values, keys=[str(i).encode() for i in range(len(values))])
    clock = ManualClock()
    t = host(tmp_path, clock, registry)
    source = LogSource(log, "bad", **VALUE_MODE)
    run(settle(t, [source], clock))
    assert [r["id"] for r in table_rows(t, "bad")] == [1, 2]
    dead = table_rows(t, "bad~dlq")
    assert [r["rayqueue"]["offset"] for r in dead] == [1, 2, 3, 4, 5, 6, 7]
    assert [r["value"] for r in dead] == values[1:8] and dead[0]["key"] == b"1"
    reasons = [r["error"] for r in dead]
    assert "wire format" in reasons[0] and "not in the schema registry" in reasons[1]
    assert "cannot decode" in reasons[2] and "does not fit the table" in reasons[3]
    assert "recursive" in reasons[4] and "PROTOBUF" in reasons[5] and "bytes after" in reasons[6]
    stats = t.describe("bad", 0)
    assert stats["invalid_records"] == 7 and stats["dlq_records"] == 7 and stats["next_offset"] == len(values)
    # A later good record still flows: the partition never stopped.
    append(log, [avro_value(USER_V1, 1, {**good, "id": 3})])
    run(settle(t, [source], clock))
    assert [r["id"] for r in table_rows(t, "bad")] == [1, 2, 3]


def test_drop_counts_and_skips(tmp_path: Path, registry: FakeRegistry) -> None:
    log = Log(tmp_path / "drop-0", log_config())
    append(log, [b"junk", avro_value(USER_V1, 1, {"id": 1, "name": "x", "tags": [], "address": None})])
    clock = ManualClock()
    t = host(tmp_path, clock, registry)
    source = LogSource(log, "drop", rayqueue_iceberg_invalid_record_action="drop", **VALUE_MODE)
    run(settle(t, [source], clock))
    assert [r["id"] for r in table_rows(t, "drop")] == [1]
    assert t.catalog().load("drop~dlq") is None
    stats = t.describe("drop", 0)
    assert stats["dropped_records"] == 1 and stats["dlq_records"] == 0


def test_a_registry_that_cannot_be_reached_is_retried_not_dead_lettered(tmp_path: Path, registry: FakeRegistry) -> None:
    log = Log(tmp_path / "down-0", log_config())
    append(log, [avro_value(USER_V1, 1, {"id": 1, "name": "x", "tags": [], "address": None})])
    clock = ManualClock()
    t = host(tmp_path, clock, registry)
    source = LogSource(log, "down", **VALUE_MODE)
    registry.down = True
    run(settle(t, [source], clock, rounds=3, strict=False))
    stats = t.describe("down", 0)
    assert "not reachable" in stats["error"] and stats["next_offset"] == 0 and stats["invalid_records"] == 0
    registry.down = False
    run(settle(t, [source], clock))
    assert [r["id"] for r in table_rows(t, "down")] == [1] and t.describe("down", 0)["error"] is None


def test_dead_letters_are_not_doubled_when_a_step_is_redone(
    tmp_path: Path, registry: FakeRegistry, monkeypatch
) -> None:
    """The dead-letter commit lands, the broker dies before the main table's: the next leader
    redoes the range; the dead-letter table keeps its own offset and takes nothing twice."""
    from actors.iceberg import table as iceberg_table

    log = Log(tmp_path / "redo-0", log_config())
    append(log, [b"junk", avro_value(USER_V1, 1, {"id": 1, "name": "x", "tags": [], "address": None})])
    clock = ManualClock()
    t = host(tmp_path, clock, registry)
    source = LogSource(log, "redo", **VALUE_MODE)
    run(settle(t, [source], clock))  # the table exists, nothing translated yet... then all of it
    t2 = host(tmp_path, clock, registry)
    append(log, [b"more junk", avro_value(USER_V1, 1, {"id": 2, "name": "y", "tags": [], "address": None})])
    real = iceberg_table.commit

    def dies_after_the_dead_letters(catalog, name, *args, **kwargs):
        if not name.endswith("~dlq"):
            raise SystemExit("killed between the two commits")
        return real(catalog, name, *args, **kwargs)

    monkeypatch.setattr(iceberg_table, "commit", dies_after_the_dead_letters)
    translator = t._translators[("redo", 0)]
    with pytest.raises(SystemExit):
        translator._translate(translator._read())
    monkeypatch.undo()
    run(settle(t2, [LogSource(log, "redo", epoch=1, **VALUE_MODE)], clock))
    assert [r["rayqueue"]["offset"] for r in table_rows(t2, "redo~dlq")] == [0, 2]
    assert [r["id"] for r in table_rows(t2, "redo")] == [1, 2]


def test_json_schema_values(tmp_path: Path) -> None:
    registry = FakeRegistry()
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": ["string", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "geo": {"type": "object", "properties": {"lat": {"type": "number"}}},
        },
    }
    registry.add(10, schema, kind="JSON")
    registry.add(11, {"oneOf": [{"type": "string"}, {"type": "integer"}]}, kind="JSON")
    log = Log(tmp_path / "js-0", log_config())
    append(
        log,
        [
            json_value(10, {"id": 1, "name": "a", "tags": ["x"], "geo": {"lat": 1.5}}),
            json_value(10, {"id": "not a number"}),
            json_value(10, {"id": True}),
            json_value(11, "either"),
            b"\x00\x00\x00\x00\x0a{not json",
            json_value(10, {"id": 2, "extra": "ignored"}),
        ],
    )
    clock = ManualClock()
    t = host(tmp_path, clock, registry)
    run(settle(t, [LogSource(log, "js", **VALUE_MODE)], clock))
    rows = table_rows(t, "js")
    assert [(r["id"], r["name"]) for r in rows] == [(1, "a"), (2, None)]
    assert rows[0]["geo"] == {"lat": 1.5} and rows[0]["tags"] == ["x"]
    assert [r["rayqueue"]["offset"] for r in table_rows(t, "js~dlq")] == [1, 2, 3, 4]


def test_avro_references_are_followed(tmp_path: Path) -> None:
    registry = FakeRegistry()
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "com.example",
        "fields": [{"name": "city", "type": "string"}],
    }
    registry.add(20, address, subject="address", version=1)
    person = {
        "type": "record",
        "name": "Person",
        "namespace": "com.example",
        "fields": [{"name": "home", "type": "Address"}],
    }
    registry.add(21, person)
    registry.schemas[21]["references"] = [{"name": "com.example.Address", "subject": "address", "version": 1}]
    import fastavro

    named: dict = {}
    fastavro.parse_schema(address, named_schemas=named)
    parsed = fastavro.parse_schema(person, named_schemas=named)
    log = Log(tmp_path / "ref-0", log_config())
    append(log, [avro_value(parsed, 21, {"home": {"city": "Bergen"}})])
    clock = ManualClock()
    t = host(tmp_path, clock, registry)
    run(settle(t, [LogSource(log, "ref", **VALUE_MODE)], clock))
    assert [r["home"] for r in table_rows(t, "ref")] == [{"city": "Bergen"}]
