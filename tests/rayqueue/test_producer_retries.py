"""Retries as state the sender checks: a batch that failed with a retriable error
carries ``retry_at`` and goes again after retry.backoff.ms, with no thread per failure;
``can_retry()`` ends it at ``retries`` or delivery.timeout.ms with Kafka's errors."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import ray

from actors.protocol_broker import PartitionRequests
from actors.types import TopicPartition
from rayqueue.config import producer_config
from rayqueue.errors import KafkaTimeoutError, NotLeaderOrFollowerError
from rayqueue.producer.accumulator import ProducerBatch, RecordAccumulator
from rayqueue.producer.transaction_manager import TransactionManager
from storage.records.builder import RecordBatchBuilder
from tests.helpers import LostCall, wait_for

# Every test here runs over both twins of the record codec (the producer's builder, the readers) (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")


def replica_failing_first(real, failures: int, calls: list):
    """A fake leader host in front of the real one: the first ``failures`` requests of each
    partition answer NotLeaderOrFollower (retriable), later ones reach the real leader (in
    one call for those of the host's call). Records (partition, monotonic time) of every
    partition's request."""

    def append_records(host, request):
        passing, answers = [], []
        for entry in request.entries:
            partition = entry[1]
            calls.append((partition, time.monotonic()))
            if sum(1 for p, _ in calls if p == partition) > failures:
                passing.append(entry)
                answers.append(None)
            else:
                answers.append(NotLeaderOrFollowerError(f"injected: broker is not the leader of partition {partition}"))
        if passing:
            real_answers = iter(ray.get(real(host, PartitionRequests(tuple(passing))), timeout=60))
            answers = [next(real_answers) if a is None else a for a in answers]
        answer = LostCall()
        answer.answer(answers)
        return answer

    return append_records


def test_a_failed_batch_goes_again_after_retry_backoff_and_no_thread_is_started(cluster, new_topic):
    """Eight partitions fail four times each: every resend comes retry.backoff.ms or more
    after the failed call, every record lands once, and the process holds no more threads
    than before while the failures are retried (a Timer per failure would add them)."""
    topic = new_topic(partitions=8)
    producer = cluster.producer(acks=1, linger_ms=0, retry_backoff_ms=200)
    for p in range(8):  # metadata cached and every thread the path needs started
        producer.send(topic, b"warm", partition=p).get(30)
    baseline = threading.active_count()
    calls: list = []
    producer._sender.append_records = replica_failing_first(producer._sender.append_records, 4, calls)
    futures = [producer.send(topic, b"p%d" % p, partition=p) for p in range(8)]
    threads: list[int] = []
    timers: list[str] = []

    def sampled_until_done() -> bool:
        threads.append(threading.active_count())
        timers.extend(t.name for t in threading.enumerate() if isinstance(t, threading.Timer))
        return all(f.done() for f in futures)

    wait_for(sampled_until_done, timeout=60, interval=0.005, what="every retried record")
    producer.close()
    assert [f.get(0).offset for f in futures] == [1] * 8
    assert len(threads) > 50  # sampled throughout about a second of retries
    assert max(threads) <= baseline and not timers
    for p in range(8):
        times = [t for q, t in calls if q == p]
        assert len(times) == 5  # four failures, then the success
        assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(times))


def test_retries_end_with_kafkas_errors(cluster, new_topic):
    """A leader that never accepts: with ``retries=2`` the third failure is the batch's
    error (the retriable error itself, as Kafka reports it); with retries left, the batch
    fails once delivery.timeout.ms has passed, as Kafka's TimeoutException."""
    topic = new_topic()
    producer = cluster.producer(acks=1, linger_ms=0, retries=2, retry_backoff_ms=20)
    calls: list = []
    producer._sender.append_records = replica_failing_first(producer._sender.append_records, 10**9, calls)
    with pytest.raises(NotLeaderOrFollowerError, match="injected"):
        producer.send(topic, b"x").get(30)
    assert len(calls) == 3
    producer.close()

    producer = cluster.producer(
        acks=1, linger_ms=0, request_timeout_ms=500, delivery_timeout_ms=1000, retry_backoff_ms=50
    )
    calls.clear()
    producer._sender.append_records = replica_failing_first(producer._sender.append_records, 10**9, calls)
    sent = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=r"Expiring 1 record\(s\) for .*since batch creation"):
        producer.send(topic, b"y").get(30)
    assert time.monotonic() - sent >= 1.0
    assert len(calls) >= 5  # it was retried, every 50 ms, until then
    producer.close()


def test_can_retry_counts_attempts_and_delivery_timeout(cluster):
    producer = cluster.producer(acks=1, retries=3, request_timeout_ms=500, delivery_timeout_ms=1000)
    sender = producer._sender
    now = time.monotonic()
    batch = ProducerBatch(TopicPartition("t", 0), RecordBatchBuilder())
    batch.records = 1
    batch.created, batch.attempts = now - 0.5, 3
    assert sender.can_retry(batch, now)
    batch.attempts = 4  # the first send and three retries
    assert not sender.can_retry(batch, now)
    batch.attempts, batch.created = 1, now - 1.001
    assert not sender.can_retry(batch, now)
    error = batch.timeout_error(now, NotLeaderOrFollowerError("not the leader"))
    assert isinstance(error, KafkaTimeoutError) and error.retriable and error.code == -2
    assert "Expiring 1 record(s) for t-0: 1001 ms has passed since batch creation (" in str(error)
    assert "not the leader)" in str(error)
    producer.close()


def test_a_requeued_batch_holds_its_partition_until_retry_at_and_its_calls_answered():
    """The accumulator's retry state, without Ray: a re-queued batch is muted while another
    call of its partition is in flight, is not drained before its retry_at, and names
    retry_at as the time the sender must wake."""
    config = producer_config(acks="1", linger_ms=0)
    accumulator = RecordAccumulator(config, None, None, TransactionManager(None, None, 60000, 0.1, 60), False)
    tp = TopicPartition("t", 0)
    lock = accumulator.lock
    accumulator.append_columns(tp, [b"a"], None, None, 0)
    now = time.monotonic()
    with lock:
        (first,), _ = accumulator.drain(now, False)
    accumulator.append_columns(tp, [b"b"], None, None, 0)
    with lock:
        (second,), _ = accumulator.drain(now, False)  # two calls of the partition in flight
        accumulator.request_done(tp, first[2])  # the first failed ...
        accumulator.reenqueue(tp, first[1], now + 0.3)  # ... and goes back
        assert not accumulator.has_sendable(now + 1, False)  # muted: the second is in flight
        accumulator.request_done(tp, second[2])  # the second answered: unmuted ...
        assert not accumulator.has_sendable(now, False)  # ... but backing off
        assert accumulator.next_wake(now) == pytest.approx(now + 0.3)
        assert accumulator.has_sendable(now + 0.3, False)
        (again,), _ = accumulator.drain(now + 0.3, False)
    assert again[1] == first[1]
