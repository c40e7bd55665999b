"""What ``send()`` and ``send_many()`` hand back: Kafka's RecordMetadata and the futures of it.

Every record of a batch shares one ProduceRequestResult (Kafka's name), which the sender
completes once per batch; a record's FutureRecordMetadata is a three-field tuple viewing it,
so ``send()`` pays for no per-record event or lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors.types import TopicPartition
from storage.errors import KafkaTimeoutError

logger = logging.getLogger(__name__)

# Guards ProduceRequestResult.callbacks between add_callback and completion (held for a few
# instructions; shared by every batch, so a record's future stays a plain tuple).
_callbacks_lock = threading.Lock()
new_tuple = tuple.__new__  # builds a tuple subclass in C, without a Python __init__


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed (Kafka's RecordMetadata)."""

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        """The record's TopicPartition."""
        return TopicPartition(self.topic, self.partition)


class ProduceRequestResult:
    """The shared outcome of one batch; every record future is a view on it."""

    __slots__ = ("tp", "event", "base_offset", "log_append_time", "error", "callbacks")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.event = threading.Event()
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.callbacks: list[tuple[Callable[..., Any], int, int]] | None = None

    def done(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        """Complete the batch (once) and run the callbacks added so far."""
        self.base_offset, self.log_append_time, self.error = base_offset, log_append_time, error
        with _callbacks_lock:  # a callback added meanwhile is either taken here or runs at once
            self.event.set()
            callbacks, self.callbacks = self.callbacks, None
        for callback, delta, timestamp in callbacks or ():
            self.call(callback, delta, timestamp)

    def call(self, callback: Callable[..., Any], delta: int, timestamp: int) -> None:
        """Run one record's callback with the batch's outcome."""
        try:
            if self.error is None:
                callback(self.metadata(delta, timestamp), None)
            else:
                callback(None, self.error)
        except Exception:  # a user callback must not kill the sender
            logger.exception("producer callback failed")

    def metadata(self, delta: int, timestamp: int) -> RecordMetadata:
        """The record at ``delta`` in the batch, created at ``timestamp`` (unless the log stamped it)."""
        if self.log_append_time >= 0:
            timestamp = self.log_append_time
        return RecordMetadata(self.tp.topic, self.tp.partition, self.base_offset + delta, timestamp)


class FutureRecordMetadata(tuple):
    """The future of one record: a view on its batch's outcome, cheap to create (as Kafka's).

    A tuple of the batch result, the record's offset delta in the batch and its create
    timestamp, built by ``send()`` with ``tuple.__new__`` (no Python-level ``__init__`` on
    the hot path); ``FutureRecordMetadata.of`` builds one by name.
    """

    __slots__ = ()

    @classmethod
    def of(cls, batch: ProduceRequestResult, delta: int, timestamp: int) -> FutureRecordMetadata:
        """The future of the record at ``delta`` of ``batch``, created at ``timestamp``."""
        return new_tuple(cls, (batch, delta, timestamp))

    @property
    def _batch(self) -> ProduceRequestResult:
        return self[0]

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the record's batch; return its RecordMetadata or raise its error."""
        if not self._batch.event.wait(timeout):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout}s")
        if self._batch.error is not None:
            raise self._batch.error
        return self._batch.metadata(self[1], self[2])

    def done(self) -> bool:
        """Whether the batch has an outcome."""
        return self._batch.event.is_set()

    def exception(self) -> BaseException | None:
        """The batch's error, if it failed (None while pending or on success)."""
        return self._batch.error

    def add_callback(self, callback: Callable[[RecordMetadata | None, BaseException | None], Any]) -> None:
        """Call ``callback(metadata, None)`` on success or ``callback(None, error)`` on failure."""
        batch, delta, timestamp = self
        with _callbacks_lock:
            if not batch.event.is_set():
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((callback, delta, timestamp))
                return
        batch.call(callback, delta, timestamp)


class BulkSendResult:
    """The outcome of ``send_many``: one entry per batch, in order."""

    def __init__(self, batches: list[tuple[ProduceRequestResult, int]]) -> None:
        self._batches = batches

    def __len__(self) -> int:
        return sum(count for _, count in self._batches)

    def get(self, timeout: float | None = None) -> list[tuple[TopicPartition, int, int]]:
        """Wait for every batch; returns (partition, base offset, record count) per batch."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for result, count in self._batches:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result.event.wait(remaining):
                raise KafkaTimeoutError(f"bulk send not acknowledged within {timeout}s")
            if result.error is not None:
                raise result.error
            out.append((result.tp, result.base_offset, count))
        return out

    def done(self) -> bool:
        """Whether every batch has an outcome."""
        return all(result.event.is_set() for result, _ in self._batches)
