"""Replays that survive unreadable records, without Ray.

The group coordinator's load of ``__consumer_offsets``, the transaction coordinator's load of
``__transaction_state`` and the controller's replay of its metadata log are fed good records
among garbage (bad JSON, bad UTF-8, truncated values, wrong types, unknown key versions,
record types or references, a batch that does not decode): each loads what it can read,
skips the rest with one log line naming topic, partition and offset, counts it, and leaves a
good entry untouched by a bad record for the same key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re

import crc32c
import pytest

from actors.controller.quorum_controller import QuorumController
from actors.group_coordinator import GroupCoordinator, encode_offset, group_key, offset_key
from actors.metadata_log import MetadataLog
from actors.transaction_coordinator import TransactionCoordinator, transaction_key
from actors.types import OffsetAndMetadata, TopicPartition
from storage import Log, log_config
from storage.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET
from storage.records.builder import RecordBatchBuilder
from storage.records.control import build_control_batch
from storage.records.reader import iter_batches

NO_METRICS = {"rayqueue.metrics.enabled": False}
TP = TopicPartition("t", 0)


def _batch(records, base_offset=0, producer_id=-1, transactional=False) -> bytes:
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        is_transactional=transactional,
    )
    for key, value in records:
        builder.append(value, key=key)
    return builder.build()


def _replaying(coordinator, batches: list[bytes]) -> None:
    """Make ``coordinator._topic.replay`` yield ``batches`` as partition 0's log."""

    async def replay():
        for data in batches:
            for batch in iter_batches(data):
                yield 0, batch, 0

    coordinator._topic.replay = replay


def _skip_lines(caplog, topic: str) -> list[int]:
    """Offsets of the skip lines logged for ``topic``-0."""
    found = [re.search(rf"at offset (\d+) of {topic}-0: ", r.getMessage()) for r in caplog.records]
    return sorted(int(m.group(1)) for m in found if m)


GOOD_GROUP = {"generation": 3, "protocol": "range", "leader": "", "members": []}
BAD_OFFSETS = [
    (b"not-json", b"{}"),  # the record from the issue: any value
    (b"\xff\xfe\x00", b"{}"),  # not UTF-8
    (b"true", b"{}"),  # JSON, not a key
    (json.dumps([True, "g", "t", 0]).encode(), encode_offset(OffsetAndMetadata(1))),  # true is not version 1
    (json.dumps([1, "g", "t"]).encode(), b"{}"),  # a short offset key
    (json.dumps([1, "g", "t", "0"]).encode(), encode_offset(OffsetAndMetadata(1))),  # partition of the wrong type
    (json.dumps([9, "g"]).encode(), b"{}"),  # an unknown key version
    (offset_key("g1", TP), b'{"offset": 1'),  # truncated
    (offset_key("g1", TP), b'{"offset": "7"}'),  # the wrong type
    (offset_key("g1", TP), b"[1, 2]"),  # not an object
    (offset_key("g1", TP), b'{"metadata": ""}'),  # the offset missing
    (group_key("g1"), b'{"generation": "one"}'),
    (group_key("g1"), json.dumps({**GOOD_GROUP, "members": [{"member_id": 5}]}).encode()),
    (group_key("g1"), json.dumps({**GOOD_GROUP, "members": [{"member_id": "m", "session_timeout_ms": 1}]}).encode()),
    (None, b"{}"),  # no key
]


