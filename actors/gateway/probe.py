"""Is a broker's listener serving? One ApiVersions round trip to its advertised address.

What a Kafka client does first on every connection, so a listener that answers it accepts
clients; a port that is closed, a process that accepts but never answers, or an answer that
is not Kafka's all count as down. The request is ApiVersions v0 (every Kafka server answers
it, whatever versions it serves), built here by hand: it is a dozen fixed bytes, and the
probe must not depend on the gateway's own codec it is checking. No Ray in here: the
controller's metrics and ``rayqueue health`` both use it.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable

API_VERSIONS_KEY = 18
CLIENT_ID = b"rayqueue-probe"
DEFAULT_TIMEOUT_S = 2.0
_CORRELATION_ID = 0x52515052  # "RQPR"
# size, api key, api version, correlation id, client id (int16 length + bytes); v0's body is empty.
_REQUEST = struct.pack(">ihhih", 2 + 2 + 4 + 2 + len(CLIENT_ID), API_VERSIONS_KEY, 0, _CORRELATION_ID, len(CLIENT_ID))
_REQUEST += CLIENT_ID
_MAX_RESPONSE = 1 << 20  # ApiVersions answers are a few hundred bytes


async def probe_listener(host: str, port: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """None when ``host:port`` answers an ApiVersions request with no error within
    ``timeout_s``; otherwise why not, in a few words."""
    try:
        return await asyncio.wait_for(_round_trip(host, port), timeout_s)
    except TimeoutError:
        return f"no ApiVersions answer within {timeout_s:g} s"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"


async def _round_trip(host: str, port: int) -> str | None:
    reader, writer = await asyncio.open_connection(host, port)
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
    addresses: Iterable[tuple[int, str, int]], timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[int, str | None]:
    """``probe_listener`` of each ``(broker id, host, port)`` at once: broker id -> None (up)
    or the reason it is down."""
    addresses = list(addresses)
    reasons = await asyncio.gather(*(probe_listener(host, port, timeout_s) for _, host, port in addresses))
    return {broker_id: reason for (broker_id, _, _), reason in zip(addresses, reasons, strict=True)}


__all__ = ["DEFAULT_TIMEOUT_S", "probe_listener", "probe_listeners"]
