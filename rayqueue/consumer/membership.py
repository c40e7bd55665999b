"""The consumer's side of KIP-848's consumer group protocol (Kafka's ``ConsumerMembershipManager``
and heartbeat request manager): ``group.protocol=consumer``.

The coordinator assigns; the member heartbeats (ConsumerGroupHeartbeat) with its member epoch
and what it owns, and converges to what the answers give it one step at a time: it gives up
what it no longer has (``on_partitions_revoked``, after committing its position with
auto-commit), takes what it is given (``on_partitions_assigned``), and says so at once in its
next heartbeat, so the coordinator can hand the revoked partitions to their new owner. No
stop-the-world rebalance: members keep consuming what they keep.

A background thread sends the heartbeats (every ``heartbeat_interval_ms`` the coordinator
answers with, at once after a change); the reconciliation and every listener callback run in
the application's thread, inside ``poll()``. A fenced member (FENCED_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID) loses its partitions (``on_partitions_lost``) and joins again with epoch
0. The member names itself (a UUID, as Kafka's client since ConsumerGroupHeartbeat v1); a
static member (``group.instance.id``) leaves with epoch -2 on close, so that a new instance
gets its partitions back without a rebalance.

It offers what :class:`~rayqueue.consumer.coordinator.ConsumerCoordinator` offers (the
classic protocol's side), so the Consumer uses either.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import ray

from actors.protocol import OffsetCommitRequest, OffsetFetchRequest
from actors.protocol_consumer_groups import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from rayqueue.consumer.subscription_state import SubscriptionState
from rayqueue.errors import (
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    InvalidConfigError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    as_kafka_error,
)

logger = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH, LEAVE_STATIC_EPOCH = 0, -1, -2
UNJOINED, JOINING, STABLE = "unjoined", "joining", "stable"
_MAX_BACKOFF_S = 1.0


def _kafka_error(exc: BaseException) -> BaseException:
    return as_kafka_error(exc, CoordinatorNotAvailableError, "group coordinator")


def _member_id() -> str:
    """A member id as Kafka's client makes one (a random Uuid's base64 form)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerMembership:
    """Group membership, reconciliation and offset commits of one Consumer over KIP-848's protocol."""

    def __init__(
        self, subscriptions: SubscriptionState, handle: Any, config: Mapping[str, Any], principal: str | None = None
    ) -> None:
        if handle is None:
            raise InvalidConfigError("this cluster has no group coordinator (launched by an older rayqueue)")
        self.principal = principal
        self._subscriptions = subscriptions
        self._handle = handle
        self.group_id: str = config["group.id"]
        self.instance_id: str | None = config["group.instance.id"]
        self._client_id = config["client.id"]
        self._rebalance_ms = config["max.poll.interval.ms"]
        self._assignor = config["group.remote.assignor"]
        self._timeout_s = config["default.api.timeout.ms"] / 1000
        self._backoff_s = config["retry.backoff.ms"] / 1000
        self._require_stable = config["isolation.level"] == "read_committed"
        self._auto_commit = config["enable.auto.commit"]
        self._auto_commit_s = config["auto.commit.interval.ms"] / 1000
        self.cooperative = True  # the consumer protocol is incremental by design
        self.protocol = ""
        self.member_id = _member_id()
        self.generation = -1  # the member epoch (what OffsetCommit carries); -1 while not in the group
        self.state = UNJOINED
        self._lock = threading.Lock()
        self._epoch = JOIN_EPOCH
        self._owned: set[TopicPartition] = set()
        self._ids: dict[str, str] = {}  # topic name -> id, from the coordinator's answers
        self._assignment: set[TopicPartition] | None = None  # received, not yet reconciled
        self._sent_subscription: tuple | None = None  # what the last heartbeat said it subscribes to
        self._interval_s = 5.0
        self._lost = False
        self._crashed = False
        self._fatal: BaseException | None = None
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._async_commits: list[tuple[Any, dict[TopicPartition, OffsetAndMetadata], Callable | None]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # -- subscription ---------------------------------------------------------------------

    def subscribe(self, topics: list[str], pattern: str | None, listener: Any) -> None:
        """Set the subscription (a regex is resolved by the coordinator, RE2 syntax); the
        next heartbeat tells the coordinator."""
        self._subscriptions.subscribe(topics, pattern, listener)
        self._wake.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._heartbeat_loop, name=f"heartbeat-{self.group_id}", daemon=True)
            self._thread.start()

    def unsubscribe(self) -> None:
        """Give up every partition (listener told) and leave the group."""
        if self._subscriptions.subscribed:
            self._revoke(set(self._owned))
            self._leave()

    # -- the application's side -----------------------------------------------------------

    def poll(self) -> None:
        """Reconcile with what the coordinator gave (listener callbacks here), auto-commit."""
        if self._fatal is not None:
            error, self._fatal = self._fatal, None
            raise error
        self._complete_async_commits()
        if not self._subscriptions.subscribed or self._crashed:
            return
        with self._lock:
            lost, self._lost = self._lost, False
            assignment, self._assignment = self._assignment, None
        if lost:
            self._on_lost()
        if assignment is not None:
            self._reconcile(assignment)
        if self._auto_commit and self.state == STABLE and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_s
            positions = self._positions(self._owned)
            if positions:
                self.commit_async(positions)

    def wait(self, timeout: float) -> None:
        """Wait a little for the coordinator (nothing is assigned to fetch from yet)."""
        time.sleep(max(0.0, min(timeout, self._backoff_s)))

    def _reconcile(self, assigned: set[TopicPartition]) -> None:
        revoked = self._owned - assigned
        added = assigned - self._owned
        if revoked:
            self._revoke(revoked)
        self._owned = set(assigned)
        subscriptions = self._subscriptions
        subscriptions.assign_from_subscribed(assigned)
        self.state = STABLE
        if added and subscriptions.listener is not None:
            subscriptions.listener.on_partitions_assigned(set(added))
        missing = subscriptions.missing_positions(added)
        if missing:
            for tp, om in self.committed(missing).items():
                if om is not None:
                    subscriptions.seek(tp, om.offset)
        self._wake.set()  # say at once what it owns now (lets revoked partitions move on)
        logger.info("%s: epoch %d, %d partitions", self.group_id, self.generation, len(assigned))

    def _revoke(self, partitions: set[TopicPartition]) -> None:
        """Commit (auto-commit) and tell the listener while the partitions are still ours."""
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
        self.state = UNJOINED
        listener = self._subscriptions.listener
        if lost and listener is not None:
            listener.on_partitions_lost(lost)

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(p) for tp, p in self._subscriptions.positions(partitions).items()}

    # -- heartbeats -----------------------------------------------------------------------

    def _request(self) -> ConsumerGroupHeartbeatRequest:
        """The next heartbeat: a full one to join; then the epoch and what it owns, and its
        subscription only when it changed (Kafka's rules: null means unchanged)."""
        subscriptions = self._subscriptions
        names, regex = tuple(sorted(subscriptions.topics)), subscriptions.pattern
        with self._lock:
            epoch, owned = self._epoch, set(self._owned)
        joining = epoch == JOIN_EPOCH
        topic_names: tuple[str, ...] | None = None
        topic_regex: str | None = None
        if joining:
            topic_names, topic_regex = (names, None) if regex is None else (None, regex)
        elif (names, regex) != self._sent_subscription:
            topic_names, topic_regex = (names, "") if regex is None else ((), regex)
        by_topic: dict[str, list[int]] = {}
        for tp in owned:
            topic_id = self._ids.get(tp.topic)
            if topic_id is not None:
                by_topic.setdefault(topic_id, []).append(tp.partition)
        return ConsumerGroupHeartbeatRequest(
            self.group_id,
            self.member_id,
            epoch,
            self.instance_id,
            None,
            self._rebalance_ms if joining else -1,
            topic_names,
            topic_regex,
            self._assignor if joining else None,
            () if joining else tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items())),
            self._client_id,
            principal=self.principal,
        )

    def _heartbeat_loop(self) -> None:
        wait_s = 0.0
        while not self._stop.is_set():
            self._wake.wait(wait_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self._subscriptions.subscribed or self._crashed:
                wait_s = self._interval_s
                continue
            request = self._request()
            try:
                response = ray.get(
                    self._handle.consumer_group_heartbeat.remote(request), timeout=max(self._timeout_s, 1.0)
                )
            except Exception as exc:  # noqa: BLE001
                wait_s = self._on_error(_kafka_error(exc), request)
                continue
            self._on_response(request, response)
            wait_s = self._interval_s

    def _on_response(self, request: ConsumerGroupHeartbeatRequest, response: ConsumerGroupHeartbeatResponse) -> None:
        if request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None:
            self._sent_subscription = (tuple(sorted(self._subscriptions.topics)), self._subscriptions.pattern)
        self._interval_s = max(0.01, response.heartbeat_interval_ms / 1000)
        with self._lock:
            if self._epoch != request.member_epoch:
                return  # fenced or left meanwhile: this answer is for an earlier life
            self._epoch = response.member_epoch
            self.generation = response.member_epoch
            if response.assignment is not None:
                for t in response.assignment:
                    self._ids[t.topic_name] = t.topic_id
                self._assignment = {TopicPartition(t.topic_name, p) for t in response.assignment for p in t.partitions}
            if request.member_epoch == JOIN_EPOCH:
                self.state = JOINING

    def _on_error(self, error: BaseException, request: ConsumerGroupHeartbeatRequest) -> float:
        """What an error means: fenced out (rejoin at once), retry later, or fatal."""
        if isinstance(error, FencedMemberEpochError | UnknownMemberIdError):
            logger.info("%s: member %s fenced (%s); rejoining", self.group_id, self.member_id, error)
            with self._lock:
                self._epoch = JOIN_EPOCH
                self.generation = -1
                self._assignment = None
                self._lost = True
            self._sent_subscription = None
            return 0.0
        if isinstance(error, KafkaError) and error.retriable:
            return self._backoff_s
        if isinstance(error, KafkaError):  # UNRELEASED_INSTANCE_ID, authorization, ...: the application's
            self._fatal = error
            return self._interval_s
        logger.debug("%s: heartbeat failed: %s", self.group_id, error)
        return self._backoff_s

    # -- offsets --------------------------------------------------------------------------

    def _commit_args(self) -> tuple[str, str | None, int]:
        if self._subscriptions.subscribed:
            if self.generation < 0:
                raise RebalanceInProgressError(f"group {self.group_id!r}: not a member yet; commit after the next poll")
            return self.member_id, self.instance_id, self.generation
        return "", None, -1  # manual assignment: a standalone commit

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit and wait (with the member epoch); a partition the coordinator refused
        (STALE_MEMBER_EPOCH: it moved meanwhile) raises its error."""
        self._complete_async_commits(wait=True)
        member_id, instance_id, epoch = self._commit_args()
        request = OffsetCommitRequest(self.group_id, dict(offsets), member_id, instance_id, epoch, self.principal)
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
            member_id, instance_id, epoch = self._commit_args()
        except KafkaError as exc:
            if callback is not None:
                callback(dict(offsets), exc)
            return
        request = OffsetCommitRequest(self.group_id, dict(offsets), member_id, instance_id, epoch, self.principal)
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
                error = _kafka_error(exc)
            if error is not None:
                logger.warning("%s: async commit failed: %s", self.group_id, error)
            if callback is not None:
                callback(offsets, error)
        self._async_commits = keep

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None where there is none)."""
        wanted = tuple(partitions)
        request = OffsetFetchRequest(self.group_id, wanted, self._require_stable, self.principal)
        found = self._call(lambda: self._handle.fetch_offsets.remote(request), growing_backoff=True)
        return {tp: found.get(tp) for tp in wanted}

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Group id, member epoch (as the generation), member id and instance id."""
        return ConsumerGroupMetadata(self.group_id, self.generation, self.member_id, self.instance_id)

    def _call(self, make_ref: Callable[[], Any], growing_backoff: bool = False) -> Any:
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
        """Commit (auto-commit), tell the listener, leave (epoch -1; a static member -2, so
        that its next instance gets its partitions back), stop heartbeats."""
        try:
            if self._subscriptions.subscribed and not self._crashed:
                self._revoke(set(self._owned))
            self._complete_async_commits(wait=True)
            self._leave()
        finally:
            self._stop.set()
            self._wake.set()

    def _leave(self) -> None:
        with self._lock:
            epoch, self._epoch = self._epoch, JOIN_EPOCH
            self.generation, self.state, self._assignment = -1, UNJOINED, None
        self._owned.clear()
        self._sent_subscription = None
        if epoch == JOIN_EPOCH:
            return
        leave = LEAVE_STATIC_EPOCH if self.instance_id else LEAVE_EPOCH
        request = ConsumerGroupHeartbeatRequest(
            self.group_id, self.member_id, leave, self.instance_id, principal=self.principal
        )
        try:
            ray.get(self._handle.consumer_group_heartbeat.remote(request), timeout=self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - the session timeout removes us anyway
            logger.info("%s: leave failed: %s", self.group_id, _kafka_error(exc))

    def _simulate_crash(self) -> None:
        """Stop heartbeating without leaving (tests: a dead process)."""
        self._stop.set()
        self._wake.set()
        self._crashed = True


__all__ = ["ConsumerMembership"]
