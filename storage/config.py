"""Typed configuration with Kafka's key names and defaults.

A :class:`ConfigDef` lists the keys a component understands. ``ConfigDef.parse`` accepts
Kafka's dotted keys (``linger.ms``) or the Python keyword form (``linger_ms``), converts
and validates each value, fills in Kafka's defaults and rejects unknown keys with a hint
at the nearest known one. The result is an immutable :class:`Config` readable both ways:
``cfg["segment.bytes"]`` and ``cfg.segment_bytes``.

``LOG_CONFIG`` is the topic-level configuration of one partition log (Kafka's topic
configs); the actor and client layers define their own ``ConfigDef`` with the same
machinery.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
# Kafka's INT and LONG types are Java's int32 and int64: a value outside cannot be stored.
_TYPE_RANGES: dict[str, tuple[int, int]] = {"int": (-(2**31), INT_MAX), "long": (-(2**63), LONG_MAX)}


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"expected true or false, got {value!r}")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    if isinstance(value, str):
        return int(value.strip())
    raise ValueError(f"expected an integer, got {type(value).__name__}")


def _to_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {value!r}")
    converted = float(value.strip() if isinstance(value, str) else value)
    if not math.isfinite(converted):
        raise ValueError(f"expected a finite number, got {value!r}")
    return converted


def _to_str(value: Any) -> str:
    # Numbers are written as strings (acks=1), paths as their text (log.dirs); anything
    # else would be a repr, not a value.
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return str(value)


def _to_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if not isinstance(value, (list, tuple)) or not all(isinstance(part, str) for part in value):
        raise ValueError(f"expected a comma-separated string or a list of strings, got {value!r}")
    return tuple(value)


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "int": _to_int,
    "long": _to_int,
    "double": _to_float,
    "string": _to_str,
    # Kafka's PASSWORD type: a string that is never shown (DescribeConfigs answers it as
    # sensitive, with no value).
    "password": _to_str,
    "boolean": _to_bool,
    "list": _to_list,
    "any": lambda value: value,
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One configuration key: its type, default, allowed range or values, and a doc line."""

    name: str
    type: str
    default: Any
    doc: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False

    def convert(self, value: Any) -> Any:
        """Convert ``value`` to this key's type and check it, or raise InvalidConfigError."""
        if value is None:
            if self.nullable:
                return None
            raise InvalidConfigError(f"{self.name} must not be null")
        try:
            converted = _CONVERTERS[self.type](value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidConfigError(f"{self.name}={value!r}: {exc}") from None
        if self.type in _TYPE_RANGES:
            low, high = _TYPE_RANGES[self.type]
            if not low <= converted <= high:
                raise InvalidConfigError(f"{self.name}={converted!r} does not fit Kafka's {self.type} type")
        if self.min is not None and converted < self.min:
            raise InvalidConfigError(f"{self.name}={converted!r} is below the minimum {self.min}")
        if self.max is not None and converted > self.max:
            raise InvalidConfigError(f"{self.name}={converted!r} is above the maximum {self.max}")
        if self.choices is not None:
            items = converted if self.type == "list" else (converted,)
            for item in items:
                if item not in self.choices:
                    raise InvalidConfigError(f"{self.name}={value!r} is not one of {', '.join(map(str, self.choices))}")
        return converted


class Config(Mapping[str, Any]):
    """An immutable, validated set of values keyed by Kafka's dotted names."""

    __slots__ = ("_values", "_definition")

    def __init__(self, values: dict[str, Any], definition: ConfigDef) -> None:
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_definition", definition)

    def __getitem__(self, key: str) -> Any:
        return self._values[self._definition.canonical(key)]

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[self._definition.canonical(name)]
        except InvalidConfigError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is immutable; use with_overrides()")

    def __iter__(self):  # type: ignore[override]
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self._values!r})"

    def __reduce__(self):  # keep pickling simple for Ray
        return (self._definition.parse, (dict(self._values),))

    def with_overrides(self, overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
        """A new Config with some keys changed (validated like the originals)."""
        merged = dict(self._values)
        merged.update(overrides or {})
        merged.update(kwargs)
        return self._definition.parse(merged)

    def non_default(self) -> dict[str, Any]:
        """The keys whose value differs from Kafka's default."""
        keys = self._definition.keys
        # A key outside the definition's fixed set (a broker's per-listener override) is
        # never a default.
        return {k: v for k, v in self._values.items() if k not in keys or v != keys[k].default}


class ConfigDef:
    """The set of keys a component understands."""

    def __init__(self, name: str, keys: Iterable[ConfigKey]) -> None:
        self.name = name
        self.keys: dict[str, ConfigKey] = {key.name: key for key in keys}
        self._python_names = {key.name.replace(".", "_"): key.name for key in self.keys.values()}

    def canonical(self, key: str) -> str:
        """The dotted Kafka name for ``key`` (dotted or keyword form), or InvalidConfigError."""
        if not isinstance(key, str):
            raise InvalidConfigError(f"a {self.name} config key is a string, got {key!r}")
        if key in self.keys:
            return key
        if key in self._python_names:
            return self._python_names[key]
        near = difflib.get_close_matches(key.replace("_", "."), list(self.keys), n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise InvalidConfigError(f"unknown {self.name} config {key!r}{hint}")

    def parse(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
        """Validate ``values`` (and keyword overrides) and fill in the defaults."""
        given: dict[str, Any] = {}
        for key, value in {**(values or {}), **kwargs}.items():
            given[self.canonical(key)] = value
        result = {}
        for name, key in self.keys.items():
            result[name] = key.convert(given[name]) if name in given else key.default
        return Config(result, self)

    def convert_overrides(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The given keys only, canonical and converted (no defaults filled in): what a
        topic stores as its overrides. Raises InvalidConfigError on the first bad entry."""
        return {self.canonical(key): self.keys[self.canonical(key)].convert(value) for key, value in values.items()}

    def defaults(self) -> Config:
        """The configuration with every key at Kafka's default."""
        return self.parse({})


# Topic-level configuration of a partition log, with Kafka's names and defaults.
LOG_CONFIG = ConfigDef(
    "topic",
    [
        ConfigKey("segment.bytes", "int", 1024**3, "Roll a new segment past this many bytes.", min=14),
        ConfigKey("segment.ms", "long", 7 * 24 * 3600 * 1000, "Roll a segment this old (by first timestamp).", min=1),
        ConfigKey("segment.index.bytes", "int", 10 * 1024 * 1024, "Preallocated size of each index file.", min=8),
        ConfigKey("segment.jitter.ms", "long", 0, "Random jitter subtracted from segment.ms.", min=0),
        ConfigKey("index.interval.bytes", "int", 4096, "Bytes between two offset index entries.", min=0),
        ConfigKey("flush.messages", "long", LONG_MAX, "fsync after this many messages.", min=1),
        ConfigKey("flush.ms", "long", LONG_MAX, "fsync when the last flush is this old.", min=0),
        ConfigKey("retention.ms", "long", 7 * 24 * 3600 * 1000, "Delete segments older than this (-1: never).", min=-1),
        ConfigKey("retention.bytes", "long", -1, "Delete old segments past this size (-1: no limit).", min=-1),
        ConfigKey("max.message.bytes", "int", 1048588, "Largest record batch accepted.", min=0),
        ConfigKey(
            "message.timestamp.type",
            "string",
            "CreateTime",
            "CreateTime keeps the producer's timestamp; LogAppendTime stamps on append.",
            choices=("CreateTime", "LogAppendTime"),
        ),
        ConfigKey("cleanup.policy", "list", ("delete",), "delete, compact, or both.", choices=("delete", "compact")),
        ConfigKey("min.cleanable.dirty.ratio", "double", 0.5, "Clean when dirty/total passes this.", min=0, max=1),
        ConfigKey("min.compaction.lag.ms", "long", 0, "Records younger than this are not compacted.", min=0),
        ConfigKey("max.compaction.lag.ms", "long", LONG_MAX, "Records older than this make the log cleanable.", min=1),
        ConfigKey("delete.retention.ms", "long", 24 * 3600 * 1000, "Keep tombstones this long after cleaning.", min=0),
        ConfigKey("file.delete.delay.ms", "long", 60000, "Wait before deleting a removed segment's files.", min=0),
        ConfigKey("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all write.", min=1),
        ConfigKey("unclean.leader.election.enable", "boolean", False, "Allow a leader from outside the ISR."),
        ConfigKey(
            "compression.type",
            "string",
            "producer",
            "Codec kept on disk; 'producer' keeps the producer's.",
            choices=("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"),
        ),
        ConfigKey("preallocate", "boolean", False, "Preallocate segment files."),
        ConfigKey("message.downconversion.enable", "boolean", True, "Kept for compatibility; always v2 here."),
        # Iceberg topics (actors/iceberg): rayqueue's keys in the style of Redpanda's redpanda.iceberg.*.
        ConfigKey(
            "rayqueue.iceberg.mode",
            "string",
            "disabled",
            "Iceberg topic: disabled; key_value (a table of key, value, headers and the rayqueue struct); "
            "value_schema_id_prefix (values in the schema registry's wire format become typed columns).",
            choices=("disabled", "key_value", "value_schema_id_prefix"),
        ),
        ConfigKey(
            "rayqueue.iceberg.target.lag.ms",
            "long",
            60000,
            "Iceberg topic: how long a committed record may wait before the table holds it (its translation "
            "starts once the oldest untranslated record has waited half of it).",
            min=100,
        ),
        ConfigKey(
            "rayqueue.iceberg.invalid.record.action",
            "string",
            "dlq_table",
            "Iceberg topic: a record the mode cannot type goes to the <topic>~dlq table (dlq_table) or is "
            "counted and skipped (drop).",
            choices=("dlq_table", "drop"),
        ),
        ConfigKey(
            "rayqueue.iceberg.partition.spec",
            "string",
            "(hour(rayqueue.timestamp))",
            "Iceberg topic: the table's partitioning when it is created, e.g. (hour(rayqueue.timestamp)), "
            "(day(rayqueue.timestamp), bucket(8, rayqueue.partition)); () for none.",
        ),
        ConfigKey(
            "producer.id.expiration.ms",
            "int",
            86_400_000,
            "Forget an idle producer's state (sequences, epoch) after this long without a write.",
            min=1,
        ),
    ],
)


def validate_log_config(values: Mapping[str, Any]) -> None:
    """The rules between topic keys that no single key can check (Kafka's
    LogConfig.validateValues), on a topic's effective configuration."""
    min_lag = values.get("min.compaction.lag.ms", LOG_CONFIG.keys["min.compaction.lag.ms"].default)
    max_lag = values.get("max.compaction.lag.ms", LOG_CONFIG.keys["max.compaction.lag.ms"].default)
    if min_lag > max_lag:
        raise InvalidConfigError(
            f"conflicting topic configs: min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})"
        )


def log_config(overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
    """A topic-level log configuration: Kafka's defaults with ``overrides`` applied."""
    return LOG_CONFIG.parse(overrides, **kwargs)
