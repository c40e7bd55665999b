"""Kafka clients' workloads that run against any bootstrap servers: rayqueue's gateways or Kafka.

confluent-kafka (producer, consumer, a consumer group in child processes, transactions,
end-to-end latency at a fixed rate), the admin steps around them (create a topic and wait
until every partition's leader answers), and Kafka's own Java client through
``kafka-producer-perf-test`` / ``kafka-consumer-perf-test`` (``ProducerPerformance`` and
``ConsumerPerformance`` from the pinned kafka-tools, see ``kafka_peer.run_tool``). Every
function takes the client's configuration as ``config`` on top of librdkafka's (or the Java
client's) defaults, so a benchmark states what it changes. No Ray here: the group members
and the paced producer import this module in child processes.
"""

from __future__ import annotations

import gc
import multiprocessing
import random
import re
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

STALL_S = 600.0  # a client that has not finished by then is stuck: fail, do not hang


@contextmanager
def steady_heap() -> Iterator[None]:
    """Measure a client in a process whose heap holds the whole benchmark (Ray's driver, the
    clusters' handles, earlier workloads' leftovers) as if it ran in a process of its own:
    garbage collected first, then every object there is frozen (``gc.freeze``), so that the
    collector's full passes during the workload walk what the workload allocates, not the
    harness. Without it a full collection of the harness's heap (about 100 ms here) lands
    inside whichever timed workload trips it, the same one run after run."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def payload(size: int, seed: int = 0) -> bytes:
    """A value as kafka-producer-perf-test makes one with ``--record-size``: random uppercase
    letters, the same value for every record of a run."""
    rng = random.Random(seed)
    return bytes(rng.randrange(65, 91) for _ in range(size))


def unique(prefix: str) -> str:
    """A topic or group name no earlier run used."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- admin ----------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int, timeout_s: float = 600) -> float:
    """Create ``topic`` with confluent-kafka's AdminClient and wait until the leader of every
    partition answers a ListOffsets request; returns the seconds that took."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as CkTP
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    start = time.perf_counter()
    deadline = start + timeout_s
    while True:
        future = admin.create_topics(
            [NewTopic(topic, partitions, replication_factor)], operation_timeout=timeout_s, request_timeout=timeout_s
        )[topic]
        try:
            future.result(timeout_s)
            break
        except KafkaException as exc:
            # A request that timed out on a slow machine may still have created the topic: ask again.
            code = exc.args[0].code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if code not in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT) or time.perf_counter() > deadline:
                raise
    waiting = {p for p in range(partitions)}
    while waiting:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{len(waiting)} partitions of {topic} had no answering leader after {timeout_s:.0f}s")
        futures = admin.list_offsets({CkTP(topic, p): OffsetSpec.latest() for p in waiting}, request_timeout=30)
        for tp, f in futures.items():
            try:
                f.result(60)
            except KafkaException:
                continue  # no leader yet, or it does not answer yet: ask again
            waiting.discard(tp.partition)
        if waiting:
            time.sleep(0.05)
    return time.perf_counter() - start


def delete_topic(bootstrap: str, topic: str, timeout_s: float = 120) -> None:
    """Delete ``topic`` with confluent-kafka's AdminClient."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=timeout_s, request_timeout=timeout_s)[topic].result(timeout_s)


# -- confluent-kafka: producer and consumer -------------------------------------------------------


def ck_produce(
    bootstrap: str, topic: str, n: int, value: bytes, config: Mapping[str, Any] | None = None, partitions: int = 1
) -> float:
    """records/s of confluent-kafka's producer sending ``n`` copies of ``value``, one
    ``produce()`` per record (null keys, its default partitioner), as an application does:
    when the local queue is full (``queue.buffering.max.messages``) it serves delivery reports
    and tries again. The clock starts after one record was delivered (connections, metadata)
    and stops when ``flush()`` has every delivery report."""
    from confluent_kafka import Producer

    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": on_delivery, **(config or {})})
    for p in range(partitions):  # every leader connected before the clock starts
        producer.produce(topic, value, partition=p)
    if producer.flush(120) != 0:
        raise TimeoutError(f"confluent-kafka could not deliver a first record to {topic} at {bootstrap}")
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.005)
    left = producer.flush(STALL_S)
    rate = n / (time.perf_counter() - start)
    if left or errors:
        raise RuntimeError(f"confluent-kafka: {left} records undelivered, errors {errors[:3]}")
    return rate


