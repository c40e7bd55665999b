"""The server's memory and connection bounds, and big requests, on the server alone (no Ray).

A size prefix reserves nothing, a request's buffer grows with its
bytes, ``queued.max.request.bytes`` bounds what partial and queued requests hold (the
gateway stops reading; when nothing can finish, it closes the newest connection waiting),
connections are bounded per server and per address, a closed connection's buffer leaves
the process, and a request with 100,000 topics is decoded off the event loop while other
connections go on being answered. (tests/gateway/test_hostile_clients.py does the same
against a running gateway, watching its process.)
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading

import psutil
import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from actors.gateway.codec import DecodeDeferred, decode_request, decode_request_split, error_code, make
from actors.gateway.server import LOOP_ELEMENTS, RECEIVE_BUFFER, SPARE_BUFFERS, Api, Limits
from actors.gateway.versions import API_VERSIONS
from tests.gateway.test_server import assert_served, metadata, serve
from tests.gateway.wire import Wire, request_frame
from tests.helpers import wait_for

MB = 1024 * 1024


def _rss() -> int:
    return psutil.Process().memory_info().rss


def _api_versions(name_size: int) -> bytes:
    """An ApiVersions v3 frame whose client software name makes it ``name_size`` bytes long."""
    return request_frame(ApiVersionsRequest(client_software_name="n" * name_size, client_software_version="1"), 9)


def _connection(server, sock: socket.socket):
    """The server's side of a client socket."""
    port = sock.getsockname()[1]
    return next(c for c in list(server.connections) if c.peer.endswith(f":{port}"))


def test_a_size_prefix_alone_reserves_nothing():
    """Connections that each declare 100 MB and send 19 bytes hold one small buffer each, and
    nothing of the pool (reserving what they declared would take gigabytes)."""
    with serve() as (server, address, _):
        before = _rss()
        socks = [socket.create_connection(address) for _ in range(10)]
        try:
            for sock in socks:
                sock.sendall(struct.pack(">i", 100_000_000) + b"\x00" * 19)
            wait_for(
                lambda: sum(c._end for c in list(server.connections)) == 10 * 23,
                timeout=30,
                what="every prefix received",
            )
            assert server.memory.used == 0
            assert all(len(c._rx) == RECEIVE_BUFFER for c in list(server.connections))
            assert _rss() - before < 50 * MB  # was 10 x 100 MB
            assert_served(address)
        finally:
            for sock in socks:
                sock.close()


