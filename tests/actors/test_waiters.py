"""actors.broker.waiters.Waiters: the replica's waits on its own state (no Ray)."""

from __future__ import annotations

import asyncio

import pytest

from actors.broker.waiters import Waiters


def run(coro):
    return asyncio.run(coro)


def test_a_predicate_that_holds_returns_at_once_even_with_no_time_left():
    async def scenario():
        waiters = Waiters()
        assert await waiters.wait(lambda: True, 0)
        assert not await waiters.wait(lambda: False, 0)
        assert len(waiters) == 0

    run(scenario())


def test_a_wait_times_out_and_leaves_nothing_behind():
    async def scenario():
        waiters = Waiters()
        assert not await waiters.wait(lambda: False, 0.01)
        assert len(waiters) == 0

    run(scenario())


def test_notify_wakes_only_the_waits_whose_predicate_holds():
    async def scenario():
        waiters = Waiters()
        state = {"hw": 0}
        low = asyncio.create_task(waiters.wait(lambda: state["hw"] >= 1, 30))
        high = asyncio.create_task(waiters.wait(lambda: state["hw"] >= 5, 30))
        await asyncio.sleep(0)  # both are waiting now
        assert len(waiters) == 2
        state["hw"] = 1
        waiters.notify()
        assert await asyncio.wait_for(low, 5)
        await asyncio.sleep(0)
        assert not high.done() and len(waiters) == 1
        state["hw"] = 5
        waiters.notify()
        assert await asyncio.wait_for(high, 5)
        assert len(waiters) == 0

    run(scenario())


def test_a_change_without_a_notify_wakes_nobody():
    async def scenario():
        waiters = Waiters()
        state = {"ready": False}
        task = asyncio.create_task(waiters.wait(lambda: state["ready"], 0.05))
        await asyncio.sleep(0)
        state["ready"] = True  # nobody notified: the wait runs to its timeout
        assert not await task

    run(scenario())


def test_a_predicate_that_raises_fails_its_waiter_not_the_notifier():
    async def scenario():
        waiters = Waiters()
        state = {"fail": False}

        def predicate() -> bool:
            if state["fail"]:
                raise RuntimeError("closed")
            return False

        other = asyncio.create_task(waiters.wait(lambda: state["fail"], 30))
        failing = asyncio.create_task(waiters.wait(predicate, 30))
        await asyncio.sleep(0)
        state["fail"] = True
        waiters.notify()  # does not raise
        with pytest.raises(RuntimeError, match="closed"):
            await failing
        assert await other

    run(scenario())


def test_a_cancelled_wait_is_forgotten():
    async def scenario():
        waiters = Waiters()
        task = asyncio.create_task(waiters.wait(lambda: False, 30))
        await asyncio.sleep(0)
        assert len(waiters) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(waiters) == 0
        waiters.notify()  # nothing left to wake

    run(scenario())
