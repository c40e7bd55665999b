"""The gateway's TCP server: Kafka's framing and connection handling (no Ray in here).

A connection reads size-prefixed requests into its receive buffer, decodes each with kio
(``codec``), and runs its handler as a task. As Kafka's SocketServer mutes a channel while
its request is processed, a connection has one request in processing at a time by default
(``max_inflight``, ``rayqueue.gateway.max.inflight.requests``): the next one is read once the
answer is written, so a client that pipelines is paced by the broker, never queued without
bound, and answers go out in request order. A connection read no more while its request is
processed sees no end of file: once a second the server asks TCP whether the client has
closed its end (``Connection.peer_closed``), and closes such a connection. With a higher limit, requests of one connection
may be in flight together; their responses still go out in request order, handlers marked
``exclusive`` (metadata-changing admin requests) run with nothing else of their connection in
flight, and produce order per partition is kept by the produce handler. A connection that
closes cancels its requests in flight (each handler cancels the actor calls it awaits).

Limits, each breach closing the one connection with one log line and touching nothing
else: a size prefix beyond ``socket.request.max.bytes`` (or below a header's size), a
frame kio cannot decode or whose lengths lie (``codec.walk_request``), an unknown API key
or unserved version (ApiVersions excepted: it is answered UNSUPPORTED_VERSION so the
client can retry lower), a connection beyond ``max.connections`` or
``max.connections.per.ip`` (the newest is closed), and a connection with no traffic for
``connections.max.idle.ms`` (one that never sends, or never reads its responses).

Memory: a receive buffer exists only while its connection has unparsed bytes
(an idle connection holds none); it starts at ``RECEIVE_BUFFER`` and grows by doubling as
a larger request's bytes arrive, up to that request's declared size, never ahead of them,
so a size prefix alone reserves nothing. Buffers are anonymous memory maps: a dropped
one goes back to the operating system at once (a heap-allocated one stays in the
process's resident set). The bytes held by receive buffers beyond the first
``RECEIVE_BUFFER`` of each, and by requests being worked on (their size on the wire), are
bounded per server by ``queued.max.request.bytes`` (the ``RequestMemory`` pool): a
connection whose next read needs memory the pool does not have is not read until a
request finishes (back-pressure); if no request is in flight to free any, the newest
connection waiting for memory is closed. Per connection, at most ``max_inflight``
requests are worked on (beyond that the socket is not read), and while the client does
not read its responses (the write buffer is above its high-water mark) nothing more is
read either.

Big requests: decoding walks every element of a request, so one with tens of
thousands of topics or partitions would hold the event loop for a long time. A request
whose walk goes past ``LOOP_ELEMENTS`` elements is decoded, and its response encoded, on
one worker thread instead (``codec.decode_request_split`` hands kio the request in small
pieces and lets the event loop's thread run between them); its place in the connection's
response order is kept.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import mmap
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.clock import SYSTEM, Clock
from actors.gateway.codec import (
    API_VERSIONS_KEY,
    DecodeDeferred,
    RequestDecodeError,
    Schema,
    api_versions_unsupported,
    decode_request,
    decode_request_split,
    peek,
    schema,
)
from actors.gateway.principal import NoMatchingRule
from actors.gateway.sasl import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, AuthenticationFailed
from actors.gateway.security import ANONYMOUS, ListenerSecurity
from storage.errors import IllegalSaslStateError

logger = logging.getLogger(__name__)

# A connection's receive buffer when it has bytes to parse; it doubles for a larger request
# as its bytes arrive. Idle connections hold none.
RECEIVE_BUFFER = 64 * 1024
SPARE_BUFFERS = 64  # RECEIVE_BUFFER-sized buffers a server keeps for reuse
# Elements (array items) a request's walk may visit on the event loop; a request with more
# is decoded on the worker thread (a Produce has a handful; 50k partitions do not).
LOOP_ELEMENTS = 2000
# Items (topics, partitions) a handler works through between two yields to the event loop
# (a few microseconds each: a millisecond or so at a time).
PACE = 256
# Chunks at least this large are written as they are; smaller ones are joined first.
LARGE_CHUNK = 32 * 1024
MIN_REQUEST = 8  # api key, api version, correlation id
_SIZE = struct.Struct(">i")
# The first bytes of a TLS handshake record (content type 22, version 3.x): a TLS client on a
# listener without TLS.
_TLS_RECORD = (0x16, 0x03)
# TCP_INFO's first byte is the connection's state; ESTABLISHED until the client closes its end
# (Linux; elsewhere a closed client is seen once its request is answered).
_TCP_INFO = getattr(socket, "TCP_INFO", None)
_TCP_ESTABLISHED = 1
# Closings that a client's retries repeat (a TLS client on a plaintext port, a failed login)
# are logged once per client address and kind per this many seconds.
LOG_INTERVAL_S = 60.0

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
    """What one connection, and all of them, may cost (Kafka's broker keys where Kafka has
    one; the defaults are rayqueue's, see actors/config.py)."""

    max_request_bytes: int = 104857600  # socket.request.max.bytes
    idle_ms: int = 600000  # connections.max.idle.ms
    max_connections: int = 10000  # max.connections
    max_connections_per_ip: int = 1000  # max.connections.per.ip
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)  # by IP address
    queued_max_request_bytes: int = 512 * 1024 * 1024  # queued.max.request.bytes (-1: unbounded)
    max_inflight: int = 1  # rayqueue.gateway.max.inflight.requests
    write_buffer_high: int = 8 * 1024 * 1024

    def connections_per_ip(self, ip: str) -> int:
        """The connection limit of one client address."""
        return self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)


