"""The ``__consumer_offsets`` record format: offset commits and group metadata.

Records of the compacted internal topic ``__consumer_offsets`` (partition =
``abs(javaHashCode(group)) % partitions``, as Kafka). Keys and values are compact JSON with
sorted keys, so that a key is deterministic and compaction keeps the last value per key; a
``None`` value is a tombstone. Key versions are Kafka's: 0/1 are offset commits, 2 is group
metadata.

- offset commit: key ``[1, group, topic, partition]``, value
  ``{"offset", "metadata", "commit_timestamp", "leader_epoch"}``;
- group metadata: key ``[2, group]``, value ``{"protocol_type", "generation", "protocol",
  "rebalance_protocol", "leader", "state_timestamp", "snapshot", "client_assigned",
  "members": [...]}``.

The readers check every field's type before anything is built (``actors.internal_records``),
so that a record is applied whole or skipped whole on load.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from actors import internal_records as stored
from actors.assignors import EAGER
from actors.group_coordinator.classic_group import PROTOCOL_TYPE, ClassicGroup, ClassicGroupMember
from actors.protocol import GroupState
from actors.types import OffsetAndMetadata, TopicPartition

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2

Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone


def dumps(value: Any) -> bytes:
    """Compact JSON with sorted keys (deterministic, so compaction can match keys)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def offset_key(group_id: str, tp: TopicPartition) -> bytes:
    """Key of an offset commit: JSON ``[1, group, topic, partition]``."""
    return dumps([OFFSET_KEY_VERSION, group_id, tp.topic, tp.partition])


def group_key(group_id: str) -> bytes:
    """Key of a group's metadata: JSON ``[2, group]``."""
    return dumps([GROUP_KEY_VERSION, group_id])


def encode_offset(om: OffsetAndMetadata) -> bytes:
    """Value of an offset commit: JSON ``{"offset", "metadata", "commit_timestamp", "leader_epoch"}``."""
    return dumps(
        {
            "offset": om.offset,
            "metadata": om.metadata,
            "commit_timestamp": om.commit_timestamp,
            "leader_epoch": om.leader_epoch,
        }
    )


def decode_offset(value: bytes | None) -> OffsetAndMetadata:
    """Inverse of :func:`encode_offset`; ValueError/TypeError/KeyError for anything else."""
    d = stored.json_object(value)
    return OffsetAndMetadata(
        stored.field(d, "offset", int),
        stored.field(d, "metadata", (str, type(None)), ""),
        stored.field(d, "commit_timestamp", int, -1),
        stored.field(d, "leader_epoch", int, -1),
    )


def decode_key(key: bytes | None) -> tuple[Any, ...]:
    """A ``__consumer_offsets`` key: ``(1, group, topic, partition)`` or ``(2, group)``;
    ValueError/TypeError for anything else (an unknown key version too)."""
    k = stored.loads(key, "key")
    if not isinstance(k, list) or not k or type(k[0]) is not int:
        raise ValueError(f"the key is {k!r:.60}, not a [version, ...] list")
    if k[0] == OFFSET_KEY_VERSION and len(k) == 4:
        stored.items_of(k[1:3], str, "group and topic of an offset key")
        stored.items_of(k[3:], int, "partition of an offset key")
        return tuple(k)
    if k[0] == GROUP_KEY_VERSION and len(k) == 2:
        stored.items_of(k[1:], str, "group of a group key")
        return tuple(k)
    raise ValueError(f"unknown key {k!r:.60}")


def offset_records(group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> list[Record]:
    """The records of an offset commit."""
    return [(offset_key(group_id, tp), encode_offset(om)) for tp, om in offsets.items()]


def offset_tombstones(group_id: str, partitions: list[TopicPartition]) -> list[Record]:
    """The records that delete committed offsets."""
    return [(offset_key(group_id, tp), None) for tp in partitions]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _member_value(m: ClassicGroupMember) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id,
        "client_id": m.client_id,
        "session_timeout_ms": m.session_timeout_ms,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "protocols": m.protocols,
        "topics": list(m.topics),
        "pattern": m.pattern,
        "assignment": [[tp.topic, tp.partition] for tp in m.assignment],
        "metadata": None if m.metadata is None else {k: _b64(v) for k, v in m.metadata.items()},
        "member_assignment": _b64(m.member_assignment),
        "client_host": m.client_host,
    }


