"""Partition assignors for consumer groups: pure logic, no Ray.

The group coordinator runs these server-side once every member has joined. An assignor
is any object with a ``name``, a ``protocol`` ("eager" or "cooperative", eager when
absent) and ``assign(members_subscriptions, partitions_per_topic, current_assignment)``:

- ``members_subscriptions``: member id -> the topics it subscribes to;
- ``partitions_per_topic``: topic -> partition count (topics nobody subscribes to may be there);
- ``current_assignment``: member id -> partitions it owns now (empty for new members);
- returns member id -> list of TopicPartition (every member present, possibly empty).

Built in, with Kafka's semantics and names: ``range`` (per topic, contiguous ranges in
member-id order), ``roundrobin`` (all partitions sorted, dealt to sorted members),
``sticky`` (balanced, keeping as many current partitions as possible) and
``cooperative-sticky`` (sticky's target, but a partition that changes owner is only
given to its new owner in a follow-up rebalance, after the old owner revoked it).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from actors.types import TopicPartition

EAGER = "eager"
COOPERATIVE = "cooperative"

Subscriptions = Mapping[str, Sequence[str]]
Assignment = dict[str, list[TopicPartition]]


@runtime_checkable
class PartitionAssignor(Protocol):
    """What the coordinator needs from an assignor (built in or user supplied)."""

    name: str

    def assign(
        self,
        members_subscriptions: Subscriptions,
        partitions_per_topic: Mapping[str, int],
        current_assignment: Mapping[str, Sequence[TopicPartition]],
    ) -> Assignment:
        """Map every member to the partitions it should own."""
        ...


def protocol_of(assignor: Any) -> str:
    """The rebalance protocol an assignor supports ("eager" unless it says otherwise)."""
    return getattr(assignor, "protocol", EAGER)


def _subscribed_partitions(subs: Subscriptions, partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    topics = sorted({t for topics in subs.values() for t in topics if t in partitions_per_topic})
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]


class RangeAssignor:
    """Kafka's RangeAssignor: for each topic, members (sorted) get contiguous ranges; the
    first ``partitions % members`` get one extra."""

    name = "range"
    protocol = EAGER

    def assign(
        self,
        members_subscriptions: Subscriptions,
        partitions_per_topic: Mapping[str, int],
        current_assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> Assignment:
        """Range assignment, topic by topic."""
        out: Assignment = {m: [] for m in members_subscriptions}
        topics = sorted({t for ts in members_subscriptions.values() for t in ts if t in partitions_per_topic})
        for topic in topics:
            members = sorted(m for m, ts in members_subscriptions.items() if topic in ts)
            n = partitions_per_topic[topic]
            per, extra = divmod(n, len(members))
            start = 0
            for i, member in enumerate(members):
                length = per + (1 if i < extra else 0)
                out[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return out


class RoundRobinAssignor:
    """Kafka's RoundRobinAssignor: sorted partitions dealt to sorted members in turn,
    skipping members not subscribed to a partition's topic."""

    name = "roundrobin"
    protocol = EAGER

    def assign(
        self,
        members_subscriptions: Subscriptions,
        partitions_per_topic: Mapping[str, int],
        current_assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> Assignment:
        """Round-robin assignment over all subscribed partitions."""
        out: Assignment = {m: [] for m in members_subscriptions}
        members = sorted(members_subscriptions)
        if not members:
            return out
        subs = {m: set(members_subscriptions[m]) for m in members}
        i = 0
        for tp in _subscribed_partitions(members_subscriptions, partitions_per_topic):
            for _ in range(len(members)):
                member = members[i % len(members)]
                i += 1
                if tp.topic in subs[member]:
                    out[member].append(tp)
                    break
        return out


class StickyAssignor:
    """Kafka's StickyAssignor: as balanced as the subscriptions allow, and moving as few
    partitions as possible from their current owners."""

    name = "sticky"
    protocol = EAGER

    def assign(
        self,
        members_subscriptions: Subscriptions,
        partitions_per_topic: Mapping[str, int],
        current_assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> Assignment:
        """Sticky balanced assignment."""
        return sticky_assign(members_subscriptions, partitions_per_topic, current_assignment or {})


class CooperativeStickyAssignor:
    """Kafka's CooperativeStickyAssignor: sticky's target, minus partitions another member
    still owns. Their owners see them gone from their assignment, revoke them and rejoin;
    the follow-up rebalance hands them to the new owner. Partitions that do not move stay
    owned (and consumed) throughout."""

    name = "cooperative-sticky"
    protocol = COOPERATIVE

    def assign(
        self,
        members_subscriptions: Subscriptions,
        partitions_per_topic: Mapping[str, int],
        current_assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> Assignment:
        """First-round cooperative assignment (moving partitions withheld)."""
        current = current_assignment or {}
        target = sticky_assign(members_subscriptions, partitions_per_topic, current)
        return withhold_moving(target, current)


def withhold_moving(
    target: Mapping[str, Sequence[TopicPartition]], owned: Mapping[str, Sequence[TopicPartition]]
) -> Assignment:
    """Remove from each member's target the partitions another present member still owns."""
    owner = {tp: m for m, tps in owned.items() if m in target for tp in tps}
    return {m: [tp for tp in tps if owner.get(tp, m) == m] for m, tps in target.items()}


def _valid_current(
    subs: Subscriptions, all_partitions: set[TopicPartition], current: Mapping[str, Sequence[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    """Current ownership that can be kept: the member is present, still subscribes to the
    topic, the partition still exists and nobody earlier claimed it (members in sorted order)."""
    taken: set[TopicPartition] = set()
    kept: dict[str, list[TopicPartition]] = {m: [] for m in subs}
    for member in sorted(subs):
        topics = set(subs[member])
        for tp in sorted(current.get(member, ())):
            if tp in all_partitions and tp.topic in topics and tp not in taken:
                taken.add(tp)
                kept[member].append(tp)
    return kept


def sticky_assign(
    subs: Subscriptions, partitions_per_topic: Mapping[str, int], current: Mapping[str, Sequence[TopicPartition]]
) -> Assignment:
    """The sticky target: balanced (counts differ by at most one when every member has the
    same subscription), keeping as many current assignments as that allows."""
    members = sorted(subs)
    if not members:
        return {}
    partitions = _subscribed_partitions(subs, partitions_per_topic)
    kept = _valid_current(subs, set(partitions), current)
    same = len({frozenset(subs[m]) for m in members}) == 1
    if same:
        return _constrained(members, partitions, kept)
    return _general(subs, members, partitions, kept)


def _constrained(
    members: list[str], partitions: list[TopicPartition], kept: dict[str, list[TopicPartition]]
) -> Assignment:
    """Identical subscriptions (Kafka's constrained algorithm): exactly ``P % N`` members get
    ``ceil(P/N)``, the rest ``floor(P/N)``; the members that own most keep the larger quota,
    which revokes the fewest partitions."""
    n, p = len(members), len(partitions)
    low, extra = divmod(p, n)
    # Biggest current owners first: they keep the `extra` larger quotas.
    order = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = {m: low + (1 if i < extra else 0) for i, m in enumerate(order)}
    out: Assignment = {}
    assigned: set[TopicPartition] = set()
    for m in members:
        keep = kept[m][: quota[m]]
        out[m] = list(keep)
        assigned.update(keep)
    free = [tp for tp in partitions if tp not in assigned]
    it = iter(free)
    for m in order:
        need = quota[m] - len(out[m])
        for _ in range(need):
            out[m].append(next(it))
    for m in members:
        out[m].sort()
    return out


def _general(
    subs: Subscriptions, members: list[str], partitions: list[TopicPartition], kept: dict[str, list[TopicPartition]]
) -> Assignment:
    """Different subscriptions: keep current ownership, give each free partition to the
    least loaded eligible member, then move partitions from a member to an eligible one
    with at least two fewer until no such move exists (each move lowers the imbalance)."""
    topics = {m: set(subs[m]) for m in members}
    out: Assignment = {m: list(kept[m]) for m in members}
    owner = {tp: m for m, tps in out.items() for tp in tps}
    eligible = {tp: [m for m in members if tp.topic in topics[m]] for tp in partitions}
    # Partitions with the fewest candidates first, so constrained ones are placed while there is room.
    for tp in sorted((tp for tp in partitions if tp not in owner), key=lambda tp: (len(eligible[tp]), tp)):
        best = min(eligible[tp], key=lambda m: (len(out[m]), m))
        out[best].append(tp)
        owner[tp] = best
    moved = True
    while moved:
        moved = False
        for src in sorted(members, key=lambda m: (-len(out[m]), m)):
            for tp in sorted(out[src], reverse=True):
                dst = min(eligible[tp], key=lambda m: (len(out[m]), m))
                if len(out[dst]) + 1 < len(out[src]):
                    out[src].remove(tp)
                    out[dst].append(tp)
                    moved = True
                    break
            if moved:
                break
    for m in members:
        out[m].sort()
    return out


BUILTIN_ASSIGNORS: dict[str, Any] = {
    a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor())
}


def lookup_assignor(name: str, supplied: Mapping[str, Any] | None = None) -> Any:
    """The assignor called ``name``: a user-supplied one (shipped with the join) or a built-in."""
    if supplied and name in supplied:
        return supplied[name]
    try:
        return BUILTIN_ASSIGNORS[name]
    except KeyError:
        raise KeyError(f"unknown partition assignor {name!r}; built in: {sorted(BUILTIN_ASSIGNORS)}") from None


def minimum_moves(previous_counts: Sequence[int], total_partitions: int, members: int) -> int:
    """Fewest partitions that must change owner to balance identical subscriptions, given how
    many valid partitions each surviving member owned (used by tests and the benchmark)."""
    low, extra = divmod(total_partitions, members)
    caps = [low + 1] * extra + [low] * (members - extra)
    counts = heapq.nlargest(len(previous_counts), previous_counts)
    return sum(max(0, c - cap) for c, cap in zip(counts, caps, strict=False))


__all__ = [
    "BUILTIN_ASSIGNORS",
    "COOPERATIVE",
    "CooperativeStickyAssignor",
    "EAGER",
    "PartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "lookup_assignor",
    "minimum_moves",
    "protocol_of",
    "sticky_assign",
    "withhold_moving",
]
