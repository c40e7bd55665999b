"""rayqueue end to end: a page-view stream through a 3-broker cluster into Spark and back.

1. Start an embedded Ray with a 3-broker rayqueue cluster in a temp data dir.
2. Produce a synthetic page-view stream (JSON values keyed by user id) through the bulk
   ``send_many`` path, with a progress bar.
3. Consume a sample with a Consumer.
4. Read the topic into Spark (RayDP), count views per page per minute (a tumbling
   event-time window), write the result to another topic.
5. Read the result topic back into Spark and print the busiest page-minutes.
6. The page-view topic is also an Iceberg table (``rayqueue.iceberg.mode=key_value``): query
   it with DuckDB over its Parquet files, no broker involved.
7. Print throughput figures; shut everything down.

    .venv/bin/python scripts/demo.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from tqdm import tqdm  # noqa: E402

console = Console()

EVENTS_TOPIC = "page-views"
RESULTS_TOPIC = "page-views-per-minute"
SAMPLE_GROUP = "demo-sample"
PAGES = (
    ["/", "/search", "/cart", "/checkout", "/login", "/account", "/help", "/blog"]
    + [f"/products/{i}" for i in range(1, 31)]
    + [f"/category/{c}" for c in ("books", "music", "garden", "toys", "sports", "kitchen")]
)
REFERRERS = ["direct", "search", "social", "email", "ads"]
DEVICES = ["mobile", "desktop", "tablet"]


def page_view_chunk(
    rng: np.random.Generator, start_ms: int, span_ms: int, n: int, users: int
) -> tuple[list, list, list]:
    """``n`` page views: (JSON values, user-id keys, event timestamps in ms), in time order."""
    # Zipf-like popularity: a few pages and users get most views, as real traffic does.
    page_weights = 1.0 / np.arange(1, len(PAGES) + 1) ** 1.1
    page_idx = rng.choice(len(PAGES), n, p=page_weights / page_weights.sum())
    user_idx = np.minimum(rng.zipf(1.3, n), users) - 1
    stamps = np.sort(start_ms + rng.integers(0, span_ms, n))
    ref_idx = rng.integers(0, len(REFERRERS), n)
    dev_idx = rng.integers(0, len(DEVICES), n)
    durations = rng.integers(200, 120_000, n)
    values, keys = [], []
    for u, p, ts, r, d, dur in zip(
        user_idx.tolist(),
        page_idx.tolist(),
        stamps.tolist(),
        ref_idx.tolist(),
        dev_idx.tolist(),
        durations.tolist(),
        strict=True,
    ):
        user = f"user-{u:06d}"
        keys.append(user.encode())
        values.append(
            f'{{"user":"{user}","page":"{PAGES[p]}","ts":{ts},"referrer":"{REFERRERS[r]}",'
            f'"device":"{DEVICES[d]}","duration_ms":{dur}}}'.encode()
        )
    return values, keys, stamps.tolist()


def produce_page_views(cluster: Any, topic: str, records: int, minutes: int) -> tuple[float, int]:
    """Produce ``records`` page views spread over the last ``minutes``; (seconds, bytes)."""
    rng = np.random.default_rng(7)
    producer = cluster.producer(compression_type="lz4", batch_size=262_144, linger_ms=5)
    now_ms = int(time.time() * 1000)
    start_ms = now_ms - minutes * 60_000
    chunk = 50_000
    span = max(1, minutes * 60_000 * chunk // records)
    pending: list[Any] = []
    total_bytes = 0
    started = time.perf_counter()
    with tqdm(total=records, unit="rec", unit_scale=True, desc="producing page views", dynamic_ncols=True) as bar:
        for i, base in enumerate(range(0, records, chunk)):
            n = min(chunk, records - base)
            values, keys, stamps = page_view_chunk(rng, start_ms + i * span, span, n, users=50_000)
            total_bytes += sum(map(len, values)) + sum(map(len, keys))
            pending.append((n, producer.send_many(topic, values, keys, timestamps=stamps)))
            # Keep a few chunks in flight; account progress as chunks are acknowledged.
            while len(pending) > 4 or (pending and pending[0][1].done()):
                done_n, result = pending.pop(0)
                result.get(300)
                bar.update(done_n)
        for done_n, result in pending:
            result.get(300)
            bar.update(done_n)
    producer.close()
    return time.perf_counter() - started, total_bytes


def consume_sample(cluster: Any, topic: str, count: int = 9) -> tuple[list[Any], float]:
    """Read a sample of ``topic`` through the consumer group "demo-sample" and commit it.

    The group coordinator assigns the partitions; the commit lands in __consumer_offsets,
    so the group's lag (printed by the caller) is the rest of the topic.
    """
    started = time.perf_counter()
    consumer = cluster.consumer(
        group_id=SAMPLE_GROUP, auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=count
    )
    consumer.subscribe([topic])
    records: list[Any] = []
    deadline = time.monotonic() + 60
    while not records and time.monotonic() < deadline:
        records.extend(consumer.poll(500))
    consumer.commit()
    consumer.close()
    return records[:count], time.perf_counter() - started


def show_sample(records: list[Any]) -> None:
    table = Table(title=f"A sample of '{EVENTS_TOPIC}' (consumer group '{SAMPLE_GROUP}')")
    for column in ("partition", "offset", "key", "page", "referrer", "device"):
        table.add_column(column)
    for r in records:
        event = json.loads(r.value)
        table.add_row(
            str(r.partition), str(r.offset), r.key.decode(), event["page"], event["referrer"], event["device"]
        )
    console.print(table)


# -- the page-view topic as an Iceberg table ---------------------------------------------------

# The events topic's leaders translate its records into an Iceberg table, within a second.
ICEBERG_TOPIC_CONFIG = {"rayqueue.iceberg.mode": "key_value", "rayqueue.iceberg.target.lag.ms": 1000}


def query_iceberg_table(cluster: Any, topic: str, records: int) -> str:
    """Wait until the topic's table holds every record, count views per device with DuckDB
    over the table's Parquet files, print them; the figure for the summary."""
    import rayqueue.iceberg as rqi

    started = time.perf_counter()
    rqi.wait_translated(topic, cluster, timeout_s=300)
    waited = time.perf_counter() - started
    rows = (
        rqi.duckdb(topic, cluster=cluster)
        .query(
            "views",
            "SELECT json_extract_string(decode(value), '$.device') AS device, count(*) AS views "
            "FROM views GROUP BY device ORDER BY views DESC",
        )
        .fetchall()
    )
    console.print(f"'{topic}' as the Iceberg table {rqi.table_identifier(topic, cluster)}, queried with DuckDB:")
    table = Table(title="Views per device")
    table.add_column("device")
    table.add_column("views", justify="right")
    for device, views in rows:
        table.add_row(device, f"{views:,}")
    console.print(table)
    total = sum(views for _, views in rows)
    if total != records:
        raise SystemExit(f"the Iceberg table holds {total:,} views, expected {records:,}")
    return f"{total:,} records in the table ({waited:.1f}s after the Spark job), queried in {time.perf_counter() - started - waited:.1f}s"


