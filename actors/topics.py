"""Kafka's rules for what a topic may be called and how many partitions or replicas a
request may ask for (Kafka's ``Topic`` and the controller's count checks)."""

from __future__ import annotations

import re
from typing import Any

from storage.errors import InvalidTopicError, KafkaError, PolicyViolationError

MAX_TOPIC_NAME_LENGTH = 249
INT32_MAX = 2**31 - 1
# Kafka's controller refuses a request that would add more partitions than this (KAFKA-17870).
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; a name that could leave the data dir never passes."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


def unify_collision_chars(name: str) -> str:
    """Kafka's Topic.unifyCollisionChars: metric names replace '.' with '_', so two topics
    that differ only there would share their metrics; Kafka refuses the second one."""
    return name.replace(".", "_")


def resolve_count(value: Any, default: int, what: str, error: type[KafkaError]) -> int:
    """A partition count or replication factor as CreateTopics takes it (KIP-464): None or -1
    means the broker default; anything else must be an int32 of at least 1."""
    if value is None or (type(value) is int and value == -1):
        return default
    # bool is an int to Python, never a count to Kafka (an int32 on the wire).
    if type(value) is not int:
        raise error(f"{what} must be an integer or -1 (the broker default), got {value!r}")
    if not 1 <= value <= INT32_MAX:
        raise error(f"{what} is {value}; it must be at least 1, or -1 for the broker default")
    return value


def check_partitions_per_request(count: int) -> None:
    """POLICY_VIOLATION for a request that would add more than MAX_PARTITIONS_PER_REQUEST."""
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise PolicyViolationError(
            f"excessively large number of partitions per request: {count} (the limit is {MAX_PARTITIONS_PER_REQUEST})"
        )
