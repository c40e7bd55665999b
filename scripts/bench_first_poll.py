"""A new consumer group's first poll, phase by phase, and the cluster's start-up time.

For each client kind a fresh cluster is launched (timed: ``rayqueue.launch`` with gateways on
free ports), a topic of 3 partitions gets ``--records`` records, and then:

- the cluster's first group ever (on a cluster whose internal topics are created on first use
  this is the group that waits for ``__consumer_offsets``), then a second, new group on the
  same cluster;
- rayqueue's ``Consumer``: join (JoinGroup answered), sync (SyncGroup answered: the
  assignment), first records (every record read), each from ``subscribe``;
- confluent-kafka through the gateway: coordinator (FindCoordinator answered with a
  coordinator), join, sync (the assignment), first records, from ``subscribe``, read from
  librdkafka's own ``cgrp`` debug log, and the errors it logged meanwhile (no leader,
  coordinator not available).

The figures are set against ``group.initial.rebalance.delay.ms``, which the group
coordinator waits before the first rebalance of an empty group (Kafka's default 3000 ms;
rayqueue's 0), printed with them.

    .venv/bin/python scripts/bench_first_poll.py [--records 9] [--rounds 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from bench_ray import start_ray  # noqa: E402

import rayqueue  # noqa: E402

PARTITIONS = 3
STALL_S = 120.0
LAUNCH_TIMEOUT_S = 600.0  # a loaded machine: the figure is what is wanted, not a failure
# librdkafka's cgrp debug lines that mark the phases (see rdkafka_cgrp.c).
_COORDINATOR = re.compile(r"[Cc]oordinator.*(?:changed|found|-> broker| is )|Group .* coordinator set to broker")
_JOINED = re.compile(r"JoinGroup response: GenerationId \d+")
_SYNCED = re.compile(r"SyncGroup response|assignment of \d+ partition|Group .*: delegating assign")
_ERROR = re.compile(r"[Ll]eader not available|no leader|[Cc]oordinator not available|COORDINATOR_NOT_AVAILABLE")


def launch(root: str) -> tuple[Any, float]:
    """A fresh cluster with gateways on free ports, and the seconds ``launch`` took."""
    started = time.monotonic()
    cluster = rayqueue.launch(
        log_dirs=root,
        listeners="PLAINTEXT://127.0.0.1:0",
        rayqueue_namespace=f"fp{os.getpid()}",
        timeout_s=LAUNCH_TIMEOUT_S,
    )
    return cluster, time.monotonic() - started


def fill(cluster: Any, topic: str, records: int) -> None:
    cluster.admin().create_topic(topic, PARTITIONS, 1)
    producer = cluster.producer(acks="all")
    for i in range(records):
        producer.send(topic, b"v%d" % i, key=b"k%d" % i)
    producer.flush()
    producer.close()


def native_first_poll(cluster: Any, topic: str, group: str, records: int) -> dict[str, float]:
    """Phase times (s from subscribe) of rayqueue's Consumer joining ``group``."""
    from rayqueue.consumer.coordinator import STABLE, SYNCING

    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    phases: dict[str, float] = {}
    got = 0
    started = time.monotonic()
    consumer.subscribe([topic])
    coordinator = consumer._group  # the membership state machine: JOINING -> SYNCING -> STABLE
    while got < records:
        if time.monotonic() - started > STALL_S:
            raise TimeoutError(f"read {got} of {records} records in {STALL_S}s")
        got += len(consumer.poll(10))
        now = time.monotonic() - started
        if "join" not in phases and coordinator.state in (SYNCING, STABLE):
            phases["join"] = now
        if "sync" not in phases and coordinator.state == STABLE:
            phases["sync"] = now
    phases["records"] = time.monotonic() - started
    consumer.close()
    return phases


class _Log(logging.Handler):
    """librdkafka's log lines with the time each arrived (served on every poll)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))


def confluent_first_poll(bootstrap: str, topic: str, group: str, records: int) -> dict[str, float]:
    """Phase times (s from subscribe) of a confluent-kafka consumer joining ``group``, and
    ``errors``: how many no-leader / coordinator-not-available lines librdkafka logged."""
    from confluent_kafka import Consumer

    log = _Log()
    logger = logging.getLogger(f"rdkafka.{group}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(log)
    assigned: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "debug": "cgrp",
            "log.queue": True,  # log lines are served by poll(), on this thread
        },
        logger=logger,
    )
    started = time.monotonic()
    consumer.subscribe([topic], on_assign=lambda c, ps: assigned.append(time.monotonic()))
    got = 0
    while got < records:
        if time.monotonic() - started > STALL_S:
            raise TimeoutError(f"read {got} of {records} records in {STALL_S}s")
        for message in consumer.consume(records, 0.01):
            if message.error() is None:
                got += 1
    done = time.monotonic()
    consumer.close()

    def first(pattern: re.Pattern) -> float:
        return next((t - started for t, line in log.lines if pattern.search(line)), float("nan"))

    return {
        "coordinator": first(_COORDINATOR),
        "join": first(_JOINED),
        "sync": assigned[0] - started if assigned else first(_SYNCED),
        "records": done - started,
        "errors": sum(1 for _, line in log.lines if _ERROR.search(line)),
    }


def _row(name: str, phases: dict[str, float], keys: tuple[str, ...]) -> str:
    cells = []
    for key in keys:
        value = phases.get(key)
        cells.append(f"{key} {value * 1000:7.0f} ms" if isinstance(value, float) and key != "errors" else "")
    if "errors" in phases:
        cells.append(f"errors logged {phases['errors']}")
    return f"  {name:<34} " + "  ".join(c for c in cells if c)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=9)
    parser.add_argument("--rounds", type=int, default=1, help="fresh clusters per client kind")
    args = parser.parse_args()
    start_ray()
    launches: list[float] = []
    delay = None
    for round_ in range(args.rounds):
        for kind in ("native", "confluent-kafka"):
            root = tempfile.mkdtemp(prefix="rq-bench-first-poll-")
            cluster, launch_s = launch(root)
            launches.append(launch_s)
            delay = cluster.config["group.initial.rebalance.delay.ms"]
            try:
                topic = f"first-poll-{round_}"
                fill(cluster, topic, args.records)
                print(f"round {round_ + 1}, {kind}: launch {launch_s:.2f} s")
                for which in ("first group of the cluster", "second group"):
                    group = f"{kind}-{which.split()[0]}-{time.monotonic_ns()}"
                    if kind == "native":
                        phases = native_first_poll(cluster, topic, group, args.records)
                        print(_row(which, phases, ("join", "sync", "records")))
                    else:
                        phases = confluent_first_poll(cluster.bootstrap_servers, topic, group, args.records)
                        print(_row(which, phases, ("coordinator", "join", "sync", "records")))
            finally:
                cluster.shutdown(delete_data=True)
                shutil.rmtree(root, ignore_errors=True)
    print(
        f"launch: median {statistics.median(launches):.2f} s over {len(launches)} "
        f"(min {min(launches):.2f}, max {max(launches):.2f}); "
        f"group.initial.rebalance.delay.ms = {delay} (Kafka's default: 3000)"
    )


if __name__ == "__main__":
    threading.current_thread().name = "bench-first-poll"
    main()
