"""The follower side of replication, per source host: Kafka's replica fetcher threads.

A host's follower replicas do not fetch one by one. Every partition this host follows from one
leader host is fetched by one :class:`ReplicaFetcher`, in one call per round (the leader
host's ``fetch_messages`` with this broker's replica id, carrying each partition's fetch
offset, which is its log end and so tells the leader its LEO). The calls between hosts grow
with the hosts, not with the partitions, as Kafka's ReplicaFetcherManager keeps its fetcher
threads per source broker and ``hash(topic, partition) % num.replica.fetchers``: with one
host per broker a fetcher serves a source broker, with K hosts per broker a source broker's
share of the partitions (the same stable hash), with one host per replica one partition.

A replica hands itself to the fetcher once it has cut its divergent suffix (``follow``) and
gets back what it must handle alone: OffsetOutOfRange (its log end is below the leader's log
start) or an append the log refused (the logs disagree: truncate again). Errors that only need
time (the leader moved, an epoch not yet known there, the leader's host restarting) back the
partition off and keep it in the fetcher. The replica's own state changes stay the replica's:
the fetcher hands it the answer (``PartitionReplica.apply_fetched``). The leader's host is
reached through a link (``actors.broker.links``): a Ray actor handle in a host actor, the
host object itself when hosts are driven by hand.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from actors.broker.links import HostLink, Links
from actors.clock import SYSTEM, Clock
from actors.protocol_broker import FetchMessagesRequest, FetchPartition
from storage.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRequestError,
    NetworkError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)

logger = logging.getLogger(__name__)

# How long a partition (or every partition, when the leader's host does not answer) waits
# before it is fetched again: Kafka's replica.fetch.backoff.ms defaults to 1 s; a Ray actor
# restarts in about that time, and a quicker retry finds a new leader sooner.
RETRY_BACKOFF_S = 0.05
ERROR_BACKOFF_S = 0.2
# The errors a replica handles itself (its fetch position or its log must change).
HANDED_BACK = (OffsetOutOfRangeError, InvalidRequestError, CorruptRecordError)
# The errors that only need time: the leader moved, or knows no newer epoch yet.
TRANSIENT = (NotLeaderOrFollowerError, FencedLeaderEpochError, UnknownLeaderEpochError)


@dataclasses.dataclass(eq=False)
class _Fetching:
    """One partition in a fetcher: its replica, the leader epoch it follows, the future its
    ``follow`` waits on, and when it may be fetched again."""

    replica: Any
    epoch: int
    done: asyncio.Future
    not_before: float = 0.0
    left_out: bool = False  # its data did not fit in the last answer: asked first next round


class ReplicaFetcher:
    """Fetches every partition this host follows from one leader host (reached by ``leader``)."""

    def __init__(self, broker_id: int, leader: HostLink, leader_id: int, clock: Clock = SYSTEM) -> None:
        self.broker_id = broker_id
        self.leader = leader
        self.leader_id = leader_id
        self._clock = clock
        self._partitions: dict[tuple[str, int], _Fetching] = {}
        self._task: asyncio.Task | None = None
        self._changed = asyncio.Event()
        self._in_flight = False
        self.rounds = 0  # fetch calls made (one per round, whatever the partition count)

    @property
    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self._partitions)

    async def follow(self, replica: Any, epoch: int) -> BaseException:
        """Fetch for ``replica`` at leader ``epoch`` until it must handle an error itself;
        returns that error. Cancelling the call takes the partition out of the fetcher."""
        key = (replica.topic, replica.partition)
        entry = _Fetching(replica, epoch, asyncio.get_running_loop().create_future())
        old = self._partitions.get(key)
        if old is not None and not old.done.done():
            old.done.cancel()
        self._partitions[key] = entry
        self._changed.set()
        if self._in_flight:
            # The round in flight may long-poll for replica.fetch.wait.max.ms without this
            # partition: ask the leader's host to answer it now.
            self.leader.wake_replica_fetch(self.broker_id)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            return await entry.done
        finally:
            if self._partitions.get(key) is entry:
                del self._partitions[key]

    def stop(self) -> None:
        """Stop fetching (the host closes): every ``follow`` waiting here is cancelled."""
        for entry in self._partitions.values():
            entry.done.cancel()
        self._partitions.clear()
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while self._partitions:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:  # a round's failure must not stop the fetcher
                logger.exception("broker %d: replica fetch round failed", self.broker_id)
                await asyncio.sleep(ERROR_BACKOFF_S)

    async def _round(self) -> None:
        now = self._clock.monotonic()
        batch = [
            e
            for e in self._partitions.values()
            if e.not_before <= now and not e.replica.fetch_paused and not e.done.done()
        ]
        batch.sort(key=lambda e: not e.left_out)  # stable: the partitions left out last time go first
        if not batch:
            # Paused or backed-off partitions: look again shortly (or when one is added).
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), RETRY_BACKOFF_S / 2)
            except TimeoutError:
                pass
            return
        settings = batch[0].replica.replication
        max_wait_ms = settings["replica.fetch.wait.max.ms"]
        request = FetchMessagesRequest(
            tuple(
                FetchPartition(
                    e.replica.topic,
                    e.replica.partition,
                    e.replica.log_end_offset,
                    settings["replica.fetch.max.bytes"],
                    e.epoch,
                )
                for e in batch
            ),
            max_wait_ms,
            1,
            settings["replica.fetch.response.max.bytes"],
            replica_id=self.broker_id,
        )
        self._in_flight = True
        self.rounds += 1
        try:
            answers = await self.leader.fetch_messages(request)
        except NetworkError:
            # The leader's host died: the controller elects new leaders and tells us.
            self._back_off(batch, RETRY_BACKOFF_S)
            return
        finally:
            self._in_flight = False
        delay = max(e.replica.fetch_delay_s for e in batch)
        if delay:  # fault injection: a slow network between the two brokers
            await asyncio.sleep(delay)
        for entry, answer in zip(batch, answers, strict=True):
            self._apply(entry, answer)

    def _apply(self, entry: _Fetching, answer: Any) -> None:
        replica = entry.replica
        if self._partitions.get((replica.topic, replica.partition)) is not entry or entry.done.done():
            return  # left the fetcher while the round was out
        if replica.fetch_paused:  # an answer that arrives after the cut is lost with it
            return
        entry.left_out = answer is None
        if answer is None:
            return
        if isinstance(answer, BaseException):
            self._failed(entry, answer)
            return
        try:
            replica.apply_fetched(answer, entry.epoch)
        except Exception as exc:  # noqa: BLE001 - one partition's failure must not stop the others
            self._failed(entry, exc)

    def _failed(self, entry: _Fetching, exc: BaseException) -> None:
        if isinstance(exc, HANDED_BACK):
            entry.done.set_result(exc)
        elif isinstance(exc, TRANSIENT):
            self._back_off([entry], RETRY_BACKOFF_S)
        else:
            logger.warning(
                "broker %d: fetching %s-%d failed: %r",
                self.broker_id,
                entry.replica.topic,
                entry.replica.partition,
                exc,
            )
            self._back_off([entry], ERROR_BACKOFF_S)

    def _back_off(self, entries: list[_Fetching], seconds: float) -> None:
        until = self._clock.monotonic() + seconds
        for entry in entries:
            entry.not_before = until


class ReplicaFetchers:
    """A host's fetchers, one per leader host (Kafka's ReplicaFetcherManager)."""

    def __init__(self, broker_id: int, links: Links, clock: Clock = SYSTEM) -> None:
        self.broker_id = broker_id
        self._links = links
        self._clock = clock
        self._fetchers: dict[Any, ReplicaFetcher] = {}

    async def follow(self, replica: Any, leader: Any, epoch: int) -> BaseException:
        """Fetch for ``replica`` from the leader's host (``leader``: the leader's ReplicaRef;
        see ReplicaFetcher.follow)."""
        key = self._links.key(leader.host)
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            link = self._links.host(leader.host)
            fetcher = self._fetchers[key] = ReplicaFetcher(self.broker_id, link, leader.broker_id, self._clock)
        return await fetcher.follow(replica, epoch)

    def describe(self) -> list[dict[str, Any]]:
        """Each fetcher with partitions: its leader broker, partitions and rounds so far."""
        return [
            {"leader": f.leader_id, "partitions": f.partitions, "rounds": f.rounds}
            for f in self._fetchers.values()
            if f.partitions
        ]

    def stop(self) -> None:
        """Stop every fetcher (the host closes)."""
        for fetcher in self._fetchers.values():
            fetcher.stop()
        self._fetchers.clear()
