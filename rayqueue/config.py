"""Client configuration: Kafka's producer and consumer keys, defaults and checks."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from storage.config import INT_MAX, Config, ConfigDef, ConfigKey
from storage.errors import InvalidConfigError

logger = logging.getLogger(__name__)

_METRICS_KEYS = [
    ConfigKey(
        "metric.reporters",
        "list",
        None,
        "Where the client's metrics go besides metrics(): ray (ray.util.metrics), or none ([]); "
        "by default ray when the cluster's rayqueue.metrics.enabled is on.",
        choices=("ray",),
        nullable=True,
    ),
    ConfigKey("metrics.sample.window.ms", "long", 30000, "Window of the metrics' rates, averages and maxima.", min=1),
    ConfigKey("metrics.num.samples", "int", 2, "Windows kept for the metrics' rates, averages and maxima.", min=1),
]

PRODUCER_CONFIG = ConfigDef(
    "producer",
    [
        ConfigKey("client.id", "string", "rayqueue-producer", "Name used in logs."),
        ConfigKey(
            "acks",
            "string",
            "all",
            "0, 1, or all (-1): replicas that must have a batch.",
            choices=("0", "1", "all", "-1"),
        ),
        ConfigKey("batch.size", "int", 16384, "Target bytes per partition batch.", min=0),
        ConfigKey("linger.ms", "long", 5, "Wait this long for a batch to fill before sending.", min=0),
        ConfigKey(
            "compression.type",
            "string",
            "none",
            "Codec for batches.",
            choices=("none", "gzip", "snappy", "lz4", "zstd"),
        ),
        ConfigKey("buffer.memory", "long", 32 * 1024 * 1024, "Bytes of records waiting to be sent.", min=0),
        ConfigKey("max.block.ms", "long", 60000, "How long send() blocks when the buffer is full.", min=0),
        ConfigKey("max.request.size", "int", 1048576, "Largest batch (request) sent.", min=0),
        ConfigKey("retries", "int", INT_MAX, "Retries of retriable errors, within delivery.timeout.ms.", min=0),
        ConfigKey("retry.backoff.ms", "long", 100, "Pause before a retry.", min=0),
        ConfigKey("delivery.timeout.ms", "int", 120000, "Upper bound from send() to success or failure.", min=0),
        ConfigKey("request.timeout.ms", "int", 30000, "How long to wait for one produce call.", min=0),
        ConfigKey("max.in.flight.requests.per.connection", "int", 5, "Unacknowledged batches per partition.", min=1),
        ConfigKey("metadata.max.age.ms", "long", 300000, "Refresh metadata at least this often.", min=0),
        ConfigKey(
            "partitioner", "any", None, "callable(topic, key_bytes, num_partitions) -> partition.", nullable=True
        ),
        ConfigKey("partitioner.ignore.keys", "boolean", False, "Use sticky partitioning even for keyed records."),
        ConfigKey("key.serializer", "any", None, "callable(value) -> bytes for keys.", nullable=True),
        ConfigKey("value.serializer", "any", None, "callable(value) -> bytes for values.", nullable=True),
        ConfigKey(
            "enable.idempotence",
            "boolean",
            True,
            "Producer id and per-partition sequences: retries never duplicate nor reorder (needs acks=all).",
        ),
        ConfigKey(
            "transactional.id",
            "string",
            None,
            "Id of a transactional producer (fences older instances).",
            nullable=True,
        ),
        ConfigKey(
            "transaction.timeout.ms", "int", 60000, "The coordinator aborts a transaction open this long.", min=1
        ),
        *_METRICS_KEYS,
    ],
)

# Kafka's MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION_FOR_IDEMPOTENCE: the broker remembers the
# last five batches of each producer, so at most five may be unacknowledged per partition.
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5


def producer_config(values: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
    """Parse a producer configuration and settle ``enable.idempotence`` as Kafka 3.x does.

    ``delivery.timeout.ms`` must be at least ``linger.ms + request.timeout.ms`` (an error
    when given, raised to that when defaulted, as Kafka's producer does).

    Idempotence needs acks=all, retries > 0 and max.in.flight.requests.per.connection <= 5.
    When the user asked for it (``enable.idempotence=true`` or a ``transactional.id``) a
    conflicting key is an InvalidConfigError naming both; when it is only the default, the
    conflict turns idempotence off. A transactional.id without idempotence is an error.
    """
    cfg = PRODUCER_CONFIG.parse(values, **kwargs)
    given = {PRODUCER_CONFIG.canonical(key) for key in {**(values or {}), **kwargs}}
    floor = cfg["linger.ms"] + cfg["request.timeout.ms"]
    if cfg["delivery.timeout.ms"] < floor:
        # Kafka's rule: refused when the user set it, raised to the floor when defaulted.
        if "delivery.timeout.ms" in given:
            raise InvalidConfigError(
                f"delivery.timeout.ms={cfg['delivery.timeout.ms']} should be equal to or larger than "
                f"linger.ms + request.timeout.ms = {floor}"
            )
        cfg = cfg.with_overrides({"delivery.timeout.ms": floor})
    transactional = cfg["transactional.id"] is not None
    if not cfg["enable.idempotence"]:
        if transactional:
            raise InvalidConfigError("transactional.id needs enable.idempotence=true (it is set to false)")
        return cfg
    conflicts = []
    if cfg["acks"] not in ("all", "-1"):
        conflicts.append(f"acks={cfg['acks']} (must be all)")
    if cfg["retries"] == 0:
        conflicts.append("retries=0 (must be > 0)")
    if cfg["max.in.flight.requests.per.connection"] > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
        conflicts.append(
            f"max.in.flight.requests.per.connection={cfg['max.in.flight.requests.per.connection']} "
            f"(must be <= {MAX_IN_FLIGHT_FOR_IDEMPOTENCE})"
        )
    if not conflicts:
        return cfg
    if "enable.idempotence" in given or transactional:
        asked = "enable.idempotence=true" if "enable.idempotence" in given else "transactional.id is set"
        raise InvalidConfigError(f"{asked}, which conflicts with {', '.join(conflicts)}")
    logger.info("idempotence disabled because of %s", ", ".join(conflicts))
    return cfg.with_overrides({"enable.idempotence": False})


CONSUMER_CONFIG = ConfigDef(
    "consumer",
    [
        ConfigKey("client.id", "string", "rayqueue-consumer", "Name used in logs."),
        ConfigKey("group.id", "string", None, "Consumer group; None for assign-only use.", nullable=True),
        ConfigKey("group.instance.id", "string", None, "Static membership id.", nullable=True),
        ConfigKey(
            "group.protocol",
            "string",
            "classic",
            "classic (JoinGroup/SyncGroup) or consumer (KIP-848: the coordinator assigns, members reconcile).",
            choices=("classic", "consumer"),
        ),
        ConfigKey(
            "group.remote.assignor",
            "string",
            None,
            "group.protocol=consumer: the server-side assignor to ask for (uniform, range); None: the group's default.",
            nullable=True,
        ),
        ConfigKey(
            "auto.offset.reset",
            "string",
            "latest",
            "Where to start without a valid offset.",
            choices=("earliest", "latest", "none"),
        ),
        ConfigKey("enable.auto.commit", "boolean", True, "Commit positions every auto.commit.interval.ms."),
        ConfigKey("auto.commit.interval.ms", "int", 5000, "Auto-commit period.", min=0),
        ConfigKey("max.poll.records", "int", 500, "Most records one poll() returns.", min=1),
        ConfigKey("fetch.min.bytes", "int", 1, "A fetch waits for at least this many bytes.", min=0),
        ConfigKey("fetch.max.wait.ms", "int", 500, "Longest a fetch waits for fetch.min.bytes.", min=0),
        ConfigKey("max.partition.fetch.bytes", "int", 1048576, "Bytes per partition per fetch.", min=0),
        ConfigKey("fetch.max.bytes", "int", 52428800, "Bytes per fetch round over all partitions.", min=0),
        ConfigKey(
            "isolation.level",
            "string",
            "read_uncommitted",
            "read_committed hides aborted transactions.",
            choices=("read_uncommitted", "read_committed"),
        ),
        ConfigKey("session.timeout.ms", "int", 45000, "Member expiry without heartbeats.", min=1),
        ConfigKey("heartbeat.interval.ms", "int", 3000, "Heartbeat period.", min=1),
        ConfigKey("max.poll.interval.ms", "int", 300000, "Longest gap between polls before leaving.", min=1),
        ConfigKey(
            "partition.assignment.strategy",
            "any",
            ("range", "cooperative-sticky"),
            "Assignors in order of preference: names (range, roundrobin, sticky, cooperative-sticky), "
            "a comma-separated string of them, or assignor objects (name, assign(...)).",
        ),
        ConfigKey("request.timeout.ms", "int", 30000, "How long to wait for one call.", min=0),
        ConfigKey("default.api.timeout.ms", "int", 60000, "Timeout of blocking calls without one.", min=0),
        ConfigKey("retry.backoff.ms", "long", 100, "Pause before a retry.", min=0),
        ConfigKey("check.crcs", "boolean", True, "Verify batch CRCs on fetch."),
        ConfigKey("metadata.max.age.ms", "long", 300000, "Refresh metadata at least this often.", min=0),
        ConfigKey("exclude.internal.topics", "boolean", True, "Regex subscriptions skip internal topics."),
        ConfigKey("key.deserializer", "any", None, "callable(bytes) -> key.", nullable=True),
        ConfigKey("value.deserializer", "any", None, "callable(bytes) -> value.", nullable=True),
        *_METRICS_KEYS,
    ],
)

__all__ = ["CONSUMER_CONFIG", "MAX_IN_FLIGHT_FOR_IDEMPOTENCE", "PRODUCER_CONFIG", "producer_config"]
