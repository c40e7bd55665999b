"""A produce that cannot succeed says why.

A topic with replication factor 1 and ``min.insync.replicas=2``: its leader answers every
acks=all try with NOT_ENOUGH_REPLICAS (retriable), so a record expires after
``delivery.timeout.ms``. The expiry carries the last error the leader gave (in its message
and as its ``__cause__``), each retry is logged once, and ``topics create`` / Admin warn when
such a topic is made.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time

import pytest
from typer.testing import CliRunner

from actors.types import TopicPartition
from rayqueue.cli import app
from rayqueue.errors import KafkaTimeoutError, NotEnoughReplicasError
from rayqueue.producer.accumulator import ProducerBatch

DELIVERY_TIMEOUT_MS = 2500
_names = itertools.count()
_RETRY_LINE = re.compile(r"Got error produce response on topic-partition (\S+), retrying \((\d+) attempts left\)")


def _short_lived(**extra):
    """Producer settings under which a record expires within a few seconds."""
    return dict(acks="all", linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=DELIVERY_TIMEOUT_MS, **extra)


def test_the_timeout_error_names_the_batch_s_last_error():
    batch = ProducerBatch(TopicPartition("t", 0), None)
    batch.records = 1
    assert "last error" not in str(batch.timeout_error(time.monotonic(), "no answer from the leader yet"))
    batch.last_error = NotEnoughReplicasError("t-0: ISR [0] is smaller than min.insync.replicas=2")
    error = batch.timeout_error(time.monotonic(), "no answer from the leader yet")
    assert "(no answer from the leader yet; last error: [NOT_ENOUGH_REPLICAS] t-0: ISR [0]" in str(error)
    assert error.__cause__ is batch.last_error
    # The error that ended the batch is said once, not again as its last error.
    once = batch.timeout_error(time.monotonic(), batch.last_error)
    assert str(once).count("NOT_ENOUGH_REPLICAS") == 1


def test_an_expired_acks_all_produce_says_not_enough_replicas_and_logs_each_retry(cluster, new_topic, caplog):
    topic = new_topic(partitions=1, replication_factor=1, min_insync_replicas=2)
    producer = cluster.producer(**_short_lived(retry_backoff_ms=200))
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="rayqueue.producer.sender"):
            future = producer.send(topic, b"never enough replicas")
            with pytest.raises(KafkaTimeoutError) as expired:
                future.get(30)
        waited = time.monotonic() - started
        retries = producer.metrics()["record-retry-total"]
    finally:
        producer.close()
    message = str(expired.value)
    assert "Expiring 1 record(s)" in message and "NOT_ENOUGH_REPLICAS" in message, message
    assert "min.insync.replicas=2" in message
    assert isinstance(expired.value.__cause__, NotEnoughReplicasError)
    assert waited >= DELIVERY_TIMEOUT_MS / 1000 * 0.9  # it was retried until the deadline, not failed at once
    lines = [m for m in map(_RETRY_LINE.search, (r.getMessage() for r in caplog.records)) if m]
    assert lines and all(m.group(1) == f"{topic}-0" for m in lines)
    assert all("NOT_ENOUGH_REPLICAS" in r.getMessage() for r in caplog.records if _RETRY_LINE.search(r.getMessage()))
    # One line per failed try that went back to be retried: a resend each (the last may expire first).
    assert retries <= len(lines) <= retries + 1, (retries, len(lines))


def test_rayqueue_produce_prints_the_last_error_when_it_expires(cluster, new_topic):
    topic = new_topic(partitions=1, replication_factor=1, min_insync_replicas=2)
    result = CliRunner().invoke(
        app,
        ["produce", topic, "--acks", "all", "-X", f"delivery.timeout.ms={DELIVERY_TIMEOUT_MS}"]
        + ["-X", "request.timeout.ms=1000", "-X", "linger.ms=0"],
        input="one line\n",
    )
    assert result.exit_code == 1, result.output
    output = " ".join(result.output.split())
    assert "Expiring 1 record(s)" in output and "NOT_ENOUGH_REPLICAS" in output, output


def test_topics_create_warns_when_the_replication_factor_is_below_min_insync_replicas(cluster, admin, caplog):
    runner = CliRunner()
    names = [f"min-isr-{os.getpid()}-{next(_names)}" for _ in range(3)]
    try:
        below = runner.invoke(
            app, ["topics", "create", names[0], "--replication-factor", "1", "--config", "min.insync.replicas=2"]
        )
        assert below.exit_code == 0, below.output
        said = " ".join(below.output.split())
        assert "WARNING" in said and "replication factor 1, below its min.insync.replicas=2" in said, said
        fine = runner.invoke(
            app, ["topics", "create", names[1], "--replication-factor", "2", "--config", "min.insync.replicas=2"]
        )
        assert fine.exit_code == 0 and "min.insync.replicas" not in fine.output, fine.output
        # Admin.create_topic says it as a log warning.
        with caplog.at_level(logging.WARNING, logger="rayqueue.admin"):
            admin.create_topic(names[2], 1, 1, configs={"min.insync.replicas": 3})
        warnings = [r.getMessage() for r in caplog.records if r.name == "rayqueue.admin"]
        assert len(warnings) == 1 and "below its min.insync.replicas=3" in warnings[0], warnings
    finally:
        existing = set(admin.list_topics())
        for name in names:
            if name in existing:
                admin.delete_topic(name)
