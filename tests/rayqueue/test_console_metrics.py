"""The console's metrics reader (rayqueue/console/metrics.py) without Ray: Prometheus text
served over real HTTP by a local server whose answer the test changes between scrapes,
so increases, restarted series, other clusters, p99s and failures are known exactly."""

from __future__ import annotations

import http.server
import math
import socket
import threading

import pytest

from rayqueue.console.metrics import MetricsReader, histogram_quantile, increase, parse
from tests.helpers import wait_for

CLUSTER = "console-metrics-unit"
RAY_LABELS = 'Component="core_worker",NodeAddress="127.0.0.1",SessionName="s",Version="2.60.0"'


class _Endpoint:
    """A /metrics endpoint on a free loopback port, answering whatever ``text`` holds."""

    def __init__(self) -> None:
        self.text = ""
        self.scrapes = 0
        self.delay = threading.Event()  # set: answers wait for `released`, as a busy Ray agent's do
        self.released = threading.Event()
        self.answering = 0
        self.most_at_once = 0
        outer = self
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with lock:
                    outer.scrapes += 1
                    outer.answering += 1
                    outer.most_at_once = max(outer.most_at_once, outer.answering)
                try:
                    if outer.delay.is_set():
                        outer.released.wait(30)
                    self._answer()
                finally:
                    with lock:
                        outer.answering -= 1

            def _answer(self) -> None:
                body = outer.text.encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def endpoint():
    e = _Endpoint()
    yield e
    e.close()


def _series(name: str, value: float, worker: str, cluster: str = CLUSTER, **labels: str) -> str:
    tags = ",".join(f'{k}="{v}"' for k, v in sorted({"cluster": cluster, **labels}.items()))
    return f'{name}{{{RAY_LABELS},WorkerId="{worker}",{tags}}} {value}\n'


def _text(
    messages: dict[tuple[str, str], float],
    bytes_out: dict[tuple[str, str], float],
    produce_buckets: dict[str, float],
    urp: float = 0,
    offline: float = 0,
    lag: dict[tuple[str, str, str], float] | None = None,
    other_cluster: float = 0,
) -> str:
    out = ["# HELP ray_rayqueue_messages_in_total Records\n# TYPE ray_rayqueue_messages_in_total counter\n"]
    out += [_series("ray_rayqueue_messages_in_total", v, w, topic=t, broker="0") for (t, w), v in messages.items()]
    # The same topic name in another cluster on the same Ray: never counted.
    out.append(_series("ray_rayqueue_messages_in_total", other_cluster, "w9", cluster="another", topic="a", broker="0"))
    out.append("# HELP ray_rayqueue_bytes_out_total Bytes\n# TYPE ray_rayqueue_bytes_out_total counter\n")
    out += [_series("ray_rayqueue_bytes_out_total", v, w, topic=t, broker="0") for (t, w), v in bytes_out.items()]
    out.append("# HELP ray_rayqueue_request_total_time_ms Time\n# TYPE ray_rayqueue_request_total_time_ms histogram\n")
    for le, v in produce_buckets.items():
        out.append(
            _series(
                "ray_rayqueue_request_total_time_ms_bucket",
                v,
                "w1",
                le=le,
                request="Produce",
                path="actor",
                acks="-1",
                broker="0",
            )
        )
    out.append(
        "# HELP ray_rayqueue_under_replicated_partitions U\n# TYPE ray_rayqueue_under_replicated_partitions gauge\n"
    )
    out.append(_series("ray_rayqueue_under_replicated_partitions", urp, "w0", topic="a"))
    out.append("# HELP ray_rayqueue_offline_partitions_count O\n# TYPE ray_rayqueue_offline_partitions_count gauge\n")
    out.append(_series("ray_rayqueue_offline_partitions_count", offline, "w0"))
    out.append("# HELP ray_rayqueue_group_lag L\n# TYPE ray_rayqueue_group_lag gauge\n")
    for (g, t, p), v in (lag or {}).items():
        out.append(_series("ray_rayqueue_group_lag", v, "w5", group=g, topic=t, partition=p))
    return "".join(out)


