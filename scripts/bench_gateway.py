"""Kafka clients through the gateway, against baselines measured in the same run.

One partition, acks=1, 100-byte values:
- confluent-kafka's producer (linger.ms 5, ``produce_batch`` and one ``produce()`` per
  record) through the gateway, against rayqueue's native ``send_many`` and against the same
  client writing to a sink: the gateway's own server code in a plain process (no Ray),
  answering Produce without storing anything, which is the client's own ceiling here;
- confluent-kafka's consumer through the gateway against rayqueue's native consumer, both
  reading the same records from the beginning with 1 MB partition fetches, and against the
  same client reading such records from a source: the gateway's server code in a plain
  process serving Fetch from the log's bytes held in memory (the client's own ceiling);
  confluent-kafka reads with ``queued.min.messages`` raised (see CONSUMER_TUNED), and once
  more with librdkafka's defaults;
- the latency of single Produce and Fetch requests through the gateway (p50/p99), next to
  the same call made directly on the replica's host (what the gateway adds is the difference).
Throughput figures are the best of ``--rounds`` rounds, every baseline measured in each round.

``--quick`` runs every figure reduced (1 round, 100,000 records, 500 requests per latency
figure) in a few minutes.

Run: ``.venv/bin/python scripts/bench_gateway.py [--quick] [--records N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import multiprocessing
import os
import shutil
import socket
import struct
import tempfile
import time
import uuid
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from bench_produce_fetch import consume, produce_bulk  # noqa: E402
from bench_ray import start_ray  # noqa: E402
from bench_stats import percentiles  # noqa: E402
from kio.index import load_response_schema  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

import rayqueue  # noqa: E402
from actors.gateway.codec import ZERO_MS, error_code, make, nested  # noqa: E402
from actors.gateway.server import Api, KafkaServer, Limits  # noqa: E402
from actors.gateway.versions import API_VERSIONS  # noqa: E402
from storage.batch_header import batch_boundaries, read_header  # noqa: E402
from storage.records.builder import RecordBatchBuilder  # noqa: E402

VALUE_SIZE = 100
TARGET = 0.5
STALL_S = 600.0  # a consumer that has not finished by then is stuck: fail, do not hang


# -- the sink: the gateway's server answering Produce without storing ------------------------------


async def _sink_metadata(ctx: Any, request: Any) -> Any:
    host, port = ctx.state["address"]
    resp = ctx.schema.response
    names = [t.name for t in request.topics] if request.topics else ["bench"]
    topic_cls = nested(resp, "topics")
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        brokers=(make(resp, "brokers", node_id=0, host=host, port=port, rack=None),),
        cluster_id="sink",
        controller_id=0,
        topics=tuple(
            make(
                resp,
                "topics",
                error_code=error_code(0),
                name=name,
                topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
                is_internal=False,
                partitions=(
                    make(
                        topic_cls,
                        "partitions",
                        error_code=error_code(0),
                        partition_index=0,
                        leader_id=0,
                        leader_epoch=0,
                        replica_nodes=(0,),
                        isr_nodes=(0,),
                        offline_replicas=(),
                    ),
                ),
                topic_authorized_operations=-(2**31),
            )
            for name in names
        ),
        cluster_authorized_operations=-(2**31),
        error_code=error_code(0),
    )


async def _sink_produce(ctx: Any, request: Any) -> Any:
    if request.acks == 0:
        return None
    resp = ctx.schema.response
    topic_cls = nested(resp, "responses")
    offsets = ctx.state["offsets"]
    topics = []
    for t in request.topic_data:
        parts = []
        for p in t.partition_data:
            base = offsets.get((t.name, p.index), 0)
            offsets[(t.name, p.index)] = base + 1  # the sink counts requests, not records
            parts.append(
                make(
                    topic_cls,
                    "partition_responses",
                    index=p.index,
                    error_code=error_code(0),
                    base_offset=base,
                    log_start_offset=0,
                    record_errors=(),
                )
            )
        topics.append(make(resp, "responses", name=t.name, partition_responses=tuple(parts)))
    return ctx.schema.response_of(responses=tuple(topics), throttle_time=ZERO_MS)


async def _source_fetch(ctx: Any, request: Any) -> Any:
    """Fetch from a log held in memory (the bench topic's bytes, read once from its replica)."""
    log, bases, positions = ctx.state["log"]
    end_offset = ctx.state["end"]
    resp = ctx.schema.response
    topic_cls = nested(resp, "responses")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            start = end = len(log)
            if p.fetch_offset < end_offset:
                i = max(0, bisect.bisect_right(bases, p.fetch_offset) - 1)
                start = positions[i]
                j = bisect.bisect_right(positions, start + p.partition_max_bytes) - 1
                end = positions[max(j, i + 1)]  # whole batches; at least one
            parts.append(
                make(
                    topic_cls,
                    "partitions",
                    partition_index=p.partition,
                    error_code=error_code(0),
                    high_watermark=end_offset,
                    last_stable_offset=end_offset,
                    log_start_offset=0,
                    aborted_transactions=None,
                    records=memoryview(log)[start:end],
                )
            )
        name, topic_id = getattr(t, "topic", None), getattr(t, "topic_id", None)
        topics.append(make(resp, "responses", topic=name, topic_id=topic_id, partitions=tuple(parts)))
    return ctx.schema.response_of(
        throttle_time=ZERO_MS, error_code=error_code(0), session_id=0, responses=tuple(topics)
    )


def _load_log(path: str) -> dict[str, Any]:
    with open(path, "rb") as fh:
        log = fh.read()
    bases, positions = [], []
    end = 0
    for position, _ in batch_boundaries(log):
        header = read_header(log, position)
        bases.append(header.base_offset)
        positions.append(position)
        end = header.next_offset
    positions.append(len(log))
    return {"log": (log, bases, positions), "end": end}


def run_sink(ready: Any, stop: Any, log_path: str | None = None) -> None:
    """A sink server in this (child) process until ``stop`` is set; puts its port on ``ready``.
    With ``log_path`` it also serves Fetch from those record batches (whatever topic is asked)."""
    import asyncio

    async def main() -> None:
        state: dict[str, Any] = {"offsets": {}}
        apis = {18: API_VERSIONS, 3: Api(3, 0, 13, _sink_metadata), 0: Api(0, 3, 11, _sink_produce)}
        if log_path is not None:
            state.update(_load_log(log_path))
            apis[1] = Api(1, 4, 17, _source_fetch)
        server = KafkaServer(apis, state, Limits(), name="sink")
        state["address"] = await server.start("127.0.0.1", 0)
        ready.put(state["address"][1])
        while not stop.is_set():
            await asyncio.sleep(0.1)
        await server.close()

    asyncio.run(main())


# -- confluent-kafka ------------------------------------------------------------------------------


def ck_produce(bootstrap: str, topic: str, n: int, value: bytes, batched: bool) -> float:
    """records/s of confluent-kafka's producer writing ``n`` values to partition 0."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "delivery.report.only.error": True,
        }
    )

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, value, partition=0, on_delivery=on_delivery)  # connect and fetch metadata first
    producer.flush(60)
    chunk = 10_000
    start = time.perf_counter()
    if batched:
        messages = [{"value": value}] * chunk
        for i in range(0, n, chunk):
            queued = producer.produce_batch(topic, messages[: min(chunk, n - i)], partition=0, on_delivery=on_delivery)
            assert queued == min(chunk, n - i), f"{queued} queued"
            producer.poll(0)
    else:
        produce, poll = producer.produce, producer.poll
        for i in range(n):
            produce(topic, value, partition=0, on_delivery=on_delivery)
            if i % chunk == 0:
                poll(0)
    left = producer.flush(120)
    rate = n / (time.perf_counter() - start)
    assert left == 0 and not errors, (left, errors[:3])
    return rate


# librdkafka stops fetching once queued.min.messages (default 100,000) wait in its queue and
# then backs off for up to fetch.queue.backoff.ms (default 1 s): with 100-byte records a
# Python application drains that in a fraction of the backoff and then waits. A throughput
# reader raises the threshold; the bench reads both ways.
CONSUMER_TUNED = {"queued.min.messages": 1_000_000}


def ck_consume(bootstrap: str, topic: str, n: int, tuned: bool = True) -> float:
    """records/s of confluent-kafka's consumer reading ``n`` records of partition 0 from the start."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkTP

    config = {"bootstrap.servers": bootstrap, "group.id": "bench-gateway", "enable.auto.commit": False}
    consumer = Consumer({**config, **(CONSUMER_TUNED if tuned else {})})
    start = time.perf_counter()
    consumer.assign([CkTP(topic, 0, 0)])
    seen = 0
    while seen < n:
        if time.perf_counter() - start > STALL_S:
            raise TimeoutError(f"confluent-kafka read {seen} of {n} records from {bootstrap} in {STALL_S}s")
        for m in consumer.consume(10_000, 5.0):
            if m.error() is None:
                seen += 1
    rate = n / (time.perf_counter() - start)
    consumer.close()
    return rate


# -- latency ----------------------------------------------------------------------------------------


class _Chunks(list):
    write = list.append


class RawClient:
    """One connection sending kio requests one at a time (what a latency figure needs)."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 0

    def call(self, body: Any) -> Any:
        self.cid += 1
        header = body.__header_schema__(
            request_api_key=body.__api_key__,
            request_api_version=body.__version__,
            correlation_id=self.cid,
            client_id="b",
        )
        chunks = _Chunks()
        entity_writer(type(header))(chunks, header)
        entity_writer(type(body))(chunks, body)
        payload = b"".join(chunks)
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = self._read(struct.unpack(">i", self._read(4))[0])
        cls = load_response_schema(body.__api_key__, body.__version__)
        _, used = entity_reader(cls.__header_schema__)(frame, 0)
        return entity_reader(cls)(frame, used)[0]

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


def latencies(cluster: rayqueue.Cluster, topic: str, requests: int) -> dict[str, tuple[float, float]]:
    """p50/p99 of Produce and Fetch requests (10 records of 100 bytes) through the gateway,
    and of the same calls made directly on the leader replica."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    from actors import protocol

    builder = RecordBatchBuilder()
    builder.append_many([os.urandom(VALUE_SIZE) for _ in range(10)])
    batch = builder.build()
    meta = cluster.metadata([topic]).topics[topic].partitions[0]
    broker = next(b for b in cluster.metadata([]).brokers if b.broker_id == meta.leader)
    replica = meta.leader_handle
    client = RawClient(broker.host, broker.port)
    out = {}
    try:
        produce = ProduceRequest(
            acks=1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)),),
        )
        gateway, direct = [], []
        for _ in range(requests):
            t = time.perf_counter()
            answer = client.call(produce)
            gateway.append(time.perf_counter() - t)
            assert answer.responses[0].partition_responses[0].error_code == 0
            t = time.perf_counter()
            ray.get(replica.produce.remote(protocol.ProduceRequest(batch, acks=1)))
            direct.append(time.perf_counter() - t)
        out["Produce"], out["Produce direct"] = percentiles(gateway), percentiles(direct)
        gateway, direct = [], []
        total = 2 * requests * 10
        for i in range(requests):
            offset = (i * 10) % (total - 10)
            fetch = FetchRequest(
                max_wait=datetime.timedelta(0),
                min_bytes=1,
                topics=(
                    FetchTopic(
                        topic=topic,
                        partitions=(FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=2048),),
                    ),
                ),
                forgotten_topics_data=(),
            )
            t = time.perf_counter()
            answer = client.call(fetch)
            gateway.append(time.perf_counter() - t)
            assert answer.responses[0].partitions[0].records
            t = time.perf_counter()
            assert ray.get(replica.fetch.remote(protocol.FetchRequest(offset, 2048, 0, 1))).records
            direct.append(time.perf_counter() - t)
        out["Fetch"], out["Fetch direct"] = percentiles(gateway), percentiles(direct)
    finally:
        client.close()
    return out


