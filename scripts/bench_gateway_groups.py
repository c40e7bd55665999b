"""Consumer groups and transactions of confluent-kafka through the gateway, against the same
client without them, measured in the same run.

A 6-partition topic (RF=1), 100-byte values, on the embedded cluster with its gateways:
- a group of three confluent-kafka consumers, each in its own process, reading the whole
  topic from the beginning, against one such consumer alone in a group of its own. The clock
  runs from the moment every member holds its partitions (the members join with their
  partitions paused, so that the rebalance and librdkafka's start-up are not timed) until
  the members together have read every record. The machine has two cores: the point is that
  the group protocol (heartbeats, commits, one coordinator) costs little, not that three
  processes outrun one. Target >= 0.9x.
- confluent-kafka's transactional producer writing transactions of ``--txn-records``
  records (``begin_transaction``, ``produce_batch``, ``commit_transaction``), against the
  same client's idempotent producer (the baseline), acks=all both. Target >= 0.8x. The
  latency of ``commit_transaction`` (the producer is flushed first, so this is EndTxn: the
  coordinator's PrepareCommit, one marker per partition, CompleteCommit) is printed as p50/p99
  over ``--latency-txns`` small transactions of 10 records, and the median over the big ones.
Throughput figures are the best of ``--rounds`` rounds, the baseline measured in each round.

Run: ``.venv/bin/python scripts/bench_gateway_groups.py [--records N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from bench_gateway import CONSUMER_TUNED, percentiles  # noqa: E402
from bench_ray import start_ray  # noqa: E402

import rayqueue  # noqa: E402

VALUE_SIZE = 100
PARTITIONS = 6
GROUP_TARGET = 0.9
TXN_TARGET = 0.8
STALL_S = 120.0  # a group that has not read everything by then is stuck: fail, do not hang


# -- consumer groups ------------------------------------------------------------------------------


def member(bootstrap: str, group: str, topic: str, assigned: Any, read: Any, go: Any, stop: Any) -> None:
    """A group member in this (child) process: joins with its partitions paused, reports how
    many it holds in ``assigned``, reads once ``go`` is set and counts records in ``read``."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **CONSUMER_TUNED,
        }
    )

    def on_assign(c: Any, partitions: list[Any]) -> None:
        c.assign(partitions)
        if not go.is_set():
            c.pause(partitions)
        assigned.value = len(partitions)

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        c.unassign()
        assigned.value = 0

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while not go.is_set() and not stop.is_set():
        consumer.consume(1, 0.05)
    consumer.resume(consumer.assignment())
    count = 0
    while not stop.is_set():
        msgs = consumer.consume(10_000, 0.1)
        count += sum(1 for m in msgs if m.error() is None)
        read.value = count
    consumer.close()


def group_rate(cluster: rayqueue.Cluster, topic: str, n: int, size: int, tag: str) -> float:
    """records/s of a group of ``size`` confluent-kafka consumers reading ``topic`` (``n`` records)."""
    spawn = multiprocessing.get_context("spawn")
    go, stop = spawn.Event(), spawn.Event()
    assigned = [spawn.Value("i", 0) for _ in range(size)]
    read = [spawn.Value("q", 0) for _ in range(size)]
    group = f"bench-{size}-{tag}"
    procs = [
        spawn.Process(
            target=member, args=(cluster.bootstrap_servers, group, topic, assigned[i], read[i], go, stop), daemon=True
        )
        for i in range(size)
    ]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 120
        while not _formed(cluster, group, assigned, size):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the group of {size} did not form: {[a.value for a in assigned]}")
            time.sleep(0.05)
        start = time.perf_counter()
        go.set()
        while sum(r.value for r in read) < n:
            if time.perf_counter() - start > STALL_S:
                raise TimeoutError(f"the group of {size} read {sum(r.value for r in read)} of {n} records")
            time.sleep(0.002)
        rate = n / (time.perf_counter() - start)
        assert sum(r.value for r in read) == n, "a record was read twice"
        return rate
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()


def _formed(cluster: rayqueue.Cluster, group: str, assigned: list[Any], size: int) -> bool:
    """Every member holds partitions, together all of them, and the group is stable."""
    if sum(a.value for a in assigned) != PARTITIONS or any(a.value == 0 for a in assigned):
        return False
    desc = cluster.admin().describe_groups([group]).get(group)
    return desc is not None and desc.state == "Stable" and len(desc.members) == size


