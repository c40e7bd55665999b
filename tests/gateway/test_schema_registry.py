"""The schema registry with real clients: confluent-kafka's SchemaRegistryClient and its Avro,
JSON and Protobuf serializers producing and consuming through the cluster's Kafka listener,
python-schema-registry-client, compatibility refusals as Confluent's errors, and a registry
actor killed and restarted (Ray restarts it; it replays ``_schemas``) keeping its ids.

The registry runs on the session cluster for this module (a free port) and is removed with
its topic at the end.
"""

from __future__ import annotations

import itertools
import json
import time

import pytest
import ray

pytest.importorskip("confluent_kafka.schema_registry")

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from actors.names import SCHEMA_REGISTRY_NAME  # noqa: E402
from actors.schema_registry.actor import start_schema_registry, stop_schema_registry  # noqa: E402
from tests.helpers import wait_for  # noqa: E402

DEADLINE_S = 60.0
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"sr-{prefix}-{next(_names)}-{int(time.time() * 1000) % 100000}"


@pytest.fixture(scope="module")
def registry(cluster):
    node = ray.get_runtime_context().get_node_id()
    config = {**dict(cluster.config), "schema.registry.listeners": "http://127.0.0.1:0"}
    handle = start_schema_registry(cluster.namespace, config, node, 120)
    yield handle
    stop_schema_registry(cluster.namespace)
    try:
        cluster.admin().delete_topic("_schemas")
    except Exception:  # noqa: BLE001 - gone already
        pass


def registry_url(handle, timeout_s: float = DEADLINE_S) -> str:
    """The registry's URL once it serves (after a restart, on a new free port)."""
    # A RayActorError while it restarts counts as "not yet".
    urls = wait_for(
        lambda: ray.get(handle.urls.remote(), timeout=10), timeout=timeout_s, interval=0.2, what="the schema registry"
    )
    return urls[0]


def round_trip(cluster, topic: str, value: bytes) -> bytes:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": unique("g"), "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                return message.value()
        raise AssertionError(f"nothing consumed from {topic}")
    finally:
        consumer.close()


def test_avro_serializer_and_deserializer_through_the_kafka_listener(cluster, registry):
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    client = SchemaRegistryClient({"url": registry_url(registry)})
    topic = unique("avro")
    schema = {
        "type": "record",
        "name": "Payment",
        "fields": [{"name": "id", "type": "string"}, {"name": "cents", "type": "long"}],
    }
    serializer = AvroSerializer(client, json.dumps(schema))
    ctx = SerializationContext(topic, MessageField.VALUE)
    raw = round_trip(cluster, topic, serializer({"id": "p1", "cents": 1250}, ctx))
    assert raw[0] == 0  # Confluent's wire format: magic byte, then the schema id
    assert AvroDeserializer(client)(raw, ctx) == {"id": "p1", "cents": 1250}
    latest = client.get_latest_version(f"{topic}-value")
    assert int.from_bytes(raw[1:5], "big") == latest.schema_id and latest.version == 1

    # A change that breaks BACKWARD is refused as Confluent refuses it.
    broken = {**schema, "fields": [*schema["fields"], {"name": "currency", "type": "string"}]}
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(json.dumps(broken), "AVRO"))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert client.test_compatibility(f"{topic}-value", Schema(json.dumps(broken), "AVRO")) is False
    fixed = {**schema, "fields": [*schema["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}
    assert client.test_compatibility(f"{topic}-value", Schema(json.dumps(fixed), "AVRO")) is True
    assert client.register_schema(f"{topic}-value", Schema(json.dumps(fixed), "AVRO")) > latest.schema_id
    # The old data still reads with the new schema as the reader.
    reader = AvroDeserializer(client, json.dumps(fixed))
    assert reader(raw, ctx) == {"id": "p1", "cents": 1250, "currency": "EUR"}
    client.set_compatibility(f"{topic}-value", "FULL")
    assert client.get_compatibility(f"{topic}-value") == "FULL"


def test_json_serializer_and_deserializer(cluster, registry):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    client = SchemaRegistryClient({"url": registry_url(registry)})
    topic = unique("json")
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
        "required": ["sku", "qty"],
    }
    ctx = SerializationContext(topic, MessageField.VALUE)
    raw = round_trip(cluster, topic, JSONSerializer(json.dumps(schema), client)({"sku": "a-1", "qty": 2}, ctx))
    assert JSONDeserializer(json.dumps(schema), schema_registry_client=client)(raw, ctx) == {"sku": "a-1", "qty": 2}
    tightened = {**schema, "properties": {**schema["properties"], "sku": {"type": "string", "maxLength": 3}}}
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(json.dumps(tightened), "JSON"))
    assert refused.value.error_code == 409


def _message_class(proto_text: str, file_name: str, full_name: str):
    from google.protobuf import descriptor_pool, message_factory

    from actors.schema_registry.protobuf_format import compile_text

    fdp = compile_text(proto_text, {})
    fdp.name = file_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def test_protobuf_serializer_and_deserializer(cluster, registry):
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    client = SchemaRegistryClient({"url": registry_url(registry)})
    topic = unique("proto")
    text = 'syntax = "proto3";\npackage rqtest;\nmessage Reading { string sensor = 1; double value = 2; }\n'
    reading = _message_class(text, "rqtest/reading.proto", "rqtest.Reading")
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = ProtobufSerializer(reading, client, {"use.deprecated.format": False})
    raw = round_trip(cluster, topic, serializer(reading(sensor="t1", value=21.5), ctx))
    decoded = ProtobufDeserializer(reading, {"use.deprecated.format": False})(raw, ctx)
    assert decoded.sensor == "t1" and decoded.value == 21.5
    # The client registered a base64 descriptor; the registry serves it in both forms.
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "PROTOBUF"
    # A wire-incompatible change is refused; a compatible one (a new field) is not.
    changed = text.replace("double value = 2;", "string value = 2;")
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(changed, "PROTOBUF"))
    assert refused.value.error_code == 409
    added = text.replace("double value = 2;", "double value = 2; int64 at = 3;")
    assert client.register_schema(f"{topic}-value", Schema(added, "PROTOBUF")) > registered.schema_id


