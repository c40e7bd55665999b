"""The broker side's metrics: every Ray metric the actors record, defined in this one place.

Metrics go through ``ray.util.metrics`` to the metrics agent of each Ray node, which serves
them to Prometheus (and the Ray dashboard). Ray prefixes every name with ``ray_``, so
``rayqueue_messages_in_total`` is scraped as ``ray_rayqueue_messages_in_total``; the
description of each metric names the Kafka MBean it stands for. Every series carries the
cluster (the rayqueue namespace) so that two clusters on one Ray stay apart.

Recording never happens per record. Counters of the data path are summed in plain ints
per request and handed to Ray on the owning actor's periodic tick (:meth:`Recorder.flush`);
request-time histograms are observed once per request; gauges are set on the tick.

Metric objects are created once per process, on first use (:func:`broker_metrics`): a
Ray metric registers itself with the process's core worker, so one per call would leak.
``rayqueue.metrics.enabled=false`` (a broker key) turns recording off for a cluster, and
then no metric object is created at all.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from ray.util.metrics import Counter, Gauge, Histogram

from actors.clock import SYSTEM

# Request and flush times, in ms: Kafka's request times range from well under a
# millisecond (an answered fetch) to max.wait.ms long polls and acks=all waits.
TIME_BOUNDARIES_MS = [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000]

# How often actors hand their summed counters and fresh gauges to Ray. Ray's agent
# exports every few seconds anyway (metrics_report_interval_ms), so a second is plenty.
TICK_S = 1.0

# What the actor calls record (the request metrics' "path"): a rayqueue client's actor
# call, or a Kafka client's request through the gateway.
PATH_ACTOR = "actor"
PATH_GATEWAY = "gateway"


def _counter(name: str, mbean: str, doc: str, tags: tuple[str, ...]) -> Counter:
    return Counter(name, description=f"{doc} (Kafka: {mbean})", tag_keys=("cluster", *tags))


def _gauge(name: str, mbean: str, doc: str, tags: tuple[str, ...]) -> Gauge:
    return Gauge(name, description=f"{doc} (Kafka: {mbean})", tag_keys=("cluster", *tags))


def _histogram(name: str, mbean: str, doc: str, tags: tuple[str, ...]) -> Histogram:
    return Histogram(
        name, description=f"{doc} (Kafka: {mbean})", boundaries=TIME_BOUNDARIES_MS, tag_keys=("cluster", *tags)
    )


class BrokerMetrics:
    """Every broker-side metric (one instance per process: :func:`broker_metrics`)."""

    def __init__(self) -> None:
        btm = "kafka.server:type=BrokerTopicMetrics,name={},topic=*"
        topic = ("topic", "broker")
        self.messages_in = _counter(
            "rayqueue_messages_in_total", btm.format("MessagesInPerSec"), "Records appended by leaders", topic
        )
        self.bytes_in = _counter(
            "rayqueue_bytes_in_total", btm.format("BytesInPerSec"), "Record batch bytes appended by leaders", topic
        )
        self.bytes_out = _counter(
            "rayqueue_bytes_out_total", btm.format("BytesOutPerSec"), "Record batch bytes fetched by consumers", topic
        )
        self.replication_bytes_out = _counter(
            "rayqueue_replication_bytes_out_total",
            "kafka.server:type=BrokerTopicMetrics,name=ReplicationBytesOutPerSec",
            "Record batch bytes fetched by followers",
            topic,
        )
        self.produce_requests = _counter(
            "rayqueue_produce_requests_total",
            btm.format("TotalProduceRequestsPerSec"),
            "Produce requests to leaders",
            topic,
        )
        self.fetch_requests = _counter(
            "rayqueue_fetch_requests_total", btm.format("TotalFetchRequestsPerSec"), "Consumer fetch requests", topic
        )
        self.failed_produce = _counter(
            "rayqueue_failed_produce_requests_total",
            btm.format("FailedProduceRequestsPerSec"),
            "Produce requests that failed",
            topic,
        )
        self.failed_fetch = _counter(
            "rayqueue_failed_fetch_requests_total",
            btm.format("FailedFetchRequestsPerSec"),
            "Fetch requests that failed",
            topic,
        )
        self.request_time = _histogram(
            "rayqueue_request_total_time_ms",
            "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=*",
            "Time from a request's arrival to its answer, in ms (path: actor call or gateway)",
            ("broker", "path", "request", "acks"),
        )
        self.request_errors = _counter(
            "rayqueue_request_errors_total",
            "kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=*,error=*",
            "Requests answered with a Kafka error, by error name",
            ("broker", "path", "request", "error"),
        )
        self.authorization_denied = _counter(
            "rayqueue_authorization_denied_total",
            "kafka.server:type=authorizer-metrics,name=authorization-denied-rate-per-minute",
            "Requests' resources the authorizer refused, by Kafka's resource type (TOPIC, GROUP, CLUSTER, "
            "TRANSACTIONAL_ID)",
            ("broker", "path", "request", "resource_type"),
        )
        # Replication, computed by the controller from the cluster state it owns.
        self.under_replicated = _gauge(
            "rayqueue_under_replicated_partitions",
            "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions",
            "Partitions whose ISR is smaller than their replica set",
            ("topic",),
        )
        self.under_min_isr = _gauge(
            "rayqueue_under_min_isr_partitions",
            "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount",
            "Partitions whose ISR is smaller than min.insync.replicas",
            ("topic",),
        )
        self.offline = _gauge(
            "rayqueue_offline_partitions_count",
            "kafka.controller:type=KafkaController,name=OfflinePartitionsCount",
            "Partitions without a live leader",
            (),
        )
        self.active_controller = _gauge(
            "rayqueue_active_controller_count",
            "kafka.controller:type=KafkaController,name=ActiveControllerCount",
            "1 in the process of the live controller",
            (),
        )
        self.leader_count = _gauge(
            "rayqueue_leader_count",
            "kafka.server:type=ReplicaManager,name=LeaderCount",
            "Partitions led by the broker",
            ("broker",),
        )
        self.partition_count = _gauge(
            "rayqueue_partition_count",
            "kafka.server:type=ReplicaManager,name=PartitionCount",
            "Replicas hosted by the broker",
            ("broker",),
        )
        self.isr_shrinks = _counter(
            "rayqueue_isr_shrinks_total",
            "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec",
            "ISR shrinks",
            ("topic",),
        )
        self.isr_expands = _counter(
            "rayqueue_isr_expands_total",
            "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec",
            "ISR expansions",
            ("topic",),
        )
        self.leader_elections = _counter(
            "rayqueue_leader_elections_total",
            "kafka.controller:type=ControllerStats,name=LeaderElectionRateAndTimeMs",
            "Leader changes, clean and unclean",
            ("topic",),
        )
        self.unclean_elections = _counter(
            "rayqueue_unclean_leader_elections_total",
            "kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec",
            "Out-of-sync replicas elected leader",
            ("topic",),
        )
        # Log, set by every replica (leader or follower) on its tick.
        log = "kafka.log:type=Log,name={},topic=*,partition=*"
        replica = ("topic", "partition", "broker")
        self.log_size = _gauge("rayqueue_log_size_bytes", log.format("Size"), "Bytes of the replica's log", replica)
        self.log_segments = _gauge(
            "rayqueue_log_segments", log.format("NumLogSegments"), "Segments of the replica's log", replica
        )
        self.log_start_offset = _gauge(
            "rayqueue_log_start_offset", log.format("LogStartOffset"), "First offset of the replica's log", replica
        )
        self.log_end_offset = _gauge(
            "rayqueue_log_end_offset", log.format("LogEndOffset"), "Log end offset of the replica", replica
        )
        self.high_watermark = _gauge(
            "rayqueue_high_watermark",
            "kafka.cluster:type=Partition,name=HighWatermark (LastStableOffset alike)",
            "High watermark of the partition, as its leader has it",
            ("topic", "partition"),
        )
        self.flush_time = _histogram(
            "rayqueue_log_flush_time_ms",
            "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs",
            "Time of one log flush (fsync), in ms",
            ("broker",),
        )
        self.cleaner_bytes_read = _counter(
            "rayqueue_cleaner_bytes_read_total",
            "kafka.log.LogCleaner's per-pass stats (bytes read); cleaner-recopy-percent is written/read",
            "Bytes the cleaner read",
            ("topic", "broker"),
        )
        self.cleaner_bytes_written = _counter(
            "rayqueue_cleaner_bytes_written_total",
            "kafka.log.LogCleaner's per-pass stats (bytes written)",
            "Bytes the cleaner wrote",
            ("topic", "broker"),
        )
        self.cleaner_dirty_ratio = _gauge(
            "rayqueue_cleaner_dirty_ratio",
            "kafka.log:type=LogCleanerManager,name=max-dirty-percent",
            "Dirty bytes / (clean + dirty bytes) of a compacted log",
            replica,
        )
        self.cleaner_time_since_last_run = _gauge(
            "rayqueue_cleaner_time_since_last_run_ms",
            "kafka.log:type=LogCleanerManager,name=time-since-last-run-ms",
            "Milliseconds since the replica's last cleaner pass (since it opened, before the first)",
            replica,
        )
        # Iceberg topics, set by each leader's host on its tick (actors/iceberg; Kafka has none:
        # Redpanda's Iceberg translation metrics are the model).
        part = ("topic", "partition", "broker")
        self.iceberg_lag_records = Gauge(
            "rayqueue_iceberg_translation_lag_records",
            description="Offsets between an Iceberg topic partition's translated offset and its high watermark",
            tag_keys=("cluster", *part),
        )
        self.iceberg_lag_seconds = Gauge(
            "rayqueue_iceberg_translation_lag_seconds",
            description="How long the oldest untranslated committed record of an Iceberg topic partition has waited",
            tag_keys=("cluster", *part),
        )
        self.iceberg_translated = Counter(
            "rayqueue_iceberg_translated_records_total",
            description="Records an Iceberg topic's leaders put in its table",
            tag_keys=("cluster", "topic", "broker"),
        )
        self.iceberg_errors = Counter(
            "rayqueue_iceberg_translation_errors_total",
            description="Translation steps of an Iceberg topic that failed (catalog or warehouse unreachable, ...) "
            "and are tried again",
            tag_keys=("cluster", "topic", "broker"),
        )
        self.iceberg_invalid = Counter(
            "rayqueue_iceberg_invalid_records_total",
            description="Records an Iceberg topic's mode could not type (action: dlq_table or drop)",
            tag_keys=("cluster", "topic", "broker", "action"),
        )
        # Groups, set by the group coordinator.
        gmm = "kafka.coordinator.group:type=GroupMetadataManager,name={}"
        self.groups = _gauge("rayqueue_groups", gmm.format("NumGroups<State>"), "Groups by state", ("state",))
        self.group_members = _gauge(
            "rayqueue_group_members", "kafka.admin.ConsumerGroupCommand (members)", "Members of a group", ("group",)
        )
        self.group_state = _gauge(
            "rayqueue_group_state",
            "kafka.admin.ConsumerGroupCommand (state)",
            "1 for a group's current state, 0 for the others",
            ("group", "state"),
        )
        self.group_rebalances = _counter(
            "rayqueue_group_rebalances_total",
            "kafka.server:type=group-coordinator-metrics,name=group-completed-rebalance-count",
            "Completed rebalances (generations)",
            ("group",),
        )
        self.offset_commits = _counter(
            "rayqueue_offset_commits_total",
            "kafka.server:type=group-coordinator-metrics,name=offset-commit-count",
            "Offset commit requests",
            ("group",),
        )
        self.group_committed_offset = _gauge(
            "rayqueue_group_committed_offset",
            "kafka.admin.ConsumerGroupCommand (CURRENT-OFFSET)",
            "A group's committed offset",
            ("group", "topic", "partition"),
        )
        self.group_lag = _gauge(
            "rayqueue_group_lag",
            "kafka.admin.ConsumerGroupCommand (LAG); records-lag in Burrow",
            "High watermark minus the group's committed offset",
            ("group", "topic", "partition"),
        )
        # Transactions, set by the transaction coordinator.
        self.transactions_open = _gauge(
            "rayqueue_transactions_open",
            "kafka.server:type=transaction-coordinator-metrics (ongoing transactions)",
            "Transactions begun and not yet ended",
            (),
        )
        self.transaction_oldest_age = _gauge(
            "rayqueue_transaction_oldest_open_age_ms",
            "kafka.server:type=transaction-coordinator-metrics (ListTransactions duration)",
            "Age of the oldest open transaction, in ms (0: none open)",
            (),
        )
        # Replays of the internal topics and the metadata log (the coordinators, the controller).
        self.internal_records_skipped = _counter(
            "rayqueue_internal_records_skipped_total",
            "the coordinators' load errors (Kafka logs and skips such records; no MBean)",
            "Unreadable records skipped when an internal topic or the metadata log was replayed",
            ("topic",),
        )
        # The Kafka protocol gateway.
        self.listener_up = _gauge(
            "rayqueue_broker_listener_up",
            "none: a readiness probe's ApiVersions round trip",
            "1 when the broker's advertised listener answers ApiVersions and its process a ping, 0 when not",
            ("broker",),
        )
        # Kafka's selector metrics successful-authentication-total / failed-authentication-total
        # (per listener), with the SASL mechanism (SSL for a TLS client certificate on an SSL listener).
        self.successful_authentication = _counter(
            "rayqueue_successful_authentication_total",
            "kafka.server:type=socket-server-metrics,listener=*,name=successful-authentication-total",
            "Clients that authenticated",
            ("broker", "listener", "mechanism"),
        )
        self.failed_authentication = _counter(
            "rayqueue_failed_authentication_total",
            "kafka.server:type=socket-server-metrics,listener=*,name=failed-authentication-total",
            "Clients whose authentication failed",
            ("broker", "listener", "mechanism"),
        )
        self.gateway_connections = _gauge(
            "rayqueue_gateway_connections",
            "kafka.server:type=socket-server-metrics,name=connection-count",
            "Open Kafka client connections of a broker's gateway",
            ("broker",),
        )
        # The schema registry (its actor), after Confluent Schema Registry's own metrics.
        sr = "kafka.schema.registry:type={}"
        self.registry_requests = _counter(
            "rayqueue_schema_registry_requests_total",
            sr.format("jersey-metrics (request-count; request-error-count by http_status_code)"),
            "Schema registry HTTP requests by method, route (the path template) and status",
            ("method", "route", "status"),
        )
        self.registry_request_time = _histogram(
            "rayqueue_schema_registry_request_time_ms",
            sr.format("jersey-metrics (request-latency-avg, request-latency-max)"),
            "Time from a schema registry request's arrival to its answer, in ms",
            ("method", "route"),
        )
        self.registry_subjects = _gauge(
            "rayqueue_schema_registry_subjects",
            "GET /subjects (no MBean)",
            "Subjects with a live version",
            (),
        )
        self.registry_versions = _gauge(
            "rayqueue_schema_registry_versions",
            sr.format("registered-count / deleted-count"),
            "Subject versions, live and soft-deleted",
            ("state",),
        )
        self.registry_schemas = _gauge(
            "rayqueue_schema_registry_schemas",
            sr.format("avro-schemas-created, json-schemas-created, protobuf-schemas-created"),
            "Schemas (global ids) the registry holds, by type",
            ("schema_type",),
        )


@functools.cache
def broker_metrics() -> BrokerMetrics:
    """This process's broker metrics, created on first use."""
    return BrokerMetrics()


