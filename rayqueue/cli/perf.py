"""``rayqueue perf``: throughput and latency tests (kafka-producer-perf-test, kafka-consumer-perf-test)."""

from __future__ import annotations

import queue
import random
import string
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import numpy as np
import typer
from tqdm import tqdm

from rayqueue.cli.common import (
    AddressOpt,
    NameOpt,
    client_config,
    connect_cluster,
    err,
    handle_errors,
    kafka_time,
    topic_partitions,
)

perf_app = typer.Typer(
    help="Throughput and latency tests (kafka-*-perf-test).", no_args_is_help=True, rich_markup_mode="markdown"
)


class _ProducerStats:
    """Latency samples and Kafka-style windowed reports (as ProducerPerformance's Stats).

    Completions are recorded by one thread (the producer's sender, or the bulk watcher),
    so no lock is needed; the main thread reads only after the last completion.
    """

    def __init__(self, num_records: int, record_size: int, interval_s: float, report: Callable[[str], None]) -> None:
        self.latencies = np.zeros(num_records, dtype=np.float64)  # ms, by completion order
        self.count = 0
        self.record_size = record_size
        self.interval_s = interval_s
        self.report = report
        self.error: BaseException | None = None
        self.last_completion = time.monotonic()
        self._window_start = time.monotonic()
        self._window_count = 0
        self._window_total = 0.0
        self._window_max = 0.0

    def record(self, latency_ms: float, n: int = 1) -> None:
        """``n`` records completed, each with ``latency_ms``."""
        now = time.monotonic()
        self.latencies[self.count : self.count + n] = latency_ms
        self.count += n
        self.last_completion = now
        self._window_count += n
        self._window_total += latency_ms * n
        self._window_max = max(self._window_max, latency_ms)
        if now - self._window_start >= self.interval_s:
            elapsed = now - self._window_start
            rate = self._window_count / elapsed
            self.report(
                f"{self._window_count} records sent, {rate:.1f} records/sec "
                f"({rate * self.record_size / 1024 / 1024:.2f} MB/sec), "
                f"{self._window_total / self._window_count:.1f} ms avg latency, "
                f"{self._window_max:.1f} ms max latency."
            )
            self._window_start, self._window_count, self._window_total, self._window_max = now, 0, 0.0, 0.0

    def callback(self, sent_at: float) -> Callable[[Any, BaseException | None], None]:
        """A send-future callback that records this record's latency."""

        def done(metadata: Any, error: BaseException | None) -> None:
            if error is not None:
                if self.error is None:
                    self.error = error
                return
            self.record((time.monotonic() - sent_at) * 1000)

        return done

    def summary(self, elapsed_s: float) -> str:
        """Kafka's final line: totals, average/max latency and percentiles."""
        lat = self.latencies[: self.count]
        rate = self.count / elapsed_s if elapsed_s > 0 else 0.0
        p50, p95, p99, p999 = np.percentile(lat, [50, 95, 99, 99.9]) if self.count else (0.0,) * 4
        return (
            f"{self.count} records sent, {rate:f} records/sec ({rate * self.record_size / 1024 / 1024:.2f} MB/sec), "
            f"{lat.mean() if self.count else 0.0:.2f} ms avg latency, {lat.max() if self.count else 0.0:.2f} ms max latency, "
            f"{p50:.2f} ms 50th, {p95:.2f} ms 95th, {p99:.2f} ms 99th, {p999:.2f} ms 99.9th."
        )


class _Throttler:
    """Holds a sender to ``throughput`` records/s (Kafka's ThroughputThrottler); -1: no limit."""

    def __init__(self, throughput: float, start: float) -> None:
        self.throughput = throughput
        self.start = start

    def wait(self, sent: int) -> None:
        if self.throughput <= 0:
            return
        ahead = sent / self.throughput - (time.monotonic() - self.start)
        if ahead > 0.001:
            time.sleep(ahead)  # pacing a load generator, not waiting on a condition