def ck_consume(
    bootstrap: str, topic: str, n: int, config: Mapping[str, Any] | None = None, partitions: int = 1
) -> float:
    """records/s of confluent-kafka's consumer reading ``n`` records of ``topic`` from offset 0
    (``assign``, a fresh group id), counted from the assignment to the last record."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-read"), **(config or {})})
    try:
        start = time.perf_counter()
        consumer.assign([CkTP(topic, p, 0) for p in range(partitions)])
        seen = 0
        while seen < n:
            if time.perf_counter() - start > STALL_S:
                raise TimeoutError(f"confluent-kafka read {seen} of {n} records from {bootstrap} in {STALL_S}s")
            # consume(k) waits until k records or the timeout: never ask for more than are left.
            for m in consumer.consume(min(10_000, n - seen), 1.0):
                if m.error() is None:
                    seen += 1
                elif m.error().fatal():
                    raise RuntimeError(f"confluent-kafka consumer: {m.error()}")
        return n / (time.perf_counter() - start)
    finally:
        consumer.close()


def fill(
    bootstrap: str, topic: str, n: int, value: bytes, partitions: int, config: Mapping[str, Any] | None = None
) -> None:
    """``n`` records spread evenly over the topic's partitions (``produce_batch`` per
    partition), for a workload that reads them; not timed."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **(config or {})})
    errors: list[Any] = []
    queue_spread(producer, topic, value, n, errors, partitions)
    left = producer.flush(STALL_S)
    if left or errors:
        raise RuntimeError(f"fill {topic}: {left} undelivered, errors {errors[:3]}")


def queue_spread(producer: Any, topic: str, value: bytes, count: int, errors: list[Any], partitions: int) -> None:
    """Queue ``count`` records spread evenly over ``partitions`` with ``produce_batch``; a
    full local queue is drained (delivery reports served) and the rest queued again."""

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for p in range(partitions):
        per = count // partitions + (p < count % partitions)
        i = 0
        while i < per:
            chunk = min(10_000, per - i)
            batch = [{"value": value}] * chunk
            queued = producer.produce_batch(topic, batch, partition=p, on_delivery=on_delivery)
            # produce_batch puts the refused ones' errors on the messages; a full queue is not an error.
            i += queued
            producer.poll(0 if queued == chunk else 0.01)


# -- a consumer group in child processes ----------------------------------------------------------


