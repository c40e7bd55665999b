"""The console on a cluster with an authorizer: it finds out by itself that it
must ask who is there, checks a SCRAM user's password against the controller's stored
credential, and every page and action then runs as ``User:alice`` under the cluster's ACLs:
alice sees the topics and groups she may describe and no others, reads what she may READ,
is refused (403, Kafka's error name) what she may not do, and nothing changes; an ACL added
while she is logged in counts on her next request; removing her SCRAM user ends her session.
(The login mechanics without a cluster: ``test_console_login.py``; in a real browser over
HTTPS: ``test_console_browser.py``.)"""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient

from rayqueue import TopicPartition
from rayqueue.acl import AclOperation, ResourceType
from rayqueue.console.app import create_app
from rayqueue.console.sessions import CREDENTIAL_CHECK_S, authentication_required
from tests.helpers import authorizer_cluster, wait_for
from tests.rayqueue.secured_console import PASSWORD, USER, allow, set_up
from tests.rayqueue.test_console_api import ok, refused

OWN = "http://localhost"


@pytest.fixture(scope="module")
def secured(ray_session):
    with authorizer_cluster("rayqueue-console-auth") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def grants(secured):
    return set_up(secured, f"console-auth-{os.getpid()}")


@pytest.fixture(scope="module")
def app(secured, grants):
    # Authentication is not forced: the console must find the authorizer by itself.
    return create_app(secured, sample_interval_s=0.5)


