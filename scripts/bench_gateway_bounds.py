"""What the gateway's bounds walk adds to decoding a request.

Every request is walked by its kio schema, each length and count checked against the bytes
left, before kio decodes it (``actors/gateway/codec.py``). Measured here per request, in
one process, against kio's decode alone of the same frame in the same run (the baseline:
what decoding cost before the walk):
- Produce v9, one partition of 1 MB records (records are one bytes field: O(1) to check),
- Produce v9, 100 partitions of 10 KB each,
- Metadata v12 naming 1 topic, and naming 100,
- Fetch v12 for 100 partitions (what consumers send most).

Run: ``.venv/bin/python scripts/bench_gateway_bounds.py [--rounds R]``. Figures are the
median of R rounds of N calls each.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

from actors.gateway.codec import build, decode_request, nested, schema, walk_request  # noqa: E402


class _Chunks(list):
    write = list.append


def body_of(request: Any) -> memoryview:
    """A request's header and body as the gateway receives them (a read-only view)."""
    header = request.__header_schema__(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=1,
        client_id="bench",
    )
    chunks = _Chunks()
    entity_writer(type(header))(chunks, header)
    entity_writer(type(request))(chunks, request)
    return memoryview(b"".join(chunks)).toreadonly()


def request(api_key: int, version: int, **values: Any) -> Any:
    """A kio request from nested dicts (see tests/gateway/wire.build_request)."""

    def convert(cls: type, data: dict[str, Any]) -> Any:
        out = {}
        for key, value in data.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                value = tuple(convert(nested(cls, key), v) for v in value)
            out[key] = value
        return build(cls, out)

    return convert(load_request_schema(api_key, version), values)


def produce(partitions: int, size: int) -> Any:
    return request(
        0,
        9,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=[
            {"name": "bench", "partition_data": [{"index": i, "records": b"r" * size} for i in range(partitions)]}
        ],
    )


def metadata(topics: int) -> Any:
    return request(
        3,
        12,
        topics=[{"name": f"topic-{i}", "topic_id": None} for i in range(topics)],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def fetch(partitions: int) -> Any:
    return request(
        1,
        12,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic": "bench",
                "partitions": [
                    {
                        "partition": i,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1048576,
                    }
                    for i in range(partitions)
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def per_call(fn: Callable[[], Any], rounds: int) -> float:
    """Median seconds per call of ``fn`` over ``rounds`` rounds of enough calls for ~0.1 s."""
    n = 1
    while True:
        begun = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - begun > 0.1:
            break
        n *= 4
    samples = []
    for _ in range(rounds):
        begun = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - begun) / n)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    cases = [
        ("Produce v9, 1 partition x 1 MB", produce(1, 1 << 20)),
        ("Produce v9, 100 partitions x 10 KB", produce(100, 10 * 1024)),
        ("Metadata v12, 1 topic", metadata(1)),
        ("Metadata v12, 100 topics", metadata(100)),
        ("Fetch v12, 100 partitions", fetch(100)),
    ]
    print(f"{'request':<36} {'bytes':>9} {'kio alone':>11} {'walk':>9} {'walk+kio':>10} {'added':>7}")
    for name, req in cases:
        body = body_of(req)
        sch = schema(req.__api_key__, req.__version__)
        header_cls = sch.request.__header_schema__
        header_reader, body_reader = entity_reader(header_cls), entity_reader(sch.request)

        def kio_alone(body: memoryview = body, hr: Any = header_reader, br: Any = body_reader) -> Any:
            _, used = hr(body, 0)
            return br(body, used)

        kio = per_call(kio_alone, args.rounds)
        walk = per_call(lambda b=body, h=header_cls, s=sch: walk_request(b, h, s.request), args.rounds)
        both = per_call(lambda b=body, r=req: decode_request(b, r.__api_key__, r.__version__), args.rounds)
        print(
            f"{name:<36} {len(body):>9} {kio * 1e6:>9.1f}us {walk * 1e6:>7.1f}us {both * 1e6:>8.1f}us "
            f"{(both - kio) / kio * 100:>6.0f}%"
        )


if __name__ == "__main__":
    main()