class RequestMemory:
    """``queued.max.request.bytes``: the bytes a server's connections hold in grown receive
    buffers and in requests being worked on. A connection that cannot have what its next
    read needs waits (its socket is not read) until some is released."""

    def __init__(self, limit: int) -> None:
        self.limit = limit if limit > 0 else None
        self.used = 0
        self.peak = 0
        self.waiting: dict[Connection, None] = {}  # in the order they started waiting

    def try_take(self, n: int) -> bool:
        """Take ``n`` bytes if the pool has them."""
        if self.limit is not None and self.used + n > self.limit:
            return False
        self.used += n
        self.peak = max(self.peak, self.used)
        return True

    def take_anyway(self, n: int) -> None:
        """Count ``n`` bytes already held (a decoded request), even beyond the limit."""
        self.used += n
        self.peak = max(self.peak, self.used)

    def give_back(self, n: int) -> None:
        """Return ``n`` bytes; connections waiting get their turn, oldest first."""
        self.used -= n
        while self.waiting:
            conn = next(iter(self.waiting))
            if not conn.retry_memory():
                break


class RequestContext:
    """What a handler knows of the request besides its body."""

    __slots__ = ("connection", "api_key", "version", "correlation_id", "client_id", "schema", "big", "close_reason")

    def __init__(
        self,
        connection: Connection,
        api_key: int,
        version: int,
        correlation_id: int,
        client_id: str | None,
        big: bool = False,
    ):
        self.connection = connection
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.schema: Schema = schema(api_key, version)
        # A request too big to decode on the event loop: its response is encoded off it too.
        self.big = big
        # Set by a handler whose answer must be the connection's last (a failed SASL login).
        self.close_reason: str | None = None

    def close_after_response(self, reason: str) -> None:
        """Close the connection once this request's response is written (with one log line)."""
        self.close_reason = reason

    @property
    def principal(self) -> str:
        """The connection's authenticated principal ("User:<name>"; "User:ANONYMOUS" if none)."""
        return self.connection.principal

    @property
    def state(self) -> Any:
        """The server's state object (the gateway's broker view)."""
        return self.connection.server.state


class LogLimiter:
    """At most one log line per key (a kind of closing and a client address) per interval;
    the next line says how many were left out. Bounded: the oldest keys go first."""

    def __init__(self, clock: Clock = SYSTEM, interval_s: float = LOG_INTERVAL_S, max_keys: int = 10000) -> None:
        self._clock = clock
        self._interval = interval_s
        self._max_keys = max_keys
        self._last: collections.OrderedDict[Any, list] = collections.OrderedDict()  # key -> [time, left out]

    def allow(self, key: Any) -> int | None:
        """The number of lines left out since the last one when a line may be logged now;
        None when it may not (it is counted)."""
        now = self._clock.monotonic()
        entry = self._last.get(key)
        if entry is not None and now - entry[0] < self._interval:
            entry[1] += 1
            return None
        left_out = entry[1] if entry is not None else 0
        self._last[key] = [now, 0]
        self._last.move_to_end(key)
        while len(self._last) > self._max_keys:
            self._last.popitem(last=False)
        return left_out


