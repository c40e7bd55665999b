"""The gateway's TCP server: Kafka's framing and connection handling (no Ray in here).

A connection reads size-prefixed requests into one receive buffer (a request larger than
that buffer gets a buffer of its own, filled by the socket directly), decodes each with
kio (``codec``), and runs its handler as a task. Requests of one connection may be in
flight together (clients pipeline them); their responses go out in request order, as
Kafka's protocol requires. Handlers marked ``exclusive`` (metadata-changing admin
requests) run with nothing else of their connection in flight, as a Kafka broker runs
every request. Produce order per partition is kept by the produce handler.

Limits, each breach closing the one connection with one log line and touching nothing
else: a size prefix beyond ``socket.request.max.bytes`` (or below a header's size), a
frame kio cannot decode, an unknown API key or unserved version (ApiVersions excepted: it
is answered UNSUPPORTED_VERSION so the client can retry lower), and a connection with no
traffic for ``connections.max.idle.ms`` (one that never sends, or never reads its
responses). Memory per connection is bounded: at most ``max_inflight`` requests are
worked on (beyond that the socket is not read), and while the client does not read its
responses (the write buffer is above its high-water mark) nothing more is read either.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.gateway.codec import (
    API_VERSIONS_KEY,
    RequestDecodeError,
    Schema,
    api_versions_unsupported,
    decode_request,
    peek,
    schema,
)

logger = logging.getLogger(__name__)

RECEIVE_BUFFER = 64 * 1024
# Chunks at least this large are written as they are; smaller ones are joined first.
LARGE_CHUNK = 32 * 1024
MIN_REQUEST = 8  # api key, api version, correlation id
_SIZE = struct.Struct(">i")

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Api:
    """One served API: its key, version range and handler. The handler returns the kio
    response, or None for no response (acks=0 produce)."""

    key: int
    min_version: int
    max_version: int
    handle: Handler
    exclusive: bool = False


@dataclass(frozen=True, slots=True)
class Limits:
    """What one connection may cost (Kafka's broker keys where Kafka has one)."""

    max_request_bytes: int = 104857600  # socket.request.max.bytes
    idle_ms: int = 600000  # connections.max.idle.ms
    max_connections: int = 2**31 - 1  # max.connections
    max_inflight: int = 100
    write_buffer_high: int = 8 * 1024 * 1024


class RequestContext:
    """What a handler knows of the request besides its body."""

    __slots__ = ("connection", "api_key", "version", "correlation_id", "client_id", "schema")

    def __init__(self, connection: Connection, api_key: int, version: int, correlation_id: int, client_id: str | None):
        self.connection = connection
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.schema: Schema = schema(api_key, version)

    @property
    def state(self) -> Any:
        """The server's state object (the gateway's broker view)."""
        return self.connection.server.state


class KafkaServer:
    """An asyncio server speaking Kafka's protocol for the APIs it is given."""

    def __init__(
        self,
        apis: Mapping[int, Api],
        state: Any = None,
        limits: Limits | None = None,
        name: str = "gateway",
        metrics: Any = None,
    ):
        self.apis = dict(apis)
        # An actors.metrics.GatewayMetrics, or None: then nothing is recorded.
        self.metrics = metrics
        self.state = state
        self.limits = limits or Limits()
        self.name = name
        self.ranges = {key: (api.min_version, api.max_version) for key, api in self.apis.items()}
        self.connections: set[Connection] = set()
        self.closed_for_errors = 0
        self.requests = 0
        self.served: collections.Counter[tuple[int, int]] = collections.Counter()  # (API key, version)
        self._ids = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (port 0: any free one); returns the bound address."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), host or None, port, reuse_address=True)
        bound = self._server.sockets[0].getsockname()
        self._reaper = loop.create_task(self._reap_idle())
        logger.info("%s listening on %s:%d", self.name, bound[0], bound[1])
        return bound[0], bound[1]

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self._reaper is not None:
            self._reaper.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _reap_idle(self) -> None:
        """Close connections with no traffic for connections.max.idle.ms (Kafka's
        Selector does the same): ones that never send, and ones that never read."""
        idle = self.limits.idle_ms / 1000
        while True:
            await asyncio.sleep(min(1.0, idle / 4))
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.idle_since(now) > idle:
                    conn.fail(f"idle for more than {self.limits.idle_ms} ms (connections.max.idle.ms)")


class Connection(asyncio.BufferedProtocol):
    """One client connection: framing, decoding, ordered responses, limits."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.id = next(server._ids)
        self.peer = "?"
        self.handler_state: dict[str, Any] = {}  # per-connection state of the handlers
        self.on_close: list[Callable[[], None]] = []  # handlers' cleanups when the connection ends
        self._transport: asyncio.Transport | None = None
        self._rx = bytearray(RECEIVE_BUFFER)
        self._start = 0  # first unparsed byte of _rx
        self._end = 0  # end of received bytes in _rx
        self._big: bytearray | None = None  # a request larger than _rx, filled in place
        self._big_filled = 0
        self._pending: collections.deque[asyncio.Task] = collections.deque()
        self._exclusive: asyncio.Task | None = None
        self._read_paused = False
        self._write_paused = False
        self._closing = False
        self._last_activity = time.monotonic()

    # -- asyncio callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=self.server.limits.write_buffer_high)
        self.server.connections.add(self)
        if len(self.server.connections) > self.server.limits.max_connections:
            self.fail(f"max.connections={self.server.limits.max_connections} reached")

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self._closing = True
        self.server.connections.discard(self)
        for task in self._pending:
            task.cancel()
        self._pending.clear()
        self._big = None
        for cleanup in self.on_close:
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - one cleanup's failure must not skip the others
                logger.exception("%s: connection cleanup failed", self.server.name)
        self.on_close.clear()

    def get_buffer(self, sizehint: int) -> memoryview:  # noqa: D102
        if self._big is not None:
            return memoryview(self._big)[self._big_filled :]
        if self._end == len(self._rx):
            self._compact()
        return memoryview(self._rx)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:  # noqa: D102
        self._last_activity = time.monotonic()
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled < len(self._big):
                return
            big, self._big, self._big_filled = self._big, None, 0
            with memoryview(big) as view, view.toreadonly() as frame:
                self._on_frame(frame)
        else:
            self._end += nbytes
        self._parse()

    def eof_received(self) -> bool:  # noqa: D102
        return False  # close; responses still pending are dropped as the client left

    def pause_writing(self) -> None:  # noqa: D102
        # The client is not reading its responses: stop reading its requests.
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:  # noqa: D102
        self._write_paused = False
        self._last_activity = time.monotonic()
        self._update_reading()
        self._parse()

    # -- framing --------------------------------------------------------------------------

    def _parse(self) -> None:
        """Handle every complete request in the receive buffer, while the limits allow."""
        rx = self._rx
        limit = self.server.limits.max_request_bytes
        while not self._closing and self._big is None and not self._over_limits():
            available = self._end - self._start
            if available < 4:
                break
            size = _SIZE.unpack_from(rx, self._start)[0]
            if size < MIN_REQUEST or size > limit:
                self.fail(f"request size {size} outside [{MIN_REQUEST}, {limit}] (socket.request.max.bytes)")
                return
            if available < 4 + size:
                if 4 + size > len(rx):
                    # Larger than the receive buffer: give it a buffer of its own, which the
                    # socket fills directly (no copy of the bulk of it).
                    self._big = bytearray(size)
                    have = available - 4
                    self._big[:have] = rx[self._start + 4 : self._end]
                    self._big_filled = have
                    self._start = self._end = 0
                break
            begin = self._start + 4
            self._start = begin + size
            with memoryview(rx) as view, view[begin : begin + size].toreadonly() as frame:
                self._on_frame(frame)
        if self._start == self._end:
            self._start = self._end = 0
        self._update_reading()

    def _compact(self) -> None:
        """Move the unparsed tail of the receive buffer to its start."""
        n = self._end - self._start
        if self._start:
            self._rx[0:n] = self._rx[self._start : self._end]  # same length: no resize
        self._start, self._end = 0, n

    def _over_limits(self) -> bool:
        return self._write_paused or len(self._pending) >= self.server.limits.max_inflight

    def _update_reading(self) -> None:
        if self._transport is None or self._closing:
            return
        pause = self._over_limits()
        if pause and not self._read_paused:
            self._transport.pause_reading()
            self._read_paused = True
        elif not pause and self._read_paused:
            self._transport.resume_reading()
            self._read_paused = False

    # -- requests -------------------------------------------------------------------------

    def _on_frame(self, frame: memoryview) -> None:
        server = self.server
        try:
            api_key, version, correlation_id = peek(frame)
            api = server.apis.get(api_key)
            if api is None:
                raise RequestDecodeError(f"unknown or unserved API key {api_key}")
            if not api.min_version <= version <= api.max_version:
                if api_key == API_VERSIONS_KEY and version > api.max_version:
                    self._respond_now(api_versions_unsupported(correlation_id, server.ranges))
                    return
                raise RequestDecodeError(
                    f"API key {api_key} version {version} is not served ({api.min_version}-{api.max_version})"
                )
            request = decode_request(frame, api_key, version)
        except RequestDecodeError as exc:
            self.fail(str(exc))
            return
        server.requests += 1
        server.served[(api_key, version)] += 1
        ctx = RequestContext(self, api_key, version, request.correlation_id, request.client_id)
        # An exclusive request waits for everything before it; the others wait for the
        # last exclusive one still in flight.
        if api.exclusive:
            wait_for = tuple(self._pending)
        else:
            wait_for = (self._exclusive,) if self._exclusive is not None else ()
        task = asyncio.get_running_loop().create_task(self._serve(api, ctx, request.body, wait_for))
        if api.exclusive:
            self._exclusive = task
        self._pending.append(task)
        task.add_done_callback(self._on_done)

    async def _serve(self, api: Api, ctx: RequestContext, body: Any, wait_for: tuple[asyncio.Future, ...]) -> Any:
        if wait_for:
            await asyncio.wait(wait_for)
        metrics = self.server.metrics
        if metrics is None:
            response = await api.handle(ctx, body)
        else:
            begun = metrics.begin(ctx.schema.request.__name__.removesuffix("Request"), getattr(body, "acks", None))
            try:
                response = await api.handle(ctx, body)
            finally:
                metrics.end(begun)
        if response is None:
            return None
        return ctx.schema.encode(ctx.correlation_id, response)

    def _respond_now(self, chunks: list[bytes]) -> None:
        """Queue an answer made without a handler, behind the ones already in flight."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        future.set_result(chunks)
        self._pending.append(future)  # type: ignore[arg-type]
        loop.call_soon(self._on_done, future)  # not now: this runs inside _parse

    def _on_done(self, _: asyncio.Future) -> None:
        """Write the responses at the head of the queue that are ready, in request order."""
        pending = self._pending
        while pending and pending[0].done():
            task = pending.popleft()
            if task is self._exclusive:
                self._exclusive = None
            if task.cancelled():
                return
            exc = task.exception()
            if exc is not None:
                logger.error("%s: request from %s failed; closing", self.server.name, self.peer, exc_info=exc)
                self.fail(f"request handler failed: {type(exc).__name__}: {exc}")
                return
            chunks = task.result()
            if chunks is not None:
                self._write(chunks)
        if not self._closing:
            self._parse()  # requests may wait in the buffer for a free slot

    def _write(self, chunks: list[bytes]) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        small: list[bytes] = []
        for chunk in chunks:
            if len(chunk) >= LARGE_CHUNK:
                if small:
                    transport.write(b"".join(small))
                    small = []
                transport.write(chunk)
            else:
                small.append(chunk)
        if small:
            transport.write(b"".join(small))
        self._last_activity = time.monotonic()

    # -- closing --------------------------------------------------------------------------

    def idle_since(self, now: float) -> float:
        """Seconds without traffic; 0 while a request is being worked on and the client reads."""
        if self._pending and not self._write_paused:
            return 0.0
        return now - self._last_activity

    def fail(self, reason: str) -> None:
        """Close this connection with one log line (nothing else is affected)."""
        if self._closing:
            return
        self.server.closed_for_errors += 1
        logger.warning("%s: closing connection %d from %s: %s", self.server.name, self.id, self.peer, reason)
        self.close()

    def close(self) -> None:
        """Close the connection (pending responses are dropped)."""
        self._closing = True
        if self._transport is None:
            return
        if self._write_paused:
            self._transport.abort()  # its buffered answers would never drain
        else:
            self._transport.close()
