"""A coordinator's compacted internal topic, and the lifecycle of a coordinator that keeps its state there.

The group and transaction coordinators keep their state as records in compacted internal
topics (``__consumer_offsets``, ``__transaction_state``): :class:`InternalTopic` creates the
topic when its coordinator first loads (so ``rayqueue.launch`` returns with both topics
created and led, and a first group or transaction never waits for a topic creation; a topic
found missing later is created again through FindCoordinator, :meth:`Coordinator.ensure_topic`), writes
to it with acks=all and reads it back; :class:`Coordinator` is the actor lifecycle both
share (load the topic once per actor life, refuse calls until then).

A (re)started coordinator rebuilds its state by replaying every partition from its log start
to its log end. Kafka's coordinators read their local log to its end. Here the coordinator
reads from the partition leader, whose consumer fetches stop at the high watermark; a newly
elected leader's high watermark can lag its log end while it already holds every
acknowledged record (the coordinator writes with acks=all). So the replay goes on,
long-polling, until the high watermark covers the log end it saw: stopping at the high
watermark alone could miss state that was acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import ray

from actors import launch
from actors.clock import SYSTEM
from actors.config import broker_config
from actors.fetch import FetchCursor
from actors.names import CONTROLLER_NAME
from actors.protocol import (
    AppendOrigin,
    CreateTopicsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from actors.types import TopicPartition
from storage.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    KafkaError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    error_for_code,
)
from storage.log import EARLIEST_TIMESTAMP
from storage.records.builder import RecordBatchBuilder
from storage.records.reader import RecordBatch, iter_batches

logger = logging.getLogger(__name__)

# After a fetch that found nothing new below the log end, the next waits this long for the HW to move.
_HW_WAIT_MS = 500
_FETCH_BYTES = 1 << 20
_WRITE_TIMEOUT_S = 30.0
_RETRY_BACKOFF_S = 0.1


async def replay_partition(leader_handle: Any, leader_epoch: int) -> AsyncIterator[tuple[RecordBatch, int]]:
    """Every batch of the partition from its log start to its log end, with the first offset
    of it to apply (the log start may lie inside the first batch)."""
    start = (await leader_handle.list_offsets.remote(ListOffsetsRequest(EARLIEST_TIMESTAMP, leader_epoch))).offset
    cursor = FetchCursor(
        start, partition_max_bytes=_FETCH_BYTES, max_wait_ms=_HW_WAIT_MS, leader_epoch=leader_epoch, to_log_end=True
    )
    while not cursor.done:
        fetched = cursor.complete(await leader_handle.fetch.remote(cursor.request()))
        first = fetched.position
        for batch in iter_batches(fetched.records):
            yield batch, first
            first = batch.next_offset


class InternalTopic:
    """One coordinator's compacted internal topic: created on first use, written with acks=all,
    replayed on load. Partition leaders are cached until a write to them fails.

    ``num_partitions`` is the configured count until the topic exists, then the real one.
    ``min_insync_replicas``, when given, is set on the topic (capped at its replication factor).
    """

    def __init__(
        self,
        name: str,
        controller: Callable[[], Any],
        num_partitions: int,
        replication_factor: int,
        min_insync_replicas: int | None = None,
    ) -> None:
        self.name = name
        self.num_partitions = num_partitions
        self._controller = controller
        self._replication_factor = replication_factor
        self._min_insync_replicas = min_insync_replicas
        self._ready = False
        self._lock: asyncio.Lock | None = None
        self._leaders: dict[int, Any] = {}  # partition -> PartitionMetadata (leader handle and epoch)

    async def ensure(self) -> None:
        """Create the topic on first use: compacted, RF capped at the broker count (a small
        cluster still gets one); afterwards ``num_partitions`` is the topic's own count."""
        if self._ready:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._ready:
                return
            controller = self._controller()
            md = await controller.get_metadata.remote(MetadataRequest((self.name,)))
            if self.name not in md.topics:
                rf = max(1, min(self._replication_factor, len(md.brokers)))
                configs: dict[str, Any] = {"cleanup.policy": ["compact"]}
                if self._min_insync_replicas is not None:
                    configs["min.insync.replicas"] = min(self._min_insync_replicas, rf)
                try:
                    await controller.create_topic.remote(
                        CreateTopicsRequest(self.name, self.num_partitions, rf, configs=configs)
                    )
                except TopicAlreadyExistsError:
                    pass  # created meanwhile (by an earlier life of this actor, say): use it
                md = await controller.get_metadata.remote(MetadataRequest((self.name,)))
            self.num_partitions = len(md.topics[self.name].partitions)
            self._ready = True

    async def exists(self) -> bool:
        """Whether the controller has the topic now. A topic this actor once found can be gone
        (deleted); then what was cached about it is dropped and :meth:`ensure` creates it again."""
        md = await self._controller().get_metadata.remote(MetadataRequest((self.name,)))
        if self.name in md.topics:
            return True
        self._ready = False
        self._leaders.clear()
        return False

    async def leader(self, p: int) -> Any:
        """Partition ``p``'s leader metadata (``leader_handle``, ``leader_epoch``), waiting for
        one to be online; cached until :meth:`forget`."""
        part = self._leaders.get(p)
        if part is None:
            await self.ensure()
            part = await self._controller().wait_online.remote(TopicPartition(self.name, p), _WRITE_TIMEOUT_S)
            self._leaders[p] = part
        return part

    def forget(self, p: int) -> None:
        """Drop the cached leader of partition ``p`` (it moved or is gone): the next call asks again."""
        self._leaders.pop(p, None)

    async def append(
        self,
        p: int,
        records: list[tuple[bytes, bytes | None]],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        """Append ``(key, value)`` records as one batch to partition ``p`` and wait until it is
        durable (acks=all), retrying through leader changes for up to 30 s; then
        CoordinatorNotAvailableError.

        Written with the coordinator's origin, the one that an internal topic accepts (a
        client's append to it is refused). With a ``producer_id`` the batch is transactional
        (a transactional offset commit): epoch checks, no sequence. A non-retriable error of
        such a batch is the producer's own and raised as such.
        """
        await self.ensure()
        if producer_id >= 0:
            builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True)
        else:
            builder = RecordBatchBuilder()
        origin = AppendOrigin.COORDINATOR
        for key, value in records:
            builder.append(value, key=key)
        data = builder.build()
        deadline = SYSTEM.monotonic() + _WRITE_TIMEOUT_S
        while True:
            try:
                # Looked up inside the retry: a restarting controller fails this call too.
                part = await self.leader(p)
                await part.leader_handle.produce.remote(ProduceRequest(data, -1, 30000, part.leader_epoch, origin))
                return
            except (KafkaError, ray.exceptions.RayActorError) as exc:
                retriable = isinstance(exc, ray.exceptions.RayActorError) or exc.retriable
                self.forget(p)
                if producer_id >= 0 and not retriable:
                    # The producer's own fault (fenced, bad state): it must see the real error.
                    if isinstance(exc, InvalidProducerEpochError):
                        raise ProducerFencedError(f"producer {producer_id} epoch {producer_epoch}: {exc}") from None
                    raise error_for_code(exc.code, f"{self.name}-{p}: {exc}") from None
                if not retriable or SYSTEM.monotonic() > deadline:
                    raise CoordinatorNotAvailableError(f"cannot write to {self.name}-{p}: {exc}") from None
                await asyncio.sleep(_RETRY_BACKOFF_S)

    async def replay(self) -> AsyncIterator[tuple[int, RecordBatch, int]]:
        """Every batch of the topic, partition by partition, as ``(partition, batch, first
        offset to apply)``; the topic is created first when it does not exist yet (nothing
        to replay then, but every partition has a leader when this ends)."""
        await self.ensure()
        for p in range(self.num_partitions):
            part = await self.leader(p)
            async for batch, first in replay_partition(part.leader_handle, part.leader_epoch):
                yield p, batch, first