def test_group_coordinator_load_skips_unreadable_offsets_records(caplog):
    coordinator = GroupCoordinator("ns", NO_METRICS)
    good = [
        (offset_key("g1", TP), encode_offset(OffsetAndMetadata(42, "meta"))),
        (group_key("g1"), json.dumps(GOOD_GROUP).encode()),
    ]
    pending = [(offset_key("g2", TP), encode_offset(OffsetAndMetadata(9)))]
    batches = [
        _batch(good),
        *(_batch([record], base_offset=2 + i) for i, record in enumerate(BAD_OFFSETS)),
        # A transactional commit, a garbage record in the same transaction, then its marker.
        _batch([*pending, (offset_key("g2", TP), b"{bad")], base_offset=100, producer_id=7, transactional=True),
        build_control_batch(True, 7, 0),
    ]
    _replaying(coordinator, batches)
    with caplog.at_level(logging.ERROR, logger="actors.internal_records"):
        asyncio.run(coordinator._load())
    assert coordinator._loaded
    group = coordinator.state.groups.get("g1")
    # Every good record applied; none of the bad ones for the same keys changed anything.
    assert coordinator.state.offsets.committed("g1") == {TP: OffsetAndMetadata(42, "meta")}
    assert group.generation == 3 and group.protocol == "range" and not group.members
    assert coordinator.state.offsets.committed("g2") == {TP: OffsetAndMetadata(9)}
    expected = [2 + i for i in range(len(BAD_OFFSETS))] + [101]
    assert asyncio.run(coordinator.skipped_records()) == len(expected)
    assert _skip_lines(caplog, "__consumer_offsets") == expected


