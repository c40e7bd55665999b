"""isolation.level=read_committed in the Consumer (issue #7): Kafka's Fetcher algorithm.

The first tests drive the consumer's filtering with fetch answers built here (a fake leader
that hands out prepared FetchResults, aborted transactions included), so they need no
transactional broker; the last ones append transactional batches and markers to a real
partition leader and read them back in both isolation levels.
"""

from __future__ import annotations

import itertools
import threading

import pytest
import ray

from actors.protocol import (
    AbortedTransaction,
    AddPartitionsToTxnRequest,
    CompleteTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FetchRequest,
    FetchResponse,
    InitProducerIdRequest,
    IsolationLevel,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from actors.protocol_broker import FetchMessagesRequest
from actors.types import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from rayqueue.consumer import Consumer
from rayqueue.metadata import MetadataCache
from storage.batch_header import batch_boundaries, read_header
from storage.records.builder import RecordBatchBuilder
from storage.records.columns import decode_columns
from storage.records.control import build_control_batch
from storage.records.reader import committed_batches
from tests.helpers import wait_for

TS = 1_700_000_000_000


def data_batch(
    base_offset: int, values: list[bytes], producer_id: int = -1, *, txn: bool = False, seq: int = -1, epoch: int = 0
) -> bytes:
    """One batch of ``values`` at ``base_offset`` (transactional when ``txn``)."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=epoch if producer_id >= 0 else -1,
        base_sequence=seq if producer_id >= 0 else -1,
        is_transactional=txn,
    )
    for i, value in enumerate(values):
        builder.append(value, timestamp=TS + base_offset + i)
    return builder.build()


def marker(base_offset: int, producer_id: int, commit: bool) -> bytes:
    """A COMMIT or ABORT control batch of ``producer_id`` at ``base_offset``."""
    return build_control_batch(commit, producer_id, 0, 0, timestamp=TS, base_offset=base_offset)


class Log:
    """An in-memory partition: batches written in order, offsets assigned by hand."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.next_offset = 0
        self.aborted: list[tuple[int, int, int]] = []  # producer id, first offset, last offset (the marker)
        self._open: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def data(self, values: list[bytes], producer_id: int = -1, txn: bool = False) -> list[int]:
        base = self.next_offset
        if txn:
            self._open.setdefault(producer_id, base)
        self.batches.append(data_batch(base, values, producer_id, txn=txn, seq=0 if producer_id >= 0 else -1))
        self.next_offset += len(values)
        return list(range(base, self.next_offset))

    def end_txn(self, producer_id: int, commit: bool) -> int:
        offset = self.next_offset
        self.batches.append(marker(offset, producer_id, commit))
        first = self._open.pop(producer_id)
        if not commit:
            self.aborted.append((producer_id, first, offset))
        self.next_offset += 1
        return offset

    def fetch(self, offset: int, max_bytes: int, isolation_level: IsolationLevel) -> FetchResponse:
        """Whole batches from the one holding ``offset``, at least one, up to ``max_bytes``."""
        out, size, last = [], 0, offset
        for batch in self.batches:
            header = read_header(batch)
            if header.next_offset <= offset:
                continue
            if out and size + len(batch) > max_bytes:
                break
            out.append(batch)
            size += len(batch)
            last = header.last_offset
        aborted = ()
        if isolation_level is IsolationLevel.READ_COMMITTED and out:
            aborted = tuple(
                AbortedTransaction(p, first) for p, first, end in self.aborted if end >= offset and first <= last
            )
        hw = self.next_offset
        return FetchResponse(b"".join(out), hw, hw, 0, hw, 0, aborted)


class FakeLeader:
    """Stands in for a partition leader's ReplicaRef and its host: ``fetch.remote`` answers
    from a Log via ray.put, and the host's ``fetch_messages.remote`` answers each partition
    it names through ``fetch.remote`` (which a test may wrap to watch every fetch)."""

    host_key = "the fake leader's host"

    def __init__(self, log: Log) -> None:
        self.log = log
        self.isolation_levels: set[IsolationLevel] = set()
        self.host = self
        self.fetch = self._Method(self._fetch)
        self.fetch_messages = self._Method(self._fetch_messages)
        self.list_offsets = self._Method(lambda request: OffsetAndTimestamp(0, -1, 0))

    class _Method:
        def __init__(self, fn) -> None:
            self.remote = lambda request: ray.put(fn(request))

    def _fetch_messages(self, request: FetchMessagesRequest) -> list:
        answers: list = []
        for p in request.partitions:
            one = FetchRequest(
                p.fetch_offset,
                p.partition_max_bytes,
                request.max_wait_ms,
                request.min_bytes,
                request.isolation_level,
                p.current_leader_epoch,
            )
            try:
                answers.append(ray.get(self.fetch.remote(one)))
            except Exception as exc:  # noqa: BLE001 - the partition's error, in its answer
                answers.append(exc)
        return answers

    def _fetch(self, request: FetchRequest) -> FetchResponse:
        self.isolation_levels.add(request.isolation_level)
        return self.log.fetch(request.fetch_offset, request.partition_max_bytes, request.isolation_level)


class FakeMetadata(MetadataCache):
    """The consumer's metadata cache, answering with the fake leader (no controller)."""

    def __init__(self, leader: FakeLeader) -> None:
        self._leader = leader

    def leader(self, tp):
        from actors.types import PartitionMetadata

        return PartitionMetadata(tp.topic, tp.partition, 0, 0, (0,), (0,), leader_handle=self._leader)

    def num_partitions(self, topic: str) -> int:
        return 1

    def invalidate(self, topic: str) -> None:
        pass


class FakeCluster:
    controller = None
    namespace = "fake"
    config = {"rayqueue.metrics.enabled": False}  # its clients report no metrics to Ray


TP = TopicPartition("t", 0)


def fake_consumer(log: Log, **config) -> tuple[Consumer, FakeLeader]:
    consumer = Consumer(FakeCluster(), auto_offset_reset="earliest", fetch_max_wait_ms=0, **config)
    leader = FakeLeader(log)
    # The Consumer (assign's partition check) and its Fetcher (leaders) share one cache.
    consumer._metadata = consumer._fetcher._metadata = FakeMetadata(leader)
    consumer.assign([TP])
    return consumer, leader


def poll_until(consumer: Consumer, end: int, timeout: float = 30.0) -> list:
    """Poll until the position reaches ``end``; every record returned on the way."""
    got: list = []

    def done() -> bool:
        got.extend(consumer.poll(50))
        return consumer.position(TP) >= end

    wait_for(done, timeout, what=f"position {end}")
    return got


def interleaved_log() -> tuple[Log, list[int], list[int]]:
    """Two transactional producers (1 aborts, 2 commits) interleaved with plain data and a
    second, committed, transaction of producer 1; returns the log, the offsets a
    read_committed consumer sees and those a read_uncommitted one sees."""
    log = Log()
    aborted = log.data([b"a1", b"a2"], 1, txn=True)  # 0-1
    committed = log.data([b"c1"], 2, txn=True)  # 2
    plain = log.data([b"p1", b"p2"])  # 3-4
    aborted += log.data([b"a3"], 1, txn=True)  # 5
    log.end_txn(1, commit=False)  # 6
    committed += log.data([b"c2", b"c3"], 2, txn=True)  # 7-8
    log.end_txn(2, commit=True)  # 9
    second = log.data([b"d1"], 1, txn=True)  # 10
    log.end_txn(1, commit=True)  # 11
    visible = sorted(committed + plain + second)
    return log, visible, sorted(visible + aborted)


# -- the per-batch filter over one fetch answer ------------------------------------------------


def offsets_of(data: bytes) -> list[int]:
    return decode_columns(data).offset.tolist()


def test_committed_batches_skips_aborted_batches_and_every_marker():
    log, visible, everything = interleaved_log()
    data = b"".join(log.batches)
    assert offsets_of(data) == everything  # the decoder alone skips only the markers
    kept = committed_batches(data, batch_boundaries(data), [(1, 0)])
    assert offsets_of(kept) == visible
    assert all(not read_header(kept, p).is_control for p, _ in batch_boundaries(kept))


def test_committed_batches_abort_marker_ends_the_skip_for_that_producer_only():
    log = Log()
    log.data([b"x"], 7, txn=True)  # 0 aborted
    log.data([b"y"], 8, txn=True)  # 1 aborted too (another producer)
    log.end_txn(7, commit=False)  # 2
    after = log.data([b"z"], 7, txn=True)  # 3: producer 7's next transaction
    still = log.data([b"w"], 8, txn=True)  # 4: producer 8 is still inside its aborted txn
    log.end_txn(8, commit=False)  # 5
    log.end_txn(7, commit=True)  # 6
    data = b"".join(log.batches)
    kept = committed_batches(data, batch_boundaries(data), [(8, 1), (7, 0)])  # any order
    assert offsets_of(kept) == after
    assert still[0] not in offsets_of(kept)


def test_committed_batches_txn_that_began_before_the_fetch_and_one_that_begins_later():
    log = Log()
    log.data([b"a"], 3, txn=True)  # 0: aborted, before the fetch start
    log.data([b"n1"])  # 1
    log.data([b"b"], 3, txn=True)  # 2: same aborted txn
    log.end_txn(3, commit=False)  # 3
    log.data([b"n2"])  # 4
    later = log.data([b"c"], 4, txn=True)  # 5: producer 4's first txn commits ...
    log.end_txn(4, commit=True)  # 6
    log.data([b"d"], 4, txn=True)  # 7: ... its second aborts
    log.end_txn(4, commit=False)  # 8
    data = b"".join(log.batches[1:])  # a fetch from offset 1
    kept = committed_batches(data, batch_boundaries(data), [(3, 0), (4, 7)])
    assert offsets_of(kept) == [1, 4, *later]


def test_committed_batches_keeps_the_buffer_when_nothing_goes():
    log = Log()
    log.data([b"a", b"b"])
    log.data([b"c"], 5, txn=True)
    data = b"".join(log.batches)
    assert committed_batches(data, batch_boundaries(data), [(6, 0)]) is data


# -- the consumer over fetch answers built here --------------------------------------------


@pytest.mark.parametrize("iterate", [False, True], ids=["poll", "iterate"])
def test_read_committed_consumer_drops_aborted_data(ray_session, iterate):
    log, visible, _ = interleaved_log()
    consumer, leader = fake_consumer(log, isolation_level="read_committed", max_partition_fetch_bytes=150)
    try:
        if iterate:
            got = list(itertools.islice(consumer, len(visible)))
        else:
            got = poll_until(consumer, log.next_offset)
        assert [r.offset for r in got] == visible
        assert all(r.value[:1] in (b"c", b"p", b"d") for r in got)
        # Past the last marker, though no record of it was handed out.
        wait_for(lambda: consumer.poll(0) is not None and consumer.position(TP) == log.next_offset, 10)
        assert leader.isolation_levels == {1}
    finally:
        consumer.close()


def test_read_uncommitted_consumer_sees_aborted_data_but_no_markers(ray_session):
    log, _, everything = interleaved_log()
    consumer, leader = fake_consumer(log)
    try:
        got = poll_until(consumer, log.next_offset)
        assert [r.offset for r in got] == everything
        assert consumer.position(TP) == log.next_offset
        assert leader.isolation_levels == {0}
    finally:
        consumer.close()


def test_aborted_txn_spanning_many_fetches_is_dropped_in_each(ray_session):
    log = Log()
    expected = []
    for i in range(20):
        log.data([b"x%d" % i] * 3, 9, txn=True)  # producer 9's aborted txn, over many fetches
        expected += log.data([b"ok%d" % i])
    log.end_txn(9, commit=False)
    expected += log.data([b"tail"])
    consumer, _ = fake_consumer(log, isolation_level="read_committed", max_partition_fetch_bytes=200)
    try:
        got = poll_until(consumer, log.next_offset)
        assert [r.offset for r in got] == expected
    finally:
        consumer.close()


def test_fetch_of_only_markers_and_aborted_data_still_moves_the_position(ray_session):
    log = Log()
    log.data([b"gone"], 4, txn=True)  # 0
    log.end_txn(4, commit=False)  # 1
    consumer, _ = fake_consumer(log, isolation_level="read_committed")
    try:
        assert poll_until(consumer, 2) == []
        keep = log.data([b"kept"])  # 2
        got = poll_until(consumer, 3)
        assert [r.offset for r in got] == keep
    finally:
        consumer.close()


def test_position_and_seek_inside_a_fetch_while_iterating(ray_session):
    log = Log()
    for i in range(10):
        log.data([b"%d" % (10 * i + j) for j in range(10)])
    consumer, _ = fake_consumer(log)
    try:
        it = iter(consumer)
        first = [next(it) for _ in range(15)]
        assert [r.offset for r in first] == list(range(15))
        assert consumer.position(TP) == 15  # exactly past what was handed out
        consumer.seek(TP, 40)
        assert next(it).offset == 40  # the rest of the fetch under way is dropped
        consumer.pause([TP])
        assert consumer.position(TP) == 41
        assert not consumer.poll(100)
        consumer.resume([TP])
        # A poll after a loop was left picks up where the loop stopped.
        got = poll_until(consumer, 100)
        assert [r.offset for r in got] == list(range(41, 100))
    finally:
        consumer.close()


# -- against a partition leader holding transactional batches and markers -------------------

_transactional_ids = itertools.count()


class TxnWriter:
    """Appends plain and transactional batches to a leader, the transactions run by the
    transaction coordinator (the leader verifies each producer's first batch of a transaction
    with it, KIP-890, and the coordinator writes the markers).

    The records carry timestamps from 2023 (TS) and the markers today's: the first marker rolls
    the segment (segment.ms against its first timestamp), and retention would then delete the
    closed one while the test reads, so the tests' topics keep everything (retention.ms=-1).
    """

    def __init__(self, cluster, topic: str) -> None:
        meta = cluster.metadata([topic]).topics[topic].partitions[0]
        self.leader, self.epoch = meta.leader_handle, meta.leader_epoch
        self.tp = TopicPartition(topic, 0)
        self.coordinator = cluster.transaction_coordinator
        self.producers: dict[str, list[int]] = {}  # transactional id -> [pid, epoch, next sequence]
        self.open: set[str] = set()

    def producer(self) -> str:
        """A new transactional producer; its transactional id."""
        tid = f"{self.tp.topic}-txn-{next(_transactional_ids)}"
        ident = ray.get(self.coordinator.init_producer_id.remote(InitProducerIdRequest(tid)))
        self.producers[tid] = [ident.producer_id, ident.epoch, 0]
        return tid

    def send(self, values: list[bytes], tid: str | None = None) -> list[int]:
        if tid is None:
            request = ProduceRequest(data_batch(0, values), -1, 30000, self.epoch)
        else:
            pid, epoch, seq = self.producers[tid]
            if tid not in self.open:
                add = AddPartitionsToTxnRequest(tid, pid, epoch, [self.tp])
                ray.get(self.coordinator.add_partitions_to_txn.remote(add))
                self.open.add(tid)
            self.producers[tid][2] = seq + len(values)
            batch = data_batch(0, values, pid, txn=True, seq=seq, epoch=epoch)
            request = ProduceRequest(batch, -1, 30000, self.epoch, transactional_id=tid)
        result = ray.get(self.leader.produce.remote(request))
        return list(range(result.base_offset, result.last_offset + 1))

    def end(self, tid: str, commit: bool) -> int:
        """End ``tid``'s transaction through the coordinator; the offset of its marker (the
        partition's last record once the transaction is complete: the tests write nothing
        meanwhile)."""
        pid, epoch, _ = self.producers[tid]
        ray.get(self.coordinator.end_txn.remote(EndTxnRequest(tid, pid, epoch, commit)))
        self.open.discard(tid)
        state = "CompleteCommit" if commit else "CompleteAbort"

        def done():
            desc = ray.get(self.coordinator.describe_transactions.remote(DescribeTransactionsRequest([tid])))[0]
            return desc if desc.state == state else None

        desc = wait_for(done, 60, what=f"{tid} {state}")
        self.producers[tid][1] = desc.producer_epoch  # a new epoch for the next transaction, if bumped
        fetch = FetchRequest(0, 1, 0, 0, IsolationLevel.READ_UNCOMMITTED, current_leader_epoch=self.epoch)
        return ray.get(self.leader.fetch.remote(fetch)).high_watermark - 1


def read_to(cluster, topic: str, end: int, **config) -> list:
    consumer = cluster.consumer(auto_offset_reset="earliest", **config)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    got: list = []
    try:
        wait_for(lambda: got.extend(consumer.poll(100)) or consumer.position(tp) >= end, 60, what=f"position {end}")
        assert consumer.position(tp) == end
        return got
    finally:
        consumer.close()


def test_broker_interleaved_producers_in_both_isolation_levels(cluster, new_topic):
    topic = new_topic(retention_ms=-1)  # records stamped TS (2023): kept, see TxnWriter
    log = TxnWriter(cluster, topic)
    a, b = log.producer(), log.producer()
    aborted = log.send([b"a1", b"a2"], a)
    committed = log.send([b"b1"], b)
    plain = log.send([b"p1"])
    aborted += log.send([b"a3"], a)
    markers = [log.end(a, commit=False)]
    committed += log.send([b"b2", b"b3"], b)
    markers.append(log.end(b, commit=True))
    committed += log.send([b"a4"], a)  # producer a's next transaction commits
    markers.append(log.end(a, commit=True))
    end = markers[-1] + 1

    rc = read_to(cluster, topic, end, isolation_level="read_committed")
    assert [r.offset for r in rc] == sorted(committed + plain)
    assert [r.value for r in rc] == [b"b1", b"p1", b"b2", b"b3", b"a4"]
    ru = read_to(cluster, topic, end)
    assert [r.offset for r in ru] == sorted(committed + plain + aborted)
    assert not set(markers) & {r.offset for r in rc + ru}


@pytest.mark.parametrize("iterate", [False, True], ids=["poll", "iterate"])
def test_broker_open_transaction_holds_read_committed_at_the_lso(cluster, new_topic, iterate):
    topic = new_topic(retention_ms=-1)  # records stamped TS (2023): kept, see TxnWriter
    tp = TopicPartition(topic, 0)
    log = TxnWriter(cluster, topic)
    before = log.send([b"before"])
    pid = log.producer()
    pending = log.send([b"t1", b"t2"], pid)
    after = log.send([b"after"])  # past the LSO while the transaction is open
    consumer = cluster.consumer(auto_offset_reset="earliest", isolation_level="read_committed", fetch_max_wait_ms=100)
    consumer.assign([tp])
    try:
        assert consumer.end_offsets([tp]) == {tp: pending[0]}
        if iterate:
            it = iter(consumer)
            assert next(it).offset == before[0]
        else:
            got = []
            wait_for(lambda: got.extend(consumer.poll(100)) or got, 30)
            assert [r.offset for r in got] == before
        assert consumer.position(tp) == pending[0]
        assert not consumer.poll(300)  # nothing past the LSO
        marker = log.end(pid, commit=True)
        got = []
        wait_for(lambda: got.extend(consumer.poll(100)) or len(got) >= 3, 30)
        assert [r.offset for r in got] == pending + after
        assert consumer.end_offsets([tp]) == {tp: marker + 1}
        # The marker may come in a later fetch than the data; it moves the position all the same.
        wait_for(lambda: not consumer.poll(50) and consumer.position(tp) == marker + 1, 30)
    finally:
        consumer.close()


def test_group_offset_fetch_waits_for_a_pending_transactional_commit(cluster, new_topic):
    from actors.names import OFFSETS_TOPIC, offsets_partition_for
    from storage.errors import UnstableOffsetCommitError

    topic = new_topic(retention_ms=-1)  # records stamped TS (2023): kept, see TxnWriter
    tp = TopicPartition(topic, 0)
    group = f"rc-group-{topic}"
    coordinator = cluster.group_coordinator
    first = cluster.consumer(group_id=group, enable_auto_commit=False)
    first.assign([tp])
    first.commit({tp: 2})
    first.close()
    pid = 1 << 40  # an id the transaction coordinator never hands out: the group coordinator alone sees it
    ray.get(
        coordinator.txn_offset_commit.remote(
            TxnOffsetCommitRequest("rc-txn", pid, 0, group, {tp: OffsetAndMetadata(7)}, "", None, -1)
        )
    )

    plain = cluster.consumer(group_id=group, enable_auto_commit=False)
    assert plain.committed([tp])[tp].offset == 2  # read_uncommitted: the last stable commit
    plain.close()
    impatient = cluster.consumer(
        group_id=group, isolation_level="read_committed", enable_auto_commit=False, default_api_timeout_ms=1000
    )
    with pytest.raises(UnstableOffsetCommitError):
        impatient.committed([tp])  # retried until default.api.timeout.ms, then raised
    impatient.close()

    consumer = cluster.consumer(group_id=group, isolation_level="read_committed", enable_auto_commit=False)
    calls = []
    real = consumer._group._handle

    class Counting:
        """The coordinator handle, counting offset fetches."""

        def __getattr__(self, name):
            return getattr(real, name)

        @property
        def fetch_offsets(self):
            calls.append(1)
            return real.fetch_offsets

    consumer._group._handle = Counting()
    answer: dict = {}
    waiter = threading.Thread(target=lambda: answer.update(consumer.committed([tp])))
    waiter.start()
    try:
        wait_for(lambda: len(calls) >= 2, 30, what="a retried offset fetch")
        assert not answer
        meta = cluster.metadata([OFFSETS_TOPIC]).topics[OFFSETS_TOPIC].partitions
        part = meta[offsets_partition_for(group, len(meta))]
        ray.get(part.leader_handle.write_txn_marker.remote(WriteTxnMarkersRequest(pid, 0, 0, True, part.leader_epoch)))
        ray.get(coordinator.complete_txn.remote(CompleteTxnRequest(pid, True)))
        waiter.join(30)
        assert answer[tp].offset == 7
    finally:
        waiter.join(30)
        consumer.close()
