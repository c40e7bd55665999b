"""The web console's JSON API (rayqueue/console) on the session cluster, through FastAPI's
TestClient: every endpoint, the numbers it shows against what the test produced, and
errors as Kafka-named messages (never a traceback). The session Ray exports Prometheus
metrics (tests/conftest.py), so the charts come from them; a second app scrapes a closed
port and falls back to snapshots. The clients speak as the console's own page does (Host
localhost, an Origin naming it); what the console refuses from anyone else is tested at the
end, through TestClient and against a real uvicorn."""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from fastapi.testclient import TestClient

from rayqueue import TopicPartition
from rayqueue.console.app import STATIC, ConsoleServer, create_app
from rayqueue.console.guard import DEFAULT_MAX_BODY_BYTES, allowed_hosts
from tests.helpers import consume_all, wait_for

_ids = itertools.count()


# What the console's own page sends: it is served as http://localhost and its scripts' POST
# and DELETE requests carry the page's origin, as a browser adds it.
OWN = "http://localhost"


def page_client(app) -> TestClient:
    """A client that speaks to ``app`` as the console's own page does."""
    return TestClient(app, base_url=OWN, headers={"Origin": OWN}, raise_server_exceptions=False)


@pytest.fixture(scope="module")
def client(cluster):
    """The console app (sampling every 0.3 s) with its lifespan running."""
    with page_client(create_app(cluster, sample_interval_s=0.3)) as c:
        yield c


