"""How long one client's big request stalls every other client of the same gateway.

Against a running gateway (a fresh cluster of this script's own), one connection sends a
large but valid request while a second connection keeps sending small ApiVersions and
Metadata (one topic) requests, one at a time. Reported per big request: its own time to
answer, and the other connection's worst and median latency meanwhile (the event loop
stall), against the same small requests' latency measured in the same run with nothing
else going on (the baseline).

Big requests: ListOffsets v1 naming 50,000 partitions of one topic
(600 KB), ListOffsets v7 likewise, and Metadata v12 naming 100,000 topics that do not exist
(auto-creation off).

Run: ``.venv/bin/python scripts/bench_gateway_stall.py [--partitions N] [--topics N]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ray  # noqa: E402
from bench_ray import start_ray  # noqa: E402
from kio.index import load_request_schema, load_response_schema  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

import rayqueue  # noqa: E402
from actors.gateway.codec import build, nested  # noqa: E402
from actors.names import broker_actor_name  # noqa: E402


class _Chunks(list):
    write = list.append


def frame_of(body: Any, correlation_id: int) -> bytes:
    """The size-prefixed frame of a kio request."""
    header = body.__header_schema__(
        request_api_key=body.__api_key__,
        request_api_version=body.__version__,
        correlation_id=correlation_id,
        client_id="stall",
    )
    chunks = _Chunks()
    entity_writer(type(header))(chunks, header)
    entity_writer(type(body))(chunks, body)
    payload = b"".join(chunks)
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    """One response frame's payload."""

    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(min(n - len(out), 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the gateway")
            out += chunk
        return bytes(out)

    return exactly(struct.unpack(">i", exactly(4))[0])


def decode(frame: bytes, api_key: int, version: int) -> Any:
    """A response frame's kio body."""
    cls = load_response_schema(api_key, version)
    _, used = entity_reader(cls.__header_schema__)(frame, 0)
    return entity_reader(cls)(frame, used)[0]


def list_offsets(version: int, topic: str, partitions: int) -> Any:
    """ListOffsets (latest) naming ``partitions`` partitions of one topic."""
    cls = load_request_schema(2, version)
    topic_cls = nested(cls, "topics")
    parts = tuple(
        build(nested(topic_cls, "partitions"), {"partition_index": i, "current_leader_epoch": -1, "timestamp": -1})
        for i in range(partitions)
    )
    return build(
        cls,
        {"replica_id": -1, "isolation_level": 0, "topics": (build(topic_cls, {"name": topic, "partitions": parts}),)},
    )


def metadata(names: list[str]) -> Any:
    """Metadata v12 naming ``names``, auto-creation off."""
    cls = load_request_schema(3, 12)
    topic_cls = nested(cls, "topics")
    return build(
        cls,
        {
            "topics": tuple(build(topic_cls, {"name": n, "topic_id": None}) for n in names),
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )


class Prober(threading.Thread):
    """A second connection: small requests one at a time, each latency recorded."""

    def __init__(self, address: tuple[str, int], topic: str) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.small = [
            (18, 3, build(load_request_schema(18, 3), {"client_software_name": "p", "client_software_version": "1"})),
            (3, 12, metadata([topic])),
        ]
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.cid = 0

    def one(self) -> float:
        """One small request's latency in seconds."""
        api, version, body = self.small[self.cid % 2]
        self.cid += 1
        begun = time.perf_counter()
        self.sock.sendall(frame_of(body, self.cid))
        decode(read_frame(self.sock), api, version)
        return time.perf_counter() - begun

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append(self.one())
            time.sleep(0.002)


def measure(address: tuple[str, int], topic: str, name: str, body: Any, rounds: int) -> None:
    """The big request's time and the prober's latencies meanwhile (best round of ``rounds``)."""
    frame = frame_of(body, 7)
    results = []
    for _ in range(rounds):
        big = socket.create_connection(address)
        prober = Prober(address, topic)
        for _ in range(20):
            prober.one()  # warm
        prober.start()
        time.sleep(0.1)
        prober.samples.clear()
        begun = time.perf_counter()
        big.sendall(frame)
        answer = decode(read_frame(big), body.__api_key__, body.__version__)
        took = time.perf_counter() - begun
        prober.stop.set()
        prober.join()
        samples = prober.samples
        results.append((took, max(samples), statistics.median(samples), len(samples)))
        assert answer.topics, "the big request got an empty answer"
        big.close()
        prober.sock.close()
    took, worst, median, count = min(results, key=lambda r: r[1])
    print(
        f"{name:<34} {len(frame) / 1e3:>8.0f} KB  answered in {took * 1e3:>7.0f} ms; other connection: "
        f"worst {worst * 1e3:>6.1f} ms, median {median * 1e3:>5.2f} ms over {count} requests"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=50_000)
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    start_ray()
    root = tempfile.mkdtemp(prefix="bench-stall-")
    cluster = rayqueue.launch(log_dirs=root, listeners="PLAINTEXT://127.0.0.1:0", rayqueue_num_brokers=1)
    try:
        cluster.admin().create_topic("stall", 1, 1)
        gateway = ray.get_actor(broker_actor_name(0), namespace=cluster.namespace)  # serves broker 0's listener
        stats = ray.get(gateway.listener_stats.remote())
        address = tuple(stats["address"])
        print(f"gateway pid {stats['pid']} at {address[0]}:{address[1]}", flush=True)
        prober = Prober(address, "stall")
        for _ in range(50):
            prober.one()
        idle = [prober.one() for _ in range(200)]
        prober.sock.close()
        print(
            f"baseline (nothing else running): small request worst {max(idle) * 1e3:.1f} ms, "
            f"median {statistics.median(idle) * 1e3:.2f} ms"
        )
        names = [f"absent-{i:06d}" for i in range(args.topics)]
        measure(
            address,
            "stall",
            f"ListOffsets v1, {args.partitions} partitions",
            list_offsets(1, "stall", args.partitions),
            args.rounds,
        )
        measure(
            address,
            "stall",
            f"ListOffsets v7, {args.partitions} partitions",
            list_offsets(7, "stall", args.partitions),
            args.rounds,
        )
        measure(address, "stall", f"Metadata v12, {args.topics} topics", metadata(names), args.rounds)
        after = ray.get(gateway.listener_stats.remote())
        assert after["pid"] == stats["pid"], "the gateway process changed"
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()


if __name__ == "__main__":
    main()
