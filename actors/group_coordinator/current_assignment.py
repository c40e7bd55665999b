"""Incremental reconciliation of one member towards its target (Kafka's ``CurrentAssignmentBuilder``).

A member moves to the target assignment in steps, each decided on one of its heartbeats:

- partitions it holds that are no longer in its target must be revoked first: it stays at its
  epoch in UNREVOKED_PARTITIONS until it stops reporting them as owned, then moves on;
- partitions of its target that another member still owns (their partition epoch is set) are
  withheld: it moves to the target epoch in UNRELEASED_PARTITIONS and gets them on a later
  heartbeat, once their old owner has revoked them;
- otherwise it is STABLE at the target epoch with its whole target.

So a partition never has two owners: it is handed to its new owner only after the old one
revoked it. Each partition the member gets is stamped with the epoch it was assigned at
(Kafka 4.4's assignment epochs, which let a commit from the previous epoch through for
partitions that did not move). Partitions of topics the member no longer subscribes to are
revoked at once, without waiting for a new target. Pure functions over immutable members.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping

from actors.group_coordinator.consumer_group import (
    Assignment,
    ConsumerGroupMember,
    EpochPartitions,
    MemberState,
)
from storage.errors import FencedMemberEpochError

# topic id -> partitions, as a heartbeat reports what the member owns (None: not reported)
Owned = Mapping[str, Collection[int]]


def owns_any(owned: Owned | None, partitions: EpochPartitions) -> bool:
    """The member still reports one of ``partitions`` as owned (not reporting counts as yes)."""
    if owned is None:
        return True
    for topic_id, ps in owned.items():
        pending = partitions.get(topic_id)
        if pending and any(p in pending for p in ps):
            return True
    return False


def _with_epoch(member: ConsumerGroupMember, epoch: int, **changes) -> ConsumerGroupMember:
    return dataclasses.replace(member, previous_member_epoch=member.member_epoch, member_epoch=epoch, **changes)


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[str, int], int],
    owned: Owned | None,
    subscribed_topic_ids: Collection[str] | None = None,
    subscription_changed: bool = False,
) -> ConsumerGroupMember:
    """The member's next step towards ``target`` at ``target_epoch`` (the member itself when
    it cannot move yet). ``partition_epoch(topic id, partition)`` is the current owner's
    epoch or -1; ``owned`` what the member reported; ``subscribed_topic_ids`` the ids of the
    topics it subscribes to now (None: every topic of its target)."""
    state = member.state
    if state == MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(
                member, member.member_epoch, target_epoch, target, partition_epoch, owned, subscribed_topic_ids
            )
        if subscription_changed:
            return _drop_unsubscribed(member, owned, subscribed_topic_ids)
        return member
    if state == MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            if subscription_changed:
                return _drop_unsubscribed(member, owned, subscribed_topic_ids)
            return member
        return _next(
            member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned, subscribed_topic_ids
        )
    if state == MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned, subscribed_topic_ids)
    # A state written by a newer version: start over from nothing.
    if owned is None or any(owned.values()):
        raise FencedMemberEpochError(
            "The consumer group member is in a unknown state. The member must abandon all its partitions and rejoin."
        )
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned, subscribed_topic_ids)


def _drop_unsubscribed(
    member: ConsumerGroupMember, owned: Owned | None, subscribed: Collection[str] | None
) -> ConsumerGroupMember:
    """Revoke at once the partitions of topics the member no longer subscribes to."""
    if subscribed is None:
        return member
    gone = {t: dict(ps) for t, ps in member.assigned.items() if t not in subscribed and ps}
    if not gone:
        return member
    assigned = {t: dict(ps) for t, ps in member.assigned.items() if t not in gone}
    pending = {t: dict(ps) for t, ps in member.pending_revocation.items()}
    for t, ps in gone.items():
        pending.setdefault(t, {}).update(ps)
    if owns_any(owned, pending):
        return _with_epoch(
            member,
            member.member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=assigned,
            pending_revocation=pending,
        )
    return _with_epoch(member, member.member_epoch, assigned=assigned)


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[str, int], int],
    owned: Owned | None,
    subscribed: Collection[str] | None,
) -> ConsumerGroupMember:
    """Kafka's ``computeNextAssignment``: keep what stays, revoke what goes, add what is free."""
    unreleased = False
    assigned: EpochPartitions = {}
    revoking: EpochPartitions = {}
    adding: dict[str, set[int]] = {}
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset()) if subscribed is None or topic_id in subscribed else frozenset()
        current = member.assigned.get(topic_id, {})
        kept = {p: e for p, e in current.items() if p in wanted}
        gone = {p: e for p, e in current.items() if p not in wanted}
        missing = {p for p in wanted if p not in kept}
        free = {p for p in missing if partition_epoch(topic_id, p) == -1}
        unreleased = unreleased or len(free) < len(missing)
        if kept:
            assigned[topic_id] = kept
        if gone:
            revoking[topic_id] = gone
        if free:
            adding[topic_id] = free
    if revoking and owns_any(owned, revoking):
        return _with_epoch(
            member,
            member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=assigned,
            pending_revocation=revoking,
        )
    for topic_id, ps in adding.items():
        epochs = assigned.setdefault(topic_id, {})
        for p in ps:
            epochs[p] = target_epoch
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(member, target_epoch, state=state, assigned=assigned, pending_revocation={})


__all__ = ["Owned", "owns_any", "reconcile"]