BUCKETS_0 = {"1.0": 0, "5.0": 0, "10.0": 0, "+Inf": 0}


def test_rates_are_increases_summed_over_series_and_survive_a_restart(endpoint):
    # A window of 0: every point covers the time since the scrape before it.
    reader = MetricsReader(CLUSTER, lambda: [endpoint.url], timeout_s=5, window_s=0)
    try:
        endpoint.text = _text({("a", "w1"): 100}, {("a", "w1"): 5000}, BUCKETS_0, other_cluster=7)
        assert reader.read() is None  # the first scrape is where rates start
        # 50 more on the leader's process; a second process (a new leader) appears with 30;
        # 100 produces: 98 under 1 ms, 1 under 5 ms, 1 under 10 ms.
        endpoint.text = _text(
            {("a", "w1"): 150, ("a", "w2"): 30},
            {("a", "w1"): 9000},
            {"1.0": 98, "5.0": 99, "10.0": 100, "+Inf": 100},
            urp=1,
            offline=2,
            lag={("g", "a", "0"): 40, ("g", "a", "1"): 2},
            other_cluster=1_000_000,
        )
        point = reader.read()
        assert point is not None and point.endpoints == 1
        assert point.topics["a"].messages_in * point.window_s == pytest.approx(80)
        assert point.topics["a"].bytes_out * point.window_s == pytest.approx(4000)
        assert set(point.topics) == {"a"}  # the other cluster's topic is not ours
        # p99 = rank 99 of 100: the top of the (1, 5] bucket, as histogram_quantile gives.
        assert point.produce_p99_ms == pytest.approx(5.0)
        assert point.fetch_p99_ms is None  # no fetch in the window
        assert (point.under_replicated, point.offline) == (1, 2)
        assert point.group_lag == {"g": 42} and point.partition_lag == {"g": {"a-0": 40, "a-1": 2}}

        # The first process restarts: its series starts again from 0 and reads 10 (all new);
        # the second grows by 5. The rates stay positive: 15 came in.
        endpoint.text = _text(
            {("a", "w1"): 10, ("a", "w2"): 35}, {("a", "w1"): 9000}, {"1.0": 98, "5.0": 99, "10.0": 100, "+Inf": 100}
        )
        point = reader.read()
        assert point.topics["a"].messages_in * point.window_s == pytest.approx(15)
        assert point.topics["a"].bytes_out == 0
        assert point.produce_p99_ms is None  # no produce since the last scrape
    finally:
        reader.close()


def test_rates_cover_the_window_whatever_the_exports_timing(endpoint):
    # Ray's workers export every few seconds: most scrapes see nothing new. Over a window
    # of several scrapes the rate is what came in over that window, restarts included.
    reader = MetricsReader(CLUSTER, lambda: [endpoint.url], timeout_s=5, window_s=3600)
    try:
        endpoint.text = _text({("a", "w1"): 0}, {}, BUCKETS_0)
        assert reader.read() is None
        for value in (60, 60, 60, 5, 5, 25):  # an export, nothing new twice, a restart, ...
            endpoint.text = _text({("a", "w1"): value}, {}, {"1.0": 1, "5.0": 2, "10.0": 2, "+Inf": 2})
            point = reader.read()
        # 60, then 5 after the restart, then 20 more: 85 over the whole window.
        assert point.topics["a"].messages_in * point.window_s == pytest.approx(85)
        # Two produces in the window: one under 1 ms, one in (1, 5].
        assert point.produce_p99_ms == pytest.approx(1.0 + 4.0 * 0.98)
    finally:
        reader.close()


