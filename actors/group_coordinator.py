"""The GroupCoordinator actor: consumer group membership, assignment and committed offsets.

One named, detached, restartable async actor serves every group of the cluster. Nothing
waits on a lock shared by groups: a join waits on its own future until the group's
rebalance completes (all known members rejoined, or the rebalance timeout — the largest
``max.poll.interval.ms`` of the members, as in Kafka — removed the laggards).

Assignment is server-side: when a rebalance completes, the coordinator picks the protocol
every member supports (each member votes for its most preferred one, as Kafka's
``GroupMetadata.selectProtocol``), runs that assignor (``actors.assignors``; a
user-supplied assignor object travels with the join) and hands each member its part in
``sync_group``. With a cooperative assignor the members keep consuming what they keep.

Kafka clients (through the gateway) assign on the client, as Kafka's classic protocol
has it: their joins carry opaque protocol metadata, the coordinator picks the protocol the
same way, hands every member's metadata to the leader member in its join answer, and
waits (CompletingRebalance) for the leader's SyncGroup to hand each member the opaque
assignment the leader sent. A group is one kind or the other at a time: while it has
members, a member of the other kind is refused (InconsistentGroupProtocolError, as Kafka
refuses a different protocol type); once it is empty either kind may take it over, and
the committed offsets are the same for both.

Durability: offset commits and group metadata are records in the compacted internal
topic ``__consumer_offsets`` (partition = ``abs(javaHashCode(group)) % partitions``, as
Kafka). The encoding is compact JSON (documented at ``offset_key``/``group_key``): keys
are deterministic so compaction keeps the last value per key; a ``None`` value is a
tombstone. A restarted coordinator replays the topic before serving; until then every
call raises the retriable CoordinatorLoadInProgressError.

Transactional offset commits (KIP-98/KIP-447) are transactional batches of the producer's
id and epoch in the group's partition. They stay pending, invisible to ``fetch_offsets``,
until the transaction coordinator reports the transaction's end (``complete_txn``, after
the marker is in the partition): a commit applies them, an abort drops them. Replay does
the same with the markers it reads.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import numbers
import re
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from actors import internal_records as stored
from actors.assignors import EAGER, lookup_assignor, protocol_of
from actors.internal_topic import Coordinator, InternalTopic
from actors.metrics import TICK_S, Recorder
from actors.names import INTERNAL_TOPICS, OFFSETS_TOPIC, offsets_partition_for
from actors.protocol import (
    CompleteTxnRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    GroupLagRequest,
    GroupState,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupResponse,
    TransactionResult,
    TxnOffsetCommitRequest,
    require,
)
from actors.types import (
    GroupDescription,
    JoinGroupResult,
    MemberDescription,
    OffsetAndMetadata,
    PartitionLag,
    TopicPartition,
)
from storage.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    KafkaError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from storage.log import LATEST_TIMESTAMP
from storage.records.control import CONTROL_ABORT, CONTROL_COMMIT
from storage.records.reader import RecordBatch

logger = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"


# Record key versions, as Kafka's: 0/1 are offset commits, 2 is group metadata.
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2

_TICK_S = 0.1  # how often expiry and rebalance deadlines are checked


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def offset_key(group_id: str, tp: TopicPartition) -> bytes:
    """Key of an offset commit: JSON ``[1, group, topic, partition]``."""
    return _dumps([OFFSET_KEY_VERSION, group_id, tp.topic, tp.partition])


def group_key(group_id: str) -> bytes:
    """Key of a group's metadata: JSON ``[2, group]``."""
    return _dumps([GROUP_KEY_VERSION, group_id])


