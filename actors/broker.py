"""The Broker actor: one broker's process, hosting every partition replica the broker holds.

As a Kafka broker's process holds its partitions, one Ray actor per broker holds its
:class:`~actors.partition.PartitionReplica` objects (each owning its log) and its replica
fetchers (``actors.replica_fetcher``). The controller opens and closes replicas here; clients,
coordinators and the controller call one replica through a
:class:`~actors.replica_ref.ReplicaRef`, which this actor's :meth:`Broker.call` dispatches.

Between brokers, replication is one call per round and source broker: a follower broker's
fetcher sends :meth:`Broker.replica_fetch` with every partition it follows from this broker,
and the answer carries each partition's batches (or its error). The call long-polls for
``replica.fetch.wait.max.ms`` until one of its partitions has data. The transaction
coordinator's markers for the partitions one broker leads come in one call as well
(:meth:`Broker.write_txn_markers`), and so does a consumer's fetch of many partitions
(:meth:`Broker.fetch_messages`: one parked operation however many partitions it names).

The class is plain: the controller launches it as a Ray actor (``actors.launch``), and tests
drive it without Ray.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
from typing import Any

from actors.broker_iceberg import BrokerIceberg
from actors.clock import SYSTEM, Clock
from actors.delayed_fetch import FetchPurgatory, fetch_messages
from actors.partition import DEFAULT_REPLICATION, PartitionReplica
from actors.protocol import INT32_MAX, FetchRequest, WriteTxnMarkersRequest, int_field
from actors.replica_fetcher import ReplicaFetchers
from actors.waiters import Waiters
from storage.errors import InvalidRequestError, NotLeaderOrFollowerError

logger = logging.getLogger(__name__)

# The longest a replica_fetch may long-poll (Kafka bounds replica.fetch.wait.max.ms by
# replica.lag.time.max.ms; this bounds what a hostile caller can park here).
MAX_REPLICA_FETCH_WAIT_MS = 60000
# The longest a consumer's fetch_messages may park here, whatever its caller asks (the
# gateway bounds it lower: rayqueue.fetch.wait.max.ms).
MAX_FETCH_WAIT_MS = 60000

# What a ReplicaRef may call on a replica (its public calls; ``close`` goes through
# close_replica, which also forgets the replica).
REPLICA_CALLS = frozenset(
    {
        "produce",
        "fetch",
        "write_txn_marker",
        "offset_for_leader_epoch",
        "list_offsets",
        "delete_records",
        "become_leader",
        "become_follower",
        "update_config",
        "describe",
        "read_local",
        "clean_now",
        "pause_fetching",
        "delay_fetching",
        "ping",
    }
)


class Broker:
    """Broker ``broker_id``: its replicas by (topic, partition) and its replica fetchers."""

    def __init__(
        self, broker_id: int, namespace: str = "", metrics_enabled: bool = True, clock: Clock = SYSTEM
    ) -> None:
        self.broker_id = broker_id
        self._namespace = namespace
        self._metrics_enabled = metrics_enabled
        self._clock = clock
        self._replicas: dict[tuple[str, int], PartitionReplica] = {}
        self._background: dict[tuple[str, int], asyncio.Task] = {}  # each replica's run()
        # Replicas being closed: a replica opened again in the same directory (a topic deleted
        # and created again) waits until the old one has closed (and deleted its files).
        self._closing: dict[tuple[str, int], asyncio.Future] = {}
        self._stopped: asyncio.Future | None = None  # done when the broker shuts down
        self._fetchers = ReplicaFetchers(broker_id, clock)
        # Follower brokers' replica_fetch calls long-poll here until a partition has data.
        self._fetch_waiters = Waiters()
        self._purgatory = FetchPurgatory()  # consumers' parked fetch_messages calls
        self._replica_calls = 0  # call and fetch_messages calls under way (parked ones too)
        self._wakes: dict[int, int] = {}  # follower broker -> wake_replica_fetch calls so far
        self._replica_fetches = 0  # replica_fetch calls served
        self._most_partitions_per_fetch = 0
        self._most_markers_per_call = 0
        # Iceberg topics: the leaders' translation, on a tick of its own (actors.broker_iceberg).
        self._iceberg = BrokerIceberg(broker_id, namespace, metrics_enabled, clock)

    # -- replicas: opened and closed by the controller ---------------------------------------

    async def open_replica(
        self, topic: str, partition: int, data_dir: str, config: dict[str, Any], topic_id: str | None
    ) -> bool:
        """Open (recover) the replica's log if it is not open here, and start its background
        loop; returns whether it was opened now. A replica open here under another topic id
        (a deleted topic's) is closed first."""
        key = (topic, partition)
        open_now = self._replicas.get(key)
        if open_now is not None:
            if topic_id is None or open_now.topic_id in (None, topic_id):
                return False
            await self.close_replica(topic, partition)
        closing = self._closing.get(key)
        if closing is not None:
            await asyncio.shield(closing)
        if key in self._replicas:  # opened by a concurrent call meanwhile
            return False
        replica = self._replicas[key] = PartitionReplica(
            topic,
            partition,
            self.broker_id,
            data_dir,
            config,
            topic_id,
            self._metrics_enabled,
            self._namespace,
            self._clock,
            fetchers=self._fetchers,
            on_change=functools.partial(self._replica_changed, key),
        )
        self._background[key] = asyncio.get_running_loop().create_task(replica.run())
        self._iceberg.start(self._replicas.values)
        return True

    async def close_replica(self, topic: str, partition: int, delete: bool = False) -> None:
        """Close the replica cleanly (and delete its data if asked); a replica not open here is a
        no-op. The close runs to its end even if this call is cancelled or times out."""
        key = (topic, partition)
        replica = self._replicas.pop(key, None)
        if replica is None:
            closing = self._closing.get(key)
            if closing is not None:
                await asyncio.shield(closing)
            return
        closing = self._closing[key] = asyncio.ensure_future(replica.close(delete))
        closing.add_done_callback(lambda _: self._closing.pop(key, None) if self._closing.get(key) is closing else None)
        self._background.pop(key, None)  # its loop ends with the close
        await asyncio.shield(closing)

    async def run(self) -> None:
        """Pending for the broker's life: the controller watches the broker through this call
        (it fails when the actor dies) and learns of a clean shutdown when it returns."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._stopped)

    async def call(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run one replica's call (what a ReplicaRef's ``method.remote(...)`` sends).

        NotLeaderOrFollowerError when the replica is not open here (moved, deleted, or its
        broker restarted and has not opened it yet), as Kafka answers for a partition it
        does not host."""
        if type(topic) is not str or type(partition) is not int or type(method) is not str:
            raise InvalidRequestError("a replica call names its topic (str), partition (int) and method (str)")
        replica = self._replicas.get((topic, partition))
        if replica is None:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not host {topic}-{partition}")
        if method == "close":
            return await self.close_replica(topic, partition, *args, **kwargs)
        if method not in REPLICA_CALLS:
            raise InvalidRequestError(f"no replica call {method!r:.100}")
        self._replica_calls += 1
        try:
            answer = await getattr(replica, method)(*args, **kwargs)
        finally:
            self._replica_calls -= 1
        if method == "describe":  # with its Iceberg translation, when this broker translates it
            answer["iceberg"] = self._iceberg.describe(topic, partition)
        return answer

    async def fetch_messages(
        self, requests: list[tuple[str, int, FetchRequest]], max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> list[Any]:
        """A consumer's fetch of many partitions hosted here, in one call (Kafka's
        ReplicaManager.fetchMessages): each (topic, partition, FetchRequest)'s FetchResponse or
        error, in order; parked as one operation until ``min_bytes`` are readable or
        ``max_wait_ms`` (at most MAX_FETCH_WAIT_MS) passed (``actors.delayed_fetch``)."""
        max_wait_ms = min(int_field("max_wait_ms", max_wait_ms, 0, INT32_MAX), MAX_FETCH_WAIT_MS)
        min_bytes = int_field("min_bytes", min_bytes, 0, INT32_MAX)
        max_bytes = int_field("max_bytes", max_bytes, 0, INT32_MAX)
        self._replica_calls += 1
        try:
            return await fetch_messages(
                self._replica_for, self._purgatory, requests, max_wait_ms, min_bytes, max_bytes, self._clock
            )
        finally:
            self._replica_calls -= 1

    def _replica_changed(self, key: tuple[str, int]) -> None:
        """A hosted replica's log, high watermark or role changed: wake the waits on it."""
        self._fetch_waiters.notify()
        self._purgatory.changed(key)

    # -- the leader side of replication ------------------------------------------------------

    async def replica_fetch(
        self,
        replica_id: int,
        requests: list[tuple[str, int, FetchRequest]],
        max_wait_ms: int,
        max_bytes: int = DEFAULT_REPLICATION["replica.fetch.response.max.bytes"],
    ) -> list[Any]:
        """One follower broker's fetch of every partition it follows from this broker.

        Answers, in the order asked, each partition's FetchResponse, its error (the exception
        object), or None for a partition with data left out of this answer: past ``max_bytes``
        (Kafka's replica.fetch.response.max.bytes; the first batch always comes whole) only
        partitions that are caught up are read, which tells the leader their log end. Answers
        at once when a partition has data or an error; else waits up to ``max_wait_ms`` until
        one has (or its leader epoch changed, or the follower broker asks to be answered:
        ``wake_replica_fetch``)."""
        replica_id = int_field("replica_id", replica_id, 0, INT32_MAX)
        max_wait_ms = int_field("max_wait_ms", max_wait_ms, 0, MAX_REPLICA_FETCH_WAIT_MS)
        max_bytes = int_field("max_bytes", max_bytes, 0, INT32_MAX)
        if not isinstance(requests, list):
            raise InvalidRequestError("replica_fetch takes a list of (topic, partition, FetchRequest)")
        self._replica_fetches += 1
        self._most_partitions_per_fetch = max(self._most_partitions_per_fetch, len(requests))
        answers = await self._fetch_now(replica_id, requests, max_bytes)
        if max_wait_ms <= 0 or any(_worth_answering(a) for a in answers):
            return answers  # (a malformed entry is answered with its error: all are well formed past here)
        wakes = self._wakes.get(replica_id, 0)
        await self._fetch_waiters.wait(
            lambda: self._wakes.get(replica_id, 0) != wakes or any(self._fetch_ready(*r) for r in requests),
            max_wait_ms / 1000,
        )
        # After a timeout too: the answer carries the latest HW.
        return await self._fetch_now(replica_id, requests, max_bytes)

    async def write_txn_markers(self, markers: list[tuple[str, int, WriteTxnMarkersRequest]]) -> list[Any]:
        """The transaction coordinator's markers for the partitions this broker leads, in one
        call (Kafka's WriteTxnMarkers); answers, in order, each marker's ProduceResponse or
        its error (the exception object). They are written concurrently, each acks=all."""
        if not isinstance(markers, list):
            raise InvalidRequestError("write_txn_markers takes a list of (topic, partition, WriteTxnMarkersRequest)")
        self._most_markers_per_call = max(self._most_markers_per_call, len(markers))

        async def one(entry: Any) -> Any:
            replica, request = self._replica_for(entry)
            return await replica.write_txn_marker(request)

        return list(await asyncio.gather(*(one(entry) for entry in markers), return_exceptions=True))

    async def wake_replica_fetch(self, replica_id: int) -> None:
        """Answer follower broker ``replica_id``'s waiting replica_fetch now (its fetcher took a
        new partition, which must not wait for the long poll to end)."""
        replica_id = int_field("replica_id", replica_id, 0, INT32_MAX)
        self._wakes[replica_id] = self._wakes.get(replica_id, 0) + 1
        self._fetch_waiters.notify()

    async def _fetch_now(self, replica_id: int, requests: list[Any], max_bytes: int) -> list[Any]:
        answers: list[Any] = []
        budget = max_bytes
        seen: set[PartitionReplica] = set()
        for entry in requests:
            try:
                replica, fetch = self._replica_for(entry)
                if type(fetch) is not FetchRequest or fetch.replica_id != replica_id:
                    raise InvalidRequestError("a replica fetch carries the follower broker's FetchRequest")
                if replica in seen:
                    raise InvalidRequestError(f"{replica.topic}-{replica.partition} asked twice in one fetch")
                seen.add(replica)
                if budget <= 0 and replica.log_end_offset > fetch.fetch_offset:
                    answers.append(None)  # its data goes in a later round
                    continue
                limit = max(0, min(fetch.partition_max_bytes, budget))
                answer = await replica.fetch(dataclasses.replace(fetch, max_wait_ms=0, partition_max_bytes=limit))
                budget -= len(answer.records)
                answers.append(answer)
            except Exception as exc:  # noqa: BLE001 - each partition's error goes back in its answer
                answers.append(exc)
        return answers

    def _replica_for(self, entry: Any) -> tuple[PartitionReplica, Any]:
        """The replica an entry (topic, partition, request) of a many-partition call names,
        and its request."""
        if type(entry) is not tuple or len(entry) != 3:
            raise InvalidRequestError("an entry names (topic, partition, request)")
        topic, partition, request = entry
        if type(topic) is not str or type(partition) is not int:
            raise InvalidRequestError("a replica is named by its topic (str) and partition (int)")
        replica = self._replicas.get((topic, partition))
        if replica is None:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not host {topic}-{partition}")
        return replica, request

    def _fetch_ready(self, topic: str, partition: int, fetch: FetchRequest) -> bool:
        replica = self._replicas.get((topic, partition))
        return replica is None or replica.follower_fetch_ready(fetch.fetch_offset, fetch.current_leader_epoch)

    # -- introspection and shutdown ---------------------------------------------------------

    async def ping(self) -> int:
        """Liveness probe; returns the broker id."""
        return self.broker_id

    async def describe_broker(self) -> dict[str, Any]:
        """The replicas open here, the fetchers (their partitions and rounds), the
        replica_fetch calls served and the most partitions one carried, the most markers
        one write_txn_markers call carried, the replica calls under way (parked fetches
        included) and the fetch_messages calls parked now (for tests and tools)."""
        return {
            "broker_id": self.broker_id,
            "replicas": sorted(self._replicas),
            "fetchers": self._fetchers.describe(),
            "replica_fetches_served": self._replica_fetches,
            "most_partitions_per_fetch": self._most_partitions_per_fetch,
            "most_markers_per_call": self._most_markers_per_call,
            "replica_calls_in_flight": self._replica_calls,
            "parked_fetches": len(self._purgatory),
            "pid": os.getpid(),
        }

    async def shutdown(self, delete: bool = False) -> None:
        """Close every replica (the controller's cluster shutdown); ``run`` then returns."""
        self._fetchers.stop()
        await self._iceberg.close()
        for topic, partition in list(self._replicas):
            try:
                await self.close_replica(topic, partition, delete)
            except Exception:  # one replica's failure must not keep the others open
                logger.exception("broker %d: closing %s-%d failed", self.broker_id, topic, partition)
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)


def _worth_answering(answer: Any) -> bool:
    return answer is not None and (isinstance(answer, BaseException) or bool(answer.records))
