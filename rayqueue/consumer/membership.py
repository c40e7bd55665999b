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
from collections.abc import Mapping
from typing import Any

import ray

from actors.protocol_consumer_groups import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from actors.types import TopicPartition
from rayqueue.consumer.group_member import UNJOINED, GroupMember, kafka_error
from rayqueue.consumer.subscription_state import SubscriptionState
from rayqueue.errors import FencedMemberEpochError, KafkaError, UnknownMemberIdError

logger = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH, LEAVE_STATIC_EPOCH = 0, -1, -2
JOINING = "joining"


def _member_id() -> str:
    """A member id as Kafka's client makes one (a random Uuid's base64 form)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerMembership(GroupMember):
    """Group membership, reconciliation and offset commits of one Consumer over KIP-848's protocol."""

    def __init__(
        self, subscriptions: SubscriptionState, handle: Any, config: Mapping[str, Any], principal: str | None = None
    ) -> None:
        super().__init__(subscriptions, handle, config, principal)
        self._assignor = config["group.remote.assignor"]
        self.cooperative = True  # the consumer protocol is incremental by design
        self.member_id = _member_id()  # generation: the member epoch, -1 while not in the group
        self._lock = threading.Lock()
        self._epoch = JOIN_EPOCH
        self._ids: dict[str, str] = {}  # topic name -> id, from the coordinator's answers
        self._assignment: set[TopicPartition] | None = None  # received, not yet reconciled
        self._sent_subscription: tuple | None = None  # what the last heartbeat said it subscribes to
        self._interval_s = 5.0
        self._lost = False
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

    # -- the application's side -----------------------------------------------------------

    def poll(self) -> None:
        """Reconcile with what the coordinator gave (listener callbacks here), auto-commit."""
        self._raise_fatal()
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
        self._maybe_auto_commit()

    def wait(self, timeout: float) -> None:
        """Wait a little for the coordinator (nothing is assigned to fetch from yet)."""
        time.sleep(max(0.0, min(timeout, self._backoff_s)))

    def _reconcile(self, assigned: set[TopicPartition]) -> None:
        revoked = self._owned - assigned
        added = assigned - self._owned
        if revoked:
            self._revoke(revoked)
        self._take(assigned, added)
        self._wake.set()  # say at once what it owns now (lets revoked partitions move on)
        logger.info("%s: epoch %d, %d partitions", self.group_id, self.generation, len(assigned))

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
                wait_s = self._on_error(kafka_error(exc), request)
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
            logger.info("%s: leave failed: %s", self.group_id, kafka_error(exc))

    def _simulate_crash(self) -> None:
        """Stop heartbeating without leaving (tests: a dead process)."""
        self._stop.set()
        self._wake.set()
        self._crashed = True


__all__ = ["ConsumerMembership"]
