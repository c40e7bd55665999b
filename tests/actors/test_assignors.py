"""Assignor properties (pure logic, no Ray): balance, single ownership, stickiness."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.assignors import (
    BUILTIN_ASSIGNORS,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    lookup_assignor,
    minimum_moves,
)
from actors.types import TopicPartition as TP

topic_counts = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 12), min_size=1)
member_names = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8, unique=True)


def _owners(assignment):
    seen = {}
    for m, tps in assignment.items():
        for tp in tps:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {m}"
            seen[tp] = m
    return seen


def _all(counts, topics):
    return {TP(t, p) for t in topics for p in range(counts[t])}


def test_range_matches_kafka_example():
    # Kafka's javadoc: C0, C1 on t0, t1 with 3 partitions each.
    out = RangeAssignor().assign({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3}, {})
    assert out["C0"] == [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)]
    assert out["C1"] == [TP("t0", 2), TP("t1", 2)]


def test_roundrobin_matches_kafka_example():
    out = RoundRobinAssignor().assign({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3}, {})
    assert out["C0"] == [TP("t0", 0), TP("t0", 2), TP("t1", 1)]
    assert out["C1"] == [TP("t0", 1), TP("t1", 0), TP("t1", 2)]


@settings(max_examples=200, deadline=None)
@given(counts=topic_counts, members=member_names, data=st.data())
def test_every_assignor_gives_each_subscribed_partition_exactly_one_owner(counts, members, data):
    topics = sorted(counts)
    subs = {m: data.draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)) for m in members}
    for assignor in BUILTIN_ASSIGNORS.values():
        out = assignor.assign(subs, counts, {})
        owners = _owners(out)
        assert set(out) == set(members)
        wanted = {tp for m in members for t in subs[m] for tp in _all(counts, [t])}
        assert set(owners) == wanted, assignor.name
        for m, tps in out.items():
            assert all(tp.topic in subs[m] for tp in tps)


@settings(max_examples=200, deadline=None)
@given(counts=topic_counts, members=member_names)
def test_identical_subscriptions_are_balanced(counts, members):
    subs = {m: sorted(counts) for m in members}
    for name in ("roundrobin", "sticky", "cooperative-sticky"):
        out = lookup_assignor(name).assign(subs, counts, {})
        sizes = [len(v) for v in out.values()]
        assert max(sizes) - min(sizes) <= 1, name


@st.composite
def rebalance_case(draw):
    """A valid previous assignment, then a membership change (some leave, some join)."""
    counts = draw(topic_counts)
    topics = sorted(counts)
    before = draw(member_names)
    partitions = sorted(_all(counts, topics))
    previous = {m: [] for m in before}
    for tp in partitions:
        previous[draw(st.sampled_from(before))].append(tp)
    survivors = draw(st.lists(st.sampled_from(before), unique=True))
    joiners = draw(st.lists(st.sampled_from([f"n{i}" for i in range(4)]), unique=True))
    after = survivors + joiners
    if not after:
        after = ["n0"]
    # Partition counts may grow (a new partition is free to place).
    grown = {t: c + draw(st.integers(0, 2)) for t, c in counts.items()}
    return grown, topics, previous, after


@settings(max_examples=300, deadline=None)
@given(case=rebalance_case())
def test_sticky_moves_the_minimum_number_of_partitions(case):
    counts, topics, previous, members = case
    subs = {m: topics for m in members}
    current = {m: previous.get(m, []) for m in members}
    out = StickyAssignor().assign(subs, counts, current)
    sizes = [len(v) for v in out.values()]
    assert max(sizes) - min(sizes) <= 1
    _owners(out)
    moved = sum(1 for m in members for tp in current[m] if tp not in out[m])
    total = sum(counts.values())
    assert moved == minimum_moves([len(current[m]) for m in members], total, len(members))


@settings(max_examples=300, deadline=None)
@given(case=rebalance_case())
def test_cooperative_sticky_keeps_unaffected_partitions_and_converges(case):
    counts, topics, previous, members = case
    subs = {m: topics for m in members}
    owned = {m: list(previous.get(m, [])) for m in members}
    target = StickyAssignor().assign(subs, counts, owned)
    first = CooperativeStickyAssignor().assign(subs, counts, owned)
    _owners(first)
    for m in members:
        # Nothing a member keeps in the target is taken away in the first round ...
        assert {tp for tp in owned[m] if tp in target[m]} <= set(first[m])
        # ... and nothing another member still owns is handed out.
        others = {tp for o in members if o != m for tp in owned[o]}
        assert not (set(first[m]) - set(owned[m])) & others
    # The owners revoke what they lost; the follow-up round reaches the sticky target.
    second = CooperativeStickyAssignor().assign(subs, counts, {m: first[m] for m in members})
    _owners(second)
    for m in members:
        assert set(first[m]) <= set(second[m])  # the follow-up round only adds
    sizes = [len(v) for v in second.values()]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == sum(counts.values())
    moved = sum(1 for m in members for tp in owned[m] if tp not in second[m])
    assert moved == minimum_moves([len(owned[m]) for m in members], sum(counts.values()), len(members))


@settings(max_examples=200, deadline=None)
@given(counts=topic_counts, members=member_names, data=st.data())
def test_sticky_with_different_subscriptions_cannot_improve_by_one_move(counts, members, data):
    topics = sorted(counts)
    subs = {m: data.draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)) for m in members}
    out = StickyAssignor().assign(subs, counts, {})
    _owners(out)
    for src, tps in out.items():
        for tp in tps:
            for dst in members:
                if tp.topic in subs[dst]:
                    assert len(out[dst]) + 1 >= len(out[src])


def test_user_supplied_assignor_is_looked_up_by_name():
    class Everything:
        name = "all-to-first"

        def assign(self, subs, counts, current):
            first = sorted(subs)[0]
            out = {m: [] for m in subs}
            out[first] = [TP(t, p) for t in sorted(counts) for p in range(counts[t])]
            return out

    mine = Everything()
    assert lookup_assignor("all-to-first", {mine.name: mine}) is mine
    assert lookup_assignor("range") is BUILTIN_ASSIGNORS["range"]
