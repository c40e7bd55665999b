"""One Kafka-client group member in its own process, for the group tests (so that a test
can kill it the hard way).

``python -m tests.gateway.group_member LIB BOOTSTRAP GROUP TOPIC SESSION_MS [ASSIGNOR]`` joins
the group with LIB's consumer (confluent-kafka, kafka-python, aiokafka), reads from the
committed offsets (earliest without), commits after every batch it read, and reports on
stdout one line per event: ``A <p,p,...>`` whenever its assignment changes, ``V <p,p,...>``
for the partitions its rebalance listener is told to revoke (all of them under an eager
assignor, only those moving away under a cooperative one), ``R <p> <offset>`` per record
consumed, once its offset is committed (a record whose commit failed in a rebalance is read
again by its next owner, as Kafka's at-least-once delivery has it, and reported there).
ASSIGNOR is ``range`` (the default), ``roundrobin`` or ``cooperative-sticky`` (KIP-429;
confluent-kafka and kafka-python have it, aiokafka 0.14 has no cooperative assignor). It
leaves the group when its stdin closes.
"""

from __future__ import annotations

import asyncio
import sys
import threading

_stop = threading.Event()


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _watch_stdin() -> None:
    sys.stdin.read()
    _stop.set()


def _revoked(partitions) -> None:
    say("V " + ",".join(map(str, sorted(partitions))))


class _Reporter:
    def __init__(self) -> None:
        self.last: list[int] | None = None

    def assignment(self, partitions) -> None:
        now = sorted(partitions)
        if now != self.last:
            self.last = now
            say("A " + ",".join(map(str, now)))


def run_confluent(bootstrap: str, group: str, topic: str, session_ms: int, assignor: str) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, session_ms // 10),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": assignor or "range",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    rep = _Reporter()
    # Without an assign/unassign call in the callback confluent-kafka applies the change itself
    # (incrementally under a cooperative assignor).
    consumer.subscribe([topic], on_revoke=lambda _c, tps: _revoked(tp.partition for tp in tps))
    while not _stop.is_set():
        msgs = [m for m in consumer.consume(100, 0.1) if not m.error()]
        rep.assignment(tp.partition for tp in consumer.assignment())
        if msgs:
            try:
                consumer.commit(asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - a rebalance under way: Kafka's CommitFailed
                say(f"E {exc}")
            else:
                for msg in msgs:
                    say(f"R {msg.partition()} {msg.offset()}")
    consumer.close()


def run_kafka_python(bootstrap: str, group: str, topic: str, session_ms: int, assignor: str) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    chosen = {"roundrobin": RoundRobinPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked) -> None:
            _revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned) -> None:
            pass

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(100, session_ms // 10),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        partition_assignment_strategy=[chosen.get(assignor, RangePartitionAssignor)],
        metadata_max_age_ms=1000,
    )
    consumer.subscribe([topic], listener=Listener())
    rep = _Reporter()
    while not _stop.is_set():
        polled = consumer.poll(timeout_ms=100)
        rep.assignment(tp.partition for tp in consumer.assignment())
        for tp, records in polled.items():
            try:
                consumer.commit({tp: OffsetAndMetadata(records[-1].offset + 1, "", -1)})
            except Exception as exc:  # noqa: BLE001 - a rebalance under way: Kafka's CommitFailed
                say(f"E {exc}")
            else:
                for r in records:
                    say(f"R {r.partition} {r.offset}")
    consumer.close()


def run_aiokafka(bootstrap: str, group: str, topic: str, session_ms: int, assignor: str) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.structs import OffsetAndMetadata

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(100, session_ms // 10),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=(
                RoundRobinPartitionAssignor if assignor == "roundrobin" else RangePartitionAssignor,
            ),
            metadata_max_age_ms=1000,
        )
        await consumer.start()
        rep = _Reporter()
        while not _stop.is_set():
            polled = await consumer.getmany(timeout_ms=100)
            rep.assignment(tp.partition for tp in consumer.assignment())
            for tp, records in polled.items():
                try:
                    await consumer.commit({tp: OffsetAndMetadata(records[-1].offset + 1, "")})
                except Exception as exc:  # noqa: BLE001 - a rebalance under way: Kafka's CommitFailed
                    say(f"E {exc}")
                else:
                    for r in records:
                        say(f"R {r.partition} {r.offset}")
        await consumer.stop()

    asyncio.run(main())


RUNNERS = {"confluent-kafka": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}

if __name__ == "__main__":
    lib, bootstrap, group, topic, session = sys.argv[1:6]
    chosen = sys.argv[6] if len(sys.argv) > 6 else ""
    threading.Thread(target=_watch_stdin, daemon=True).start()
    RUNNERS[lib](bootstrap, group, topic, int(session), chosen)
    say("X")
