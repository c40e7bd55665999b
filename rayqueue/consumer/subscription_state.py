"""What a consumer reads and where it stands (Kafka's SubscriptionState).

The subscription (topic names or a regex, and the rebalance listener) or the partitions the
application assigned itself; per assigned partition its position (the next offset to hand
out), whether it is paused, and the offsets its last fetch reported. The Consumer, its
coordinator and its Fetcher all read and move positions here: the coordinator replaces the
assignment and seeks to committed offsets, the Fetcher advances positions as it hands records
out and resets them (``auto.offset.reset``).

A seek bumps the partition's ``seek_generation``: whatever was fetched, or is being fetched,
for an older generation is dropped by the Fetcher, which notices on its next step.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from actors.types import TopicPartition
from rayqueue.errors import IllegalStateError, KafkaError


class ConsumerRebalanceListener:
    """Callbacks around rebalances; they run inside ``poll()`` in the application's thread.

    ``on_partitions_revoked`` is the place to commit what was processed (the partitions
    are still owned); ``on_partitions_lost`` is called instead when the member was already
    fenced out (its commits would fail). By default "lost" is handled as "revoked".
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions about to be taken away."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Partitions newly given to this consumer (before their positions are looked up)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Partitions that already belong to someone else."""
        self.on_partitions_revoked(lost)


class SubscriptionType(enum.Enum):
    """How the assignment is chosen (Kafka's SubscriptionState.SubscriptionType)."""

    NONE = "none"
    AUTO_TOPICS = "topics"  # subscribe(names): the group assigns
    AUTO_PATTERN = "pattern"  # subscribe(regex): the group assigns
    USER_ASSIGNED = "assigned"  # assign(partitions)


@dataclass(slots=True)
class TopicPartitionState:
    """One assigned partition (Kafka's TopicPartitionState)."""

    position: int | None = None  # next offset to hand out; None until reset or seeked
    paused: bool = False
    seek_generation: int = 0  # bumped by every seek
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1


class SubscriptionState:
    """The subscription or manual assignment of one consumer, and its partitions' positions."""

    def __init__(self, auto_offset_reset: str = "latest") -> None:
        self.reset_strategy = auto_offset_reset  # earliest, latest or none
        self.subscription_type = SubscriptionType.NONE
        self.topics: list[str] = []
        self.pattern: str | None = None
        self.listener: ConsumerRebalanceListener | None = None
        self.assignment: dict[TopicPartition, TopicPartitionState] = {}

    # -- subscription ---------------------------------------------------------------------

    @property
    def subscribed(self) -> bool:
        """Whether the group chooses the assignment (subscribe rather than assign)."""
        return self.subscription_type in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)

    def subscribe(self, topics: Iterable[str], pattern: str | None, listener: ConsumerRebalanceListener | None) -> bool:
        """Subscribe to topic names or a regex; True when that changed the subscription."""
        if self.subscription_type is SubscriptionType.USER_ASSIGNED and self.assignment:
            raise IllegalStateError("subscribe() after assign(); call unsubscribe() first")
        names = sorted(set(topics))
        changed = names != self.topics or pattern != self.pattern
        self.topics, self.pattern, self.listener = names, pattern, listener
        self.subscription_type = SubscriptionType.AUTO_PATTERN if pattern is not None else SubscriptionType.AUTO_TOPICS
        return changed

    def unsubscribe(self) -> None:
        """Forget the subscription and every assigned partition."""
        self.subscription_type = SubscriptionType.NONE
        self.topics, self.pattern, self.listener = [], None, None
        self.assignment = {}

    def subscription(self) -> set[str]:
        """The subscribed topic names (a regex subscription shows what it matched)."""
        if not self.subscribed:
            return set()
        return set(self.topics) | {tp.topic for tp in self.assignment}

    # -- assignment -----------------------------------------------------------------------

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (kept ones keep their position)."""
        if self.subscribed:
            raise IllegalStateError("assign() while subscribed; call unsubscribe() first")
        self.subscription_type = SubscriptionType.USER_ASSIGNED
        self._set_assignment(partitions)

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment (kept partitions keep their position)."""
        self._set_assignment(sorted(partitions))

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        old = self.assignment
        self.assignment = {tp: old.get(tp) or TopicPartitionState() for tp in partitions}

    def assigned_partitions(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer."""
        return set(self.assignment)

    def state(self, tp: TopicPartition) -> TopicPartitionState:
        """The state of an assigned partition; KafkaError for any other."""
        try:
            return self.assignment[tp]
        except KeyError:
            raise KafkaError(f"{tp} is not assigned to this consumer") from None

    # -- positions ------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Hand out ``tp``'s records from ``offset`` on; what was fetched before is dropped."""
        state = self.state(tp)
        state.position = offset
        state.seek_generation += 1

    def has_position(self, tp: TopicPartition) -> bool:
        """Whether an assigned partition has a position (not waiting for a reset or a commit)."""
        return self.state(tp).position is not None

    def missing_positions(self, partitions: Iterable[TopicPartition] | None = None) -> list[TopicPartition]:
        """Those of ``partitions`` (all assigned by default) that have no position yet."""
        assignment = self.assignment
        return [tp for tp in (assignment if partitions is None else partitions) if assignment[tp].position is None]

    def positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The positions of those of ``partitions`` that are assigned and have one.

        Exact between polls and between the fetched chunks an iteration takes; inside a chunk
        it is the Fetcher that knows (``Fetcher.positions``).
        """
        assignment = self.assignment
        out = {}
        for tp in partitions:
            state = assignment.get(tp)
            if state is not None and state.position is not None:
                out[tp] = state.position
        return out

    # -- pausing --------------------------------------------------------------------------

    def pause(self, tp: TopicPartition) -> None:
        """Stop fetching and handing out ``tp`` until resumed."""
        self.state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        """Fetch and hand out ``tp`` again."""
        self.state(tp).paused = False

    def paused_partitions(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {tp for tp, s in self.assignment.items() if s.paused}


__all__ = [
    "ConsumerRebalanceListener",
    "SubscriptionState",
    "SubscriptionType",
    "TopicPartitionState",
]