def test_no_answer_is_no_point_and_says_why(endpoint):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]  # bound, never listening: connections are refused
        reader = MetricsReader(CLUSTER, lambda: [f"http://127.0.0.1:{closed}/metrics"], timeout_s=2)
        try:
            assert reader.read() is None and reader.read() is None
            assert reader.last_error and f":{closed}/metrics" in reader.last_error
        finally:
            reader.close()
    # One node of two answering is enough.
    endpoint.text = _text({("a", "w1"): 1}, {}, BUCKETS_0)
    reader = MetricsReader(CLUSTER, lambda: [endpoint.url, f"http://127.0.0.1:{closed}/metrics"], timeout_s=2)
    try:
        assert reader.read() is None
        endpoint.text = _text({("a", "w1"): 4}, {}, BUCKETS_0)
        point = reader.read()
        assert point is not None and point.endpoints == 1 and point.topics["a"].messages_in > 0
        assert endpoint.scrapes == 2
    finally:
        reader.close()
    failing = MetricsReader(CLUSTER, _no_nodes, timeout_s=1)
    assert failing.read() is None and "listing Ray nodes" in failing.last_error
    failing.close()


def test_a_slow_endpoint_is_waited_for_not_asked_again(endpoint):
    """Ray's agent renders every series of every worker process in one thread: on a busy
    node that takes longer than a sampler tick waits. The scrape goes on across ticks, the
    endpoint is never asked twice at once, its answer counts when it comes, and meanwhile
    its last answer's gauges stand (before, every tick gave up and asked again: no point)."""
    reader = MetricsReader(CLUSTER, lambda: [endpoint.url], timeout_s=0.2, window_s=0, scrape_timeout_s=30)
    try:
        endpoint.text = _text({("a", "w1"): 10}, {}, BUCKETS_0, urp=3)
        endpoint.delay.set()
        assert reader.read() is None  # nothing answered yet
        assert "no answer within 0.2 s yet" in reader.last_error
        assert reader.read() is None and endpoint.scrapes == 1  # still the first scrape
        endpoint.released.set()  # the first answer: where the rates start
        wait_for(lambda: endpoint.answering == 0, 30, what="the first answer")
        endpoint.released.clear()
        endpoint.text = _text({("a", "w1"): 25}, {}, BUCKETS_0, urp=1)
        assert reader.read() is None  # takes the first answer: where the rates start
        point = reader.read()  # asks again, and that answer waits
        # No new answer: the gauges are the last answer's, no increase yet.
        assert point is not None and point.endpoints == 1 and point.under_replicated == 3
        assert point.topics == {}
        endpoint.released.set()
        point = wait_for(
            lambda: (p := reader.read()) is not None and p.under_replicated == 1 and p, 30, what="the answer"
        )
        assert point.topics["a"].messages_in * point.window_s == pytest.approx(15)
        assert endpoint.most_at_once == 1
    finally:
        endpoint.released.set()
        reader.close()


def _no_nodes() -> list[str]:
    raise ConnectionError("GCS unreachable")


def test_parse_keeps_only_this_clusters_wanted_series():
    text = _text({("a", "w1"): 3}, {}, BUCKETS_0, other_cluster=9) + "ray_other_metric_total 5\n"
    parsed = parse(text, CLUSTER)
    names = {name for name, _ in parsed}
    assert "ray_other_metric_total" not in names and "ray_rayqueue_messages_in_total" in names
    assert all(dict(labels)["cluster"] == CLUSTER for _, labels in parsed)
    assert sum(v for (n, _), v in parsed.items() if n == "ray_rayqueue_messages_in_total") == 3


def test_increase_and_histogram_quantile():
    assert increase(None, 7) == 7 and increase(3, 10) == 7 and increase(10, 4) == 4 and increase(5, 5) == 0
    # 10 observations: 5 in (0, 1], 4 in (1, 2], 1 in (2, 4].
    buckets = {1.0: 5, 2.0: 9, 4.0: 10, math.inf: 10}
    assert histogram_quantile(0.5, buckets) == pytest.approx(1.0)
    assert histogram_quantile(0.7, buckets) == pytest.approx(1.5)
    assert histogram_quantile(0.99, buckets) == pytest.approx(3.8)
    # Beyond the largest finite bound: that bound (Prometheus does the same).
    assert histogram_quantile(0.99, {1.0: 1, math.inf: 10}) == 1.0
    assert histogram_quantile(0.99, {1.0: 0, math.inf: 0}) is None
    assert histogram_quantile(0.99, {}) is None
