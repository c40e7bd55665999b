"""Kafka's per-connection discipline with a real client: a confluent-kafka producer with
``linger.ms=0`` floods a partition (librdkafka keeps up to five requests in flight on its
connection). The listener, in the leader's own process, works on one request of a connection
at a time and reads the next only once it has answered (Kafka's muted channel), so what waits
is in the client and in TCP, never queued in the broker: its requests in processing never
exceed its connections, its request memory stays within one request per connection, and every
record arrives once, in order."""

from __future__ import annotations

import threading

from confluent_kafka import Producer

from actors.types import TopicPartition
from tests.helpers import consume_all, listener_stats

RECORDS = 100_000
MAX_REQUEST = 1_000_000  # librdkafka's message.max.bytes: no produce request is larger


def test_a_linger_0_producer_is_paced_by_the_listener(cluster, new_topic):
    topic = new_topic(partitions=1)
    leader = cluster.metadata([topic]).topics[topic].partitions[0].leader
    samples: list[dict] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(listener_stats(cluster, leader))
            stop.wait(0.02)  # a sample every 20 ms until the producer is done

    sampler = threading.Thread(target=sample, daemon=True)
    delivered: list[tuple[int, bytes]] = []
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            delivered.append((msg.offset(), msg.value()))
        else:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0, "acks": 1})
    sampler.start()
    try:
        for i in range(RECORDS):
            while True:
                try:
                    producer.produce(topic, b"%06d" % i + b"x" * 94, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:  # the client's own queue is full: the broker paces it
                    producer.poll(0.01)
            if i % 500 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0
    finally:
        stop.set()
        sampler.join(30)
    assert not failed, failed[:3]
    assert len(samples) >= 3  # taken while the producer flooded
    for stats in samples:
        # One request per connection in processing; what a connection holds in the broker is
        # at most that request.
        assert stats["requests_in_flight"] <= stats["connections"], stats
        assert stats["request_memory"] <= stats["connections"] * MAX_REQUEST, stats
    assert [v for _, v in sorted(delivered)] == [b"%06d" % i + b"x" * 94 for i in range(RECORDS)]
    assert [o for o, _ in sorted(delivered)] == list(range(RECORDS))
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    try:
        got = consume_all(consumer, RECORDS)
    finally:
        consumer.close()
    assert [r.value for r in got] == [b"%06d" % i + b"x" * 94 for i in range(RECORDS)]
