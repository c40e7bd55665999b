"""Is a broker serving? Its listener answers ApiVersions, and its host actors answer a ping.

The listener probe (``actors.gateway.probe``) connects as a Kafka client does. The listener
runs in one of the broker's hosts; the others (K of them, or one per replica, as
``rayqueue.broker.placement`` says) hold partitions its requests reach by Ray calls, so a
broker one of whose other hosts is blocked, or whose every call slot is taken, would still
look up to it. The ping is an actor call like a client's request: it is answered only when
the host's event loop runs and a call slot is free. A ping left unanswered is cancelled.
A broker answers when every one of its hosts does (one per broker, K, or one per replica, as
``rayqueue.broker.placement`` says). ``rayqueue health`` and the controller's listener-up
gauge use both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ray

from actors.gateway.probe import DEFAULT_TIMEOUT_S, probe_listeners, probe_targets

# A host answers a ping in milliseconds; seconds of silence mean its loop does not run.
PING_TIMEOUT_S = 5.0


async def ping_host(actor: Any, timeout_s: float = PING_TIMEOUT_S) -> str | None:
    """None when the host actor answers a ping within ``timeout_s``; else why not."""
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


async def ping_brokers(hosts: Mapping[int, Sequence[Any]], timeout_s: float = PING_TIMEOUT_S) -> dict[int, str | None]:
    """Every host of each broker (broker id -> its host actors) pinged at once: broker id ->
    None, or why one of its hosts does not answer."""
    ids = list(hosts)
    answers = await asyncio.gather(*(ping_host(actor, timeout_s) for b in ids for actor in hosts[b]))
    out: dict[int, str | None] = dict.fromkeys(ids)
    i = 0
    for b in ids:
        for reason in answers[i : i + len(hosts[b])]:
            out[b] = out[b] or reason
        i += len(hosts[b])
    return out


async def probe_brokers(
    targets: Iterable[tuple[int, str, int, Any]],
    hosts: Mapping[int, Sequence[Any]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ping_timeout_s: float = PING_TIMEOUT_S,
) -> dict[int, str | None]:
    """Each target's (``probe_targets``) listener probed and its broker's host actors (from
    ``hosts``, when known) pinged, all at once: broker id -> None (serving) or why not."""
    targets = list(targets)
    known = {t[0]: hosts[t[0]] for t in targets if hosts.get(t[0])}
    listeners, pings = await asyncio.gather(probe_listeners(targets, timeout_s), ping_brokers(known, ping_timeout_s))
    return {b: listeners[b] or pings.get(b) for b in listeners}


__all__ = ["PING_TIMEOUT_S", "ping_brokers", "ping_host", "probe_brokers", "probe_targets"]
