"""What the scripts that run an embedded cluster in a temp dir share (the demo, the Spark and
Iceberg benchmarks): keyed records produced in chunks, Spark's values-summed count, best rounds
of paths that alternate, and the teardown of the cluster, Spark, Ray and the temp dir."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any


def produce_keyed(producer: Any, topic: str, records: int, pad: bytes, timeout_s: float) -> float:
    """Send ``records`` values (``%012d|`` + ``pad``, keyed by one of 50,000 users) in chunks of
    100,000 with ``send_many``, wait for every ack and close the producer: the seconds taken."""
    chunk = 100_000
    start = time.perf_counter()
    pending = []
    for base in range(0, records, chunk):
        n = min(chunk, records - base)
        values = [b"%012d|" % i + pad for i in range(base, base + n)]
        keys = [b"user-%06d" % (i % 50_000) for i in range(base, base + n)]
        pending.append(producer.send_many(topic, values, keys))
    for result in pending:
        result.get(timeout_s)
    producer.close()
    return time.perf_counter() - start


def values_summed(df: Any) -> int:
    """Count ``df``'s rows while summing its values' lengths (so that every value is read,
    where a count alone may read only metadata): the row count."""
    from pyspark.sql import functions as F

    return df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]["n"]


def best_rounds(paths: Mapping[str, Callable[[], int]], runs: int, expected: int) -> dict[str, float]:
    """The fastest of ``runs`` rounds of each path (seconds), the paths alternating round by
    round so that a load change on the machine hits them alike; each must count ``expected``."""
    best = dict.fromkeys(paths, float("inf"))
    for _ in range(runs):
        for name, fn in paths.items():
            began = time.perf_counter()
            count = fn()
            if count != expected:
                raise SystemExit(f"{name}: counted {count:,} rows, expected {expected:,}")
            best[name] = min(best[name], time.perf_counter() - began)
    return best


def tear_down(cluster: Any, spark: Any, root: str) -> None:
    """Stop Spark (when it started), shut the cluster down deleting its data, stop Ray and
    remove the temp dir."""
    import ray

    from rayqueue import spark as rq_spark

    if spark is not None:
        rq_spark.stop()
    cluster.shutdown(delete_data=True)
    if ray.is_initialized():
        ray.shutdown()
    shutil.rmtree(root, ignore_errors=True)