def _decode_member(d: Any) -> ClassicGroupMember:
    """A member as its group's record stored it; ValueError/TypeError/KeyError when the
    record is not one (every field checked before anything is built)."""
    if not isinstance(d, dict):
        raise TypeError(f"a member is {type(d).__name__}, not an object")
    m = ClassicGroupMember(
        stored.field(d, "member_id", str),
        stored.field(d, "instance_id", (str, type(None)), None),
        stored.field(d, "client_id", str, ""),
        stored.field(d, "session_timeout_ms", int),
        stored.field(d, "rebalance_timeout_ms", int),
        list(stored.items_of(d.get("protocols", []), str, "protocols")),
        tuple(stored.items_of(d.get("topics", []), str, "topics")),
        stored.field(d, "pattern", (str, type(None)), None),
    )
    m.assignment = [TopicPartition(t, p) for t, p in stored.topic_partitions(d.get("assignment", []), "assignment")]
    metadata = stored.field(d, "metadata", (dict, type(None)), None)
    if metadata is not None:
        stored.items_of(list(metadata.values()), str, "protocol metadata")
        m.metadata = {k: base64.b64decode(v, validate=True) for k, v in metadata.items()}
    m.member_assignment = base64.b64decode(stored.field(d, "member_assignment", str, ""), validate=True)
    m.client_host = stored.field(d, "client_host", str, "")
    m.owned = list(m.assignment)
    return m


def encode_group(group: ClassicGroup) -> bytes:
    """Value of a group's metadata record."""
    return dumps(
        {
            "protocol_type": PROTOCOL_TYPE,
            "generation": group.generation,
            "protocol": group.protocol,
            "rebalance_protocol": group.rebalance_protocol,
            "leader": group.leader,
            "state_timestamp": group.state_timestamp_ms,
            "snapshot": group.snapshot,
            "client_assigned": group.client_assigned,
            "members": [_member_value(m) for m in group.members.values()],
        }
    )


def decode_group(group_id: str, value: bytes | None, now_ms: int) -> ClassicGroup:
    """The group a metadata record describes: Stable with its members, or Empty without.
    ``now_ms`` stands in for a missing state timestamp. ValueError/TypeError/KeyError for a
    record that is not one."""
    d = stored.json_object(value)
    snapshot = stored.field(d, "snapshot", dict, {})
    stored.items_of(list(snapshot.values()), int, "snapshot")
    group = ClassicGroup(
        group_id,
        generation=stored.field(d, "generation", int),
        protocol=stored.field(d, "protocol", str, ""),
        rebalance_protocol=stored.field(d, "rebalance_protocol", str, EAGER),
        leader=stored.field(d, "leader", str, ""),
        state_timestamp_ms=stored.field(d, "state_timestamp", int, now_ms),
        snapshot=dict(snapshot),
        client_assigned=stored.field(d, "client_assigned", bool, False),
    )
    for member in [_decode_member(md) for md in stored.items_of(d.get("members", []), dict, "members")]:
        group.members[member.member_id] = member
        if member.instance_id:
            group.static[member.instance_id] = member.member_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    return group


__all__ = [
    "GROUP_KEY_VERSION",
    "OFFSET_KEY_VERSION",
    "PROTOCOL_TYPE",
    "Record",
    "decode_group",
    "decode_key",
    "decode_offset",
    "dumps",
    "encode_group",
    "encode_offset",
    "group_key",
    "offset_key",
    "offset_records",
    "offset_tombstones",
]
