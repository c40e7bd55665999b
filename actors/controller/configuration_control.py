"""Topic configs (Kafka's ``ConfigurationControlManager``): each topic's overrides over the
broker's defaults, checked as Kafka checks them, described with their source, and changed
by IncrementalAlterConfigs all at once or not at all.

Errors carry Kafka's names: INVALID_CONFIG (an unknown key, a bad value, a rule between keys
broken, APPEND/SUBTRACT on a non-list) and INVALID_REQUEST (a key changed twice, an unknown
operation, a change that is not an AlterableConfig).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from actors.config import topic_defaults
from actors.controller import records
from actors.controller.records import ControllerResult
from actors.iceberg.config import check_topic_config
from actors.protocol import AlterableConfig, AlterConfigOp
from storage.config import LOG_CONFIG, Config, validate_log_config
from storage.errors import InvalidConfigError, InvalidRequestError, UnknownTopicOrPartitionError

# DescribeConfigs' sources, as Kafka names them.
DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
DEFAULT_CONFIG = "DEFAULT_CONFIG"


def topic_overrides(configs: Any) -> dict[str, Any]:
    """A topic's config overrides as given to CreateTopics (each key and value checked,
    nothing filled in), as JSON-ready values."""
    if configs is None:
        return {}
    if not isinstance(configs, Mapping):
        raise InvalidConfigError(f"topic configs must be a mapping of keys to values, got {type(configs).__name__}")
    overrides = LOG_CONFIG.convert_overrides(configs)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()}


def altered(overrides: dict[str, Any], effective: dict[str, Any], changes: Iterable[Any]) -> dict[str, Any]:
    """A topic's config overrides after IncrementalAlterConfigs ``changes`` (Kafka's
    semantics: APPEND adds the values a list config lacks, SUBTRACT removes values, both
    starting from the effective value). Checked as a whole: InvalidConfigError (an unknown
    key, a bad value, APPEND/SUBTRACT on a non-list) or InvalidRequestError (a key named
    twice, an unknown operation), and then nothing changes."""
    merged = dict(overrides)
    seen: set[str] = set()
    for change in changes:
        if type(change) is not AlterableConfig:
            raise InvalidRequestError(f"a config change must be an AlterableConfig, not {change!r:.60}")
        key = LOG_CONFIG.canonical(change.name)
        if key in seen:
            raise InvalidRequestError(f"config {key} is changed twice in one request")
        seen.add(key)
        try:
            op = AlterConfigOp(change.config_operation)
        except ValueError:
            raise InvalidRequestError(f"unknown config operation {change.config_operation!r:.20}") from None
        spec = LOG_CONFIG.keys[key]
        if op is AlterConfigOp.DELETE:
            merged.pop(key, None)
            continue
        value = spec.convert(change.value)
        if op is not AlterConfigOp.SET:
            if spec.type != "list":
                raise InvalidConfigError(f"{key} is not a list config: {op.name} does not apply")
            current = list(merged.get(key, effective.get(key, spec.default)) or ())
            if op is AlterConfigOp.APPEND:
                value = current + [v for v in value if v not in current]
            else:
                value = [v for v in current if v not in value]
            value = spec.convert(value)
        merged[key] = list(value) if isinstance(value, tuple) else value
    return merged


class ConfigurationControlManager:
    """Every topic's config overrides, rebuilt by :meth:`replay`, over the broker's defaults."""

    def __init__(self, broker_config: Config) -> None:
        self._defaults = topic_defaults(broker_config)
        self._overrides: dict[str, dict[str, Any]] = {}

    def replay(self, record: dict[str, Any]) -> None:
        """Apply a checked ``topic``, ``topic_config`` or ``delete_topic`` record (KeyError:
        configs of a topic never created; nothing changes then)."""
        kind = record["type"]
        if kind == "topic":
            self._overrides[record["name"]] = dict(record["configs"])
        elif kind == "topic_config":
            if record["name"] not in self._overrides:
                raise KeyError(f"configs of unknown topic {record['name']!r:.60}")
            self._overrides[record["name"]] = dict(record["configs"])
        elif kind == "delete_topic":
            self._overrides.pop(record["name"], None)
        else:
            raise ValueError(f"not a config record: {kind!r:.40}")

    # -- queries --------------------------------------------------------------------------

    def defaults(self) -> dict[str, Any]:
        """The topic configs a topic without overrides has (the broker's log.* settings)."""
        return dict(self._defaults)

    def overrides(self, topic: str) -> dict[str, Any]:
        """The topic's own overrides (UNKNOWN_TOPIC_OR_PARTITION for an unknown topic)."""
        found = self._overrides.get(topic)
        if found is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r:.260}")
        return dict(found)

    def effective(self, topic: str) -> dict[str, Any]:
        """The topic's config as its replicas run it: the broker defaults under its overrides."""
        return {**self._defaults, **self.overrides(topic)}

    def describe(self, topic: str, keys: Iterable[str] | None = None) -> dict[str, tuple[Any, str]]:
        """The topic's configs (all, or ``keys``) with value and source (DEFAULT_CONFIG,
        STATIC_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG); one resource of Kafka's DescribeConfigs.
        A key that is no topic config is left out, as Kafka does."""
        overrides = self.overrides(topic)
        wanted = None if keys is None else set(keys)
        out = {}
        for key, spec in LOG_CONFIG.keys.items():
            if wanted is not None and key not in wanted:
                continue
            if key in overrides:
                out[key] = (overrides[key], DYNAMIC_TOPIC_CONFIG)
            elif self._defaults.get(key, spec.default) != spec.default:
                out[key] = (self._defaults[key], STATIC_BROKER_CONFIG)
            else:
                out[key] = (spec.default, DEFAULT_CONFIG)
        return out

    def check(self, overrides: dict[str, Any]) -> None:
        """The rules between keys (Kafka's LogConfig.validateValues), on the config a topic
        with these overrides would have; INVALID_CONFIG when one is broken."""
        effective = {**self._defaults, **overrides}
        validate_log_config(effective)
        check_topic_config(effective)

    # -- changes --------------------------------------------------------------------------

    def alter(
        self, topic: str, changes: Iterable[Any], validate_only: bool = False
    ) -> ControllerResult[dict[str, Any]]:
        """IncrementalAlterConfigs on one topic: SET, DELETE (back to the default), APPEND and
        SUBTRACT on list configs, all checked before anything changes. The answer is the
        topic's overrides after it; ``validate_only`` writes nothing."""
        merged = altered(self.overrides(topic), self.effective(topic), changes)
        self.check(merged)
        if validate_only:
            return ControllerResult([], merged)
        return ControllerResult([records.topic_config(topic, merged)], merged)