def test_a_request_buffer_grows_with_its_bytes_and_is_freed_after():
    with serve() as (server, address, _):
        frame = _api_versions(3 * MB)
        with Wire(address) as wire:
            wire.send_raw(frame[: MB // 2])
            conn = wait_for(lambda: _connection(server, wire.sock), what="the connection")
            wait_for(lambda: conn._end >= MB // 2 - RECEIVE_BUFFER, what="half a megabyte received")
            # Doubling as bytes came: about what arrived, not the 3 MB declared.
            assert MB // 2 <= conn._want <= MB
            assert server.memory.used == conn.charged == conn._want - RECEIVE_BUFFER
            wire.send_raw(frame[MB // 2 :])
            _, answer = wire.receive(18, 3)
            assert answer.error_code == 0
            wait_for(lambda: conn._rx is None and server.memory.used == 0, what="buffer and memory given back")


def test_partial_requests_wait_for_memory_and_go_on_when_it_is_freed():
    """Two clients each sending a request of about 1.9 MB through a 2 MiB pool: the second
    waits (the gateway stops reading it) until the first is answered, then goes on."""
    limits = Limits(max_request_bytes=2 * MB, queued_max_request_bytes=2 * MB)
    with serve(limits) as (server, address, _):
        a_frame, b_frame = _api_versions(1_900_000), _api_versions(1_900_000)
        with Wire(address) as a, Wire(address) as b:
            a.send_raw(a_frame[:MB])
            conn_a = wait_for(lambda: _connection(server, a.sock), what="a's connection")
            wait_for(lambda: conn_a._end >= MB, what="a's first megabyte")
            sender = threading.Thread(target=b.send_raw, args=(b_frame,), daemon=True)
            sender.start()
            conn_b = wait_for(lambda: _connection(server, b.sock), what="b's connection")
            # Put on the waiting list, then paused: the server's loop does both, and this thread
            # may look in between.
            wait_for(lambda: conn_b in server.memory.waiting and conn_b._read_paused, what="b waiting for memory")
            assert not conn_a.closing
            assert sum(c.charged for c in list(server.connections)) <= limits.queued_max_request_bytes
            a.send_raw(a_frame[MB:])
            assert a.receive(18, 3)[1].error_code == 0
            assert b.receive(18, 3)[1].error_code == 0  # b went on once a's memory came back
            sender.join(10)
        assert server.closed_for_errors == 0
        wait_for(lambda: server.memory.used == 0, what="all memory given back")


def test_when_nothing_can_finish_the_newest_connection_waiting_for_memory_is_closed(caplog):
    """Two clients each with half a request in a pool that holds one whole one: both wait
    for memory, no request is in flight to free any, so the newer is closed and the older
    completes."""
    caplog.set_level(logging.WARNING, logger="actors.gateway.server")
    limits = Limits(max_request_bytes=2 * MB, queued_max_request_bytes=2 * MB)
    with serve(limits) as (server, address, _):
        frame = _api_versions(1_900_000)
        with Wire(address) as a, Wire(address) as b:
            conns = {}
            # Half a megabyte each, in turn, twice: each ends with a full 1 MB buffer that
            # needs to grow, which the pool cannot give both.
            for step in (slice(0, MB // 2), slice(MB // 2, MB)):
                for name, wire in (("a", a), ("b", b)):
                    wire.send_raw(frame[step])
                    conns[name] = wait_for(lambda w=wire: _connection(server, w.sock), what=f"{name}'s connection")
                    wait_for(
                        lambda c=conns[name], n=step.stop: c.closing or c._end >= n or c in server.memory.waiting,
                        what=f"{name} read up to {step.stop}",
                    )
            assert b.closed_by_peer(10)
            assert not conns["a"].closing
            a.send_raw(frame[MB:])
            assert a.receive(18, 3)[1].error_code == 0
        assert server.closed_for_errors == 1
        assert sum("queued.max.request.bytes" in r.getMessage() for r in caplog.records) == 1
        assert_served(address)


def test_connections_per_address_and_its_overrides():
    with serve(Limits(max_connections_per_ip=2)) as (server, address, _):
        with Wire(address) as a, Wire(address) as b, Wire(address) as c:
            assert a.call(metadata("0")) and b.call(metadata("0"))
            assert c.closed_by_peer(5)
        assert server.closed_for_errors == 1
        wait_for(lambda: not server.per_ip, what="addresses forgotten")
        assert_served(address)
    with serve(Limits(max_connections_per_ip=1, max_connections_per_ip_overrides={"127.0.0.1": 3})) as (
        server,
        address,
        _,
    ):
        wires = [Wire(address) for _ in range(4)]
        try:
            assert all(w.call(metadata("0")) for w in wires[:3])
            assert wires[3].closed_by_peer(5)
        finally:
            for w in wires:
                w.close()


def test_idle_connections_hold_no_receive_buffer():
    with serve() as (server, address, _):
        wires = [Wire(address) for _ in range(200)]
        try:
            for w in wires:
                assert w.call(metadata("0")).topics[0].name == "0"
            wait_for(lambda: all(c._rx is None for c in list(server.connections)), what="buffers given back")
            assert len(server.spare_buffers) <= SPARE_BUFFERS
            assert server.memory.used == 0
        finally:
            for w in wires:
                w.close()


def test_closed_connections_give_their_buffers_back_to_the_system():
    """2,000 connections each holding a filled receive buffer, then closed: the process's
    resident memory returns near where it was (a heap-allocated buffer would stay)."""
    with serve(Limits(max_connections_per_ip=5000)) as (server, address, _):
        partial = _api_versions(200_000)[: RECEIVE_BUFFER - 1000]
        for _ in range(3):  # warm the allocators up once, then measure
            socks = [socket.create_connection(address) for _ in range(50)]
            for s in socks:
                s.sendall(partial)
            wait_for(lambda: sum(c._end for c in list(server.connections)) == 50 * len(partial), what="warm-up")
            for s in socks:
                s.close()
            wait_for(lambda: not server.connections, what="warm-up closed")
        baseline = _rss()
        socks = []
        try:
            for _ in range(2000):
                s = socket.create_connection(address)
                s.sendall(partial)
                socks.append(s)
            wait_for(
                lambda: sum(c._end for c in list(server.connections)) == 2000 * len(partial),
                timeout=60,
                what="2,000 partial requests received",
            )
            held = _rss() - baseline
            assert held > 60 * MB  # 2,000 x ~63 KB were really resident
        finally:
            for s in socks:
                s.close()
        wait_for(lambda: not server.connections, timeout=60, what="all closed")
        assert _rss() - baseline < 40 * MB, f"{(_rss() - baseline) / MB:.0f} MB still held of {held / MB:.0f} MB"


class _Held:
    """Test handlers: a Metadata request whose first topic is "hold" gets a response naming
    every topic it named, built at once and then held back until a request whose first topic
    is "release" arrives on any connection; every other request is answered at once."""

    def __init__(self) -> None:
        self.release: asyncio.Event | None = None
        self.holding = threading.Event()

    async def metadata(self, ctx, request):
        if self.release is None:
            self.release = asyncio.Event()
        names = [t.name for t in request.topics]
        resp = ctx.schema.response
        topics = tuple(
            make(resp, "topics", error_code=error_code(0), name=n, topic_id=None, is_internal=False, partitions=())
            for n in names
        )
        if names[0] == "hold":
            self.holding.set()
            await self.release.wait()
        elif names[0] == "release":
            self.release.set()
        return ctx.schema.response_of(
            brokers=(), cluster_id="c", controller_id=-1, topics=topics, error_code=error_code(0)
        )


def test_a_big_response_is_encoded_while_other_connections_are_answered():
    """The response to a request naming 100,000 topics is encoded off the event loop: the
    request that lets it go, and every one sent after it on another connection, is
    answered before the big response's first byte arrives. (Encoded on the loop, the
    encoding would hold back even the releasing request's answer.)"""
    held = _Held()
    apis = {18: API_VERSIONS, 3: Api(3, 12, 12, held.metadata)}
    with serve(apis=apis) as (server, address, _):
        names = ["hold", *(f"topic-{i:06d}" for i in range(1, 100_000))]
        first_byte = threading.Event()
        answers: list = []

        def big_client() -> None:
            with Wire(address, timeout=300) as wire:
                wire.send_raw(request_frame(metadata(*names), 1))
                wire.sock.recv(1, socket.MSG_PEEK)
                first_byte.set()
                answers.append(wire.receive(3, 12))

        thread = threading.Thread(target=big_client, daemon=True)
        thread.start()
        assert held.holding.wait(120), "the big request never reached its handler"
        with Wire(address) as other:
            assert other.call(metadata("release")).topics[0].name == "release"
            answered_meanwhile = 0
            small = ApiVersionsRequest(client_software_name="p", client_software_version="1")
            while not first_byte.is_set():
                assert other.call(small).error_code == 0
                answered_meanwhile += 1
        thread.join(120)
        cid, answer = answers[0]
        assert cid == 1 and [t.name for t in answer.topics] == names
        assert server.big_requests == 1  # and it was decoded off the loop too
        assert answered_meanwhile >= 5, answered_meanwhile


def test_big_requests_decode_off_the_loop_to_what_kio_decodes():
    names = [f"topic-{i:06d}" for i in range(100_000)]
    body = request_frame(metadata(*names), 3)[4:]
    with pytest.raises(DecodeDeferred):
        decode_request(memoryview(body), 3, 12, max_elements=LOOP_ELEMENTS)
    assert decode_request_split(body, 3, 12) == decode_request(memoryview(body), 3, 12)
