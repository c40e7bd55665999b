"""What the group state machines hand back to their actor shell (Kafka's ``CoordinatorResult``).

A call of the state machine does not wait and does not write: it returns the answer to give
now, or says that the call waits (:class:`Parked`), plus the answers that calls parked
earlier get now (:class:`Answer`) and the group metadata records to write. The shell parks
and wakes the calls, writes the records and sets its timer to the next deadline.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from actors.group_coordinator.records import Record


class Wait(enum.StrEnum):
    """The kind of call that waits."""

    JOIN = "join"  # a JoinGroup, until the rebalance completes
    SYNC = "sync"  # a follower's SyncGroup, until the leader's SyncGroup brings the assignment


@dataclass(frozen=True, slots=True)
class Parked:
    """The call waits for its :class:`Answer` (same kind, group and member), at most
    ``timeout_ms``; then it gets RebalanceInProgressError with ``timeout_message``."""

    kind: Wait
    group_id: str
    member_id: str
    timeout_ms: int
    timeout_message: str


@dataclass(frozen=True, slots=True)
class Answer:
    """What a parked call returns (a JoinGroupResult or SyncGroupResponse) or raises (a KafkaError)."""

    kind: Wait
    group_id: str
    member_id: str
    result: Any

    @property
    def failed(self) -> bool:
        """The parked call raises ``result``."""
        return isinstance(self.result, BaseException)


@dataclass(slots=True)
class GroupResult:
    """The outcome of one call or timer turn of the group state machine.

    ``response`` is the call's own answer (or a :class:`Parked`); ``answers`` go to calls
    parked earlier (the call's own answer may be among them, when it completed the
    rebalance itself); ``records`` are group metadata records to write, by group; ``rebalances``
    are the groups whose rebalance completed (for the metrics).

    A classic group's records are written in the background (a lost write costs the members a
    rejoin, nothing more). With ``durable`` (a consumer group's: member epochs and
    assignments) the answer waits until they are in ``__consumer_offsets``, as Kafka answers
    only once its records are committed.
    """

    response: Any = None
    answers: list[Answer] = field(default_factory=list)
    records: list[tuple[str, Record]] = field(default_factory=list)
    rebalances: list[str] = field(default_factory=list)
    durable: bool = False

    def add(self, group_id: str, records: list[Record]) -> None:
        """Records of ``group_id`` to write."""
        self.records.extend((group_id, r) for r in records)

    def merge(self, other: GroupResult) -> None:
        """Take ``other``'s answers, records and rebalances (its response is not taken)."""
        self.answers.extend(other.answers)
        self.records.extend(other.records)
        self.rebalances.extend(other.rebalances)
        self.durable = self.durable or other.durable

    def answer(self, kind: Wait, group_id: str, member_id: str, result: Any) -> None:
        """Add an answer to a parked call."""
        self.answers.append(Answer(kind, group_id, member_id, result))


__all__ = ["Answer", "GroupResult", "Parked", "Wait"]
