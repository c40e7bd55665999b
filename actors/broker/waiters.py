"""Waiting until a predicate over an actor's state holds: Kafka's delayed operations, in small.

A partition replica's long-polling fetches, its acks=all produces (waiting for the high
watermark) and a producer's reordered calls (waiting for their turn) each wait until a
predicate over the replica's state holds, or a timeout passes; whatever changes that state
calls :meth:`Waiters.notify`. Kafka keeps such requests in its purgatory and completes them
with ``tryComplete`` when a key they watch changes.

``asyncio.Condition`` would do it, at a cost on the hot path: each woken waiter must take
the condition's lock again, one event-loop step after another, before it can check its
predicate, and ``asyncio.wait_for`` wraps each wait in a task of its own. Here a notify
checks every predicate at once, in the notifier's step, and resolves the futures of those
that hold; a wait is one future and one timer. The event loop is single-threaded, so no
lock is needed: a predicate only reads the state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Waiters:
    """Coroutines waiting until their predicate holds. It may be created anywhere (an actor's
    ``__init__`` runs outside its event loop): each wait makes its future in the running loop."""

    def __init__(self) -> None:
        self._waiting: dict[asyncio.Future[bool], Callable[[], bool]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    async def wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Return True once ``predicate`` holds (checked now and on every :meth:`notify`),
        False when ``timeout_s`` passes first. An exception the predicate raises is raised
        here."""
        if predicate():
            return True
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiting[waiter] = predicate
        timer = loop.call_later(timeout_s, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiting.pop(waiter, None)

    def notify(self) -> None:
        """The state changed: wake every waiter whose predicate holds now."""
        if not self._waiting:
            return
        for waiter, predicate in list(self._waiting.items()):
            if waiter.done():
                continue
            try:
                holds = predicate()
            except Exception as exc:  # noqa: BLE001 - the waiter raises it, not the notifier
                waiter.set_exception(exc)
                continue
            if holds:
                waiter.set_result(True)


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
