"""The clients' metrics: Kafka's producer-metrics and consumer-fetch-manager-metrics.

Two surfaces, as Kafka's clients have them (``KafkaProducer.metrics()`` and JMX):

- ``Producer.metrics()`` / ``Consumer.metrics()``: a flat dict ``{kafka name: value}`` of the
  client's group (``producer-metrics``, ``consumer-fetch-manager-metrics``), e.g.
  ``record-send-total``, ``batch-size-avg``, ``records-lag-max``. Always kept, as in Kafka.
- Ray: the same values through ``ray.util.metrics`` as ``rayqueue_producer_*`` and
  ``rayqueue_consumer_*`` (scraped as ``ray_rayqueue_...``) with ``cluster`` and
  ``client_id`` tags, when the client's ``metric.reporters`` holds ``ray`` (by default it
  does when the cluster's ``rayqueue.metrics.enabled`` is on). Totals are Ray counters,
  rates, averages and maxima are gauges; latencies carry a ``_ms`` suffix.

Nothing is recorded per record: the sender records once per produce call and once per
batch in it (a batch knows its record count and size), the fetcher once per fetch answer.
Ray is handed the values by one exporter thread per process, every :data:`TICK_S`.

Rates, averages and maxima are windowed as Kafka's ``SampledStat``: ``metrics.num.samples``
windows of ``metrics.sample.window.ms`` each (defaults 2 and 30 s), so ``records-lag-max``
falls back to 0 within two windows of the consumer catching up. A rate divides by at least
``num.samples - 1`` whole windows, as Kafka's ``Rate`` does, so it starts low.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

PRODUCER_GROUP = "producer-metrics"
CONSUMER_GROUP = "consumer-fetch-manager-metrics"
RAY_REPORTER = "ray"

# How often the exporter hands the clients' values to Ray (as the actors' tick).
TICK_S = 1.0

# The names each client's metrics() holds, in its Kafka group.
PRODUCER_METRICS = (
    "record-send-total",
    "record-send-rate",
    "record-retry-total",
    "record-retry-rate",
    "record-error-total",
    "record-error-rate",
    "batch-size-avg",
    "batch-size-max",
    "records-per-request-avg",
    "request-total",
    "request-rate",
    "request-latency-avg",
    "request-latency-max",
)
CONSUMER_METRICS = (
    "records-consumed-total",
    "records-consumed-rate",
    "bytes-consumed-total",
    "bytes-consumed-rate",
    "records-per-request-avg",
    "fetch-size-avg",
    "fetch-size-max",
    "fetch-total",
    "fetch-rate",
    "fetch-latency-avg",
    "fetch-latency-max",
    "records-lag-max",
)


def prometheus_name(kind: str, kafka_name: str) -> str:
    """The Ray metric name of a client metric: ``rayqueue_producer_request_latency_avg_ms``."""
    name = f"rayqueue_{kind}_{kafka_name.replace('-', '_')}"
    return name + "_ms" if "latency" in kafka_name else name


class Sensor:
    """Kafka's Sensor with its usual stats over sampled windows: total (cumulative sum),
    count, and the windowed rate, average and maximum of the values recorded."""

    __slots__ = ("total", "count", "_window", "_samples", "_windows")

    def __init__(self, window_s: float, samples: int) -> None:
        self.total = 0.0
        self.count = 0
        self._window = window_s
        self._samples = samples
        self._windows: list[list[float]] = []  # [start, count, sum, max], oldest first

    def record(self, value: float, now: float) -> None:
        """One observation of ``value`` (a batch's records, a request's latency...)."""
        self.total += value
        self.count += 1
        windows = self._windows
        if not windows or now - windows[-1][0] >= self._window:
            windows.append([now, 0, 0.0, value])
            if len(windows) > self._samples:
                del windows[0]
        current = windows[-1]
        current[1] += 1
        current[2] += value
        if value > current[3]:
            current[3] = value

    def _live(self, now: float) -> list[list[float]]:
        # Kafka's purgeObsoleteSamples: a window that began samples * window ago is forgotten.
        age = self._samples * self._window
        return [w for w in self._windows if w[0] + age >= now]

    def rate(self, now: float, counting: bool = False) -> float:
        """Sum (or, ``counting``, number) of observations per second over the live windows."""
        live = self._live(now)
        if not live:
            return 0.0
        elapsed = now - live[0][0]
        # Kafka's Rate.windowSize: at least num.samples - 1 whole windows.
        elapsed = max(elapsed, (self._samples - 1) * self._window, 1e-3)
        return sum(w[1 if counting else 2] for w in live) / elapsed

    def avg(self, now: float) -> float:
        """Average observation over the live windows (0 without any, where Kafka gives NaN)."""
        live = self._live(now)
        count = sum(w[1] for w in live)
        return sum(w[2] for w in live) / count if count else 0.0

    def max(self, now: float) -> float:
        """Largest observation over the live windows (0 without any)."""
        live = self._live(now)
        return max((w[3] for w in live), default=0.0)


class ClientMetrics:
    """A client's sensors, its ``metrics()`` dict, and its Ray export."""

    def __init__(self, kind: str, config: Mapping[str, Any], cluster: str, cluster_metrics: bool) -> None:
        self.kind = kind
        self.client_id = str(config["client.id"])
        self.cluster = cluster
        window, samples = config["metrics.sample.window.ms"] / 1000, config["metrics.num.samples"]
        self.lock = threading.Lock()
        names = ("send", "retry", "error", "batch", "request", "latency")
        if kind == "consumer":
            names = ("records", "bytes", "latency", "lag")
        self.sensors = {name: Sensor(window, samples) for name in names}
        reporters = config["metric.reporters"]
        if reporters is None:  # follow the cluster's rayqueue.metrics.enabled
            reporters = (RAY_REPORTER,) if cluster_metrics else ()
        self.ray_enabled = RAY_REPORTER in reporters
        self._exported: dict[str, float] = {}
        if self.ray_enabled:
            _exporter().add(self)

    # -- recording (per request or batch, never per record) -------------------------------

    def batches_sent(self, batches: Iterable[Any], now: float) -> None:
        """A produce call goes out with ``batches`` (each with ``records``, ``data``, ``attempts``)."""
        s = self.sensors
        send, size, retry = s["send"], s["batch"], s["retry"]
        records = 0
        with self.lock:
            for batch in batches:
                send.record(batch.records, now)
                size.record(len(batch.data), now)
                if batch.attempts > 1:
                    retry.record(batch.records, now)
                records += batch.records
            s["request"].record(records, now)

    def request_answered(self, latency_s: float, now: float) -> None:
        """A produce call was answered (or failed) after ``latency_s``."""
        with self.lock:
            self.sensors["latency"].record(latency_s * 1000.0, now)

    def records_failed(self, records: int, now: float) -> None:
        """A batch of ``records`` failed for good."""
        with self.lock:
            self.sensors["error"].record(records, now)

    def fetched(self, records: int, size: int, latency_s: float, lag: int, now: float) -> None:
        """A fetch answer of ``records`` records in ``size`` bytes arrived after ``latency_s``,
        leaving the partition ``lag`` records behind its high watermark."""
        s = self.sensors
        with self.lock:
            s["records"].record(records, now)
            s["bytes"].record(size, now)
            s["latency"].record(latency_s * 1000.0, now)
            s["lag"].record(lag, now)

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, float]:
        """The client's metrics by Kafka name."""
        now = time.monotonic()
        with self.lock:
            s = self.sensors
            if self.kind == "producer":
                send, retry, error, batch = s["send"], s["retry"], s["error"], s["batch"]
                request, latency = s["request"], s["latency"]
                return {
                    "record-send-total": send.total,
                    "record-send-rate": send.rate(now),
                    "record-retry-total": retry.total,
                    "record-retry-rate": retry.rate(now),
                    "record-error-total": error.total,
                    "record-error-rate": error.rate(now),
                    "batch-size-avg": batch.avg(now),
                    "batch-size-max": batch.max(now),
                    "records-per-request-avg": request.avg(now),
                    "request-total": float(request.count),
                    "request-rate": request.rate(now, counting=True),
                    "request-latency-avg": latency.avg(now),
                    "request-latency-max": latency.max(now),
                }
            records, size, latency, lag = s["records"], s["bytes"], s["latency"], s["lag"]
            return {
                "records-consumed-total": records.total,
                "records-consumed-rate": records.rate(now),
                "bytes-consumed-total": size.total,
                "bytes-consumed-rate": size.rate(now),
                "records-per-request-avg": records.avg(now),
                "fetch-size-avg": size.avg(now),
                "fetch-size-max": size.max(now),
                "fetch-total": float(latency.count),
                "fetch-rate": latency.rate(now, counting=True),
                "fetch-latency-avg": latency.avg(now),
                "fetch-latency-max": latency.max(now),
                "records-lag-max": lag.max(now),
            }

    def export(self) -> None:
        """Hand the values to Ray: counters by what they grew since the last export."""
        ray_metrics = client_ray_metrics(self.kind)
        tags = {"cluster": self.cluster, "client_id": self.client_id}
        for name, value in self.snapshot().items():
            metric = ray_metrics[name]
            if name.endswith("-total"):
                delta = value - self._exported.get(name, 0.0)
                if delta > 0:
                    metric.inc(delta, tags)
                    self._exported[name] = value
            else:
                metric.set(value, tags)

    def close(self) -> None:
        """A last export, and no more."""
        if self.ray_enabled:
            _exporter().remove(self)
            try:
                self.export()
            except Exception:  # noqa: BLE001 - closing a client must not fail on its metrics (Ray may be gone)
                logger.debug("client metrics export failed", exc_info=True)


