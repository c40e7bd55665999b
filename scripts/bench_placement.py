"""Replica placement (``rayqueue.broker.placement``): what each setting costs, in one run.

For each setting (``broker``: one host actor per broker, the default and the baseline;
``hosts``: ``rayqueue.broker.num.hosts`` per broker; ``replica``: one actor per replica), on the
embedded 3-broker cluster, each in a process and a Ray of its own:
- memory per replica: the hosts' USS (psutil) before and after a topic of ``--partitions``
  partitions at RF 3, divided by its replicas;
- topic creation: the time ``create_topic`` of that topic takes;
- produce throughput: one producer, acks=all, 100-byte values spread over the topic's
  partitions with the bulk ``send_many()``, records/s;
- failover: a leader's host killed while a producer sends with acks=all, until the first record
  the new leader acknowledges (``bench_replication.failover_times``), median and max.
Each figure is printed with its ratio to the ``broker`` setting's.

``--compare TREE`` measures failover again, rounds alternated, with the rayqueue of another
checkout (``TREE``, on its default placement) against this one's default: a before/after of
the same run (the failover of a tree that predates this setting is measured the same way).

Run: ``.venv/bin/python scripts/bench_placement.py [--quick] [--compare /path/to/other/checkout]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VALUE = b"x" * 100
TOPIC = "bench-placement"


def _host_pids(admin: Any, topics: list[str]) -> set[int]:
    """The pids of every host actor holding a replica of ``topics``."""
    import ray

    from rayqueue import TopicPartition

    hosts = {}
    for name, meta in admin.describe_topics(topics).items():
        for p in meta.partitions:
            for ref in admin.replica_handles(TopicPartition(name, p.partition)).values():
                hosts[ref.host_key] = ref.host
    return {ray.get(h.describe_host.remote())["pid"] for h in hosts.values()}


def _uss_mb(pids: set[int]) -> float:
    import psutil

    return sum(psutil.Process(pid).memory_full_info().uss for pid in pids) / 1e6


def _throughput(cluster: Any, partitions: int, records: int) -> float:
    """Records/s of one producer (acks=all) into the topic's partitions, bulk sends."""
    producer = cluster.producer(acks="all", linger_ms=5)
    try:
        per = max(1, records // partitions)
        warm = [producer.send_many(TOPIC, [VALUE] * min(per, 2000), partition=p) for p in range(partitions)]
        for r in warm:
            r.get(120)
        start = time.perf_counter()
        sends = [producer.send_many(TOPIC, [VALUE] * per, partition=p) for p in range(partitions)]
        for r in sends:
            r.get(300)
        return per * partitions / (time.perf_counter() - start)
    finally:
        producer.close(30)


def measure(placement: str | None, num_hosts: int, partitions: int, records: int, kills: int) -> dict[str, Any]:
    """Every figure of one setting (None: the tree's default, no setting passed: a checkout
    that predates it), in this process's own Ray; only failover when ``partitions`` is 0."""
    import ray
    from bench_ray import start_ray
    from bench_replication import failover_times

    import rayqueue

    root = tempfile.mkdtemp(prefix="rayqueue-bench-placement-")
    start_ray()
    # The internal topics at their defaults (3 partitions each, RF 3), as bench_replication
    # runs: a dead broker's leaderships are theirs too.
    settings: dict[str, Any] = {}
    if placement is not None:
        settings |= {"rayqueue_broker_placement": placement, "rayqueue_broker_num_hosts": num_hosts}
    cluster = rayqueue.launch(log_dirs=root, **settings)
    admin = cluster.admin()
    out: dict[str, Any] = {}
    try:
        if partitions:
            internal = admin.list_topics(include_internal=True)
            before = _host_pids(admin, internal)
            uss_before = _uss_mb(before)
            start = time.perf_counter()
            admin.create_topic(TOPIC, partitions, 3)
            out["create_s"] = time.perf_counter() - start
            after = _host_pids(admin, [*internal, TOPIC])
            out["mb_per_replica"] = (_uss_mb(after) - uss_before) / (partitions * 3)
            out["host_actors"] = cluster.describe()["host_actors"]
            out["records_per_s"] = _throughput(cluster, partitions, records)
        out["failover_s"] = failover_times(cluster, admin, kills)
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return out


def _child(tree: Path, args: list[str]) -> dict[str, Any]:
    """This script's ``--json`` run in a process of its own, with ``tree``'s rayqueue (also in
    its Ray workers: they import from the driver's working directory, so the run starts in
    ``tree``)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--json", *args],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the run {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} / {max(values) * 1000:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a reduced run: fewer partitions, records and kills")
    parser.add_argument("--partitions", type=int, default=None, help="partitions of the measured topic (RF 3)")
    parser.add_argument("--records", type=int, default=None, help="records of the throughput run")
    parser.add_argument("--kills", type=int, default=None, help="leader kills of each failover run")
    parser.add_argument("--hosts", type=int, default=2, help="rayqueue.broker.num.hosts of the hosts setting")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout: failover before/after")
    parser.add_argument("--rounds", type=int, default=3, help="alternated failover rounds of --compare")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--placement", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    partitions = args.partitions if args.partitions is not None else (6 if args.quick else 12)
    records = args.records if args.records is not None else (60_000 if args.quick else 600_000)
    kills = args.kills if args.kills is not None else (3 if args.quick else 6)
    if args.json:
        placement = args.placement or None
        print(json.dumps(measure(placement, args.hosts, partitions, records, kills)))
        return
    common = [
        "--partitions",
        str(partitions),
        "--records",
        str(records),
        "--kills",
        str(kills),
        "--hosts",
        str(args.hosts),
    ]
    rows = {}
    for placement in ("broker", "hosts", "replica"):
        rows[placement] = _child(ROOT, ["--placement", placement, *common])
    base = rows["broker"]
    base_failover = statistics.median(base["failover_s"])
    print(
        f"{partitions} partitions x RF 3, {records:,} records of 100 B (acks=all), {kills} kills per failover run; "
        f"ratios to the broker setting"
    )
    print(
        f"{'placement':<22}{'host actors':>12}{'MB/replica':>12}{'ratio':>7}{'create s':>10}{'ratio':>7}"
        f"{'records/s':>12}{'ratio':>7}{'failover ms p50 / max':>24}{'ratio':>7}"
    )
    for placement, row in rows.items():
        label = f"{placement} ({args.hosts} per broker)" if placement == "hosts" else placement
        print(
            f"{label:<22}{row['host_actors']:>12}{row['mb_per_replica']:>12.2f}"
            f"{row['mb_per_replica'] / max(base['mb_per_replica'], 1e-9):>7.1f}"
            f"{row['create_s']:>10.2f}{row['create_s'] / base['create_s']:>7.1f}"
            f"{row['records_per_s']:>12,.0f}{row['records_per_s'] / base['records_per_s']:>7.2f}"
            f"{_ms(row['failover_s']):>24}{statistics.median(row['failover_s']) / base_failover:>7.2f}"
        )
    if args.compare is not None:
        before: list[float] = []
        after: list[float] = []
        for _ in range(args.rounds):  # alternated, so a noisy moment hits both alike
            before += _child(args.compare, ["--partitions", "0", "--kills", str(kills)])["failover_s"]
            after += _child(ROOT, ["--partitions", "0", "--kills", str(kills)])["failover_s"]
        print(f"failover, {args.rounds} alternated rounds of {kills} kills (median / max ms):")
        print(f"  before ({args.compare}): {_ms(before)}")
        print(f"  after ({ROOT}): {_ms(after)}")
        print(f"  ratio after / before (medians): {statistics.median(after) / statistics.median(before):.2f}")


if __name__ == "__main__":
    main()
