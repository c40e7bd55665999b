"""A producer batch is built once: sealed (closed for appends) when full or
lingered, then, when the sender drains it, its producer id, epoch and sequence are set and
it is built: one copy of its records into the batch and one CRC pass, nothing at drain. A
retry sends the same bytes; only an epoch bump rewrites a built batch's header. Runs over
both builder twins, without Ray (the accumulator and its batches alone)."""

from __future__ import annotations

import time
from typing import Any

import crc32c
import pytest

import storage.records.builder
from actors.types import TopicPartition
from rayqueue.config import producer_config
from rayqueue.producer import accumulator as accumulator_module
from rayqueue.producer.accumulator import RecordAccumulator
from rayqueue.producer.transaction_manager import TransactionManager
from storage import batch_header, extensions
from storage.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, read_header
from storage.records.reader import RecordBatch
from tests import twins

TP = TopicPartition("t", 0)
PRODUCER_ID, EPOCH = 4242, 3


class _Metadata:
    def num_partitions(self, topic: str) -> int:
        return 1


class _CountingCrc:
    """The crc32c module as the builder sees it, counting passes and the bytes they read."""

    def __init__(self) -> None:
        self.passes = 0
        self.bytes = 0

    def crc32c(self, data: Any, value: int = 0) -> int:
        self.passes += 1
        self.bytes += memoryview(data).nbytes
        return crc32c.crc32c(data, value)


@pytest.fixture(params=twins.KINDS)
def builder_kind(request, monkeypatch) -> tuple[str, _CountingCrc]:
    """The accumulator's builder class set to one twin, with its CRC calls counted."""
    kind = request.param
    if kind == "compiled" and not twins.compiled_available():
        pytest.skip("the compiled extensions are not built (or RAYQUEUE_NO_EXTENSIONS is set)")
    builder = extensions.twin_of(kind, "storage.records.builder", "RecordBatchBuilder")
    monkeypatch.setattr(accumulator_module, "RecordBatchBuilder", builder)
    counter = _CountingCrc()
    module = storage.records.builder if kind == "pure" else __import__(builder.__module__, fromlist=["_crc32c"])
    monkeypatch.setattr(module, "_crc32c", counter)
    return kind, counter


def _accumulator(idempotent: bool, **config: Any) -> RecordAccumulator:
    txn = TransactionManager(None, None, 60000, 0.1, 60)
    if idempotent:
        txn.producer_id, txn.epoch = PRODUCER_ID, EPOCH
    return RecordAccumulator(producer_config(acks="all", linger_ms=0, **config), _Metadata(), None, txn, idempotent)


def _sealed_batch(accumulator: RecordAccumulator, records: int = 50):
    for i in range(records):
        accumulator.append("t", 0, b"k%d" % i, b"v" * 100, 1_700_000_000_000 + i, (), 116)
    accumulator.begin_flush()  # seals the open batch: closed for appends, not built
    with accumulator.lock:
        (drained,), _ = accumulator.drain(time.monotonic(), False)
    (batch,) = drained[1]
    return batch


def test_an_idempotent_batch_is_built_once_with_its_producer_state(builder_kind) -> None:
    _, crc = builder_kind
    accumulator = _accumulator(idempotent=True)
    batch = _sealed_batch(accumulator)
    assert batch.data is None and batch.base_sequence == 0  # drained: sequenced, not built yet
    assert crc.passes == 0
    batch.close(PRODUCER_ID, EPOCH, False)
    data = batch.data
    assert batch.nbytes == len(data)
    # One CRC pass over the CRC'd bytes, once.
    assert (crc.passes, crc.bytes) in {(1, len(data) - ATTRIBUTES_OFFSET), (2, len(data) - ATTRIBUTES_OFFSET)}
    header = read_header(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PRODUCER_ID, EPOCH, 0)
    assert not header.is_transactional
    RecordBatch(data).validate()
    assert [r.key for r in RecordBatch(data)] == [b"k%d" % i for i in range(50)]
    # A retry goes as the same bytes: no copy, no CRC.
    batch.close(PRODUCER_ID, EPOCH, False)
    assert batch.data is data and crc.bytes == len(data) - ATTRIBUTES_OFFSET