def test_python_schema_registry_client(registry):
    from schema_registry.client import SchemaRegistryClient as PsrcClient
    from schema_registry.client import schema as psrc_schema

    client = PsrcClient(url=registry_url(registry))
    subject = unique("psrc")
    avro = psrc_schema.AvroSchema({"type": "record", "name": "Item", "fields": [{"name": "name", "type": "string"}]})
    schema_id = client.register(subject, avro)
    assert client.register(subject, avro) == schema_id
    assert client.get_schema(subject).schema_id == schema_id
    assert client.check_version(subject, avro).version == 1
    assert subject in client.get_subjects()
    incompatible = psrc_schema.AvroSchema(
        {"type": "record", "name": "Item", "fields": [{"name": "name", "type": "int"}]}
    )
    assert client.test_compatibility(subject, incompatible) is False
    js = psrc_schema.JsonSchema({"type": "object", "properties": {"a": {"type": "string"}}})
    json_subject = unique("psrc-json")
    assert client.register(json_subject, js, schema_type="JSON") > 0
    assert client.delete_subject(subject) == [1]
    assert subject not in client.get_subjects()


def test_the_cli_registers_reads_configures_and_deletes(cluster, registry, tmp_path):
    from typer.testing import CliRunner

    from rayqueue.cli import app

    def rq(*args: str, ok: bool = True) -> str:
        result = CliRunner().invoke(app, ["schemas", *args, "--name", cluster.namespace])
        assert (result.exit_code == 0) == ok, f"exit {result.exit_code}: {result.output}\n{result.exception!r}"
        return result.output

    address, user = unique("cli-address"), unique("cli-user")
    (tmp_path / "address.avsc").write_text(
        '{"type": "record", "name": "Address", "namespace": "acme", "fields": [{"name": "city", "type": "string"}]}'
    )
    (tmp_path / "user.avsc").write_text(
        '{"type": "record", "name": "User", "namespace": "acme",'
        ' "fields": [{"name": "address", "type": "acme.Address"}]}'
    )
    assert "Registered under" in rq("register", address, str(tmp_path / "address.avsc"))
    # Without the reference the named type is unknown: Confluent's 42201, one red line.
    assert "42201" in rq("register", user, str(tmp_path / "user.avsc"), ok=False)
    rq("register", user, str(tmp_path / "user.avsc"), "-r", f"acme.Address={address}:1")
    listed = rq("list")
    assert address in listed and user in listed
    got = json.loads(rq("get", user, "--version", "latest"))
    assert got["version"] == 1 and got["references"] == [{"name": "acme.Address", "subject": address, "version": 1}]
    assert "FULL_TRANSITIVE" in rq("config", user, "--set", "FULL_TRANSITIVE")
    assert "42206" in rq("delete", address, ok=False)  # still referenced by the user schema
    assert "version 1 (soft)" in rq("delete", user, "--version", "1")
    assert "permanently" in rq("delete", user, "--version", "1", "--permanent")
    try:
        assert "READONLY" in rq("mode", "--set", "READONLY")
        assert "42205" in rq("register", unique("cli-ro"), str(tmp_path / "address.avsc"), ok=False)
    finally:
        rq("mode", "--set", "READWRITE")


def test_a_restarted_registry_serves_the_same_ids_and_skips_what_it_cannot_read(cluster, registry):
    client = SchemaRegistryClient({"url": registry_url(registry)})
    subject = unique("restart")
    ids = [
        client.register_schema(subject, Schema(json.dumps({"type": "record", "name": "R", "fields": fields}), "AVRO"))
        for fields in ([], [{"name": "a", "type": "int", "default": 0}])
    ]
    before = {s: client.get_versions(s) for s in client.get_subjects()}
    # Garbage written into _schemas by a Kafka client: the next load skips it.
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    producer.produce("_schemas", key=b"not json", value=b"\x00\x01")
    producer.produce("_schemas", key=b'{"keytype":"SCHEMA","subject":"x","version":1,"magic":1}', value=b"{broken")
    assert producer.flush(30) == 0
    ray.kill(ray.get_actor(SCHEMA_REGISTRY_NAME, namespace=cluster.namespace), no_restart=False)

    def restarted() -> str | None:
        # ray.kill is asynchronous: the old actor may still answer a call or two. The new one
        # is the one whose load skipped the garbage (the old one loaded before it was written).
        stats = ray.get(registry.stats.remote(), timeout=10)
        return stats["urls"][0] if stats["skipped_records"] >= 2 and stats["urls"] else None

    url = wait_for(restarted, timeout=DEADLINE_S, interval=0.2, what="the restarted registry serving")
    again = SchemaRegistryClient({"url": url})
    assert {s: again.get_versions(s) for s in again.get_subjects()} == before
    assert [again.get_version(subject, v).schema_id for v in (1, 2)] == ids
    stats = ray.get(registry.stats.remote(), timeout=30)
    assert stats["skipped_records"] >= 2 and stats["max_id"] >= max(ids)
    # A new schema takes a new id, never one handed out before.
    new_id = again.register_schema(unique("after"), Schema('{"type":"enum","name":"E","symbols":["A"]}', "AVRO"))
    assert new_id > max(ids)
