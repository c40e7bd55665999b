"""Waiting until a predicate over a replica's state holds: Kafka's delayed operations, in small.

A partition replica's acks=all produces (waiting for the high watermark) and a producer's
reordered calls (waiting for their turn) each wait until a predicate over the replica's state
holds, or a timeout passes; whatever changes that state calls :meth:`Waiters.notify`. A host's
long-polling fetches wait on many partitions at once (:class:`PartitionWaiters`), woken when
one of the partitions they watch changes. Kafka keeps such requests in its purgatory, watched
by partition, and completes them with ``tryComplete`` when a key they watch changes.

``asyncio.Condition`` would do it, at a cost on the hot path: each woken waiter must take
the condition's lock again, one event-loop step after another, before it can check its
predicate, and ``asyncio.wait_for`` wraps each wait in a task of its own. Here a notify
checks every predicate at once, in the notifier's step, and resolves the futures of those
that hold; a wait is one future and one timer. The event loop is single-threaded, so no
lock is needed: a predicate only reads the state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable


class Waiters:
    """Coroutines waiting until their predicate holds, all woken by one :meth:`notify` (a
    :class:`PartitionWaiters` whose waits watch no key). It may be created anywhere (an actor's
    ``__init__`` runs outside its event loop): each wait makes its future in the running loop."""

    def __init__(self) -> None:
        self._waits = PartitionWaiters()

    def __len__(self) -> int:
        return len(self._waits)

    async def wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Return True once ``predicate`` holds (checked now and on every :meth:`notify`),
        False when ``timeout_s`` passes first. An exception the predicate raises is raised
        here."""
        return await self._waits.wait((), predicate, timeout_s)

    def notify(self) -> None:
        """The state changed: wake every waiter whose predicate holds now."""
        self._waits.notify_all()


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class PartitionWaiters:
    """Coroutines waiting until their predicate holds, each watching some keys (partitions):
    :meth:`notify` of a key checks only the waits that watch it, :meth:`notify_all` every wait
    (a host's long-polling fetches, woken by their partitions' appends)."""

    def __init__(self) -> None:
        self._watching: dict[Hashable, dict[asyncio.Future[bool], Callable[[], bool]]] = {}
        self._all: dict[asyncio.Future[bool], Callable[[], bool]] = {}

    def __len__(self) -> int:
        return len(self._all)

    async def wait(self, keys: Iterable[Hashable], predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Return True once ``predicate`` holds (checked now and on every notify of one of
        ``keys``, or of all), False when ``timeout_s`` passes first. An exception the
        predicate raises is raised here."""
        if predicate():
            return True
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        keys = list(dict.fromkeys(keys))
        for key in keys:
            self._watching.setdefault(key, {})[waiter] = predicate
        self._all[waiter] = predicate
        timer = loop.call_later(timeout_s, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._all.pop(waiter, None)
            for key in keys:
                watchers = self._watching.get(key)
                if watchers is not None:
                    watchers.pop(waiter, None)
                    if not watchers:
                        del self._watching[key]

    def notify(self, key: Hashable) -> None:
        """``key`` changed: wake every wait watching it whose predicate holds now."""
        watchers = self._watching.get(key)
        if watchers:
            _wake(list(watchers.items()))

    def notify_all(self) -> None:
        """Something every wait may depend on changed: check them all."""
        if self._all:
            _wake(list(self._all.items()))


def _wake(waiting: list[tuple[asyncio.Future[bool], Callable[[], bool]]]) -> None:
    for waiter, predicate in waiting:
        if waiter.done():
            continue
        try:
            holds = predicate()
        except Exception as exc:  # noqa: BLE001 - the waiter raises it, not the notifier
            waiter.set_exception(exc)
            continue
        if holds:
            waiter.set_result(True)
