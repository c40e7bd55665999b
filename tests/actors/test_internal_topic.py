"""actors.coordinator_log: a coordinator's replay reads to the log end, not only the high watermark."""

from __future__ import annotations

import asyncio

from actors.coordinator_log import replay_partition
from actors.types import FetchResult, OffsetAndTimestamp
from storage import RecordBatchBuilder
from storage.batch_header import batch_boundaries, read_header


class _Method:
    def __init__(self, fn) -> None:
        self.remote = fn


class FakeLeader:
    """A leader whose log holds ``batches`` from ``log_start``; consumer fetches stop at its
    high watermark, which ``hw_steps`` raise one by one each time a fetch waits."""

    def __init__(self, values: list[list[bytes]], log_start: int, hw_steps: list[int]) -> None:
        data, offset = b"", 0
        for vals in values:
            builder = RecordBatchBuilder(base_offset=offset)
            for v in vals:
                builder.append(v, key=v, timestamp=0)
            data += builder.build()
            offset += len(vals)
        self.data, self.log_end, self.log_start = data, offset, log_start
        self.hw_steps = list(hw_steps)
        self.hw = self.hw_steps.pop(0)
        self.waits = 0
        self.list_offsets = _Method(self._list_offsets)
        self.fetch = _Method(self._fetch)

    async def _list_offsets(self, timestamp, leader_epoch):
        return OffsetAndTimestamp(self.log_start, -1)

    async def _fetch(self, offset, max_bytes, max_wait_ms, min_bytes, isolation, leader_epoch):
        if offset >= self.hw and max_wait_ms > 0:
            self.waits += 1
            if self.hw_steps:
                self.hw = self.hw_steps.pop(0)  # the followers caught up meanwhile
        out = b""
        for position, size in batch_boundaries(self.data):
            header = read_header(self.data, position)
            if header.last_offset >= offset and header.base_offset < self.hw:
                out += self.data[position : position + size]
        return FetchResult(out, self.hw, self.hw, self.log_start, self.log_end, 0)


def replayed(leader: FakeLeader) -> list[bytes]:
    async def run() -> list[bytes]:
        values = []
        async for batch, first in replay_partition(leader, 0):
            values.extend(r.value for r in batch if r.offset >= first)
        return values

    return asyncio.run(run())


def test_replay_waits_for_the_high_watermark_to_reach_the_log_end():
    # A new leader: its log holds offsets 0-9, its high watermark is still at 4.
    leader = FakeLeader([[b"a", b"b"], [b"c", b"d"], [b"e", b"f", b"g"], [b"h", b"i", b"j"]], 0, [4, 7, 10])
    assert replayed(leader) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"i", b"j"]
    assert leader.waits == 2


def test_replay_starts_at_the_log_start_inside_a_batch_and_never_waits_when_caught_up():
    leader = FakeLeader([[b"a", b"b", b"c"], [b"d"]], 1, [4])
    assert replayed(leader) == [b"b", b"c", b"d"]
    assert leader.waits == 0


def test_replay_of_an_empty_partition_returns_at_once():
    leader = FakeLeader([], 0, [0])
    assert replayed(leader) == [] and leader.waits == 0
