"""The gateway's TCP server on its own (no Ray): framing, ordering, limits and bad input.

The server runs in an event loop on a thread of the test process, with test handlers on
real kio messages: Metadata (whose topic names tell the handler how long to take) and
CreateTopics (exclusive). Every bad input must close its own connection with one log
line while another connection goes on being served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import threading

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from actors.gateway.codec import ZERO_MS, error_code, make
from actors.gateway.server import PACE, Api, KafkaServer, Limits
from actors.gateway.versions import API_VERSIONS
from tests.gateway.wire import Wire, request_frame
from tests.helpers import wait_for


class _Probe:
    """What the test handlers saw: how many ran at once, in what order they started."""

    def __init__(self) -> None:
        self.running = 0
        self.max_running = 0
        self.started: list[str] = []


async def _metadata(ctx, request):
    probe: _Probe = ctx.state
    names = [t.name for t in request.topics]
    probe.started.append(names[0])
    probe.running += 1
    probe.max_running = max(probe.max_running, probe.running)
    try:
        delay, _, size = names[0].partition("x")
        await asyncio.sleep(float(delay))
    finally:
        probe.running -= 1
    resp = ctx.schema.response
    pad = int(size or 0)
    topics = []
    for i, n in enumerate(names):
        if i % PACE == PACE - 1:
            await asyncio.sleep(0)  # as the gateway's handlers do with long lists
        topics.append(
            make(resp, "topics", error_code=error_code(0), name=n, topic_id=None, is_internal=False, partitions=())
        )
    return ctx.schema.response_of(
        brokers=(),
        cluster_id="c" * pad,  # a large response on demand
        controller_id=-1,
        topics=tuple(topics),
        error_code=error_code(0),
    )


async def _create_topics(ctx, request):
    probe: _Probe = ctx.state
    probe.started.append("create")
    probe.running += 1
    probe.max_running = max(probe.max_running, probe.running)
    try:
        await asyncio.sleep(0.2)
    finally:
        probe.running -= 1
    return ctx.schema.response_of(throttle_time=ZERO_MS, topics=())


APIS = {
    18: API_VERSIONS,
    3: Api(3, 12, 12, _metadata),
    19: Api(19, 7, 7, _create_topics, exclusive=True),
}


@contextlib.contextmanager
def serve(limits: Limits | None = None, apis: dict | None = None):
    """A KafkaServer with the test APIs on 127.0.0.1:<free port>, in a loop on a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    probe = _Probe()
    server = KafkaServer(apis or APIS, probe, limits or Limits(), name="test-gateway")
    address = asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), loop).result(10)
    try:
        yield server, address, probe
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def metadata(*names: str) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def create_topics() -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=(CreatableTopic(name="x", num_partitions=1, replication_factor=1, assignments=(), configs=()),),
        timeout=ZERO_MS,
        validate_only=False,
    )


def assert_served(address) -> None:
    """A fresh connection is answered."""
    with Wire(address) as wire:
        assert wire.call(metadata("0")).topics[0].name == "0"


def test_api_versions_lists_what_is_served_and_falls_back_to_v0():
    with serve() as (_, address, _):
        with Wire(address) as wire:
            answer = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            assert answer.error_code == 0
            assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == {
                18: (0, 4),
                3: (12, 12),
                19: (7, 7),
            }
            # A version newer than served: UNSUPPORTED_VERSION in a v0 body, and the
            # connection stays open for the retry.
            frame = bytearray(
                request_frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 5)
            )
            frame[6:8] = struct.pack(">h", 99)
            wire.send_raw(bytes(frame))
            cid, old = wire.receive(18, 0)
            assert cid == 5 and old.error_code == 35 and len(old.api_keys) == 3
            assert wire.call(metadata("0")).topics[0].name == "0"


def test_pipelined_requests_are_processed_one_at_a_time_by_default():
    """Kafka's muted channel: the next request of a connection is read once the answer to the
    one before is written, so a pipelining client is paced and answered in order."""
    with serve() as (_, address, probe), Wire(address) as wire:
        ids = [wire.send(metadata(delay)) for delay in ("0.3", "0.0", "0.1")]
        answers = [wire.receive(3, 12) for _ in ids]
        assert [cid for cid, _ in answers] == ids
        assert [a.topics[0].name for _, a in answers] == ["0.3", "0.0", "0.1"]
        assert probe.started == ["0.3", "0.0", "0.1"] and probe.max_running == 1


def test_pipelined_requests_run_together_with_a_higher_limit_and_are_answered_in_order():
    with serve(Limits(max_inflight=3)) as (_, address, probe), Wire(address) as wire:
        # The first takes longest: its answer must still come first. Each runs long enough
        # that all three are running together even when the machine is slow to read them.
        ids = [wire.send(metadata(delay)) for delay in ("1.5", "1.0", "1.2")]
        answers = [wire.receive(3, 12) for _ in ids]
        assert [cid for cid, _ in answers] == ids
        assert [a.topics[0].name for _, a in answers] == ["1.5", "1.0", "1.2"]
        assert probe.max_running == 3


