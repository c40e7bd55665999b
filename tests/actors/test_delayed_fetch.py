"""actors.broker.delayed_fetch: a consumer's fetch of many partitions parked as one operation
(no Ray).

Replicas are stand-ins with the two calls the fetch uses (``read`` and ``fetch_position``),
whose readable bytes, log size, epoch and closed flag the test sets, then tells the
purgatory of the change as a broker's replica would.
"""

from __future__ import annotations

import asyncio

import pytest

from actors.broker.delayed_fetch import FetchPurgatory, fetch_messages
from actors.protocol import FetchRequest, FetchResponse
from storage.errors import InvalidRequestError, NotLeaderOrFollowerError

LONG_S = 60.0  # a wait the test ends before it runs out


class Replica:
    """A partition whose readable bytes (from offset 0), readable end, log size and epoch the
    test sets."""

    def __init__(self) -> None:
        self.readable = b""
        self.end = 0
        self.size = 0
        self.epoch = 0
        self.closed = False
        self.positions = 0  # fetch_position calls (what a change costs a parked fetch)
        self.reads = 0

    def append(self, data: bytes, committed: bool = True) -> None:
        self.size += len(data)
        if committed:
            self.readable += data
            self.end += 1

    def fetch_position(self, committed: bool) -> tuple[int, int, int, bool]:
        self.positions += 1
        return self.end, self.size, self.epoch, self.closed

    def read(self, request: FetchRequest, limit: int, min_one_batch: bool = True) -> FetchResponse:
        self.reads += 1
        if self.closed:
            raise NotLeaderOrFollowerError("closed")
        records = self.readable[request.fetch_offset :][: max(limit, 1) if min_one_batch else limit]
        return FetchResponse(records, self.end, self.end, 0, self.end, self.epoch)


class Broker:
    """What fetch_messages needs of a broker: its replicas by key, and a purgatory."""

    def __init__(self, n: int) -> None:
        self.replicas = {("t", p): Replica() for p in range(n)}
        self.purgatory = FetchPurgatory()

    def lookup(self, entry):
        topic, partition, request = entry
        replica = self.replicas.get((topic, partition))
        if replica is None or replica.closed:
            raise NotLeaderOrFollowerError(f"{topic}-{partition} is not here")
        return replica, request

    def changed(self, p: int) -> None:
        self.purgatory.changed(("t", p))

    def fetch(self, partitions, max_wait_s=LONG_S, min_bytes=1, max_bytes=1 << 20):
        requests = [("t", p, FetchRequest(0, 1 << 20)) for p in partitions]
        return fetch_messages(self.lookup, self.purgatory, requests, int(max_wait_s * 1000), min_bytes, max_bytes)


async def parked(broker: Broker, count: int = 1) -> None:
    """Let the loop run until ``count`` fetches are parked."""
    for _ in range(1000):
        if len(broker.purgatory) == count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(broker.purgatory)} parked, not {count}")


def run(coro):
    return asyncio.run(coro)


def test_enough_readable_answers_at_once():
    async def scenario():
        broker = Broker(3)
        broker.replicas[("t", 1)].append(b"x" * 10)
        answers = await broker.fetch(range(3), min_bytes=10)
        assert [a.records for a in answers] == [b"", b"x" * 10, b""]
        assert len(broker.purgatory) == 0

    run(scenario())


def test_bytes_are_counted_over_the_partitions_and_only_once_readable():
    async def scenario():
        broker = Broker(3)
        task = asyncio.create_task(broker.fetch(range(3), min_bytes=30))
        await parked(broker)
        broker.replicas[("t", 0)].append(b"a" * 20)
        broker.changed(0)
        broker.replicas[("t", 1)].append(b"b" * 20, committed=False)  # above the HW: not readable
        broker.changed(1)
        await asyncio.sleep(0)
        assert not task.done() and len(broker.purgatory) == 1
        broker.replicas[("t", 2)].append(b"c" * 10)
        broker.changed(2)
        answers = await task
        assert [a.records for a in answers] == [b"a" * 20, b"", b"c" * 10]
        assert len(broker.purgatory) == 0 and not broker.purgatory._watchers

    run(scenario())


def test_bytes_counted_but_not_readable_park_the_fetch_again():
    async def scenario():
        broker = Broker(2)
        task = asyncio.create_task(broker.fetch(range(2), min_bytes=30))
        await parked(broker)
        # The readable end moved with 40 bytes appended, of which 5 are readable yet.
        replica = broker.replicas[("t", 0)]
        replica.append(b"x" * 35, committed=False)
        replica.append(b"y" * 5)
        broker.changed(0)
        await parked(broker)  # read again, short of 30: parked again from there
        assert not task.done()
        broker.replicas[("t", 1)].append(b"z" * 25)
        broker.changed(1)
        answers = await task
        assert [a.records for a in answers] == [b"y" * 5, b"z" * 25]

    run(scenario())


