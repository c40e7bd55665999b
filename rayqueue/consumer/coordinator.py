"""The consumer's side of group membership (Kafka's ConsumerCoordinator).

It reads the subscription from, and writes the group's assignment and the committed
positions to, the consumer's SubscriptionState; it never sees the Consumer itself.

The join and sync calls are sent without blocking: ``poll()`` advances the state machine
(unjoined -> joining -> syncing -> stable) each time round, so several consumers driven by
one thread can rebalance together, and a poll during a rebalance simply returns fewer
records. A background heartbeat thread (as Kafka's) keeps the member alive, reports how
long ago the application last polled (the coordinator enforces ``max.poll.interval.ms``
with it) and flags a needed rejoin; the rejoin itself and every listener callback run in
the application's thread, inside ``poll()``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import ray

from actors.assignors import BUILTIN_ASSIGNORS, COOPERATIVE, protocol_of
from actors.protocol import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from rayqueue.consumer.subscription_state import ConsumerRebalanceListener, SubscriptionState
from rayqueue.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    as_kafka_error,
)

logger = logging.getLogger(__name__)

# Longest pause between retries that may wait out a transaction (Kafka's retry.backoff.max.ms).
_MAX_BACKOFF_S = 1.0

UNJOINED, JOINING, SYNCING, STABLE = "unjoined", "joining", "syncing", "stable"


def _kafka_error(exc: BaseException) -> BaseException:
    return as_kafka_error(exc, CoordinatorNotAvailableError, "group coordinator")


def normalize_strategies(value: Any) -> tuple[list[str], dict[str, Any]]:
    """Assignor names in preference order, and the user-supplied assignor objects by name."""
    items = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else list(value)
    names: list[str] = []
    custom: dict[str, Any] = {}
    for item in items:
        if isinstance(item, str):
            if item not in BUILTIN_ASSIGNORS:
                raise InvalidConfigError(
                    f"partition.assignment.strategy: unknown assignor {item!r}; built in: {sorted(BUILTIN_ASSIGNORS)}"
                )
            names.append(item)
        elif isinstance(getattr(item, "name", None), str) and callable(getattr(item, "assign", None)):
            names.append(item.name)
            custom[item.name] = item
        else:
            raise InvalidConfigError(f"partition.assignment.strategy: {item!r} is neither a name nor an assignor")
    if not names:
        raise InvalidConfigError("partition.assignment.strategy needs at least one assignor")
    return names, custom


class ConsumerCoordinator:
    """Group membership, rebalances and offset commits for one Consumer's ``subscriptions``."""

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
        self._session_ms = config["session.timeout.ms"]
        self._rebalance_ms = config["max.poll.interval.ms"]
        self._heartbeat_s = config["heartbeat.interval.ms"] / 1000
        self._timeout_s = config["default.api.timeout.ms"] / 1000
        self._backoff_s = config["retry.backoff.ms"] / 1000
        # KIP-447: a read_committed consumer starts only from stable offsets, not from one a
        # transaction has committed but not completed yet.
        self._require_stable = config["isolation.level"] == "read_committed"
        self._auto_commit = config["enable.auto.commit"]
        self._auto_commit_s = config["auto.commit.interval.ms"] / 1000
        self._protocols, self._custom = normalize_strategies(config["partition.assignment.strategy"])
        all_assignors = [self._custom.get(n) or BUILTIN_ASSIGNORS[n] for n in self._protocols]
        # Kafka's rule: cooperative only if every configured assignor supports it.
        self.cooperative = all(protocol_of(a) == COOPERATIVE for a in all_assignors)
        self.member_id = ""
        self.generation = -1
        self.protocol = ""
        self.state = UNJOINED
        self._crashed = False  # tests: a member whose process died (see _simulate_crash)
        self._owned: set[TopicPartition] = set()
        self._pending: Any = None  # ObjectRef of the join or sync in flight
        self._retry_at = 0.0
        self._rejoin_needed = False
        self._lost_generation: int | None = None  # set by the heartbeat thread when fenced out
        self._fatal: BaseException | None = None
        self._last_poll = time.monotonic()
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._async_commits: list[tuple[Any, dict[TopicPartition, OffsetAndMetadata], Callable | None]] = []
        self._stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None

    # -- subscription ---------------------------------------------------------------------

    def subscribe(self, topics: list[str], pattern: str | None, listener: ConsumerRebalanceListener | None) -> None:
        """Set the subscription; the next poll joins (or rejoins) the group."""
        changed = self._subscriptions.subscribe(topics, pattern, listener)
        if changed and self.state == STABLE:
            self._rejoin_needed = True
        if self._heartbeat_thread is None:
            self._heartbeat_thread = threading.Thread(
                target=self._heartbeat_loop, name=f"heartbeat-{self.group_id}", daemon=True
            )
            self._heartbeat_thread.start()

    def unsubscribe(self) -> None:
        """Give up every partition (listener told) and leave the group."""
        if self._subscriptions.subscribed:
            self._revoke(set(self._owned))
            self._leave()

    # -- the poll-driven state machine ----------------------------------------------------

    def poll(self) -> None:
        """Advance membership: rejoin when needed, finish a join/sync, auto-commit, callbacks."""
        self._last_poll = time.monotonic()
        if self._fatal is not None:
            error, self._fatal = self._fatal, None
            raise error
        self._complete_async_commits()
        if not self._subscriptions.subscribed or self._crashed:
            return
        if self._lost_generation is not None:
            if self._lost_generation == self.generation and self.state == STABLE:
                self._on_lost()
            self._lost_generation = None
        if self.state == STABLE and self._rejoin_needed:
            self.state = UNJOINED
        if self.state == UNJOINED and time.monotonic() >= self._retry_at:
            self._send_join()
        if self.state in (JOINING, SYNCING) and self._pending is not None:
            ready, _ = ray.wait([self._pending], timeout=0)
            if ready:
                self._on_response(ready[0])
        if self._auto_commit and self.state == STABLE and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_s
            positions = self._positions(self._owned)
            if positions:
                self.commit_async(positions)

    def wait(self, timeout: float) -> None:
        """Block up to ``timeout`` for the join/sync in flight (used when nothing is fetching)."""
        if self._pending is not None:
            ray.wait([self._pending], timeout=max(0.0, timeout))
        else:
            time.sleep(max(0.0, min(timeout, self._backoff_s)))

    def _send_join(self) -> None:
        self._rejoin_needed = False
        if not self.cooperative and self._owned:
            # Eager protocol: give everything up before joining.
            self._revoke(set(self._owned))
        owned = sorted(self._owned) if self.cooperative else []
        subscriptions = self._subscriptions
        self._pending = self._handle.join_group.remote(
            JoinGroupRequest(
                self.group_id,
                self.member_id,
                self.instance_id,
                self._client_id,
                self._session_ms,
                self._rebalance_ms,
                tuple(self._protocols),
                tuple(subscriptions.topics),
                subscriptions.pattern,
                tuple(owned),
                self._custom or None,
                principal=self.principal,
            )
        )
        self.state = JOINING

    def _on_response(self, ref: Any) -> None:
        self._pending = None
        try:
            result = ray.get(ref)
        except Exception as exc:  # noqa: BLE001
            self._on_join_error(_kafka_error(exc))
            return
        if self.state == JOINING:
            self.member_id, self.generation, self.protocol = result.member_id, result.generation_id, result.protocol
            self._pending = self._handle.sync_group.remote(
                SyncGroupRequest(
                    self.group_id, self.member_id, self.instance_id, self.generation, principal=self.principal
                )
            )
            self.state = SYNCING
        else:
            self._on_assignment(set(result.assignment))

    def _on_join_error(self, error: BaseException) -> None:
        self.state = UNJOINED
        if isinstance(error, UnknownMemberIdError | IllegalGenerationError):
            if isinstance(error, UnknownMemberIdError):
                self.member_id = ""
            self.generation = -1
            if self._owned:
                self._on_lost()
            return
        if isinstance(error, RebalanceInProgressError):
            return
        if isinstance(error, FencedInstanceIdError | InconsistentGroupProtocolError) or not (
            isinstance(error, KafkaError) and error.retriable
        ):
            raise error
        self._retry_at = time.monotonic() + self._backoff_s

    def _on_assignment(self, assigned: set[TopicPartition]) -> None:
        revoked = self._owned - assigned
        added = assigned - self._owned
        self.state = STABLE
        if revoked:
            # Cooperative: give up only what moves, then rejoin so its new owner gets it.
            self._revoke(revoked)
            self._rejoin_needed = True
        self._owned = set(assigned)
        subscriptions = self._subscriptions
        subscriptions.assign_from_subscribed(assigned)
        self.state = STABLE
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        if subscriptions.listener is not None:
            subscriptions.listener.on_partitions_assigned(set(added))
        missing = subscriptions.missing_positions(added)
        if missing:
            for tp, om in self.committed(missing).items():
                if om is not None:
                    subscriptions.seek(tp, om.offset)
        logger.info("%s: generation %d, assigned %d partitions", self.group_id, self.generation, len(assigned))

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
        lost = set(self._owned)
        self._owned.clear()
        self._subscriptions.assign_from_subscribed(set())
        self.generation = -1
        self.member_id = "" if not self.instance_id else self.member_id
        self.state = UNJOINED
        listener = self._subscriptions.listener
        if lost and listener is not None:
            listener.on_partitions_lost(lost)

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(p) for tp, p in self._subscriptions.positions(partitions).items()}

    # -- heartbeats -----------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            if self.state != STABLE or not self.member_id:
                continue
            generation, member_id = self.generation, self.member_id
            age_ms = int((time.monotonic() - self._last_poll) * 1000)
            try:
                ray.get(
                    self._handle.heartbeat.remote(
                        HeartbeatRequest(self.group_id, member_id, self.instance_id, generation, age_ms, self.principal)
                    ),
                    timeout=max(self._session_ms / 1000, 1.0),
                )
            except RebalanceInProgressError:
                self._rejoin_needed = True
            except (IllegalGenerationError, UnknownMemberIdError):
                self._lost_generation = generation
            except (FencedInstanceIdError, GroupAuthorizationFailedError) as exc:
                self._fatal = exc
            except Exception as exc:  # noqa: BLE001 - coordinator restarting: try again next beat
                logger.debug("%s: heartbeat failed: %s", self.group_id, exc)

    # -- offsets --------------------------------------------------------------------------

    def _commit_args(self) -> tuple[str, str | None, int]:
        if self._subscriptions.subscribed:
            # The coordinator judges the generation: during a rebalance the old one may still
            # commit (that is what on_partitions_revoked does).
            if self.generation < 0 or not self.member_id:
                raise RebalanceInProgressError(f"group {self.group_id!r} is rebalancing; commit after the next poll")
            return self.member_id, self.instance_id, self.generation
        return "", None, -1  # manual assignment: a standalone commit

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit and wait; retriable coordinator errors are retried within default.api.timeout.ms."""
        self._complete_async_commits(wait=True)
        member_id, instance_id, generation = self._commit_args()
        request = OffsetCommitRequest(self.group_id, dict(offsets), member_id, instance_id, generation, self.principal)
        self._call(lambda: self._handle.commit_offsets.remote(request))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: Callable[[Any, BaseException | None], None] | None = None,
    ) -> None:
        """Send a commit; ``callback(offsets, error)`` runs in a later poll/commit/close."""
        try:
            member_id, instance_id, generation = self._commit_args()
        except KafkaError as exc:
            if callback is not None:
                callback(dict(offsets), exc)
            return
        request = OffsetCommitRequest(self.group_id, dict(offsets), member_id, instance_id, generation, self.principal)
        ref = self._handle.commit_offsets.remote(request)
        self._async_commits.append((ref, dict(offsets), callback))

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
                ray.get(ref)
            except Exception as exc:  # noqa: BLE001
                error = _kafka_error(exc)
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
        """Group id, generation, member id and instance id (for transactional producers)."""
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
                error = _kafka_error(exc)
                remaining = deadline - time.monotonic()
                if not (isinstance(error, KafkaError) and error.retriable) or remaining <= 0:
                    raise error from None
                time.sleep(min(pause, remaining))
                if growing_backoff:
                    pause = min(pause * 2, max(self._backoff_s, _MAX_BACKOFF_S))

    # -- leaving --------------------------------------------------------------------------

    def close(self) -> None:
        """Commit (auto-commit), tell the listener, leave the group (dynamic members), stop heartbeats.

        A static member does not leave: restarted within session.timeout.ms it gets its
        partitions back without a rebalance, as in Kafka.
        """
        try:
            if self._subscriptions.subscribed and self.state == STABLE and not self._crashed:
                self._revoke(set(self._owned))
            self._complete_async_commits(wait=True)
            self._leave()
        finally:
            self._stop.set()

    def _leave(self) -> None:
        member_id, self.member_id = self.member_id, ""
        self.generation, self.state, self._pending = -1, UNJOINED, None
        self._owned.clear()
        if member_id and not self.instance_id:
            try:
                ray.get(
                    self._handle.leave_group.remote(
                        LeaveGroupRequest(self.group_id, member_id, principal=self.principal)
                    ),
                    timeout=self._timeout_s,
                )
            except Exception as exc:  # noqa: BLE001 - the session timeout removes us anyway
                logger.info("%s: leave failed: %s", self.group_id, _kafka_error(exc))

    def _simulate_crash(self) -> None:
        """Stop heartbeating and taking part in the group without leaving it (tests: a dead
        process). Commits still go out under the old membership, as a zombie's would."""
        self._stop.set()
        self._crashed = True
