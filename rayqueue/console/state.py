"""What the console server keeps: the cluster's clients, the latest snapshot and a ring
buffer of samples (rates and lag) that the pages draw their charts from.

Each sample holds what the cluster's Prometheus metrics said on that tick (when a Ray
metrics endpoint answers: :mod:`rayqueue.console.metrics`) and what two snapshots said
(high watermarks and committed offsets moving), which the charts fall back to."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rayqueue.admin import Admin
from rayqueue.cluster import Cluster
from rayqueue.console.metrics import DEFAULT_RATE_WINDOW_S, MetricsPoint, MetricsReader, ray_metrics_endpoints
from rayqueue.snapshot import ClusterSnapshot, TopicRate, rates, take_snapshot

logger = logging.getLogger(__name__)

# Ten minutes of history at the default 2 s sampling period.
DEFAULT_HISTORY = 300
DEFAULT_SAMPLE_INTERVAL_S = 2.0
# How long a sampler tick waits for the metrics endpoints: a dead node must not stall the
# sampler, and a slow answer (Ray's agent takes seconds on a busy node) is counted by a later
# tick (MetricsReader), not abandoned.
SCRAPE_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One point of history, at ``taken_at`` (seconds since the epoch): from two snapshots,
    per topic messages in/out per second and per group lag (total and per partition); and
    what the metrics said (None when no metrics endpoint answered)."""

    taken_at: float
    topic_rates: dict[str, TopicRate]
    group_lag: dict[str, int]
    partition_lag: dict[str, dict[str, int]]  # group -> "topic-partition" -> lag
    metrics: MetricsPoint | None = None
    window_s: float = 0.0  # the time between the two snapshots


class ClusterView:
    """The cluster as one principal sees and changes it: an Admin acting as ``principal``
    (None: the console's own, a super user), its latest snapshot (cached) and a producer
    for test records made on first use. Safe to call from many request threads."""

    def __init__(self, cluster: Cluster, principal: str | None = None) -> None:
        self.cluster = cluster
        self.principal = principal
        self.admin: Admin = cluster.admin(principal=principal)
        self._snapshot: ClusterSnapshot | None = None
        self._lock = threading.Lock()
        self._producer: Any = None
        self._producer_lock = threading.Lock()

    def snapshot(self, max_age_s: float) -> ClusterSnapshot:
        """The cached snapshot if younger than ``max_age_s``, else a fresh one (of what the
        principal may describe: :func:`rayqueue.snapshot.take_snapshot`)."""
        with self._lock:
            current = self._snapshot
            if current is not None and time.monotonic() - current.monotonic <= max_age_s:
                return current
            self._snapshot = take_snapshot(self.cluster, self.admin)
            return self._snapshot

    def invalidate(self) -> None:
        """Forget the cached snapshot (after a change)."""
        with self._lock:
            self._snapshot = None

    def producer(self) -> Any:
        """One producer, as the principal, for every 'produce a test record' (made on first use)."""
        with self._producer_lock:
            if self._producer is None:
                self._producer = self.cluster.producer(client_id="rayqueue-console", principal=self.principal)
            return self._producer

    def consumer(self, **config: Any) -> Any:
        """A new consumer acting as the principal (the caller closes it)."""
        return self.cluster.consumer(principal=self.principal, **config)

    def close(self) -> None:
        """Close the producer, if one was made."""
        with self._producer_lock:
            if self._producer is not None:
                self._producer.close()
                self._producer = None


class ConsoleState:
    """Snapshots on demand (cached for ``max_age``), a sampler thread filling the history,
    and the console's own view of the cluster (:class:`ClusterView`, a super user's: what
    the pages act through when the cluster has no authentication). Safe to call from many
    request threads."""

    def __init__(
        self,
        cluster: Cluster,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        history: int = DEFAULT_HISTORY,
        metrics_endpoints: Callable[[], Iterable[str]] = ray_metrics_endpoints,
    ) -> None:
        self.cluster = cluster
        self.view = ClusterView(cluster)
        self.sample_interval_s = sample_interval_s
        self.history: collections.deque[Sample] = collections.deque(maxlen=history)
        # The sampler's recent snapshots, oldest first: rates run from the oldest one within
        # the metrics' rate window, so that offsets committed in bursts (a consumer commits
        # every few seconds) read as a steady rate, the same on every page of one tick.
        self._bases: collections.deque[ClusterSnapshot] = collections.deque()
        self.metrics = MetricsReader(cluster.namespace, metrics_endpoints, SCRAPE_WAIT_S)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    @property
    def admin(self) -> Admin:
        """The console's own Admin (a super user's)."""
        return self.view.admin

    # -- snapshots and history ------------------------------------------------------------

    def snapshot(self, max_age_s: float | None = None) -> ClusterSnapshot:
        """The console's own latest snapshot if younger than ``max_age_s`` (default: the
        sampling period), else a fresh one (which the sampler also draws history from)."""
        return self.view.snapshot(self.sample_interval_s if max_age_s is None else max_age_s)

    def invalidate(self) -> None:
        """Forget the cached snapshot (after a change made through the console)."""
        self.view.invalidate()

    def latest(self) -> Sample | None:
        """The last history sample (None before the sampler's second tick)."""
        return self.history[-1] if self.history else None

    def sample(self) -> Sample | None:
        """One tick of the sampler: a snapshot (reused if a request just took one) and a
        scrape of the metrics endpoints, kept as a history sample. Only the sampler scrapes,
        so a request never waits on a metrics endpoint."""
        snap = self.snapshot(max_age_s=self.sample_interval_s * 0.5)
        point = self.metrics.read()
        if not self._bases:
            self._bases.append(snap)
            return None
        # Rates need two snapshots some time apart: a reused one would divide by nothing.
        if snap.monotonic - self._bases[-1].monotonic < min(1.0, self.sample_interval_s / 2):
            return None
        while len(self._bases) > 1 and snap.monotonic - self._bases[1].monotonic >= DEFAULT_RATE_WINDOW_S:
            self._bases.popleft()
        base = self._bases[0]
        sample = Sample(
            point.taken_at if point is not None else snap.taken_at,
            rates(base, snap),
            {g: v.lag for g, v in snap.groups.items()},
            {g: {f"{o.topic}-{o.partition}": o.lag or 0 for o in v.offsets} for g, v in snap.groups.items()},
            point,
            snap.monotonic - base.monotonic,
        )
        self._bases.append(snap)
        self.history.append(sample)
        return sample

    def start_sampling(self) -> None:
        """Sample every ``sample_interval_s`` in a daemon thread until ``close``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._sample_loop, name="console-sampler", daemon=True)
            self._thread.start()

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - the pages show it; sampling goes on
                self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                logger.warning("console sampling failed: %s", self.last_error)
            self._stop.wait(self.sample_interval_s)

    def producer(self) -> Any:
        """The console's own producer for test records (made on first use)."""
        return self.view.producer()

    def close(self) -> None:
        """Stop sampling and close the producer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.metrics.close()
        self.view.close()
