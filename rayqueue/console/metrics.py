"""The console's charts from the cluster's Prometheus metrics: every Ray node's metrics
agent is scraped over HTTP on the sampler's tick, parsed with prometheus_client's text
parser, filtered to this cluster (the ``cluster`` label is the rayqueue namespace), and
turned into rates, request-time p99s and gauges (see ``actors/metrics.py`` for the names).

Counters give rates from their increase between two scrapes of the same node, summed over
series (one per recording process: a topic's leader moving to another process starts a new
series, and a restarted process starts its series again from zero, so a series found lower
than before counts its whole value, as Prometheus' ``rate()`` does).
"""

from __future__ import annotations

import concurrent.futures
import math
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# Ray prefixes every application metric with ``ray_``.
PREFIX = "ray_rayqueue_"
MESSAGES_IN = PREFIX + "messages_in_total"
BYTES_IN = PREFIX + "bytes_in_total"
BYTES_OUT = PREFIX + "bytes_out_total"
REQUEST_TIME_BUCKET = PREFIX + "request_total_time_ms_bucket"
UNDER_REPLICATED = PREFIX + "under_replicated_partitions"
OFFLINE = PREFIX + "offline_partitions_count"
GROUP_LAG = PREFIX + "group_lag"
_COUNTERS = (MESSAGES_IN, BYTES_IN, BYTES_OUT)
_WANTED = frozenset((*_COUNTERS, REQUEST_TIME_BUCKET, UNDER_REPLICATED, OFFLINE, GROUP_LAG))

# The request label values of a produce and of a consumer's fetch: an actor call
# ("FetchConsumer") or a Kafka client's request through the gateway ("Fetch").
PRODUCE_REQUESTS = frozenset({"Produce"})
FETCH_REQUESTS = frozenset({"Fetch", "FetchConsumer"})

SOURCE_METRICS = "metrics"
SOURCE_SNAPSHOTS = "snapshots"
SOURCE_LABELS = {
    SOURCE_METRICS: "from Prometheus metrics",
    SOURCE_SNAPSHOTS: "from cluster snapshots (no metrics endpoint answers)",
}

_SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class TopicTraffic:
    """One topic's traffic per second between two scrapes."""

    messages_in: float = 0.0
    bytes_in: float = 0.0
    bytes_out: float = 0.0


@dataclass(frozen=True, slots=True)
class MetricsPoint:
    """What the metrics say at ``taken_at`` (seconds since the epoch): per-topic traffic
    since the previous scrape, the p99 of produce and fetch request times over that window
    (None: no such request in it), under-replicated and offline partitions, group lag."""

    taken_at: float
    topics: dict[str, TopicTraffic]
    produce_p99_ms: float | None
    fetch_p99_ms: float | None
    under_replicated: int
    offline: int
    group_lag: dict[str, int]
    partition_lag: dict[str, dict[str, int]] = field(default_factory=dict)  # group -> "topic-partition" -> lag
    endpoints: int = 0


def ray_metrics_endpoints() -> list[str]:
    """``http://host:port/metrics`` of every live Ray node that exports metrics."""
    import ray

    urls = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        host = node.get("NodeManagerAddress")
        if node.get("Alive") and port and host:
            host = f"[{host}]" if ":" in host else host
            urls.append(f"http://{host}:{port}/metrics")
    return sorted(set(urls))


