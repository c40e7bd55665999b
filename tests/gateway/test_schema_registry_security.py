"""The schema registry on a secured cluster of its own, seen by confluent-kafka's clients: one
broker with a SASL_SSL listener (SCRAM-SHA-512), Kafka's StandardAuthorizer with ``super.users``,
and the registry served over HTTPS from the listener's PEM keys with HTTP basic auth against the
SCRAM users and the ACLs. ``SchemaRegistryClient`` (``ssl.ca.location``,
``basic.auth.user.info``) and its ``AvroSerializer`` register and produce through the SASL_SSL
listener; a user without rights gets Confluent's 40301, a wrong password 401; an ACL granted
with ``rayqueue acls add`` (the subject as a TOPIC) lets a user register; plain HTTP to the
HTTPS port fails at once and leaves the registry serving. Certificates are made here
(scripts/make_test_ca.py)."""

from __future__ import annotations

import json
import socket
import ssl
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka.schema_registry")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.common._httpx_compat import httpx  # noqa: E402 - the client's HTTP library
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from tests.helpers import authorizer_cluster, wait_for  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
from make_test_ca import make_test_pki  # noqa: E402

NAMESPACE = "rayqueue-schema-registry-security-test"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
PAYMENT = json.dumps(
    {
        "type": "record",
        "name": "Payment",
        "fields": [{"name": "id", "type": "string"}, {"name": "cents", "type": "long"}],
    }
)
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def secured(ray_session, tmp_path_factory):
    """{"cluster", "ca", "url", "bootstrap"}: admin is the super user; alice and bob have no ACL."""
    pki = make_test_pki(tmp_path_factory.mktemp("pki"))
    with authorizer_cluster(
        NAMESPACE,
        listeners="EXTERNAL://127.0.0.1:0",
        listener_security_protocol_map="EXTERNAL:SASL_SSL",
        ssl_keystore_location=str(pki.broker),
        sasl_enabled_mechanisms="SCRAM-SHA-512",
        super_users="User:admin",
        schema_registry_listeners="https://127.0.0.1:0",
    ) as cluster:
        admin = cluster.admin()
        for user, password in PASSWORDS.items():
            admin.add_scram_user(user, password)
        admin.create_topic("payments", 1, 1)
        yield {
            "cluster": cluster,
            "pki": pki,
            "ca": str(pki.ca),
            "url": cluster.schema_registry_url,
            "bootstrap": cluster.listener_bootstrap_servers("EXTERNAL"),
        }


def registry(secured, user: str | None, password: str | None = None) -> SchemaRegistryClient:
    """confluent-kafka's client over HTTPS, as ``user`` (None: no credentials)."""
    conf = {"url": secured["url"], "ssl.ca.location": secured["ca"]}
    if user is not None:
        conf["basic.auth.user.info"] = f"{user}:{password or PASSWORDS[user]}"
    return SchemaRegistryClient(conf)