def test_a_change_costs_only_the_fetches_watching_that_partition():
    async def scenario():
        broker = Broker(4)
        left = asyncio.create_task(broker.fetch([0, 1], min_bytes=100))
        right = asyncio.create_task(broker.fetch([2, 3], min_bytes=100))
        await parked(broker, 2)
        before = {p: r.positions for (_, p), r in broker.replicas.items()}
        broker.replicas[("t", 0)].append(b"x")
        for _ in range(5):
            broker.changed(0)
        after = {p: r.positions for (_, p), r in broker.replicas.items()}
        assert after[0] - before[0] == 5  # one look per change, for the one fetch watching it
        assert all(after[p] == before[p] for p in (1, 2, 3))
        left.cancel()
        right.cancel()
        await asyncio.gather(left, right, return_exceptions=True)

    run(scenario())


def test_a_leader_change_or_a_closed_replica_answers_at_once():
    async def scenario():
        broker = Broker(2)
        task = asyncio.create_task(broker.fetch(range(2), min_bytes=100))
        await parked(broker)
        broker.replicas[("t", 1)].closed = True
        broker.changed(1)
        answers = await task
        assert answers[0].records == b"" and isinstance(answers[1], NotLeaderOrFollowerError)
        broker.replicas[("t", 1)].closed = False
        task = asyncio.create_task(broker.fetch(range(2), min_bytes=100))
        await parked(broker)
        reads = broker.replicas[("t", 0)].reads
        broker.replicas[("t", 0)].epoch = 7
        broker.changed(0)
        await asyncio.sleep(0)
        # Read again at once (no error: the request named no epoch), and parked anew.
        assert broker.replicas[("t", 0)].reads == reads + 1
        await parked(broker)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())


def test_cancelled_or_expired_leaves_nothing_parked():
    async def scenario():
        broker = Broker(200)
        task = asyncio.create_task(broker.fetch(range(200), min_bytes=10**9))
        await parked(broker)
        assert len(broker.purgatory._watchers) == 200
        task.cancel()  # the client's connection closed: the gateway cancels the call
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(broker.purgatory) == 0 and not broker.purgatory._watchers
        answers = await broker.fetch(range(3), max_wait_s=0.01, min_bytes=10)
        assert [a.records for a in answers] == [b""] * 3
        assert len(broker.purgatory) == 0 and not broker.purgatory._watchers

    run(scenario())


def test_min_bytes_past_max_bytes_waits_for_max_bytes():
    async def scenario():
        broker = Broker(2)
        task = asyncio.create_task(broker.fetch(range(2), min_bytes=10**9, max_bytes=20))
        await parked(broker)
        broker.replicas[("t", 1)].append(b"x" * 25)
        broker.changed(1)
        answers = await task  # answered with max_bytes readable, not parked until the deadline
        assert answers[0].records == b"" and answers[1].records == b"x" * 20

    run(scenario())


def test_bad_requests_are_answered_with_their_error():
    async def scenario():
        broker = Broker(1)
        follower = FetchRequest(0, 100, replica_id=3)
        answers = await fetch_messages(
            broker.lookup, broker.purgatory, [("t", 0, follower), ("t", 9, FetchRequest(0))], 1000, 1, 100
        )
        assert isinstance(answers[0], InvalidRequestError) and isinstance(answers[1], NotLeaderOrFollowerError)
        with pytest.raises(InvalidRequestError):
            await fetch_messages(broker.lookup, broker.purgatory, "not a list", 0, 1, 100)
        assert await fetch_messages(broker.lookup, broker.purgatory, [], 60_000, 1, 100) == []  # nothing to park

    run(scenario())


def test_bytes_above_the_readable_end_count_once_it_moves():
    """A leader's own append (above the high watermark) reads nothing new, so it does not
    wake the fetch; once the high watermark moves over it, it counts."""

    async def scenario():
        broker = Broker(1)
        replica = broker.replicas[("t", 0)]
        replica.append(b"s" * 10)
        task = asyncio.create_task(broker.fetch([0], min_bytes=30))
        await parked(broker)
        replica.append(b"L" * 40, committed=False)
        broker.changed(0)
        await asyncio.sleep(0)
        assert not task.done() and replica.reads == 1  # nothing readable moved: no read
        replica.readable += b"L" * 40  # the followers have it: the high watermark moves
        replica.end += 1
        broker.changed(0)
        answers = await task
        assert answers[0].records == b"s" * 10 + b"L" * 40

    run(scenario())