def test_group_coordinator_skips_a_batch_whose_records_do_not_decode(caplog):
    coordinator = GroupCoordinator("ns", NO_METRICS)
    broken = bytearray(_batch([(offset_key("g1", TP), encode_offset(OffsetAndMetadata(5)))], base_offset=3))
    # The record's tail overwritten under a recomputed CRC: the batch is stored and fetched,
    # only its record cannot be decoded (a varint running past the end).
    broken[-6:] = b"\xff" * 6
    broken[CRC_OFFSET : CRC_OFFSET + 4] = crc32c.crc32c(bytes(broken[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    good = _batch([(offset_key("g1", TP), encode_offset(OffsetAndMetadata(6)))], base_offset=4)
    _replaying(coordinator, [bytes(broken), good])
    with caplog.at_level(logging.ERROR, logger="actors.internal_records"):
        asyncio.run(coordinator._load())
    assert coordinator.state.offsets.committed("g1") == {TP: OffsetAndMetadata(6)}
    assert asyncio.run(coordinator.skipped_records()) == 1
    assert _skip_lines(caplog, "__consumer_offsets") == [3]


GOOD_TXN = {
    "producer_id": 11,
    "producer_epoch": 2,
    "last_producer_id": -1,
    "last_producer_epoch": -1,
    "timeout_ms": 60000,
    "state": "CompleteCommit",
    "partitions": [["t", 0]],
    "start_ms": 1,
    "last_update_ms": 2,
}
BAD_TXNS = [
    (b"not-json", b"{}"),
    (b"\xc3\x28", b"{}"),  # invalid UTF-8, as in the UnicodeDecodeError
    (json.dumps([0]).encode(), b"{}"),
    (json.dumps([1, "tid"]).encode(), json.dumps(GOOD_TXN).encode()),  # an unknown key version
    (json.dumps([False, "tid"]).encode(), json.dumps(GOOD_TXN).encode()),
    (transaction_key("tid"), json.dumps(GOOD_TXN).encode()[:20]),  # truncated
    (transaction_key("tid"), json.dumps({**GOOD_TXN, "state": "Bogus"}).encode()),
    (transaction_key("tid"), json.dumps({**GOOD_TXN, "producer_epoch": "2"}).encode()),
    (transaction_key("tid"), json.dumps({**GOOD_TXN, "partitions": [["t"]]}).encode()),
    (transaction_key("tid"), b"\xff"),
    (None, b"{}"),
]


def test_transaction_coordinator_load_skips_unreadable_state_records(caplog):
    coordinator = TransactionCoordinator("ns", NO_METRICS)
    batches = [_batch([(transaction_key("tid"), json.dumps(GOOD_TXN).encode())])]
    batches += [_batch([record], base_offset=1 + i) for i, record in enumerate(BAD_TXNS)]
    _replaying(coordinator, batches)
    with caplog.at_level(logging.ERROR, logger="actors.internal_records"):
        asyncio.run(coordinator._load())
    assert coordinator._loaded
    txn = coordinator.state.get("tid")
    assert (txn.producer_id, txn.producer_epoch, txn.state) == (11, 2, "CompleteCommit")
    assert txn.partitions == {TP}
    expected = [1 + i for i in range(len(BAD_TXNS))]
    assert asyncio.run(coordinator.skipped_records()) == len(expected)
    assert _skip_lines(caplog, "__transaction_state") == expected


def test_controller_replay_skips_unreadable_metadata_records(tmp_path, caplog):
    # The controller's state without its actor: only the replay (and its writes) run, without Ray.
    directory = tmp_path / "__cluster_metadata-0"
    metadata = MetadataLog(directory)
    for record in [
        {"type": "cluster", "cluster_id": "c1"},
        {"type": "controller_epoch", "epoch": 4},
        {"type": "broker", "broker_id": 0, "node_id": "n", "data_dir": str(tmp_path / "broker-0"), "alive": True},
        {"type": "topic", "name": "kept", "configs": {}, "topic_id": "id-1"},
    ]:
        metadata.append(record)
    metadata.close()
    partition = {"type": "partition", "topic": "kept", "partition": 0, "replicas": [0], "leader": 0}
    partition.update(leader_epoch=0, isr=[0], partition_epoch=0)
    garbage = [
        b"not-json",
        b"\xff\xfe",
        b'{"type": "topic", "name": "x"',  # truncated
        b"[1, 2]",
        b'{"no": "type"}',
        json.dumps({"type": "from-the-future"}).encode(),
        json.dumps({"type": "broker", "broker_id": "zero", "node_id": "n", "data_dir": "d"}).encode(),
        json.dumps({"type": "listener", "broker_id": 7, "host": "h", "port": 1}).encode(),  # no such broker
        json.dumps({**partition, "topic": "missing"}).encode(),
        json.dumps({**partition, "partition": 5}).encode(),  # beyond the topic's partitions
        json.dumps({**partition, "replicas": ["0"]}).encode(),
        json.dumps({"type": "controller_epoch", "epoch": True}).encode(),
        None,
    ]
    log = Log(directory, log_config({}))
    first = log.log_end_offset
    for value in garbage:
        builder = RecordBatchBuilder()
        builder.append(value, key=b"junk")
        log.append(builder.build())
    builder = RecordBatchBuilder()
    builder.append(json.dumps(partition).encode(), key=b"partition")
    log.append(builder.build())
    log.close()

    with caplog.at_level(logging.ERROR, logger="actors.internal_records"):
        quorum = QuorumController({"log.dirs": str(tmp_path), **NO_METRICS})
    try:
        assert quorum.cluster.cluster_id == "c1" and quorum.cluster.controller_epoch == 5  # 4, then this start's
        assert list(quorum.cluster.brokers) == [0] and list(quorum.replication.topics) == ["kept"]
        assert [(p.replicas, p.leader) for p in quorum.replication.topics["kept"].partitions] == [([0], 0)]
        assert quorum.skipped.count == len(garbage)
        assert _skip_lines(caplog, "__cluster_metadata") == list(range(first, first + len(garbage)))
    finally:
        quorum.close()


@pytest.mark.parametrize("value", [b"\x00", b"{}", b'{"type": 1}'])
def test_metadata_log_replay_leaves_out_records_without_a_type(tmp_path, value):
    metadata = MetadataLog(tmp_path / "m")
    metadata.append({"type": "cluster", "cluster_id": "c"})
    builder = RecordBatchBuilder()
    builder.append(value, key=b"k")
    metadata._log.append(builder.build())
    metadata.append({"type": "controller_epoch", "epoch": 1})
    assert list(metadata.replay()) == [
        {"type": "cluster", "cluster_id": "c"},
        {"type": "controller_epoch", "epoch": 1},
    ]
    metadata.close()
