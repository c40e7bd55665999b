"""The replication rules of one partition replica, without Ray and without I/O (Kafka's
``Partition`` and ``Replica`` state): who leads at which epoch, the ISR, what the leader knows
of each follower, and the high watermark.

The :class:`~actors.partition.PartitionReplica` actor owns the log, the tasks and the calls to
the controller; it asks this state what to do (``isr_expansion``, ``isr_shrink``,
``advance_hw``) and tells it what happened (``lead``, ``follow``, ``follower_fetched``,
``isr_changed``). Time comes from an injected :class:`~actors.clock.Clock`, so the rules are
tested on a :class:`~actors.clock.ManualClock` (``tests/actors/test_replica_state.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from actors.clock import SYSTEM, Clock
from actors.protocol import NO_EPOCH, ReplicaRole
from storage.errors import FencedLeaderEpochError, NotLeaderOrFollowerError, UnknownLeaderEpochError

# Kafka's default replica.lag.time.max.ms.
DEFAULT_LAG_TIME_MAX_MS = 30000


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica state)."""

    leo: int = -1  # unknown until it fetches: an unknown LEO holds the HW back
    caught_up_at: float = 0.0  # monotonic seconds
    last_fetch_at: float = 0.0
    leader_leo_at_last_fetch: int = -1