@pytest.fixture
def client(app):
    with TestClient(app, base_url=OWN, headers={"Origin": OWN}, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def alice(client):
    resp = client.post("/api/login", json={"user": USER, "password": PASSWORD})
    assert resp.status_code == 200, resp.text
    return client


def log_end(cluster, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return cluster.admin().describe_partition_logs([tp])[tp].log_end_offset


def test_the_console_finds_the_authorizer_and_asks_for_a_login(secured, app, client):
    assert authentication_required(secured)
    assert app.state.authentication is not None
    refused(client.get("/api/topics"), 401, "LOGIN_REQUIRED")
    assert client.get("/", follow_redirects=False).headers["location"] == "/login?next=%2F"
    # A wrong password, and a user that does not exist, against the controller's credential.
    refused(client.post("/api/login", json={"user": USER, "password": "guess"}), 401, "SASL_AUTHENTICATION_FAILED")
    refused(
        client.post("/api/login", json={"user": "mallory", "password": PASSWORD}), 401, "SASL_AUTHENTICATION_FAILED"
    )
    body = ok(client.post("/api/login", json={"user": USER, "password": PASSWORD}))
    assert body["principal"] == "User:alice" and body["mechanism"] == "SCRAM-SHA-512"


def test_alice_sees_only_what_she_may_describe(alice, grants):
    topics = {t["name"]: t for t in ok(alice.get("/api/topics?internal=true"))["topics"]}
    assert set(topics) == {grants.shared, grants.readonly}
    # Listed without DESCRIBE_CONFIGS: no retention or cleanup policy to show.
    assert topics[grants.readonly]["retention_ms"] is None and topics[grants.readonly]["partitions"] == 1
    overview = ok(alice.get("/api/overview"))
    assert overview["topics"] == 2 and overview["partitions"] == 2 and overview["groups"] == 1
    assert [g["group_id"] for g in ok(alice.get("/api/groups"))["groups"]] == [grants.group]
    # Named, what she may not describe is refused as Kafka refuses it; what does not exist is 404.
    refused(alice.get(f"/api/topics/{grants.hidden}"), 403, "TOPIC_AUTHORIZATION_FAILED")
    refused(alice.get(f"/api/groups/{grants.hidden_group}"), 403, "GROUP_AUTHORIZATION_FAILED")
    refused(alice.get(f"/api/history?topic={grants.hidden}"), 403, "TOPIC_AUTHORIZATION_FAILED")
    refused(alice.get(f"/api/history?group={grants.hidden_group}"), 403, "GROUP_AUTHORIZATION_FAILED")
    # A topic she may read but whose configs she may not describe: its partitions, no configs.
    detail = ok(alice.get(f"/api/topics/{grants.readonly}"))
    assert detail["partitions"][0]["high_watermark"] == 3 and detail["configs"] is None
    # Her group's committed offset.
    group = ok(alice.get(f"/api/groups/{grants.group}"))
    assert [(o["topic"], o["committed"]) for o in group["offsets"]] == [(grants.readonly, 1)]


def test_alice_reads_what_she_may_read_and_nothing_else(alice, grants):
    page = ok(alice.get(f"/api/topics/{grants.readonly}/records?mode=offset&offset=0"))
    assert [r["value"]["text"] for r in page["records"]] == ["ro-0", "ro-1", "ro-2"]
    resp = alice.get(f"/api/topics/{grants.hidden}/records?mode=offset&offset=0")
    refused(resp, 403, "TOPIC_AUTHORIZATION_FAILED")
    assert "secret-" not in resp.text


def test_a_refused_action_is_403_with_kafkas_error_and_changes_nothing(secured, alice, grants):
    admin = secured.admin()
    # Produce: WRITE on the topic.
    before = log_end(secured, grants.readonly)
    refused(
        alice.post(f"/api/topics/{grants.readonly}/records", json={"value": "x"}), 403, "TOPIC_AUTHORIZATION_FAILED"
    )
    assert log_end(secured, grants.readonly) == before
    written = ok(alice.post(f"/api/topics/{grants.shared}/records", json={"value": "from alice"}), 201)
    assert written["offset"] == 0 and log_end(secured, grants.shared) == 1
    # Delete: DELETE on the topic.
    refused(alice.delete(f"/api/topics/{grants.shared}?confirm={grants.shared}"), 403, "TOPIC_AUTHORIZATION_FAILED")
    assert grants.shared in admin.list_topics()
    # Configs: ALTER_CONFIGS.
    refused(
        alice.post(f"/api/topics/{grants.shared}/configs", json={"set": {"retention.ms": "1"}}),
        403,
        "TOPIC_AUTHORIZATION_FAILED",
    )
    assert admin.describe_configs(grants.shared)["retention.ms"][1] != "DYNAMIC_TOPIC_CONFIG"
    # Create: CREATE on the cluster or the topic.
    made = f"{grants.shared}-new"
    refused(alice.post("/api/topics", json={"name": made, "partitions": 1}), 403, "TOPIC_AUTHORIZATION_FAILED")
    assert made not in admin.list_topics()


def test_an_acl_added_while_logged_in_counts_on_the_next_request(secured, alice, grants):
    doomed = f"{grants.shared}-doomed"
    admin = secured.admin()
    admin.create_topic(doomed, 1, 1)
    try:
        assert doomed not in {t["name"] for t in ok(alice.get("/api/topics"))["topics"]}
        admin.create_acls(allow(ResourceType.TOPIC, doomed, AclOperation.DELETE))
        # DELETE implies DESCRIBE: the topic shows (once the cached snapshot is older than a tick).
        wait_for(
            lambda: doomed in {t["name"] for t in ok(alice.get("/api/topics"))["topics"]},
            timeout=30,
            what="the newly allowed topic on alice's list",
        )
        assert ok(alice.delete(f"/api/topics/{doomed}?confirm={doomed}")) == {"deleted": doomed}
        assert doomed not in admin.list_topics()
    finally:
        if doomed in admin.list_topics():
            admin.delete_topic(doomed)


def test_removing_the_scram_user_ends_the_session(secured, app):
    admin = secured.admin()
    admin.add_scram_user("bob", "bob-console-secret", "SCRAM-SHA-256")
    with TestClient(app, base_url=OWN, headers={"Origin": OWN}, raise_server_exceptions=False) as bob:
        ok(bob.post("/api/login", json={"user": "bob", "password": "bob-console-secret"}))
        assert ok(bob.get("/api/session"))["principal"] == "User:bob"
        admin.remove_scram_user("bob")
        body = wait_for(
            lambda: (r := bob.get("/api/groups")).status_code == 401 and r.json(),
            timeout=CREDENTIAL_CHECK_S + 30,
            what="bob's session to end",
        )
        assert body["error"] == "LOGIN_REQUIRED" and "was removed" in body["message"]
        refused(
            bob.post("/api/login", json={"user": "bob", "password": "bob-console-secret"}),
            401,
            "SASL_AUTHENTICATION_FAILED",
        )
