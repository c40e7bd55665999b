"""The console's schema registry page: its API (``/api/schemas``) and the page in the OS's
headless Chromium (skipped without it), against a registry on the session cluster."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
import ray

from actors.schema_registry.actor import start_schema_registry, stop_schema_registry
from rayqueue.console.app import ConsoleServer

CHROMIUM = os.environ.get("RAYQUEUE_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def registry_url(cluster):
    node = ray.get_runtime_context().get_node_id()
    config = {
        **dict(cluster.config),
        "schema.registry.listeners": "http://127.0.0.1:0",
        "schema.registry.kafkastore.topic": "_schemas_console_test",
    }
    handle = start_schema_registry(cluster.namespace, config, node, 120)
    yield ray.get(handle.urls.remote(), timeout=30)[0]
    stop_schema_registry(cluster.namespace)
    try:
        cluster.admin().delete_topic("_schemas_console_test")
    except Exception:  # noqa: BLE001 - gone already
        pass


@pytest.fixture(scope="module")
def server(cluster, registry_url):
    console = ConsoleServer(cluster, "127.0.0.1", 0, sample_interval_s=0.5).start()
    yield console
    console.stop()


def register(url: str, subject: str, schema: dict) -> int:
    answer = httpx.post(f"{url}/subjects/{subject}/versions", json={"schema": json.dumps(schema)}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def test_the_api_lists_subjects_versions_and_levels(registry_url, server):
    subject = f"console-{int(time.time() * 1000)}-value"
    first = register(registry_url, subject, {"type": "record", "name": "A", "fields": []})
    second = register(
        registry_url, subject, {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int", "default": 0}]}
    )
    data = httpx.get(f"{server.url}/api/schemas", timeout=30).json()
    assert data["url"] == registry_url
    row = next(s for s in data["subjects"] if s["subject"] == subject)
    assert row["versions"] == [1, 2] and row["latest_id"] == second > first
    assert row["schema_type"] == "AVRO" and row["compatibility"] == "BACKWARD"


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")
def test_the_schemas_page_in_a_real_browser(registry_url, server, tmp_path):
    from playwright.sync_api import sync_playwright

    subject = f"browser-{int(time.time() * 1000)}-value"
    schema_id = register(registry_url, subject, {"type": "enum", "name": "Color", "symbols": ["RED"]})
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{server.url}/schemas")
            row = page.locator("#subjects-table tr", has_text=subject)
            row.wait_for(timeout=30000)
            cells = row.locator("td").all_inner_texts()
            assert cells[0] == subject and cells[1] == "1" and cells[3] == str(schema_id) and cells[4] == "AVRO"
            assert "Schema registry at " + registry_url in page.locator("#registry-url").inner_text()
            assert page.locator("header nav a.active").inner_text() == "Schemas"
            page.screenshot(path=str(tmp_path / "console-schemas.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
