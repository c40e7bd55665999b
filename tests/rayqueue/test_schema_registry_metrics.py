"""The schema registry's metrics end to end: a one-broker cluster of its own on the session Ray
(whose metrics agent serves Prometheus on a free port), garbage written into ``_schemas``
before the registry first loads it, requests answered with every kind of status, and the
endpoint scraped over HTTP and parsed with prometheus_client's parser: requests by method,
route template and status, their times, subjects, versions and schemas held, and the records
of ``_schemas`` the load skipped.

Ray's agent exports every few seconds, so every check waits on a condition with a deadline.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import ray

from actors.schema_registry.actor import start_schema_registry
from tests.helpers import metric_total, own_cluster, scrape, wait_for

NAMESPACE = "rayqueue-schema-registry-metrics-test"
SCRAPE_DEADLINE_S = 90.0
VERSIONS = "/subjects/{subject}/versions"
VERSION = "/subjects/{subject}/versions/{version}"
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


def avro(*fields: str) -> str:
    return json.dumps({"type": "record", "name": "Reading", "fields": [{"name": f, "type": "int"} for f in fields]})


@pytest.fixture(scope="module")
def registry_url(ray_session):
    """A cluster whose ``_schemas`` holds two unreadable records before its registry starts."""
    with own_cluster(NAMESPACE, rayqueue_num_brokers=1) as cluster:
        cluster.admin().create_topic("_schemas", 1, 1, configs={"cleanup.policy": "compact"})
        producer = cluster.producer()
        producer.send("_schemas", b"\x00\x01", key=b"not json")
        producer.send("_schemas", b"{broken", key=b'{"keytype":"SCHEMA","subject":"x","version":1,"magic":1}')
        producer.flush()
        producer.close()
        config = {**dict(cluster.config), "schema.registry.listeners": "http://127.0.0.1:0"}
        handle = start_schema_registry(NAMESPACE, config, ray.get_runtime_context().get_node_id(), 120)
        yield ray.get(handle.urls.remote(), timeout=30)[0]


def call(url: str, method: str, path: str, body: dict | None = None) -> int:
    """The HTTP status of one request to the registry."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": MEDIA_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def value(samples: dict[str, list], name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples of this cluster with ``labels`` (None: no such series)."""
    return metric_total(samples, NAMESPACE, name, **labels)


def test_requests_holdings_and_skipped_records_reach_prometheus(registry_url, metrics_export_port):
    url = registry_url
    statuses = [
        call(url, "POST", "/subjects/readings-value/versions", {"schema": avro("a")}),
        call(url, "POST", "/subjects/readings-value/versions", {"schema": avro("a", "b")}),  # BACKWARD: 409
        call(url, "POST", "/subjects/readings-value/versions", {"schema": avro("a")}),  # the same: no new version
        call(url, "POST", "/subjects/events-value/versions", {"schema": '{"type": "object"}', "schemaType": "JSON"}),
        call(url, "POST", "/subjects/spare-value/versions", {"schema": avro("c")}),
        call(url, "DELETE", "/subjects/spare-value"),  # soft: one version soft-deleted
        call(url, "GET", "/subjects/readings-value/versions/latest"),
        call(url, "GET", "/subjects/nobody-value/versions/1"),
        call(url, "GET", "/no/such/route"),
        call(url, "BREW", "/subjects"),
    ]
    assert statuses == [200, 409, 200, 200, 200, 200, 200, 404, 404, 405]
    expected = {
        ("POST", VERSIONS, "200"): 4,
        ("POST", VERSIONS, "409"): 1,
        ("DELETE", "/subjects/{subject}", "200"): 1,
        ("GET", VERSION, "200"): 1,
        ("GET", VERSION, "404"): 1,
        ("GET", "unmatched", "404"): 1,
        ("OTHER", "/subjects", "405"): 1,
    }
    requests = "ray_rayqueue_schema_registry_requests_total"

    def counted():
        samples = scrape(metrics_export_port)
        got = {key: value(samples, requests, method=key[0], route=key[1], status=key[2]) for key in expected}
        return samples if got == expected else None

    samples = wait_for(counted, timeout=SCRAPE_DEADLINE_S, interval=0.5, what="the registry's request counts")
    # Every request was counted under its template, none under a path (no subject is a label).
    series = [s for s in samples[requests] if s.labels.get("cluster") == NAMESPACE]
    assert sum(s.value for s in series) == len(statuses)
    assert not any("readings" in s.labels["route"] for s in series)
    timed = value(samples, "ray_rayqueue_schema_registry_request_time_ms_count", method="POST", route=VERSIONS)
    assert timed == 5
    assert (
        value(samples, "ray_rayqueue_schema_registry_request_time_ms_bucket", method="POST", route=VERSIONS, le="+Inf")
        == 5
    )

    def held():
        samples = scrape(metrics_export_port)
        got = (
            value(samples, "ray_rayqueue_schema_registry_subjects"),
            value(samples, "ray_rayqueue_schema_registry_versions", state="live"),
            value(samples, "ray_rayqueue_schema_registry_versions", state="soft_deleted"),
            *(
                value(samples, "ray_rayqueue_schema_registry_schemas", schema_type=t)
                for t in ("AVRO", "JSON", "PROTOBUF")
            ),
            value(samples, "ray_rayqueue_internal_records_skipped_total", topic="_schemas"),
        )
        return got == (2, 2, 1, 2, 1, 0, 2) or None

    wait_for(held, timeout=SCRAPE_DEADLINE_S, interval=0.5, what="the registry's gauges and skipped records")
