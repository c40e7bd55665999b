"""The registry's REST API without Ray (FastAPI's TestClient over an in-memory topic): Confluent's
answers and error bodies, hostile input, failed writes, basic auth against SCRAM credentials
and the ACL checks."""

from __future__ import annotations

import base64
import json

import pytest
from fastapi.testclient import TestClient
from scramp import ScramMechanism

from actors.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from actors.authorizer import STANDARD_AUTHORIZER, StandardAuthorizer
from actors.protocol_security import ScramCredential
from actors.schema_registry import errors
from actors.schema_registry import records as R
from actors.schema_registry.auth import BasicAuthenticator
from actors.schema_registry.rest import MEDIA_TYPE, create_app
from actors.schema_registry.service import RegistryService
from actors.schema_registry.state import RegistryState

USER = json.dumps({"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]})


class Topic:
    """An in-memory _schemas: what was appended, and whether appends fail."""

    def __init__(self) -> None:
        self.log: list[tuple[bytes, bytes | None]] = []
        self.fail = False

    async def append(self, batch) -> None:
        if self.fail:
            raise ConnectionError("no leader for _schemas")
        self.log += [R.encode(r) for r in batch]


@pytest.fixture
def topic():
    return Topic()


@pytest.fixture
def client(topic):
    service = RegistryService(RegistryState(), topic.append)
    service.loaded = True
    return TestClient(create_app(service, max_body_bytes=64 * 1024))


def test_register_read_back_and_confluent_content_type(client):
    answer = client.post("/subjects/users-value/versions", json={"schema": USER})
    assert answer.status_code == 200 and answer.json() == {"id": 1}
    assert answer.headers["content-type"].startswith(MEDIA_TYPE)
    assert client.get("/subjects").json() == ["users-value"]
    assert client.get("/schemas/ids/1").json() == {"schema": USER.replace(" ", "")}
    assert client.get("/schemas/ids/1/subjects").json() == ["users-value"]
    assert client.get("/schemas/ids/1/versions").json() == [{"subject": "users-value", "version": 1}]
    assert client.get("/subjects/users-value/versions/1/schema").text == USER.replace(" ", "")
    assert client.get("/schemas/types").json() == ["JSON", "PROTOBUF", "AVRO"]
    assert client.get("/schemas/ids/1?fetchMaxId=true").json()["maxId"] == 1
    looked = client.post("/subjects/users-value", json={"schema": USER}).json()
    assert looked["id"] == 1 and looked["version"] == 1
    compat = client.post("/compatibility/subjects/users-value/versions/latest?verbose=true", json={"schema": USER})
    assert compat.json() == {"is_compatible": True, "messages": []}


@pytest.mark.parametrize(
    "method, path, body, status, code",
    [
        ("POST", "/subjects/s/versions", b"{not json", 400, errors.BAD_REQUEST),
        ("POST", "/subjects/s/versions", b"", 400, errors.BAD_REQUEST),
        ("POST", "/subjects/s/versions", b"[1]", 400, errors.BAD_REQUEST),
        ("POST", "/subjects/s/versions", b'{"schema": 5}', 422, errors.INVALID_SCHEMA),
        ("POST", "/subjects/s/versions", b'{"schema": "{\\"type\\": \\"nope\\"}"}', 422, errors.INVALID_SCHEMA),
        ("POST", "/subjects/s/versions", b'{"schema": "\\"int\\"", "schemaType": "XML"}', 422, errors.INVALID_SCHEMA),
        (
            "POST",
            "/subjects/s/versions",
            b'{"schema": "\\"int\\"", "references": {"a": 1}}',
            422,
            errors.INVALID_SCHEMA,
        ),
        ("POST", "/subjects/s/versions", b"[" * 20000 + b"]" * 20000, 400, errors.BAD_REQUEST),
        (
            "POST",
            "/subjects/s/versions",
            json.dumps({"schema": "[" * 3000 + "]" * 3000}).encode(),
            422,
            errors.INVALID_SCHEMA,
        ),
        ("POST", "/subjects/s/versions", json.dumps({"schema": "x" * 70000}).encode(), 413, errors.PAYLOAD_TOO_LARGE),
        ("GET", "/subjects/s/versions/one", None, 422, errors.INVALID_VERSION),
        ("GET", "/subjects/s/versions/0", None, 422, errors.INVALID_VERSION),
        ("GET", "/subjects/s/versions/latest", None, 404, errors.SUBJECT_NOT_FOUND),
        ("GET", "/schemas/ids/banana", None, 404, errors.SCHEMA_NOT_FOUND),
        ("GET", "/schemas/ids/99999999999999999999", None, 404, errors.SCHEMA_NOT_FOUND),
        ("PUT", "/config", b'{"compatibility": "SIDEWAYS"}', 422, errors.INVALID_COMPATIBILITY_LEVEL),
        ("PUT", "/mode", b'{"mode": "WRITEONLY"}', 422, errors.INVALID_MODE),
        ("GET", "/no/such/route", None, 404, 404),
        ("PATCH", "/subjects", None, 405, 405),
    ],
)
def test_hostile_and_wrong_requests_get_confluent_error_bodies(client, topic, method, path, body, status, code):
    answer = client.request(method, path, content=body, headers={"Content-Type": MEDIA_TYPE})
    assert answer.status_code == status, answer.text
    assert answer.json()["error_code"] == code and answer.json()["message"]
    assert topic.log == []  # nothing reached _schemas


def test_a_huge_chunked_body_is_refused_without_reading_it_all(client):
    def chunks():
        for _ in range(1000):
            yield b"x" * 4096

    answer = client.post("/subjects/s/versions", content=chunks(), headers={"Content-Type": MEDIA_TYPE})
    assert answer.status_code == 413 and answer.json()["error_code"] == errors.PAYLOAD_TOO_LARGE


def test_the_server_keeps_serving_after_hostile_input(client):
    for body in (
        b"\xff\xfe",
        b'{"schema": "\\ud800"}',
        b'{"schema": null}',
        b'{"schemaType": "PROTOBUF", "schema": "message {"}',
    ):
        assert client.post("/subjects/s/versions", content=body).status_code in (400, 422)
    assert client.post("/subjects/s/versions", json={"schema": USER}).json() == {"id": 1}


def test_incompatible_schema_is_409_with_details(client):
    client.post("/subjects/s/versions", json={"schema": USER})
    changed = json.dumps({"type": "record", "name": "User", "fields": [{"name": "name", "type": "int"}]})
    answer = client.post("/subjects/s/versions", json={"schema": changed})
    assert answer.status_code == 409 and answer.json()["error_code"] == 409
    assert "incompatible with an earlier schema" in answer.json()["message"]
    compat = client.post("/compatibility/subjects/s/versions?verbose=true", json={"schema": changed}).json()
    assert compat["is_compatible"] is False and any("TYPE_MISMATCH" in m for m in compat["messages"])


def test_a_failed_write_changes_nothing_and_burns_the_id(client, topic):
    topic.fail = True
    answer = client.post("/subjects/s/versions", json={"schema": USER})
    assert answer.status_code == 500 and answer.json()["error_code"] == errors.STORE_ERROR
    assert client.get("/subjects").json() == []
    topic.fail = False
    assert client.post("/subjects/s/versions", json={"schema": USER}).json() == {"id": 2}


def test_protobuf_serialized_format(client):
    schema = 'syntax = "proto3"; package p; message M { int32 a = 1; }'
    assert client.post("/subjects/p/versions", json={"schema": schema, "schemaType": "PROTOBUF"}).json() == {"id": 1}
    plain = client.get("/schemas/ids/1").json()
    assert plain == {"schemaType": "PROTOBUF", "schema": schema}
    serialized = client.get("/subjects/p/versions/1?format=serialized").json()["schema"]
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    assert fdp.package == "p" and fdp.message_type[0].name == "M"


def test_a_registry_still_loading_answers_50002(topic):
    service = RegistryService(RegistryState(), topic.append)
    answer = TestClient(create_app(service)).get("/subjects")
    assert answer.status_code == 500 and answer.json()["error_code"] == errors.OPERATION_TIMEOUT


# -- authentication and ACLs ----------------------------------------------------------------


def credential(password: str) -> ScramCredential:
    salt, stored, server, iterations = ScramMechanism("SCRAM-SHA-256").make_auth_info(password, 4096)
    return ScramCredential(salt, stored, server, iterations)


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def acl(principal: str, op: AclOperation, rtype: ResourceType, name: str, pattern=PatternType.LITERAL) -> AclBinding:
    return AclBinding.of(rtype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


@pytest.fixture
def secured(topic):
    users = {"alice": credential("alice-secret"), "bob": credential("bob-secret"), "admin": credential("admin-secret")}
    calls = []

    async def credentials(user: str, mechanism: str):
        calls.append(user)
        return users.get(user) if mechanism == "SCRAM-SHA-256" else None

    authorizer = StandardAuthorizer.from_config(
        {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}
    )
    # alice: everything on subjects prefixed "orders" (as a PREFIXED topic ACL would name them).
    authorizer.add_acl("1", acl("User:alice", AclOperation.ALL, ResourceType.TOPIC, "orders", PatternType.PREFIXED))
    # bob: may read orders-value only.
    authorizer.add_acl("2", acl("User:bob", AclOperation.READ, ResourceType.TOPIC, "orders-value"))
    service = RegistryService(RegistryState(), topic.append)
    service.loaded = True
    app = create_app(service, BasicAuthenticator(credentials), lambda: authorizer)
    return TestClient(app), calls


def test_basic_auth_is_checked_against_scram_credentials(secured):
    client, calls = secured
    for headers in (
        {},
        basic("alice", "wrong"),
        basic("nobody", "x"),
        {"Authorization": "Bearer abc"},
        {"Authorization": "Basic !!!"},
    ):
        answer = client.get("/subjects", headers=headers)
        assert answer.status_code == 401 and answer.json() == {"error_code": 401, "message": "Unauthorized"}
    assert client.get("/subjects", headers=basic("alice", "alice-secret")).status_code == 200
    # A verified password is remembered while the credential stays the same.
    before = len(calls)
    assert client.get("/subjects", headers=basic("alice", "alice-secret")).status_code == 200
    assert len(calls) - before <= 2


def test_acls_decide_per_subject_and_for_the_registry(secured):
    client, _ = secured
    alice, bob, admin = basic("alice", "alice-secret"), basic("bob", "bob-secret"), basic("admin", "admin-secret")
    assert client.post("/subjects/orders-value/versions", json={"schema": USER}, headers=alice).json() == {"id": 1}
    refused = client.post("/subjects/payments-value/versions", json={"schema": USER}, headers=alice)
    assert refused.status_code == 403 and refused.json()["error_code"] == errors.FORBIDDEN
    assert client.post("/subjects/payments-value/versions", json={"schema": USER}, headers=admin).json() == {"id": 1}
    # Listing shows what the principal may describe.
    assert client.get("/subjects", headers=alice).json() == ["orders-value"]
    assert client.get("/subjects", headers=admin).json() == ["orders-value", "payments-value"]
    assert client.get("/subjects", headers=bob).json() == ["orders-value"]  # READ implies DESCRIBE
    # bob reads but may not write or delete; reads a schema by id through a subject he may read.
    assert client.get("/subjects/orders-value/versions/1", headers=bob).status_code == 200
    assert client.get("/schemas/ids/1", headers=bob).status_code == 200
    assert client.post("/subjects/orders-value/versions", json={"schema": USER}, headers=bob).status_code == 403
    assert client.delete("/subjects/orders-value", headers=bob).status_code == 403
    # Registry-wide settings: the CLUSTER resource.
    assert client.put("/config", json={"compatibility": "NONE"}, headers=alice).status_code == 403
    assert client.put("/config", json={"compatibility": "NONE"}, headers=admin).status_code == 200
    assert client.put("/config/orders-value", json={"compatibility": "FULL"}, headers=alice).status_code == 200


# -- what the metrics are told ----------------------------------------------------------------


def test_every_request_is_observed_with_its_route_template_never_its_path(topic):
    seen = []
    service = RegistryService(RegistryState(), topic.append)
    service.loaded = True
    client = TestClient(
        create_app(service, observe=lambda *request: seen.append(request)), raise_server_exceptions=False
    )
    client.post("/subjects/orders-value/versions", json={"schema": USER})
    client.get("/subjects/orders-value/versions/latest")
    client.get("/subjects/nope-value/versions/7")
    client.get("/no/such/route")
    client.request("PATCH", "/subjects")
    client.request("BREW", "/subjects/orders-value")
    topic.fail = True
    client.post("/subjects/other-value/versions", json={"schema": USER})

    def boom(*args, **kwargs):
        raise RuntimeError("a bug")

    service.state.list_subjects = boom  # an unexpected failure: no answer started, counted as 500
    assert client.get("/subjects").status_code == 500
    assert [request[:3] for request in seen] == [
        ("POST", "/subjects/{subject}/versions", 200),
        ("GET", "/subjects/{subject}/versions/{version}", 200),
        ("GET", "/subjects/{subject}/versions/{version}", 404),
        ("GET", "unmatched", 404),
        ("PATCH", "/subjects", 405),
        ("OTHER", "/subjects/{subject}", 405),
        ("POST", "/subjects/{subject}/versions", 500),
        ("GET", "/subjects", 500),
    ]
    assert all(isinstance(request[3], float) and request[3] >= 0 for request in seen)


def test_a_failing_observer_does_not_fail_the_request(client, topic):
    def observe(*request):
        raise RuntimeError("the metrics are broken")

    service = RegistryService(RegistryState(), topic.append)
    service.loaded = True
    answer = TestClient(create_app(service, observe=observe)).post("/subjects/s/versions", json={"schema": USER})
    assert answer.status_code == 200 and answer.json() == {"id": 1}
