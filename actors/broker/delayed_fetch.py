"""A consumer's fetch of many partitions in one host call: Kafka's ``fetchMessages`` and its
``DelayedFetch``, in small (``ReplicaManager.fetch_messages`` runs a consumer's fetch here).

Kafka's ReplicaManager reads every partition a Fetch names at once; when the bytes read fall
short of ``min_bytes`` it parks the fetch in its purgatory as one delayed operation watched
by each of its partitions, and completes it when a change to one of them makes enough bytes
readable, when one of them can no longer be served here (a leader change, a closed replica),
or at ``max_wait_ms``. Here the same: :func:`fetch_messages` reads the partitions (yielding
the event loop every ``PACE`` of them) and, if short, parks one :class:`DelayedFetch` in the
host's :class:`FetchPurgatory`. A parked fetch costs one small entry per partition, one
future and one timer, however many partitions it names; a change to a partition costs each
fetch watching that partition a constant amount of work (no read).

What counts toward ``min_bytes`` while parked: when a partition's readable end (the high
watermark; the last stable offset for read_committed) moves past the fetch offset, the bytes
appended to its log since the fetch first parked, and at least one byte; bytes appended above
the readable end count only once it moves (a leader's own appends wait for its followers).
When the count reaches what was missing, every partition is read again and that is the
answer; if the reads still fall short (bytes above the high watermark were counted) and time
is left, the fetch parks again, counting from where it first parked. ``min_bytes`` above ``max_bytes`` waits for
``max_bytes``: the answer could not carry more.

Cancelling :func:`fetch_messages` (the client's connection closed: the gateway cancels the
Ray call) leaves nothing behind: the parked fetch leaves the purgatory in a ``finally``.

A replica here is read with ``read(request, limit, min_one_batch)`` (whole batches, no wait)
and watched with ``fetch_position(committed)``; the host checks the caller's principal and
records the metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from actors.clock import SYSTEM, Clock
from actors.protocol import CONSUMER_REPLICA_ID, FetchRequest, IsolationLevel
from storage.errors import InvalidRequestError

# Partitions read between two yields to the event loop (a read is tens of microseconds).
PACE = 256

Key = tuple[str, int]
# (topic, partition, request) -> (replica, request); raises for one not served here.
Lookup = Callable[[Any], tuple[Any, Any]]


class DelayedFetch:
    """One parked fetch: what it watches per partition and the bytes counted so far."""

    __slots__ = ("need", "counted", "touched", "future", "_entries")

    def __init__(
        self, watched: dict[Key, tuple[Any, int, bool]], need: int, starts: dict[Key, int] | None = None
    ) -> None:
        self.need = need
        self.counted = 0
        self.touched = False  # some partition changed while parked
        self.future: asyncio.Future[bool] | None = None
        # key -> [replica, fetch offset, committed, start size, seen end, leader epoch, counted]
        self._entries: dict[Key, list[Any]] = {}
        for key, (replica, offset, committed) in watched.items():
            end, size, epoch, _ = replica.fetch_position(committed)
            start = size if starts is None else starts.get(key, size)
            self._entries[key] = [replica, offset, committed, start, end, epoch, 0]

    @property
    def starts(self) -> dict[Key, int]:
        """Each partition's log size when the fetch first parked (a fetch parked again counts
        from there: bytes appended above the readable end before then count once readable)."""
        return {key: entry[3] for key, entry in self._entries.items()}

    @property
    def keys(self) -> list[Key]:
        """The partitions it watches."""
        return list(self._entries)

    def on_change(self, key: Key) -> None:
        """Partition ``key`` changed: count its newly readable bytes; complete when enough are,
        or when the partition closed or changed leader epoch (the answer carries its error)."""
        entry = self._entries.get(key)
        future = self.future
        if entry is None or future is None or future.done():
            return
        self.touched = True
        replica, offset, committed, start, seen, epoch, before = entry
        try:
            end, size, now_epoch, closed = replica.fetch_position(committed)
        except Exception:  # noqa: BLE001 - the read that answers tells what is wrong
            future.set_result(True)
            return
        if closed or now_epoch != epoch:
            future.set_result(True)
            return
        if end <= offset or end == seen:
            return  # nothing more is readable: bytes above the readable end do not count yet
        counted = max(size - start, 1)
        entry[6] = counted
        self.counted += counted - before
        if self.counted >= self.need:
            future.set_result(True)


class FetchPurgatory:
    """A host's parked fetches, by the partitions they watch (Kafka's fetch purgatory)."""

    def __init__(self) -> None:
        self._watchers: dict[Key, dict[DelayedFetch, None]] = {}
        self._parked = 0

    def __len__(self) -> int:
        """Fetches parked now."""
        return self._parked

    def changed(self, key: Key) -> None:
        """Partition ``key`` changed (appended, HW or LSO moved, leader changed, closed)."""
        ops = self._watchers.get(key)
        if ops:
            for op in list(ops):
                op.on_change(key)

    async def wait(self, op: DelayedFetch, timeout_s: float) -> bool:
        """Park ``op`` until it completes (True) or ``timeout_s`` passes (False)."""
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        op.future = future
        keys = op.keys
        for key in keys:
            self._watchers.setdefault(key, {})[op] = None
        self._parked += 1
        timer = loop.call_later(timeout_s, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()
            self._parked -= 1
            for key in keys:
                ops = self._watchers.get(key)
                if ops is not None:
                    ops.pop(op, None)
                    if not ops:
                        del self._watchers[key]


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


async def fetch_messages(
    lookup: Lookup,
    purgatory: FetchPurgatory,
    requests: list[Any],
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    clock: Clock = SYSTEM,
) -> list[Any]:
    """Each of ``requests``' (topic, partition, FetchRequest) answered in order: its
    FetchResponse or its error (the exception object). Answers at once when ``min_bytes``
    (at most ``max_bytes``) are readable or a partition fails; else parks until they are, or
    ``max_wait_ms`` passed (see the module docstring). ``max_bytes`` is shared in request
    order (the first batch read always comes whole: KIP-74)."""
    if not isinstance(requests, list):
        raise InvalidRequestError("fetch_messages takes a list of (topic, partition, FetchRequest)")
    if not requests:
        return []  # nothing to wait on
    deadline = clock.monotonic() + max_wait_ms / 1000
    need = min(min_bytes, max_bytes)
    starts: dict[Key, int] | None = None
    while True:
        answers, got = await _read(lookup, requests, max_bytes)
        remaining = deadline - clock.monotonic()
        if got >= need or remaining <= 0 or any(isinstance(a, BaseException) for a in answers):
            return answers
        try:
            op = DelayedFetch(_watched(lookup, requests), need - got, starts)
        except Exception:  # noqa: BLE001 - a replica closed meanwhile: these answers stand
            return answers
        starts = op.starts
        if not await purgatory.wait(op, remaining) and not op.touched:
            return answers  # expired with nothing changed: the reads stand


def _watched(lookup: Lookup, requests: list[Any]) -> dict[Key, tuple[Any, int, bool]]:
    """What a parked fetch watches: each partition's replica, fetch offset and isolation (the
    first time it is named; the requests were read once, so they are well formed)."""
    watched: dict[Key, tuple[Any, int, bool]] = {}
    for entry in requests:
        key = (entry[0], entry[1])
        if key not in watched:
            replica, request = lookup(entry)
            committed = request.isolation_level == IsolationLevel.READ_COMMITTED
            watched[key] = (replica, request.fetch_offset, committed)
    return watched


async def _read(lookup: Lookup, requests: list[Any], max_bytes: int) -> tuple[list[Any], int]:
    """Every partition read now (no wait), ``max_bytes`` shared in order; the bytes read."""
    answers: list[Any] = []
    budget = max_bytes
    got = 0
    for i, entry in enumerate(requests):
        if i and i % PACE == 0:
            await asyncio.sleep(0)
        try:
            replica, request = lookup(entry)
            if type(request) is not FetchRequest or request.replica_id != CONSUMER_REPLICA_ID:
                raise InvalidRequestError("a consumer's fetch carries a consumer's FetchRequest")
            # While the budget lasts each partition's first batch comes whole; past max_bytes,
            # the offsets only.
            limit = max(0, min(request.partition_max_bytes, budget))
            answer = replica.read(request, limit, budget > 0)
            budget -= len(answer.records)
            got += len(answer.records)
        except Exception as exc:  # noqa: BLE001 - each partition's error goes back in its answer
            answer = exc
        answers.append(answer)
    return answers, got
