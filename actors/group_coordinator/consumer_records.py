"""The ``__consumer_offsets`` records of KIP-848's consumer groups.

Kafka's record types for consumer groups, with Kafka's key versions (its record type ids) and
field names, written the way rayqueue writes the topic's other records (compact JSON, sorted
keys, see :mod:`.records`):

=====  =====================================  ==========================================
key    record (Kafka's name)                  value
=====  =====================================  ==========================================
3      ConsumerGroupMetadata [3, group]       ``{"epoch"}``: the group epoch
4      ConsumerGroupPartitionMetadata         ``{"topics": [{"topic_id", "topic_name",
       [4, group]                             "num_partitions"}]}``: the subscribed topics
5      ConsumerGroupMemberMetadata            ``{"instance_id", "rack_id", "client_id",
       [5, group, member]                     "client_host", "subscribed_topic_names",
                                              "subscribed_topic_regex", "rebalance_timeout_ms",
                                              "server_assignor", "classic_member_metadata"}``
6      ConsumerGroupTargetAssignmentMetadata  ``{"assignment_epoch"}``
       [6, group]
7      ConsumerGroupTargetAssignmentMember    ``{"topic_partitions": [{"topic_id",
       [7, group, member]                     "partitions"}]}``
8      ConsumerGroupCurrentMemberAssignment   ``{"member_epoch", "previous_member_epoch",
       [8, group, member]                     "state", "assigned_partitions",
                                              "partitions_pending_revocation"}`` (each entry
                                              ``{"topic_id", "partitions", "assignment_epochs"}``)
16     ConsumerGroupRegularExpression         ``{"topics", "version", "timestamp"}``
       [16, group, regex]
=====  =====================================  ==========================================

A ``None`` value is the record's tombstone. The readers check every field before anything is
built, so that a record is applied whole or skipped whole on load.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from actors import internal_records as stored
from actors.group_coordinator.consumer_group import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    EpochPartitions,
    MemberState,
    ResolvedRegex,
    TopicMetadata,
)
from actors.group_coordinator.records import Record, decode_key, dumps

GROUP_EPOCH_KEY = 3
PARTITION_METADATA_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_EPOCH_KEY = 6
TARGET_MEMBER_KEY = 7
CURRENT_ASSIGNMENT_KEY = 8
REGEX_KEY = 16
GROUP_KEYS = frozenset({GROUP_EPOCH_KEY, PARTITION_METADATA_KEY, TARGET_EPOCH_KEY})
MEMBER_KEYS = frozenset({MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY})
CONSUMER_KEYS = GROUP_KEYS | MEMBER_KEYS | {REGEX_KEY}


def decode_consumer_key(k: list[Any]) -> tuple[Any, ...]:
    """A consumer group key read as JSON: ``(version, group)``, ``(version, group, member)``
    or ``(16, group, regex)``; ValueError/TypeError otherwise."""
    version = k[0]
    size = 2 if version in GROUP_KEYS else 3
    if len(k) != size:
        raise ValueError(f"a key of version {version} has {size - 1} fields, not {len(k) - 1}")
    stored.items_of(k[1:], str, f"fields of a key of version {version}")
    return tuple(k)


def decode_any_key(key: bytes | None) -> tuple[Any, ...]:
    """Any ``__consumer_offsets`` key this coordinator writes: offset commits and classic
    group metadata (:func:`.records.decode_key`) or a consumer group record's."""
    k = stored.loads(key, "key")
    if isinstance(k, list) and k and type(k[0]) is int and k[0] in CONSUMER_KEYS:
        return decode_consumer_key(k)
    return decode_key(key)


# -- keys -----------------------------------------------------------------------------------


def group_epoch_key(group_id: str) -> bytes:
    """ConsumerGroupMetadataKey."""
    return dumps([GROUP_EPOCH_KEY, group_id])


def partition_metadata_key(group_id: str) -> bytes:
    """ConsumerGroupPartitionMetadataKey."""
    return dumps([PARTITION_METADATA_KEY, group_id])


def member_metadata_key(group_id: str, member_id: str) -> bytes:
    """ConsumerGroupMemberMetadataKey."""
    return dumps([MEMBER_METADATA_KEY, group_id, member_id])


def target_epoch_key(group_id: str) -> bytes:
    """ConsumerGroupTargetAssignmentMetadataKey."""
    return dumps([TARGET_EPOCH_KEY, group_id])


