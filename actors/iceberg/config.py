"""Iceberg topics' settings: the topic keys (in the style of Redpanda's ``redpanda.iceberg.*``),
the broker keys naming the catalog and warehouse, and the partition spec's syntax.

Topic keys (``storage.config.LOG_CONFIG`` defines them with the other topic configs):
``rayqueue.iceberg.mode`` (disabled, key_value, value_schema_id_prefix),
``rayqueue.iceberg.target.lag.ms``, ``rayqueue.iceberg.invalid.record.action`` (dlq_table,
drop) and ``rayqueue.iceberg.partition.spec`` (``(hour(rayqueue.timestamp))``).

Broker keys (``actors.iceberg_keys``, in ``actors.config``'s table): the catalog (pyiceberg's SQL
catalog, by default SQLite under ``<log.dirs>/iceberg/``; or an Iceberg REST catalog server,
with its credential or token), the warehouse (a directory under ``<log.dirs>/iceberg/`` by
default, or ``s3://bucket/prefix`` with the ``s3.*`` keys; for a REST catalog the server's
unless named), the namespace the tables live in, and how much a translation takes at most per
commit. The controller hands them to the leaders with the replication settings.

Nothing here imports pyiceberg: the controller checks topic configs with this module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.iceberg_keys import (
    CATALOG_CREDENTIAL,
    CATALOG_NAME,
    CATALOG_OAUTH2_SERVER_URI,
    CATALOG_REQUEST_TIMEOUT,
    CATALOG_TOKEN,
    CATALOG_TYPE,
    CATALOG_URI,
    FLUSH_BYTES,
    NAMESPACE,
    S3_ACCESS_KEY_ID,
    S3_ENDPOINT,
    S3_REGION,
    S3_SECRET_ACCESS_KEY,
    WAREHOUSE,
)
from storage.errors import InvalidConfigError

MODE = "rayqueue.iceberg.mode"
TARGET_LAG = "rayqueue.iceberg.target.lag.ms"
INVALID_RECORD_ACTION = "rayqueue.iceberg.invalid.record.action"
PARTITION_SPEC = "rayqueue.iceberg.partition.spec"

DISABLED = "disabled"
KEY_VALUE = "key_value"
VALUE_SCHEMA_ID_PREFIX = "value_schema_id_prefix"
MODES = (DISABLED, KEY_VALUE, VALUE_SCHEMA_ID_PREFIX)
DLQ_TABLE = "dlq_table"
DROP = "drop"

# The table's partitioning unless a topic says otherwise: by hour of the record timestamp,
# as Redpanda's default ``(hour(redpanda.timestamp))``.
DEFAULT_PARTITION_SPEC = "(hour(rayqueue.timestamp))"

# Kafka's topic names are [a-zA-Z0-9._-]; "~" never is, so "<topic>~dlq" names no topic's table.
DLQ_SUFFIX = "~dlq"

SQL = "sql"
REST = "rest"


@dataclass(frozen=True, slots=True)
class IcebergSettings:
    """Where Iceberg topics' tables live: the catalog, the warehouse and the namespace.
    ``catalog_type`` is ``sql`` (pyiceberg's SQL catalog at the SQLAlchemy URL ``catalog_uri``)
    or ``rest`` (an Iceberg REST catalog server at the base URL ``catalog_uri``, with an OAuth2
    ``credential`` or a bearer ``token``; ``warehouse`` empty: the server's)."""

    catalog_name: str
    catalog_uri: str
    warehouse: str
    namespace: str
    s3_endpoint: str = ""
    s3_region: str = "us-east-1"
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""
    flush_bytes: int = 64 * 1024 * 1024
    catalog_type: str = SQL
    credential: str = ""
    token: str = ""
    oauth2_server_uri: str = ""
    request_timeout_ms: int = 30000

    def catalog_properties(self) -> dict[str, str]:
        """pyiceberg's properties for its catalog (``SqlCatalog(name, **properties)``,
        ``RestCatalog(name, **properties)``, ``load_catalog(name, **properties)``)."""
        props = {"type": self.catalog_type, "uri": self.catalog_uri}
        if self.warehouse:
            props["warehouse"] = self.warehouse
        if self.catalog_type == REST:
            if self.credential:
                props["credential"] = self.credential
            if self.token:
                props["token"] = self.token
            if self.oauth2_server_uri:
                props["oauth2-server-uri"] = self.oauth2_server_uri
        if self.s3_endpoint:
            props["s3.endpoint"] = self.s3_endpoint
        if self.warehouse.startswith(("s3://", "s3a://")) or (self.catalog_type == REST and self.s3_endpoint):
            props["s3.region"] = self.s3_region
            if self.s3_access_key_id:
                props["s3.access-key-id"] = self.s3_access_key_id
                props["s3.secret-access-key"] = self.s3_secret_access_key
        return props


def iceberg_settings(config: Mapping[str, Any]) -> IcebergSettings:
    """The settings a broker configuration (or the part of it the controller hands the
    leaders) names, defaults resolved under ``log.dirs``."""
    root = Path(str(config.get("log.dirs") or "/tmp/rayqueue-logs")).absolute() / "iceberg"
    catalog_type = str(config.get(CATALOG_TYPE) or SQL)
    warehouse = str(config.get(WAREHOUSE) or "")
    if catalog_type == REST:
        # The server names the tables' locations; a warehouse, if given, is what it is asked
        # for (a location or, for some servers, a name): passed on as written.
        uri = str(config.get(CATALOG_URI) or "")
    else:
        uri = str(config.get(CATALOG_URI) or "") or f"sqlite:///{root / 'catalog.db'}"
        warehouse = warehouse or (root / "warehouse").as_uri()
        if "://" not in warehouse:
            warehouse = Path(warehouse).absolute().as_uri()
    return IcebergSettings(
        catalog_name=str(config.get(CATALOG_NAME) or "rayqueue"),
        catalog_uri=uri,
        warehouse=warehouse,
        namespace=str(config.get(NAMESPACE) or "rayqueue"),
        s3_endpoint=str(config.get(S3_ENDPOINT) or ""),
        s3_region=str(config.get(S3_REGION) or "us-east-1"),
        s3_access_key_id=str(config.get(S3_ACCESS_KEY_ID) or ""),
        s3_secret_access_key=str(config.get(S3_SECRET_ACCESS_KEY) or ""),
        flush_bytes=int(config.get(FLUSH_BYTES) or 64 * 1024 * 1024),
        catalog_type=catalog_type,
        credential=str(config.get(CATALOG_CREDENTIAL) or ""),
        token=str(config.get(CATALOG_TOKEN) or ""),
        oauth2_server_uri=str(config.get(CATALOG_OAUTH2_SERVER_URI) or ""),
        request_timeout_ms=int(config.get(CATALOG_REQUEST_TIMEOUT) or 30000),
    )


# -- the partition spec ----------------------------------------------------------------------

TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate", "void")
_WITH_WIDTH = ("bucket", "truncate")
_PATH = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_TERM = re.compile(
    rf"^\s*(?:(?P<column>{_PATH})|(?P<fn>[a-z]+)\s*\(\s*(?:(?P<width>\d{{1,9}})\s*,\s*)?(?P<arg>{_PATH})\s*\))\s*$"
)
MAX_PARTITION_FIELDS = 16


@dataclass(frozen=True, slots=True)
class PartitionTerm:
    """One field of a partition spec: a transform of a column (a dotted path)."""

    transform: str
    column: str
    width: int | None = None


def parse_partition_spec(text: str) -> tuple[PartitionTerm, ...]:
    """``(hour(rayqueue.timestamp), bucket(16, rayqueue.partition), rayqueue.topic)`` as terms;
    ``()`` (or empty) is unpartitioned. InvalidConfigError for anything else."""
    spec = text.strip()
    if not spec:
        return ()
    if not (spec.startswith("(") and spec.endswith(")")):
        raise InvalidConfigError(f"{PARTITION_SPEC}={text!r:.200}: a spec is written in parentheses, e.g. (hour(col))")
    body = spec[1:-1].strip()
    if not body:
        return ()
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise InvalidConfigError(f"{PARTITION_SPEC}={text!r:.200}: unbalanced parentheses")
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    if depth != 0:
        raise InvalidConfigError(f"{PARTITION_SPEC}={text!r:.200}: unbalanced parentheses")
    if len(parts) > MAX_PARTITION_FIELDS:
        raise InvalidConfigError(f"{PARTITION_SPEC}: at most {MAX_PARTITION_FIELDS} partition fields")
    terms = []
    for part in parts:
        m = _TERM.match(part)
        if m is None:
            raise InvalidConfigError(f"{PARTITION_SPEC}: cannot read {part.strip()!r:.100} (e.g. hour(col), col)")
        if m["column"]:
            terms.append(PartitionTerm("identity", m["column"]))
            continue
        fn, width = m["fn"], m["width"]
        if fn not in TRANSFORMS:
            raise InvalidConfigError(f"{PARTITION_SPEC}: unknown transform {fn!r}; one of {', '.join(TRANSFORMS)}")
        if (fn in _WITH_WIDTH) != (width is not None):
            form = f"{fn}(N, col)" if fn in _WITH_WIDTH else f"{fn}(col)"
            raise InvalidConfigError(f"{PARTITION_SPEC}: {fn} is written {form}")
        if width is not None and int(width) < 1:
            raise InvalidConfigError(f"{PARTITION_SPEC}: {fn}'s width must be at least 1")
        terms.append(PartitionTerm(fn, m["arg"], int(width) if width is not None else None))
    if len({(t.transform, t.column) for t in terms}) != len(terms):
        raise InvalidConfigError(f"{PARTITION_SPEC}: a transform of a column is named twice")
    return tuple(terms)


def check_topic_config(config: Mapping[str, Any]) -> None:
    """The Iceberg rules on a topic's effective config that no single key's type checks: the
    partition spec's syntax (its columns are checked against the table's when it is made)."""
    spec = config.get(PARTITION_SPEC)
    if spec is not None:
        parse_partition_spec(str(spec))


def table_name(topic: str) -> str:
    """The table a topic's records go to (in the settings' namespace): the topic's name with
    ``.`` as ``_``, since readers split identifiers at dots (Kafka already refuses two topics
    that differ only there, as their metric names would collide)."""
    return topic.replace(".", "_")


def dlq_table_name(topic: str) -> str:
    """The dead-letter table of a topic's records the mode could not type (Redpanda's name)."""
    return table_name(topic) + DLQ_SUFFIX
