"""The server-side assignors of KIP-848's consumer groups: ``uniform`` and ``range``.

They compute a group's target assignment on the coordinator (Kafka's
``ConsumerGroupPartitionAssignor``s, chosen by ``group.consumer.assignors`` and the members'
``group.remote.assignor``). Input: every member's subscribed topic ids and its current
target, and each subscribed topic's partition count; output: member id -> topic id ->
partitions, every partition of a subscribed topic given to exactly one member that
subscribes to it.

- ``uniform`` (Kafka's UniformAssignor): as balanced as the subscriptions allow and sticky:
  a member keeps what it had up to its share, so a member joining or leaving moves only the
  partitions that must move.
- ``range`` (Kafka's RangeAssignor): per topic, the members subscribing to it (static members
  first, by instance id, then the others by member id) get contiguous ranges, the first ones
  one partition more. Members subscribing to the same topics get the same partition numbers
  of each topic, which co-partitioned topics need.

Pure functions, no clock, deterministic (so that a test can name the exact result).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from actors.group_coordinator.consumer_group import Assignment


class PartitionAssignorError(Exception):
    """An assignment could not be computed (a coordinator bug: every subscribed topic is known)."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member as an assignor sees it."""

    topic_ids: frozenset[str]
    instance_id: str | None = None
    rack_id: str | None = None
    current: Assignment = field(default_factory=dict)


def _sort_key(members: Mapping[str, MemberSpec]):
    def key(member_id: str) -> tuple:
        instance = members[member_id].instance_id
        return (0, instance, member_id) if instance is not None else (1, "", member_id)

    return key


class RangeAssignor:
    """Contiguous ranges per topic (see the module docstring)."""

    name = "range"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, Assignment]:
        """The target assignment."""
        order = sorted(members, key=_sort_key(members))
        out: dict[str, dict[str, frozenset[int]]] = {m: {} for m in members}
        for topic_id in sorted({t for spec in members.values() for t in spec.topic_ids}):
            if topic_id not in topics:
                raise PartitionAssignorError(f"members subscribe to topic {topic_id}, which has no metadata")
            subscribers = [m for m in order if topic_id in members[m].topic_ids]
            count = topics[topic_id]
            quota, extra = divmod(count, len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                size = quota + (1 if i < extra else 0)
                if size:
                    out[member_id][topic_id] = frozenset(range(start, start + size))
                start += size
        return out


class UniformAssignor:
    """Balanced and sticky (see the module docstring)."""

    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, Assignment]:
        """The target assignment."""
        if not members:
            return {}
        subscribed = {t for spec in members.values() for t in spec.topic_ids}
        missing = subscribed - set(topics)
        if missing:
            raise PartitionAssignorError(f"members subscribe to topics {sorted(missing)}, which have no metadata")
        if len({spec.topic_ids for spec in members.values()}) == 1:
            return self._homogeneous(members, topics)
        return self._heterogeneous(members, topics)

    @staticmethod
    def _kept(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, list[tuple[str, int]]]:
        """Each member's current partitions that are still valid for it (subscribed, existing,
        and not claimed by a member earlier in id order), in a stable order."""
        claimed: set[tuple[str, int]] = set()
        kept: dict[str, list[tuple[str, int]]] = {}
        for member_id in sorted(members):
            spec = members[member_id]
            mine = []
            for topic_id in sorted(spec.current):
                if topic_id not in spec.topic_ids:
                    continue
                for p in sorted(spec.current[topic_id]):
                    tp = (topic_id, p)
                    if p < topics.get(topic_id, 0) and tp not in claimed:
                        claimed.add(tp)
                        mine.append(tp)
            kept[member_id] = mine
        return kept

    def _homogeneous(self, members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, Assignment]:
        topic_ids = sorted(next(iter(members.values())).topic_ids)
        total = sum(topics[t] for t in topic_ids)
        quota, extra = divmod(total, len(members))
        kept = self._kept(members, topics)
        # The members holding the most get the extra partitions: fewer partitions move.
        order = sorted(members, key=lambda m: (-len(kept[m]), m))
        quotas = {m: quota + (1 if i < extra else 0) for i, m in enumerate(order)}
        result: dict[str, list[tuple[str, int]]] = {}
        held: set[tuple[str, int]] = set()
        for m in order:
            result[m] = kept[m][: quotas[m]]
            held.update(result[m])
        free = [(t, p) for t in topic_ids for p in range(topics[t]) if (t, p) not in held]
        i = 0
        for m in order:
            need = quotas[m] - len(result[m])
            result[m].extend(free[i : i + need])
            i += need
        if i < len(free):
            raise PartitionAssignorError("partitions were left unassigned")
        return {m: _as_assignment(tps) for m, tps in result.items()}

    def _heterogeneous(self, members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, Assignment]:
        kept = self._kept(members, topics)
        result = {m: list(tps) for m, tps in kept.items()}
        owner = {tp: m for m, tps in result.items() for tp in tps}
        subscribers: dict[str, list[str]] = {}
        for m in sorted(members):
            for t in members[m].topic_ids:
                subscribers.setdefault(t, []).append(m)
        # Free partitions, the most constrained (fewest subscribers) first, each to the least
        # loaded member that subscribes to its topic.
        free = sorted(
            ((t, p) for t in subscribers for p in range(topics[t]) if (t, p) not in owner),
            key=lambda tp: (len(subscribers[tp[0]]), tp),
        )
        for tp in free:
            m = min(subscribers[tp[0]], key=lambda c: (len(result[c]), c))
            result[m].append(tp)
            owner[tp] = m
        # Then even out: move a partition from a member to a subscriber of its topic that has
        # at least two fewer, until no such move is left (each move lowers the spread).
        moved = True
        limit = 4 * (len(owner) + 1) * max(1, len(members))
        while moved and limit > 0:
            moved = False
            for m in sorted(result, key=lambda c: (-len(result[c]), c)):
                for tp in sorted(result[m], reverse=True):
                    target = min(subscribers[tp[0]], key=lambda c: (len(result[c]), c))
                    if len(result[target]) + 1 < len(result[m]):
                        result[m].remove(tp)
                        result[target].append(tp)
                        moved = True
                        limit -= 1
                        break
                if moved:
                    break
        return {m: _as_assignment(tps) for m, tps in result.items()}


def _as_assignment(tps: list[tuple[str, int]]) -> Assignment:
    out: dict[str, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


SERVER_ASSIGNORS = {a.name: a for a in (UniformAssignor(), RangeAssignor())}

__all__ = ["SERVER_ASSIGNORS", "MemberSpec", "PartitionAssignorError", "RangeAssignor", "UniformAssignor"]
