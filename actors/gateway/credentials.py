"""The gateway's cache of SCRAM credentials from the controller (Kafka brokers keep theirs
in memory from the metadata log; here the controller owns the log and a gateway asks it).

A credential is asked for when a client authenticates and kept ``MAX_AGE_S``: a user added
or changed logs in within that long on every gateway (at once on the gateway that served
the AlterUserScramCredentials, which calls :meth:`invalidate`), a removed one is refused
within it. An unknown user is remembered as unknown for the same time, so a client trying
names at random costs the controller at most one call per name per ``MAX_AGE_S``; the
cache holds at most ``MAX_ENTRIES`` (the oldest go first). Concurrent logins of one user
share one controller call.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

from actors.clock import SYSTEM, Clock
from actors.protocol_security import ScramCredential

MAX_AGE_S = 1.0
MAX_ENTRIES = 10000

Fetch = Callable[[str, str], Awaitable[ScramCredential | None]]


class ScramCredentialCache:
    """(user, mechanism) -> credential or None, each at most MAX_AGE_S old."""

    def __init__(self, fetch: Fetch, clock: Clock = SYSTEM, max_age_s: float = MAX_AGE_S) -> None:
        self._fetch = fetch
        self._clock = clock
        self._max_age = max_age_s
        self._entries: collections.OrderedDict[tuple[str, str], tuple[float, ScramCredential | None]] = (
            collections.OrderedDict()
        )
        self._pending: dict[tuple[str, str], asyncio.Future] = {}

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential, from the cache when fresh enough, else from the controller."""
        key = (user, mechanism)
        entry = self._entries.get(key)
        if entry is not None and self._clock.monotonic() - entry[0] < self._max_age:
            return entry[1]
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key))
            self._pending[key] = pending
        return await asyncio.shield(pending)

    async def _load(self, key: tuple[str, str]) -> ScramCredential | None:
        try:
            credential = await self._fetch(*key)
            if credential is not None and not isinstance(credential, ScramCredential):
                credential = None
            self._entries[key] = (self._clock.monotonic(), credential)
            self._entries.move_to_end(key)
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)
            return credential
        finally:
            self._pending.pop(key, None)

    def invalidate(self, users: list[str] | None = None) -> None:
        """Forget the given users' credentials (None: every one)."""
        if users is None:
            self._entries.clear()
            return
        names = set(users)
        for key in [k for k in self._entries if k[0] in names]:
            del self._entries[key]
