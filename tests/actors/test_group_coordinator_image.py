"""The group coordinator's topic image: a request naming a topic the image lacks sees a topic
created just before it, and the calls to the controller stay one at a time and spaced."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from actors.group_coordinator import GroupCoordinator
from actors.group_coordinator.actor import IMAGE_MIN_AGE_S

NO_METRICS = {"rayqueue.metrics.enabled": False}


class FakeController:
    """The controller's topics; counts the metadata calls and how many ran at once."""

    def __init__(self) -> None:
        self.topics: dict[str, SimpleNamespace] = {}
        self.calls = 0
        self.running = 0
        self.most_at_once = 0

    def create(self, name: str, partitions: int) -> None:
        self.topics[name] = SimpleNamespace(topic_id=f"id-{name}", partitions=list(range(partitions)))

    async def metadata(self) -> SimpleNamespace:
        self.calls += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(0.01)
            return SimpleNamespace(topics=dict(self.topics))
        finally:
            self.running -= 1


def coordinator_with(controller: FakeController) -> GroupCoordinator:
    coordinator = GroupCoordinator("ns", NO_METRICS)
    coordinator._fetch_metadata = controller.metadata
    return coordinator


def test_a_topic_created_just_after_a_refresh_is_seen_by_the_next_request_naming_it() -> None:
    controller = FakeController()
    coordinator = coordinator_with(controller)
    clock = coordinator._clock

    async def go() -> None:
        await coordinator.refresh_image()
        assert coordinator.state.consumer.image.topic("orders") is None
        controller.create("orders", 2)  # well inside IMAGE_MIN_AGE_S of the last refresh
        await coordinator.refresh_image(IMAGE_MIN_AGE_S, clock.monotonic())
        seen = coordinator.state.consumer.image.topic("orders")
        assert seen is not None and seen.partitions == 2

    asyncio.run(go())
    assert controller.calls == 2


def test_requests_waiting_for_a_fresh_image_share_one_call_at_a_time() -> None:
    controller = FakeController()
    coordinator = coordinator_with(controller)
    clock = coordinator._clock

    async def go() -> None:
        await coordinator.refresh_image()
        controller.create("orders", 1)
        asked_at = clock.monotonic()
        await asyncio.gather(*(coordinator.refresh_image(IMAGE_MIN_AGE_S, asked_at) for _ in range(50)))
        assert coordinator.state.consumer.image.topic("orders") is not None
        # Without asked_at an image younger than the minimum age will do: no call.
        await coordinator.refresh_image(IMAGE_MIN_AGE_S)

    asyncio.run(go())
    assert controller.most_at_once == 1 and controller.calls == 2