def target_member_key(group_id: str, member_id: str) -> bytes:
    """ConsumerGroupTargetAssignmentMemberKey."""
    return dumps([TARGET_MEMBER_KEY, group_id, member_id])


def current_assignment_key(group_id: str, member_id: str) -> bytes:
    """ConsumerGroupCurrentMemberAssignmentKey."""
    return dumps([CURRENT_ASSIGNMENT_KEY, group_id, member_id])


def regex_key(group_id: str, regex: str) -> bytes:
    """ConsumerGroupRegularExpressionKey."""
    return dumps([REGEX_KEY, group_id, regex])


# -- records ----------------------------------------------------------------------------------


def _topic_partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items()) if ps]


def _epoch_partitions(partitions: EpochPartitions) -> list[dict[str, Any]]:
    out = []
    for topic_id, ps in sorted(partitions.items()):
        if ps:
            ordered = sorted(ps)
            out.append({"topic_id": topic_id, "partitions": ordered, "assignment_epochs": [ps[p] for p in ordered]})
    return out


def group_epoch_record(group_id: str, epoch: int) -> Record:
    """The group epoch."""
    return group_epoch_key(group_id), dumps({"epoch": epoch})


def partition_metadata_record(group_id: str, metadata: dict[str, TopicMetadata]) -> Record:
    """The subscribed topics' ids and partition counts."""
    topics = [
        {"topic_id": t.topic_id, "topic_name": name, "num_partitions": t.partitions}
        for name, t in sorted(metadata.items())
    ]
    return partition_metadata_key(group_id), dumps({"topics": topics})


def member_metadata_record(group_id: str, member: ConsumerGroupMember) -> Record:
    """A member's subscription."""
    classic = None
    if member.classic is not None:
        classic = {
            "session_timeout_ms": member.classic.session_timeout_ms,
            "supported_protocols": [
                {"name": name, "metadata": base64.b64encode(meta).decode()} for name, meta in member.classic.protocols
            ],
        }
    value = {
        "instance_id": member.instance_id,
        "rack_id": member.rack_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": list(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "server_assignor": member.server_assignor,
        "classic_member_metadata": classic,
    }
    return member_metadata_key(group_id, member.member_id), dumps(value)


def target_epoch_record(group_id: str, epoch: int) -> Record:
    """The target assignment's epoch."""
    return target_epoch_key(group_id), dumps({"assignment_epoch": epoch})


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    """A member's part of the target assignment."""
    return target_member_key(group_id, member_id), dumps({"topic_partitions": _topic_partitions(assignment)})


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> Record:
    """A member's epochs, state and current assignment."""
    value = {
        "member_epoch": member.member_epoch,
        "previous_member_epoch": member.previous_member_epoch,
        "state": int(member.state),
        "assigned_partitions": _epoch_partitions(member.assigned),
        "partitions_pending_revocation": _epoch_partitions(member.pending_revocation),
    }
    return current_assignment_key(group_id, member.member_id), dumps(value)


def regex_record(group_id: str, regex: str, resolved: ResolvedRegex) -> Record:
    """The topics a regex resolved to."""
    value = {"topics": sorted(resolved.topics), "version": resolved.version, "timestamp": resolved.timestamp}
    return regex_key(group_id, regex), dumps(value)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member's records deleted, in Kafka's order (current assignment, target, metadata)."""
    return [
        (current_assignment_key(group_id, member_id), None),
        (target_member_key(group_id, member_id), None),
        (member_metadata_key(group_id, member_id), None),
    ]


def group_tombstones(group_id: str, member_ids: list[str], regexes: list[str]) -> list[Record]:
    """Every record of a group deleted, in Kafka's order (``createGroupTombstoneRecords``)."""
    out: list[Record] = [(current_assignment_key(group_id, m), None) for m in member_ids]
    out += [(target_member_key(group_id, m), None) for m in member_ids]
    out.append((target_epoch_key(group_id), None))
    out += [(member_metadata_key(group_id, m), None) for m in member_ids]
    out += [(regex_key(group_id, r), None) for r in regexes]
    out.append((partition_metadata_key(group_id), None))
    out.append((group_epoch_key(group_id), None))
    return out


# -- values, read back --------------------------------------------------------------------------


