"""Is a broker serving? Its listener answers ApiVersions, and its process answers a ping.

The listener probe (``actors.gateway.probe``) connects as a Kafka client does. The listener
runs in the gateway's actor, apart from the broker's actor that hosts the partitions, so a
broker whose event loop is blocked, or whose every call slot is taken, would still look up
to it. The ping is an actor call like a client's request: it is answered only when the
broker's event loop runs and a call slot is free. A ping left unanswered is cancelled.
``rayqueue health`` and the controller's listener-up gauge use both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import ray

from actors.gateway.probe import DEFAULT_TIMEOUT_S, probe_listeners, probe_targets

# A broker answers a ping in milliseconds; seconds of silence mean its loop does not run.
PING_TIMEOUT_S = 5.0


async def ping_broker(actor: Any, timeout_s: float = PING_TIMEOUT_S) -> str | None:
    """None when the broker actor answers a ping within ``timeout_s``; else why not."""
    ref = actor.ping.remote()
    try:
        await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s)
        return None
    except TimeoutError:
        ray.cancel(ref)
        return (
            f"its broker process does not answer a ping within {timeout_s:g} s"
            " (its event loop is blocked, or every call slot is taken)"
        )
    except ray.exceptions.RayActorError as exc:
        return f"its broker process is gone ({type(exc).__name__})"


async def ping_brokers(actors: Mapping[int, Any], timeout_s: float = PING_TIMEOUT_S) -> dict[int, str | None]:
    """``ping_broker`` of each broker id's actor at once: broker id -> None or why not."""
    ids = list(actors)
    reasons = await asyncio.gather(*(ping_broker(actors[b], timeout_s) for b in ids))
    return dict(zip(ids, reasons, strict=True))


async def probe_brokers(
    targets: Iterable[tuple[int, str, int, Any]],
    actors: Mapping[int, Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ping_timeout_s: float = PING_TIMEOUT_S,
) -> dict[int, str | None]:
    """Each target's (``probe_targets``) listener probed and its broker actor (from
    ``actors``, when known) pinged, all at once: broker id -> None (serving) or why not."""
    targets = list(targets)
    known = {t[0]: actors[t[0]] for t in targets if actors.get(t[0]) is not None}
    listeners, pings = await asyncio.gather(probe_listeners(targets, timeout_s), ping_brokers(known, ping_timeout_s))
    return {b: listeners[b] or pings.get(b) for b in listeners}


__all__ = ["PING_TIMEOUT_S", "ping_broker", "ping_brokers", "probe_brokers", "probe_targets"]