class Coordinator:
    """The lifecycle of a coordinator actor whose state lives in an internal topic.

    One named, detached, restartable async actor per cluster. It loads its state from
    ``self._topic`` once per actor life (lazily, on the first call, or by :meth:`start`) and
    runs a background loop; until the load is done every call raises the retriable
    CoordinatorLoadInProgressError. Subclasses set ``_kind`` and ``_topic`` and implement
    ``_load``, ``_background_loop`` and ``_count``.
    """

    _kind = "coordinator"  # how the load-in-progress error names the actor
    _topic: InternalTopic

    def __init__(self, namespace: str, config: dict[str, Any]) -> None:
        self._namespace = namespace
        self._config = broker_config(config)
        self._loaded = False
        self._load_task: asyncio.Task | None = None
        self._background: asyncio.Task | None = None
        self._creating: asyncio.Task | None = None
        self._controller: Any = None

    def _start(self) -> None:
        """Start loading and the background loop (once per actor life, in its event loop)."""
        # A load that failed (the topic's leader was not reachable, say) is started again.
        if self._load_task is None or (self._load_task.done() and not self._loaded):
            self._load_task = asyncio.get_running_loop().create_task(self._load())
        if self._background is None:
            self._background = asyncio.get_running_loop().create_task(self._background_loop())

    async def start(self) -> int:
        """Load the internal topic (done lazily anyway); returns how many groups or
        transactional ids it holds."""
        self._start()
        await asyncio.shield(self._load_task)
        return self._count()

    async def ensure_topic(self) -> bool:
        """Whether the internal topic exists; if not, start creating it in the background and
        answer False.

        FindCoordinator calls this when it finds no such topic (a cluster whose data an older
        version wrote, or the topic deleted). Kafka then creates ``__consumer_offsets`` /
        ``__transaction_state`` and answers COORDINATOR_NOT_AVAILABLE until it is there, so
        the client retries that lookup instead of waiting inside its first offset commit or
        transactional request while the topic's replicas start (a Kafka client gives up on a
        request after 30 s).
        """
        if self._creating is not None and not self._creating.done():
            return False
        if await self._topic.exists():
            return True
        self._creating = asyncio.get_running_loop().create_task(self._topic.ensure())
        self._creating.add_done_callback(self._created)
        return False

    def _created(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            # The next lookup starts another attempt; the error is the controller's (no broker yet, say).
            logger.warning("creating %s failed: %s", self._topic.name, task.exception())

    async def ping(self) -> bool:
        """Liveness probe; True once loaded."""
        self._start()
        return self._loaded

    def _check_loaded(self) -> None:
        self._start()
        if not self._loaded:
            raise CoordinatorLoadInProgressError(f"the {self._kind} is loading {self._topic.name}")

    def _controller_handle(self) -> Any:
        if self._controller is None:
            self._controller = launch.get_actor(CONTROLLER_NAME, self._namespace)
        return self._controller

    async def _load(self) -> None:
        """Replay the internal topic into memory, then set ``_loaded``."""
        raise NotImplementedError

    async def _background_loop(self) -> None:
        """The coordinator's periodic work, for the actor's life."""
        raise NotImplementedError

    def _count(self) -> int:
        """How many entries (groups, transactional ids) the coordinator holds."""
        raise NotImplementedError
