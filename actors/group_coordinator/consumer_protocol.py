"""The consumer protocol's embedded messages, where the coordinator itself reads or writes them.

A classic member (JoinGroup/SyncGroup) inside a consumer group gets its assignment from the
coordinator, as a ConsumerProtocolAssignment at the version its subscription metadata used
(Kafka's ``ConsumerProtocol.serializeAssignment``); converting a classic group of Kafka
clients into a consumer group reads each member's subscription and assignment (a custom
assignor's user data would be lost: such a group is not converted, as Kafka refuses it).
kio's generated classes do the encoding; versions 0 to 3 share their layout.
"""

from __future__ import annotations

import functools
import importlib
import io
from collections.abc import Iterable
from typing import Any

from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v3.data import TopicPartition as AssignedTopic
from kio.serial import entity_reader, entity_writer

from actors.types import TopicPartition

LATEST_VERSION = 3
_write_assignment = entity_writer(ConsumerProtocolAssignment)
_read_assignment = entity_reader(ConsumerProtocolAssignment)


@functools.cache
def _subscription_reader(version: int) -> Any:
    module = importlib.import_module(f"kio.schema.consumer_protocol_subscription.v{version}.data")
    return entity_reader(module.ConsumerProtocolSubscription)


def metadata_version(metadata: bytes) -> int:
    """The version a member's subscription metadata was written at, clamped to [0, 3] as
    Kafka's serializer clamps it (0 for metadata too short to say)."""
    if len(metadata) < 2:
        return 0
    return max(0, min(LATEST_VERSION, int.from_bytes(metadata[:2], "big", signed=True)))


def encode_assignment(partitions: Iterable[TopicPartition], version: int = LATEST_VERSION) -> bytes:
    """A ConsumerProtocolAssignment (version prefix, then the body) without user data."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    body = ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            AssignedTopic(topic=t, partitions=tuple(sorted(ps))) for t, ps in sorted(by_topic.items())
        ),
        user_data=None,
    )
    buf = io.BytesIO()
    buf.write(max(0, min(LATEST_VERSION, version)).to_bytes(2, "big", signed=True))
    _write_assignment(buf, body)
    return buf.getvalue()


def decode_assignment(data: bytes) -> tuple[tuple[TopicPartition, ...], bytes | None]:
    """The partitions and user data of a ConsumerProtocolAssignment; ValueError when ``data``
    is not one."""
    if len(data) < 2 or int.from_bytes(data[:2], "big", signed=True) < 0:
        raise ValueError("not a consumer protocol assignment")
    try:
        value, _ = _read_assignment(bytes(data), 2)
    except Exception as exc:  # noqa: BLE001 - kio's errors for a short or garbled body
        raise ValueError(f"not a consumer protocol assignment: {exc}") from None
    partitions = tuple(TopicPartition(t.topic, int(p)) for t in value.assigned_partitions for p in t.partitions)
    return partitions, value.user_data


def decode_subscription(data: bytes) -> tuple[tuple[str, ...], tuple[TopicPartition, ...], str | None]:
    """The topics, owned partitions and rack of a ConsumerProtocolSubscription; ValueError
    when ``data`` is not one."""
    if len(data) < 2 or int.from_bytes(data[:2], "big", signed=True) < 0:
        raise ValueError("not a consumer protocol subscription")
    try:
        value, _ = _subscription_reader(metadata_version(data))(bytes(data), 2)
    except Exception as exc:  # noqa: BLE001 - kio's errors for a short or garbled body
        raise ValueError(f"not a consumer protocol subscription: {exc}") from None
    owned = tuple(TopicPartition(t.topic, int(p)) for t in getattr(value, "owned_partitions", ()) for p in t.partitions)
    return tuple(value.topics), owned, getattr(value, "rack_id", None)


__all__ = ["LATEST_VERSION", "decode_assignment", "decode_subscription", "encode_assignment", "metadata_version"]
