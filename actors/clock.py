"""The one place in ``actors/`` that reads the clock (Kafka's ``Time``).

State machines take a :class:`Clock` and never read time themselves, so their tests run on a
:class:`ManualClock` that moves only when told (as Kafka's managers are tested on MockTime),
without Ray and without sleeping. Actor shells pass :data:`SYSTEM`.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock milliseconds (record timestamps, expiry stamps) and a monotonic clock
    (deadlines, timeouts), as Kafka's ``Time.milliseconds()`` and ``Time.nanoseconds()``."""

    def wall_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines and durations)."""
        ...


class SystemClock:
    """The real clock."""

    __slots__ = ()

    def wall_ms(self) -> int:
        """Milliseconds since the epoch, from ``time.time()``."""
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()


SYSTEM: Clock = SystemClock()


class ManualClock:
    """A clock that moves only when :meth:`advance` is called (Kafka's MockTime)."""

    __slots__ = ("_wall_ms", "_monotonic")

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic: float = 1000.0) -> None:
        self._wall_ms = wall_ms
        self._monotonic = monotonic

    def wall_ms(self) -> int:
        """The current simulated wall time in milliseconds."""
        return self._wall_ms

    def monotonic(self) -> float:
        """The current simulated monotonic time in seconds."""
        return self._monotonic

    def advance(self, ms: float) -> None:
        """Move both clocks forward by ``ms`` milliseconds."""
        if ms < 0:
            raise ValueError("a clock does not go back")
        self._wall_ms += int(ms)
        self._monotonic += ms / 1000