def member(
    bootstrap: str,
    group: str,
    topic: str,
    config: Mapping[str, Any],
    assigned: Any,
    read: Any,
    go: Any,
    stop: Any,
) -> None:
    """A group member in this (child) process: joins with its partitions paused, reports how
    many it holds in ``assigned``, reads once ``go`` is set and counts records in ``read``."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **config})

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
        # consume(k) waits for k records or the timeout: a short one, so that a member's last
        # partial batch is counted soon after it arrives.
        msgs = consumer.consume(10_000, 0.02)
        count += sum(1 for m in msgs if m.error() is None)
        read.value = count
    consumer.close()


def group_rate(
    bootstrap: str,
    topic: str,
    n: int,
    size: int,
    partitions: int,
    config: Mapping[str, Any] | None = None,
    formed: Callable[[str], bool] | None = None,
    stall_s: float = STALL_S,
) -> float:
    """records/s of a group of ``size`` confluent-kafka consumers (one process each) reading
    ``topic`` (``n`` records) from the beginning. The clock runs from the moment every member
    holds its partitions (members join paused, so that the rebalance and librdkafka's start-up
    are not timed) until together they have read every record. ``formed(group)`` may add a
    check of the group's state (e.g. Stable) to the members' own count of partitions."""
    spawn = multiprocessing.get_context("spawn")
    go, stop = spawn.Event(), spawn.Event()
    assigned = [spawn.Value("i", 0) for _ in range(size)]
    read = [spawn.Value("q", 0) for _ in range(size)]
    group = unique(f"bench-group-{size}")
    procs = [
        spawn.Process(
            target=member,
            args=(bootstrap, group, topic, dict(config or {}), assigned[i], read[i], go, stop),
            daemon=True,
        )
        for i in range(size)
    ]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 180
        while not (
            sum(a.value for a in assigned) == partitions
            and all(a.value > 0 for a in assigned)
            and (formed is None or formed(group))
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the group of {size} did not form: {[a.value for a in assigned]}")
            if any(not p.is_alive() for p in procs):
                raise RuntimeError(f"a member of the group of {size} exited: {[p.exitcode for p in procs]}")
            time.sleep(0.05)
        start = time.perf_counter()
        go.set()
        while sum(r.value for r in read) < n:
            if time.perf_counter() - start > stall_s:
                raise TimeoutError(f"the group of {size} read {sum(r.value for r in read)} of {n} records")
            time.sleep(0.002)
        rate = n / (time.perf_counter() - start)
        if sum(r.value for r in read) != n:
            raise AssertionError(f"the group of {size} read {sum(r.value for r in read)} records of {n}: one twice")
        return rate
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()


# -- transactions ---------------------------------------------------------------------------------


def txn_producer(bootstrap: str, transactional_id: str | None, config: Mapping[str, Any] | None = None) -> Any:
    """confluent-kafka's idempotent producer (``transactional.id`` set: transactional, with
    ``init_transactions`` done), acks=all."""
    from confluent_kafka import Producer

    settings = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", **(config or {})}
    if transactional_id:
        settings["transactional.id"] = transactional_id
    producer = Producer(settings)
    if transactional_id:
        producer.init_transactions(120)
    return producer


def idempotent_rate(
    bootstrap: str,
    topic: str,
    n: int,
    txn_records: int,
    value: bytes,
    partitions: int,
    config: Mapping[str, Any] | None = None,
) -> float:
    """records/s of the idempotent producer, flushing after every ``txn_records`` as the
    transactional one does, so that the two differ only in the transaction."""
    producer, errors = txn_producer(bootstrap, None, config), []
    queue_spread(producer, topic, value, partitions, errors, partitions)  # connect and learn the leaders first
    producer.flush(120)
    start = time.perf_counter()
    for _ in range(n // txn_records):
        queue_spread(producer, topic, value, txn_records, errors, partitions)
        if producer.flush(STALL_S) != 0:
            raise TimeoutError("idempotent producer: records undelivered")
    rate = n / (time.perf_counter() - start)
    if errors:
        raise RuntimeError(f"idempotent producer: {errors[:3]}")
    return rate


def transactional_rate(
    bootstrap: str,
    topic: str,
    n: int,
    txn_records: int,
    value: bytes,
    tid: str,
    partitions: int,
    config: Mapping[str, Any] | None = None,
) -> tuple[float, list[float]]:
    """records/s of transactions of ``txn_records`` records spread over ``partitions``
    (``begin_transaction``, ``produce_batch``, flush, ``commit_transaction``), and each
    commit's seconds (the producer is flushed first, so a commit is EndTxn alone)."""
    producer, errors, commits = txn_producer(bootstrap, tid, config), [], []
    producer.begin_transaction()
    queue_spread(producer, topic, value, partitions, errors, partitions)
    producer.commit_transaction(120)
    start = time.perf_counter()
    for _ in range(n // txn_records):
        producer.begin_transaction()
        queue_spread(producer, topic, value, txn_records, errors, partitions)
        if producer.flush(STALL_S) != 0:
            raise TimeoutError("transactional producer: records undelivered")
        t = time.perf_counter()
        producer.commit_transaction(120)
        commits.append(time.perf_counter() - t)
    rate = n / (time.perf_counter() - start)
    if errors:
        raise RuntimeError(f"transactional producer: {errors[:3]}")
    return rate, commits


def commit_latencies(
    bootstrap: str, topic: str, count: int, value: bytes, tid: str, config: Mapping[str, Any] | None = None
) -> list[float]:
    """Seconds of ``commit_transaction`` over ``count`` transactions of 10 records (partition 0)."""
    producer, out = txn_producer(bootstrap, tid, config), []
    for _ in range(count):
        producer.begin_transaction()
        for _ in range(10):
            producer.produce(topic, value, partition=0)
        if producer.flush(120) != 0:
            raise TimeoutError("transactional producer: records undelivered")
        t = time.perf_counter()
        producer.commit_transaction(120)
        out.append(time.perf_counter() - t)
    return out


# -- end-to-end latency ---------------------------------------------------------------------------

_STAMP = struct.Struct(">q")


def paced_producer(bootstrap: str, topic: str, rate: int, count: int, size: int, config: Mapping[str, Any]) -> None:
    """In a child process: ``count`` records at ``rate`` records/s to partition 0, each value
    starting with the CLOCK_MONOTONIC nanoseconds at which it was handed to ``produce()``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **config})
    pad = b"x" * max(0, size - _STAMP.size)
    start = time.monotonic()
    sent = 0
    while sent < count:
        due = min(count, int((time.monotonic() - start) * rate) + 1)
        while sent < due:
            producer.produce(topic, _STAMP.pack(time.monotonic_ns()) + pad, partition=0)
            sent += 1
        producer.poll(0)
        time.sleep(0.0002)
    if producer.flush(120) != 0:
        raise TimeoutError("paced producer: records undelivered")


def e2e_latencies(
    bootstrap: str,
    topic: str,
    rate: int,
    seconds: float,
    size: int,
    producer_config: Mapping[str, Any] | None = None,
    consumer_config: Mapping[str, Any] | None = None,
    warmup_s: float = 1.0,
) -> list[float]:
    """Seconds from ``produce()`` to the consumer's ``consume()`` returning the record, for
    records sent at a fixed ``rate`` for ``seconds`` by a producer in another process
    (confluent-kafka both; the first ``warmup_s`` seconds' records are left out). The topic
    must be new (the consumer reads partition 0 from offset 0)."""
    samples = e2e_samples(bootstrap, topic, rate, seconds, size, producer_config, consumer_config)
    skip = int(rate * warmup_s)
    return [latency for _, latency in samples[skip:]]


def e2e_samples(
    bootstrap: str,
    topic: str,
    rate: int,
    seconds: float,
    size: int,
    producer_config: Mapping[str, Any] | None = None,
    consumer_config: Mapping[str, Any] | None = None,
) -> list[tuple[float, float]]:
    """Every record of an end-to-end run (see ``e2e_latencies``) as (seconds from the first
    record's ``produce()`` to its own, seconds from its ``produce()`` to ``consume()``), in
    the order they arrived, warm-up included."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkTP

    count = int(rate * seconds)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-e2e"), **(consumer_config or {})})
    consumer.assign([CkTP(topic, 0, 0)])
    consumer.consume(1, 1.0)  # connected and fetching before the producer starts
    spawn = multiprocessing.get_context("spawn")
    producer = spawn.Process(
        target=paced_producer, args=(bootstrap, topic, rate, count, size, dict(producer_config or {})), daemon=True
    )
    producer.start()
    stamps: list[tuple[int, int]] = []  # (produced, consumed) CLOCK_MONOTONIC ns
    deadline = time.monotonic() + seconds + 180
    try:
        while len(stamps) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"end-to-end: {len(stamps)} of {count} records arrived")
            if producer.exitcode not in (None, 0):
                raise RuntimeError(f"paced producer exited with {producer.exitcode} after {len(stamps)} of {count}")
            # poll(), not consume(n): consume waits for n records or its timeout, which
            # would hold records back.
            m = consumer.poll(0.1)
            if m is None or m.error() is not None:
                continue
            stamps.append((_STAMP.unpack_from(m.value())[0], time.monotonic_ns()))
        producer.join(60)
        if producer.exitcode != 0:
            raise RuntimeError(f"paced producer exited with {producer.exitcode}")
    finally:
        if producer.is_alive():
            producer.kill()
        consumer.close()
    first = min(sent for sent, _ in stamps)
    return [((sent - first) / 1e9, (got - sent) / 1e9) for sent, got in stamps]


# -- Kafka's Java client through its perf tools ---------------------------------------------------

_PRODUCER_RESULT = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


def java_produce(bootstrap: str, topic: str, n: int, size: int, properties: Mapping[str, Any]) -> float:
    """records/s that ``kafka-producer-perf-test`` (Kafka's Java producer) reports for ``n``
    records of ``size`` bytes (its own payload: random letters, the same for every record)."""
    from kafka_peer import run_tool

    props = [f"{k}={v}" for k, v in properties.items()]
    done = run_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(n),
            "--record-size",
            str(size),
            "--throughput",
            "-1",
            *(["--command-property", *props] if props else []),
        ],
    )
    found = _PRODUCER_RESULT.findall(done.stdout)
    if not found or int(found[-1][0]) != n:
        raise RuntimeError(f"ProducerPerformance did not report {n} records sent:\n{done.stdout[-2000:]}")
    return float(found[-1][1])


def java_consume(bootstrap: str, topic: str, n: int, properties: Mapping[str, Any] | None = None) -> float:
    """records/s that ``kafka-consumer-perf-test`` (Kafka's Java consumer, subscribed in a group
    of its own) reports for reading ``n`` records: its ``fetch.nMsg.sec``, which leaves out the
    group join as the other consumers' figures do."""
    from kafka_peer import run_tool

    props = [f"{k}={v}" for k, v in (properties or {}).items()]
    done = run_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(n),
            "--group",
            unique("bench-perf"),
            "--timeout",
            "120000",
            *(["--command-property", *props] if props else []),
        ],
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if header is None or header + 1 >= len(lines):
        raise RuntimeError(f"ConsumerPerformance printed no figures:\n{done.stdout[-2000:]}")
    names = [c.strip() for c in lines[header].split(",")]
    values = [c.strip() for c in lines[header + 1].split(",")]
    row = dict(zip(names, values, strict=False))
    if int(float(row["data.consumed.in.nMsg"])) < n:
        raise RuntimeError(f"ConsumerPerformance read {row['data.consumed.in.nMsg']} of {n} records")
    return float(row["fetch.nMsg.sec"])