def fill(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    """``n`` records spread evenly over the topic's partitions, with confluent-kafka."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 2_000_000})
    errors: list[Any] = []
    _queue(producer, topic, value, n, errors)
    assert producer.flush(120) == 0 and not errors, errors[:3]


# -- transactions ---------------------------------------------------------------------------------


def _producer(bootstrap: str, transactional_id: str | None) -> Any:
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
    }
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    if transactional_id:
        producer.init_transactions(60)
    return producer


def _queue(producer: Any, topic: str, value: bytes, count: int, errors: list[Any]) -> None:
    """Queue ``count`` records spread evenly over the partitions."""

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for p in range(PARTITIONS):
        per = count // PARTITIONS + (p < count % PARTITIONS)
        for i in range(0, per, 10_000):
            producer.produce_batch(
                topic, [{"value": value}] * min(10_000, per - i), partition=p, on_delivery=on_delivery
            )
            producer.poll(0)


def idempotent_rate(bootstrap: str, topic: str, n: int, txn_records: int, value: bytes) -> float:
    """records/s of the idempotent producer, flushing after every ``txn_records`` as the
    transactional one does, so that the two differ only in the transaction."""
    producer, errors = _producer(bootstrap, None), []
    _queue(producer, topic, value, PARTITIONS, errors)  # connect and learn the leaders first
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(n // txn_records):
        _queue(producer, topic, value, txn_records, errors)
        assert producer.flush(120) == 0
    rate = n / (time.perf_counter() - start)
    assert not errors, errors[:3]
    return rate


def transactional_rate(
    bootstrap: str, topic: str, n: int, txn_records: int, value: bytes, tid: str
) -> tuple[float, list[float]]:
    """records/s of the transactional producer, and each commit's seconds."""
    producer, errors, commits = _producer(bootstrap, tid), [], []
    producer.begin_transaction()
    _queue(producer, topic, value, PARTITIONS, errors)
    producer.commit_transaction(60)
    start = time.perf_counter()
    for _ in range(n // txn_records):
        producer.begin_transaction()
        _queue(producer, topic, value, txn_records, errors)
        assert producer.flush(120) == 0
        t = time.perf_counter()
        producer.commit_transaction(60)
        commits.append(time.perf_counter() - t)
    rate = n / (time.perf_counter() - start)
    assert not errors, errors[:3]
    return rate, commits


def commit_latencies(bootstrap: str, topic: str, count: int, value: bytes, tid: str) -> list[float]:
    """Seconds of ``commit_transaction`` over ``count`` transactions of 10 records (one partition)."""
    producer, out = _producer(bootstrap, tid), []
    for _ in range(count):
        producer.begin_transaction()
        for _ in range(10):
            producer.produce(topic, value, partition=0)
        assert producer.flush(60) == 0
        t = time.perf_counter()
        producer.commit_transaction(60)
        out.append(time.perf_counter() - t)
    return out


# -- the run --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="100-byte records per figure")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every figure; the best of each is kept")
    parser.add_argument("--txn-records", type=int, default=10_000, help="records per transaction")
    parser.add_argument("--latency-txns", type=int, default=200, help="small transactions for the commit latency")
    args = parser.parse_args()
    n = args.records - args.records % args.txn_records
    value = os.urandom(VALUE_SIZE)
    root = tempfile.mkdtemp(prefix="rayqueue-bench-")
    start_ray()
    cluster = rayqueue.launch(log_dirs=root, listeners="PLAINTEXT://127.0.0.1:0")
    best: dict[str, float] = {}
    big_commits: list[float] = []
    try:
        admin, bootstrap = cluster.admin(), cluster.bootstrap_servers
        admin.create_topic("bench-groups", PARTITIONS, 1)
        fill(bootstrap, "bench-groups", n, value)
        # One unmeasured read first: the first group to read the topic pays for the cold start
        # (page cache, the gateways' first fetches, librdkafka's first connections), which
        # made one consumer alone look several times slower than it is.
        group_rate(cluster, "bench-groups", n, 1, "warm-up")
        for r in range(args.rounds):
            rates = {
                "one": group_rate(cluster, "bench-groups", n, 1, str(r)),
                "three": group_rate(cluster, "bench-groups", n, 3, str(r)),
            }
            topics = [f"bench-txn-{kind}-{r}" for kind in ("idem", "txn")]
            for t in topics:
                admin.create_topic(t, PARTITIONS, 1)
            rates["idempotent"] = idempotent_rate(bootstrap, topics[0], n, args.txn_records, value)
            rates["transactional"], commits = transactional_rate(
                bootstrap, topics[1], n, args.txn_records, value, f"bench-txn-{r}"
            )
            big_commits += commits
            for t in topics:
                admin.delete_topic(t)
            for key, rate in rates.items():
                best[key] = max(best.get(key, 0.0), rate)
        admin.create_topic("bench-txn-latency", 1, 1)
        small = commit_latencies(bootstrap, "bench-txn-latency", args.latency_txns, value, "bench-txn-latency")
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)

    print(
        f"{n:,} records of {VALUE_SIZE} bytes, {PARTITIONS} partitions, through the gateway; best of {args.rounds} rounds"
    )
    print()
    print(f"{'path':<46} {'records/s':>12} {'baseline':>30} {'ratio':>7} {'target':>7}")
    rows = [
        ("group of 3 confluent-kafka consumers", "three", "one consumer alone", "one", GROUP_TARGET),
        (
            f"confluent-kafka transactions of {args.txn_records:,}",
            "transactional",
            "idempotent producer",
            "idempotent",
            TXN_TARGET,
        ),
    ]
    for label, key, base_label, base, target in rows:
        ratio = best[key] / best[base]
        verdict = "ok" if ratio >= target else "MISSED"
        print(
            f"{label:<46} {best[key]:>12,.0f} {base_label:>19} {best[base]:>10,.0f} {ratio:>6.2f}x {target:>6.1f}x {verdict}"
        )
    print()
    p50, p99 = percentiles(small)
    print(
        f"commit_transaction (EndTxn) latency, {len(small)} transactions of 10 records: p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )
    print(
        f"commit_transaction of {args.txn_records:,} records on {PARTITIONS} partitions "
        f"({len(big_commits)} commits): median {statistics.median(big_commits) * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
