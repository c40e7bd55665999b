"""The registry's core between its callers and its state: reads, and writes that go to
``_schemas`` before they change the state (no Ray, no HTTP).

Writes are one at a time (an asyncio lock): the command runs against the state (in a worker
thread when it may parse a schema: protoc and the compatibility checks are CPU work), its
records are appended to the topic in one batch by the injected ``append`` (acks=all), and only
then applied. A write whose append fails changes nothing, but the id it took is burned (the
batch may have landed). Reads that parse schemas run under the same lock, so they never see a
state being changed; plain reads run on the event loop as they are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from actors.schema_registry import errors
from actors.schema_registry.records import Record
from actors.schema_registry.state import Change, RegistryState

logger = logging.getLogger(__name__)

T = TypeVar("T")
Append = Callable[[tuple[Record, ...]], Awaitable[None]]


class RegistryService:
    """The state, its write lock and the topic writer (see the module docstring)."""

    def __init__(self, state: RegistryState, append: Append) -> None:
        self.state = state
        self._append = append
        self._lock: asyncio.Lock | None = None
        self.loaded = False
        self.changes = 0  # bumped whenever the state changes (a write applied, a load)

    def _the_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()  # made in the event loop that uses it
        return self._lock

    def _check_loaded(self) -> None:
        if not self.loaded:
            raise errors.loading()

    def read(self, query: Callable[[RegistryState], T]) -> T:
        """``query(state)`` now (it must not parse schemas)."""
        self._check_loaded()
        return query(self.state)

    async def read_parsing(self, query: Callable[[RegistryState], T]) -> T:
        """``query(state)`` under the write lock, in a worker thread (it may parse schemas)."""
        self._check_loaded()
        async with self._the_lock():
            return await asyncio.to_thread(query, self.state)

    async def write(self, command: Callable[[RegistryState], Change]) -> Any:
        """Run ``command``, append its records, apply them; returns its answer."""
        self._check_loaded()
        async with self._the_lock():
            change = await asyncio.to_thread(command, self.state)
            if change.records:
                try:
                    await self._append(change.records)
                except Exception as exc:
                    if change.new_id is not None:
                        self.state.burn_id(change.new_id)
                    logger.warning("writing to the schemas topic failed: %s: %s", type(exc).__name__, exc)
                    raise errors.store_error(f"{type(exc).__name__}: {exc}") from None
                self.state.apply_all(change.records)
                self.changes += 1
            return change.answer