def _int(d: dict[str, Any], key: str, default: Any = stored.REQUIRED) -> int:
    return stored.field(d, key, int, default)


def _partition_list(d: dict[str, Any], what: str) -> list[int]:
    return list(stored.items_of(stored.field(d, "partitions", list), int, what))


def decode_group_epoch(value: bytes | None) -> int:
    """ConsumerGroupMetadataValue's epoch."""
    return _int(stored.json_object(value), "epoch")


def decode_partition_metadata(value: bytes | None) -> dict[str, TopicMetadata]:
    """ConsumerGroupPartitionMetadataValue: topic name -> its metadata."""
    d = stored.json_object(value)
    out = {}
    for t in stored.items_of(d.get("topics", []), dict, "topics"):
        name = stored.field(t, "topic_name", str)
        out[name] = TopicMetadata(stored.field(t, "topic_id", str), name, _int(t, "num_partitions"))
    return out


def decode_member_metadata(member_id: str, value: bytes | None) -> ConsumerGroupMember:
    """ConsumerGroupMemberMetadataValue as a member without assignment."""
    d = stored.json_object(value)
    classic = None
    raw = stored.field(d, "classic_member_metadata", (dict, type(None)), None)
    if raw is not None:
        protocols = []
        for p in stored.items_of(raw.get("supported_protocols", []), dict, "supported protocols"):
            protocols.append(
                (
                    stored.field(p, "name", str),
                    base64.b64decode(stored.field(p, "metadata", str), validate=True),
                )
            )
        classic = ClassicMemberMetadata(_int(raw, "session_timeout_ms"), tuple(protocols))
    return ConsumerGroupMember(
        member_id,
        instance_id=stored.field(d, "instance_id", (str, type(None)), None),
        rack_id=stored.field(d, "rack_id", (str, type(None)), None),
        client_id=stored.field(d, "client_id", str, ""),
        client_host=stored.field(d, "client_host", str, ""),
        subscribed_topic_names=tuple(
            stored.items_of(d.get("subscribed_topic_names", []), str, "subscribed topic names")
        ),
        subscribed_topic_regex=stored.field(d, "subscribed_topic_regex", (str, type(None)), None),
        rebalance_timeout_ms=_int(d, "rebalance_timeout_ms", -1),
        server_assignor=stored.field(d, "server_assignor", (str, type(None)), None),
        classic=classic,
    )


def decode_target_epoch(value: bytes | None) -> int:
    """ConsumerGroupTargetAssignmentMetadataValue's assignment epoch."""
    return _int(stored.json_object(value), "assignment_epoch")


def decode_target_member(value: bytes | None) -> Assignment:
    """ConsumerGroupTargetAssignmentMemberValue."""
    d = stored.json_object(value)
    out: Assignment = {}
    for t in stored.items_of(d.get("topic_partitions", []), dict, "topic partitions"):
        out[stored.field(t, "topic_id", str)] = frozenset(_partition_list(t, "target partitions"))
    return out


def _decode_epoch_partitions(entries: Any, what: str) -> EpochPartitions:
    out: EpochPartitions = {}
    for t in stored.items_of(entries, dict, what):
        partitions = _partition_list(t, what)
        epochs = list(stored.items_of(t.get("assignment_epochs", []), int, f"{what} epochs"))
        if len(epochs) != len(partitions):
            raise ValueError(f"{what}: {len(partitions)} partitions but {len(epochs)} assignment epochs")
        out[stored.field(t, "topic_id", str)] = dict(zip(partitions, epochs, strict=True))
    return out


def decode_current_assignment(value: bytes | None) -> ConsumerGroupMember:
    """ConsumerGroupCurrentMemberAssignmentValue, as the current fields of a member (its id and
    subscription are filled in by whoever applies it). A state this version does not know is
    UNKNOWN (the member is fenced when it heartbeats next, as Kafka does)."""
    d = stored.json_object(value)
    state_value = _int(d, "state")
    state = MemberState(state_value) if state_value in MemberState._value2member_map_ else MemberState.UNKNOWN
    return ConsumerGroupMember(
        "",
        member_epoch=_int(d, "member_epoch"),
        previous_member_epoch=_int(d, "previous_member_epoch"),
        state=state,
        assigned=_decode_epoch_partitions(d.get("assigned_partitions", []), "assigned partitions"),
        pending_revocation=_decode_epoch_partitions(
            d.get("partitions_pending_revocation", []), "partitions pending revocation"
        ),
    )


