"""Kafka's default partitioning: murmur2 for keys, sticky partitions for null keys.

``murmur2`` is Kafka's Java ``Utils.murmur2`` bit for bit, so a key lands in the same
partition it would in Kafka (``toPositive(murmur2(key)) % numPartitions``).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping

import numpy as np

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def partitions_for_keys(keys: list[bytes], num_partitions: int) -> np.ndarray:
    """``partition_for_key`` for many keys at once (the producer's bulk path)."""
    return np.fromiter((partition_for_key(k, num_partitions) for k in keys), dtype=np.int32, count=len(keys))


class StickyPartitioner:
    """Null-key records stick to one partition until its batch is sent (KIP-480)."""

    def __init__(self) -> None:
        self._current: dict[str, int] = {}
        self._lock = threading.Lock()

    def current(self, topic: str) -> int | None:
        """The sticky partition of ``topic``, if one was chosen (no metadata needed)."""
        return self._current.get(topic)

    @property
    def current_by_topic(self) -> Mapping[str, int]:
        """The live topic -> sticky partition mapping (the producer's send() reads it directly)."""
        return self._current

    def partition(self, topic: str, num_partitions: int) -> int:
        """The sticky partition of ``topic`` now."""
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            with self._lock:
                current = self._current[topic] = random.randrange(num_partitions)
        return current

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> int:
        """A batch for ``previous`` filled up: move to another partition."""
        with self._lock:
            if self._current.get(topic, previous) == previous and num_partitions > 1:
                choice = random.randrange(num_partitions - 1)
                self._current[topic] = choice if choice < previous else choice + 1
            return self._current.get(topic, previous)
