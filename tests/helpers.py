"""Test helpers: waiting on conditions with deadlines (never bare sleeps)."""

from __future__ import annotations

import concurrent.futures
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# Launch overrides for test clusters that do not test the internal topics themselves: one
# partition each for __consumer_offsets and __transaction_state (at the default three
# partitions, RF 3, a 3-broker launch opens 18 replicas for the internal topics alone, and the
# coordinators load each of their partitions).
SMALL_INTERNAL_TOPICS = {"offsets_topic_num_partitions": 1, "transaction_state_log_num_partitions": 1}


@contextmanager
def authorizer_cluster(namespace: str, **config: Any) -> Iterator[Any]:
    """A one-broker cluster of its own with Kafka's StandardAuthorizer and no super user but
    the driver (which holds the Ray token); ``config`` adds launch keys (listeners...)."""
    import rayqueue  # not at the top: the storage tests import this module without Ray
    from rayqueue.acl import STANDARD_AUTHORIZER

    root = tempfile.mkdtemp(prefix=f"{namespace}-")
    cluster = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace=namespace,
        rayqueue_num_brokers=1,
        authorizer_class_name=STANDARD_AUTHORIZER,
        **SMALL_INTERNAL_TOPICS,
        **config,
    )
    try:
        yield cluster
    finally:
        cluster.shutdown(delete_data=True)
        shutil.rmtree(root, ignore_errors=True)


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds.

    Exceptions raised by the predicate count as "not yet" until the deadline, then re-raise.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
            if value:
                return value
            error = None
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            error = exc
        if time.monotonic() > deadline:
            if error is not None:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}") from error
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def consume_all(consumer, expected: int, timeout: float = 60.0) -> list:
    """Poll until ``expected`` records arrived (or fail at the deadline)."""
    records: list = []
    deadline = time.monotonic() + timeout
    while len(records) < expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(records)} of {expected} records within {timeout}s")
        records.extend(consumer.poll(200))
    return records


class LostCall:
    """What ``Sender.append_records`` returns for a call whose answer is lost: a ref look-alike
    whose future fails on ``fail()`` or resolves on ``answer()`` (the sender only uses
    ``future()``)."""

    def __init__(self) -> None:
        self._future: concurrent.futures.Future = concurrent.futures.Future()

    def future(self) -> concurrent.futures.Future:
        return self._future

    def fail(self, error: BaseException) -> None:
        self._future.set_exception(error)

    def answer(self, result: object) -> None:
        """The answer arrives after all (late)."""
        self._future.set_result(result)


def rotate_preferred_leader(admin, topic: str, partition: int) -> int:
    """Reorder a partition's replicas (same set) so that its leader is no longer the preferred
    (first) replica, leaving leadership where it is; returns the new preferred replica, which a
    preferred leader election then moves leadership to."""
    from actors.types import TopicPartition

    meta = admin.describe_topics([topic])[topic].partitions[partition]
    target = [next(b for b in meta.replicas if b != meta.leader), meta.leader]
    target += [b for b in meta.replicas if b not in target]
    admin.alter_partition_reassignments({TopicPartition(topic, partition): target})
    wait_for(lambda: not admin.list_partition_reassignments(), timeout=60, what="reassignment done")
    after = admin.describe_topics([topic])[topic].partitions[partition]
    assert after.replicas[0] == target[0] and after.leader != target[0], after
    return target[0]


def hosted_replica(broker_id: int, topic: str, partition: int, data_dir: str, config: dict[str, Any]) -> Any:
    """One replica opened in a host actor of its own (no controller), for tests that drive
    replicas by hand; returns its ReplicaRef (``kill_broker`` ends it)."""
    import ray

    from actors.broker.actor import BrokerHost
    from actors.broker.replica_ref import ReplicaRef
    from actors.protocol_broker import OpenReplica

    # max_restarts=0: a crash shows as a dead actor, never as a quiet restart.
    host = ray.remote(BrokerHost).options(num_cpus=0, max_concurrency=1000, max_restarts=0).remote(broker_id, "", False)
    (opened,) = ray.get(host.open_replicas.remote([OpenReplica(topic, partition, data_dir, config)]))
    assert opened is True, opened
    return ReplicaRef(host, topic, partition, broker_id)


def set_role(replica: Any, state: Any, replication: dict[str, Any] | None = None, controller: Any = None) -> Any:
    """Tell one replica (a ReplicaRef) its role as the controller would: a LeaderAndIsr to its
    host with that partition's ``state`` (a LeaderAndIsrPartitionState); returns its answer
    (the leader's log end offset, a follower's True or False), its error raised."""
    import ray

    from actors.protocol_broker import LeaderAndIsrRequest, only_answer

    request = LeaderAndIsrRequest(((replica.topic, replica.partition, state),), controller, replication)
    return only_answer(ray.get(replica.host.leader_and_isr.remote(request)))


def close_replica(replica: Any, delete: bool = False) -> None:
    """Close one replica (a ReplicaRef) in its host, as the controller does."""
    import ray

    ray.get(replica.host.close_replicas.remote([(replica.topic, replica.partition)], delete))


def listener_host(cluster: Any, broker_id: int) -> Any:
    """The host actor serving broker ``broker_id``'s Kafka listener (its process holds the
    listener and, by placement, some or all of the broker's replicas)."""
    import ray

    from actors.broker.listening import listener_host_name

    return ray.get_actor(listener_host_name(cluster.config, broker_id), namespace=cluster.namespace)


def listener_stats(cluster: Any, broker_id: int, timeout_s: float = 60.0) -> dict:
    """Broker ``broker_id``'s listener figures (connections, requests, principals, ...)."""
    import ray

    return ray.get(listener_host(cluster, broker_id).listener_stats.remote(), timeout=timeout_s)


def kill_broker(replica: Any) -> None:
    """Kill the host actor holding ``replica`` (a ReplicaRef), as a broker process dies:
    every replica it holds dies with it, and Ray does not restart it."""
    import ray

    ray.kill(replica.host, no_restart=True)
