"""Iceberg topics' broker keys (``rayqueue.iceberg.*``: the catalog, the warehouse, the
namespace, a translation step's size), in the broker configuration's table (``actors.config``);
what they mean is the translation's (``actors.iceberg.config``). Here, below the packages, so
that the configuration imports no package."""

from __future__ import annotations

from storage.config import ConfigKey

CATALOG_TYPE = "rayqueue.iceberg.catalog.type"
CATALOG_NAME = "rayqueue.iceberg.catalog.name"
CATALOG_URI = "rayqueue.iceberg.catalog.uri"
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
        "Iceberg topics' catalog: sql (pyiceberg's SQL catalog; SQLite by default).",
        choices=("sql",),
    ),
    ConfigKey(CATALOG_NAME, "string", "rayqueue", "The Iceberg catalog's name (readers open it by this name)."),
    ConfigKey(
        CATALOG_URI,
        "string",
        "",
        "The SQL catalog's SQLAlchemy URL; empty: sqlite:///<log.dirs>/iceberg/catalog.db.",
    ),
    ConfigKey(
        WAREHOUSE,
        "string",
        "",
        "Where Iceberg topics' data and metadata files go: a directory, file:///path or s3://bucket/prefix; "
        "empty: <log.dirs>/iceberg/warehouse.",
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