# -- the run ----------------------------------------------------------------------------------------


def dump_log(cluster: rayqueue.Cluster, topic: str, path: str) -> None:
    """Write partition 0's record batches, as stored, to ``path`` (the source serves them)."""
    replica = cluster.metadata([topic]).topics[topic].partitions[0].leader_handle
    offset = 0
    with open(path, "wb") as fh:
        while True:
            records, offset = ray.get(replica.read_local.remote(offset, 8 << 20))
            if not records:
                return
            fh.write(records)


def start_sink(log_path: str | None = None) -> tuple[Any, str, Any]:
    """A sink (with ``log_path``: a source) server in a plain child process: (process, address, stop)."""
    spawn = multiprocessing.get_context("spawn")
    ready, stop = spawn.Queue(), spawn.Event()
    process = spawn.Process(target=run_sink, args=(ready, stop, log_path), daemon=True)
    process.start()
    return process, f"127.0.0.1:{ready.get(timeout=120)}", stop


def measure_round(cluster: rayqueue.Cluster, sink: str, source: str, n: int, tag: str) -> dict[str, float]:
    admin = cluster.admin()
    value = os.urandom(VALUE_SIZE)
    bootstrap = cluster.bootstrap_servers
    out: dict[str, float] = {}
    topics = [f"bench-gw-{name}-{tag}" for name in ("native", "batch", "one")]
    for t in topics:
        admin.create_topic(t, 1)
    try:
        out["native_bulk"] = produce_bulk(cluster, topics[0], value, n)
        out["ck_batch"] = ck_produce(bootstrap, topics[1], n, value, batched=True)
        out["ck_batch_sink"] = ck_produce(sink, "bench", n, value, batched=True)
        out["ck_one"] = ck_produce(bootstrap, topics[2], n, value, batched=False)
        out["ck_one_sink"] = ck_produce(sink, "bench", n, value, batched=False)
        out["native_consume"] = consume(cluster, topics[0], n)
        out["ck_consume"] = ck_consume(bootstrap, topics[0], n)
        out["ck_consume_source"] = ck_consume(source, "bench", n)
        out["ck_consume_defaults"] = ck_consume(bootstrap, topics[0], n, tuned=False)
    finally:
        for t in topics:
            admin.delete_topic(t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, 100,000 records, 500 requests per latency")
    parser.add_argument("--records", type=int, help="100-byte records per figure (default 1,000,000)")
    parser.add_argument("--rounds", type=int, help="rounds of every figure; the best of each is kept (default 3)")
    parser.add_argument("--requests", type=int, help="requests per latency figure (default 2000)")
    args = parser.parse_args()
    quick = (100_000, 1, 500) if args.quick else (1_000_000, 3, 2000)
    args.records = args.records or quick[0]
    args.rounds = args.rounds or quick[1]
    args.requests = args.requests or quick[2]
    root = tempfile.mkdtemp(prefix="rayqueue-bench-")
    start_ray()
    cluster = rayqueue.launch(log_dirs=root, listeners="PLAINTEXT://127.0.0.1:0")
    children = []
    try:
        # The source serves the same kind of records the consumers read, as a replica stores them.
        cluster.admin().create_topic("bench-gw-source", 1)
        produce_bulk(cluster, "bench-gw-source", os.urandom(VALUE_SIZE), args.records)
        log_path = os.path.join(root, "source.log")
        dump_log(cluster, "bench-gw-source", log_path)
        cluster.admin().delete_topic("bench-gw-source")
        children = [start_sink(), start_sink(log_path)]
        sink, source = children[0][1], children[1][1]
        best: dict[str, float] = {}
        for r in range(args.rounds):
            for key, rate in measure_round(cluster, sink, source, args.records, str(r)).items():
                best[key] = max(best.get(key, 0.0), rate)
        cluster.admin().create_topic("bench-gw-latency", 1)
        lat = latencies(cluster, "bench-gw-latency", args.requests)
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
        for process, _, stop in children:
            stop.set()
            process.join(30)
        shutil.rmtree(root, ignore_errors=True)

    mb = VALUE_SIZE / 1e6
    print(f"{args.records:,} records of {VALUE_SIZE} bytes, one partition, acks=1; best of {args.rounds} rounds")
    print()
    print(f"{'path':<44} {'records/s':>12} {'MB/s':>8} {'baseline':>28} {'ratio':>7} {'target':>7}")
    rows = [
        ("confluent-kafka produce_batch via gateway", "ck_batch", "native send_many", "native_bulk"),
        ("", "ck_batch", "same client, sink server", "ck_batch_sink"),
        ("confluent-kafka produce() via gateway", "ck_one", "native send_many", "native_bulk"),
        ("", "ck_one", "same client, sink server", "ck_one_sink"),
        ("confluent-kafka consumer via gateway", "ck_consume", "native consumer", "native_consume"),
        ("", "ck_consume", "same client, source server", "ck_consume_source"),
        ("  with librdkafka's queue defaults", "ck_consume_defaults", "native consumer", "native_consume"),
    ]
    for label, key, base_label, base in rows:
        rate, ratio = best[key], best[key] / best[base]
        verdict = "ok" if ratio >= TARGET else "MISSED"
        shown = f"{label:<44} {rate:>12,.0f} {rate * mb:>8.1f}" if label else f"{'':<44} {'':>12} {'':>8}"
        print(f"{shown} {base_label:>27} {best[base]:>10,.0f} {ratio:>6.2f}x {verdict:>7}")
    print()
    print(f"request latency, {args.requests} sequential requests of 10 records (ms)")
    print(f"{'request':<16} {'p50':>8} {'p99':>8}")
    for name, (p50, p99) in lat.items():
        print(f"{name:<16} {p50:>8.2f} {p99:>8.2f}")


if __name__ == "__main__":
    main()
