"""Kafka Streams 4.4.0 against rayqueue: a word count with processing.guarantee=exactly_once_v2.

The application (``java/streams/WordCount.java``) splits lines into words, repartitions by
word (an internal repartition topic it creates through Admin, purged with DeleteRecords),
counts in a RocksDB store backed by a compacted changelog topic (also created by Streams),
and writes each count to an output topic, all inside transactions (one producer per thread,
offsets committed with sendOffsetsToTransaction, its group assigned client-side by
Streams' own "stream" assignor over the classic protocol). Its output, read with
read_committed, must equal a direct count of the input, also after the application is
killed with SIGKILL mid-input and restarted.
"""

from __future__ import annotations

import collections
import random
import struct
import uuid

import pytest

from rayqueue import TopicPartition
from tests.helpers import wait_for
from tests.jvm.records import read_topic

WORDS = [f"w{i:02d}" for i in range(40)]
MAIN = "WordCount"


def lines(seed: int, count: int) -> list[str]:
    """``count`` lines of 1-8 words each, reproducible from ``seed``."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(count)]


def produce_lines(cluster, topic: str, batch: list[str], first_key: int) -> None:
    producer = cluster.producer()
    try:
        keys = [f"line-{first_key + i}".encode() for i in range(len(batch))]
        producer.send_many(topic, [line.encode() for line in batch], keys).get(60)
    finally:
        producer.close()


def direct_count(all_lines: list[str]) -> dict[str, int]:
    return dict(collections.Counter(word for line in all_lines for word in line.split()))


def count_updates(cluster, topic: str, isolation_level: str = "read_committed") -> dict[str, list[int]]:
    """Each word's counts in the order the output holds them (String key, Long value)."""
    updates: dict[str, list[int]] = collections.defaultdict(list)
    for r in read_topic(cluster, topic, isolation_level):
        updates[r.key.decode()].append(struct.unpack(">q", r.value)[0])
    return dict(updates)


def final_counts(updates: dict[str, list[int]]) -> dict[str, int]:
    return {word: counts[-1] for word, counts in updates.items()}


def stop_cleanly(app) -> None:
    """SIGTERM: the shutdown hook closes Streams (commits, leaves the group), which ends in
    NOT_RUNNING (ERROR would mean it failed); the JVM then exits 143, as any JVM ended by
    SIGTERM does."""
    assert app.stop() in (0, 143), app.tail()
    assert "PENDING_SHUTDOWN -> NOT_RUNNING" in app.log.read_text(), app.tail()


@pytest.fixture
def word_count(java_program, java_services, cluster, new_topic, tmp_path):
    """``start() -> JavaService``: the word count application on fresh input/output topics
    (3 partitions each); every start is the same application (id, state directory)."""
    classpath = java_program("streams")
    source, sink = new_topic(partitions=3), new_topic(partitions=3)
    app_id = f"wordcount-{uuid.uuid4().hex[:8]}"
    state_dir = tmp_path / "state"
    runs = []

    def start():
        service = java_services(
            classpath, MAIN, [cluster.bootstrap_servers, app_id, source, sink, str(state_dir)], f"{app_id}-{len(runs)}"
        )
        runs.append(service)
        return service.start()

    start.source, start.sink, start.app_id = source, sink, app_id
    yield start
    admin = cluster.admin()
    for internal in (f"{app_id}-words-repartition", f"{app_id}-word-counts-changelog"):
        try:
            admin.delete_topic(internal)
        except Exception:  # noqa: BLE001 - not created if the application never got that far
            pass


def test_word_count_equals_a_direct_count(cluster, word_count):
    source, sink, app_id = word_count.source, word_count.sink, word_count.app_id
    text = lines(1, 1500)
    produce_lines(cluster, source, text, 0)
    app = word_count()
    expected = direct_count(text)
    wait_for(lambda: final_counts(count_updates(cluster, sink)) == expected, timeout=300, interval=2, what="the counts")
    # Each committed update of a word is a larger count: nothing was counted twice.
    for word, counts in count_updates(cluster, sink).items():
        assert counts == sorted(set(counts)), word

    # The internal topics Streams created through Admin: a repartition topic it purges as it
    # goes (DeleteRecords) and a compacted changelog holding the same counts.
    admin = cluster.admin()
    changelog, repartition = f"{app_id}-word-counts-changelog", f"{app_id}-words-repartition"
    configs = admin.describe_configs(changelog)
    assert configs["cleanup.policy"][0] in ("compact", ["compact"])
    assert final_counts(count_updates(cluster, changelog)) == expected
    consumer = cluster.consumer()
    try:
        tps = consumer.partitions_for_topic(repartition)
        wait_for(
            lambda: sum(consumer.beginning_offsets(tps).values()) > 0,
            timeout=120,
            interval=1,
            what="Streams to purge the repartition topic",
        )
    finally:
        consumer.close()
    stop_cleanly(app)


def test_killed_mid_input_and_restarted_counts_exactly_once(cluster, word_count):
    source, sink = word_count.source, word_count.sink
    first, second, third = lines(2, 1000), lines(3, 1000), lines(4, 1000)
    produce_lines(cluster, source, first, 0)
    app = word_count()
    wait_for(lambda: count_updates(cluster, sink), timeout=300, interval=2, what="the first committed counts")
    # More input while it runs, then a SIGKILL: whatever transaction it has open is left
    # behind, neither committed nor aborted.
    produce_lines(cluster, source, second, 1000)
    app.kill()
    produce_lines(cluster, source, third, 2000)

    app = word_count()  # the same application id and state directory, so the same transactional id
    expected = direct_count(first + second + third)
    wait_for(lambda: final_counts(count_updates(cluster, sink)) == expected, timeout=300, interval=2, what="the counts")
    for word, counts in count_updates(cluster, sink).items():
        assert counts == sorted(set(counts)), f"{word} counted twice: {counts}"
    # The input was consumed through the group's committed offsets, all of it.
    committed = cluster.admin().list_group_offsets(word_count.app_id, [TopicPartition(source, p) for p in range(3)])
    assert sum(om.offset for om in committed.values()) == 3000
    stop_cleanly(app)