@functools.cache
def client_ray_metrics(kind: str) -> dict[str, Any]:
    """This process's Ray metrics of one client kind (created once: Ray registers each)."""
    from ray.util.metrics import Counter, Gauge

    group = PRODUCER_GROUP if kind == "producer" else CONSUMER_GROUP
    out: dict[str, Any] = {}
    for name in PRODUCER_METRICS if kind == "producer" else CONSUMER_METRICS:
        cls = Counter if name.endswith("-total") else Gauge
        doc = f"{kind} client metric (Kafka: kafka.{kind}:type={group},client-id=*,name={name})"
        out[name] = cls(prometheus_name(kind, name), description=doc, tag_keys=("cluster", "client_id"))
    return out


class _Exporter:
    """One daemon thread per process that exports every live client's metrics each tick."""

    def __init__(self) -> None:
        self._clients: weakref.WeakSet[ClientMetrics] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, client: ClientMetrics) -> None:
        with self._lock:
            self._clients.add(client)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rayqueue-client-metrics", daemon=True)
                self._thread.start()

    def remove(self, client: ClientMetrics) -> None:
        with self._lock:
            self._clients.discard(client)

    def _run(self) -> None:
        while True:
            time.sleep(TICK_S)
            with self._lock:
                clients = list(self._clients)
            for client in clients:
                try:
                    client.export()
                except Exception:  # noqa: BLE001 - a metric export must never stop the others
                    logger.debug("client metrics export failed", exc_info=True)


@functools.cache
def _exporter() -> _Exporter:
    return _Exporter()


__all__ = [
    "CONSUMER_GROUP",
    "CONSUMER_METRICS",
    "PRODUCER_GROUP",
    "PRODUCER_METRICS",
    "RAY_REPORTER",
    "TICK_S",
    "ClientMetrics",
    "Sensor",
    "client_ray_metrics",
    "prometheus_name",
]
