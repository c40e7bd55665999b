"""The GroupCoordinator actor: the thin shell around the group state machines.

One named, detached, restartable async actor serves every group of the cluster. The rules
live in plain classes (:mod:`~actors.group_coordinator.shard`: classic groups in
``GroupMetadataManager``, KIP-848's consumer groups in ``ConsumerGroupManager``, offsets in
``OffsetMetadataManager``); this shell does what needs
Ray and an event loop: it parks the calls the state machine says must wait and wakes them
with the answers it hands back, appends records to ``__consumer_offsets`` (through
:class:`~actors.internal_topic.InternalTopic`, acks=all) before their offsets take effect,
runs the timer at the state machine's next deadline, asks the controller for topic metadata
and partition leaders for high watermarks, and records metrics.

Durability: offset commits and group metadata are records in the compacted internal topic
``__consumer_offsets`` (format in :mod:`~actors.group_coordinator.records`). A restarted
coordinator replays the topic before serving; until then every call raises the retriable
CoordinatorLoadInProgressError. A classic group's metadata is written in the background (a
lost write costs the members a rejoin); a consumer group's records (member epochs and
assignments) and offsets only count once they are durable: the call is answered then.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from actors import internal_records as stored
from actors.acl import CLUSTER_NAME
from actors.auth_helper import CLUSTER, GROUP, TOPIC, TRANSACTIONAL_ID, AuthHelper, LazyAclView, Op, denied
from actors.clock import SYSTEM, Clock
from actors.consumer_group_config import ConsumerGroupSettings
from actors.group_coordinator.consumer_group import ConsumerGroupState
from actors.group_coordinator.consumer_records import group_tombstones
from actors.group_coordinator.group_metadata_manager import check_group_id
from actors.group_coordinator.metadata_image import MetadataImage, TopicImage
from actors.group_coordinator.records import Record, group_key, offset_records, offset_tombstones
from actors.group_coordinator.results import GroupResult, Parked, Wait
from actors.group_coordinator.shard import GroupCoordinatorShard
from actors.internal_topic import Coordinator, InternalTopic
from actors.metrics import TICK_S, Recorder
from actors.names import OFFSETS_TOPIC, offsets_partition_for
from actors.protocol import (
    CompleteTxnRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    GroupLagRequest,
    GroupState,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
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
from actors.protocol_consumer_groups import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from actors.types import GroupDescription, JoinGroupResult, OffsetAndMetadata, PartitionLag, TopicPartition
from storage.errors import CoordinatorNotAvailableError, InvalidRequestError, KafkaError, RebalanceInProgressError
from storage.log import LATEST_TIMESTAMP

logger = logging.getLogger(__name__)

# A heartbeat that names an unknown topic asks the controller at most this often.
IMAGE_MIN_AGE_S = 0.1
# The timer sleeps at least this long (deadlines that fall together are run together) and at
# most this long (a deadline set while it sleeps wakes it anyway).
_MIN_SLEEP_S = 0.01
_MAX_SLEEP_S = 1.0


def _topics(partitions: Any) -> set[str]:
    """The topics of a request's partitions (or of its offsets' keys)."""
    try:
        return {tp.topic for tp in partitions}
    except (AttributeError, TypeError):
        raise InvalidRequestError(f"partitions must be TopicPartitions, not {partitions!r:.60}") from None


class GroupCoordinator(Coordinator):
    """Consumer groups of one rayqueue cluster, of both protocols (see the module docstring)."""

    _kind = "group coordinator"

    def __init__(self, namespace: str, config: dict[str, Any], clock: Clock = SYSTEM) -> None:
        super().__init__(namespace, config)
        self._clock = clock
        self._topic = InternalTopic(
            OFFSETS_TOPIC,
            self._controller_handle,
            self._config["offsets.topic.num.partitions"],
            self._config["offsets.topic.replication.factor"],
        )
        self.state = GroupCoordinatorShard(
            clock,
            self._partition_for,
            self._config["offsets.retention.minutes"] * 60_000,
            self._config["group.initial.rebalance.delay.ms"],
            ConsumerGroupSettings.of(self._config),
        )
        self._waiters: dict[tuple[Wait, str, str], asyncio.Future] = {}  # parked calls
        self._wake: asyncio.Event | None = None  # set when a call may have moved the next deadline
        self._write_locks: dict[int, asyncio.Lock] = {}  # __consumer_offsets partition -> its writes, in order
        self._check_interval_s = self._config["rayqueue.group.metadata.check.interval.ms"] / 1000
        self._retention_check_s = self._config["offsets.retention.check.interval.ms"] / 1000
        # The high watermarks learnt from partition leaders, for lag without a consumer.
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._lag_refresh_s = self._config["rayqueue.group.lag.refresh.interval.ms"] / 1000
        self._recorder = Recorder(namespace, True) if self._config["rayqueue.metrics.enabled"] else None
        self._exported_groups: set[str] = set()
        self._exported_offsets: set[tuple[str, TopicPartition]] = set()
        self._skipped = 0  # unreadable __consumer_offsets records skipped by the load
        # Native clients' principals against the ACLs (loaded by the first request with one).
        self._acls = LazyAclView(self._controller_handle, self._config)
        self._auth = AuthHelper(self._acls, self._recorder, "group-coordinator")
        # The consumer groups' topic image: when it was last learnt, and the refresh under way.
        self._image_at = float("-inf")
        self._image_refresh: asyncio.Task | None = None
        self._image_started = float("-inf")  # when the last refresh_image call to the controller started

    def _partition_for(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self._topic.num_partitions)

    # -- lifecycle (the rest is Coordinator's) --------------------------------------------

    def _count(self) -> int:
        return len(self.state)

    async def _load(self) -> None:
        """Replay ``__consumer_offsets`` into the state (a restarted coordinator's first job).
        A record it cannot read is skipped, logged and counted (``skipped_records``)."""
        started = self._clock.monotonic()
        records = 0
        skipped = stored.SkippedRecords(OFFSETS_TOPIC, self._count_skipped)
        async for p, batch, first in self._topic.replay():
            records += self.state.replay_batch(p, batch, first, skipped)
        self.state.loaded()
        self._skipped += skipped.count
        self._loaded = True
        logger.info(
            "group coordinator loaded %d groups from %d records in %.2fs (%d unreadable records skipped)",
            len(self.state),
            records,
            self._clock.monotonic() - started,
            skipped.count,
        )

    def _count_skipped(self, topic: str) -> None:
        if self._recorder is not None:
            self._recorder.add(self._recorder.metrics.internal_records_skipped, 1, (("topic", topic),))

    async def skipped_records(self) -> int:
        """How many unreadable ``__consumer_offsets`` records this actor's load skipped."""
        return self._skipped

    # -- membership -----------------------------------------------------------------------

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResult:
        """Join (or rejoin) a group (Kafka's JoinGroup); returns when the rebalance completes.

        ``member_id`` is "" for a new member (the coordinator names it). ``protocols`` are
        assignor names in preference order; ``assignors`` carries user-supplied ones by
        name. ``owned_partitions`` is what the member holds now (the cooperative protocol
        keeps it).
        """
        require(request, JoinGroupRequest)
        asked_at = self._clock.monotonic()
        await self._auth.check(request, Op.READ, GROUP, request.group_id)
        self._check_loaded()
        groups = self.state.groups
        groups.validate_join(request)
        if groups.needs_metadata(request):
            await self.refresh_image(IMAGE_MIN_AGE_S, asked_at)
        elif self.state.consumer.get(request.group_id) is not None:
            await self.refresh_image(IMAGE_MIN_AGE_S)
        return await self._run(self.state.join_group(request))

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        """This member's assignment for ``generation_id`` (Kafka's SyncGroup; a follower in a
        group of Kafka clients waits for its leader's SyncGroup)."""
        require(request, SyncGroupRequest)
        await self._auth.check(request, Op.READ, GROUP, request.group_id)
        self._check_loaded()
        return await self._run(self.state.sync_group(request))

    async def heartbeat(self, request: HeartbeatRequest) -> None:
        """Keep the member alive (Kafka's Heartbeat); ``poll_age_ms`` is the time since its
        application last polled.

        Raises RebalanceInProgressError when the member must rejoin, IllegalGenerationError /
        UnknownMemberIdError when it was fenced out, FencedInstanceIdError for a zombie static member.
        """
        require(request, HeartbeatRequest)
        await self._auth.check(request, Op.READ, GROUP, request.group_id)
        self._check_loaded()
        self.state.heartbeat(request)  # moves deadlines later only: the timer need not wake

    async def leave_group(self, request: LeaveGroupRequest) -> None:
        """Leave at once (Kafka's LeaveGroup: a rebalance starts without waiting for the
        session timeout)."""
        require(request, LeaveGroupRequest)
        await self._auth.check(request, Op.READ, GROUP, request.group_id)
        self._check_loaded()
        await self._run(self.state.leave_group(request))

    async def _run(self, result: GroupResult) -> Any:
        """Carry out what the state machine decided: park the call if it must wait, answer
        the calls parked earlier, write the group records (and wait for them to be durable
        when the answer depends on them: a consumer group's); returns the call's answer."""
        future = self._park(result.response) if isinstance(result.response, Parked) else None
        self._apply(result)
        if result.durable and result.records:
            await self._write(result.records)
        if future is None:
            return result.response
        parked: Parked = result.response
        try:
            return await asyncio.wait_for(asyncio.shield(future), parked.timeout_ms / 1000)
        except TimeoutError:
            raise RebalanceInProgressError(parked.timeout_message) from None

    def _park(self, parked: Parked) -> asyncio.Future:
        key = (parked.kind, parked.group_id, parked.member_id)
        future = self._waiters.get(key)
        if future is None or future.done():
            future = self._waiters[key] = asyncio.get_running_loop().create_future()
        return future

    def _apply(self, result: GroupResult) -> None:
        for answer in result.answers:
            future = self._waiters.pop((answer.kind, answer.group_id, answer.member_id), None)
            if future is None or future.done():
                continue  # the call gave up waiting (or this actor restarted since)
            if answer.failed:
                future.set_exception(answer.result)
            else:
                future.set_result(answer.result)
        if not result.durable:
            for group_id, record in result.records:
                asyncio.get_running_loop().create_task(self._persist(group_id, record))
        if self._recorder is not None:
            for group_id in result.rebalances:
                self._recorder.add(self._recorder.metrics.group_rebalances, 1, (("group", group_id),))
        self._deadline_moved()

    async def _write(self, records: list[tuple[str, Record]]) -> None:
        """Append records and wait until they are durable, a group's as one batch.

        When they cannot be written the caller gets the retriable COORDINATOR_NOT_AVAILABLE;
        the change stays in memory (a later record of the same key supersedes it, and a
        coordinator that restarts without it fences the members that relied on it)."""
        by_group: dict[str, list[Record]] = {}
        for group_id, record in records:
            by_group.setdefault(group_id, []).append(record)
        for group_id, group_records in by_group.items():
            try:
                await self._append(group_id, group_records)
            except KafkaError as exc:
                logger.error("group %s: could not write its records: %s", group_id, exc)
                raise CoordinatorNotAvailableError(f"group {group_id}: {exc}") from None

    def _deadline_moved(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- KIP-848's consumer group protocol -----------------------------------------------
    #
    # The shell's part only: authorize (as Kafka's KafkaApis: READ on the group for a heartbeat,
    # DESCRIBE on each subscribed topic; DESCRIBE on a group to describe it), make sure the
    # topic image knows the topics a heartbeat names, run the state machine, and answer once
    # its records are durable (_run). The image (metadata_image) comes from the controller:
    # refreshed every rayqueue.group.metadata.check.interval.ms while consumer groups have
    # members, and at once (at most every IMAGE_MIN_AGE_S) when a heartbeat names a topic or a
    # regex the image has not seen.

    async def consumer_group_heartbeat(self, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        """Kafka's ConsumerGroupHeartbeat: join (epoch 0), heartbeat, leave (-1; -2 for a static
        member that will be back); answered once the group's records are durable. Errors are
        Kafka's (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, UNRELEASED_INSTANCE_ID, ...)."""
        require(request, ConsumerGroupHeartbeatRequest)
        asked_at = self._clock.monotonic()
        await self._auth.check(request, Op.READ, GROUP, request.group_id)
        names = request.subscribed_topic_names
        if request.principal is not None and names:
            await self._auth.check_all(request, Op.DESCRIBE, TOPIC, list(names))
        self._check_loaded()
        if self._image_is_missing(request):
            await self.refresh_image(IMAGE_MIN_AGE_S, asked_at)
        return await self._run(self.state.consumer_group_heartbeat(request))

    async def consumer_group_describe(self, request: ConsumerGroupDescribeRequest) -> list[ConsumerGroupDescription]:
        """Kafka's ConsumerGroupDescribe: each group, or its error (GROUP_ID_NOT_FOUND for one
        that is not a consumer group, GROUP_AUTHORIZATION_FAILED without DESCRIBE on it)."""
        require(request, ConsumerGroupDescribeRequest)
        self._check_loaded()
        refused = await self._auth.refused(request, Op.DESCRIBE, GROUP, list(request.group_ids))
        allowed = [g for g in request.group_ids if g not in refused]
        found = {d.group_id: d for d in self.state.consumer_group_describe(allowed)}
        return [
            found[g]
            if g in found
            else ConsumerGroupDescription(g, error=denied(request.principal, Op.DESCRIBE, GROUP, [g]))
            for g in request.group_ids
        ]

    def _image_is_missing(self, request: ConsumerGroupHeartbeatRequest) -> bool:
        """The heartbeat names a topic, or brings a regex, the image cannot answer for."""
        consumer = self.state.consumer
        if consumer.image.version == 0:
            return True
        if request.subscribed_topic_names and any(
            consumer.image.topic(n) is None for n in request.subscribed_topic_names
        ):
            return True
        regex = request.subscribed_topic_regex
        group = consumer.get(request.group_id)
        return bool(regex) and (group is None or regex not in group.resolved_regexes)

    async def refresh_image(self, min_age_s: float = 0.0, asked_at: float | None = None) -> None:
        """Learn the topics from the controller and let the consumer groups react to what
        changed. One call at a time. Without ``asked_at`` an image younger than ``min_age_s``
        will do. With it (a request naming a topic the image lacks, perhaps one created just
        before the request) the image must come from a call started at or after ``asked_at``:
        this waits for the next one, and calls still start at most every ``min_age_s``."""
        while True:
            running = self._image_refresh
            if running is not None and not running.done():
                started = self._image_started
                await asyncio.shield(running)
                if asked_at is None or started >= asked_at:
                    return
                continue
            now = self._clock.monotonic()
            if asked_at is None:
                if now - self._image_at < min_age_s:
                    return
            elif self._image_started >= asked_at:
                return
            else:
                pause = self._image_started + min_age_s - now
                if pause > 0:
                    await asyncio.sleep(pause)
                    if self._image_refresh is not running:
                        continue  # another request started a call meanwhile: it will do
            self._image_started = self._clock.monotonic()
            self._image_refresh = asyncio.get_running_loop().create_task(self._refresh_metadata())
            await asyncio.shield(self._image_refresh)
            return

    def _set_image(self, metadata: Any) -> None:
        """The controller's answer as the consumer groups' topic image."""
        consumer = self.state.consumer
        image = MetadataImage.of(
            (TopicImage(t.topic_id, name, len(t.partitions)) for name, t in metadata.topics.items()), consumer.image
        )
        self._image_at = self._clock.monotonic()
        self._apply(consumer.set_image(image))

    async def _fetch_metadata(self) -> Any:
        return await self._controller_handle().get_metadata.remote(MetadataRequest())

    # -- offsets --------------------------------------------------------------------------

    async def commit_offsets(self, request: OffsetCommitRequest) -> dict[TopicPartition, KafkaError]:
        """Commit offsets (Kafka's OffsetCommit) once they are durable in ``__consumer_offsets``.

        Generation -1 with no member id is a standalone commit, allowed only while the group
        has no members (Kafka's rule). In a consumer group the generation is the member epoch:
        an older one commits only the partitions the member held since then (Kafka 4.4); the
        others are answered STALE_MEMBER_EPOCH, one by one (the returned map; empty when
        every partition was committed).
        """
        require(request, OffsetCommitRequest)
        group_id = request.group_id
        await self._check_commit(request, group_id)
        self._check_loaded()
        check_group_id(group_id)
        check = self.state.validate_offset_commit(
            group_id, request.member_id, request.group_instance_id, request.generation_id, request.api_version
        )
        offsets, refused = dict(request.offsets), {}
        if check is not None:
            refused = {tp: error for tp in offsets if (error := check(tp)) is not None}
            offsets = {tp: om for tp, om in offsets.items() if tp not in refused}
        if self._recorder is not None:
            self._recorder.add(self._recorder.metrics.offset_commits, 1, (("group", group_id),))
        await self._store_offsets(group_id, offsets)
        return refused

    async def _check_commit(self, request: Any, group_id: str) -> None:
        """A native caller's principal may commit the request's offsets: READ on the group
        and on every topic (Kafka's OffsetCommit; refused, nothing is committed)."""
        if request.principal is not None:
            await self._auth.check(request, Op.READ, GROUP, group_id)
            await self._auth.check_all(request, Op.READ, TOPIC, _topics(request.offsets))

    async def _store_offsets(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        values = self.state.offsets.stamp(offsets)
        if not values:
            return
        await self._append(group_id, offset_records(group_id, values))
        self.state.offsets.apply_commit(group_id, values)

    async def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> None:
        """TxnOffsetCommit: write offsets as part of the producer's transaction.

        They are written as a transactional batch (the producer's id and epoch) to the
        group's partition and stay pending until the transaction ends (``complete_txn``).
        With a member id the member and generation are checked as ``commit_offsets`` does
        (KIP-447), so a zombie of an older generation cannot commit. A stale producer
        epoch raises ProducerFencedError.
        """
        require(request, TxnOffsetCommitRequest)
        group_id = request.group_id
        # Kafka's TxnOffsetCommit: WRITE on the transactional id, then READ on the group and topics.
        await self._auth.check(request, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id)
        await self._check_commit(request, group_id)
        self._check_loaded()
        check_group_id(group_id)
        check = self.state.validate_txn_offset_commit(
            group_id, request.member_id, request.group_instance_id, request.generation_id
        )
        if check is not None:
            for tp in request.offsets:
                error = check(tp)
                if error is not None:
                    raise error
        values = self.state.offsets.stamp(request.offsets)
        if not values:
            return
        records = offset_records(group_id, values)
        await self._append(group_id, records, producer_id=request.producer_id, producer_epoch=request.producer_epoch)
        self.state.offsets.add_pending(request.producer_id, group_id, values)

    async def complete_txn(self, request: CompleteTxnRequest) -> int:
        """The producer's transaction ended and its marker is in ``__consumer_offsets``: its
        pending offsets apply (commit) or vanish (abort). Returns how many there were."""
        require(request, CompleteTxnRequest)
        self._check_loaded()
        return self.state.offsets.end_pending(
            request.producer_id, request.transaction_result == TransactionResult.COMMIT
        )

    async def fetch_offsets(self, request: OffsetFetchRequest) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of a group (Kafka's OffsetFetch; all, or of ``partitions``);
        partitions without one are absent.

        With ``require_stable`` (KIP-447) a partition with a transactional commit still
        pending raises the retriable UnstableOffsetCommitError instead.
        """
        require(request, OffsetFetchRequest)
        if request.principal is None:
            self._check_loaded()
            self.state.validate_offset_fetch(request.group_id, request.member_id, request.member_epoch)
            return self.state.offsets.fetch(request.group_id, request.partitions, request.require_stable)
        # Kafka's OffsetFetch: DESCRIBE on the group and on each topic named; asked for all,
        # the topics the caller may not describe are left out.
        await self._auth.check(request, Op.DESCRIBE, GROUP, request.group_id)
        if request.partitions is not None:
            await self._auth.check_all(request, Op.DESCRIBE, TOPIC, _topics(request.partitions))
        self._check_loaded()
        self.state.validate_offset_fetch(request.group_id, request.member_id, request.member_epoch)
        found = self.state.offsets.fetch(request.group_id, request.partitions, request.require_stable)
        return await self._describable(request, found)

    async def _describable(self, request: Any, by_partition: dict[TopicPartition, Any]) -> dict[TopicPartition, Any]:
        """``by_partition`` without the topics the caller may not DESCRIBE."""
        shown = set(await self._auth.visible(request, Op.DESCRIBE, TOPIC, sorted(_topics(by_partition))))
        return {tp: v for tp, v in by_partition.items() if tp.topic in shown}

    # -- admin ----------------------------------------------------------------------------

    async def list_groups(self, request: ListGroupsRequest | None = None) -> list[tuple[str, str, str, str]]:
        """(group id, state, protocol type, group type) of every group (Kafka's ListGroups: a
        native caller's principal sees every group with DESCRIBE on the cluster, else those it
        may DESCRIBE)."""
        self._check_loaded()
        groups = self.state.list_groups()
        if request is None:
            return groups
        require(request, ListGroupsRequest)
        if await self._auth.authorized(request, Op.DESCRIBE, CLUSTER, CLUSTER_NAME, count=False):
            return groups
        shown = set(await self._auth.visible(request, Op.DESCRIBE, GROUP, [g[0] for g in groups]))
        return [g for g in groups if g[0] in shown]

    async def describe_groups(self, request: DescribeGroupsRequest) -> list[GroupDescription]:
        """State, protocol, generation and members with assignments (Kafka's DescribeGroups);
        unknown groups show as Dead, a consumer group with ``group_type`` "consumer" (its
        epoch as the generation, its assignor as the protocol)."""
        require(request, DescribeGroupsRequest)
        await self._auth.check_all(request, Op.DESCRIBE, GROUP, request.groups)
        self._check_loaded()
        return self.state.describe_groups(request.groups)

    async def group_lag(self, request: GroupLagRequest) -> dict[TopicPartition, PartitionLag]:
        """A group's lag per partition, from its committed offsets and the partitions' high
        watermarks, asked of their leaders now (``kafka-consumer-groups --describe``).

        Covers the partitions the group committed for or is assigned, plus every partition of
        ``request.topics``; a partition never committed counts its whole log as lag.
        """
        require(request, GroupLagRequest)
        # As the OffsetFetch and ListOffsets it stands for: DESCRIBE on the group and topics.
        await self._auth.check(request, Op.DESCRIBE, GROUP, request.group_id)
        await self._auth.check_all(request, Op.DESCRIBE, TOPIC, request.topics)
        self._check_loaded()
        partitions = self.state.offsets.lag_partitions(request.group_id)
        if request.topics:
            md = await self._controller_handle().get_metadata.remote(MetadataRequest(tuple(request.topics)))
            for t in md.topics.values():
                partitions.update(TopicPartition(t.name, p.partition) for p in t.partitions)
        await self._refresh_high_watermarks(partitions)
        lag = self.state.offsets.lag(request.group_id, partitions, self._high_watermarks)
        return lag if request.principal is None else await self._describable(request, lag)

    async def alter_offsets(self, request: OffsetCommitRequest) -> None:
        """Set committed offsets of a group that has no members (NonEmptyGroupError otherwise):
        Kafka's AlterConsumerGroupOffsets, a standalone OffsetCommit (no member, generation -1)."""
        require(request, OffsetCommitRequest)
        await self._check_commit(request, request.group_id)
        self._check_loaded()
        check_group_id(request.group_id)
        self.state.offsets.check_alter(request.group_id)
        await self._store_offsets(request.group_id, request.offsets)

    async def delete_groups(self, request: DeleteGroupsRequest) -> dict[str, KafkaError | None]:
        """Delete empty groups with their offsets (Kafka's DeleteGroups); per group None or the error."""
        require(request, DeleteGroupsRequest)
        self._check_loaded()
        out: dict[str, KafkaError | None] = {}
        refused = await self._auth.refused(request, Op.DELETE, GROUP, request.groups_names)
        for gid in request.groups_names:
            if gid in refused:  # Kafka's DeleteGroups: this group's error, the others deleted
                out[gid] = denied(request.principal, Op.DELETE, GROUP, [gid])
                continue
            # Decided one group at a time: a member may join while an earlier group's delete is written.
            out[gid] = self.state.check_delete_groups([gid])[gid]
            if out[gid] is None:
                await self._delete_group(gid)
        return out

    async def delete_offsets(self, request: OffsetDeleteRequest) -> dict[TopicPartition, KafkaError | None]:
        """Delete committed offsets of some partitions (Kafka's OffsetDelete); per partition
        None or the error. GroupIdNotFoundError for a group that has none; a partition whose
        topic a member subscribes to keeps its offset (GroupSubscribedToTopicError)."""
        require(request, OffsetDeleteRequest)
        # Kafka's OffsetDelete: DELETE on the group; a topic without READ keeps its offsets.
        await self._auth.check(request, Op.DELETE, GROUP, request.group_id)
        self._check_loaded()
        check_group_id(request.group_id)
        refused: set[str] = set()
        partitions = request.partitions
        if request.principal is not None:
            refused = await self._auth.refused(request, Op.READ, TOPIC, _topics(partitions))
            partitions = tuple(tp for tp in partitions if tp.topic not in refused)
        out, gone = self.state.offsets.check_delete(request.group_id, partitions)
        for tp in request.partitions:
            if tp.topic in refused:
                out[tp] = denied(request.principal, Op.READ, TOPIC, [tp.topic])
        if gone:
            await self._append(request.group_id, offset_tombstones(request.group_id, gone))
            self.state.offsets.remove(request.group_id, gone)
        return out

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Expire offsets of groups empty for ``offsets.retention.minutes`` (Kafka 2.1+ rule:
        the clock starts when the group became empty); returns how many expired."""
        self._check_loaded()
        now = self._clock.wall_ms() if now_ms is None else now_ms
        expired = 0
        for group_id in [e.group_id for e in self.state.offsets.expired(now)]:
            # Asked again for each group: the writes before it may have let a member join.
            batch = self.state.offsets.expired_of(group_id, now)
            if batch is None:
                continue
            if batch.whole_group:
                await self._delete_group(batch.group_id)
            else:
                await self._append(batch.group_id, offset_tombstones(batch.group_id, list(batch.partitions)))
                self.state.offsets.remove(batch.group_id, batch.partitions)
            expired += len(batch.partitions)
        if expired:
            logger.info("expired %d committed offsets", expired)
        return expired

    async def _delete_group(self, group_id: str) -> None:
        records = offset_tombstones(group_id, list(self.state.offsets.committed(group_id)))
        consumer = self.state.consumer.get(group_id)
        if consumer is not None:
            records += group_tombstones(group_id, list(consumer.members), list(consumer.resolved_regexes))
        else:
            records.append((group_key(group_id), None))
        await self._append(group_id, records)
        self.state.offsets.remove_group(group_id)

    # -- lag and metrics ------------------------------------------------------------------

    async def _refresh_quietly(self) -> None:
        try:
            partitions = {tp for offsets in self.state.offsets.offsets.values() for tp in offsets}
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
        groups = {**self.state.groups.groups, **self.state.consumer.groups}
        states = [*GroupState, *(s for s in ConsumerGroupState if s.value not in set(GroupState))]
        by_state = dict.fromkeys([s.value for s in states], 0)
        offsets: set[tuple[str, TopicPartition]] = set()
        for gid, g in groups.items():
            by_state[str(g.state)] += 1
            m.group_members.set(len(g.members), rec.tags(group=gid))
            for state in states:
                m.group_state.set(1 if str(g.state) == state.value else 0, rec.tags(group=gid, state=state.value))
            for tp, om in self.state.offsets.offsets.get(gid, {}).items():
                tags = rec.tags(group=gid, topic=tp.topic, partition=tp.partition)
                m.group_committed_offset.set(om.offset, tags)
                hw = self._high_watermarks.get(tp)
                if hw is not None:
                    m.group_lag.set(max(0, hw - om.offset), tags)
                offsets.add((gid, tp))
        for state_name, count in by_state.items():
            m.groups.set(count, rec.tags(state=state_name))
        # Groups and offsets that went away drop to zero rather than keep their last value.
        for gid in self._exported_groups - set(groups):
            m.group_members.set(0, rec.tags(group=gid))
            for state in states:
                m.group_state.set(0, rec.tags(group=gid, state=state.value))
        for gid, tp in self._exported_offsets - offsets:
            m.group_lag.set(0, rec.tags(group=gid, topic=tp.topic, partition=tp.partition))
        self._exported_groups, self._exported_offsets = set(groups), offsets

    # -- background: timers, metadata changes, offset retention ---------------------------

    async def _background_loop(self) -> None:
        self._wake = asyncio.Event()
        now = self._clock.monotonic()
        next_check = next_metrics = next_lag = now
        next_retention = now + self._retention_check_s
        while True:
            now = self._clock.monotonic()
            due = [next_check, next_retention]
            if self._recorder is not None:
                due += [next_lag, next_metrics]
            if self._loaded:
                for deadline in (self.state.groups.next_deadline(), self.state.consumer.next_deadline()):
                    if deadline is not None:
                        due.append(deadline)
            sleep = min(_MAX_SLEEP_S, max(_MIN_SLEEP_S, min(due) - now))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), sleep)
            except TimeoutError:
                pass
            if not self._loaded:
                continue
            try:
                self._apply(self.state.groups.poll())
                self._apply(self.state.consumer.poll())
                now = self._clock.monotonic()
                if now >= next_check:
                    next_check = now + self._check_interval_s
                    await self._check_subscriptions()
                    if any(g.members for g in self.state.consumer.groups.values()):
                        await self.refresh_image()
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

    async def _check_subscriptions(self) -> None:
        """Rebalance stable groups whose subscribed topics changed partition count, or whose
        regex now matches other topics."""
        watched = self.state.groups.watched_groups()
        if not watched:
            return
        await self._refresh_metadata()
        self._apply(self.state.groups.check_subscriptions(watched))

    async def _refresh_metadata(self) -> None:
        md = await self._fetch_metadata()
        self.state.groups.set_topic_counts({name: len(t.partitions) for name, t in md.topics.items()})
        self._set_image(md)

    # -- writing __consumer_offsets -------------------------------------------------------

    async def _persist(self, group_id: str, record: Record) -> None:
        """Write a group's metadata (in the background: a lost write only costs a rejoin)."""
        try:
            await self._append(group_id, [record])
        except Exception:  # noqa: BLE001
            logger.exception("group %s: could not persist group metadata", group_id)

    async def _append(
        self,
        group_id: str,
        records: list[Record],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        """Append records to the group's partition and wait until they are durable (acks=all).

        With a ``producer_id`` the batch is transactional (a transactional offset commit),
        written with the coordinator's origin: epoch checks, no sequence. Writes to one
        partition go one at a time, in call order.
        """
        lock = self._write_locks.setdefault(self._partition_for(group_id), asyncio.Lock())
        async with lock:
            # The group's partition is known for sure once the topic exists.
            await self._topic.ensure()
            await self._topic.append(self._partition_for(group_id), records, producer_id, producer_epoch)
