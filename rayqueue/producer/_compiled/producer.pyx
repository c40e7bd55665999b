# cython: language_level=3
"""Compiled twin of ``rayqueue/producer/producer.py``'s ``Producer.send`` (the reference: read it first).

``Producer_send`` replaces ``Producer.send``: the same checks, serializers, partition pick
(the sticky map read directly for a null key), timestamp and size check, in the same order
on the same attributes, then the accumulator's ``append`` (itself compiled: accumulator.pyx).
"""

from storage.errors import RecordTooLargeError, UnknownTopicOrPartitionError

cdef extern from *:
    """
    #include <time.h>
    static inline long long rq_now_ms(void) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    }
    """
    long long rq_now_ms()


def Producer_send(self, topic, value=None, key=None, headers=None, partition=None, timestamp=None, callback=None):
    """Queue one record; returns a future of its RecordMetadata (twin of Producer.send)."""
    cdef Py_ssize_t size
    if self._guarded:  # one check on the hot path for both
        self._check_can_send()
    if self._serializing:
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None and value is not None:
            value = self._value_serializer(value)
    if partition is None:
        if key is None and self._plain_sticky:
            partition = self._sticky_current.get(topic)  # StickyPartitioner.current, inline
        if partition is None:
            partition = self._partition(topic, key, value)
    elif not 0 <= partition < self._metadata.num_partitions(topic):
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    if timestamp is None:
        timestamp = rq_now_ms()  # time.time_ns() // 1_000_000, without the call
    size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0) + 16
    if size > self._max_record_size:
        raise RecordTooLargeError(
            f"record of {size} bytes exceeds max.request.size={self._max_request} or buffer.memory={self._buffer_memory}"
        )
    future = self._append(topic, partition, key, value, timestamp, headers or (), size)
    if callback is not None:
        future.add_callback(callback)
    return future
