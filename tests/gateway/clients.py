"""The same few operations through each real Kafka client, for the gateway tests.

Each adapter creates a topic (through the client's own admin API where it has one),
produces records with a compression codec, consumes partitions from given offsets, and
looks offsets up by timestamp. Records come back as ``Got`` tuples so that what every
client reads can be compared with what rayqueue's native consumer reads.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import NamedTuple

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class Rec(NamedTuple):
    """A record to produce (``timestamp`` None: the client's clock)."""

    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | None


class Got(NamedTuple):
    """A record as read back."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def _headers(headers) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, bytes(v) if v is not None else b"") for k, v in (headers or ()))


def _until(read, expected: int, timeout: float, what: str) -> list[Got]:
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: read {len(got)} of {expected} records within {timeout}s")
        got.extend(read())
    return got


# -- confluent-kafka (librdkafka) -----------------------------------------------------------------


class Confluent:
    name = "confluent-kafka"
    codecs = CODECS
    sets_timestamps = True

    def create_topic(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(30)

    def produce(self, bootstrap: str, topic: str, records: list[Rec], codec: str) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": codec, "enable.idempotence": True}
        )
        errors: list = []
        for r in records:
            producer.produce(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers),
                timestamp=r.timestamp or 0,
                on_delivery=lambda err, msg: errors.append(err) if err else None,
            )
        assert producer.flush(30) == 0 and not errors, errors

    def consume(self, bootstrap: str, topic: str, start: dict[int, int], expected: int) -> list[Got]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gateway-test", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])

            def read() -> list[Got]:
                out = []
                for m in consumer.consume(1000, 0.5):
                    assert m.error() is None, m.error()
                    out.append(
                        Got(m.partition(), m.offset(), m.key(), m.value(), _headers(m.headers()), m.timestamp()[1])
                    )
                return out

            return _until(read, expected, 60, self.name)
        finally:
            consumer.close()

    def offsets_for_times(self, bootstrap: str, topic: str, partitions: int, ts: int) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gateway-test"})
        try:
            found = consumer.offsets_for_times([TopicPartition(topic, p, ts) for p in range(partitions)], timeout=30)
            return {tp.partition: tp.offset for tp in found}
        finally:
            consumer.close()


# -- kafka-python ----------------------------------------------------------------------------------


class KafkaPython:
    name = "kafka-python"
    codecs = CODECS
    sets_timestamps = True

    def create_topic(self, bootstrap: str, topic: str, partitions: int) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            admin.close()

    def produce(self, bootstrap: str, topic: str, records: list[Rec], codec: str) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec, linger_ms=5
        )
        try:
            futures = [
                producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), timestamp_ms=r.timestamp)
                for r in records
            ]
            producer.flush(30)
            for future in futures:
                future.get(30)
        finally:
            producer.close()

    def consume(self, bootstrap: str, topic: str, start: dict[int, int], expected: int) -> list[Got]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition(topic, p) for p in start])
            for p, offset in start.items():
                consumer.seek(TopicPartition(topic, p), offset)

            def read() -> list[Got]:
                out = []
                for tp, messages in consumer.poll(500).items():
                    for m in messages:
                        out.append(Got(tp.partition, m.offset, m.key, m.value, _headers(m.headers), m.timestamp))
                return out

            return _until(read, expected, 60, self.name)
        finally:
            consumer.close()

    def offsets_for_times(self, bootstrap: str, topic: str, partitions: int, ts: int) -> dict[int, int]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        try:
            found = consumer.offsets_for_times({TopicPartition(topic, p): ts for p in range(partitions)})
            return {tp.partition: (o.offset if o is not None else -1) for tp, o in found.items()}
        finally:
            consumer.close()


# -- aiokafka --------------------------------------------------------------------------------------


class AioKafka:
    name = "aiokafka"
    codecs = CODECS
    sets_timestamps = True

    def create_topic(self, bootstrap: str, topic: str, partitions: int) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def run() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, partitions, 1)])
            finally:
                await admin.close()

        asyncio.run(run())

    def produce(self, bootstrap: str, topic: str, records: list[Rec], codec: str) -> None:
        from aiokafka import AIOKafkaProducer

        async def run() -> None:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec, linger_ms=5
            )
            await producer.start()
            try:
                futures = [
                    await producer.send(
                        topic, value=r.value, key=r.key, headers=list(r.headers), timestamp_ms=r.timestamp
                    )
                    for r in records
                ]
                await asyncio.gather(*futures)
            finally:
                await producer.stop()

        asyncio.run(run())

    def consume(self, bootstrap: str, topic: str, start: dict[int, int], expected: int) -> list[Got]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> list[Got]:
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
            await consumer.start()
            try:
                consumer.assign([TopicPartition(topic, p) for p in start])
                for p, offset in start.items():
                    consumer.seek(TopicPartition(topic, p), offset)
                got: list[Got] = []
                deadline = time.monotonic() + 60
                while len(got) < expected:
                    assert time.monotonic() < deadline, f"aiokafka read {len(got)} of {expected}"
                    for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                        for m in messages:
                            got.append(Got(tp.partition, m.offset, m.key, m.value, _headers(m.headers), m.timestamp))
                return got
            finally:
                await consumer.stop()

        return asyncio.run(run())

    def offsets_for_times(self, bootstrap: str, topic: str, partitions: int, ts: int) -> dict[int, int]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> dict[int, int]:
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
            await consumer.start()
            try:
                found = await consumer.offsets_for_times({TopicPartition(topic, p): ts for p in range(partitions)})
                return {tp.partition: (o.offset if o is not None else -1) for tp, o in found.items()}
            finally:
                await consumer.stop()

        return asyncio.run(run())


# -- kcat ------------------------------------------------------------------------------------------


class Kcat:
    """kcat (librdkafka 2.0 inside): no admin API and no per-record timestamps or headers."""

    name = "kcat"
    codecs = CODECS
    sets_timestamps = False

    def __init__(self, binary: str) -> None:
        self.binary = binary

    def _run(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run([self.binary, *args], input=stdin, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"kcat {' '.join(args)}: {result.stderr}"
        return result.stdout

    def metadata(self, bootstrap: str) -> str:
        """``kcat -L``."""
        return self._run("-b", bootstrap, "-L")

    def produce(self, bootstrap: str, topic: str, records: list[Rec], codec: str) -> None:
        headers = records[0].headers
        assert all(r.headers == headers for r in records), "kcat gives every record the same headers"
        args = ["-b", bootstrap, "-P", "-t", topic, "-K", "\t", "-z", codec, "-X", "linger.ms=5"]
        for k, v in headers:
            args += ["-H", f"{k}={v.decode()}"]
        lines = "".join(f"{(r.key or b'').decode()}\t{r.value.decode()}\n" for r in records)
        self._run(*args, stdin=lines)

    def consume(self, bootstrap: str, topic: str, start: dict[int, int], expected: int) -> list[Got]:
        got: list[Got] = []
        for p, offset in start.items():
            out = self._run(
                "-b", bootstrap, "-C", "-t", topic, "-p", str(p), "-o", str(offset), "-e", "-q",
                "-f", "%p\t%o\t%k\t%s\t%T\t%h\n",
            )  # fmt: skip
            for line in out.splitlines():
                part, off, key, value, ts, headers = line.split("\t")
                pairs = tuple((k, v.encode()) for k, _, v in (h.partition("=") for h in headers.split(",") if h))
                got.append(Got(int(part), int(off), key.encode() or None, value.encode(), pairs, int(ts)))
        assert len(got) == expected, f"kcat read {len(got)} of {expected}"
        return got

    def offsets_for_times(self, bootstrap: str, topic: str, partitions: int, ts: int) -> dict[int, int]:
        args = ["-b", bootstrap, "-Q"]
        for p in range(partitions):
            args += ["-t", f"{topic}:{p}:{ts}"]
        found = {}
        for line in self._run(*args).splitlines():
            # "<topic> [<partition>] offset <offset>"
            words = line.split()
            if len(words) >= 4 and words[2] == "offset":
                found[int(words[1].strip("[]"))] = int(words[3])
        return found