class KafkaServer:
    """An asyncio server speaking Kafka's protocol for the APIs it is given."""

    def __init__(
        self,
        apis: Mapping[int, Api],
        state: Any = None,
        limits: Limits | None = None,
        name: str = "gateway",
        metrics: Any = None,
        clock: Clock = SYSTEM,
        security: ListenerSecurity | None = None,
    ):
        self.apis = dict(apis)
        # The listener's name, security protocol, TLS context and SASL settings.
        self.security = security or ListenerSecurity()
        self.log_limiter = LogLimiter(clock)
        self.clock = clock  # connections' idle time (connections.max.idle.ms)
        # An actors.metrics.GatewayMetrics, or None: then nothing is recorded.
        self.metrics = metrics
        self.state = state
        self.limits = limits or Limits()
        self.name = name
        self.ranges = {key: (api.min_version, api.max_version) for key, api in self.apis.items()}
        self.connections: set[Connection] = set()
        self.per_ip: collections.Counter[str] = collections.Counter()
        self.memory = RequestMemory(self.limits.queued_max_request_bytes)
        self.inflight = 0  # requests being worked on, all connections
        self.closed_for_errors = 0
        self.requests = 0
        self.big_requests = 0  # decoded off the event loop
        self.served: collections.Counter[tuple[int, int]] = collections.Counter()  # (API key, version)
        self.spare_buffers: list[mmap.mmap] = []
        self._ids = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None

    def break_memory_deadlock(self) -> None:
        """Connections waiting for memory wait for requests to finish or for other partial
        requests to complete. When no request is in flight and every byte held is held by a
        waiting connection, none of that can happen: the newest waiting one is closed (its
        buffer freed), and so on until the others can go on."""
        waiting = self.memory.waiting
        while waiting and not self.inflight and sum(conn.charged for conn in waiting) >= self.memory.used:
            newest = max(waiting, key=lambda conn: conn.id)
            waiting.pop(newest)
            newest.fail(
                f"queued.max.request.bytes={self.limits.queued_max_request_bytes} is held by partial requests "
                "and none is in flight: closing the newest connection waiting for memory"
            )

    def worker(self) -> concurrent.futures.ThreadPoolExecutor:
        """The one thread that decodes big requests and encodes their responses."""
        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-big")
        return self._worker

    def buffer(self, size: int) -> mmap.mmap:
        """A receive buffer of ``size`` bytes (an anonymous map: dropped, it leaves the process)."""
        if size == RECEIVE_BUFFER and self.spare_buffers:
            return self.spare_buffers.pop()
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)

    def recycle(self, buf: mmap.mmap) -> None:
        """Keep a base-sized buffer for the next connection that reads (a few at most)."""
        if len(buf) == RECEIVE_BUFFER and len(self.spare_buffers) < SPARE_BUFFERS:
            self.spare_buffers.append(buf)

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
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
            self._worker = None
        self.spare_buffers.clear()

    async def _reap_idle(self) -> None:
        """Close connections with no traffic for connections.max.idle.ms (Kafka's
        Selector does the same): ones that never send, and ones that never read; and
        connections whose client left while their request was processed."""
        idle = self.limits.idle_ms / 1000
        while True:
            await asyncio.sleep(min(1.0, idle / 4))
            self._close_idle(idle)

    def _close_idle(self, idle: float) -> None:
        # A function of its own: a loop variable in _reap_idle would keep the last
        # connection it looked at (and all it holds) alive across the sleep.
        now = self.clock.monotonic()
        auth_timeout = self.security.auth_timeout_s
        for conn in list(self.connections):
            if conn.peer_closed():
                conn.close()  # its requests in flight are cancelled with it
            elif conn.idle_since(now) > idle:
                conn.fail(f"idle for more than {self.limits.idle_ms} ms (connections.max.idle.ms)")
            elif conn.unauthenticated_for(now) > auth_timeout:
                conn.fail(
                    f"not authenticated within {auth_timeout * 1000:.0f} ms (rayqueue.authentication.timeout.ms)",
                    quiet=("slow-authentication", conn.ip),
                )


def _no_tls(exc: BaseException) -> bool:
    """Whether a failed handshake looks like a client that sent no TLS at all."""
    text = str(exc).lower()
    return isinstance(exc, ssl.SSLError) and any(
        hint in text
        for hint in ("wrong_version_number", "http_request", "unknown_protocol", "record layer", "packet length")
    )