def test_an_exclusive_request_runs_alone_on_its_connection():
    with serve() as (_, address, probe), Wire(address) as wire:
        ids = [wire.send(metadata("0.3")), wire.send(create_topics()), wire.send(metadata("0.0"))]
        got = [wire.receive(3, 12)[0], wire.receive(19, 7)[0], wire.receive(3, 12)[0]]
        assert got == ids
        assert probe.started == ["0.3", "create", "0.0"]
        assert probe.max_running == 1


def _bad_inputs():
    good = request_frame(metadata("0"), 1)
    unknown_key = bytearray(good)
    unknown_key[4:6] = struct.pack(">h", 9999)
    unserved_version = bytearray(good)
    unserved_version[6:8] = struct.pack(">h", 3)
    body = good[4:]
    return {
        "garbage": b"\x00\x00\x00\x20" + bytes(range(32)),
        "2 GB size prefix": struct.pack(">i", 2**31 - 1) + b"\x00" * 16,
        "negative size": struct.pack(">i", -5),
        "tiny size": struct.pack(">i", 3) + b"abc",
        "unknown API key": bytes(unknown_key),
        "unserved version": bytes(unserved_version),
        "body shorter than its schema": struct.pack(">i", len(body) - 4) + body[:-4],
    }


@pytest.mark.parametrize("name", list(_bad_inputs()))
def test_bad_input_closes_only_that_connection_with_one_log_line(name, caplog):
    caplog.set_level(logging.WARNING, logger="actors.gateway.server")
    with serve() as (server, address, _):
        with Wire(address) as other, Wire(address) as bad:
            assert other.call(metadata("0")).topics[0].name == "0"
            bad.send_raw(_bad_inputs()[name])
            assert bad.closed_by_peer(10), f"{name}: the connection stayed open"
            # The other connection (and new ones) are served as before.
            assert other.call(metadata("0")).topics[0].name == "0"
            assert_served(address)
        lines = [r for r in caplog.records if "closing connection" in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in lines]
        assert server.closed_for_errors == 1


def test_a_client_that_never_sends_or_stops_mid_request_is_closed_when_idle(caplog):
    caplog.set_level(logging.WARNING, logger="actors.gateway.server")
    with serve(Limits(idle_ms=300)) as (server, address, _):
        silent = socket.create_connection(address)
        partial = socket.create_connection(address)
        frame = request_frame(metadata("0"), 1)
        partial.sendall(frame[: len(frame) // 2])  # a truncated body, then nothing
        try:
            wait_for(lambda: server.closed_for_errors == 2, timeout=15, what="idle connections closed")
            for sock in (silent, partial):
                sock.settimeout(5)
                assert sock.recv(10) == b""
        finally:
            silent.close()
            partial.close()
        assert sum("connections.max.idle.ms" in r.getMessage() for r in caplog.records) == 2
        assert_served(address)


def test_a_client_that_never_reads_is_bounded_and_then_closed(caplog):
    caplog.set_level(logging.WARNING, logger="actors.gateway.server")
    limits = Limits(idle_ms=1000, max_inflight=4, write_buffer_high=64 * 1024)
    with serve(limits) as (server, address, probe):
        sock = socket.create_connection(address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        # Each answer is 512 KB after 0.2 s; the client sends 200 requests and reads none.
        frame = request_frame(metadata("0.2x524288"), 1)
        sock.setblocking(False)
        sent = 0
        with contextlib.suppress(BlockingIOError, ConnectionError):
            for _ in range(200):
                sock.sendall(frame)
                sent += 1
        try:
            peak = 0

            def closed() -> bool:
                nonlocal peak
                conns = list(server.connections)
                peak = max([peak, *(len(c._pending) for c in conns)])
                return server.closed_for_errors == 1

            wait_for(closed, timeout=30, interval=0.01, what="the never-reading client closed")
            assert 1 <= peak <= limits.max_inflight
            # Far fewer handled than sent: the server stopped reading once its writes backed up.
            assert len(probe.started) < 200
        finally:
            sock.close()
        assert any("connections.max.idle.ms" in r.getMessage() for r in caplog.records)
        assert_served(address)


def test_max_connections():
    with serve(Limits(max_connections=2)) as (server, address, _):
        with Wire(address) as a, Wire(address) as b, Wire(address) as c:
            assert a.call(metadata("0")) and b.call(metadata("0"))
            assert c.closed_by_peer(5)
        assert server.closed_for_errors == 1
        assert_served(address)