class ReplicaState:
    """Leadership, membership and the high watermark of one replica, on an injected clock."""

    def __init__(self, name: str, broker_id: int, high_watermark: int = 0, clock: Clock = SYSTEM) -> None:
        self.name = name  # "topic-partition", for error messages
        self.broker_id = broker_id
        self.clock = clock
        self.role = ReplicaRole.OFFLINE
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = 0
        self.leader_id = -1
        self.replicas: tuple[int, ...] = (broker_id,)
        self.isr: tuple[int, ...] = (broker_id,)
        # The ISR change sent to the controller and not answered yet (one at a time).
        self.pending_isr: tuple[int, ...] | None = None
        self.followers: dict[int, FollowerState] = {}
        self.epoch_start_offset = 0
        self.hw = high_watermark
        self.lag_time_max_ms: float = DEFAULT_LAG_TIME_MAX_MS
        self.closed = False

    # -- role changes ---------------------------------------------------------------------

    def lead(
        self, leader_epoch: int, partition_epoch: int, replicas: Iterable[int], isr: Iterable[int], log_end: int
    ) -> None:
        """Become leader at ``leader_epoch``; the epoch starts at ``log_end``. Every follower
        starts unknown (its LEO -1 holds the HW until it fetches)."""
        self.role = ReplicaRole.LEADER
        self.leader_epoch = leader_epoch
        self.leader_id = self.broker_id
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        self.followers = {}
        self.set_membership(replicas, isr, partition_epoch)
        self.epoch_start_offset = log_end

    def follow(
        self, leader_epoch: int, leader_id: int, replicas: Iterable[int], isr: Iterable[int], partition_epoch: int
    ) -> None:
        """Become a follower of ``leader_id`` at ``leader_epoch``."""
        self.role = ReplicaRole.FOLLOWER
        self.leader_epoch = leader_epoch
        self.leader_id = leader_id
        self.replicas, self.isr, self.partition_epoch = tuple(replicas), tuple(isr), partition_epoch
        self.pending_isr = None
        self.followers = {}

    def close(self) -> None:
        """Closed: every later request is NotLeaderOrFollower."""
        self.closed = True
        self.role = ReplicaRole.OFFLINE

    def set_membership(self, replicas: Iterable[int], isr: Iterable[int], partition_epoch: int) -> None:
        """Take the controller's replica set and ISR at ``partition_epoch``."""
        self.replicas, self.isr, self.partition_epoch = tuple(replicas), tuple(isr), partition_epoch
        now = self.clock.monotonic()
        for b in self.replicas:
            # ISR members get a full lag period to show up before they can be dropped.
            if b != self.broker_id and b not in self.followers:
                self.followers[b] = FollowerState(caught_up_at=now if b in self.isr else 0.0)
        for b in list(self.followers):
            if b not in self.replicas:
                del self.followers[b]

    def is_leading(self, epoch: int) -> bool:
        """Still open and leading at ``epoch``."""
        return not self.closed and self.role == ReplicaRole.LEADER and self.leader_epoch == epoch

    def check_leader(self, leader_epoch: int) -> None:
        """Refuse a request that must go to the leader: NotLeaderOrFollowerError when this
        replica does not lead; FencedLeaderEpochError for an older ``leader_epoch`` (the caller
        is behind), UnknownLeaderEpochError for a newer one (this replica is); NO_EPOCH passes."""
        if self.closed or self.role != ReplicaRole.LEADER:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {self.name}")
        if leader_epoch != NO_EPOCH:
            if leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(f"{self.name}: epoch {leader_epoch} < current {self.leader_epoch}")
            if leader_epoch > self.leader_epoch:
                raise UnknownLeaderEpochError(f"{self.name}: epoch {leader_epoch} > current {self.leader_epoch}")

    # -- the ISR --------------------------------------------------------------------------

    def maximal_isr(self) -> set[int]:
        """The ISR the high watermark must respect: KIP-497, while an expansion is in flight
        the new member already counts, so the HW never passes a replica the controller may
        already consider in sync."""
        return set(self.isr) | set(self.pending_isr or ())

    def follower_fetched(self, replica_id: int, offset: int, log_end: int) -> tuple[int, ...] | None:
        """Follower ``replica_id`` fetched at ``offset`` (its LEO) while the leader's log
        ends at ``log_end``: update its lag. Returns the ISR to propose when it may rejoin
        (caught up to the HW and into this leader's epoch, no change in flight), else None.
        NotLeaderOrFollowerError for a broker that is not a replica."""
        state = self.followers.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {self.name} {list(self.replicas)}")
        now = self.clock.monotonic()
        # Kafka's rule: caught up now if it reached our LEO; caught up as of its previous
        # fetch if it reached the LEO we had then.
        if offset >= log_end:
            state.caught_up_at = now
        elif offset >= state.leader_leo_at_last_fetch:
            state.caught_up_at = max(state.caught_up_at, state.last_fetch_at)
        state.leader_leo_at_last_fetch, state.last_fetch_at, state.leo = log_end, now, offset
        if (
            replica_id not in self.maximal_isr()
            and offset >= self.hw
            and offset >= self.epoch_start_offset
            and self.pending_isr is None
        ):
            return tuple(b for b in self.replicas if b in self.isr or b == replica_id)
        return None

    def lagging(self) -> list[int]:
        """The ISR followers not caught up for longer than replica.lag.time.max.ms."""
        lag = self.lag_time_max_ms / 1000
        now = self.clock.monotonic()
        return [
            b
            for b in self.isr
            if b != self.broker_id and now - self.followers.get(b, FollowerState()).caught_up_at > lag
        ]

    def isr_shrink(self) -> tuple[int, ...] | None:
        """The ISR to propose without the lagging followers (None: nothing to drop, not the
        leader, or a change already in flight)."""
        if self.role != ReplicaRole.LEADER or self.pending_isr is not None:
            return None
        out = self.lagging()
        return tuple(b for b in self.isr if b not in out) if out else None

    def isr_changed(self, leader_epoch: int, partition_epoch: int, isr: Iterable[int]) -> bool:
        """The controller's answer to an ISR change: taken when this replica still leads at
        ``leader_epoch`` and ``partition_epoch`` is not older than its own (a stale answer
        changes nothing). Returns whether it was taken."""
        if (
            self.role == ReplicaRole.LEADER
            and leader_epoch == self.leader_epoch
            and partition_epoch >= self.partition_epoch
        ):
            self.set_membership(self.replicas, isr, partition_epoch)
            return True
        return False

    # -- the high watermark ---------------------------------------------------------------

    def advance_hw(self, log_end: int) -> bool:
        """On the leader, move the HW to the smallest LEO in the maximal ISR (the leader's
        own is ``log_end``; an unknown follower's is -1). Never backwards; returns whether it
        moved."""
        if self.role != ReplicaRole.LEADER:
            return False
        hw = log_end
        for b in self.maximal_isr():
            if b != self.broker_id:
                state = self.followers.get(b)
                hw = min(hw, state.leo if state is not None else -1)
        if hw > self.hw:
            self.hw = hw
            return True
        return False
