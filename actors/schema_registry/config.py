"""The schema registry's configuration keys (Confluent's names under ``schema.registry.``) and
its listeners (no Ray here; the broker configuration lists these keys).

``schema.registry.listeners`` are ``http://host:port`` or ``https://host:port`` (Confluent's
``listeners``); empty: no registry. HTTPS takes the listeners' PEM keys (``ssl.keystore.*``).
``schema.registry.authentication.method`` is Confluent's ``authentication.method``: BASIC
(HTTP basic auth against the cluster's SCRAM users), NONE, or empty for "as the cluster":
BASIC when it has authentication (an authorizer, or a SASL listener), else NONE.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# Re-exported: the broker configuration lists the keys (actors.registry_keys, below the packages).
from actors.registry_keys import DEFAULT_TOPIC as DEFAULT_TOPIC
from actors.registry_keys import REGISTRY_KEYS as REGISTRY_KEYS
from actors.schema_registry.model import Compatibility
from storage.errors import InvalidConfigError


@dataclass(frozen=True, slots=True)
class RegistryListener:
    """One ``http(s)://host:port`` listener."""

    tls: bool
    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        """The listener's URL (with the port it took, for port 0)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port if port is None else port}"


def parse_registry_listeners(values: Sequence[str] | str) -> list[RegistryListener]:
    """``schema.registry.listeners`` as listeners; InvalidConfigError for a bad one."""
    items = [values] if isinstance(values, str) else list(values)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        parts = urlsplit(item)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname or port is None:
            raise InvalidConfigError(f"schema.registry.listeners: {item!r} is not http(s)://host:port")
        out.append(RegistryListener(parts.scheme.lower() == "https", parts.hostname, port))
    return out


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    """The registry's settings read from a broker configuration."""

    listeners: tuple[RegistryListener, ...]
    topic: str
    replication_factor: int
    compatibility: Compatibility
    basic_auth: bool
    max_request_bytes: int


def registry_settings(config: Mapping[str, Any], cluster_authentication: bool) -> RegistrySettings:
    """The settings of ``config``; ``cluster_authentication``: whether the cluster has an
    authorizer or a SASL listener (what an empty authentication method follows)."""
    try:
        level = Compatibility.of(config["schema.registry.schema.compatibility.level"])
    except Exception:  # noqa: BLE001 - a RegistryError here is a configuration error
        raise InvalidConfigError(
            f"schema.registry.schema.compatibility.level={config['schema.registry.schema.compatibility.level']!r}"
            " is not a compatibility level"
        ) from None
    listeners = tuple(parse_registry_listeners(config["schema.registry.listeners"]))
    if len({listener.tls for listener in listeners}) > 1:
        raise InvalidConfigError("schema.registry.listeners: all http:// or all https://")
    method = config["schema.registry.authentication.method"]
    return RegistrySettings(
        listeners,
        config["schema.registry.kafkastore.topic"],
        config["schema.registry.kafkastore.topic.replication.factor"],
        level,
        method == "BASIC" or (method == "" and cluster_authentication),
        config["rayqueue.schema.registry.max.request.bytes"],
    )