@pytest.fixture(scope="module")
def snapshot_client(cluster):
    """A console whose metrics endpoint is a closed port (bound, never listening): its
    charts must fall back to snapshots."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/metrics"
        app = create_app(cluster, sample_interval_s=0.3, metrics_endpoints=lambda: [url])
        with page_client(app) as c:
            yield c


@pytest.fixture
def names(admin):
    """Unique topic names; the topics that exist at the end are deleted."""
    made: list[str] = []

    def make() -> str:
        made.append(f"console-{os.getpid()}-{next(_ids)}")
        return made[-1]

    yield make
    existing = set(admin.list_topics())
    for name in made:
        if name in existing:
            admin.delete_topic(name)


def ok(resp, status: int = 200) -> dict:
    assert resp.status_code == status, resp.text
    return resp.json()


def refused(resp, status: int, error: str) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error"] == error, body
    assert "Traceback" not in resp.text and 'File "' not in resp.text
    return body


def test_overview_shows_brokers_leaders_and_cluster(cluster, client):
    o = ok(client.get("/api/overview"))
    info = cluster.describe()
    meta = cluster.metadata()
    assert o["cluster_id"] == info["cluster_id"] and o["namespace"] == cluster.namespace
    assert o["controller_epoch"] == info["controller_epoch"]
    assert [b["broker_id"] for b in o["brokers"]] == sorted(b.broker_id for b in info["brokers"])
    partitions = [p for t in meta.topics.values() for p in t.partitions]
    assert sum(b["leaders"] for b in o["brokers"]) == sum(not p.offline for p in partitions)
    assert sum(b["partitions"] for b in o["brokers"]) == sum(len(p.replicas) for p in partitions)
    assert o["topics"] == sum(not t.internal for t in meta.topics.values())
    assert o["under_replicated"] == [] and o["offline"] == []
    assert o["errors"] == []


def test_topics_create_validate_alter_and_delete_with_confirmation(cluster, client, names):
    name = names()
    created = ok(client.post("/api/topics", json={"name": name, "partitions": 3, "replication_factor": 1}), 201)
    assert created == {"name": name, "partitions": 3, "replication_factor": 1}
    listed = {t["name"]: t for t in ok(client.get("/api/topics"))["topics"]}
    assert listed[name]["partitions"] == 3 and listed[name]["replication_factor"] == 1
    assert listed[name]["cleanup_policy"] == "delete" and listed[name]["retention_ms"] == 604800000
    assert not any(t["internal"] for t in listed.values())
    with_internal = {t["name"] for t in ok(client.get("/api/topics?internal=true"))["topics"]}
    assert with_internal == set(cluster.metadata().topics)

    # Admin's validation and errors, unchanged.
    refused(client.post("/api/topics", json={"name": name, "partitions": 1}), 409, "TOPIC_ALREADY_EXISTS")
    refused(client.post("/api/topics", json={"name": names(), "partitions": 0}), 400, "INVALID_PARTITIONS")
    refused(client.post("/api/topics", json={"name": "bad name!", "partitions": 1}), 400, "INVALID_TOPIC_EXCEPTION")
    body = refused(
        client.post("/api/topics", json={"name": names(), "configs": {"retention.msx": "1"}}), 400, "INVALID_CONFIG"
    )
    assert "retention.ms" in body["message"]  # the nearest known key
    refused(client.post("/api/topics", json={"partitions": 1}), 422, "INVALID_REQUEST")

    # Configs: set, see it with its source, refuse a bad value, remove the override.
    assert ok(client.post(f"/api/topics/{name}/configs", json={"set": {"retention.ms": "60000"}}))["overrides"] == {
        "retention.ms": 60000
    }
    detail = ok(client.get(f"/api/topics/{name}"))
    assert detail["configs"]["retention.ms"] == {"value": 60000, "source": "DYNAMIC_TOPIC_CONFIG"}
    refused(client.post(f"/api/topics/{name}/configs", json={"set": {"retention.ms": "soon"}}), 400, "INVALID_CONFIG")
    assert ok(client.post(f"/api/topics/{name}/configs", json={"delete": ["retention.ms"]}))["overrides"] == {}

    # Delete: refused without the name repeated, then done.
    refused(client.delete(f"/api/topics/{name}"), 400, "INVALID_REQUEST")
    refused(client.delete(f"/api/topics/{name}?confirm=other"), 400, "INVALID_REQUEST")
    assert name in {t["name"] for t in ok(client.get("/api/topics"))["topics"]}
    assert ok(client.delete(f"/api/topics/{name}?confirm={name}")) == {"deleted": name}
    refused(client.get(f"/api/topics/{name}"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert name not in {t["name"] for t in ok(client.get("/api/topics"))["topics"]}


def test_topic_detail_shows_each_partitions_offsets_and_size(cluster, client, names):
    name = names()
    ok(client.post("/api/topics", json={"name": name, "partitions": 2, "replication_factor": 2}), 201)
    producer = cluster.producer()
    producer.send_many(name, [b"v" * 100] * 7, partition=0).get()
    producer.send_many(name, [b"w"] * 3, partition=1).get()
    producer.close()
    cluster.admin().delete_records({TopicPartition(name, 0): 2})
    detail = wait_for(
        lambda: (d := ok(client.get(f"/api/topics/{name}")))["partitions"][0]["log_start_offset"] == 2 and d,
        10,
        what="a snapshot after the produce",
    )
    meta = cluster.metadata([name]).topics[name]
    rows = [
        (
            p["partition"],
            p["leader"],
            p["replicas"],
            p["log_start_offset"],
            p["high_watermark"],
            p["last_stable_offset"],
        )
        for p in detail["partitions"]
    ]
    assert rows == [
        (0, meta.partitions[0].leader, list(meta.partitions[0].replicas), 2, 7, 7),
        (1, meta.partitions[1].leader, list(meta.partitions[1].replicas), 0, 3, 3),
    ]
    assert all(p["isr"] == p["replicas"] and p["segments"] == 1 for p in detail["partitions"])
    assert detail["partitions"][0]["size_bytes"] > 700 > detail["partitions"][1]["size_bytes"] > 0
    assert detail["messages"] == 8 and detail["replication_factor"] == 2
    assert detail["rates"].keys() == {"messages_in", "messages_out", "bytes_in", "bytes_out", "source", "source_label"}


def test_message_browser_by_offset_timestamp_newest_key_filter_and_produce(cluster, client, names):
    name = names()
    ok(client.post("/api/topics", json={"name": name, "partitions": 2, "replication_factor": 1}), 201)
    producer = cluster.producer()
    # Recent times: the session cluster enforces 7 days' retention every second.
    base = (int(time.time()) - 3600) * 1000
    sent = [
        producer.send(
            name,
            json.dumps({"n": i, "name": f"item-{i}"}).encode(),
            key=f"k{i}".encode(),
            headers=[("trace", f"t{i}".encode()), ("raw", b"\xff\x00")],
            partition=0,
            timestamp=base + i * 1000,
        )
        for i in range(10)
    ]
    producer.send(name, b"\xde\xad\xbe\xef", key=None, partition=0, timestamp=base + 10_000)
    producer.flush()
    assert [f.get().offset for f in sent] == list(range(10))
    producer.close()
    url = f"/api/topics/{name}/records"

    page = ok(client.get(url, params={"partition": 0, "mode": "offset", "offset": 4, "limit": 3}))
    assert (page["log_start_offset"], page["high_watermark"], page["start_offset"]) == (0, 11, 4)
    assert [r["offset"] for r in page["records"]] == [4, 5, 6]
    first = page["records"][0]
    assert first["key"]["text"] == "k4" and first["timestamp"] == base + 4000
    assert first["value"]["text"] == '{"n": 4, "name": "item-4"}'
    assert first["value"]["json"] == '{\n  "n": 4,\n  "name": "item-4"\n}'
    assert first["value"]["hex"] == " ".join(f"{b:02x}" for b in first["value"]["text"].encode())
    assert first["headers"][0] == {
        "key": "trace",
        "value": {"size": 2, "truncated": False, "text": "t4", "json": None, "hex": "74 34"},
    }
    assert first["headers"][1]["value"]["text"] is None and first["headers"][1]["value"]["hex"] == "ff 00"

    newest = ok(client.get(url, params={"partition": 0, "mode": "newest", "limit": 2}))["records"]
    assert [r["offset"] for r in newest] == [9, 10]
    assert newest[1]["key"] is None
    assert newest[1]["value"]["text"] is None and newest[1]["value"]["hex"] == "de ad be ef"

    by_time = ok(client.get(url, params={"mode": "timestamp", "timestamp": base + 6500, "limit": 2}))
    assert [r["offset"] for r in by_time["records"]] == [7, 8]
    assert ok(client.get(url, params={"mode": "timestamp", "timestamp": base + 3_600_000}))["records"] == []

    filtered = ok(client.get(url, params={"mode": "offset", "offset": 0, "key": "k7"}))["records"]
    assert [(r["offset"], r["key"]["text"]) for r in filtered] == [(7, "k7")]
    assert ok(client.get(url, params={"partition": 1}))["records"] == []

    md = ok(
        client.post(
            url, json={"key": "test-key", "value": '{"hello": "console"}', "partition": 1, "headers": {"h": "1"}}
        ),
        201,
    )
    assert (md["partition"], md["offset"]) == (1, 0)
    record = ok(client.get(url, params={"partition": 1, "mode": "offset", "offset": 0}))["records"][0]
    assert record["key"]["text"] == "test-key" and record["value"]["json"] == '{\n  "hello": "console"\n}'
    assert record["headers"] == [
        {"key": "h", "value": {"size": 1, "truncated": False, "text": "1", "json": "1", "hex": "31"}}
    ]

    refused(client.get(url, params={"mode": "sideways"}), 400, "INVALID_REQUEST")
    refused(client.get(url, params={"mode": "offset"}), 400, "INVALID_REQUEST")
    refused(client.get(url, params={"limit": 0}), 400, "INVALID_REQUEST")
    refused(client.get(url, params={"partition": 5}), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    refused(client.get("/api/topics/no-such-topic/records"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    refused(client.post("/api/topics/no-such-topic/records", json={"value": "x"}), 404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_groups_offsets_lag_and_reset_refused_while_active(cluster, admin, client, names):
    name = names()
    ok(client.post("/api/topics", json={"name": name, "partitions": 1, "replication_factor": 1}), 201)
    producer = cluster.producer()
    producer.send_many(name, [b"r"] * 10, partition=0).get()
    producer.close()
    group = f"console-group-{os.getpid()}-{next(_ids)}"
    tp = TopicPartition(name, 0)
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe([name])
    consume_all(consumer, 10)
    consumer.commit({tp: 4})
    try:
        g = wait_for(
            lambda: (
                (d := ok(client.get(f"/api/groups/{group}")))["offsets"] and d["offsets"][0]["committed"] == 4 and d
            ),
            10,
            what="the commit in a snapshot",
        )
        assert g["state"] == "Stable" and g["protocol_type"] == "consumer" and g["protocol"]
        assert len(g["members"]) == 1
        assert g["members"][0]["assignment"] == [{"topic": name, "partition": 0}]
        assert g["offsets"] == [
            {
                "topic": name,
                "partition": 0,
                "committed": 4,
                "log_end_offset": 10,
                "lag": 6,
                "owner": g["members"][0]["member_id"],
            }
        ]
        assert g["lag"] == 6
        listed = {x["group_id"]: x for x in ok(client.get("/api/groups"))["groups"]}
        assert listed[group]["members"] == 1 and listed[group]["lag"] == 6
        # kafka-consumer-groups refuses to reset an active group; so does the console.
        body = {"group_id": group, "to": "latest", "confirm": True}
        refused(client.post("/api/group-offsets/reset", json=body), 409, "NON_EMPTY_GROUP")
    finally:
        consumer.close()
    refused(client.post("/api/group-offsets/reset", json={**body, "confirm": False}), 400, "INVALID_REQUEST")
    done = ok(client.post("/api/group-offsets/reset", json=body))
    assert done["offsets"] == [{"topic": name, "partition": 0, "offset": 10}]
    assert wait_for(lambda: ok(client.get(f"/api/groups/{group}"))["lag"] == 0, 10, what="lag 0 after the reset")
    earliest = ok(client.post("/api/group-offsets/reset", json={**body, "to": "earliest", "topics": [name]}))
    assert earliest["offsets"][0]["offset"] == 0
    assert wait_for(lambda: ok(client.get(f"/api/groups/{group}"))["lag"] == 10, 10, what="lag 10 after the reset")
    records = ok(client.get(f"/api/topics/{name}/records", params={"mode": "offset", "offset": 3, "limit": 1}))
    stamp = records["records"][0]["timestamp"]
    by_time = ok(client.post("/api/group-offsets/reset", json={**body, "to": "timestamp", "timestamp": stamp}))
    assert by_time["offsets"][0]["offset"] <= 3  # the batch shares one time: the first at or after it
    refused(client.post("/api/group-offsets/reset", json={**body, "to": "timestamp"}), 400, "INVALID_REQUEST")
    refused(client.get("/api/groups/no-such-group"), 404, "GROUP_ID_NOT_FOUND")
    admin.delete_groups([group])


def test_transactions_show_state_and_age(cluster, client, names):
    name = names()
    ok(client.post("/api/topics", json={"name": name, "partitions": 1, "replication_factor": 1}), 201)
    txn_id = f"console-txn-{os.getpid()}-{next(_ids)}"
    producer = cluster.producer(transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(name, b"in a transaction").get()

        def shown(state: str) -> dict | None:
            rows = {t["transactional_id"]: t for t in ok(client.get("/api/transactions"))["transactions"]}
            return rows.get(txn_id) if rows.get(txn_id, {}).get("state") == state else None

        open_txn = wait_for(lambda: shown("Ongoing"), 10, what="the open transaction")
        assert open_txn["age_ms"] >= 0 and open_txn["partitions"] == [{"topic": name, "partition": 0}]
        assert ok(client.get("/api/overview"))["open_transactions"] >= 1
        producer.commit_transaction()
        done = wait_for(lambda: shown("CompleteCommit"), 10, what="the committed transaction")
        assert done["age_ms"] is None
    finally:
        producer.close()


def test_charts_fall_back_to_snapshots_when_no_metrics_endpoint_answers(cluster, snapshot_client, names):
    client = snapshot_client
    name = names()
    ok(client.post("/api/topics", json={"name": name, "partitions": 1, "replication_factor": 1}), 201)
    created = time.time()
    # History counts what moves after the console saw the topic: wait for a sample since.
    wait_for(lambda: any(p["t"] > created for p in ok(client.get("/api/history"))["points"]), 15, what="a sample")
    producer = cluster.producer()
    producer.send_many(name, [b"h"] * 500, partition=0).get()
    producer.close()

    def counted() -> list[float]:
        points = ok(client.get("/api/history", params={"topic": name}))["points"]
        return [p["messages_in"] * p["window_s"] for p in points if p["source"] == "snapshots"]

    # Each point's rate is what moved between two snapshots up to 20 s apart
    # (DEFAULT_RATE_WINDOW_S), over the time between them (window_s): a point whose two
    # snapshots enclose the one produce counts its 500 records exactly. (Adding rate x spacing
    # over the points only approximates that: the sampler's ticks slip under load.)
    wait_for(lambda: any(c > 0 for c in counted()), 60, what="the produce in the history")
    assert max(counted()) == pytest.approx(500, abs=0.5)
    history = ok(client.get("/api/history", params={"topic": name}))
    assert history["source"] == "snapshots" and "snapshots" in history["source_label"]
    assert all(
        p["source"] == "snapshots" and p["bytes_in"] is None and p["bytes_out"] is None for p in history["points"]
    )
    totals = ok(client.get("/api/history"))["points"]
    assert any(p["messages_in"] > 0 for p in totals) and all(p["produce_p99_ms"] is None for p in totals)
    overview = ok(client.get("/api/overview"))
    assert overview["source"] == "snapshots" and overview["metrics"] is None
    assert overview["bytes_in_per_sec"] is None and overview["bytes_out_per_sec"] is None
    # Why: the page shows the scrape error nowhere, but the state keeps it for the log.
    assert "/metrics" in client.app.state.console.metrics.last_error
    group = f"console-lag-{os.getpid()}-{next(_ids)}"
    consumer = cluster.consumer(group_id=group, enable_auto_commit=False)
    consumer.commit({TopicPartition(name, 0): 100})
    consumer.close()
    lag = wait_for(
        lambda: [p for p in ok(client.get("/api/history", params={"group": group}))["points"] if p["lag"] == 400],
        15,
        what="the group's lag in the history",
    )
    assert lag[-1]["partitions"] == {f"{name}-0": 400} and lag[-1]["source"] == "snapshots"
    cluster.admin().delete_groups([group])


# Ray's agent exports every few seconds and the coordinator refreshes the lag gauge every
# 5 s (rayqueue.group.lag.refresh.interval.ms): generous deadlines on a loaded machine.
METRICS_DEADLINE_S = 90.0


def test_charts_come_from_the_prometheus_metrics(cluster, client, names):
    records, size = 300, 100
    name = names()
    ok(client.post("/api/topics", json={"name": name, "partitions": 1, "replication_factor": 1}), 201)
    created = time.time()
    # Rates start at the scrape before the traffic: wait for a metrics point since the topic.
    history = wait_for(
        lambda: (
            (h := ok(client.get("/api/history")))["source"] == "metrics"
            and any(p["t"] > created and p["source"] == "metrics" for p in h["points"])
            and h
        ),
        METRICS_DEADLINE_S,
        what="a sample from the metrics",
    )
    assert history["source_label"] == "from Prometheus metrics"
    producer = cluster.producer()
    producer.send_many(name, [b"m" * size] * records, partition=0).get()
    producer.close()
    # A reader without a group (the snapshots never see it) fetches everything once; then a
    # group commits 100 of 300 without reading: lag 200.
    tp = TopicPartition(name, 0)
    reader = cluster.consumer()
    reader.assign([tp])
    reader.seek(tp, 0)
    assert len(consume_all(reader, records)) == records
    reader.close()
    group = f"console-metrics-lag-{os.getpid()}-{next(_ids)}"
    committer = cluster.consumer(group_id=group, enable_auto_commit=False)
    committer.commit({tp: 100})
    committer.close()
    payload = records * size

    def peak(key: str) -> float:
        # Metrics rates are the increase over the last window (Ray exports every few
        # seconds): rate x window is what the window saw; the whole burst fits in one.
        points = ok(client.get("/api/history", params={"topic": name}))["points"]
        return max((p[key] * p["window_s"] for p in points if p["source"] == "metrics"), default=0.0)

    wait_for(
        lambda: peak("messages_in") >= records - 0.5 and peak("bytes_out") >= payload,
        METRICS_DEADLINE_S,
        what="the produce and the fetch in the metrics' history",
    )
    # Counted once each: messages exactly, bytes as batches (the payload plus each
    # record's and batch's framing), bytes out as fetched (the same batches, read once).
    assert peak("messages_in") == pytest.approx(records)
    bytes_in = peak("bytes_in")
    assert payload < bytes_in <= payload + records * 12 + 61 * records
    assert peak("bytes_out") == pytest.approx(bytes_in)
    # Only the metrics see that fetch: no group committed what the reader read.
    points = ok(client.get("/api/history", params={"topic": name}))["points"]
    assert all(p["messages_out"] == 0 for p in points)

    totals = ok(client.get("/api/history"))["points"]
    assert any(p["source"] == "metrics" and (p["produce_p99_ms"] or 0) > 0 for p in totals)
    assert any(p["source"] == "metrics" and (p["fetch_p99_ms"] or 0) > 0 for p in totals)

    lag = wait_for(
        lambda: [
            p
            for p in ok(client.get("/api/history", params={"group": group}))["points"]
            if p["source"] == "metrics" and p["lag"] == 200
        ],
        METRICS_DEADLINE_S,
        what="the group-lag gauge in the history",
    )
    assert lag[-1]["partitions"] == {f"{name}-0": 200}

    detail = ok(client.get(f"/api/topics/{name}"))
    assert detail["rates"]["source"] == "metrics" and detail["rates"]["bytes_in"] is not None
    overview = wait_for(
        lambda: (
            (o := ok(client.get("/api/overview")))["metrics"] is not None
            and o["metrics"]["under_replicated"] == len(o["under_replicated"])
            # The gauges are a scrape behind the snapshot: a partition of another test's topic
            # offline for a moment shows in one before the other (seen under load).
            and o["metrics"]["offline"] == len(o["offline"])
            and o
        ),
        METRICS_DEADLINE_S,
        what="the metrics' URPs and offline partitions agreeing with the snapshot's",
    )
    assert overview["source"] == "metrics" and overview["source_label"] == "from Prometheus metrics"
    assert overview["metrics"]["endpoints"] >= 1
    assert overview["bytes_in_per_sec"] is not None and overview["bytes_out_per_sec"] is not None
    cluster.admin().delete_groups([group])


def test_an_unexpected_failure_is_a_message_not_a_traceback(client, monkeypatch, names):
    state = client.app.state.console
    # A user topic to list (the list asks for each one's configs), whatever ran before.
    ok(client.post("/api/topics", json={"name": names(), "partitions": 1, "replication_factor": 1}), 201)

    def boom(*args, **kwargs):
        raise RuntimeError("controller said no\n  File 'x.py', line 1")

    monkeypatch.setattr(state.admin, "describe_configs", boom)
    resp = client.get("/api/topics")
    assert resp.status_code == 500
    assert resp.json() == {"error": "RuntimeError", "message": "controller said no File 'x.py', line 1"}
    assert "Traceback" not in resp.text


def test_pages_and_assets_are_served_locally(client):
    for path in ("/", "/topics", "/topics/x", "/topics/x/messages", "/groups", "/groups/a/b", "/transactions"):
        resp = client.get(path)
        assert resp.status_code == 200 and '<main id="app">' in resp.text
    for asset in sorted(Path(STATIC).iterdir()):
        resp = client.get(f"/static/{asset.name}")
        assert resp.status_code == 200
        # No CDN or other network fetch at run time: the only URL is SVG's namespace name.
        assert set(re.findall(r"https?://[^\s\"'`)]+", resp.text)) <= {"http://www.w3.org/2000/svg"}


# -- what the console refuses: other origins, other host names, big bodies -------------------


@pytest.fixture
def stranger(client):
    """A client of the same app that sends only the headers each request names."""
    return TestClient(client.app, base_url=OWN, raise_server_exceptions=False)


def test_a_state_change_from_another_origin_is_refused(admin, client, stranger, names):
    name, other = names(), names()
    ok(client.post("/api/topics", json={"name": name, "partitions": 1, "replication_factor": 1}), 201)
    delete = f"/api/topics/{name}?confirm={name}"
    evil = {"Origin": "http://evil.example"}
    for headers in (
        evil,
        {"Referer": "http://evil.example/page.html"},  # no Origin: the Referer names the page
        {},  # neither: a hand-made request, asked to say where it comes from
        {"Origin": "null"},  # a sandboxed frame or a file:// page
        {"Origin": "http://localhost:1"},  # same name, another port: another origin
        {"Origin": "https://localhost"},  # another scheme
        {"Origin": "http://evil.example", "Referer": f"{OWN}/topics"},  # Origin decides
    ):
        body = refused(stranger.delete(delete, headers=headers), 403, "CROSS_ORIGIN_REQUEST")
        assert f"Origin: {OWN}" in body["message"]  # how a script gets through
    refused(stranger.post("/api/topics", json={"name": other}, headers=evil), 403, "CROSS_ORIGIN_REQUEST")
    # What a plain HTML form posts across sites (no CORS preflight) is refused as well.
    refused(stranger.post("/api/topics", data={"name": other}, headers=evil), 403, "CROSS_ORIGIN_REQUEST")
    refused(
        stranger.post(f"/api/topics/{name}/records", json={"value": "x"}, headers=evil), 403, "CROSS_ORIGIN_REQUEST"
    )
    refused(
        stranger.post(f"/api/topics/{name}/configs", json={"set": {"retention.ms": 1}}, headers=evil),
        403,
        "CROSS_ORIGIN_REQUEST",
    )
    reset = {"group_id": f"{name}-g", "to": "earliest", "topics": [name], "confirm": True}
    refused(stranger.post("/api/group-offsets/reset", json=reset, headers=evil), 403, "CROSS_ORIGIN_REQUEST")
    # Nothing changed: the topic is there, untouched, and the other one was never made.
    assert name in admin.list_topics() and other not in admin.list_topics()
    assert admin.describe_configs(name)["retention.ms"][1] != "DYNAMIC_TOPIC_CONFIG"
    assert ok(client.get(f"/api/topics/{name}"))["messages"] == 0
    # Reads change nothing; a browser keeps their answers from a foreign page (no CORS headers).
    listed = ok(stranger.get("/api/topics", headers=evil))
    assert "access-control-allow-origin" not in {k.lower() for k in stranger.get("/api/topics").headers}
    assert name in [t["name"] for t in listed["topics"]]
    # The console's own origin, by Origin or (without one) by Referer, is accepted.
    ok(stranger.delete(delete, headers={"Referer": f"{OWN}/topics/{name}"}))
    assert name not in admin.list_topics()


def test_unknown_host_names_are_refused(cluster, client):
    # DNS rebinding: evil.example resolves to 127.0.0.1; its page then sends Host: evil.example,
    # and as far as the browser knows the console is evil.example's own origin.
    rebound = {"Host": "evil.example", "Origin": "http://evil.example"}
    for resp in (client.get("/", headers=rebound), client.get("/api/overview", headers=rebound)):
        assert resp.status_code == 400 and resp.text == "Invalid host header"
    assert client.post("/api/topics", json={"name": "rebound"}, headers=rebound).status_code == 400
    for host in ("localhost", "127.0.0.1", "[::1]", "LOCALHOST:1234"):
        assert client.get("/topics", headers={"Host": host}).status_code == 200, host

    # An operator's extra names (--allowed-host), next to the bound address and loopback names.
    assert allowed_hosts("127.0.0.1") == ["localhost", "127.0.0.1", "[::1]"]
    assert allowed_hosts("::1") == ["localhost", "127.0.0.1", "[::1]"]
    assert allowed_hosts("10.1.2.3", ["console.example", "fd00::7"]) == [
        "localhost",
        "127.0.0.1",
        "[::1]",
        "10.1.2.3",
        "console.example",
        "[fd00::7]",
    ]
    # A wildcard bind is no name a browser uses: it adds nothing.
    hosts = allowed_hosts("0.0.0.0", ["console.example"])
    assert "0.0.0.0" not in hosts
    app = create_app(cluster, sample=False, hosts=hosts)
    named = TestClient(app, base_url="http://console.example", headers={"Origin": "http://console.example"})
    assert named.get("/").status_code == 200
    assert named.get("/", headers={"Host": "0.0.0.0"}).status_code == 400
    assert named.get("/", headers={"Host": "evil.example"}).status_code == 400
    # Its own pages' changes still pass the origin check under that name.
    refused(named.delete("/api/topics/none-such?confirm=none-such"), 404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_a_body_over_the_cap_is_refused_and_one_under_it_served(admin, client, names):
    name = names()
    too_big = json.dumps({"name": name, "configs": {"note": "x" * (DEFAULT_MAX_BODY_BYTES + 1)}}).encode()
    json_type = {"Content-Type": "application/json"}
    resp = client.post("/api/topics", content=too_big, headers=json_type)
    assert resp.status_code == 413, resp.text
    # Chunked (no Content-Length): counted as it streams, refused once past the cap.
    chunks = (too_big[i : i + 65536] for i in range(0, len(too_big), 65536))
    resp = client.post("/api/topics", content=chunks, headers=json_type)
    assert resp.status_code == 413 and "content-length" not in resp.request.headers, resp.text
    assert name not in admin.list_topics()
    # Under the cap: read, parsed and acted on (a record of 900 KB, below message.max.bytes).
    ok(client.post("/api/topics", json={"name": name, "partitions": 1, "replication_factor": 1}), 201)
    landed = ok(client.post(f"/api/topics/{name}/records", json={"value": "v" * 900_000}), 201)
    assert landed["offset"] == 0


@pytest.fixture(scope="module")
def served(cluster):
    """The console on a real uvicorn, on a free loopback port."""
    server = ConsoleServer(cluster, "127.0.0.1", 0, sample_interval_s=5).start()
    yield server
    server.stop()


def _http(port: int, head: str, timeout: float = 60) -> tuple[socket.socket, Callable[[], bytes]]:
    """Send ``head`` (a request line and headers) on a fresh connection; returns the socket and
    a function that reads one response (headers and its Content-Length body)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(head.encode())

    def read() -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            assert more, f"connection closed after {data!r}"
            data += more
        top, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: (\d+)", top).group(1))
        while len(body) < length:
            more = sock.recv(65536)
            assert more, f"connection closed after {data!r}"
            body += more
        return top + b"\r\n\r\n" + body

    return sock, read