def error_name(exc: BaseException) -> str:
    """The Kafka error name of an exception (``NOT_LEADER_OR_FOLLOWER``), else its class name."""
    name = getattr(exc, "kafka_name", None)
    return name if isinstance(name, str) else type(exc).__name__


class Recorder:
    """What one actor records, with its tags built once; a disabled one records nothing.

    Counters of the data path are summed in ``pending`` (a dict of plain ints keyed by the
    metric and its tag tuple) and given to Ray by :meth:`flush`, on the actor's tick.
    """

    def __init__(self, cluster: str, enabled: bool = True) -> None:
        self.enabled = enabled
        self.cluster = cluster
        self.metrics = broker_metrics() if enabled else None
        self.pending: dict[tuple[Counter, tuple[tuple[str, str], ...]], float] = {}
        self._tag_cache: dict[tuple[str, ...], dict[str, str]] = {}

    def tags(self, **tags: Any) -> dict[str, str]:
        """``tags`` with the cluster, as Ray wants them (strings)."""
        return {"cluster": self.cluster, **{k: str(v) for k, v in tags.items()}}

    def add(self, counter: Counter, value: float, tags: tuple[tuple[str, str], ...]) -> None:
        """Sum ``value`` into ``counter`` until the next flush (a dict update, nothing more)."""
        key = (counter, tags)
        self.pending[key] = self.pending.get(key, 0) + value

    def flush(self) -> None:
        """Hand the summed counters to Ray."""
        pending, self.pending = self.pending, {}
        for (counter, tags), value in pending.items():
            if value:
                counter.inc(value, {"cluster": self.cluster, **dict(tags)})

    def observe_ms(self, histogram: Histogram, since: float, tags: dict[str, str], now: float | None = None) -> None:
        """Observe the time from ``since`` to ``now`` (default: ``SYSTEM.monotonic()``), in ms."""
        histogram.observe(((SYSTEM.monotonic() if now is None else now) - since) * 1000.0, tags)

    def set_all(self, gauge: Gauge, values: Iterable[tuple[dict[str, str], float]]) -> None:
        """Set ``gauge`` for each (tags, value)."""
        for tags, value in values:
            gauge.set(value, tags)


