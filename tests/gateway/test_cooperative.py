"""Cooperative (KIP-429) Kafka-client groups through the gateway.

A group of three members using the ``cooperative-sticky`` assignor reads a 6-partition
topic; a fourth member joins, then one of the first three leaves. After each rebalance every
partition is owned by exactly one member and the load is even, every record (produced while the group is stable) is read once,
and - what makes the protocol cooperative - a member that stays is told to revoke only the
partitions that move away from it, never one it keeps (an eager rebalance revokes
everything first, which this test would catch).

The assignment is the client's own: the gateway and the group coordinator carry the opaque
subscription (with KIP-429's owned partitions) and assignment bytes, and must start the
second rebalance that a member asks for after it revoked what moved. confluent-kafka
(librdkafka's ``cooperative-sticky``) and kafka-python (``CooperativeStickyAssignor``) are
tested; aiokafka 0.14 has no cooperative assignor (only range, round robin and the eager
sticky one), so it takes no part here.
"""

from __future__ import annotations

import pytest

from tests.gateway.test_groups import (
    PARTITIONS,
    PER_PARTITION,
    Member,
    assigned_once,
    members,  # noqa: F401 - fixture
    produce,
    topic,  # noqa: F401 - fixture
)
from tests.helpers import wait_for

COOPERATIVE = "cooperative-sticky"


def balanced(live: list[Member]) -> bool:
    """Every partition owned once, and no member owns two more than another (sticky's promise)."""
    sizes = [len(m.assignment) for m in live]
    return assigned_once(live) and max(sizes) - min(sizes) <= 1


def revoked_since(m: Member, before: dict) -> set[int]:
    """The partitions ``m``'s rebalance listener was told to revoke since ``before`` was taken."""
    return {p for call in m.revoked[before[id(m)][1] :] for p in call}


def settled(live: list[Member], before: dict) -> bool:
    """``live`` owns every partition evenly, and each member that stayed has been told to
    revoke what it lost (kafka-python changes the assignment before it calls the listener)."""
    return balanced(live) and all(
        before[id(m)][0] - set(m.assignment) <= revoked_since(m, before) for m in live if id(m) in before
    )


def settle(live: list[Member], before: dict, what: str) -> None:
    """Wait until ``live`` has settled; on a timeout show what each member reported."""
    try:
        wait_for(lambda: settled(live, before), timeout=60, interval=0.05, what=what)
    except AssertionError:
        for m in live:
            print(m.lib, m.assignment, m.revoked, len(m.records), m.errors[-3:], m.proc.poll())
        raise


def rebalance(cluster, name: str, before_change: list[Member], change, produced: int) -> int:
    """Apply ``change`` (a member joins or leaves; it returns the live members), wait until
    they own every partition evenly, check that the members that stayed revoked only what
    moved away from them, and that the live members read the next records once. Returns the
    records per partition produced so far."""
    before = {id(m): (set(m.assignment), len(m.revoked)) for m in before_change}
    seen = {r for m in before_change for r in m.records}
    live = change()
    settle(live, before, "an even assignment after the rebalance")
    for m in live:
        if id(m) not in before:
            assert m.assignment, "the member that joined owns nothing"
            continue
        owned, revoked = before[id(m)][0], revoked_since(m, before)
        kept = owned & set(m.assignment)
        assert not revoked & kept, f"{m.lib} had {sorted(revoked & kept)} revoked yet kept them"
        assert revoked == owned - set(m.assignment), f"{m.lib} revoked {sorted(revoked)} of {sorted(owned)}"
    return read_new(cluster, name, live, seen, produced)


def read_new(cluster, name: str, live: list[Member], seen: set, produced: int, count: int = 2) -> int:
    """Produce ``count`` records per partition; wait until ``live`` read them all and committed
    (so that the next rebalance moves no partition with uncommitted reads: the members commit
    after reading, not in their revocation listener, and kafka-python calls that listener on
    its own event loop). Returns the records per partition produced so far."""
    produce(cluster, name, count, start=produced)
    wait_for(
        lambda: len({r for m in live for r in m.records} - seen) >= count * PARTITIONS,
        timeout=60,
        what="the records produced read",
    )
    group = f"g-{name}"
    wait_for(
        lambda: all(i.lag == 0 for i in cluster.admin().group_lag(group, [name]).values()),
        timeout=30,
        what="the reads committed",
    )
    return produced + count


@pytest.mark.parametrize("lib", ["confluent-kafka", "kafka-python"])
def test_a_cooperative_group_revokes_only_what_moves(cluster, bootstrap, topic, members, lib):  # noqa: F811
    group = f"g-{topic}"
    members.extend(Member(lib, bootstrap, group, topic, COOPERATIVE) for _ in range(3))
    settle(members, {}, "an even first assignment")
    produced = read_new(cluster, topic, members, set(), 0, PER_PARTITION)

    def join() -> list[Member]:
        members.append(Member(lib, bootstrap, group, topic, COOPERATIVE))
        return list(members)

    def leave() -> list[Member]:
        members[0].leave()
        return members[1:]

    produced = rebalance(cluster, topic, list(members), join, produced)
    produced = rebalance(cluster, topic, list(members), leave, produced)

    everything = [r for m in members for r in m.records]
    assert len(everything) == len(set(everything)) == PARTITIONS * produced, "a record was read twice or never"
    desc = cluster.admin().describe_groups([group])[group]
    assert desc.state == "Stable" and len(desc.members) == 3