def test_a_huge_body_is_refused_by_uvicorn_before_it_is_sent(served, admin, names):
    name = names()
    host = f"127.0.0.1:{served.port}"
    rss = psutil.Process().memory_info().rss
    # 200 MB announced, not a byte of it sent: the answer must come without it.
    sock, read = _http(
        served.port,
        f"POST /api/topics HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {200 * 1024 * 1024}\r\n\r\n",
    )
    with sock:
        answer = read()
        assert answer.startswith(b"HTTP/1.1 413 "), answer
        # The server closes the connection (with a body unread it can carry no other request).
        assert sock.recv(1) == b""

    # A chunked body streams until the server has seen more than the cap: it answers 413
    # then, and stops reading; the kernel's socket buffers are all the client gets to fill.
    sock, read = _http(
        served.port,
        f"POST /api/topics HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
    sent = 0
    with sock:
        sock.setblocking(False)
        while sent < 256 * 1024 * 1024 and not select.select([sock], [], [], 0)[0]:
            try:
                sent += sock.send(chunk)  # the kernel takes what fits; the rest is resent
            except BlockingIOError:
                select.select([sock], [sock], [], 5)
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(60)
        answer = read()
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert sent < 64 * 1024 * 1024, f"{sent} bytes went in before the server refused"
    # The server (this process) did not keep what came: far less than what was sent.
    assert psutil.Process().memory_info().rss - rss < 64 * 1024 * 1024
    assert name not in admin.list_topics()

    # The console's own page, and a change from it, are served as before.
    with urllib.request.urlopen(f"{served.url}/topics", timeout=60) as page:
        assert page.status == 200 and '<main id="app">' in page.read().decode()
    body = json.dumps({"name": name, "partitions": 1, "replication_factor": 1})
    sock, read = _http(
        served.port,
        f"POST /api/topics HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}",
    )
    with sock:
        assert read().startswith(b"HTTP/1.1 201 ")
    assert name in admin.list_topics()