def test_a_transactional_batch_carries_the_flag_from_its_one_build(builder_kind) -> None:
    accumulator = _accumulator(idempotent=True)
    batch = _sealed_batch(accumulator, records=3)
    batch.close(PRODUCER_ID, EPOCH, True)
    header = read_header(batch.data)
    assert header.is_transactional and header.producer_id == PRODUCER_ID
    RecordBatch(batch.data).validate()


def test_without_idempotence_the_batch_has_no_producer_state(builder_kind) -> None:
    accumulator = _accumulator(idempotent=False, enable_idempotence=False)
    batch = _sealed_batch(accumulator, records=3)
    batch.close(-1, -1, False)
    header = read_header(batch.data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    RecordBatch(batch.data).validate()


def test_an_epoch_bump_rewrites_a_built_batch_header_only(builder_kind) -> None:
    """KIP-360: after reset_sequences a built (failed) batch goes with a new epoch and
    sequence; its header is rewritten, its records kept, its CRC right."""
    accumulator = _accumulator(idempotent=True)
    batch = _sealed_batch(accumulator, records=5)
    batch.close(PRODUCER_ID, EPOCH, False)
    before = batch.data
    with accumulator.lock:
        accumulator.request_done(TP, 1)
        accumulator.reenqueue(TP, [batch], 0.0)
        accumulator.reset_sequences()
        accumulator._txn.epoch = EPOCH + 1
        accumulator._txn._sequences.clear()
        (drained,), _ = accumulator.drain(time.monotonic(), False)
    assert drained[1] == [batch] and batch.base_sequence == 0
    batch.close(PRODUCER_ID, EPOCH + 1, False)
    after = batch.data
    assert after is not before and len(after) == len(before)
    header = read_header(after)
    assert (header.producer_epoch, header.base_sequence) == (EPOCH + 1, 0)
    RecordBatch(after).validate()
    assert after[61:] == before[61:]  # the records untouched


def test_with_producer_state_sets_the_fields_and_the_crc() -> None:
    builder = storage.records.builder.RecordBatchBuilder(
        "lz4", producer_id=1, producer_epoch=2, base_sequence=3, is_transactional=True
    )
    for i in range(10):
        builder.append(b"value %d" % i, timestamp=1_000 + i)
    data = builder.build()
    rewritten = batch_header.with_producer_state(data, 77, 8, 900, False)
    header = read_header(rewritten)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 8, 900)
    assert not header.is_transactional and header.compression == 3 and header.records_count == 10
    assert header.crc == crc32c.crc32c(memoryview(rewritten)[ATTRIBUTES_OFFSET:])
    assert rewritten[:CRC_OFFSET] == data[:CRC_OFFSET]
    builder.set_producer_state(77, 8, 900, False)
    assert builder.build() == rewritten  # what building with that state gives


def test_a_sealed_batch_knows_its_exact_size_and_refuses_appends() -> None:
    for kind in twins.KINDS:
        if kind == "compiled" and not twins.compiled_available():
            continue
        cls = extensions.twin_of(kind, "storage.records.builder", "RecordBatchBuilder")
        builder = cls("zstd")
        for _ in range(200):
            builder.append(b"x" * 100, timestamp=5)
        estimate = builder.estimated_size()
        builder.close_for_record_appends()
        assert builder.is_closed_for_appends
        assert builder.estimated_size() == len(builder.build()) < estimate
        with pytest.raises(ValueError, match="closed for record appends"):
            builder.append(b"late", timestamp=6)
        with pytest.raises(ValueError, match="closed for record appends"):
            builder.append_many([b"late"], timestamps=6)
        with pytest.raises(ValueError, match="needs a producer id"):
            builder.set_producer_state(-1, -1, -1, True)
