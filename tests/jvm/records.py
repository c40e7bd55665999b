"""Reading what the JVM programs wrote, with rayqueue's own consumer."""

from __future__ import annotations

import time

from rayqueue import TopicPartition


def read_topic(cluster, topic: str, isolation_level: str = "read_committed", timeout: float = 60.0) -> list:
    """Every record of ``topic`` up to its end now (the last stable offset under
    read_committed), in (partition, offset) order."""
    consumer = cluster.consumer(isolation_level=isolation_level, enable_auto_commit=False)
    try:
        tps = consumer.partitions_for_topic(topic)
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        ends = consumer.end_offsets(tps)
        records: list = []
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                got = {tp: consumer.position(tp) for tp in tps}
                raise AssertionError(f"{topic}: positions {got} short of {ends} after {timeout}s")
            records.extend(consumer.poll(200))
        return sorted((r for r in records if r.offset < ends[TopicPartition(r.topic, r.partition)]),
                      key=lambda r: (r.partition, r.offset))  # fmt: skip
    finally:
        consumer.close()