def _encode_coalesced(ctx: RequestContext, response: Any) -> list[bytes]:
    """A big response's frame (on the worker thread): encoded, and its many small pieces
    joined, so that the event loop writes a few chunks rather than one per field."""
    out: list[bytes] = []
    small: list[bytes] = []
    for chunk in ctx.schema.encode(ctx.correlation_id, response):
        if len(chunk) >= LARGE_CHUNK:
            if small:
                out.append(b"".join(small))
                small = []
            out.append(chunk)
        else:
            small.append(chunk)
    if small:
        out.append(b"".join(small))
    return out


class Connection(asyncio.BufferedProtocol):
    """One client connection: framing, decoding, ordered responses, limits."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self._clock = server.clock
        self.id = next(server._ids)
        self.peer = "?"
        self.ip: str | None = None
        # Who the client is, in Kafka's form ("User:<name>"): ANONYMOUS until a listener's
        # authentication (TLS client certificate, SASL) names it; the authorizer checks it.
        self.principal = ANONYMOUS
        # The listener's SASL state of this connection (None without SASL); a TLS listener's
        # connection reads nothing until its handshake is done.
        self.sasl = server.security.new_session(server.clock.monotonic)
        self._tls_pending = server.security.tls
        self._accepted = self._clock.monotonic()
        self._first_bytes = True  # nothing parsed yet: a TLS hello on a plaintext port shows here
        self._auth_busy = False  # a SASL request is being worked on: nothing more is read
        self._close_after: dict[asyncio.Future, str] = {}
        self._lost = False
        self.handler_state: dict[str, Any] = {}  # per-connection state of the handlers
        self.on_close: list[Callable[[], None]] = []  # handlers' cleanups when the connection ends
        self._transport: asyncio.Transport | None = None
        self._rx: mmap.mmap | None = None  # only while there are bytes to parse
        self._start = 0  # first unparsed byte of _rx
        self._end = 0  # end of received bytes in _rx
        self._want = RECEIVE_BUFFER  # the size _rx has at the next read (growth is reserved first)
        self._charged = 0  # bytes of server.memory held by _rx (its growth beyond RECEIVE_BUFFER)
        self._pending: collections.deque[asyncio.Future] = collections.deque()
        self._sizes: dict[asyncio.Future, int] = {}  # bytes of server.memory held by each request
        self._exclusive: asyncio.Future | None = None
        self._read_paused = False
        self._write_paused = False
        self._memory_wait = False  # the next read needs memory the server does not have
        self._closing = False
        self._last_activity = self._clock.monotonic()

    # -- asyncio callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        assert isinstance(transport, asyncio.Transport)
        server, limits = self.server, self.server.limits
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=limits.write_buffer_high)
        server.connections.add(self)
        self.ip = peer[0] if peer else "?"
        server.per_ip[self.ip] += 1
        if len(server.connections) > limits.max_connections:
            self.fail(f"max.connections={limits.max_connections} reached")
        elif server.per_ip[self.ip] > limits.connections_per_ip(self.ip):
            self.fail(f"max.connections.per.ip={limits.connections_per_ip(self.ip)} reached for {self.ip}")
        elif self._tls_pending:
            # Nothing is read until start_tls takes the socket over (the connection limits
            # above count connections still in their handshake).
            transport.pause_reading()
            asyncio.get_running_loop().create_task(self._start_tls(transport))

    async def _start_tls(self, raw: asyncio.Transport) -> None:
        """The TLS handshake (bounded by rayqueue.authentication.timeout.ms), then the
        principal of the client certificate; a client that speaks no TLS is closed with one
        log line per address and interval."""
        security = self.server.security
        try:
            transport = await asyncio.get_running_loop().start_tls(
                raw, self, security.ssl_context, server_side=True, ssl_handshake_timeout=security.auth_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - every failed handshake closes the connection
            if not self._closing:
                self._report_tls(False)
                kind = "a client that does not speak TLS (plaintext?)" if _no_tls(exc) else "a failed TLS handshake"
                self.fail(
                    f"{kind} on the {security.protocol} listener {security.name}: {type(exc).__name__}: {exc}",
                    quiet=("tls-handshake", self.ip),
                )
            self.connection_lost(None)  # start_tls closed the socket; the SSL layer may not say so
            return
        if self._closing:
            transport.abort()
            return
        self._transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=self.server.limits.write_buffer_high)
        if self.sasl is None:
            ssl_object = transport.get_extra_info("ssl_object")
            certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            try:
                self.principal = security.tls_principal(certificate)
            except (NoMatchingRule, ValueError) as exc:
                self._report_tls(False)
                self.fail(f"TLS client not authenticated: {exc}", quiet=("tls-principal", self.ip))
                return
            self._report_tls(True)
        self._tls_pending = False
        self._last_activity = self._clock.monotonic()
        self._update_reading()
        self._parse()

    def _report_tls(self, ok: bool) -> None:
        security = self.server.security
        if self.sasl is None and security.on_tls_result is not None:
            try:
                security.on_tls_result(ok)
            except Exception:  # noqa: BLE001 - metrics never fail a connection
                logger.exception("recording a TLS authentication failed")

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self._closing = True
        if self._lost:  # a failed TLS handshake may report it twice
            return
        self._lost = True
        server = self.server
        server.connections.discard(self)
        if self.ip is not None:
            server.per_ip[self.ip] -= 1
            if server.per_ip[self.ip] <= 0:
                del server.per_ip[self.ip]
            self.ip = None
        self._discard_work()
        for cleanup in self.on_close:
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - one cleanup's failure must not skip the others
                logger.exception("%s: connection cleanup failed", server.name)
        self.on_close.clear()
        self.handler_state.clear()

    def get_buffer(self, sizehint: int) -> memoryview:  # noqa: D102
        rx = self._rx
        if rx is None:
            rx = self._rx = self.server.buffer(RECEIVE_BUFFER)
            self._start = self._end = 0
        elif self._end == len(rx):
            self._compact()
        if len(rx) < self._want:
            # Growth reserved by _ensure_room. No view of the buffer is held between reads,
            # so the map can be resized in place (mremap: no copy).
            rx.resize(self._want)
        return memoryview(rx)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:  # noqa: D102
        self._last_activity = self._clock.monotonic()
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
        self._last_activity = self._clock.monotonic()
        self._update_reading()
        self._parse()

    # -- framing --------------------------------------------------------------------------

    def _parse(self) -> None:
        """Handle every complete request in the receive buffer, while the limits allow."""
        rx = self._rx
        limit = self.server.limits.max_request_bytes
        while rx is not None and not self._closing and not self._over_limits():
            available = self._end - self._start
            if available < 4:
                break
            if self._first_bytes:
                self._first_bytes = False
                if (rx[self._start], rx[self._start + 1]) == _TLS_RECORD and not self.server.security.tls:
                    security = self.server.security
                    self.fail(
                        f"a TLS handshake on the {security.protocol} listener {security.name} (a TLS client"
                        " configured for a listener without TLS?)",
                        quiet=("tls-on-plaintext", self.ip),
                    )
                    return
            size = _SIZE.unpack_from(rx, self._start)[0]
            sasl = self.sasl
            if sasl is not None and not sasl.authenticated and size > sasl.config.max_receive:
                self.fail(
                    f"request size {size} before SASL authentication is above"
                    f" sasl.server.max.receive.size={sasl.config.max_receive}"
                )
                return
            if size < MIN_REQUEST and not (sasl is not None and sasl.raw_tokens and size >= 0) or size > limit:
                self.fail(f"request size {size} outside [{MIN_REQUEST}, {limit}] (socket.request.max.bytes)")
                return
            if available < 4 + size:
                break
            begin = self._start + 4
            self._start = begin + size
            with memoryview(rx) as view, view[begin : begin + size].toreadonly() as frame:
                self._on_frame(frame)
        if self._closing:
            return
        if self._start == self._end:
            self._drop_buffer()  # nothing partial: an idle connection holds no buffer
        else:
            self._ensure_room()
        self._update_reading()

    def _compact(self) -> None:
        """Move the unparsed tail of the receive buffer to its start."""
        n = self._end - self._start
        if self._start and n:
            self._rx.move(0, self._start, n)  # type: ignore[union-attr]
        self._start, self._end = 0, n

    def _discard_work(self) -> None:
        """Cancel the requests in flight and free the receive buffer (closing)."""
        pending, self._pending = self._pending, collections.deque()
        for task in pending:
            task.cancel()  # each gives its memory back as it ends (_release)
        self._exclusive = None
        self.server.memory.waiting.pop(self, None)
        self._drop_buffer()

    def _drop_buffer(self) -> None:
        """Give the receive buffer back (to the server's spares, or to the system)."""
        rx, self._rx = self._rx, None
        self._start = self._end = 0
        self._want = RECEIVE_BUFFER
        if self._charged:
            charged, self._charged = self._charged, 0
            self.server.memory.give_back(charged)
        if rx is not None and not self._closing:
            self.server.recycle(rx)

    def _room_reserved(self) -> bool:
        """Whether the next read has room: a full buffer holding one partial request grows
        (doubling, up to that request's size) if server.memory has the bytes."""
        rx = self._rx
        if rx is None or self._end - self._start < self._want:
            return True  # room left (after compaction), or the base buffer comes with the read
        declared = 4 + _SIZE.unpack_from(rx, self._start)[0]  # a full buffer holds the size prefix
        if declared <= self._want:
            return True  # a whole request waiting to be parsed (or a bad size _parse refuses)
        grown = min(2 * self._want, declared)
        if not self.server.memory.try_take(grown - self._want):
            return False
        self._charged += grown - self._want
        self._want = grown
        return True

    def _ensure_room(self) -> None:
        if self._memory_wait or self._room_reserved():
            return
        self._memory_wait = True
        self.server.memory.waiting[self] = None
        self._update_reading()
        self.server.break_memory_deadlock()

    def retry_memory(self) -> bool:
        """Try again to reserve room for the next read (the server gave memory back); False
        when there still is not enough."""
        if not self._closing and not self._room_reserved():
            return False
        self.server.memory.waiting.pop(self, None)
        self._memory_wait = False
        if not self._closing:
            self._update_reading()
        return True

    def _over_limits(self) -> bool:
        return (
            self._write_paused
            or self._memory_wait
            or self._tls_pending
            or self._auth_busy
            or len(self._pending) >= self.server.limits.max_inflight
        )

    def _update_reading(self) -> None:
        if self._transport is None or self._closing or self._tls_pending:
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
        data = None
        sasl = self.sasl
        if sasl is not None and sasl.expects_raw_token:
            # After a SaslHandshake v0 the tokens come as raw frames, not as requests.
            self._auth_busy = True
            self._dispatch(self._raw_token(bytes(frame)), len(frame), False, auth=True)
            return
        try:
            api_key, version, correlation_id = peek(frame)
            if sasl is not None:
                refusal = sasl.refusal(api_key)
                if refusal is not None:
                    self.fail(refusal, quiet=("unauthenticated-request", self.ip))
                    return
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
            try:
                request = decode_request(frame, api_key, version, max_elements=LOOP_ELEMENTS)
            except DecodeDeferred:
                data = bytes(frame)  # out of the receive buffer: decoded on the worker thread
        except RequestDecodeError as exc:
            self.fail(str(exc))
            return
        server.requests += 1
        server.served[(api_key, version)] += 1
        if data is None:
            ctx = RequestContext(self, api_key, version, request.correlation_id, request.client_id)
            body = request.body
        else:
            server.big_requests += 1
            ctx = RequestContext(self, api_key, version, correlation_id, None, big=True)
            body = data
        # An exclusive request waits for everything before it; the others wait for the
        # last exclusive one still in flight.
        if api.exclusive:
            wait_for = tuple(self._pending)
        else:
            wait_for = (self._exclusive,) if self._exclusive is not None else ()
        # A SASL request changes what the connection may send next: nothing more is read
        # until it is answered.
        auth = api_key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY)
        if auth:
            self._auth_busy = True
        self._dispatch(self._serve(api, ctx, body, wait_for), len(frame), api.exclusive, auth=auth)

    def _dispatch(self, work: Awaitable[Any], size: int, exclusive: bool, auth: bool = False) -> None:
        """Run a request's work as a task whose answer goes out in request order."""
        server = self.server
        task = asyncio.get_running_loop().create_task(work)
        if exclusive:
            self._exclusive = task
        # The decoded request is held until its handler is done: it counts against
        # queued.max.request.bytes at its size on the wire (taken even beyond the limit:
        # its bytes are already here; what waits is the next read).
        server.memory.take_anyway(size)
        server.inflight += 1
        self._sizes[task] = size
        task.add_done_callback(self._release)
        self._pending.append(task)
        if auth:
            task.add_done_callback(self._auth_done)
        task.add_done_callback(self._on_done)

    def _auth_done(self, _: asyncio.Future) -> None:
        self._auth_busy = False
        if self.sasl is not None and self.sasl.principal is not None:
            self.principal = self.sasl.principal
        self._update_reading()

    async def _raw_token(self, token: bytes) -> list[bytes] | None:
        """One SASL token after a SaslHandshake v0, answered as a raw frame; a failure
        closes the connection without an answer (Kafka's v0 behaviour)."""
        try:
            answer, _ = await self.sasl.authenticate(token, None)  # type: ignore[union-attr]
        except (AuthenticationFailed, IllegalSaslStateError) as exc:
            self._close_after[asyncio.current_task()] = f"SASL authentication failed: {exc}"  # type: ignore[index]
            return None
        return [_SIZE.pack(len(answer)), answer]

    def _release(self, task: asyncio.Future) -> None:
        server = self.server
        server.inflight -= 1
        server.memory.give_back(self._sizes.pop(task))
        server.break_memory_deadlock()

    async def _serve(self, api: Api, ctx: RequestContext, body: Any, wait_for: tuple[asyncio.Future, ...]) -> Any:
        loop = asyncio.get_running_loop()
        if ctx.big:
            request = await loop.run_in_executor(
                self.server.worker(), decode_request_split, body, ctx.api_key, ctx.version
            )
            ctx.client_id, body = request.client_id, request.body
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
        if ctx.close_reason is not None:
            self._close_after[asyncio.current_task()] = ctx.close_reason  # type: ignore[index]
        if response is None:
            return None
        if ctx.big:
            return await loop.run_in_executor(self.server.worker(), _encode_coalesced, ctx, response)
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
            if isinstance(exc, RequestDecodeError):  # a big request the worker thread refused
                self.fail(str(exc))
                return
            if exc is not None:
                logger.error("%s: request from %s failed; closing", self.server.name, self.peer, exc_info=exc)
                self.fail(f"request handler failed: {type(exc).__name__}: {exc}")
                return
            chunks = task.result()
            if chunks is not None:
                self._write(chunks)
            reason = self._close_after.pop(task, None)
            if reason is not None:
                self.fail(reason, quiet=("authentication-failed", self.ip))
                return
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
        self._last_activity = self._clock.monotonic()

    # -- closing --------------------------------------------------------------------------

    @property
    def charged(self) -> int:
        """Bytes of the server's request memory its receive buffer holds."""
        return self._charged

    @property
    def closing(self) -> bool:
        """Whether the connection is closing or closed."""
        return self._closing

    def unauthenticated_for(self, now: float) -> float:
        """Seconds since the accept while the TLS handshake or SASL login is not done (0 once
        it is, and on a listener that authenticates nobody)."""
        if self._tls_pending or (self.sasl is not None and not self.sasl.authenticated):
            return now - self._accepted
        return 0.0

    def peer_closed(self) -> bool:
        """Whether the client closed its end while nothing is read from it (a request being
        processed): a paused transport sees no end of file, so TCP's state is asked."""
        transport = self._transport
        if not self._read_paused or transport is None or self._closing or _TCP_INFO is None:
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        try:
            state = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 1)[0]
        except OSError:
            return True  # the socket is gone already
        return state != _TCP_ESTABLISHED

    def idle_since(self, now: float) -> float:
        """Seconds without traffic; 0 while a request is being worked on and the client reads."""
        if self._pending and not self._write_paused:
            return 0.0
        return now - self._last_activity

    def fail(self, reason: str, quiet: Any = None) -> None:
        """Close this connection with one log line (nothing else is affected). With a
        ``quiet`` key (a kind of closing a client's retries repeat, and its address), one
        line per key per LOG_INTERVAL_S, which says how many were left out."""
        if self._closing:
            return
        server = self.server
        server.closed_for_errors += 1
        left_out = 0 if quiet is None else server.log_limiter.allow(quiet)
        if left_out is not None:
            more = f" ({left_out} more like it in the last {LOG_INTERVAL_S:.0f} s not logged)" if left_out else ""
            logger.warning("%s: closing connection %d from %s: %s%s", server.name, self.id, self.peer, reason, more)
        self.close()

    def close(self) -> None:
        """Close the connection (pending responses are dropped, its memory freed now)."""
        self._closing = True
        self._discard_work()
        if self._transport is None:
            return
        if self._write_paused:
            self._transport.abort()  # its buffered answers would never drain
        else:
            self._transport.close()
