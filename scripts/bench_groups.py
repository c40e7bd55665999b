"""Consumer group benchmark: rebalance settle times and group throughput.

Prints: time for a group to settle after a third member joins (2 -> 3 members, 6
partitions) and after one dies (no leave: session timeout + rebalance), per strategy; and
records/s of 3 members (one thread each) over 6 partitions as a ratio to one consumer
assigned all 6 partitions, measured in the same run.

    .venv/bin/python scripts/bench_groups.py [--records 600000] [--session-ms 3000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import rayqueue  # noqa: E402
from rayqueue import TopicPartition  # noqa: E402

GROUP_CONFIG = dict(
    auto_offset_reset="earliest",
    heartbeat_interval_ms=100,
    max_poll_interval_ms=30000,
    enable_auto_commit=False,
    fetch_max_wait_ms=100,
)


def settle(consumers, partitions, timeout=60.0) -> float:
    start = time.monotonic()
    wanted = set(partitions)
    while time.monotonic() - start < timeout:
        for c in consumers:
            c.poll(5)
        owned = [c.assignment() for c in consumers]
        # Every member must hold something: during an eager rebalance the old owners keep theirs.
        if set().union(*owned) == wanted and sum(map(len, owned)) == len(wanted) and all(owned):
            return time.monotonic() - start
    raise TimeoutError("group did not settle")


def bench_rebalance(cluster, topic, strategy: str, session_ms: int) -> tuple[float, float]:
    group = f"bench-{strategy}-{time.monotonic_ns()}"
    cfg = dict(GROUP_CONFIG, group_id=group, session_timeout_ms=session_ms, partition_assignment_strategy=[strategy])
    tps = [TopicPartition(topic, p) for p in range(6)]
    members = [cluster.consumer(**cfg) for _ in range(2)]
    for m in members:
        m.subscribe([topic])
    settle(members, tps)
    joiner = cluster.consumer(**cfg)
    joiner.subscribe([topic])
    members.append(joiner)
    join_s = settle(members, tps)
    members[0]._group._simulate_crash()
    survivors = members[1:]
    death_s = settle(survivors, tps)
    for m in survivors:
        m.close()
    return join_s, death_s


def consume(consumer, n: int, counter: list[int], lock: threading.Lock, stop: threading.Event) -> None:
    while not stop.is_set():
        got = len(consumer.poll(100))
        if got:
            with lock:
                counter[0] += got
                if counter[0] >= n:
                    stop.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--session-ms", type=int, default=3000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="rayqueue-bench-groups-")
    cluster = rayqueue.launch(log_dirs=root)
    try:
        admin = cluster.admin()
        topic = "bench-groups"
        admin.create_topic(topic, 6)
        producer = cluster.producer(linger_ms=5, batch_size=256 * 1024)
        value = b"x" * 100
        for i in range(args.records):
            producer.send(topic, value, key=str(i % 1000).encode())
        producer.flush(300)
        producer.close()
        tps = [TopicPartition(topic, p) for p in range(6)]

        print(f"rebalance settle times (6 partitions, session.timeout.ms={args.session_ms}, heartbeat 100 ms):")
        for strategy in ("range", "roundrobin", "sticky", "cooperative-sticky"):
            join_s, death_s = bench_rebalance(cluster, topic, strategy, args.session_ms)
            print(
                f"  {strategy:<19} member joins: {join_s * 1000:7.0f} ms   member dies: {death_s * 1000:7.0f} ms"
                f" ({(death_s - args.session_ms / 1000) * 1000:+.0f} ms beyond the session timeout)"
            )

        single = cluster.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=100)
        single.assign(tps)
        start = time.monotonic()
        got = 0
        while got < args.records:
            got += len(single.poll(100))
        single_s = time.monotonic() - start
        single.close()

        group = f"bench-throughput-{time.monotonic_ns()}"
        members = [cluster.consumer(**dict(GROUP_CONFIG, group_id=group, session_timeout_ms=10000)) for _ in range(3)]
        for m in members:
            m.subscribe([topic])
        settle(members, tps)
        for m in members:  # settle() may have consumed a little; start everyone from 0
            for tp in m.assignment():
                m.seek(tp, 0)
        counter, lock, stop = [0], threading.Lock(), threading.Event()
        threads = [threading.Thread(target=consume, args=(m, args.records, counter, lock, stop)) for m in members]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        group_s = time.monotonic() - start
        for m in members:
            m.close()
        single_rate = args.records / single_s
        group_rate = counter[0] / group_s
        print(f"throughput over {args.records} records of 100 bytes, 6 partitions:")
        print(f"  one assigned consumer : {single_rate:12,.0f} records/s")
        print(f"  group of 3 (3 threads): {group_rate:12,.0f} records/s  ratio {group_rate / single_rate:.2f}")
    finally:
        cluster.shutdown(delete_data=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
