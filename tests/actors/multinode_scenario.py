"""Run by test_multinode.py in its own process: brokers on separate Ray nodes.

Ray's multi-node harness (``ray.cluster_utils.Cluster``) starts a head and two more
raylets on this machine. The scenario prints one JSON line with what it observed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import rayqueue
from rayqueue import TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the checkout's tests/
from tests.helpers import wait_for  # noqa: E402


def main() -> None:
    root = tempfile.mkdtemp(prefix="rayqueue-multinode-")
    harness = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    harness.add_node(num_cpus=1)
    doomed = harness.add_node(num_cpus=1)
    harness.wait_for_nodes()
    ray.init(address=harness.address, log_to_driver=False)
    out: dict = {}
    try:
        cluster = rayqueue.launch(log_dirs=root, offsets_topic_num_partitions=1, transaction_state_log_num_partitions=1)
        brokers = cluster.describe()["brokers"]
        out["broker_nodes"] = {b.broker_id: b.node_id for b in brokers}
        admin = cluster.admin()
        admin.create_topic("spread", 6)
        topic = admin.describe_topics(["spread"])["spread"]
        placement = {}
        for p in topic.partitions:
            info = ray.get(p.leader_handle.describe.remote())
            placement[p.partition] = {"broker": p.leader, "node": info["node_id"]}
        out["placement"] = placement
        producer = cluster.producer()
        for i in range(60):
            producer.send("spread", b"%d" % i, partition=i % 6)
        producer.flush(60)
        out["end_offsets"] = {
            str(tp.partition): o
            for tp, o in cluster.consumer().end_offsets([TopicPartition("spread", p) for p in range(6)]).items()
        }
        # A machine failure: the node and its replicas go away; the others keep serving.
        doomed_node = doomed.node_id
        doomed_broker = next(b for b, n in out["broker_nodes"].items() if n == doomed_node)
        harness.remove_node(doomed)
        expected = sorted(p for p, v in placement.items() if v["broker"] == doomed_broker)

        def offline_now() -> list[int]:
            meta = admin.describe_topics(["spread"])["spread"]
            return sorted(p.partition for p in meta.partitions if p.leader < 0)

        try:
            wait_for(
                lambda: offline_now() == expected, timeout=60, interval=0.2, what="the lost node's partitions offline"
            )
        except AssertionError:
            pass  # the test compares what was seen with what was expected, and says both
        offline = offline_now()
        out["doomed_broker"] = doomed_broker
        out["offline_after_node_loss"] = offline
        out["expected_offline"] = expected
        survivors = [p for p in range(6) if p not in expected]
        acked = [producer.send("spread", b"after", partition=p).get(60).offset for p in survivors]
        out["produced_after_loss"] = len(acked)
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
