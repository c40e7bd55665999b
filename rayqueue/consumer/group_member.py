"""What a consumer's side of either group protocol does alike: offset commits and fetches
(Kafka's ``CommitRequestManager``), giving partitions up and losing them with the rebalance
listener told, and auto-commit.

:class:`~rayqueue.consumer.coordinator.ConsumerCoordinator` (``group.protocol=classic``) and
:class:`~rayqueue.consumer.membership.ConsumerMembership` (``group.protocol=consumer``,
KIP-848) build on it; each brings its own way of joining, heartbeating and leaving, and its
``generation`` (the classic generation or the KIP-848 member epoch, carried by OffsetCommit).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import ray

from actors.protocol import OffsetCommitRequest, OffsetFetchRequest
from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from rayqueue.consumer.subscription_state import SubscriptionState
from rayqueue.errors import (
    CoordinatorNotAvailableError,
    InvalidConfigError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    as_kafka_error,
)

logger = logging.getLogger(__name__)

# Longest pause between retries that may wait out a transaction (Kafka's retry.backoff.max.ms).
_MAX_BACKOFF_S = 1.0

UNJOINED, STABLE = "unjoined", "stable"


def kafka_error(exc: BaseException) -> BaseException:
    """The Kafka error a failed call to the group coordinator stands for."""
    return as_kafka_error(exc, CoordinatorNotAvailableError, "group coordinator")


class GroupMember(ABC):
    """Offsets, revocation and auto-commit of one Consumer's ``subscriptions`` in a group."""

    def __init__(
        self, subscriptions: SubscriptionState, handle: Any, config: Mapping[str, Any], principal: str | None = None
    ) -> None:
        if handle is None:
            raise InvalidConfigError("this cluster has no group coordinator (launched by an older rayqueue)")
        # The consumer's principal, on every group request: READ on the group to join, sync,
        # heartbeat, leave and commit (and on the topics committed), DESCRIBE to fetch offsets.
        self.principal = principal
        self._subscriptions = subscriptions
        self._handle = handle
        self.group_id: str = config["group.id"]
        self.instance_id: str | None = config["group.instance.id"]
        self._client_id = config["client.id"]
        self._rebalance_ms = config["max.poll.interval.ms"]
        self._timeout_s = config["default.api.timeout.ms"] / 1000
        self._backoff_s = config["retry.backoff.ms"] / 1000
        # KIP-447: a read_committed consumer starts only from stable offsets, not from one a
        # transaction has committed but not completed yet.
        self._require_stable = config["isolation.level"] == "read_committed"
        self._auto_commit = config["enable.auto.commit"]
        self._auto_commit_s = config["auto.commit.interval.ms"] / 1000
        self.member_id = ""
        self.generation = -1
        self.protocol = ""
        self.state = UNJOINED
        self._crashed = False  # tests: a member whose process died (see _simulate_crash)
        self._owned: set[TopicPartition] = set()
        self._fatal: BaseException | None = None
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._async_commits: list[tuple[Any, dict[TopicPartition, OffsetAndMetadata], Callable | None]] = []

    def unsubscribe(self) -> None:
        """Give up every partition (listener told) and leave the group."""
        if self._subscriptions.subscribed:
            self._revoke(set(self._owned))
            self._leave()

    @abstractmethod
    def _leave(self) -> None:
        """Leave the group with the protocol's own request; give up nothing more."""

    def _raise_fatal(self) -> None:
        """Raise, once, an error the heartbeat thread found that is the application's."""
        if self._fatal is not None:
            error, self._fatal = self._fatal, None
            raise error

    def _maybe_auto_commit(self) -> None:
        """Commit the owned partitions' positions when auto.commit.interval.ms has passed."""
        if self._auto_commit and self.state == STABLE and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_s
            positions = self._positions(self._owned)
            if positions:
                self.commit_async(positions)

    def _take(self, assigned: set[TopicPartition], added: set[TopicPartition], tell_empty: bool = False) -> None:
        """Own ``assigned``: the listener hears of ``added`` (also when empty, with
        ``tell_empty``: the classic protocol's rule), whose positions start from the group's
        committed offsets (the reset policy where there are none)."""
        self._owned = set(assigned)
        subscriptions = self._subscriptions
        subscriptions.assign_from_subscribed(assigned)
        self.state = STABLE
        if (added or tell_empty) and subscriptions.listener is not None:
            subscriptions.listener.on_partitions_assigned(set(added))
        missing = subscriptions.missing_positions(added)
        if missing:
            for tp, om in self.committed(missing).items():
                if om is not None:
                    subscriptions.seek(tp, om.offset)

    def _revoke(self, partitions: set[TopicPartition]) -> None:
        """Commit (auto-commit) and tell the listener, while the partitions are still ours."""
        if not partitions:
            return
        if self._auto_commit:
            positions = self._positions(partitions)
            if positions:
                try:
                    self.commit_sync(positions)
                except KafkaError as exc:
                    logger.warning("%s: commit on revocation failed: %s", self.group_id, exc)
        listener = self._subscriptions.listener
        if listener is not None:
            listener.on_partitions_revoked(set(partitions))
        self._owned -= partitions
        self._subscriptions.assign_from_subscribed(self._owned)

    def _on_lost(self) -> None:
        """Fenced out: the partitions are gone without a commit (the listener's on_partitions_lost)."""
        lost = set(self._owned)
        self._owned.clear()
        self._subscriptions.assign_from_subscribed(set())
        self.state = UNJOINED
        listener = self._subscriptions.listener
        if lost and listener is not None:
            listener.on_partitions_lost(lost)

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(p) for tp, p in self._subscriptions.positions(partitions).items()}

    # -- offsets --------------------------------------------------------------------------

    def _commit_args(self) -> tuple[str, str | None, int]:
        if self._subscriptions.subscribed:
            # The coordinator judges the generation: during a rebalance the old one may still
            # commit (that is what on_partitions_revoked does).
            if self.generation < 0 or not self.member_id:
                raise RebalanceInProgressError(
                    f"group {self.group_id!r}: not a member of a generation yet; commit after the next poll"
                )
            return self.member_id, self.instance_id, self.generation
        return "", None, -1  # manual assignment: a standalone commit

    def _commit_request(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> OffsetCommitRequest:
        member_id, instance_id, generation = self._commit_args()
        return OffsetCommitRequest(self.group_id, dict(offsets), member_id, instance_id, generation, self.principal)

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit and wait; retriable coordinator errors are retried within default.api.timeout.ms.
        A partition the coordinator refused (STALE_MEMBER_EPOCH: it moved meanwhile) raises its error."""
        self._complete_async_commits(wait=True)
        request = self._commit_request(offsets)
        refused = self._call(lambda: self._handle.commit_offsets.remote(request))
        if refused:
            raise next(iter(refused.values()))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: Callable[[Any, BaseException | None], None] | None = None,
    ) -> None:
        """Send a commit; ``callback(offsets, error)`` runs in a later poll/commit/close."""
        try:
            request = self._commit_request(offsets)
        except KafkaError as exc:
            if callback is not None:
                callback(dict(offsets), exc)
            return
        self._async_commits.append((self._handle.commit_offsets.remote(request), dict(offsets), callback))

    def _complete_async_commits(self, wait: bool = False) -> None:
        if not self._async_commits:
            return
        refs = [r for r, _, _ in self._async_commits]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self._timeout_s if wait else 0)
        done = set(ready)
        keep = []
        for ref, offsets, callback in self._async_commits:
            if ref not in done:
                keep.append((ref, offsets, callback))
                continue
            error: BaseException | None = None
            try:
                refused = ray.get(ref)
                if refused:
                    error = next(iter(refused.values()))
            except Exception as exc:  # noqa: BLE001
                error = kafka_error(exc)
            if error is not None:
                logger.warning("%s: async commit failed: %s", self.group_id, error)
            if callback is not None:
                callback(offsets, error)
        self._async_commits = keep

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None where there is none).

        A read_committed consumer asks for stable offsets (KIP-447): while a transaction's
        offset commit for one of the partitions is pending, the coordinator answers the
        retriable UnstableOffsetCommitError, and this retries with growing pauses until the
        transaction completes or default.api.timeout.ms passes.
        """
        wanted = tuple(partitions)
        request = OffsetFetchRequest(self.group_id, wanted, self._require_stable, self.principal)
        found = self._call(lambda: self._handle.fetch_offsets.remote(request), growing_backoff=True)
        return {tp: found.get(tp) for tp in wanted}

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Group id, generation (KIP-848: the member epoch), member id and instance id (for
        transactional producers)."""
        return ConsumerGroupMetadata(self.group_id, self.generation, self.member_id, self.instance_id)

    def _call(self, make_ref: Callable[[], Any], growing_backoff: bool = False) -> Any:
        """Call the coordinator, retrying retriable errors within default.api.timeout.ms.

        ``growing_backoff`` doubles the pause after each retry up to _MAX_BACKOFF_S (Kafka's
        retry.backoff.max.ms default), for waits that may last a whole transaction.
        """
        deadline = time.monotonic() + self._timeout_s
        pause = self._backoff_s
        while True:
            try:
                return ray.get(make_ref(), timeout=max(0.1, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                raise KafkaTimeoutError(f"group coordinator did not answer within {self._timeout_s}s") from None
            except Exception as exc:  # noqa: BLE001
                error = kafka_error(exc)
                remaining = deadline - time.monotonic()
                if not (isinstance(error, KafkaError) and error.retriable) or remaining <= 0:
                    raise error from None
                time.sleep(min(pause, remaining))
                if growing_backoff:
                    pause = min(pause * 2, max(self._backoff_s, _MAX_BACKOFF_S))


__all__ = ["STABLE", "UNJOINED", "GroupMember", "kafka_error"]
