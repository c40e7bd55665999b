"""The broker keys of KIP-848's consumer group protocol, with Kafka 4.4's names, defaults and bounds.

They are part of the broker configuration table (``actors.config.BROKER_CONFIG`` takes
:data:`CONSUMER_GROUP_KEYS`); :func:`check_consumer_group_config` makes the cross-key checks
Kafka's ``GroupCoordinatorConfig`` makes when a broker starts (a default between its minimum
and maximum, the heartbeat interval below the session timeout). :class:`ConsumerGroupSettings`
is what the state machine reads of them. No Ray, no import of ``actors.config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage.config import ConfigKey
from storage.errors import InvalidConfigError

INT_MAX = 2**31 - 1
# The server-side assignors rayqueue has (Kafka's built-in names).
BUILTIN_SERVER_ASSIGNORS = ("uniform", "range")
MIGRATION_POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")
REBALANCE_PROTOCOLS = ("classic", "consumer")

CONSUMER_GROUP_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "group.coordinator.rebalance.protocols",
        "list",
        REBALANCE_PROTOCOLS,
        "The group protocols served: classic (JoinGroup/SyncGroup) and consumer (KIP-848's ConsumerGroupHeartbeat).",
        choices=REBALANCE_PROTOCOLS,
    ),
    ConfigKey(
        "group.consumer.session.timeout.ms",
        "int",
        45000,
        "A consumer-protocol member that does not heartbeat this long is removed from its group.",
        min=1,
    ),
    ConfigKey(
        "group.consumer.min.session.timeout.ms", "int", 45000, "Smallest allowed consumer session timeout.", min=1
    ),
    ConfigKey(
        "group.consumer.max.session.timeout.ms", "int", 60000, "Largest allowed consumer session timeout.", min=1
    ),
    ConfigKey(
        "group.consumer.heartbeat.interval.ms",
        "int",
        5000,
        "The heartbeat interval the coordinator gives consumer-protocol members.",
        min=1,
    ),
    ConfigKey(
        "group.consumer.min.heartbeat.interval.ms", "int", 5000, "Smallest allowed consumer heartbeat interval.", min=1
    ),
    ConfigKey(
        "group.consumer.max.heartbeat.interval.ms", "int", 15000, "Largest allowed consumer heartbeat interval.", min=1
    ),
    ConfigKey(
        "group.consumer.max.size",
        "int",
        INT_MAX,
        "Most members one consumer-protocol group may have (GROUP_MAX_SIZE_REACHED beyond).",
        min=1,
    ),
    ConfigKey(
        "group.consumer.assignors",
        "list",
        BUILTIN_SERVER_ASSIGNORS,
        "Server-side assignors (uniform, range); the first is used when no member names one (group.remote.assignor).",
        choices=BUILTIN_SERVER_ASSIGNORS,
    ),
    ConfigKey(
        "group.consumer.migration.policy",
        "string",
        "bidirectional",
        "Converting a non-empty classic group to a consumer group (upgrade) and back (downgrade): "
        "bidirectional, upgrade, downgrade or disabled. Empty groups always convert.",
        choices=MIGRATION_POLICIES,
    ),
    ConfigKey(
        "group.consumer.assignment.interval.ms",
        "int",
        1000,
        "Least time between two target assignments of one group (membership changes in between are batched).",
        min=0,
    ),
    ConfigKey("group.consumer.min.assignment.interval.ms", "int", 0, "Smallest allowed assignment interval.", min=0),
    ConfigKey("group.consumer.max.assignment.interval.ms", "int", 15000, "Largest allowed assignment interval.", min=0),
    ConfigKey(
        "group.consumer.regex.refresh.interval.ms",
        "int",
        600000,
        "How often subscribed regexes are matched against the topics again (topic creations are seen at once).",
        min=10000,
    ),
)


def _lower(value: Any) -> str:
    return str(value).lower()


def check_consumer_group_config(config: Mapping[str, Any]) -> None:
    """Kafka's ``GroupCoordinatorConfig`` requirements between the keys (InvalidConfigError)."""

    def within(name: str, low_key: str, high_key: str) -> None:
        low, value, high = config[low_key], config[name], config[high_key]
        if high < low:
            raise InvalidConfigError(f"{high_key}={high} must be at least {low_key}={low}")
        if not low <= value <= high:
            raise InvalidConfigError(f"{name}={value} must be between {low_key}={low} and {high_key}={high}")

    within(
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    )
    within(
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    )
    within(
        "group.consumer.assignment.interval.ms",
        "group.consumer.min.assignment.interval.ms",
        "group.consumer.max.assignment.interval.ms",
    )
    if config["group.consumer.heartbeat.interval.ms"] >= config["group.consumer.session.timeout.ms"]:
        raise InvalidConfigError(
            "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"
        )
    if not config["group.consumer.assignors"]:
        raise InvalidConfigError("group.consumer.assignors must name at least one assignor")
    if "classic" not in config["group.coordinator.rebalance.protocols"]:
        raise InvalidConfigError("group.coordinator.rebalance.protocols must contain classic")


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    """What the consumer group state machine reads of the broker configuration."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = INT_MAX
    assignors: tuple[str, ...] = BUILTIN_SERVER_ASSIGNORS
    migration_policy: str = "bidirectional"
    assignment_interval_ms: int = 1000
    regex_refresh_interval_ms: int = 600000
    enabled: bool = True

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> ConsumerGroupSettings:
        """The settings of a (checked) broker configuration."""
        return cls(
            session_timeout_ms=config["group.consumer.session.timeout.ms"],
            heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            max_size=config["group.consumer.max.size"],
            assignors=tuple(config["group.consumer.assignors"]),
            migration_policy=_lower(config["group.consumer.migration.policy"]),
            assignment_interval_ms=config["group.consumer.assignment.interval.ms"],
            regex_refresh_interval_ms=config["group.consumer.regex.refresh.interval.ms"],
            enabled="consumer" in config["group.coordinator.rebalance.protocols"],
        )

    @property
    def upgrade_enabled(self) -> bool:
        """A non-empty classic group may become a consumer group."""
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        """A consumer group whose last consumer-protocol member leaves may become classic."""
        return self.migration_policy in ("downgrade", "bidirectional")

    @property
    def default_assignor(self) -> str:
        """The assignor used when no member names one (the first configured)."""
        return self.assignors[0]


__all__ = [
    "BUILTIN_SERVER_ASSIGNORS",
    "CONSUMER_GROUP_KEYS",
    "ConsumerGroupSettings",
    "check_consumer_group_config",
]
