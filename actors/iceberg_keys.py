"""Iceberg topics' broker keys (``rayqueue.iceberg.*``: the catalog, the warehouse, the
namespace, a translation step's size), in the broker configuration's table (``actors.config``);
what they mean is the translation's (``actors.iceberg.config``). Here, below the packages, so
that the configuration imports no package."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from storage.config import ConfigKey
from storage.errors import InvalidConfigError

CATALOG_TYPE = "rayqueue.iceberg.catalog.type"
CATALOG_NAME = "rayqueue.iceberg.catalog.name"
CATALOG_URI = "rayqueue.iceberg.catalog.uri"
CATALOG_CREDENTIAL = "rayqueue.iceberg.catalog.credential"
CATALOG_TOKEN = "rayqueue.iceberg.catalog.token"
CATALOG_OAUTH2_SERVER_URI = "rayqueue.iceberg.catalog.oauth2.server.uri"
CATALOG_REQUEST_TIMEOUT = "rayqueue.iceberg.catalog.request.timeout.ms"
WAREHOUSE = "rayqueue.iceberg.warehouse"
NAMESPACE = "rayqueue.iceberg.namespace"
S3_ENDPOINT = "rayqueue.iceberg.s3.endpoint"
S3_REGION = "rayqueue.iceberg.s3.region"
S3_ACCESS_KEY_ID = "rayqueue.iceberg.s3.access.key.id"
S3_SECRET_ACCESS_KEY = "rayqueue.iceberg.s3.secret.access.key"
FLUSH_BYTES = "rayqueue.iceberg.translation.max.bytes"

BROKER_KEYS = (
    ConfigKey(
        CATALOG_TYPE,
        "string",
        "sql",
        "Iceberg topics' catalog: sql (pyiceberg's SQL catalog; SQLite by default) or rest (an Iceberg REST "
        "catalog server at rayqueue.iceberg.catalog.uri).",
        choices=("sql", "rest"),
    ),
    ConfigKey(CATALOG_NAME, "string", "rayqueue", "The Iceberg catalog's name (readers open it by this name)."),
    ConfigKey(
        CATALOG_URI,
        "string",
        "",
        "sql: the catalog's SQLAlchemy URL (empty: sqlite:///<log.dirs>/iceberg/catalog.db); rest: the REST "
        "catalog's base URL, http(s)://host:port[/path] (required).",
    ),
    ConfigKey(
        CATALOG_CREDENTIAL,
        "password",
        "",
        "rest: OAuth2 client credentials, <client id>:<client secret>, exchanged for a token at the catalog's "
        "token endpoint (empty: none).",
    ),
    ConfigKey(CATALOG_TOKEN, "password", "", "rest: a bearer token sent with every request (empty: none)."),
    ConfigKey(
        CATALOG_OAUTH2_SERVER_URI,
        "string",
        "",
        "rest: the OAuth2 token endpoint the credential is exchanged at (empty: the catalog's own, "
        "<uri>/v1/oauth/tokens).",
    ),
    ConfigKey(
        CATALOG_REQUEST_TIMEOUT,
        "int",
        30000,
        "rest: how long one request to the catalog may take (connecting, and each wait for its answer) before "
        "the translation step fails and is tried again later.",
        min=1,
    ),
    ConfigKey(
        WAREHOUSE,
        "string",
        "",
        "Where Iceberg topics' data and metadata files go: a directory, file:///path or s3://bucket/prefix; "
        "empty: <log.dirs>/iceberg/warehouse. rest: the warehouse the catalog is asked for (a location or a "
        "name, as the server takes it); empty: the server's own.",
    ),
    ConfigKey(NAMESPACE, "string", "rayqueue", "The Iceberg namespace holding the topics' tables."),
    ConfigKey(S3_ENDPOINT, "string", "", "An S3-compatible warehouse's endpoint URL (empty: AWS's)."),
    ConfigKey(S3_REGION, "string", "us-east-1", "The S3 warehouse's region."),
    ConfigKey(S3_ACCESS_KEY_ID, "string", "", "The S3 warehouse's access key id (empty: the environment's)."),
    ConfigKey(S3_SECRET_ACCESS_KEY, "password", "", "The S3 warehouse's secret access key."),
    ConfigKey(
        FLUSH_BYTES,
        "int",
        64 * 1024 * 1024,
        "The most record bytes one translation (one Iceberg commit per table) takes; a partition with this "
        "much untranslated is translated at once, before its target lag.",
        min=1024,
    ),
)

# What the controller hands the leaders (with the replication settings): the keys above and
# the data root their defaults live under.
ICEBERG_BROKER_KEYS = ("log.dirs", *(key.name for key in BROKER_KEYS))


def check_iceberg_config(config: Mapping[str, Any]) -> None:
    """The rules between the Iceberg broker keys that no single key's type checks
    (InvalidConfigError, so a misconfigured cluster does not start): a REST catalog needs an
    http(s) URL with a host."""
    if config.get(CATALOG_TYPE) != "rest":
        return
    uri = str(config.get(CATALOG_URI) or "")
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InvalidConfigError(
            f"{CATALOG_URI}={uri!r}: {CATALOG_TYPE}=rest needs the REST catalog's base URL, http(s)://host:port[/path]"
        )
