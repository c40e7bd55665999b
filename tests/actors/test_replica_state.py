"""The replica's replication rules on a manual clock, without Ray and without waiting:
followers leave the ISR after replica.lag.time.max.ms and rejoin when caught up, the high
watermark never passes what the ISR holds, and leader epochs fence stale requests. (The host
class over these rules, driven by hand: ``test_replica_manager.py``.)"""

from __future__ import annotations

import pytest

from actors.broker.replica_state import ReplicaState
from actors.clock import ManualClock
from actors.protocol import (
    NO_EPOCH,
    ReplicaRole,
)
from storage.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)

LAG_MS = 10_000


def leader(clock: ManualClock, log_end: int = 0, isr: tuple[int, ...] = (0, 1, 2)) -> ReplicaState:
    """Broker 0 leading t-0 at epoch 3 over replicas 0, 1, 2."""
    state = ReplicaState("t-0", 0, clock=clock)
    state.lag_time_max_ms = LAG_MS
    state.lead(3, 5, (0, 1, 2), isr, log_end)
    return state


def test_a_follower_that_stops_fetching_leaves_the_isr_after_the_lag_time() -> None:
    clock = ManualClock()
    state = leader(clock, log_end=10)
    for b in (1, 2):
        assert state.follower_fetched(b, 10, log_end=10) is None  # caught up, already in the ISR
    clock.advance(LAG_MS - 1)
    assert state.follower_fetched(1, 10, log_end=10) is None  # 1 keeps fetching; 2 went quiet
    clock.advance(2)
    assert state.lagging() == [2]
    assert state.isr_shrink() == (0, 1)


def test_a_follower_fetching_but_behind_leaves_too() -> None:
    clock = ManualClock()
    state = leader(clock, log_end=10)
    state.follower_fetched(1, 10, log_end=10)
    state.follower_fetched(2, 5, log_end=10)
    # The leader's log grows; follower 2 fetches all the time but never reaches the LEO the
    # leader had at its previous fetch, so it is never caught up.
    for step in range(1, 12):
        clock.advance(1000)
        state.follower_fetched(1, 10 + 10 * step, log_end=10 + 10 * step)
        state.follower_fetched(2, 10 * step - 1, log_end=10 + 10 * step)
    assert state.lagging() == [2]
    assert state.isr_shrink() == (0, 1)


def test_only_one_isr_change_is_in_flight_and_a_stale_answer_is_ignored() -> None:
    clock = ManualClock()
    state = leader(clock, log_end=4)
    clock.advance(LAG_MS + 1)
    shrunk = state.isr_shrink()
    assert shrunk == (0,)
    state.pending_isr = shrunk
    assert state.isr_shrink() is None  # one change at a time
    assert not state.isr_changed(2, 6, (0,))  # an older leader epoch's answer
    assert not state.isr_changed(3, 4, (0,))  # an older partition epoch
    assert state.isr == (0, 1, 2)
    assert state.isr_changed(3, 6, (0,))
    assert (state.isr, state.partition_epoch) == ((0,), 6)


def test_a_caught_up_follower_is_proposed_back_into_the_isr() -> None:
    clock = ManualClock()
    state = leader(clock, log_end=20, isr=(0, 1))
    state.follower_fetched(1, 20, log_end=20)
    assert state.advance_hw(20) and state.hw == 20
    # Behind the HW: not yet.
    assert state.follower_fetched(2, 15, log_end=20) is None
    # At the HW (and in this leader's epoch, which started at 20): back in, in replica order.
    assert state.follower_fetched(2, 20, log_end=20) == (0, 1, 2)
    state.pending_isr = (0, 1, 2)
    assert state.follower_fetched(2, 20, log_end=20) is None  # already proposed
    assert state.isr_changed(3, 6, (0, 1, 2))
    assert state.isr == (0, 1, 2) and state.lagging() == []


