# cython: language_level=3
"""Compiled twin of ``rayqueue/producer/accumulator.py``'s ``RecordAccumulator.append`` (the
reference: read it first).

``RecordAccumulator_append`` replaces ``RecordAccumulator.append``: under the accumulator's
lock, the buffer.memory check, the open batch of the partition (opened once per batch), the
record appended by the batch's builder (the compiled RecordBatchBuilder), the counters and
the seal check, then the record's future, in the same order on the same attributes.
"""

from rayqueue.producer.futures import FutureRecordMetadata


def RecordAccumulator_append(self, topic, partition, key, value, timestamp, headers, Py_ssize_t size):
    """Add one record to its partition's open batch; the record's future (twin of RecordAccumulator.append)."""
    slot = (topic, partition)
    with self.lock:
        if self._buffered + size > self._buffer_memory:
            self._wait_for_space(size)
        batch = self._open.get(slot)
        if batch is None:  # once per batch: a sticky pick may predate the topic's recreation
            num_partitions = self._metadata.num_partitions(topic)
            if partition >= num_partitions and key is None and self._plain_sticky:
                partition = self._sticky.partition(topic, num_partitions)
                slot = (topic, partition)
                batch = self._open.get(slot)
            if batch is None:
                batch = self._new_open_batch(slot)
        delta = batch.builder.append(value, key, timestamp, headers)
        batch.records = delta + 1
        self._buffered += size
        batch.size += size
        if batch.size >= batch.seal_at:
            if self.idempotent and self._held(batch):
                batch.seal_at = batch.size + self._batch_size // 4 + 1  # look again a bit later
            else:
                self._close_batch(batch)
                if key is None:
                    self._sticky.on_new_batch(topic, self._metadata.num_partitions(topic), partition)
    return tuple.__new__(FutureRecordMetadata, (batch.result, delta, timestamp))
