"""The replication rules of one partition replica, without Ray and without I/O (Kafka's
``Partition`` and ``Replica`` state): who leads at which epoch, the ISR, what the leader knows
of each follower, and the high watermark.

The :class:`~actors.broker.partition.PartitionReplica` owns the log, the tasks and the calls to
the controller; it asks this state what to do (``isr_expansion``, ``isr_shrink``,
``advance_hw``) and tells it what happened (``lead``, ``follow``, ``follower_fetched``,
``isr_changed``). Time comes from an injected :class:`~actors.clock.Clock`, so the rules are
tested on a :class:`~actors.clock.ManualClock` (``tests/actors/test_replica_state.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from actors.broker.isr import FollowerState, IsrTracker
from actors.clock import SYSTEM, Clock
from actors.protocol import NO_EPOCH, ReplicaRole
from storage.errors import FencedLeaderEpochError, NotLeaderOrFollowerError, UnknownLeaderEpochError

# Kafka's default replica.lag.time.max.ms.
DEFAULT_LAG_TIME_MAX_MS = 30000


class ReplicaState:
    """Leadership, membership and the high watermark of one replica, on an injected clock.
    What the leader knows of its followers, and the ISR rules over it, are its
    :class:`~actors.broker.isr.IsrTracker`'s."""

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
        self.tracker = IsrTracker(broker_id, clock, DEFAULT_LAG_TIME_MAX_MS)
        self.epoch_start_offset = 0
        self.hw = high_watermark
        self.closed = False

    @property
    def followers(self) -> Mapping[int, FollowerState]:
        """What the leader knows of each follower, by broker id (empty on a follower)."""
        return self.tracker.followers

    @property
    def lag_time_max_ms(self) -> float:
        """``replica.lag.time.max.ms``: an ISR follower not caught up for longer leaves the ISR."""
        return self.tracker.lag_time_max_ms

    @lag_time_max_ms.setter
    def lag_time_max_ms(self, value: float) -> None:
        self.tracker.lag_time_max_ms = value

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
        self.tracker.forget()
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
        self.tracker.forget()

    def close(self) -> None:
        """Closed: every later request is NotLeaderOrFollower."""
        self.closed = True
        self.role = ReplicaRole.OFFLINE

    def set_membership(self, replicas: Iterable[int], isr: Iterable[int], partition_epoch: int) -> None:
        """Take the controller's replica set and ISR at ``partition_epoch``."""
        self.replicas, self.isr, self.partition_epoch = tuple(replicas), tuple(isr), partition_epoch
        # ISR members get a full lag period to show up before they can be dropped.
        self.tracker.set_membership(self.replicas, self.isr)

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
        if self.tracker.on_fetch(replica_id, offset, log_end) is None:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {self.name} {list(self.replicas)}")
        maximal = self.maximal_isr()
        if self.pending_isr is None and self.tracker.may_join(replica_id, maximal, self.hw, self.epoch_start_offset):
            return tuple(b for b in self.replicas if b in self.isr or b == replica_id)
        return None

    def lagging(self) -> list[int]:
        """The ISR followers not caught up for longer than replica.lag.time.max.ms."""
        return self.tracker.out_of_sync(self.isr)

    def isr_shrink(self) -> tuple[int, ...] | None:
        """The ISR to propose without the lagging followers (None: nothing to drop, not the
        leader, or a change already in flight)."""
        if self.role != ReplicaRole.LEADER or self.pending_isr is not None:
            return None
        shrunk = self.tracker.shrunk_isr(self.isr)
        return None if shrunk is None else tuple(shrunk)

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
        hw = self.tracker.high_watermark(log_end, self.maximal_isr())
        if hw > self.hw:
            self.hw = hw
            return True
        return False
