"""Exactly-once consume-transform-produce under failures (issue #7).

A pipeline worker (a Ray actor: its own process) reads topic A with a read_committed
consumer, writes each record transformed to topic B with a transactional producer and
commits its input offsets in the same transaction. The tests kill the worker process, a
partition leader or the transaction coordinator at random moments, restart what died, and
check that B, read by a read_committed consumer, holds every transformed record exactly
once.
"""

from __future__ import annotations

import collections
import random

import pytest
import ray

from rayqueue import OffsetAndMetadata, TopicPartition
from tests.helpers import kill_broker, wait_for

pytestmark = pytest.mark.chaos

RECORDS = 3000


@ray.remote(num_cpus=0, max_restarts=0)
class PipelineWorker:
    """One instance of the pipeline; a new instance with the same transactional.id fences the old."""

    def run(self, namespace: str, source: str, sink: str, partitions: int, group: str, txn_id: str) -> int:
        import rayqueue

        cluster = rayqueue.connect(namespace)
        producer = cluster.producer(transactional_id=txn_id, linger_ms=2)
        # Fences any earlier instance and aborts (or completes) its open transaction.
        producer.init_transactions()
        consumer = cluster.consumer(
            group_id=group, isolation_level="read_committed", enable_auto_commit=False, auto_offset_reset="earliest"
        )
        tps = [TopicPartition(source, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp, committed in consumer.committed(tps).items():
            if committed is not None:
                consumer.seek(tp, committed.offset)
        processed = 0
        try:
            while True:
                records = consumer.poll(300, max_records=50)
                if not records:
                    ends = consumer.end_offsets(tps)
                    if all(consumer.position(tp) >= ends[tp] for tp in tps):
                        return processed
                    continue
                producer.begin_transaction()
                for record in records:
                    producer.send(sink, b"t-" + record.value, key=record.key)
                # The records are written (acknowledged) before the offsets and the commit: a
                # kill between write and commit lands in the calls that follow.
                producer.flush()
                offsets = {tp: OffsetAndMetadata(consumer.position(tp)) for tp in records.partitions()}
                producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                producer.commit_transaction()
                processed += len(records)
        finally:
            consumer.close()
            producer.close(10)


def _fill_source(cluster, topic: str) -> list[bytes]:
    values = [b"%05d" % i for i in range(RECORDS)]
    producer = cluster.producer(linger_ms=5)
    for v in values:
        producer.send(topic, v, key=v)
    producer.flush(120)
    producer.close(30)
    return values


def _committed_total(admin, group: str, tps: list[TopicPartition]) -> int:
    offsets = admin.list_group_offsets(group, tps)
    return sum(om.offset for om in offsets.values() if om is not None)


def _read_all(cluster, topic: str, partitions: int, expected: int, isolation_level: str) -> list[bytes]:
    consumer = cluster.consumer(isolation_level=isolation_level, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    values: list[bytes] = []
    try:

        def done() -> bool:
            values.extend(r.value for r in consumer.poll(200))
            ends = consumer.end_offsets(tps)
            return len(values) >= expected and all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_for(done, timeout=120, interval=0, what=f"{expected} committed records in {topic}")
    finally:
        consumer.close()
    return values


def _run_with_failures(cluster, admin, source: str, sink: str, partitions: int, kill, kills: int, seed: int) -> None:
    """Run the pipeline to completion, calling ``kill(worker)`` at ``kills`` random moments of progress.

    ``kill`` returns True when it killed the worker itself; a worker whose run fails for any
    reason (killed, or an error it could not get past) is replaced by a new instance.
    """
    group, txn_id = f"{sink}-group", f"{sink}-txn"
    tps = [TopicPartition(source, p) for p in range(partitions)]
    rng = random.Random(seed)
    goals = sorted(rng.randrange(RECORDS // 10, RECORDS * 9 // 10) for _ in range(kills))

    def start():
        worker = PipelineWorker.remote()
        return worker, worker.run.remote(cluster.namespace, source, sink, partitions, group, txn_id)

    worker, ref = start()
    restarts = 0
    for goal in goals:
        wait_for(
            lambda g=goal, r=ref: _committed_total(admin, group, tps) >= g or ray.wait([r], timeout=0)[0],
            timeout=180,
            interval=0.02,
            what=f"pipeline progress to {goal}",
        )
        if kill(worker):
            worker, ref = start()
            restarts += 1
    while True:
        try:
            ray.get(ref, timeout=300)
            break
        except (ray.exceptions.RayError, Exception):  # noqa: BLE001 - a failed instance is replaced
            restarts += 1
            assert restarts < 20, "the pipeline kept failing"
            worker, ref = start()
    assert _committed_total(admin, group, tps) == RECORDS


def _assert_exactly_once(cluster, source_values: list[bytes], sink: str, partitions: int) -> None:
    got = _read_all(cluster, sink, partitions, len(source_values), "read_committed")
    counts = collections.Counter(got)
    duplicated = {v: n for v, n in counts.items() if n > 1}
    assert not duplicated, f"{len(duplicated)} records written more than once, e.g. {list(duplicated.items())[:3]}"
    assert set(counts) == {b"t-" + v for v in source_values}


def _uncommitted_data_in(cluster, topic: str, partitions: int) -> bool:
    """Whether a transaction has written records to ``topic`` that are not committed yet."""
    meta = cluster.metadata([topic]).topics[topic]
    states = ray.get([meta.partitions[p].leader_handle.describe.remote() for p in range(partitions)])
    return any(s["high_watermark"] > s["last_stable_offset"] for s in states)


def test_pipeline_process_killed_at_random_moments(cluster, admin, new_topic):
    source, sink = new_topic(2, 1), new_topic(2, 1)
    values = _fill_source(cluster, source)

    txn_id = f"{sink}-txn"

    def mid_transaction() -> bool:
        ongoing = admin.describe_transactions([txn_id])[txn_id].state == "Ongoing"
        return ongoing and _uncommitted_data_in(cluster, sink, 2)

    def kill_worker(worker) -> bool:
        # Killed inside a transaction whose records are written and whose offsets are not committed.
        wait_for(mid_transaction, timeout=60, interval=0.005, what="an open transaction with data")
        ray.kill(worker, no_restart=True)
        return True

    _run_with_failures(cluster, admin, source, sink, 2, kill_worker, kills=4, seed=11)
    _assert_exactly_once(cluster, values, sink, 2)
    # The kills left aborted copies behind, which only a read_uncommitted reader sees.
    assert len(_read_all(cluster, sink, 2, RECORDS, "read_uncommitted")) > RECORDS


@pytest.mark.parametrize("failover_cluster", ["broker"], indirect=True)
def test_pipeline_survives_partition_leader_kills(failover_cluster, failover_admin, failover_topic):
    cluster, admin, new_topic = failover_cluster, failover_admin, failover_topic
    source, sink = new_topic(2, 3), new_topic(2, 3)
    values = _fill_source(cluster, source)
    rng = random.Random(5)

    def kill_leader(_worker) -> bool:
        topic = rng.choice([source, sink])
        meta = admin.describe_topics([topic])[topic].partitions[rng.randrange(2)]
        if meta.leader >= 0:
            kill_broker(meta.leader_handle)
        return False

    _run_with_failures(cluster, admin, source, sink, 2, kill_leader, kills=3, seed=12)
    _assert_exactly_once(cluster, values, sink, 2)


def test_pipeline_survives_transaction_coordinator_kills(cluster, admin, new_topic):
    source, sink = new_topic(2, 1), new_topic(2, 1)
    values = _fill_source(cluster, source)

    def kill_coordinator(_worker) -> bool:
        ray.kill(cluster.transaction_coordinator, no_restart=False)  # Ray restarts it; it reloads
        return False

    _run_with_failures(cluster, admin, source, sink, 2, kill_coordinator, kills=3, seed=13)
    _assert_exactly_once(cluster, values, sink, 2)