def _progress(total: int, unit: str) -> tqdm:
    # disable=None: shown on a terminal, silent when stderr is a pipe or a test runner.
    return tqdm(total=total, unit=unit, unit_scale=True, file=sys.stderr, disable=None, leave=False, mininterval=0.5)


@perf_app.command("produce")
@handle_errors
def perf_produce(
    topic: Annotated[str, typer.Argument(help="Topic to write to (created if auto.create.topics.enable).")],
    num_records: Annotated[int, typer.Option("--num-records", min=1, help="Records to send.")],
    record_size: Annotated[int, typer.Option("--record-size", min=0, help="Bytes per record value.")],
    throughput: Annotated[float, typer.Option("--throughput", help="Cap on records/s; -1 for no cap.")] = -1,
    acks: Annotated[str | None, typer.Option("--acks", help="0, 1 or all.")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size")] = None,
    linger_ms: Annotated[int | None, typer.Option("--linger-ms")] = None,
    compression_type: Annotated[str | None, typer.Option("--compression-type")] = None,
    bulk: Annotated[
        bool, typer.Option("--bulk", help="Use send_many (whole batches, per-batch latency) instead of send().")
    ] = False,
    reporting_interval: Annotated[
        int, typer.Option("--reporting-interval", help="Milliseconds between progress lines.")
    ] = 5000,
    producer_props: Annotated[
        list[str] | None,
        typer.Option("--producer-props", "--producer-property", "-X", help="Producer config KEY=VALUE (repeatable)."),
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Measure producer throughput and latency (kafka-producer-perf-test).

    Latency is per record, from send() to its acknowledgement (the future's callback);
    with --bulk it is per send_many() chunk, from the call to the chunk's acknowledgement.
    """
    config = client_config(
        producer_props,
        "--producer-props",
        acks=acks,
        batch_size=batch_size,
        linger_ms=linger_ms,
        compression_type=compression_type,
    )
    cluster = connect_cluster(name, address)
    producer = cluster.producer(config)
    # Kafka's perf test sends random upper-case letters, one payload reused for all records.
    rng = random.Random(0)
    payload = "".join(rng.choice(string.ascii_uppercase) for _ in range(record_size)).encode()
    stats = _ProducerStats(
        num_records, record_size, reporting_interval / 1000, lambda line: tqdm.write(line, file=sys.stdout)
    )
    try:
        producer.partitions_for(topic)  # metadata (and auto-creation) before the clock starts
        start = time.monotonic()
        throttler = _Throttler(throughput, start)
        with _progress(num_records, "rec") as bar:
            if bulk:
                _perf_send_bulk(producer, topic, payload, num_records, stats, throttler, bar)
            else:
                _perf_send(producer, topic, payload, num_records, stats, throttler, bar)
            producer.flush()
        if stats.error is not None:
            raise stats.error
        elapsed = stats.last_completion - start
    finally:
        producer.close()
    typer.echo(stats.summary(elapsed))


def _perf_send(
    producer: Any, topic: str, payload: bytes, n: int, stats: _ProducerStats, throttler: _Throttler, bar: tqdm
) -> None:
    step = 1000
    for i in range(n):
        producer.send(topic, payload, callback=stats.callback(time.monotonic()))
        if i % step == step - 1:
            bar.update(step)
            if stats.error is not None:
                return
            throttler.wait(i + 1)
    bar.update(n % step)


def _perf_send_bulk(
    producer: Any, topic: str, payload: bytes, n: int, stats: _ProducerStats, throttler: _Throttler, bar: tqdm
) -> None:
    # One chunk is about max.request.size of records: big enough to amortize the call,
    # small enough that per-chunk latency still says something.
    chunk = max(1, producer.config["max.request.size"] // (len(payload) + 16))
    pending: queue.Queue[tuple[Any, float, int] | None] = queue.Queue(maxsize=64)

    def watch() -> None:
        # Waits on chunks in send order, so each completion time is taken when it happens.
        while (item := pending.get()) is not None:
            result, sent_at, count = item
            try:
                result.get()
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                stats.error = stats.error or exc
                continue
            stats.record((time.monotonic() - sent_at) * 1000, count)

    watcher = threading.Thread(target=watch, name="perf-bulk-watcher", daemon=True)
    watcher.start()
    try:
        sent = 0
        while sent < n and stats.error is None:
            count = min(chunk, n - sent)
            sent_at = time.monotonic()
            pending.put((producer.send_many(topic, [payload] * count), sent_at, count))
            sent += count
            bar.update(count)
            throttler.wait(sent)
    finally:
        pending.put(None)
        watcher.join()


@perf_app.command("consume")
@handle_errors
def perf_consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    messages: Annotated[int, typer.Option("--messages", min=1, help="Records to consume.")],
    timeout_ms: Annotated[
        int, typer.Option("--timeout-ms", help="Give up when no record arrives for this long (Kafka's --timeout).")
    ] = 10000,
    from_latest: Annotated[
        bool, typer.Option("--from-latest", help="Start at the end instead of the beginning.")
    ] = False,
    consumer_property: Annotated[
        list[str] | None, typer.Option("--consumer-property", "-X", help="Consumer config KEY=VALUE (repeatable).")
    ] = None,
    name: NameOpt = "rayqueue",
    address: AddressOpt = None,
) -> None:
    """Measure consumer throughput (kafka-consumer-perf-test) and poll latency percentiles."""
    cluster = connect_cluster(name, address)
    consumer = cluster.consumer(client_config(consumer_property, "--consumer-property"))
    tps = topic_partitions(cluster, topic, None)
    consumer.assign(tps)
    if from_latest:
        consumer.seek_to_end()
    else:
        consumer.seek_to_beginning()
    count = 0
    nbytes = 0
    polls: list[float] = []  # ms per poll that returned records
    start_wall = end_wall = datetime.now()
    start = last_record = time.monotonic()
    timed_out = False
    try:
        with _progress(messages, "msg") as bar:
            while count < messages:
                t0 = time.monotonic()
                records = consumer.poll(100, max_records=messages - count)
                now = time.monotonic()
                if not records:
                    if (now - last_record) * 1000 >= timeout_ms:
                        timed_out = True
                        break
                    continue
                polls.append((now - t0) * 1000)
                last_record, end_wall = now, datetime.now()
                for r in records:
                    nbytes += (len(r.key) if r.key is not None else 0) + (len(r.value) if r.value is not None else 0)
                count += len(records)
                bar.update(len(records))
    finally:
        consumer.close()
    end = last_record
    if timed_out:
        err.print(
            f"[yellow]WARNING: Exiting before consuming the expected number of messages: "
            f"timeout ({timeout_ms} ms) exceeded.[/]"
        )
    elapsed = max(end - start, 1e-9)
    mb = nbytes / 1024 / 1024
    typer.echo(
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    # Assign mode has no rebalance, so fetch time is the whole run (as Kafka computes it).
    typer.echo(
        f"{kafka_time(start_wall)}, {kafka_time(end_wall)}, {mb:.4f}, {mb / elapsed:.4f}, {count}, "
        f"{count / elapsed:.4f}, 0, {elapsed * 1000:.0f}, {mb / elapsed:.4f}, {count / elapsed:.4f}"
    )
    if polls:
        lat = np.asarray(polls)
        p50, p95, p99 = np.percentile(lat, [50, 95, 99])
        typer.echo(
            f"{len(polls)} polls, {lat.mean():.2f} ms avg poll latency, {lat.max():.2f} ms max poll latency, "
            f"{p50:.2f} ms 50th, {p95:.2f} ms 95th, {p99:.2f} ms 99th."
        )