def kafka_conf(secured, user: str) -> dict:
    return {
        "bootstrap.servers": secured["bootstrap"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
        "ssl.ca.location": secured["ca"],
    }


def produce(secured, user: str, topic: str, value: bytes) -> None:
    errors: list = []
    producer = Producer({**kafka_conf(secured, user), "message.timeout.ms": 30000})
    producer.produce(topic, value=value, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(DEADLINE_S) == 0
    assert errors == [None]


def refusal(call) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as refused:
        call()
    return refused.value


def test_registering_and_producing_over_https_and_sasl_ssl(secured):
    assert secured["url"].startswith("https://127.0.0.1:")
    # The registry presents the listeners' own certificate (ssl.keystore.location).
    host, port = secured["url"].removeprefix("https://").rsplit(":", 1)
    served = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate((host, int(port)), timeout=30))
    keystore = secured["pki"].broker.read_text()
    first = keystore[keystore.index("-----BEGIN CERTIFICATE-----") :]
    first = first[: first.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")]
    assert served == ssl.PEM_cert_to_DER_cert(first)
    client = registry(secured, "admin")
    ctx = SerializationContext("payments", MessageField.VALUE)
    raw = AvroSerializer(client, PAYMENT)({"id": "p1", "cents": 1250}, ctx)
    produce(secured, "admin", "payments", raw)
    consumer = Consumer({**kafka_conf(secured, "admin"), "group.id": "payments-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition("payments", 0, 0)])
    try:
        deadline = time.monotonic() + DEADLINE_S
        message = None
        while message is None or message.error() is not None:
            assert time.monotonic() < deadline, "nothing consumed over SASL_SSL"
            message = consumer.poll(1.0)
    finally:
        consumer.close()
    assert AvroDeserializer(client)(message.value(), ctx) == {"id": "p1", "cents": 1250}
    latest = client.get_latest_version("payments-value")
    assert int.from_bytes(message.value()[1:5], "big") == latest.schema_id


def test_a_user_without_rights_gets_40301_and_sees_no_subjects(secured):
    registry(secured, "admin").register_schema("payments-value", Schema(PAYMENT, "AVRO"))
    bob = registry(secured, "bob")
    refused = refusal(lambda: bob.register_schema("payments-value", Schema(PAYMENT, "AVRO")))
    assert (refused.http_status_code, refused.error_code) == (403, 40301)
    assert "User:bob" in refused.error_message and "WRITE" in refused.error_message
    refused = refusal(lambda: bob.get_latest_version("payments-value"))
    assert (refused.http_status_code, refused.error_code) == (403, 40301)
    assert bob.get_subjects() == []  # listings show only what the principal may describe
    assert "payments-value" in registry(secured, "admin").get_subjects()


def test_a_wrong_password_an_unknown_user_and_no_credentials_get_401(secured):
    for client in (registry(secured, "admin", "not-it"), registry(secured, "mallory", "x"), registry(secured, None)):
        refused = refusal(client.get_subjects)
        assert (refused.http_status_code, refused.error_code) == (401, 401)
    assert isinstance(registry(secured, "admin").get_subjects(), list)  # the right one still works


def test_an_acl_granted_with_the_cli_lets_a_user_register_and_produce(secured):
    from typer.testing import CliRunner

    from rayqueue.cli import app

    alice = registry(secured, "alice")
    refused = refusal(lambda: alice.register_schema("orders-value", Schema(PAYMENT, "AVRO")))
    assert refused.error_code == 40301
    # One PREFIXED topic ACL covers the topic and its subjects orders-key and orders-value.
    granted = CliRunner().invoke(
        app,
        ["acls", "add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read",
         "--topic", "orders", "--resource-pattern-type", "prefixed", "--name", NAMESPACE],
    )  # fmt: skip
    assert granted.exit_code == 0, granted.output
    secured["cluster"].admin().create_topic("orders", 1, 1)
    ctx = SerializationContext("orders", MessageField.VALUE)
    serializer = AvroSerializer(alice, PAYMENT)

    def registered() -> bytes | None:
        try:
            return serializer({"id": "o1", "cents": 99}, ctx)  # registers orders-value on first use
        except SchemaRegistryError as exc:
            if exc.error_code != 40301:
                raise
            return None  # the registry has not seen the new ACL yet

    raw = wait_for(registered, timeout=DEADLINE_S, interval=0.2, what="alice's registration after the grant")
    assert alice.get_latest_version("orders-value").schema_id == int.from_bytes(raw[1:5], "big")
    produce(secured, "alice", "orders", raw)
    # The grant named orders only.
    refused = refusal(lambda: alice.register_schema("payments-value", Schema(PAYMENT, "AVRO")))
    assert refused.error_code == 40301


def test_plain_http_to_the_https_port_fails_at_once_and_the_registry_keeps_serving(secured):
    host, port = secured["url"].removeprefix("https://").rsplit(":", 1)
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(f"GET /subjects HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            answer += chunk
    assert answer == b""  # the TLS handshake failed: closed without a byte of HTTP
    assert time.monotonic() - started < DEADLINE_S / 2  # at once, not left to time out
    # confluent-kafka's client (httpx underneath) pointed at it with http:// fails the same way.
    plain = SchemaRegistryClient({"url": f"http://{host}:{port}", "basic.auth.user.info": "admin:admin-secret"})
    with pytest.raises(httpx.RemoteProtocolError):
        plain.get_subjects()
    # A client that does not trust the cluster's CA refuses the registry's certificate.
    untrusting = SchemaRegistryClient({"url": secured["url"], "basic.auth.user.info": "admin:admin-secret"})
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        untrusting.get_subjects()
    assert isinstance(registry(secured, "admin").get_subjects(), list)
