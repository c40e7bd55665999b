"""The console's charts from the cluster's Prometheus metrics: every Ray node's metrics
agent is scraped over HTTP on the sampler's tick, parsed with prometheus_client's text
parser, filtered to this cluster (the ``cluster`` label is the rayqueue namespace), and
turned into rates, request-time p99s and gauges (see ``actors/metrics.py`` for the names).

Counters give rates from their increase over a window of scrapes, summed over series (one
per recording process: a topic's leader moving to another process starts a new series,
and a restarted process starts its series again from zero, so a series found lower than
before counts its whole value, as Prometheus' ``rate()`` does).
"""

from __future__ import annotations

import collections
import concurrent.futures
import math
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

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

# Rates are the increase over this long: twice Ray's default export interval
# (metrics_report_interval_ms = 10 s), as a Grafana panel takes rate(x[1m]) over scrapes.
DEFAULT_RATE_WINDOW_S = 20.0

# How long one scrape may take before it is given up: Prometheus' own default
# scrape_timeout. Ray's agent renders every series of every worker process that ever
# recorded one (megabytes on a node that ran a few hundred replicas, in one Python thread
# that serves one request at a time), which takes over a second on a busy machine.
DEFAULT_SCRAPE_TIMEOUT_S = 10.0

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
    per second over the last ``window_s`` seconds, the p99 of produce and fetch request
    times over that window (None: no such request in it), and the gauges as last
    exported: under-replicated and offline partitions, group lag."""

    taken_at: float
    window_s: float
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


def scrape(url: str, cluster: str, timeout_s: float) -> dict[_SeriesKey, float]:
    """One endpoint's samples of ``cluster`` (:func:`fetch_text`, then :func:`parse`)."""
    return parse(fetch_text(url, timeout_s), cluster)


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
    """Scrapes the endpoints on each :meth:`read` and answers a :class:`MetricsPoint`.

    Ray's agent serves what each worker last exported, and workers export every
    ``metrics_report_interval_ms`` (10 s by default) at their own moments: a rate taken
    between two scrapes a second apart would be 0 most of the time and a spike now and
    then. So, like Prometheus' ``rate(x[window])``, rates are the increase over the last
    ``window_s`` (a multiple of the export interval shows a steady load as steady).
    Increases are summed scrape by scrape, so a series that restarts in the window
    still counts everything it grew by.

    ``read`` waits up to ``timeout_s`` for the endpoints' answers; a scrape still running
    then goes on in the background (for up to ``scrape_timeout_s``) and is counted by a
    later ``read``, which asks that endpoint nothing new meanwhile (Ray's agent answers one
    request at a time: a scrape abandoned and asked again would never finish), and takes
    its gauges from that endpoint's last answer. ``read`` returns None when no endpoint
    answered (the console then falls back to its snapshots) and until a second scrape
    gives a window to take rates over."""

    def __init__(
        self,
        cluster: str,
        endpoints: Callable[[], Iterable[str]] = ray_metrics_endpoints,
        timeout_s: float = 1.0,
        window_s: float = DEFAULT_RATE_WINDOW_S,
        scrape_timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S,
    ) -> None:
        self.cluster = cluster
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        self.window_s = window_s
        self.scrape_timeout_s = max(scrape_timeout_s, timeout_s)
        # Per endpoint: its scrape under way, if any (one at a time per endpoint).
        self._running: dict[str, concurrent.futures.Future[dict[_SeriesKey, float]]] = {}
        # Per endpoint: its last answered scrape's samples (where its next increases start).
        self._last: dict[str, dict[_SeriesKey, float]] = {}
        # Every increase since the first scrape, summed by (metric, topic) and (request
        # kind, bucket bound); and its values at each read, oldest first.
        self._totals: dict[tuple[str, Any], float] = {}
        self._history: collections.deque[tuple[float, dict[tuple[str, Any], float]]] = collections.deque()
        self.last_error: str | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="console-scrape")

    def _scrape_all(self, urls: list[str]) -> tuple[dict[str, dict[_SeriesKey, float]], list[str]]:
        """The endpoints that answered within ``timeout_s`` (their samples), and those
        whose scrape is still under way."""
        running = self._running
        for url in set(running) - set(urls):
            running.pop(url).cancel()  # a node gone: its answer would count for no one
        for url in urls:
            if url not in running:
                running[url] = self._pool.submit(scrape, url, self.cluster, self.scrape_timeout_s)
        concurrent.futures.wait([running[url] for url in urls], timeout=self.timeout_s)
        answered: dict[str, dict[_SeriesKey, float]] = {}
        pending: list[str] = []
        errors = []
        for url in urls:
            future = running[url]
            if not future.done():
                pending.append(url)
                errors.append(f"{url}: no answer within {self.timeout_s:g} s yet (still waiting)")
                continue
            del running[url]
            try:
                answered[url] = future.result()
            except Exception as exc:  # noqa: BLE001 - a node without metrics is not an error of ours
                errors.append(f"{url}: {exc}")
        self.last_error = "; ".join(errors) or None
        return answered, pending

    def _add_increases(self, old: dict[_SeriesKey, float], samples: dict[_SeriesKey, float]) -> None:
        totals = self._totals
        for key, value in samples.items():
            name, labels = key
            if name not in _COUNTERS and name != REQUEST_TIME_BUCKET:
                continue
            grown = increase(old.get(key), value)
            if not grown:
                continue
            tags = dict(labels)
            if name in _COUNTERS:
                total_key: tuple[str, Any] = (name, tags.get("topic", ""))
            else:
                request = tags.get("request")
                kind = "produce" if request in PRODUCE_REQUESTS else "fetch" if request in FETCH_REQUESTS else None
                if kind is None:
                    continue
                total_key = (kind, float(tags.get("le", "inf")))
            totals[total_key] = totals.get(total_key, 0.0) + grown

    def read(self) -> MetricsPoint | None:
        """Scrape every endpoint (but one still answering an earlier read); the point over
        the window ending now."""
        try:
            urls = list(self.endpoints())
        except Exception as exc:  # noqa: BLE001 - no node list: no metrics this tick
            self.last_error = f"listing Ray nodes: {exc}"
            return None
        answered, pending = self._scrape_all(urls)
        for url in set(self._last) - set(urls):
            del self._last[url]  # a node gone: forget it, its series left with it
        # An endpoint still answering counts with its last answer's gauges (its counters'
        # increases come with the answer under way).
        waiting = {url: self._last[url] for url in pending if url in self._last}
        if not answered and not waiting:
            return None
        now, taken_at = time.monotonic(), time.time()
        gauges: dict[str, float] = {UNDER_REPLICATED: 0.0, OFFLINE: 0.0}
        lag: dict[str, dict[str, int]] = {}
        for url, samples in answered.items():
            old = self._last.get(url)
            self._last[url] = samples
            if old is not None:  # an endpoint's first answer is where its increases start
                self._add_increases(old, samples)
        for samples in (*answered.values(), *waiting.values()):
            for (name, labels), value in samples.items():
                if name in gauges:
                    gauges[name] += value
                elif name == GROUP_LAG:
                    tags = dict(labels)
                    per = lag.setdefault(tags.get("group", ""), {})
                    tp = f"{tags.get('topic', '')}-{tags.get('partition', '')}"
                    per[tp] = per.get(tp, 0) + int(value)
        history = self._history
        history.append((now, dict(self._totals)))
        # Keep the newest reading at least a window old (where the rates start) and after.
        while len(history) > 2 and now - history[1][0] >= self.window_s:
            history.popleft()
        if len(history) < 2:
            return None
        since, base = history[0]
        span = now - since
        if span <= 0:
            return None
        grown = {key: value - base.get(key, 0.0) for key, value in self._totals.items()}
        traffic: dict[str, dict[str, float]] = {}
        buckets: dict[str, dict[float, float]] = {"produce": {}, "fetch": {}}
        for (what, detail), value in grown.items():
            if what in _COUNTERS:
                traffic.setdefault(detail, {})[what] = value / span
            else:
                buckets[what][detail] = value
        return MetricsPoint(
            taken_at=taken_at,
            window_s=span,
            topics={
                topic: TopicTraffic(v.get(MESSAGES_IN, 0.0), v.get(BYTES_IN, 0.0), v.get(BYTES_OUT, 0.0))
                for topic, v in traffic.items()
            },
            produce_p99_ms=histogram_quantile(0.99, buckets["produce"]),
            fetch_p99_ms=histogram_quantile(0.99, buckets["fetch"]),
            under_replicated=int(gauges[UNDER_REPLICATED]),
            offline=int(gauges[OFFLINE]),
            group_lag={group: sum(parts.values()) for group, parts in lag.items()},
            partition_lag=lag,
            endpoints=len(answered) + len(waiting),
        )

    def close(self) -> None:
        """Stop the scraping threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = [
    "SOURCE_LABELS",
    "SOURCE_METRICS",
    "SOURCE_SNAPSHOTS",
    "DEFAULT_RATE_WINDOW_S",
    "DEFAULT_SCRAPE_TIMEOUT_S",
    "MetricsPoint",
    "MetricsReader",
    "TopicTraffic",
    "fetch_text",
    "histogram_quantile",
    "increase",
    "parse",
    "ray_metrics_endpoints",
    "scrape",
]
