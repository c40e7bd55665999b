"""Is a broker's listener serving? One ApiVersions round trip to its advertised address.

What a Kafka client does first on every connection, so a listener that answers it accepts
clients; a port that is closed, a process that accepts but never answers, or an answer that
is not Kafka's all count as down. The request is ApiVersions v0 (every Kafka server answers
it, whatever versions it serves), built here by hand: it is a dozen fixed bytes, and the
probe must not depend on the gateway's own codec it is checking. A broker listed under a TLS
listener (SSL or SASL_SSL: its only listeners are TLS ones) is probed over TLS with that
listener's keys (``ssl_factory.client_context``); ApiVersions needs no SASL login. No Ray in
here: the controller's metrics and ``rayqueue health`` both use it.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from actors.config import listener_config
from actors.gateway.ssl_factory import client_context
from actors.listeners import uses_tls
from actors.types import BrokerMetadata

API_VERSIONS_KEY = 18
CLIENT_ID = b"rayqueue-probe"
DEFAULT_TIMEOUT_S = 2.0
_CORRELATION_ID = 0x52515052  # "RQPR"
# size, api key, api version, correlation id, client id (int16 length + bytes); v0's body is empty.
_REQUEST = struct.pack(">ihhih", 2 + 2 + 4 + 2 + len(CLIENT_ID), API_VERSIONS_KEY, 0, _CORRELATION_ID, len(CLIENT_ID))
_REQUEST += CLIENT_ID
_MAX_RESPONSE = 1 << 20  # ApiVersions answers are a few hundred bytes


async def probe_listener(
    host: str, port: int, timeout_s: float = DEFAULT_TIMEOUT_S, tls: ssl.SSLContext | None = None
) -> str | None:
    """None when ``host:port`` answers an ApiVersions request with no error within
    ``timeout_s`` (over TLS with context ``tls``); otherwise why not, in a few words."""
    try:
        return await asyncio.wait_for(_round_trip(host, port, tls), timeout_s)
    except TimeoutError:
        return f"no ApiVersions answer within {timeout_s:g} s"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"


async def _round_trip(host: str, port: int, tls: ssl.SSLContext | None) -> str | None:
    reader, writer = await asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None)
    try:
        writer.write(_REQUEST)
        await writer.drain()
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            if not 6 <= size <= _MAX_RESPONSE:
                return f"answered a frame of {size} bytes, not an ApiVersions response"
            body = await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return "closed the connection without answering ApiVersions"
        correlation_id, error_code = struct.unpack_from(">ih", body)
        if correlation_id != _CORRELATION_ID:
            return f"answered correlation id {correlation_id}, not the probe's"
        if error_code != 0:
            return f"answered ApiVersions with error code {error_code}"
        return None
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass  # reset by the peer: the answer was read already (or the reason is given)


async def probe_listeners(
    addresses: Iterable[tuple[int, str, int] | tuple[int, str, int, ssl.SSLContext | None]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[int, str | None]:
    """``probe_listener`` of each ``(broker id, host, port[, TLS context])`` at once: broker
    id -> None (up) or the reason it is down."""
    targets = [(*a, None)[:4] for a in addresses]
    reasons = await asyncio.gather(*(probe_listener(host, port, timeout_s, tls) for _, host, port, tls in targets))
    return {target[0]: reason for target, reason in zip(targets, reasons, strict=True)}


def probe_targets(
    brokers: Iterable[BrokerMetadata], config: Mapping[str, Any] | None
) -> list[tuple[int, str, int, ssl.SSLContext | None]]:
    """What ``probe_listeners`` takes for ``brokers``: each one's listed address, with the TLS
    client context of its listener when that listener is SSL or SASL_SSL (made from
    ``config``, the broker configuration; without it, no TLS)."""
    contexts: dict[str, ssl.SSLContext] = {}
    out = []
    for broker in brokers:
        tls = None
        for name, protocol, host, port in broker.endpoints:
            if (host, port) == (broker.host, broker.port) and uses_tls(protocol) and config is not None:
                if name not in contexts:
                    contexts[name] = client_context(listener_config(config, name))
                tls = contexts[name]
                break
        out.append((broker.broker_id, broker.host, broker.port, tls))
    return out


__all__ = ["DEFAULT_TIMEOUT_S", "probe_listener", "probe_listeners", "probe_targets"]