def test_a_follower_is_not_proposed_before_it_reaches_the_leaders_epoch() -> None:
    # A new leader whose HW (30) is still below its epoch start (50): follower 1 is unknown.
    state = ReplicaState("t-0", 0, high_watermark=30, clock=ManualClock())
    state.lead(3, 5, (0, 1, 2), (0, 1), 50)
    assert not state.advance_hw(50)
    assert state.follower_fetched(2, 40, log_end=50) is None  # past the HW, before the epoch
    assert state.follower_fetched(2, 50, log_end=50) == (0, 1, 2)


def test_the_high_watermark_never_passes_what_the_isr_holds() -> None:
    clock = ManualClock()
    state = leader(clock, log_end=0)
    assert not state.advance_hw(100)  # followers unknown: their LEO -1 holds the HW at 0
    state.follower_fetched(1, 60, log_end=100)
    assert not state.advance_hw(100)  # follower 2 still unknown
    state.follower_fetched(2, 40, log_end=100)
    assert state.advance_hw(100) and state.hw == 40
    state.follower_fetched(2, 90, log_end=100)
    assert state.advance_hw(100) and state.hw == 60  # the slowest ISR member: follower 1
    # Follower 1 falls behind (a truncation on its side): the HW never goes back.
    state.follower_fetched(1, 10, log_end=100)
    assert not state.advance_hw(100) and state.hw == 60


def test_a_pending_expansion_already_holds_the_high_watermark_back() -> None:
    state = leader(ManualClock(), log_end=0, isr=(0, 1))
    state.follower_fetched(1, 30, log_end=30)
    state.follower_fetched(2, 30, log_end=30)
    assert state.advance_hw(30) and state.hw == 30
    state.pending_isr = (0, 1, 2)  # KIP-497: counted before the controller answers
    state.follower_fetched(1, 80, log_end=80)
    state.follower_fetched(2, 50, log_end=80)
    assert state.advance_hw(80) and state.hw == 50


def test_a_follower_does_not_move_its_high_watermark_itself() -> None:
    state = ReplicaState("t-0", 1, high_watermark=7, clock=ManualClock())
    state.follow(3, 0, (0, 1), (0, 1), 5)
    assert state.role is ReplicaRole.FOLLOWER and state.leader_id == 0
    assert not state.advance_hw(100) and state.hw == 7
    with pytest.raises(NotLeaderOrFollowerError):
        state.check_leader(3)


def test_leader_epochs_fence_stale_and_early_requests() -> None:
    state = leader(ManualClock())
    state.check_leader(3)
    state.check_leader(NO_EPOCH)  # a request without an epoch is not fenced
    with pytest.raises(FencedLeaderEpochError):
        state.check_leader(2)
    with pytest.raises(UnknownLeaderEpochError):
        state.check_leader(4)
    state.close()
    with pytest.raises(NotLeaderOrFollowerError):
        state.check_leader(3)
    assert not state.is_leading(3)


def test_a_broker_that_is_not_a_replica_is_refused() -> None:
    state = leader(ManualClock())
    with pytest.raises(NotLeaderOrFollowerError):
        state.follower_fetched(7, 0, log_end=0)


def test_membership_changes_keep_lag_history_and_give_new_isr_members_a_full_period() -> None:
    clock = ManualClock()
    state = leader(clock, log_end=10, isr=(0, 1))
    state.follower_fetched(1, 10, log_end=10)
    clock.advance(LAG_MS - 100)
    # Replica 2 leaves, replica 3 joins the ISR by the controller's word (a reassignment).
    state.set_membership((0, 1, 3), (0, 1, 3), 6)
    assert set(state.followers) == {1, 3}
    clock.advance(200)
    assert state.lagging() == [1]  # 1's history was kept; 3 got a full period from now
    clock.advance(LAG_MS)
    assert state.lagging() == [1, 3]


def test_the_manual_clock_does_not_go_back() -> None:
    with pytest.raises(ValueError):
        ManualClock().advance(-1)
