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
from collections.abc import Mapping
from typing import Any

import ray

from actors.assignors import BUILTIN_ASSIGNORS, COOPERATIVE, protocol_of
from actors.protocol import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from actors.types import TopicPartition
from rayqueue.consumer.group_member import STABLE, UNJOINED, GroupMember, kafka_error
from rayqueue.consumer.subscription_state import ConsumerRebalanceListener, SubscriptionState
from rayqueue.errors import (
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

logger = logging.getLogger(__name__)

JOINING, SYNCING = "joining", "syncing"


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


class ConsumerCoordinator(GroupMember):
    """Group membership, rebalances and offset commits for one Consumer's ``subscriptions``."""

    def __init__(
        self, subscriptions: SubscriptionState, handle: Any, config: Mapping[str, Any], principal: str | None = None
    ) -> None:
        super().__init__(subscriptions, handle, config, principal)
        self._session_ms = config["session.timeout.ms"]
        self._heartbeat_s = config["heartbeat.interval.ms"] / 1000
        self._protocols, self._custom = normalize_strategies(config["partition.assignment.strategy"])
        all_assignors = [self._custom.get(n) or BUILTIN_ASSIGNORS[n] for n in self._protocols]
        # Kafka's rule: cooperative only if every configured assignor supports it.
        self.cooperative = all(protocol_of(a) == COOPERATIVE for a in all_assignors)
        self._pending: Any = None  # ObjectRef of the join or sync in flight
        self._retry_at = 0.0
        self._rejoin_needed = False
        self._lost_generation: int | None = None  # set by the heartbeat thread when fenced out
        self._last_poll = time.monotonic()
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

    # -- the poll-driven state machine ----------------------------------------------------

    def poll(self) -> None:
        """Advance membership: rejoin when needed, finish a join/sync, auto-commit, callbacks."""
        self._last_poll = time.monotonic()
        self._raise_fatal()
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
        self._maybe_auto_commit()

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
            self._on_join_error(kafka_error(exc))
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
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._take(assigned, added, tell_empty=True)
        logger.info("%s: generation %d, assigned %d partitions", self.group_id, self.generation, len(assigned))

    def _on_lost(self) -> None:
        self.generation = -1
        self.member_id = "" if not self.instance_id else self.member_id
        super()._on_lost()

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
                logger.info("%s: leave failed: %s", self.group_id, kafka_error(exc))

    def _simulate_crash(self) -> None:
        """Stop heartbeating and taking part in the group without leaving it (tests: a dead
        process). Commits still go out under the old membership, as a zombie's would."""
        self._stop.set()
        self._crashed = True
