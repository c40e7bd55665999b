"""The pure piece of the rebalance benchmark (scripts/bench_rebalance.py): when a join is settled.
No Ray, no JVM."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import bench_rebalance as br  # noqa: E402


def members(*owned: set[int]) -> list:
    return [SimpleNamespace(owned=frozenset(o)) for o in owned]


def test_a_join_is_settled_when_every_partition_has_one_owner_and_shares_are_even():
    every = set(range(br.PARTITIONS))
    assert br._settled(members({0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}))
    assert not br._settled(members(every - {0}, set()))  # a member without partitions
    assert not br._settled(members({0, 1, 2, 3, 4, 5}, {6, 7, 8}, {9, 10, 11}))  # uneven
    assert not br._settled(members({0, 1, 2, 3, 4, 5}, {5, 6, 7, 8, 9, 10, 11}))  # 5 twice, 12 in all
    assert not br._settled(members({0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10}))  # 11 unowned
