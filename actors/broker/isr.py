"""Kafka's ISR rules on the leader's side, on an injected clock (Kafka's ``Partition``
``maybeShrinkIsr`` / ``maybeExpandIsr`` and ``Replica`` state).

A leader tracks, per follower, the log end offset its last fetch reported and when it was
last caught up. A follower is caught up now when a fetch reaches the leader's log end
offset, and caught up as of its previous fetch when it reaches the end the leader had then
(so a follower that keeps up under constant appends never looks behind). An ISR member not
caught up for longer than ``replica.lag.time.max.ms`` is out of sync: the leader proposes
an ISR without it. A follower outside the ISR may join once it has reached the high
watermark and the start of the leader's epoch. The high watermark is the smallest log end
offset of the ISR (an unknown one, -1, holds it back). The controller commits the ISR
changes (``actors.controller.replication_control``); these rules only propose them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from actors.clock import Clock


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ReplicaState); times are the clock's
    monotonic seconds."""

    leo: int = -1  # unknown until it fetches: an unknown LEO holds the HW back
    caught_up_at: float = 0.0
    last_fetch_at: float = 0.0
    leader_leo_at_last_fetch: int = -1


class IsrTracker:
    """The followers' fetch state of one partition leader and the ISR rules over it (the
    replica's :class:`~actors.broker.replica_state.ReplicaState` keeps one)."""

    def __init__(self, leader_id: int, clock: Clock, lag_time_max_ms: float = 30000) -> None:
        self.leader_id = leader_id
        self.lag_time_max_ms = lag_time_max_ms
        self._clock = clock
        self._followers: dict[int, FollowerState] = {}

    @property
    def followers(self) -> Mapping[int, FollowerState]:
        """Every follower's state, by broker id."""
        return self._followers

    def follower(self, broker_id: int) -> FollowerState | None:
        """A follower's state (None for a broker that is no replica)."""
        return self._followers.get(broker_id)

    def forget(self) -> None:
        """Forget every follower (a new leadership: each starts unknown)."""
        self._followers.clear()

    def set_membership(self, replicas: Iterable[int], isr: Iterable[int]) -> None:
        """New replicas and ISR from the controller. A new ISR member gets a full lag period
        to fetch before it can be dropped; a new replica outside the ISR starts behind; a
        replica no longer listed is forgotten."""
        replicas, now = list(replicas), self._clock.monotonic()
        members = set(isr)
        for b in replicas:
            if b != self.leader_id and b not in self._followers:
                self._followers[b] = FollowerState(caught_up_at=now if b in members else 0.0)
        for b in [b for b in self._followers if b not in replicas]:
            del self._followers[b]

    def on_fetch(self, broker_id: int, offset: int, leader_leo: int) -> FollowerState | None:
        """A follower fetched from ``offset`` (its log end) while the leader's log ended at
        ``leader_leo``; None (nothing recorded) for a broker that is no replica."""
        state = self._followers.get(broker_id)
        if state is None:
            return None
        now = self._clock.monotonic()
        if offset >= leader_leo:
            state.caught_up_at = now
        elif offset >= state.leader_leo_at_last_fetch:
            state.caught_up_at = max(state.caught_up_at, state.last_fetch_at)
        state.leader_leo_at_last_fetch, state.last_fetch_at, state.leo = leader_leo, now, offset
        return state

    def out_of_sync(self, isr: Iterable[int]) -> list[int]:
        """The ISR members (never the leader) not caught up for longer than
        replica.lag.time.max.ms: an ISR shrink drops them."""
        now, lag = self._clock.monotonic(), self.lag_time_max_ms / 1000
        return [
            b for b in isr if b != self.leader_id and now - self._followers.get(b, FollowerState()).caught_up_at > lag
        ]

    def shrunk_isr(self, isr: Iterable[int]) -> list[int] | None:
        """The ISR without its out-of-sync members, or None when all are in sync."""
        isr = list(isr)
        out = self.out_of_sync(isr)
        return [b for b in isr if b not in out] if out else None

    def may_join(self, broker_id: int, isr: Iterable[int], high_watermark: int, epoch_start_offset: int) -> bool:
        """Whether a follower outside the ISR has caught up enough to join it: its log end
        has reached the high watermark and the start of the leader's epoch."""
        state = self._followers.get(broker_id)
        return (
            state is not None
            and broker_id not in set(isr)
            and state.leo >= high_watermark
            and state.leo >= epoch_start_offset
        )

    def high_watermark(self, leader_leo: int, isr: Iterable[int]) -> int:
        """The smallest log end offset of the ISR (the leader's own included)."""
        hw = leader_leo
        for b in isr:
            if b != self.leader_id:
                state = self._followers.get(b)
                hw = min(hw, state.leo if state is not None else -1)
        return hw
