"""The REST catalog settings and client without a catalog server: the broker keys a REST
catalog takes (checked when the cluster's configuration is built), the pyiceberg properties
they become, and the client's answer to a URL where nothing listens, a server that never
answers and one that answers but is no Iceberg REST catalog. (Against Iceberg's own REST
catalog server: tests/rayqueue/test_iceberg_rest.py.)"""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from actors.config import broker_config
from actors.iceberg.config import iceberg_settings
from actors.iceberg.rest import CatalogUnavailableError, CatalogUnreachableError, open_rest_catalog
from storage.errors import InvalidConfigError


def rest(uri: str, **more: object) -> dict:
    return {"rayqueue.iceberg.catalog.type": "rest", "rayqueue.iceberg.catalog.uri": uri, **more}


@pytest.mark.parametrize("uri", ["", "localhost:8181", "ftp://host/x", "http://", "sqlite:///tmp/c.db"])
def test_a_rest_catalog_needs_an_http_url(uri: str) -> None:
    with pytest.raises(InvalidConfigError, match="rayqueue.iceberg.catalog.uri"):
        broker_config(rest(uri))


def test_a_rest_catalogs_properties_are_pyicebergs() -> None:
    config = broker_config(
        rest(
            "https://catalog.example:8181/api",
            **{
                "rayqueue.iceberg.catalog.credential": "id:secret",
                "rayqueue.iceberg.catalog.oauth2.server.uri": "https://idp.example/token",
                "rayqueue.iceberg.s3.endpoint": "http://s3.example:9000",
                "rayqueue.iceberg.s3.access.key.id": "k",
                "rayqueue.iceberg.s3.secret.access.key": "s",
            },
        )
    )
    props = iceberg_settings(config).catalog_properties()
    assert props == {
        "type": "rest",
        "uri": "https://catalog.example:8181/api",
        "credential": "id:secret",
        "oauth2-server-uri": "https://idp.example/token",
        "s3.endpoint": "http://s3.example:9000",
        "s3.region": "us-east-1",
        "s3.access-key-id": "k",
        "s3.secret-access-key": "s",
    }  # no warehouse: the server's own
    token = iceberg_settings(broker_config(rest("http://h:1", **{"rayqueue.iceberg.catalog.token": "t"})))
    assert token.catalog_properties() == {"type": "rest", "uri": "http://h:1", "token": "t"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def settings(uri: str, timeout_ms: int = 500):
    return iceberg_settings(broker_config(rest(uri, **{"rayqueue.iceberg.catalog.request.timeout.ms": timeout_ms})))


def test_nothing_listening_is_unreachable_named_by_its_url() -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(CatalogUnreachableError, match=f"catalog at {uri} did not answer GET /v1/config"):
        open_rest_catalog(settings(uri))


def test_a_catalog_that_never_answers_times_out() -> None:
    # A server that accepts the connection and never says a word: the request gives up after
    # the request timeout instead of holding the translation's thread for ever.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(CatalogUnreachableError, match="no answer within 0.5 s"):
            open_rest_catalog(settings(uri, 500))
        assert time.monotonic() - started < 30  # bounded (the timeout, not for ever); not a speed claim


class _NotACatalog(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b"<html>not here</html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_server_that_is_no_catalog_is_unavailable() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotACatalog)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(CatalogUnavailableError, match=f"cannot open the Iceberg REST catalog at {uri}"):
            open_rest_catalog(settings(uri))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
