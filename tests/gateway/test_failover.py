"""A partition leader dies while confluent-kafka produces (acks=all) and consumes through
the gateways: the clients follow NOT_LEADER_OR_FOLLOWER to the new leader, nothing the
producer saw acknowledged is lost, and the idempotent producer's retries add no duplicates."""

from __future__ import annotations

import threading

from actors.types import TopicPartition
from tests.helpers import consume_all, kill_broker, wait_for

TOTAL = 4000


def test_acknowledged_records_survive_a_leader_kill(failover_cluster, failover_topic, failover_bootstrap):
    cluster, new_topic, bootstrap = failover_cluster, failover_topic, failover_bootstrap
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CkTP

    topic = new_topic(partitions=1, replication_factor=3, min_insync_replicas=2)
    before = cluster.metadata([topic]).topics[topic].partitions[0]
    acked: list[bytes] = []
    failed: list[str] = []
    consumed: list[bytes] = []
    stop = threading.Event()
    killed = threading.Event()

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            failed.append(str(err))

    def produce() -> None:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "retry.backoff.ms": 50,
            }
        )
        for i in range(TOTAL):
            if i == TOTAL // 2:
                # The second half goes out only once the leader is dead, so that it is
                # produced across the failover (on a quiet machine the whole run could
                # otherwise be acknowledged before the kill lands).
                producer.flush(120)
                killed.wait(120)
            producer.produce(topic, value=b"%d" % i, on_delivery=on_delivery)
            producer.poll(0)
            if i % 100 == 99:
                producer.poll(0.02)  # spread the records over the kill (delivery reports meanwhile)
        producer.flush(120)

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover", "enable.auto.commit": False})
        consumer.assign([CkTP(topic, 0, 0)])
        try:
            while not stop.is_set():
                consumed.extend(m.value() for m in consumer.consume(500, 0.2) if m.error() is None)
        finally:
            consumer.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= TOTAL // 2, timeout=120, what="the first half acknowledged")
        kill_broker(before.leader_handle)
        killed.set()
        threads[0].join(180)
        assert not threads[0].is_alive(), "the producer did not finish"
        wait_for(
            lambda: cluster.metadata([topic]).topics[topic].partitions[0].leader_epoch > before.leader_epoch,
            timeout=60,
            what="a new leader epoch after the kill",
        )
        assert failed == []
        assert len(acked) == TOTAL
        # Everything acknowledged is in the log, once.
        native = cluster.consumer(enable_auto_commit=False)
        native.assign([TopicPartition(topic, 0)])
        native.seek_to_beginning([TopicPartition(topic, 0)])
        log = [r.value for r in consume_all(native, TOTAL)]
        native.close()
        assert sorted(log) == sorted(acked)
        assert log == [b"%d" % i for i in range(TOTAL)]  # in order, no duplicates
        # The consumer that read through the failover caught up with the whole log.
        wait_for(lambda: len(consumed) >= TOTAL, timeout=60, what="the consumer caught up")
        assert consumed == log
    finally:
        stop.set()
        killed.set()
        for t in threads:
            t.join(60)