def fetch_text(url: str, timeout_s: float) -> str:
    """One scrape (raises on any failure: refused, timed out, not HTTP 200)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http(s) URL we built
        return response.read().decode("utf-8", errors="replace")


def parse(text: str, cluster: str) -> dict[_SeriesKey, float]:
    """The samples the console uses, of ``cluster`` only, keyed by name and every label."""
    out: dict[_SeriesKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in _WANTED and sample.labels.get("cluster") == cluster:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def increase(previous: float | None, current: float) -> float:
    """A counter's increase between two readings of one series: all of it when the series
    is new or restarted lower (its process restarted), else the difference."""
    if previous is None or current < previous:
        return current
    return current - previous


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus' ``histogram_quantile`` over cumulative bucket counts by upper bound
    (``+Inf`` included): linear inside the bucket the rank falls in; None when empty."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0 or not math.isinf(bounds[-1]):
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # beyond the largest finite bound: the best known is that bound
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = bound, count
    return lower


class MetricsReader:
    """Scrapes the endpoints and turns two scrapes of each into a :class:`MetricsPoint`.

    ``read`` returns None when no endpoint answered (the console then falls back to its
    snapshots) and on the first answer of all (rates need a previous scrape)."""

    def __init__(
        self,
        cluster: str,
        endpoints: Callable[[], Iterable[str]] = ray_metrics_endpoints,
        timeout_s: float = 1.0,
    ) -> None:
        self.cluster = cluster
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        # Per endpoint: the last answered scrape's samples and its monotonic time.
        self._last: dict[str, tuple[float, dict[_SeriesKey, float]]] = {}
        self.last_error: str | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="console-scrape")

    def _scrape_all(self, urls: list[str]) -> dict[str, tuple[float, dict[_SeriesKey, float]]]:
        def one(url: str) -> tuple[float, dict[_SeriesKey, float]]:
            text = fetch_text(url, self.timeout_s)
            return time.monotonic(), parse(text, self.cluster)

        answered: dict[str, tuple[float, dict[_SeriesKey, float]]] = {}
        errors = []
        futures = {self._pool.submit(one, url): url for url in urls}
        for future, url in futures.items():
            try:
                answered[url] = future.result()
            except Exception as exc:  # noqa: BLE001 - a node without metrics is not an error of ours
                errors.append(f"{url}: {exc}")
        self.last_error = "; ".join(errors) or None
        return answered

    def read(self) -> MetricsPoint | None:
        """Scrape every endpoint once; the point since each one's previous scrape."""
        try:
            urls = list(self.endpoints())
        except Exception as exc:  # noqa: BLE001 - no node list: no metrics this tick
            self.last_error = f"listing Ray nodes: {exc}"
            return None
        answered = self._scrape_all(urls)
        if not answered:
            return None
        taken_at = time.time()
        traffic: dict[str, dict[str, float]] = {}
        produce: dict[float, float] = {}
        fetch: dict[float, float] = {}
        gauges: dict[str, float] = {UNDER_REPLICATED: 0.0, OFFLINE: 0.0}
        lag: dict[str, dict[str, int]] = {}
        rated = False
        for url, (now, samples) in answered.items():
            before = self._last.get(url)
            self._last[url] = (now, samples)
            for (name, labels), value in samples.items():
                tags = dict(labels)
                if name in (UNDER_REPLICATED, OFFLINE):
                    gauges[name] += value
                elif name == GROUP_LAG:
                    per = lag.setdefault(tags.get("group", ""), {})
                    tp = f"{tags.get('topic', '')}-{tags.get('partition', '')}"
                    per[tp] = per.get(tp, 0) + int(value)
            if before is None:
                continue  # the first answer of this endpoint is where its rates start
            rated = True
            then, old = before
            elapsed = now - then
            if elapsed <= 0:
                continue
            for key, value in samples.items():
                name, labels = key
                grown = increase(old.get(key), value)
                if not grown:
                    continue
                tags = dict(labels)
                if name in _COUNTERS:
                    per_topic = traffic.setdefault(tags.get("topic", ""), {})
                    per_topic[name] = per_topic.get(name, 0.0) + grown / elapsed
                elif name == REQUEST_TIME_BUCKET:
                    request = tags.get("request")
                    target = produce if request in PRODUCE_REQUESTS else fetch if request in FETCH_REQUESTS else None
                    if target is not None:
                        bound = float(tags.get("le", "inf"))
                        target[bound] = target.get(bound, 0.0) + grown
        for url in set(self._last) - set(urls):
            del self._last[url]  # a node gone: forget it, its series left with it
        if not rated:
            return None
        return MetricsPoint(
            taken_at=taken_at,
            topics={
                topic: TopicTraffic(v.get(MESSAGES_IN, 0.0), v.get(BYTES_IN, 0.0), v.get(BYTES_OUT, 0.0))
                for topic, v in traffic.items()
            },
            produce_p99_ms=histogram_quantile(0.99, produce),
            fetch_p99_ms=histogram_quantile(0.99, fetch),
            under_replicated=int(gauges[UNDER_REPLICATED]),
            offline=int(gauges[OFFLINE]),
            group_lag={group: sum(parts.values()) for group, parts in lag.items()},
            partition_lag=lag,
            endpoints=len(answered),
        )

    def close(self) -> None:
        """Stop the scraping threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = [
    "SOURCE_LABELS",
    "SOURCE_METRICS",
    "SOURCE_SNAPSHOTS",
    "MetricsPoint",
    "MetricsReader",
    "TopicTraffic",
    "fetch_text",
    "histogram_quantile",
    "increase",
    "parse",
    "ray_metrics_endpoints",
]