def decode_regex(value: bytes | None) -> ResolvedRegex:
    """ConsumerGroupRegularExpressionValue."""
    d = stored.json_object(value)
    return ResolvedRegex(
        frozenset(stored.items_of(d.get("topics", []), str, "regex topics")),
        _int(d, "version", 0),
        _int(d, "timestamp", -1),
    )


# -- applying them ------------------------------------------------------------------------------


def decode_value(key: tuple[Any, ...], value: bytes) -> Any:
    """The value of a consumer group record with key ``key``, read and checked."""
    version = key[0]
    if version == GROUP_EPOCH_KEY:
        return decode_group_epoch(value)
    if version == PARTITION_METADATA_KEY:
        return decode_partition_metadata(value)
    if version == TARGET_EPOCH_KEY:
        return decode_target_epoch(value)
    if version == REGEX_KEY:
        return decode_regex(value)
    if version == TARGET_MEMBER_KEY:
        return decode_target_member(value)
    if version == MEMBER_METADATA_KEY:
        return decode_member_metadata(key[2], value)
    if version == CURRENT_ASSIGNMENT_KEY:
        return decode_current_assignment(value)
    raise ValueError(f"not a consumer group key: {key!r:.60}")


def apply(group: ConsumerGroup, key: tuple[Any, ...], decoded: Any) -> None:
    """Apply a record's value (:func:`decode_value`'s) to its group."""
    version = key[0]
    if version == GROUP_EPOCH_KEY:
        group.group_epoch = decoded
    elif version == PARTITION_METADATA_KEY:
        group.subscription_metadata = decoded
    elif version == TARGET_EPOCH_KEY:
        group.assignment_epoch = decoded
    elif version == REGEX_KEY:
        group.resolved_regexes[key[2]] = decoded
    elif version == TARGET_MEMBER_KEY:
        group.target[key[2]] = decoded
    elif version == MEMBER_METADATA_KEY:
        old = group.members.get(key[2])
        group.put_member(decoded if old is None else old.with_metadata(decoded))
    elif version == CURRENT_ASSIGNMENT_KEY:
        old = group.members.get(key[2]) or ConsumerGroupMember(key[2])
        group.put_member(old.with_current(decoded))


def apply_tombstone(group: ConsumerGroup, key: tuple[Any, ...]) -> None:
    """Apply a record's tombstone to its group (the group's own, its epoch's, is its owner's)."""
    version = key[0]
    if version == PARTITION_METADATA_KEY:
        group.subscription_metadata = {}
    elif version == TARGET_EPOCH_KEY:
        group.assignment_epoch = 0
    elif version == REGEX_KEY:
        group.resolved_regexes.pop(key[2], None)
    elif version == TARGET_MEMBER_KEY:
        group.target.pop(key[2], None)
    elif version == MEMBER_METADATA_KEY:
        group.drop_member(key[2])
    elif version == CURRENT_ASSIGNMENT_KEY:
        old = group.members.get(key[2])
        if old is not None:
            # Kafka's: the member keeps its subscription until its metadata's tombstone, with no
            # epoch and no partitions.
            group.put_member(
                dataclasses.replace(
                    old,
                    member_epoch=-1,
                    previous_member_epoch=-1,
                    state=MemberState.STABLE,
                    assigned={},
                    pending_revocation={},
                )
            )


__all__ = [
    "apply",
    "apply_tombstone",
    "decode_value",
    "CONSUMER_KEYS",
    "CURRENT_ASSIGNMENT_KEY",
    "GROUP_EPOCH_KEY",
    "MEMBER_METADATA_KEY",
    "PARTITION_METADATA_KEY",
    "REGEX_KEY",
    "TARGET_EPOCH_KEY",
    "TARGET_MEMBER_KEY",
    "current_assignment_record",
    "decode_any_key",
    "decode_consumer_key",
    "decode_current_assignment",
    "decode_group_epoch",
    "decode_member_metadata",
    "decode_partition_metadata",
    "decode_regex",
    "decode_target_epoch",
    "decode_target_member",
    "group_epoch_record",
    "group_tombstones",
    "member_metadata_record",
    "member_tombstones",
    "partition_metadata_record",
    "regex_record",
    "target_epoch_record",
    "target_member_record",
]