def encode_offset(om: OffsetAndMetadata) -> bytes:
    """Value of an offset commit: JSON ``{"offset", "metadata", "commit_timestamp", "leader_epoch"}``."""
    return _dumps(
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


def _now_ms() -> int:
    return int(time.time() * 1000)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[str]
    topics: tuple[str, ...]
    pattern: str | None
    owned: list[TopicPartition] = field(default_factory=list)
    assignment: list[TopicPartition] = field(default_factory=list)
    session_deadline: float = 0.0
    poll_deadline: float = 0.0
    join_future: asyncio.Future | None = None
    metadata: dict[str, bytes] | None = None  # a client-assigning member's, by protocol
    member_assignment: bytes = b""  # the leader's opaque assignment for it
    client_host: str = ""  # a Kafka client's "/<address>", as DescribeGroups shows it

    def touch(self, poll_age_ms: int = 0) -> None:
        now = time.monotonic()
        self.session_deadline = now + self.session_timeout_ms / 1000
        self.poll_deadline = now + max(0, self.rebalance_timeout_ms - poll_age_ms) / 1000

    def to_record(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "client_id": self.client_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocols": self.protocols,
            "topics": list(self.topics),
            "pattern": self.pattern,
            "assignment": [[tp.topic, tp.partition] for tp in self.assignment],
            "metadata": None if self.metadata is None else {k: _b64(v) for k, v in self.metadata.items()},
            "member_assignment": _b64(self.member_assignment),
            "client_host": self.client_host,
        }

    @classmethod
    def from_record(cls, d: Any) -> _Member:
        """A member as its group's record stored it; ValueError/TypeError/KeyError when the
        record is not one (every field checked before anything is built)."""
        if not isinstance(d, dict):
            raise TypeError(f"a member is {type(d).__name__}, not an object")
        m = cls(
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
        m.touch()
        return m


@dataclass
class _Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol: str = ""
    rebalance_protocol: str = EAGER
    leader: str = ""
    members: dict[str, _Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    assignors: dict[str, Any] = field(default_factory=dict)  # user-supplied, by name
    snapshot: dict[str, int] = field(default_factory=dict)  # topic -> partitions of the current assignment
    state_timestamp_ms: int = field(default_factory=_now_ms)
    rebalance_deadline: float = 0.0
    not_before: float = 0.0  # group.initial.rebalance.delay.ms for a group that was empty
    client_assigned: bool = False  # its members are Kafka clients: the leader member assigns
    sync_waiters: list[asyncio.Future] = field(default_factory=list)  # followers' SyncGroups
    pending_ids: dict[str, float] = field(default_factory=dict)  # KIP-394 ids handed out -> expiry

    def to_record(self) -> dict[str, Any]:
        return {
            "protocol_type": PROTOCOL_TYPE,
            "generation": self.generation,
            "protocol": self.protocol,
            "rebalance_protocol": self.rebalance_protocol,
            "leader": self.leader,
            "state_timestamp": self.state_timestamp_ms,
            "snapshot": self.snapshot,
            "client_assigned": self.client_assigned,
            "members": [m.to_record() for m in self.members.values()],
        }

    def load_record(self, d: dict[str, Any]) -> None:
        """Take the group's stored metadata; a record that is not one raises
        ValueError/TypeError/KeyError before anything changes."""
        generation = stored.field(d, "generation", int)
        protocol = stored.field(d, "protocol", str, "")
        rebalance_protocol = stored.field(d, "rebalance_protocol", str, EAGER)
        leader = stored.field(d, "leader", str, "")
        state_timestamp_ms = stored.field(d, "state_timestamp", int, _now_ms())
        snapshot = stored.field(d, "snapshot", dict, {})
        stored.items_of(list(snapshot.values()), int, "snapshot")
        client_assigned = stored.field(d, "client_assigned", bool, False)
        members = [_Member.from_record(md) for md in stored.items_of(d.get("members", []), dict, "members")]
        self.generation, self.protocol, self.rebalance_protocol = generation, protocol, rebalance_protocol
        self.leader, self.state_timestamp_ms, self.snapshot = leader, state_timestamp_ms, dict(snapshot)
        self.client_assigned = client_assigned
        self.members = {}
        self.static = {}
        for m in members:
            self.members[m.member_id] = m
            if m.instance_id:
                self.static[m.instance_id] = m.member_id
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY


class GroupCoordinator(Coordinator):
    """Consumer groups of one rayqueue cluster (see the module docstring)."""

    _kind = "group coordinator"

    def __init__(self, namespace: str, config: dict[str, Any]) -> None:
        super().__init__(namespace, config)
        self._topic = InternalTopic(
            OFFSETS_TOPIC,
            self._controller_handle,
            self._config["offsets.topic.num.partitions"],
            self._config["offsets.topic.replication.factor"],
        )
        self._groups: dict[str, _Group] = {}
        self._write_locks: dict[int, asyncio.Lock] = {}  # __consumer_offsets partition -> its writes, in order
        self._topic_counts: dict[str, int] = {}
        self._check_interval_s = self._config["rayqueue.group.metadata.check.interval.ms"] / 1000
        self._initial_delay_s = self._config["group.initial.rebalance.delay.ms"] / 1000
        self._retention_ms = self._config["offsets.retention.minutes"] * 60_000
        self._retention_check_s = self._config["offsets.retention.check.interval.ms"] / 1000
        # Transactional offset commits not yet ended: producer id -> group -> partition -> offset.
        self._pending: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        # The high watermarks learnt from partition leaders, for lag without a consumer.
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._lag_refresh_s = self._config["rayqueue.group.lag.refresh.interval.ms"] / 1000
        self._recorder = Recorder(namespace, True) if self._config["rayqueue.metrics.enabled"] else None
        self._exported_groups: set[str] = set()
        self._exported_offsets: set[tuple[str, TopicPartition]] = set()
        self._skipped = 0  # unreadable __consumer_offsets records skipped by the load

    # -- lifecycle (the rest is Coordinator's) --------------------------------------------

    def _count(self) -> int:
        return len(self._groups)

    async def _load(self) -> None:
        """Replay ``__consumer_offsets`` into the cache (a restarted coordinator's first job).
        A record it cannot read is skipped, logged and counted (``skipped_records``)."""
        started = time.monotonic()
        records = 0
        skipped = stored.SkippedRecords(OFFSETS_TOPIC, self._count_skipped)
        async for p, batch, first in self._topic.replay():
            records += self._replay_batch(p, batch, first, skipped)
        for group in self._groups.values():
            for m in group.members.values():
                m.touch()
        self._skipped += skipped.count
        self._loaded = True
        logger.info(
            "group coordinator loaded %d groups from %d records in %.2fs (%d unreadable records skipped)",
            len(self._groups),
            records,
            time.monotonic() - started,
            skipped.count,
        )

    def _count_skipped(self, topic: str) -> None:
        if self._recorder is not None:
            self._recorder.add(self._recorder.metrics.internal_records_skipped, 1, (("topic", topic),))

    async def skipped_records(self) -> int:
        """How many unreadable ``__consumer_offsets`` records this actor's load skipped."""
        return self._skipped

    def _replay_batch(self, p: int, batch: RecordBatch, first: int, skipped: stored.SkippedRecords) -> int:
        """Apply one batch of partition ``p`` read on load, from offset ``first``; returns how
        many records it held. What cannot be read is skipped (``skipped``)."""
        count = 0
        if batch.is_control:
            if batch.base_offset < first:
                return 0
            try:
                marker = batch.control_record()
            except Exception as exc:  # noqa: BLE001 - an unreadable marker is skipped like any record
                skipped.skip(p, batch.base_offset, exc)
                return 0
            if marker.type in (CONTROL_ABORT, CONTROL_COMMIT):
                self._end_pending(batch.producer_id, marker.is_commit, partition=p)
            return 0
        apply = functools.partial(self._apply_pending, batch.producer_id) if batch.is_transactional else self._apply
        for record in skipped.records(p, batch, first):
            try:
                apply(record.key, record.value)
            except stored.READ_ERRORS as exc:
                skipped.skip(p, record.offset, exc)
                continue
            count += 1
        return count

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one ``__consumer_offsets`` record to the cache (replay). A record that is not
        one the coordinator writes raises ValueError/TypeError/KeyError and changes nothing."""
        k = decode_key(key)
        if k[0] == OFFSET_KEY_VERSION:
            _, group_id, topic, partition = k
            tp = TopicPartition(topic, partition)
            if value is None:
                group = self._groups.get(group_id)
                if group is not None:
                    group.offsets.pop(tp, None)
                    self._drop_if_unused(group)
            else:
                offset = decode_offset(value)
                self._groups.setdefault(group_id, _Group(group_id)).offsets[tp] = offset
        else:
            group_id = k[1]
            if value is None:
                group = self._groups.get(group_id)
                if group is not None:
                    group.members.clear()
                    group.static.clear()
                    group.state = GroupState.EMPTY
                    self._drop_if_unused(group)
            else:
                record = stored.json_object(value)
                group = self._groups.get(group_id) or _Group(group_id)
                group.load_record(record)  # checks every field before it changes the group
                self._groups[group_id] = group

    def _apply_pending(self, producer_id: int, key: bytes | None, value: bytes | None) -> None:
        """A transactional offset commit read on replay: pending until its marker."""
        k = decode_key(key)
        if k[0] != OFFSET_KEY_VERSION:
            raise ValueError(f"a transactional batch holds a group record (key {k!r:.60})")
        _, group_id, topic, partition = k
        offset = decode_offset(value)
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {})[TopicPartition(topic, partition)] = offset

    def _end_pending(self, producer_id: int, committed: bool, partition: int | None = None) -> int:
        """Apply (commit) or drop (abort) a producer's pending offsets; only the groups of
        ``__consumer_offsets`` partition ``partition`` when given (a marker read on replay)."""
        groups = self._pending.get(producer_id)
        if not groups:
            return 0
        done = [
            g for g in groups if partition is None or offsets_partition_for(g, self._topic.num_partitions) == partition
        ]
        count = 0
        for group_id in done:
            offsets = groups.pop(group_id)
            count += len(offsets)
            if committed:
                self._groups.setdefault(group_id, _Group(group_id)).offsets.update(offsets)
        if not groups:
            del self._pending[producer_id]
        return count

    def _drop_if_unused(self, group: _Group) -> None:
        if not group.members and not group.offsets and group.state == GroupState.EMPTY:
            self._groups.pop(group.group_id, None)

    # -- membership -----------------------------------------------------------------------

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResult:
        """Join (or rejoin) a group (Kafka's JoinGroup); returns when the rebalance completes.

        ``member_id`` is "" for a new member (the coordinator names it). ``protocols`` are
        assignor names in preference order; ``assignors`` carries user-supplied ones by
        name. ``owned_partitions`` is what the member holds now (the cooperative protocol
        keeps it).
        """
        require(request, JoinGroupRequest)
        group_id, member_id, group_instance_id = request.group_id, request.member_id, request.group_instance_id
        client_id, protocols, topics, pattern = request.client_id, request.protocols, request.topics, request.pattern
        session_timeout_ms, rebalance_timeout_ms = request.session_timeout_ms, request.rebalance_timeout_ms
        owned, assignors = request.owned_partitions, request.assignors
        wire = request.metadata is not None
        self._check_loaded()
        _check_group_id(group_id)
        if not protocols:
            raise InconsistentGroupProtocolError("a member must support at least one assignor")
        if wire and len(request.metadata) != len(protocols):
            raise InvalidRequestError("one protocol metadata per protocol is required")
        if pattern is not None or any(t not in self._topic_counts for t in topics):
            await self._refresh_metadata()
        group = self._groups.setdefault(group_id, _Group(group_id))
        if group.members and group.client_assigned != wire:
            kinds = ("rayqueue consumers", "Kafka clients") if wire else ("Kafka clients", "rayqueue consumers")
            raise InconsistentGroupProtocolError(
                f"group {group_id!r} has members that are {kinds[0]}; {kinds[1]} cannot join it until it is empty"
            )
        if group.members and not self._common_protocols(group, extra=protocols):
            raise InconsistentGroupProtocolError(
                f"no assignor of {protocols} is supported by every member of {group_id!r}"
            )
        if wire and request.require_known_member_id and not member_id and not group_instance_id:
            # KIP-394: name the member first, so that a client which times out and retries
            # its join does not leave a phantom member behind.
            new_id = f"{client_id}-{uuid.uuid4()}"
            group.pending_ids[new_id] = time.monotonic() + session_timeout_ms / 1000
            return JoinGroupResult(-1, new_id, "", "", EAGER, member_id_required=True)
        if not group.members:
            group.client_assigned = wire
        topics_t = tuple(sorted(set(topics)))
        if group_instance_id:
            known = group.static.get(group_instance_id)
            if known and member_id and member_id != known:
                raise FencedInstanceIdError(f"instance {group_instance_id!r} is now member {known!r}")
            if known and not member_id:
                # A static member restarted: it takes over its old identity and, when
                # nothing it asked for changed, its partitions without a rebalance.
                member_id = self._replace_static_member(group, known, group_instance_id)
                member = group.members[member_id]
                unchanged = (
                    member.protocols == list(protocols) and member.topics == topics_t and member.pattern == pattern
                )
                if wire:
                    # A client-assigning leader must see the members' metadata again.
                    new_meta = dict(zip(protocols, request.metadata, strict=True))
                    unchanged = unchanged and member.metadata == new_meta and group.leader != member_id
                    unchanged = unchanged and group.state == GroupState.STABLE
                if unchanged and group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                    member.client_id = client_id
                    member.client_host = request.client_host
                    member.touch()
                    self._persist_group(group)
                    return JoinGroupResult(
                        group.generation, member_id, group.protocol, group.leader, group.rebalance_protocol
                    )
            elif not known:
                member_id = member_id or f"{group_instance_id}-{uuid.uuid4()}"
        elif member_id and member_id not in group.members and group.pending_ids.pop(member_id, None) is None:
            raise UnknownMemberIdError(f"unknown member {member_id!r} of group {group_id!r}")
        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
        member = group.members.get(member_id)
        if member is None:
            member = _Member(
                member_id, group_instance_id, client_id, session_timeout_ms, rebalance_timeout_ms, [], topics_t, pattern
            )
            group.members[member_id] = member
            if group_instance_id:
                group.static[group_instance_id] = member_id
            if not group.leader:
                group.leader = member_id
        member.client_id = client_id
        member.client_host = request.client_host
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.protocols = list(protocols)
        member.topics = topics_t
        member.pattern = pattern
        member.owned = list(owned or [])
        member.metadata = dict(zip(protocols, request.metadata, strict=True)) if wire else None
        member.touch()
        group.assignors.update(assignors or {})
        if member.join_future is None or member.join_future.done():
            member.join_future = asyncio.get_running_loop().create_future()
        future = member.join_future
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member_id} joined")
        self._maybe_complete_join(group)
        try:
            return await asyncio.wait_for(asyncio.shield(future), rebalance_timeout_ms / 1000 + 5)
        except TimeoutError:
            raise RebalanceInProgressError(f"rebalance of {group_id!r} did not complete in time; rejoin") from None

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        """This member's assignment for ``generation_id`` (Kafka's SyncGroup; computed when
        the join completed)."""
        require(request, SyncGroupRequest)
        group_id, generation_id = request.group_id, request.generation_id
        self._check_loaded()
        group, member = self._member(group_id, request.member_id, request.group_instance_id)
        if group.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing; rejoin")
        if generation_id != group.generation:
            raise IllegalGenerationError(
                f"generation {generation_id} of {group_id!r} is not the current {group.generation}"
            )
        member.touch()
        if group.client_assigned and group.state == GroupState.COMPLETING_REBALANCE:
            if request.member_id == group.leader:
                self._take_assignment(group, request)
            else:
                waiter = asyncio.get_running_loop().create_future()
                group.sync_waiters.append(waiter)
                timeout = max(m.rebalance_timeout_ms for m in group.members.values()) / 1000
                try:
                    await asyncio.wait_for(asyncio.shield(waiter), timeout)
                except TimeoutError:
                    raise RebalanceInProgressError(f"the leader of {group_id!r} did not assign in time") from None
                member.touch()
        return SyncGroupResponse(tuple(member.assignment), member.member_assignment)

    def _take_assignment(self, group: _Group, request: SyncGroupRequest) -> None:
        """The leader member's SyncGroup: every member's opaque assignment; the group is stable."""
        assignments = request.assignments or {}
        decoded = request.assigned_partitions or {}
        for mid, m in group.members.items():
            m.member_assignment = bytes(assignments.get(mid, b""))
            m.assignment = sorted(decoded.get(mid, ()))
            m.owned = list(m.assignment)
        group.state = GroupState.STABLE
        waiters, group.sync_waiters = group.sync_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        logger.info(
            "group %s: generation %d stable with %d members (%s, assigned by leader %s)",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol,
            group.leader,
        )
        self._persist_group(group)

    async def heartbeat(self, request: HeartbeatRequest) -> None:
        """Keep the member alive (Kafka's Heartbeat); ``poll_age_ms`` is the time since its
        application last polled.

        Raises RebalanceInProgressError when the member must rejoin, IllegalGenerationError /
        UnknownMemberIdError when it was fenced out, FencedInstanceIdError for a zombie static member.
        """
        require(request, HeartbeatRequest)
        group_id, generation_id = request.group_id, request.generation_id
        self._check_loaded()
        group, member = self._member(group_id, request.member_id, request.group_instance_id)
        member.touch(request.poll_age_ms)
        if group.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing; rejoin")
        if generation_id != group.generation:
            raise IllegalGenerationError(
                f"generation {generation_id} of {group_id!r} is not the current {group.generation}"
            )

    async def leave_group(self, request: LeaveGroupRequest) -> None:
        """Leave at once (Kafka's LeaveGroup: a rebalance starts without waiting for the
        session timeout)."""
        require(request, LeaveGroupRequest)
        self._check_loaded()
        group, _ = self._member(request.group_id, request.member_id, request.group_instance_id)
        self._remove_member(group, request.member_id, "left the group")

    # -- offsets --------------------------------------------------------------------------

    async def commit_offsets(self, request: OffsetCommitRequest) -> None:
        """Commit offsets (Kafka's OffsetCommit) once they are durable in ``__consumer_offsets``.

        Generation -1 with no member id is a standalone commit, allowed only while the group
        has no members (Kafka's rule).
        """
        require(request, OffsetCommitRequest)
        group_id, member_id, group_instance_id = request.group_id, request.member_id, request.group_instance_id
        generation_id, offsets = request.generation_id, request.offsets
        self._check_loaded()
        _check_group_id(group_id)
        group = self._groups.get(group_id)
        if generation_id < 0 and not member_id:
            if group is not None and group.members:
                raise UnknownMemberIdError(f"group {group_id!r} has members; a standalone commit is refused")
        else:
            if group is None:
                raise IllegalGenerationError(f"group {group_id!r} has no generation {generation_id}")
            group, member = self._member(group_id, member_id, group_instance_id)
            if generation_id != group.generation:
                raise IllegalGenerationError(
                    f"generation {generation_id} of {group_id!r} is not the current {group.generation}"
                )
            if group.state == GroupState.COMPLETING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id!r} is completing a rebalance")
            member.touch()
        if self._recorder is not None:
            self._recorder.add(self._recorder.metrics.offset_commits, 1, (("group", group_id),))
        await self._store_offsets(group_id, offsets)

    async def _store_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        values = _offset_values(offsets)
        if not values:
            return
        await self._append(group_id, [(offset_key(group_id, tp), encode_offset(om)) for tp, om in values.items()])
        group = self._groups.setdefault(group_id, _Group(group_id))
        group.offsets.update(values)

    async def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> None:
        """TxnOffsetCommit: write offsets as part of the producer's transaction.

        They are written as a transactional batch (the producer's id and epoch) to the
        group's partition and stay pending until the transaction ends (``complete_txn``).
        With a member id the member and generation are checked as ``commit_offsets`` does
        (KIP-447), so a zombie of an older generation cannot commit. A stale producer
        epoch raises ProducerFencedError.
        """
        require(request, TxnOffsetCommitRequest)
        group_id, member_id, group_instance_id = request.group_id, request.member_id, request.group_instance_id
        generation_id, offsets = request.generation_id, request.offsets
        producer_id, producer_epoch = request.producer_id, request.producer_epoch
        self._check_loaded()
        _check_group_id(group_id)
        if member_id:
            group, member = self._member(group_id, member_id, group_instance_id)
            if generation_id >= 0 and generation_id != group.generation:
                raise IllegalGenerationError(
                    f"generation {generation_id} of {group_id!r} is not the current {group.generation}"
                )
            member.touch()
        values = _offset_values(offsets)
        if not values:
            return
        records = [(offset_key(group_id, tp), encode_offset(om)) for tp, om in values.items()]
        await self._append(group_id, records, producer_id=producer_id, producer_epoch=producer_epoch)
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(values)

    async def complete_txn(self, request: CompleteTxnRequest) -> int:
        """The producer's transaction ended and its marker is in ``__consumer_offsets``: its
        pending offsets apply (commit) or vanish (abort). Returns how many there were."""
        require(request, CompleteTxnRequest)
        self._check_loaded()
        return self._end_pending(request.producer_id, request.transaction_result == TransactionResult.COMMIT)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of a group (Kafka's OffsetFetch; all, or of ``partitions``);
        partitions without one are absent.

        With ``require_stable`` (KIP-447) a partition with a transactional commit still
        pending raises the retriable UnstableOffsetCommitError instead.
        """
        require(request, OffsetFetchRequest)
        group_id, partitions = request.group_id, request.partitions
        self._check_loaded()
        if request.require_stable:
            pending = {tp for groups in self._pending.values() for tp in groups.get(group_id, ())}
            unstable = pending if partitions is None else pending.intersection(partitions)
            if unstable:
                raise UnstableOffsetCommitError(
                    f"group {group_id!r} has transactional offset commits pending for {sorted(unstable)}"
                )
        group = self._groups.get(group_id)
        if group is None:
            return {}
        if partitions is None:
            return dict(group.offsets)
        return {tp: group.offsets[tp] for tp in partitions if tp in group.offsets}

    # -- admin ----------------------------------------------------------------------------

    async def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, state, protocol type) of every group."""
        self._check_loaded()
        return sorted((g.group_id, g.state, PROTOCOL_TYPE) for g in self._groups.values())

    async def describe_groups(self, request: DescribeGroupsRequest) -> list[GroupDescription]:
        """State, protocol, generation and members with assignments (Kafka's DescribeGroups);
        unknown groups show as Dead."""
        require(request, DescribeGroupsRequest)
        self._check_loaded()
        out = []
        for gid in request.groups:
            g = self._groups.get(gid)
            if g is None:
                out.append(GroupDescription(gid, GroupState.DEAD, "", "", -1, "", ()))
                continue
            members = tuple(
                MemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.topics,
                    tuple(m.assignment),
                    (m.metadata or {}).get(g.protocol, b""),
                    m.member_assignment,
                    m.client_host,
                )
                for m in g.members.values()
            )
            out.append(GroupDescription(gid, g.state, PROTOCOL_TYPE, g.protocol, g.generation, g.leader, members))
        return out

    async def group_lag(self, request: GroupLagRequest) -> dict[TopicPartition, PartitionLag]:
        """A group's lag per partition, from its committed offsets and the partitions' high
        watermarks, asked of their leaders now (``kafka-consumer-groups --describe``).

        Covers the partitions the group committed for or is assigned, plus every partition of
        ``request.topics``; a partition never committed counts its whole log as lag.
        """
        require(request, GroupLagRequest)
        self._check_loaded()
        group = self._groups.get(request.group_id)
        committed = dict(group.offsets) if group is not None else {}
        partitions = set(committed)
        if group is not None:
            for m in group.members.values():
                partitions.update(m.assignment)
        if request.topics:
            md = await self._controller_handle().get_metadata.remote(MetadataRequest(tuple(request.topics)))
            for t in md.topics.values():
                partitions.update(TopicPartition(t.name, p.partition) for p in t.partitions)
        await self._refresh_high_watermarks(partitions)
        out = {}
        for tp in sorted(partitions):
            end = self._high_watermarks.get(tp, 0)
            om = committed.get(tp)
            out[tp] = PartitionLag(om.offset if om else None, end, max(0, end - (om.offset if om else 0)))
        return out

    async def _refresh_quietly(self) -> None:
        try:
            partitions = {tp for g in self._groups.values() for tp in g.offsets}
            await self._refresh_high_watermarks(partitions)
        except Exception:  # noqa: BLE001 - the next refresh tries again; lag keeps its last value
            logger.warning("could not learn high watermarks for group lag", exc_info=True)

    async def _refresh_high_watermarks(self, partitions: set[TopicPartition]) -> None:
        """Ask each partition's leader for its high watermark: one metadata call, then the
        leaders all at once (never per commit). A leader that fails keeps its last value."""
        topics = tuple(sorted({tp.topic for tp in partitions}))
        if not topics:
            return
        md = await self._controller_handle().get_metadata.remote(MetadataRequest(topics))
        asked: list[tuple[TopicPartition, Any]] = []
        for tp in partitions:
            t = md.topics.get(tp.topic)
            if t is None or tp.partition >= len(t.partitions):
                continue
            p = t.partitions[tp.partition]
            if p.leader_handle is not None:
                asked.append(
                    (tp, p.leader_handle.list_offsets.remote(ListOffsetsRequest(LATEST_TIMESTAMP, p.leader_epoch)))
                )
        answers = await asyncio.gather(*(ref for _, ref in asked), return_exceptions=True)
        for (tp, _), answer in zip(asked, answers, strict=True):
            if not isinstance(answer, BaseException):
                self._high_watermarks[tp] = answer.offset

    def _record_metrics(self) -> None:
        """Summed counters to Ray; groups, members, states, committed offsets and lag as gauges."""
        rec = self._recorder
        m = rec.metrics
        rec.flush()
        by_state = dict.fromkeys(GroupState, 0)
        offsets: set[tuple[str, TopicPartition]] = set()
        for gid, g in self._groups.items():
            by_state[g.state] += 1
            m.group_members.set(len(g.members), rec.tags(group=gid))
            for state in GroupState:
                m.group_state.set(1 if g.state == state else 0, rec.tags(group=gid, state=state.value))
            for tp, om in g.offsets.items():
                tags = rec.tags(group=gid, topic=tp.topic, partition=tp.partition)
                m.group_committed_offset.set(om.offset, tags)
                hw = self._high_watermarks.get(tp)
                if hw is not None:
                    m.group_lag.set(max(0, hw - om.offset), tags)
                offsets.add((gid, tp))
        for state, count in by_state.items():
            m.groups.set(count, rec.tags(state=state.value))
        # Groups and offsets that went away drop to zero rather than keep their last value.
        for gid in self._exported_groups - set(self._groups):
            m.group_members.set(0, rec.tags(group=gid))
            for state in GroupState:
                m.group_state.set(0, rec.tags(group=gid, state=state.value))
        for gid, tp in self._exported_offsets - offsets:
            m.group_lag.set(0, rec.tags(group=gid, topic=tp.topic, partition=tp.partition))
        self._exported_groups, self._exported_offsets = set(self._groups), offsets

    async def alter_offsets(self, request: OffsetCommitRequest) -> None:
        """Set committed offsets of a group that has no members (NonEmptyGroupError otherwise):
        Kafka's AlterConsumerGroupOffsets, a standalone OffsetCommit (no member, generation -1)."""
        require(request, OffsetCommitRequest)
        group_id = request.group_id
        self._check_loaded()
        _check_group_id(group_id)
        group = self._groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroupError(f"group {group_id!r} has {len(group.members)} members; stop them first")
        await self._store_offsets(group_id, request.offsets)

    async def delete_groups(self, request: DeleteGroupsRequest) -> dict[str, KafkaError | None]:
        """Delete empty groups with their offsets (Kafka's DeleteGroups); per group None or the error."""
        require(request, DeleteGroupsRequest)
        self._check_loaded()
        out: dict[str, KafkaError | None] = {}
        for gid in request.groups_names:
            group = self._groups.get(gid)
            if group is None:
                out[gid] = GroupIdNotFoundError(f"group {gid!r} does not exist")
            elif group.members:
                out[gid] = NonEmptyGroupError(f"group {gid!r} has {len(group.members)} members")
            else:
                await self._delete_group(group)
                out[gid] = None
        return out

    async def delete_offsets(self, request: OffsetDeleteRequest) -> dict[TopicPartition, KafkaError | None]:
        """Delete committed offsets of some partitions (Kafka's OffsetDelete); per partition
        None or the error. GroupIdNotFoundError for a group that has none; a partition whose
        topic a member subscribes to keeps its offset (GroupSubscribedToTopicError)."""
        require(request, OffsetDeleteRequest)
        self._check_loaded()
        _check_group_id(request.group_id)
        group = self._groups.get(request.group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {request.group_id!r} does not exist")
        subscribed = {t for m in group.members.values() for t in m.topics}
        subscribed.update(tp.topic for m in group.members.values() for tp in m.assignment)
        out: dict[TopicPartition, KafkaError | None] = {}
        gone = []
        for tp in request.partitions:
            if tp.topic in subscribed:
                out[tp] = GroupSubscribedToTopicError(f"a member of {request.group_id!r} subscribes to {tp.topic!r}")
            else:
                out[tp] = None
                if tp in group.offsets:
                    gone.append(tp)
        if gone:
            await self._append(group.group_id, [(offset_key(group.group_id, tp), None) for tp in gone])
            for tp in gone:
                group.offsets.pop(tp, None)
            self._drop_if_unused(group)
        return out

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Expire offsets of groups empty for ``offsets.retention.minutes`` (Kafka 2.1+ rule:
        the clock starts when the group became empty); returns how many expired."""
        self._check_loaded()
        now = _now_ms() if now_ms is None else now_ms
        expired = 0
        for group in list(self._groups.values()):
            if group.members or group.state != GroupState.EMPTY:
                continue
            gone = [
                tp
                for tp, om in group.offsets.items()
                if now - max(group.state_timestamp_ms, om.commit_timestamp) >= self._retention_ms
            ]
            if not gone:
                continue
            if len(gone) == len(group.offsets):
                await self._delete_group(group)
            else:
                await self._append(group.group_id, [(offset_key(group.group_id, tp), None) for tp in gone])
                for tp in gone:
                    group.offsets.pop(tp, None)
            expired += len(gone)
        if expired:
            logger.info("expired %d committed offsets", expired)
        return expired

    async def _delete_group(self, group: _Group) -> None:
        gid = group.group_id
        records: list[tuple[bytes, bytes | None]] = [(offset_key(gid, tp), None) for tp in group.offsets]
        records.append((group_key(gid), None))
        await self._append(gid, records)
        group.state = GroupState.DEAD
        self._groups.pop(gid, None)

    # -- rebalancing ----------------------------------------------------------------------

    def _prepare_rebalance(self, group: _Group, reason: str) -> None:
        was_empty = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        now = time.monotonic()
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
        group.rebalance_deadline = now + timeout
        group.not_before = now + min(self._initial_delay_s, timeout) if was_empty else 0.0
        waiters, group.sync_waiters = group.sync_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(RebalanceInProgressError(f"group {group.group_id!r} is rebalancing; rejoin"))
        logger.info("group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation, reason)

    def _maybe_complete_join(self, group: _Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or time.monotonic() < group.not_before:
            return
        if all(m.join_future is not None for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        """Every member rejoined (or was dropped): next generation, assignment, answers."""
        group.generation += 1
        group.state_timestamp_ms = _now_ms()
        if self._recorder is not None:
            self._recorder.add(self._recorder.metrics.group_rebalances, 1, (("group", group.group_id),))
        if not group.members:
            group.state, group.protocol, group.leader, group.snapshot = GroupState.EMPTY, "", "", {}
            self._persist_group(group)
            return
        members = group.members
        if group.leader not in members:
            group.leader = next(iter(members))
        if group.client_assigned:
            self._complete_client_join(group)
            return
        try:
            protocol = self._select_protocol(group)
            assignor = lookup_assignor(protocol, group.assignors)
            subs = {mid: self._resolve(m) for mid, m in members.items()}
            counts = {t: self._topic_counts[t] for ts in subs.values() for t in ts if t in self._topic_counts}
            cooperative = protocol_of(assignor) != EAGER
            current = {mid: (m.owned if cooperative else m.assignment) for mid, m in members.items()}
            assignment = assignor.assign(subs, counts, current)
            _check_assignment(assignment, subs, counts)
        except Exception as exc:  # noqa: BLE001 - a bad user assignor must not kill the coordinator
            logger.exception("group %s: assignment failed", group.group_id)
            error = (
                exc if isinstance(exc, KafkaError) else InconsistentGroupProtocolError(f"assignment failed: {exc!r}")
            )
            _fail_joins(group, error)
            return
        group.protocol = protocol
        group.rebalance_protocol = protocol_of(assignor)
        group.snapshot = counts
        group.state = GroupState.STABLE
        for mid, m in members.items():
            m.assignment = sorted(assignment.get(mid, []))
            m.touch()
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(
                    JoinGroupResult(group.generation, mid, protocol, group.leader, group.rebalance_protocol)
                )
            m.join_future = None
        logger.info(
            "group %s: generation %d stable with %d members (%s)",
            group.group_id,
            group.generation,
            len(members),
            protocol,
        )
        self._persist_group(group)

    def _complete_client_join(self, group: _Group) -> None:
        """A rebalance of Kafka clients completed: the leader gets every member's metadata
        for the chosen protocol and will assign in its SyncGroup."""
        members = group.members
        try:
            protocol = self._select_protocol(group)
        except KafkaError as error:
            _fail_joins(group, error)
            return
        group.protocol = protocol
        try:
            group.rebalance_protocol = protocol_of(lookup_assignor(protocol, {}))
        except Exception:  # noqa: BLE001 - an assignor rayqueue does not have: informational only
            group.rebalance_protocol = EAGER
        group.state = GroupState.COMPLETING_REBALANCE
        everyone = tuple((mid, m.instance_id, (m.metadata or {}).get(protocol, b"")) for mid, m in members.items())
        for mid, m in members.items():
            m.touch()
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(
                    JoinGroupResult(
                        group.generation,
                        mid,
                        protocol,
                        group.leader,
                        group.rebalance_protocol,
                        members=everyone if mid == group.leader else (),
                    )
                )
            m.join_future = None
        logger.info(
            "group %s: generation %d joined by %d members; leader %s assigns (%s)",
            group.group_id,
            group.generation,
            len(members),
            group.leader,
            protocol,
        )

    def _common_protocols(self, group: _Group, extra: list[str] | None = None) -> list[str]:
        lists = [m.protocols for m in group.members.values()] + ([extra] if extra else [])
        common = set(lists[0]).intersection(*lists[1:]) if lists else set()
        return [p for p in lists[0] if p in common] if lists else []

    def _select_protocol(self, group: _Group) -> str:
        candidates = self._common_protocols(group)
        if not candidates:
            raise InconsistentGroupProtocolError(f"members of {group.group_id!r} share no assignor")
        votes = Counter(next(p for p in m.protocols if p in candidates) for m in group.members.values())
        best = max(votes.values())
        # Ties go to the earliest in the first member's preference order.
        return next(p for p in candidates if votes.get(p) == best)

    def _resolve(self, member: _Member) -> list[str]:
        topics = set(member.topics)
        if member.pattern is not None:
            regex = re.compile(member.pattern)
            topics.update(t for t in self._topic_counts if t not in INTERNAL_TOPICS and regex.fullmatch(t))
        return sorted(topics)

    def _replace_static_member(self, group: _Group, old_id: str, instance_id: str) -> str:
        member = group.members.pop(old_id)
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_exception(
                FencedInstanceIdError(f"instance {instance_id!r} rejoined as a new member")
            )
            member.join_future = None
        new_id = f"{instance_id}-{uuid.uuid4()}"
        member.member_id = new_id
        group.members[new_id] = member
        group.static[instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        return new_id

    def _remove_member(self, group: _Group, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.instance_id and group.static.get(member.instance_id) == member_id:
            del group.static[member.instance_id]
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_exception(UnknownMemberIdError(f"member {member_id} was removed: {reason}"))
        logger.info("group %s: member %s removed: %s", group.group_id, member_id, reason)
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member_id} {reason}")
        self._maybe_complete_join(group)

    # -- background: expiry, rebalance deadlines, metadata changes, offset retention ------

    async def _background_loop(self) -> None:
        next_check = next_metrics = next_lag = time.monotonic()
        next_retention = time.monotonic() + self._retention_check_s
        while True:
            await asyncio.sleep(_TICK_S)
            if not self._loaded:
                continue
            try:
                self._tick()
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + self._check_interval_s
                    await self._check_subscriptions()
                if now >= next_retention:
                    next_retention = now + self._retention_check_s
                    await self.expire_offsets()
                if self._recorder is not None and now >= next_lag:
                    next_lag = now + self._lag_refresh_s
                    # A task of its own: leaders that are slow to answer must not hold up expiry.
                    asyncio.get_running_loop().create_task(self._refresh_quietly())
                if self._recorder is not None and now >= next_metrics:
                    next_metrics = now + TICK_S
                    self._record_metrics()
            except Exception:  # a background error must not stop expiry for every group
                logger.exception("group coordinator background task failed")

    def _tick(self) -> None:
        now = time.monotonic()
        for group in list(self._groups.values()):
            for pending_id, expiry in list(group.pending_ids.items()):
                if now > expiry:
                    del group.pending_ids[pending_id]
            for mid, m in list(group.members.items()):
                if m.join_future is not None:
                    continue  # waiting in a join: the join call itself is the sign of life
                if now > m.session_deadline:
                    self._remove_member(group, mid, f"session timed out ({m.session_timeout_ms} ms)")
                elif now > m.poll_deadline:
                    self._remove_member(
                        group, mid, f"did not poll within max.poll.interval.ms ({m.rebalance_timeout_ms} ms)"
                    )
            if group.state == GroupState.PREPARING_REBALANCE and now >= group.rebalance_deadline:
                for mid, m in list(group.members.items()):
                    if m.join_future is None:
                        self._remove_member(group, mid, "did not rejoin within the rebalance timeout")
                self._maybe_complete_join(group)
            else:
                self._maybe_complete_join(group)

    async def _check_subscriptions(self) -> None:
        """Rebalance stable groups whose subscribed topics changed partition count, or whose
        regex now matches other topics."""
        # Kafka clients' groups are watched by their leader member, as in Kafka's classic protocol.
        active = [
            g for g in self._groups.values() if g.state == GroupState.STABLE and g.members and not g.client_assigned
        ]
        if not active:
            return
        await self._refresh_metadata()
        for group in active:
            if group.state != GroupState.STABLE:
                continue
            wanted = {t for m in group.members.values() for t in self._resolve(m)}
            now_counts = {t: self._topic_counts[t] for t in wanted if t in self._topic_counts}
            if now_counts != group.snapshot:
                self._prepare_rebalance(group, f"subscribed topics changed: {group.snapshot} -> {now_counts}")

    async def _refresh_metadata(self) -> None:
        md = await self._controller_handle().get_metadata.remote(MetadataRequest())
        self._topic_counts = {name: len(t.partitions) for name, t in md.topics.items()}

    # -- writing __consumer_offsets -------------------------------------------------------

    def _persist_group(self, group: _Group) -> None:
        """Write the group's metadata in the background (a lost write only costs a rejoin)."""
        value = _dumps(group.to_record())
        asyncio.get_running_loop().create_task(self._persist(group.group_id, value))

    async def _persist(self, group_id: str, value: bytes) -> None:
        try:
            await self._append(group_id, [(group_key(group_id), value)])
        except Exception:  # noqa: BLE001
            logger.exception("group %s: could not persist group metadata", group_id)

    async def _append(
        self,
        group_id: str,
        records: list[tuple[bytes, bytes | None]],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        """Append records to the group's partition and wait until they are durable (acks=all).

        With a ``producer_id`` the batch is transactional (a transactional offset commit),
        written with the coordinator's origin: epoch checks, no sequence. Writes to one
        partition go one at a time, in call order.
        """
        lock = self._write_locks.setdefault(offsets_partition_for(group_id, self._topic.num_partitions), asyncio.Lock())
        async with lock:
            # The group's partition is known for sure once the topic exists.
            await self._topic.ensure()
            p = offsets_partition_for(group_id, self._topic.num_partitions)
            await self._topic.append(p, records, producer_id, producer_epoch)

    # -- helpers --------------------------------------------------------------------------

    def _member(self, group_id: str, member_id: str, instance_id: str | None) -> tuple[_Group, _Member]:
        group = self._groups.get(group_id)
        if instance_id and group is not None:
            known = group.static.get(instance_id)
            if known is not None and known != member_id:
                raise FencedInstanceIdError(
                    f"instance {instance_id!r} is now member {known!r}; {member_id!r} is fenced"
                )
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            raise UnknownMemberIdError(f"unknown member {member_id!r} of group {group_id!r}")
        return group, member


def _offset_values(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, OffsetAndMetadata]:
    """A commit's offsets, checked (InvalidRequestError) and stamped with the commit time, as
    Kafka's coordinator stamps them."""
    if not isinstance(offsets, Mapping):
        raise InvalidRequestError(f"offsets must map partitions to OffsetAndMetadata, not {offsets!r:.60}")
    now = _now_ms()
    values = {}
    for tp, om in offsets.items():
        if type(tp) is not TopicPartition or type(om) is not OffsetAndMetadata:
            raise InvalidRequestError(f"offsets must map TopicPartition to OffsetAndMetadata, not {tp!r}: {om!r:.60}")
        if isinstance(om.offset, bool) or not isinstance(om.offset, numbers.Integral) or om.offset < 0:
            raise InvalidRequestError(f"offset for {tp} must be an integer >= 0, got {om.offset!r}")
        values[tp] = OffsetAndMetadata(int(om.offset), str(om.metadata or ""), now, int(om.leader_epoch))
    return values


def _check_group_id(group_id: str) -> None:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupIdError("group id must be a non-empty string")


def _check_assignment(assignment: dict[str, Any], subs: dict[str, list[str]], counts: dict[str, int]) -> None:
    """Refuse an assignment (from a user assignor, say) that gives a partition two owners."""
    seen: set[TopicPartition] = set()
    for member, tps in assignment.items():
        if member not in subs:
            raise InvalidRequestError(f"assignor returned unknown member {member!r}")
        for tp in tps:
            if tp in seen:
                raise InvalidRequestError(f"assignor gave {tp} to two members")
            if tp.topic not in counts or not 0 <= tp.partition < counts[tp.topic]:
                raise InvalidRequestError(f"assignor returned unknown partition {tp}")
            seen.add(tp)


def _fail_joins(group: _Group, error: BaseException) -> None:
    """A rebalance that cannot complete: every waiting JoinGroup gets ``error`` and the
    group goes back to Stable with its previous assignment."""
    for m in group.members.values():
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_exception(error)
        m.join_future = None
    group.state = GroupState.STABLE
