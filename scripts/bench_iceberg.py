"""Iceberg topics: translation throughput against the produce rate, and Spark counting the
table against Spark reading the topic, all measured in the same run.

1. produce:     N records produced into a topic with ``rayqueue.iceberg.mode`` off (acks=all,
                send_many): the produce rate, the baseline.
2. translation: the topic altered to ``key_value``; the leaders translate its whole log (from
                the log start) into the Iceberg table: records per second from the alter to
                the last partition's translated offset reaching its high watermark (the brokers
                warmed up first on a small Iceberg topic). The ratio translation / produce says
                whether the leaders keep up with that producer.
3. Spark:       the same records counted by Spark from the table (``rayqueue.spark.read_table``,
                Iceberg's Spark runtime; a count alone reads the manifests' record counts, so
                the value lengths are summed as well, which reads every value) against
                ``rayqueue.spark.read`` of the topic (the RayDP bridge), the two alternating
                round by round; the best round of each is kept.

Launches its own embedded cluster in a temp dir and removes it. The machine's load changes the
figures: compare the ratios, measured in one run, not absolute numbers between runs.

    .venv/bin/python scripts/bench_iceberg.py [--records 1000000] [--runs 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100,000 records, one Spark round")
    parser.add_argument("--no-spark", action="store_true", help="translation only")
    args = parser.parse_args()
    if args.quick:
        args.records, args.runs = min(args.records, 100_000), 1

    import rayqueue
    import rayqueue.iceberg as rqi
    from rayqueue import spark as rq_spark
    from scripts.bench_ray import start_ray
    from scripts.embedded import best_rounds, produce_keyed, tear_down, values_summed

    start_ray()
    root = tempfile.mkdtemp(prefix="rayqueue-bench-iceberg-")
    cluster = rayqueue.launch(log_dirs=os.path.join(root, "data"))
    spark = None
    try:
        topic = "bench-iceberg"
        admin = cluster.admin()
        # Warm-up: every broker translates a small topic first (its process imports pyiceberg and
        # opens the catalog once, as a running cluster's brokers have long done).
        warm = "bench-iceberg-warm-up"
        admin.create_topic(
            warm, 6, configs={"rayqueue.iceberg.mode": "key_value", "rayqueue.iceberg.target.lag.ms": 200}
        )
        producer = cluster.producer(compression_type="none", acks="all")
        producer.send_many(warm, [b"warm"] * 600).get(60)
        rqi.wait_translated(warm, cluster, timeout_s=300)
        admin.create_topic(topic, args.partitions, configs={"rayqueue.iceberg.target.lag.ms": 1000})
        pad = b"x" * max(0, args.value_bytes - 13)
        produce_s = produce_keyed(producer, topic, args.records, pad, 600)
        produce_rate = args.records / produce_s

        start = time.perf_counter()
        admin.alter_configs(topic, {"rayqueue.iceberg.mode": "key_value"})
        rqi.wait_translated(topic, cluster, timeout_s=3600)
        translate_s = time.perf_counter() - start
        translate_rate = args.records / translate_s
        rows = rqi.table(topic, cluster).scan(selected_fields=("rayqueue.offset",)).to_arrow().num_rows
        if rows != args.records:
            raise SystemExit(f"the table holds {rows:,} rows, expected {args.records:,}")

        print(f"{args.records:,} records of ~{args.value_bytes} B, {args.partitions} partitions, 3 brokers")
        print(f"{'produce (acks=all, send_many)':44s} {produce_s:8.2f}s  {produce_rate:12,.0f} records/s")
        print(f"{'translation (log -> Iceberg table)':44s} {translate_s:8.2f}s  {translate_rate:12,.0f} records/s")
        print(f"translation / produce: {translate_rate / produce_rate:.2f}x")
        if args.no_spark:
            return 0
        try:
            runtime = rq_spark.iceberg_runtime_jars()
        except rq_spark.IcebergRuntimeNotFoundError as exc:
            print(f"Spark: skipped ({exc})")
            return 0
        spark = rq_spark.session("rayqueue-bench-iceberg", num_executors=1, executor_cores=1, iceberg=runtime)

        def table_count() -> int:
            return rq_spark.read_table(spark, topic, cluster=cluster).count()

        def table_summed() -> int:
            return values_summed(rq_spark.read_table(spark, topic, cluster=cluster))

        def topic_count() -> int:
            return rq_spark.read(spark, topic, cluster=cluster).count()

        def topic_summed() -> int:
            return values_summed(rq_spark.read(spark, topic, cluster=cluster))

        paths = {
            "Spark count, Iceberg table (read_table)": table_count,
            "Spark count, topic (rayqueue.spark.read)": topic_count,
            "Spark values summed, Iceberg table": table_summed,
            "Spark values summed, topic": topic_summed,
        }
        table_count()  # warm up the JVM, the runtime's classes and RayDP
        best = best_rounds(paths, args.runs, args.records)
        for name, seconds in best.items():
            print(f"{name:44s} {seconds:8.2f}s  {args.records / seconds:12,.0f} rows/s")
        names = list(paths)
        print(f"count:         table / topic {best[names[1]] / best[names[0]]:.1f}x faster")
        print(f"values summed: table / topic {best[names[3]] / best[names[2]]:.1f}x faster")
        return 0
    finally:
        tear_down(cluster, spark, root)


if __name__ == "__main__":
    sys.exit(main())