# The gateway's request being served (set per request task), so that the one place that
# maps an exception to a Kafka error code can count it for the right request.
current_request: contextvars.ContextVar[tuple[Recorder, dict[str, str]] | None] = contextvars.ContextVar(
    "rayqueue_current_request", default=None
)


def count_request_error(exc: BaseException) -> None:
    """Count an error answered for the gateway request being served (if any, and if metrics are on)."""
    served = current_request.get()
    if served is None:
        return
    recorder, tags = served
    recorder.add(recorder.metrics.request_errors, 1, (*tags.items(), ("error", error_name(exc))))


def count_authorization_denied(resource_type: str, served: tuple[Recorder, Mapping[str, str]] | None = None) -> None:
    """Count a resource the authorizer refused to the request being served: ``served`` (an
    actor's recorder and the request's broker, path and request tags: a native client's
    call) or else the gateway request of this task (if any, and if metrics are on)."""
    if served is None:
        served = current_request.get()
        if served is None:
            return
    recorder, tags = served
    key = (("broker", tags["broker"]), ("path", tags["path"]), ("request", tags["request"]))
    recorder.add(recorder.metrics.authorization_denied, 1, (*key, ("resource_type", resource_type)))


class GatewayMetrics:
    """What a broker's Kafka protocol gateway records: each request's total time by API
    (and acks for Produce), the errors it answers by name, its open connections."""

    def __init__(self, cluster: str, broker_id: int) -> None:
        self.recorder = Recorder(cluster, True)
        self.broker = str(broker_id)
        self._tags: dict[tuple[str, str], dict[str, str]] = {}

    def begin(self, request: str, acks: Any = None) -> tuple[contextvars.Token, dict[str, str], float]:
        """A request starts being served (in its own task): errors counted from here are its."""
        key = (request, "" if acks is None else str(acks) if acks in (-1, 0, 1) else "invalid")
        tags = self._tags.get(key)
        if tags is None:
            tags = self._tags[key] = self.recorder.tags(
                broker=self.broker, path=PATH_GATEWAY, request=request, acks=key[1]
            )
        return current_request.set((self.recorder, tags)), tags, SYSTEM.monotonic()

    def end(self, begun: tuple[contextvars.Token, dict[str, str], float]) -> None:
        """The request was answered (or failed): observe its time."""
        token, tags, started = begun
        current_request.reset(token)
        self.recorder.observe_ms(self.recorder.metrics.request_time, started, tags)

    def authentication(self, listener: str, mechanism: str, ok: bool) -> None:
        """A client authenticated on ``listener`` with ``mechanism``, or failed to."""
        metrics = self.recorder.metrics
        counter = metrics.successful_authentication if ok else metrics.failed_authentication
        self.recorder.add(counter, 1, (("broker", self.broker), ("listener", listener), ("mechanism", mechanism)))

    def tick(self, connections: int) -> None:
        """Counters to Ray; the connection gauge."""
        self.recorder.flush()
        self.recorder.metrics.gateway_connections.set(connections, self.recorder.tags(broker=self.broker))


__all__ = [
    "GatewayMetrics",
    "PATH_ACTOR",
    "PATH_GATEWAY",
    "TICK_S",
    "TIME_BOUNDARIES_MS",
    "BrokerMetrics",
    "Recorder",
    "broker_metrics",
    "count_authorization_denied",
    "count_request_error",
    "current_request",
    "error_name",
]
