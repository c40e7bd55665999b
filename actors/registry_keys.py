"""The schema registry's configuration keys (Confluent's names under ``schema.registry.``), in
the broker configuration's table (``actors.config``); what they mean is the registry's
(``actors.schema_registry.config``). Here, below the packages, so that the configuration
imports no package."""

from __future__ import annotations

from storage.config import ConfigKey

DEFAULT_TOPIC = "_schemas"

REGISTRY_KEYS = (
    ConfigKey(
        "schema.registry.listeners",
        "list",
        (),
        "Where the schema registry serves Confluent's REST API, e.g. http://127.0.0.1:8081 (https:// with the"
        " ssl.keystore.* keys; port 0: a free port); empty: no registry.",
    ),
    ConfigKey("schema.registry.kafkastore.topic", "string", DEFAULT_TOPIC, "The compacted topic the registry keeps."),
    ConfigKey(
        "schema.registry.kafkastore.topic.replication.factor",
        "int",
        3,
        "Replication factor of the registry's topic (capped at the broker count).",
        min=1,
    ),
    ConfigKey(
        "schema.registry.schema.compatibility.level",
        "string",
        "backward",
        "The default compatibility level: none, backward, forward, full and their _transitive forms.",
    ),
    ConfigKey(
        "schema.registry.authentication.method",
        "string",
        "",
        "BASIC (HTTP basic auth against the SCRAM users), NONE, or empty: BASIC when the cluster has authentication.",
        choices=("", "NONE", "BASIC"),
    ),
    ConfigKey(
        "rayqueue.schema.registry.max.request.bytes",
        "int",
        16 * 1024 * 1024,
        "The largest request body the schema registry reads (413 beyond).",
        min=1024,
    ),
)
