"""Run by test_replication_multinode.py in its own process: losing a whole node with its disk.

Three brokers on three raylets (``ray.cluster_utils.Cluster``) host a topic with
replication factor 3. The scenario produces with acks=all, removes one node and deletes
its broker's data directory, measures how fast leaders move to the survivors, checks
that no acknowledged record was lost, then adds a new node as a new broker and reassigns
the lost replicas to it, which re-replicates them from the leaders. It also pauses a
follower long enough to leave the ISR by lag and lets it rejoin, and checks that the
periodic preferred-leader rebalance moves leadership back. It prints one JSON line.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import rayqueue
from rayqueue import TopicPartition
from storage import iter_batches

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the checkout's tests/
from tests.helpers import wait_for  # noqa: E402

TOPIC = "replicated"
PARTITIONS = 3


def wait(predicate, timeout: float, what: str):
    """Poll until truthy or fail with ``what`` (tests.helpers.wait_for)."""
    return wait_for(predicate, timeout=timeout, what=what)


def replica_values(handle) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in one replica's own log."""
    info = ray.get(handle.describe.remote())
    offset, out = info["log_start_offset"], []
    while offset < info["log_end_offset"]:
        records, offset = ray.get(handle.read_local.remote(offset))
        out.extend((r.offset, r.value) for b in iter_batches(records) for r in b)
    return out


def main() -> None:
    root = tempfile.mkdtemp(prefix="rayqueue-replication-")
    harness = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    harness.add_node(num_cpus=1)
    doomed = harness.add_node(num_cpus=1)
    harness.wait_for_nodes()
    ray.init(address=harness.address, log_to_driver=False)
    out: dict = {}
    try:
        cluster = rayqueue.launch(
            log_dirs=root,
            replica_lag_time_max_ms=3000,
            leader_imbalance_check_interval_seconds=2,
            offsets_topic_num_partitions=1,
            transaction_state_log_num_partitions=1,
        )
        admin = cluster.admin()
        nodes = {b.broker_id: b.node_id for b in cluster.describe()["brokers"]}
        doomed_broker = next(b for b, n in nodes.items() if n == doomed.node_id)
        admin.create_topic(TOPIC, PARTITIONS, 3)
        producer = cluster.producer(acks="all")
        acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}

        def produce(tag: str, n: int) -> None:
            futures = [
                (p, b"%s-%d" % (tag.encode(), i), producer.send(TOPIC, b"%s-%d" % (tag.encode(), i), partition=p))
                for i in range(n)
                for p in range(PARTITIONS)
            ]
            for p, value, fut in futures:
                acked[p].append((fut.get(120).offset, value))

        produce("before", 100)
        # Leadership starts spread: make sure the doomed broker leads at least one partition.
        meta = admin.describe_topics([TOPIC])[TOPIC]
        out["doomed_broker"] = doomed_broker
        out["led_by_doomed"] = [p.partition for p in meta.partitions if p.leader == doomed_broker]

        # 1. A whole node goes, and its disk with it.
        harness.remove_node(doomed)
        shutil.rmtree(os.path.join(root, f"broker-{doomed_broker}"), ignore_errors=True)
        lost_at = time.monotonic()

        def moved():
            m = admin.describe_topics([TOPIC])[TOPIC]
            return all(p.leader >= 0 and p.leader != doomed_broker for p in m.partitions) and m

        meta = wait(moved, 60, "leaders on surviving brokers")
        out["failover_s"] = time.monotonic() - lost_at

        def fenced():
            m = admin.describe_topics([TOPIC])[TOPIC]
            return all(doomed_broker not in p.isr for p in m.partitions) and m

        # Every death is handled in turn; the lost broker leaves all ISRs shortly after.
        meta = wait(fenced, 60, "the lost broker out of every ISR")
        out["isr_cleanup_s"] = time.monotonic() - lost_at
        out["isr_after_loss"] = {p.partition: list(p.isr) for p in meta.partitions}
        out["offline_replicas_after_loss"] = {p.partition: list(p.offline_replicas) for p in meta.partitions}
        produce("after", 50)

        # 2. ISR shrink by lag and expansion: pause one surviving follower for longer than
        # replica.lag.time.max.ms, then let it catch up.
        tp0 = TopicPartition(TOPIC, 0)
        m0 = meta.partitions[0]
        lagger = next(b for b in m0.replicas if b not in (m0.leader, doomed_broker))
        handle = admin.replica_handles(tp0)[lagger]
        ray.get(handle.pause_fetching.remote(True))
        produce("lagging", 10)
        wait(lambda: lagger not in admin.describe_topics([TOPIC])[TOPIC].partitions[0].isr, 30, "ISR shrink by lag")
        out["shrunk_by_lag"] = True
        ray.get(handle.pause_fetching.remote(False))
        wait(lambda: lagger in admin.describe_topics([TOPIC])[TOPIC].partitions[0].isr, 30, "ISR expand")
        out["rejoined"] = True

        # 3. A new node becomes a new broker and takes over the lost replicas.
        new_node = harness.add_node(num_cpus=1)
        harness.wait_for_nodes()
        new_broker = admin.add_broker(new_node.node_id)
        moves = {}
        for p in meta.partitions:
            moves[p.tp] = [new_broker if b == doomed_broker else b for b in p.replicas]
        started = time.monotonic()
        admin.alter_partition_reassignments(moves)
        wait(lambda: not admin.list_partition_reassignments(), 120, "reassignment")
        out["reassign_s"] = time.monotonic() - started
        meta = admin.describe_topics([TOPIC])[TOPIC]
        out["replicas_after"] = {p.partition: list(p.replicas) for p in meta.partitions}
        out["isr_after"] = {p.partition: sorted(p.isr) for p in meta.partitions}
        produce("final", 20)

        # 4. Every acknowledged record is on every replica, at the offset it was acknowledged at.
        lost, identical, new_node_ok = 0, True, True
        for p in range(PARTITIONS):
            tp = TopicPartition(TOPIC, p)

            def caught_up(tp=tp):
                hs = admin.replica_handles(tp)
                ends = {ray.get(h.describe.remote())["log_end_offset"] for h in hs.values()}
                return len(hs) == 3 and len(ends) == 1 and hs

            handles = wait(caught_up, 60, f"{tp} replicas caught up")
            logs = {b: replica_values(h) for b, h in handles.items()}
            identical &= len({tuple(v) for v in logs.values()}) == 1
            final = dict(logs[meta.partitions[p].leader])
            lost += sum(1 for offset, value in acked[p] if final.get(offset) != value)
            new_node_ok &= ray.get(handles[new_broker].describe.remote())["node_id"] == new_node.node_id
        out["acked"] = sum(len(v) for v in acked.values())
        out["lost"] = lost
        out["replicas_identical"] = identical
        out["new_replicas_on_new_node"] = new_node_ok

        # 5. The periodic rebalance gives leadership back to each partition's first replica.
        wait(
            lambda: all(p.leader == p.replicas[0] for p in admin.describe_topics([TOPIC])[TOPIC].partitions),
            30,
            "preferred leaders",
        )
        out["preferred_leaders_restored"] = True
        producer.close(30)
        cluster.shutdown()
    finally:
        ray.shutdown()
        harness.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print("RESULT " + json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    main()
