"""``rayqueue produce`` and ``consume``: the console producer and consumer."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from typing import Annotated, Any

import typer

from rayqueue.cli.common import (
    AddressOpt,
    CliError,
    NameOpt,
    as_text,
    client_config,
    connect_cluster,
    err,
    handle_errors,
    topic_partitions,
)


@handle_errors
def produce(
    topic: Annotated[str, typer.Argument(help="Topic to write to.")],
    key_separator: Annotated[
        str | None,
        typer.Option(
            "--key-separator", help="Split each line into `KEY<SEP>VALUE` at the first SEP (Kafka: parse.key)."
        ),
    ] = None,
    partition: Annotated[int | None, typer.Option("--partition", help="Write every record to this partition.")] = None,
    compression_type: Annotated[
        str | None, typer.Option("--compression-type", help="none, gzip, snappy, lz4 or zstd.")
    ] = None,
    acks: Annotated[str | None, typer.Option("--acks", help="0, 1 or all.")] = None,
    linger_ms: Annotated[int | None, typer.Option("--linger-ms")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size")] = None,
    producer_property: Annotated[
        list[str] | None, typer.Option("--producer-property", "-X", help="Producer config KEY=VALUE (repeatable).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Send lines from stdin as records: each line a value, or `KEY<SEP>VALUE` with --key-separator."""
    config = client_config(
        producer_property,
        "--producer-property",
        compression_type=compression_type,
        acks=acks,
        linger_ms=linger_ms,
        batch_size=batch_size,
    )
    cluster = connect_cluster(name, address)
    sep = key_separator.encode() if key_separator is not None else None
    stdin = getattr(sys.stdin, "buffer", None)
    lines: Iterable[Any] = stdin if stdin is not None else sys.stdin
    failures: list[BaseException] = []
    acked = 0

    def on_done(metadata: Any, error: BaseException | None) -> None:
        nonlocal acked
        if error is not None:
            failures.append(error)
        else:
            acked += 1

    sent = 0
    producer = cluster.producer(config)
    try:
        for number, raw in enumerate(lines, 1):
            line = raw if isinstance(raw, bytes) else raw.encode()
            line = line.rstrip(b"\n").rstrip(b"\r")
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    raise CliError(f"no key separator {key_separator!r} on line {number}: {as_text(line)!r}")
            else:
                value = line
            producer.send(topic, value, key=key, partition=partition, callback=on_done)
            sent += 1
            if failures:
                break
    finally:
        producer.close()
    if failures:
        raise failures[0]
    err.print(f"Produced {acked} records to {topic}.")


# How long ``consume --max-messages`` waits without a record before saying that it waits.
IDLE_HINT_S = 5.0


@handle_errors
def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the log start offset (default: only new records).")
    ] = False,
    offset: Annotated[
        str | None, typer.Option("--offset", help="Start offset: a number, 'earliest' or 'latest' (every partition).")
    ] = None,
    timestamp: Annotated[
        int | None,
        typer.Option("--timestamp", help="Start at the first record at or after this time (ms since epoch)."),
    ] = None,
    partition: Annotated[int | None, typer.Option("--partition", help="Read only this partition.")] = None,
    max_messages: Annotated[
        int | None,
        typer.Option(
            "--max-messages",
            help="Exit after this many records (with --timeout-ms: also when none arrives for that long).",
        ),
    ] = None,
    timeout_ms: Annotated[
        int | None, typer.Option("--timeout-ms", help="Exit when no record arrives for this long (default: wait).")
    ] = None,
    format_: Annotated[
        str, typer.Option("--format", help="text (value), kv (`key<SEP>value`) or json (one object per record).")
    ] = "text",
    key_separator: Annotated[str, typer.Option("--key-separator", help="Separator of --format kv.")] = "\t",
    consumer_property: Annotated[
        list[str] | None, typer.Option("--consumer-property", "-X", help="Consumer config KEY=VALUE (repeatable).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Print records of a topic (kafka-console-consumer, assign mode: no consumer group)."""
    if format_ not in ("text", "kv", "json"):
        raise typer.BadParameter("must be text, kv or json", param_hint="--format")
    if sum((from_beginning, offset is not None, timestamp is not None)) > 1:
        raise typer.BadParameter("use only one of --from-beginning, --offset and --timestamp")
    start_offset: int | None = None
    if offset is not None and offset not in ("earliest", "latest"):
        try:
            start_offset = int(offset)
        except ValueError:
            raise typer.BadParameter("a number, 'earliest' or 'latest'", param_hint="--offset") from None
        if start_offset < 0:
            raise typer.BadParameter("must be >= 0", param_hint="--offset")
    cluster = connect_cluster(name, address)
    consumer = cluster.consumer(client_config(consumer_property, "--consumer-property"))
    tps = topic_partitions(cluster, topic, partition)
    consumer.assign(tps)
    if from_beginning or offset == "earliest":
        consumer.seek_to_beginning()
    elif offset == "latest":
        consumer.seek_to_end()
    elif start_offset is not None:
        for tp in tps:
            consumer.seek(tp, start_offset)
    elif timestamp is not None:
        for tp, found in consumer.offsets_for_times({tp: timestamp for tp in tps}).items():
            if found is None:
                consumer.seek_to_end([tp])
            else:
                consumer.seek(tp, found.offset)
    else:
        consumer.seek_to_end()  # fixed at this moment, so every record produced from here on is seen

    count = 0
    last_record = time.monotonic()
    hinted = max_messages is None or timeout_ms is not None
    try:
        while max_messages is None or count < max_messages:
            wait_ms = 500 if timeout_ms is None else max(1, min(500, timeout_ms))
            limit = None if max_messages is None else max_messages - count
            records = consumer.poll(wait_ms, max_records=limit)
            if records:
                last_record = time.monotonic()
                lines = [_format_record(r, format_, key_separator) for r in records]
                count += len(lines)
                sys.stdout.write("".join(lines))
                sys.stdout.flush()
            elif timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= timeout_ms:
                break
            elif not hinted and time.monotonic() - last_record >= IDLE_HINT_S:
                # As kafka-console-consumer, --max-messages alone waits for records to come;
                # say so once rather than look stuck.
                hinted = True
                err.print(
                    f"Read {count} of {max_messages} messages; waiting for more (Ctrl-C stops;"
                    " --timeout-ms MS exits once none arrives for MS)."
                )
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    err.print(f"Processed a total of {count} messages")


def _format_record(record: Any, fmt: str, separator: str) -> str:
    if fmt == "text":
        return as_text(record.value) + "\n"
    if fmt == "kv":
        return f"{as_text(record.key)}{separator}{as_text(record.value)}\n"
    obj = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestampType": "LogAppendTime" if record.timestamp_type == 1 else "CreateTime",
        "key": None if record.key is None else as_text(record.key),
        "value": None if record.value is None else as_text(record.value),
        "headers": {k: None if v is None else as_text(v) for k, v in record.headers},
    }
    return json.dumps(obj, ensure_ascii=False) + "\n"
