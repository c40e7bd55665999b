"""Helpers of the Iceberg translation tests without Ray: a partition source over a real
``storage.Log``, a schema registry in memory, and driving a host's translators to rest."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import fastavro

from actors.clock import ManualClock
from actors.iceberg.translators import Translators
from actors.iceberg.values import SchemaNotFoundError
from actors.protocol import AbortedTransaction, FetchResponse
from storage import Log, log_config
from storage.records.builder import RecordBatchBuilder
from storage.records.control import build_control_batch

T0 = 1_700_000_000_000


class LogSource:
    """A leader replica as a translator sees it, over a real log (every record committed:
    the high watermark is the log end)."""

    def __init__(self, log: Log, topic: str, partition: int = 0, epoch: int = 0, **config: Any) -> None:
        self.log, self.topic, self.partition, self.epoch = log, topic, partition, epoch
        self.topic_id: str | None = "topic-id-1"
        self.leading = True
        self.set_config(**config)

    def set_config(self, **config: Any) -> None:
        self.config = log_config({k.replace("_", "."): v for k, v in config.items()})

    def leading_epoch(self) -> int | None:
        return self.epoch if self.leading else None

    def topic_config(self) -> Any:
        return self.config

    def read_committed(self, offset: int, max_bytes: int) -> FetchResponse:
        hw = self.log.log_end_offset
        self.log.update_high_watermark(hw)
        lso = self.log.last_stable_offset(hw)
        start = self.log.log_start_offset
        if max_bytes <= 0:
            return FetchResponse(b"", hw, lso, start, hw, self.epoch)
        data = self.log.read(offset, max_bytes, max_offset=lso)
        aborted: tuple = ()
        if data.records:
            aborted = tuple(
                AbortedTransaction(t.producer_id, t.first_offset)
                for t in self.log.collect_aborted_transactions(data.first_offset, data.next_offset)
            )
        return FetchResponse(data.records, hw, lso, start, hw, self.epoch, aborted)


def append(
    log: Log,
    values: list[bytes | None],
    *,
    keys: list[bytes | None] | None = None,
    ts: int = T0,
    headers: list | None = None,
    compression: int = 0,
    pid: int = -1,
    seq: int = 0,
    txn: bool = False,
) -> int:
    """Append one batch; returns its first offset."""
    builder = RecordBatchBuilder(
        compression,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1,
        is_transactional=txn,
    )
    keys = keys if keys is not None else [None] * len(values)
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        builder.append(value, key=key, timestamp=ts + i, headers=headers or [])
    return log.append(bytes(builder.build()), leader_epoch=0).first_offset


def end_txn(log: Log, pid: int, commit: bool) -> None:
    """Write a transaction's marker (as the coordinator does)."""
    log.append(build_control_batch(commit, pid, 0, 0, timestamp=T0), leader_epoch=0, origin="coordinator")


async def settle(
    translators: Translators, sources: list, clock: ManualClock, rounds: int = 50, strict: bool = True
) -> None:
    """Tick until no step is due (advancing the clock past every target lag and backoff);
    ``strict``: fail if that takes more than ``rounds`` steps."""
    for _ in range(rounds):
        translators.tick(sources)
        running = translators._running
        if running is not None and not running.done():
            await running
            continue
        clock.advance(120_000)
        translators.tick(sources)
        running = translators._running
        if running is None or running.done():
            return
        await running
    if strict:
        raise AssertionError("the translators did not come to rest")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class FakeRegistry:
    """Schemas by id, answering as the registry actor does (``schema``, ``version``)."""

    def __init__(self) -> None:
        self.schemas: dict[int, dict[str, Any]] = {}
        self.subjects: dict[tuple[str, int], dict[str, Any]] = {}
        self.down = False

    def add(
        self, schema_id: int, schema: Any, kind: str = "AVRO", subject: str | None = None, version: int = 1
    ) -> None:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        answer = {"schema": text} if kind == "AVRO" else {"schema": text, "schemaType": kind}
        self.schemas[schema_id] = answer
        if subject is not None:
            self.subjects[(subject, version)] = {**answer, "id": schema_id, "subject": subject, "version": version}

    def schema(self, schema_id: int) -> dict[str, Any]:
        if self.down:
            raise ConnectionError("the registry is not reachable")
        if schema_id not in self.schemas:
            raise SchemaNotFoundError(f"40403: schema {schema_id} not found")
        return self.schemas[schema_id]

    def version(self, subject: Any, version: Any) -> dict[str, Any]:
        if (subject, version) not in self.subjects:
            raise SchemaNotFoundError(f"40402: {subject} version {version} not found")
        return self.subjects[(subject, version)]


def avro_value(schema: Any, schema_id: int, value: Any) -> bytes:
    """Confluent's wire format: 0, the id, the Avro encoding."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()


def json_value(schema_id: int, value: Any) -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + json.dumps(value).encode()
