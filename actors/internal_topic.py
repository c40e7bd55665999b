"""Reading a coordinator's internal topic partition back, as a (re)started coordinator does.

The group and transaction coordinators keep their state as records in compacted internal
topics (``__consumer_offsets``, ``__transaction_state``) and rebuild it by replaying a
partition from its log start to its log end. Kafka's coordinators read their local log to
its end. Here the coordinator reads from the partition leader, whose consumer fetches stop
at the high watermark; a newly elected leader's high watermark can lag its log end while it
already holds every acknowledged record (the coordinator writes with acks=all). So the
replay goes on, long-polling, until the high watermark covers the log end it saw: stopping
at the high watermark alone could miss state that was acknowledged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from storage.log import EARLIEST_TIMESTAMP
from storage.record_batch import RecordBatch, iter_batches

# A fetch that finds nothing new below the log end waits this long for the HW to move.
_HW_WAIT_MS = 500
_FETCH_BYTES = 1 << 20


async def replay_partition(leader_handle: Any, leader_epoch: int) -> AsyncIterator[tuple[RecordBatch, int]]:
    """Every batch of the partition from its log start to its log end, with the first offset
    of it to apply (the log start may lie inside the first batch)."""
    start = (await leader_handle.list_offsets.remote(EARLIEST_TIMESTAMP, leader_epoch)).offset
    offset, wait_ms = start, 0
    while True:
        result = await leader_handle.fetch.remote(offset, _FETCH_BYTES, wait_ms, 1, 0, leader_epoch)
        for batch in iter_batches(result.records):
            yield batch, offset
            offset = batch.next_offset
        if offset >= result.log_end_offset:
            return
        # Nothing new while the log goes further: the high watermark has to catch up first.
        wait_ms = 0 if result.records else _HW_WAIT_MS
