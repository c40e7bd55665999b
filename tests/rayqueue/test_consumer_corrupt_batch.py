"""A corrupt batch already on disk: the consumer hands out what precedes it, then raises
CorruptRecordError on every poll until the application seeks past it (Kafka's Fetcher);
it never goes silent at that position."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import ray

from actors.protocol import ProduceRequest
from rayqueue import TopicPartition
from rayqueue.errors import CorruptRecordError
from storage import RecordBatchBuilder
from storage import batch_header as bh
from tests.helpers import wait_for


def batch(values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder()
    for v in values:
        builder.append(v, key=b"k", timestamp=1_700_000_000_000)
    return builder.build()


def corrupt_on_disk(cluster, topic: str, base_offset: int, fix_crc: bool) -> None:
    """Overstate the first record length of the batch at ``base_offset`` in the leader's
    segment file, in place (what a broker before the record validation, or a disk, left
    there); with ``fix_crc`` the CRC matches the damage, so only the record parser sees it."""
    meta = cluster.metadata([topic]).topics[topic].partitions[0]
    data_dir = next(b.data_dir for b in cluster.describe()["brokers"] if b.broker_id == meta.leader)
    segment = sorted((Path(data_dir) / f"{topic}-0").glob("*.log"))[-1]
    data = bytearray(segment.read_bytes())
    position = 0
    while bh.read_header(data, position).base_offset != base_offset:
        position += bh.read_header(data, position).size
    data[position + bh.HEADER_SIZE] += 2
    if fix_crc:
        size = bh.read_header(data, position).size
        crc = bh.crc32c(memoryview(data)[position + bh.ATTRIBUTES_OFFSET : position + size])
        struct.pack_into(">I", data, position + bh.CRC_OFFSET, crc)
    with open(segment, "r+b") as f:  # in place: the replica keeps serving the same file
        f.seek(position)
        f.write(data[position : position + bh.read_header(data, position).size])


@pytest.mark.parametrize("fix_crc", [True, False], ids=["records unreadable", "CRC fails"])
def test_a_corrupt_batch_raises_on_every_poll_until_the_application_seeks_past_it(cluster, new_topic, fix_crc):
    topic = new_topic(replication_factor=1)
    meta = cluster.metadata([topic]).topics[topic].partitions[0]
    for values in ([b"a0", b"a1"], [b"b2", b"b3", b"b4"], [b"c5", b"c6"]):
        ray.get(meta.leader_handle.produce.remote(ProduceRequest(batch(values), -1, 30000, meta.leader_epoch)))
    corrupt_on_disk(cluster, topic, 2, fix_crc)
    tp = TopicPartition(topic, 0)
    consumer = cluster.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=50)
    try:
        consumer.assign([tp])
        got: list[bytes] = []

        def poll_until_error() -> CorruptRecordError | None:
            try:
                got.extend(r.value for r in consumer.poll(200))
            except CorruptRecordError as error:
                return error
            return None

        error = wait_for(poll_until_error, 30, what="the corrupt batch to be reported")
        assert "offset 2" in str(error) and "seek past" in str(error)
        assert got == [b"a0", b"a1"]  # what came before it was handed out
        assert consumer.position(tp) == 2
        for _ in range(5):  # not once: on every poll, and the position stays
            with pytest.raises(CorruptRecordError):
                consumer.poll(100)
            assert consumer.position(tp) == 2
        consumer.seek(tp, 5)
        after = wait_for(lambda: consumer.poll(200), 30, what="records after the corrupt batch")
        assert [r.value for r in after] == [b"c5", b"c6"]
    finally:
        consumer.close()
