"""The host actors' lifecycle, for the controller: start, attach, watch, reopen after a death,
stop and shut down (Kafka's broker lifecycle, seen from the controller's side).

The controller decides (which replicas exist, who leads, when a broker stops); this module
does what it takes with the host actors (``actors.broker.actor.BrokerHost``), placed as
``rayqueue.broker.placement`` says (``actors.broker.placement``):

- :meth:`BrokerHosts.open` finds or launches the host of each replica (pinned to its broker's
  node: its disk is there), watches it, and opens the replicas, one ``open_replicas`` call per
  host; each replica comes back as a ReplicaRef;
- :meth:`BrokerHosts.leader_and_isr` sends one LeaderAndIsr per host with the state of every
  partition of it that changed, all hosts at once;
- :meth:`BrokerHosts.close`, :meth:`BrokerHosts.update_topic_config`: one call per host;
- a host's death (its pending ``run`` call fails) is told to the controller
  (``on_death``), which elects without its replicas; :meth:`BrokerHosts.reopen` then runs the
  controller's reopening passes with backoff until every replica is open again;
- :meth:`BrokerHosts.ensure_listener` starts (or finds) the host serving a broker's Kafka
  listener (``HostPlacement.listener_host``), launched with its listeners, which it serves
  on its own event loop; a broker holding no replica has that host all the same;
- :meth:`BrokerHosts.stop_hosts` kills a stopped broker's hosts and waits until their names
  are free; :meth:`BrokerHosts.shutdown` closes and kills every host.

Ray is reached through ``actors.launch`` (launches, lookups, kills, the live nodes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import Any

import ray

from actors import launch
from actors.broker.actor import BrokerHost, ListenerSpec
from actors.broker.partition_files import remove_stray_partitions
from actors.broker.placement import HostId, HostPlacement, Placement
from actors.broker.replica_ref import ReplicaRef, actor_key
from actors.clock import SYSTEM, Clock
from actors.listeners import BrokerListener
from actors.protocol_broker import LeaderAndIsrPartitionState, LeaderAndIsrRequest, OpenReplica

logger = logging.getLogger(__name__)

HOST_START_TIMEOUT_S = 30.0  # waiting for a dead host actor's name to be released
HOST_PING_TIMEOUT_S = 10.0  # a host that does not answer a ping within this is replaced
HOST_CALL_TIMEOUT_S = 30.0  # a hung host must not stall the controller
STRAY_SWEEP_TIMEOUT_S = 30.0  # how long a starting broker's stray-log sweep may hold the controller
SHUTDOWN_CLOSE_TIMEOUT_S = 30.0
REOPEN_BACKOFF_S = 0.5  # after a pass that could not reopen every replica of a dead host
REOPEN_BACKOFF_MAX_S = 10.0

# One replica: (topic, partition, broker id).
Replica = tuple[str, int, int]
# The controller's reopening pass for one host: True when every replica is open, None to give
# up (the broker stopped or its node is down), False to try again after a backoff.
ReopenPass = Callable[[], Awaitable[bool | None]]
# A broker's listeners as its node resolves them (None: the cluster serves no Kafka listener).
ListenerPlan = Callable[[int], list[BrokerListener] | None]


class BrokerHosts:
    """A cluster's host actors, started and watched for the controller (see the module
    docstring). ``on_death(host, actor)`` is awaited when a watched host dies; ``listener_plan``
    gives a broker's listeners, which its listener host is launched with."""

    def __init__(
        self,
        namespace: str,
        config: Mapping[str, Any],
        on_death: Callable[[HostId, Any], Awaitable[None]],
        clock: Clock = SYSTEM,
        listener_plan: ListenerPlan | None = None,
    ) -> None:
        self.placement = HostPlacement.from_config(dict(config))
        self._namespace = namespace
        self._config = dict(config)
        self._listener_plan = listener_plan
        self._metrics_enabled = bool(config.get("rayqueue.metrics.enabled", True))
        self._on_death = on_death
        self._clock = clock
        self._hosts: dict[HostId, Any] = {}  # the live host actors this controller uses
        self._ids: dict[Hashable, HostId] = {}  # an actor's key -> its host
        self._watches: dict[HostId, tuple[Any, asyncio.Task]] = {}
        self._locks: dict[HostId, asyncio.Lock] = {}
        self._reopening: dict[HostId, asyncio.Task] = {}
        self._stopping = False

    # -- which host -------------------------------------------------------------------------

    def host_id(self, topic: str, partition: int, broker_id: int) -> HostId:
        """The host of broker ``broker_id``'s replica of ``topic``-``partition``."""
        return self.placement.host_for(broker_id, topic, partition)

    def host_of(self, ref: ReplicaRef) -> HostId | None:
        """The host a ReplicaRef's replica is in (None: a host this controller no longer uses)."""
        return self._ids.get(ref.host_key)

    def hosted_by(self, handles: Mapping[Replica, ReplicaRef], actor: Any) -> list[Replica]:
        """The replicas among ``handles`` that host actor ``actor`` held."""
        key = actor_key(actor)
        return [replica for replica, ref in handles.items() if ref.host_key == key]

    def host_ids(self, broker_id: int, partitions: Iterable[tuple[str, int]]) -> set[HostId]:
        """Every host broker ``broker_id`` may have for ``partitions`` (its replicas'), and
        the ones this controller knows of."""
        out = {self.host_id(t, p, broker_id) for t, p in partitions}
        out |= {h for h in self._hosts if h.broker_id == broker_id}
        if self.placement.num_hosts > 1:
            out |= {HostId(broker_id, str(k)) for k in range(self.placement.num_hosts)}
        out.add(self.placement.listener_host(broker_id))
        return out

    def is_listener_host(self, host_id: HostId) -> bool:
        """Whether ``host_id`` serves its broker's Kafka listener (when the cluster has one)."""
        return self.serves_listeners and host_id == self.placement.listener_host(host_id.broker_id)

    @property
    def serves_listeners(self) -> bool:
        """Whether the brokers serve Kafka listeners (``listeners`` is set)."""
        return self._listener_plan is not None and bool(self._config.get("listeners"))

    def by_broker(self) -> dict[int, list[Any]]:
        """The live host actors in use, by broker id."""
        out: dict[int, list[Any]] = {}
        for host_id, actor in self._hosts.items():
            out.setdefault(host_id.broker_id, []).append(actor)
        return out

    def describe(self) -> dict[str, Any]:
        """The placement setting and the host actors in use."""
        listening = sum(1 for host_id in self._hosts if self.is_listener_host(host_id))
        return {
            "placement": str(self.placement.placement),
            "host_actors": len(self._hosts),
            "listener_hosts": listening,
        }

    # -- start and attach -------------------------------------------------------------------

    async def open(
        self, wanted: list[tuple[Replica, str, OpenReplica]]
    ) -> dict[Replica, tuple[ReplicaRef, bool] | None]:
        """Open replicas, each ``(replica, its broker's node, what to open)``: one
        ``open_replicas`` call per host, the hosts started where needed. Answers per replica
        its ref and whether it was opened now (False: it was open), or None when its host
        could not be reached (its node is down, or it died meanwhile)."""
        by_host: dict[HostId, list[tuple[Replica, str, OpenReplica]]] = {}
        for item in wanted:
            (topic, partition, broker_id), _, _ = item
            by_host.setdefault(self.host_id(topic, partition, broker_id), []).append(item)
        out: dict[Replica, tuple[ReplicaRef, bool] | None] = {}

        async def one_host(host_id: HostId, items: list[tuple[Replica, str, OpenReplica]]) -> None:
            actor = await self.host(host_id, items[0][1])
            answers: list[Any] = []
            if actor is not None:
                try:
                    answers = await actor.open_replicas.remote([spec for _, _, spec in items])
                except ray.exceptions.RayActorError:
                    logger.warning("%s died while opening replicas", host_id)
            for i, (replica, _, _) in enumerate(items):
                answer = answers[i] if i < len(answers) else None
                if answer is None or isinstance(answer, BaseException):
                    if isinstance(answer, BaseException):
                        logger.warning("%s could not open %s-%d: %s", host_id, replica[0], replica[1], answer)
                    out[replica] = None
                else:
                    out[replica] = (ReplicaRef(actor, replica[0], replica[1], replica[2]), bool(answer))

        await asyncio.gather(*(one_host(h, items) for h, items in by_host.items()))
        return out

    async def host(self, host_id: HostId, node_id: str) -> Any | None:
        """The live actor of ``host_id``, started on ``node_id`` if there is none; None when
        that node is down."""
        async with self._locks.setdefault(host_id, asyncio.Lock()):
            name = host_id.name
            for actor in (self._hosts.get(host_id), launch.find_actor(name, self._namespace)):
                if actor is None:
                    continue
                try:
                    await asyncio.wait_for(actor.ping.remote(), HOST_PING_TIMEOUT_S)
                except (ray.exceptions.RayActorError, TimeoutError):
                    self._forget(host_id)
                    continue
                self._attach(host_id, actor)
                return actor
            if node_id not in launch.alive_nodes():
                logger.warning("%s's node %s is down; its replicas stay offline", host_id, node_id)
                return None
            listener = self._listener_spec(host_id)
            deadline = self._clock.monotonic() + HOST_START_TIMEOUT_S
            while True:
                try:
                    actor = launch.launch(
                        BrokerHost, launch.BROKER, name, self._namespace, node_id, host_id.broker_id,
                        self._namespace, self._metrics_enabled, str(host_id), listener,
                    )  # fmt: skip
                    await actor.ping.remote()
                    self._attach(host_id, actor)
                    return actor
                except ValueError:
                    # The dead actor's name is released asynchronously; try again shortly.
                    if self._clock.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)

    def _listener_spec(self, host_id: HostId) -> ListenerSpec | None:
        """What ``host_id`` is launched with to serve its broker's listeners (None: it serves none)."""
        if not self.is_listener_host(host_id):
            return None
        listeners = self._listener_plan(host_id.broker_id)  # type: ignore[misc]
        return ListenerSpec(self._config, tuple(listeners)) if listeners else None

    async def ensure_listener(self, broker_id: int, node_id: str) -> Any | None:
        """The live host serving broker ``broker_id``'s Kafka listener, started on ``node_id``
        (with its listeners) when there is none; None when the cluster serves no listener or
        that node is down."""
        if not self.serves_listeners:
            return None
        return await self.host(self.placement.listener_host(broker_id), node_id)

    def listener_host_actor(self, broker_id: int) -> Any | None:
        """The live actor serving broker ``broker_id``'s listener, when this controller uses one."""
        return self._hosts.get(self.placement.listener_host(broker_id)) if self.serves_listeners else None

    def _attach(self, host_id: HostId, actor: Any) -> None:
        """Use ``actor`` for the host and watch it: its pending ``run`` call fails when it dies."""
        self._hosts[host_id] = actor
        self._ids[actor_key(actor)] = host_id
        watched, watching = self._watches.get(host_id, (None, None))
        if watching is not None and not watching.done() and watched == actor:
            return
        if watching is not None:  # an earlier actor's watch (its death was handled)
            watching.cancel()
        self._watches[host_id] = (actor, asyncio.get_running_loop().create_task(self._watch(host_id, actor)))

    def _forget(self, host_id: HostId) -> None:
        actor = self._hosts.pop(host_id, None)
        if actor is not None:
            self._ids.pop(actor_key(actor), None)

    async def _watch(self, host_id: HostId, actor: Any) -> None:
        try:
            await actor.run.remote()
        except ray.exceptions.RayActorError:
            if self._stopping:
                return
            logger.warning("%s's actor died; electing without it, then reopening its replicas", host_id)
            if self._hosts.get(host_id) == actor:
                self._forget(host_id)
            try:
                await self._on_death(host_id, actor)
            except Exception:  # a task's exception would otherwise vanish silently
                logger.exception("handling the death of %s failed", host_id)

    def reopen(self, host_id: HostId, one_pass: ReopenPass) -> None:
        """Run the controller's reopening passes for a dead host until one says every replica
        is open (or to give up), backing off after a pass that could not open them all."""
        running = self._reopening.get(host_id)
        if running is None or running.done():
            self._reopening[host_id] = asyncio.get_running_loop().create_task(self._reopen(one_pass))

    async def _reopen(self, one_pass: ReopenPass) -> None:
        backoff = REOPEN_BACKOFF_S
        while not self._stopping:
            done = await one_pass()
            if done is None or done:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, REOPEN_BACKOFF_MAX_S)

    # -- calls to many hosts ------------------------------------------------------------------

    async def leader_and_isr(
        self,
        entries: list[tuple[ReplicaRef, LeaderAndIsrPartitionState]],
        controller: Any,
        replication: Mapping[str, Any],
        retention_check_ms: int,
    ) -> None:
        """One LeaderAndIsr per host with the state of each of its replicas in ``entries``
        (leaders first), all hosts at once. A host that died or hangs is logged: its death is
        the watch's business."""
        by_host: dict[Hashable, tuple[Any, list[tuple[ReplicaRef, LeaderAndIsrPartitionState]]]] = {}
        for ref, state in entries:
            by_host.setdefault(ref.host_key, (ref.host, []))[1].append((ref, state))
        calls = []
        for host, items in by_host.values():
            items.sort(key=lambda item: item[1].leader != item[0].broker_id)
            request = LeaderAndIsrRequest(
                tuple((ref.topic, ref.partition, state) for ref, state in items),
                controller,
                dict(replication),
                retention_check_ms,
            )
            calls.append(self._call(host.leader_and_isr.remote(request)))
        for answers in await asyncio.gather(*calls):
            for answer in answers or ():
                if isinstance(answer, BaseException):
                    logger.warning("LeaderAndIsr refused: %s", answer)

    async def close(self, refs: Iterable[ReplicaRef], delete: bool) -> None:
        """Close replicas (and delete their data if asked): one call per host, closed and
        forgotten by the host before this returns. A replica's own host (placement
        ``replica``) is stopped with it: it holds nothing else."""
        refs = list(refs)
        by_host: dict[Hashable, tuple[Any, list[tuple[str, int]]]] = {}
        for ref in refs:
            by_host.setdefault(ref.host_key, (ref.host, []))[1].append((ref.topic, ref.partition))
        await asyncio.gather(
            *(self._call(host.close_replicas.remote(partitions, delete)) for host, partitions in by_host.values())
        )
        if self.placement.placement is Placement.REPLICA:
            await self.stop_hosts([h for ref in refs if (h := self.host_of(ref)) is not None])

    async def update_topic_config(self, refs: Iterable[ReplicaRef], topic: str, config: dict[str, Any]) -> None:
        """A topic's new effective config to the hosts of its replicas ``refs``."""
        hosts = {ref.host_key: ref.host for ref in refs}
        await asyncio.gather(*(self._call(host.update_topic_config.remote(topic, config)) for host in hosts.values()))

    async def _call(self, ref: Any) -> Any:
        # A dead host is the watcher's business; a hung one must not stall the controller.
        try:
            return await asyncio.wait_for(ref, HOST_CALL_TIMEOUT_S)
        except (ray.exceptions.RayActorError, TimeoutError):
            logger.warning("host call failed", exc_info=True)
            return None

    async def remove_strays(self, dirs: Mapping[int, tuple[str, str, set[str]]]) -> None:
        """On each broker's node, delete the partition directories it no longer holds (topics
        deleted or replicas moved while it was down): ``dirs`` maps a broker to its node, its
        data dir and the partition directories it holds. A failure is logged: it leaves disk
        space behind, never a wrong log."""
        calls = {
            b: launch.run_on_node(remove_stray_partitions, node_id, data_dir, hosted)
            for b, (node_id, data_dir, hosted) in dirs.items()
        }
        for b, ref in calls.items():
            try:
                # Bounded: this runs under the controller's lock.
                removed = await asyncio.wait_for(ref, STRAY_SWEEP_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - see the docstring
                logger.exception("broker %d: could not remove stray partition directories", b)
                continue
            if removed:
                logger.warning("broker %d: removed stray partition directories %s", b, removed)

    # -- stop and shut down -----------------------------------------------------------------

    async def stop_hosts(self, host_ids: Iterable[HostId]) -> None:
        """Kill a stopped broker's hosts (their replicas are closed) and wait until their names
        are free: a start right after must start new actors, not attach to dying ones."""
        await asyncio.gather(*(self._stop(host_id) for host_id in host_ids))

    async def _stop(self, host_id: HostId) -> None:
        async with self._locks.setdefault(host_id, asyncio.Lock()):
            _, watching = self._watches.pop(host_id, (None, None))
            if watching is not None:
                watching.cancel()
            reopening = self._reopening.pop(host_id, None)
            if reopening is not None:
                reopening.cancel()
            name = host_id.name
            actor = self._hosts.get(host_id) or launch.find_actor(name, self._namespace)
            self._forget(host_id)
            if actor is None:
                return
            launch.kill(actor)
            deadline = self._clock.monotonic() + HOST_START_TIMEOUT_S
            while launch.find_actor(name, self._namespace) is not None and self._clock.monotonic() < deadline:
                await asyncio.sleep(0.05)

    async def shutdown(self, delete: bool, others: Iterable[HostId] = ()) -> None:
        """Close every host's replicas cleanly (bounded), then kill every host, those this
        controller never attached to (``others``, found by name) too."""
        self._stopping = True
        for _, task in self._watches.values():
            task.cancel()
        for task in self._reopening.values():
            task.cancel()
        closes = [asyncio.ensure_future(host.shutdown.remote(delete)) for host in self._hosts.values()]
        if closes:
            # Bounded: a host that cannot close its replicas cleanly is killed below all the
            # same (its logs recover on the next open), so shutdown never hangs on one.
            done, _ = await asyncio.wait(closes, timeout=SHUTDOWN_CLOSE_TIMEOUT_S)
            for future in done:
                error = future.exception()
                if error is not None and not isinstance(error, ray.exceptions.RayActorError):
                    logger.warning("host shutdown failed: %s", error)
        for host in self._hosts.values():
            launch.kill(host)
        for host_id in set(others) - set(self._hosts):
            stray = launch.find_actor(host_id.name, self._namespace)
            if stray is not None:
                launch.kill(stray)
        self._hosts.clear()
        self._ids.clear()