def spark_session(rq_spark: Any) -> Any:
    """The demo's Spark (RayDP, 1 executor), bound to the node's address as Ray is, rather
    than warning that the host name resolves to a loopback one."""
    import ray

    os.environ.setdefault("SPARK_LOCAL_IP", ray.util.get_node_ip_address())
    return rq_spark.session("rayqueue-demo", num_executors=1, executor_cores=1, executor_memory="1G")


def main(argv: list[str] | None = None, after: Callable[[Any], None] | None = None) -> int:
    """Run the demo (``argv``: its command line); ``after(cluster)`` runs once the pipeline is
    done, before the cluster is shut down (scripts/console_screenshots.py photographs the
    console over the demo's topics and groups then)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=int, default=30, help="event-time span of the stream")
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args(argv)

    import logging

    import rayqueue
    from rayqueue import spark as rq_spark
    from scripts.embedded import tear_down

    # A demo prints its own story: Ray Data logs each dataset's progress at INFO.
    logging.getLogger("ray.data").setLevel(logging.WARNING)

    figures: dict[str, str] = {}
    t_start = time.perf_counter()
    root = tempfile.mkdtemp(prefix="rayqueue-demo-")
    console.rule("[bold]rayqueue demo")
    cluster = rayqueue.launch(log_dirs=os.path.join(root, "data"))
    spark = None
    try:
        brokers = cluster.describe().get("brokers", [])
        console.print(f"cluster up: {len(brokers) or 3} brokers on Ray, data in {root}")
        admin = cluster.admin()
        admin.create_topic(EVENTS_TOPIC, args.partitions, configs=ICEBERG_TOPIC_CONFIG)
        admin.create_topic(RESULTS_TOPIC, 1)
        console.print(f"topics: {EVENTS_TOPIC} ({args.partitions} partitions), {RESULTS_TOPIC} (1 partition)")

        seconds, nbytes = produce_page_views(cluster, EVENTS_TOPIC, args.records, args.minutes)
        figures["produce"] = (
            f"{args.records:,} records, {nbytes / 1e6:,.0f} MB in {seconds:.1f}s: "
            f"{args.records / seconds:,.0f} records/s, {nbytes / 1e6 / seconds:,.1f} MB/s"
        )
        console.print(f"produced {figures['produce']}")

        records, seconds = consume_sample(cluster, EVENTS_TOPIC)
        show_sample(records)
        lag = sum(info.lag for info in cluster.admin().group_lag(SAMPLE_GROUP).values())
        console.print(f"group '{SAMPLE_GROUP}' committed its sample; lag left: {lag:,} records")
        figures["consume sample"] = f"{len(records)} records via group '{SAMPLE_GROUP}' in {seconds * 1000:.0f} ms"

        console.print("starting Spark on Ray (RayDP, 1 executor)...")
        started = time.perf_counter()
        spark = spark_session(rq_spark)
        figures["spark start"] = f"{time.perf_counter() - started:.1f}s"

        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        event_schema = StructType(
            [
                StructField("user", StringType()),
                StructField("page", StringType()),
                StructField("ts", LongType()),
                StructField("referrer", StringType()),
                StructField("device", StringType()),
            ]
        )
        started = time.perf_counter()
        views = rq_spark.read(spark, EVENTS_TOPIC)
        events = views.select(F.from_json(F.col("value").cast("string"), event_schema).alias("e"), "timestamp")
        per_minute = (
            events.groupBy(F.window("timestamp", "1 minute").alias("w"), F.col("e.page").alias("page"))
            .agg(F.count("*").alias("views"), F.approx_count_distinct("e.user").alias("users"))
            .select(
                F.col("page").alias("key"),
                F.to_json(
                    F.struct(
                        F.col("w.start").cast("string").alias("minute"),
                        "page",
                        "views",
                        "users",
                    )
                ).alias("value"),
                F.col("w.end").alias("timestamp"),  # each result carries the end of its window
            )
        )
        written = rq_spark.write(per_minute, RESULTS_TOPIC, cluster=cluster)
        seconds = time.perf_counter() - started
        figures["spark job"] = (
            f"{args.records:,} events read, aggregated into {written:,} page-minutes and written back "
            f"in {seconds:.1f}s ({args.records / seconds:,.0f} events/s)"
        )
        console.print(f"Spark: {figures['spark job']}")

        started = time.perf_counter()
        result_schema = StructType(
            [
                StructField("minute", StringType()),
                StructField("page", StringType()),
                StructField("views", LongType()),
                StructField("users", LongType()),
            ]
        )
        results = rq_spark.read(spark, RESULTS_TOPIC)
        parsed = results.select(F.from_json(F.col("value").cast("string"), result_schema).alias("r"), "offset").select(
            "r.*", "offset"
        )
        total = parsed.agg(F.sum("views")).collect()[0][0]
        # The three busiest pages of each of the latest minutes.
        from pyspark.sql import Window

        rank = F.row_number().over(Window.partitionBy("minute").orderBy(F.desc("views"), "page"))
        latest = [r["minute"] for r in parsed.select("minute").distinct().orderBy(F.desc("minute")).limit(8).collect()]
        top = (
            parsed.where(F.col("minute").isin(latest))
            .withColumn("rank", rank)
            .where("rank <= 3")
            .orderBy(F.desc("minute"), "rank")
            .collect()
        )
        figures["read back"] = f"{results.count():,} result records in {time.perf_counter() - started:.1f}s"
        table = Table(title=f"Top pages per minute (latest {len(latest)} minutes), read back from '{RESULTS_TOPIC}'")
        for column, justify in (
            ("minute", "left"),
            ("#", "right"),
            ("page", "left"),
            ("views", "right"),
            ("~users", "right"),
            ("offset", "right"),
        ):
            table.add_column(column, justify=justify)
        for row in top:
            table.add_row(
                row["minute"] if row["rank"] == 1 else "",
                str(row["rank"]),
                row["page"],
                f"{row['views']:,}",
                f"{row['users']:,}",
                str(row["offset"]),
                end_section=row["rank"] == 3,
            )
        console.print(table)
        if total != args.records:
            console.print(f"[red]views add up to {total:,}, expected {args.records:,}")
            return 1
        console.print(f"views over all page-minutes add up to {total:,}: every event counted once")
        figures["iceberg table"] = query_iceberg_table(cluster, EVENTS_TOPIC, args.records)

        figures["total"] = f"{time.perf_counter() - t_start:.1f}s"
        summary = Table(title="Summary", show_header=False)
        summary.add_column("step")
        summary.add_column("figure")
        for step, figure in figures.items():
            summary.add_row(step, figure)
        console.print(summary)
        if after is not None:
            after(cluster)
        return 0
    finally:
        tear_down(cluster, spark, root)


if __name__ == "__main__":
    sys.exit(main())
