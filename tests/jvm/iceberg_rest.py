"""Iceberg's own REST catalog server for the tests: ``org.apache.iceberg.rest.RESTCatalogServer``
(the server the ``apache/iceberg-rest-fixture`` image runs), from the pinned ``iceberg-rest``
set (``pins.toml``), in a JVM of its own.

It serves Iceberg's REST catalog protocol (``RESTCatalogAdapter`` over Iceberg's servlet, in
Jetty) in front of Iceberg's JDBC catalog, here on a SQLite file, and writes the tables'
metadata into the warehouse: a local directory, or an S3 bucket (``s3=``: an S3-compatible
endpoint, written with Iceberg's ``S3FileIO``, path-style as moto's server wants) that
pyiceberg (the brokers' writer and the readers) and Spark reach as well. It takes its settings
from ``CATALOG_*`` environment variables (``CATALOG_REST_PORT`` -> ``rest.port``,
``CATALOG_URI`` -> ``uri``, ``CATALOG_IO__IMPL`` -> ``io-impl``, ...). Its token
endpoint (``/v1/oauth/tokens``) answers OAuth2 client credentials with a token naming the
client, which lets the tests see a credential exchanged; it checks no token.

The port is a free one picked here (the server takes a port, not 0); a restart keeps it, the
catalog file and the warehouse, so clients configured with its URL find the same tables.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import wait_for
from tests.jvm.service import JavaService

MAIN = "org.apache.iceberg.rest.RESTCatalogServer"


def free_port() -> int:
    """A port nothing listens on now, on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class S3Warehouse:
    """An S3-compatible warehouse: the endpoint, a static key pair, the bucket and prefix."""

    endpoint: str
    bucket: str
    prefix: str = "rest"
    access_key_id: str = "test"
    secret_access_key: str = "test"
    region: str = "us-east-1"

    @property
    def location(self) -> str:
        """``s3://bucket/prefix``."""
        return f"s3://{self.bucket}/{self.prefix}"


class IcebergRestServer:
    """One RESTCatalogServer JVM with its catalog file under ``root``; its warehouse a
    directory under ``root``, or ``s3``'s bucket."""

    def __init__(self, classpath: str, root: Path, port: int | None = None, s3: S3Warehouse | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.s3 = s3
        self.port = port or free_port()
        env = {
            "CATALOG_REST_PORT": str(self.port),
            "CATALOG_URI": f"jdbc:sqlite:{self.root / 'catalog.db'}",
            "CATALOG_CATALOG_NAME": "rayqueue_rest",
            # One JDBC connection: SQLite takes one writer at a time, and two pooled connections
            # committing at once fail with SQLITE_BUSY (the loser can keep the file locked).
            "CATALOG_CLIENTS": "1",
        }
        if s3 is None:
            local = self.root / "warehouse"
            local.mkdir(parents=True, exist_ok=True)
            self.warehouse = local.as_uri()
        else:
            self.warehouse = s3.location
            env |= {
                "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
                "CATALOG_S3_ENDPOINT": s3.endpoint,
                "CATALOG_S3_PATH__STYLE__ACCESS": "true",
                "CATALOG_S3_ACCESS__KEY__ID": s3.access_key_id,
                "CATALOG_S3_SECRET__ACCESS__KEY": s3.secret_access_key,
                "CATALOG_CLIENT_REGION": s3.region,
                "AWS_REGION": s3.region,  # the SDK's own lookup, before the catalog's property
            }
        env["CATALOG_WAREHOUSE"] = self.warehouse
        self.service = JavaService(classpath, MAIN, [], self.root / "rest-catalog.log", env)

    @property
    def uri(self) -> str:
        """The catalog's base URL (what ``rayqueue.iceberg.catalog.uri`` names)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> IcebergRestServer:
        """Start the JVM and wait until the catalog answers ``GET /v1/config``."""
        self.service.start()
        try:
            wait_for(lambda: self.answers() or not self.service.alive, timeout=timeout, interval=0.3)
        except AssertionError:
            raise AssertionError(f"{MAIN} did not answer within {timeout}s:\n{self.service.tail()}") from None
        if not self.answers():
            raise AssertionError(f"{MAIN} exited ({self.service.process.returncode}):\n{self.service.tail()}")
        return self

    def answers(self) -> bool:
        """Whether the catalog answers its config endpoint now."""
        try:
            with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=5) as response:
                return "endpoints" in json.loads(response.read())
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def kill(self) -> None:
        """SIGKILL: the catalog stops at once, mid-request if one is being served."""
        self.service.kill()

    def stop(self) -> None:
        """Stop the JVM (SIGTERM, SIGKILL if it lingers)."""
        self.service.stop(30)

    def tables(self, namespace: str) -> list[str]:
        """The table names the catalog lists in ``namespace`` (its own answer, over HTTP)."""
        with urllib.request.urlopen(f"{self.uri}/v1/namespaces/{namespace}/tables", timeout=10) as response:
            return sorted(t["name"] for t in json.loads(response.read())["identifiers"])
