"""Parked long polls cannot stall a broker (issue 39, item 7), on a one-broker cluster of
this module's own (its broker process is stopped by the last test).

The two attacks at small scale: many connections pipelining long-poll fetches at the log end
and then closing; one connection pipelining fetches of many partitions with a huge
``min_bytes``. Meanwhile an unrelated produce completes, each connection has one request in
processing (Kafka's muted channel), a many-partition fetch holds one broker call however
many partitions it names, and once the connections close the broker's parked waits go back
to zero (``describe_host``). Also: ``max_wait_ms`` is cut to ``rayqueue.fetch.wait.max.ms``;
a many-partition fetch waits for ``min_bytes`` counted over its partitions; ``rayqueue
health`` and the listener-up gauge report a broker whose process does not answer.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import urllib.request

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

import rayqueue
from actors.names import broker_actor_name
from rayqueue.cli import app
from tests.gateway.test_fetch import FETCH, fetch_request, partitions_of
from tests.gateway.wire import Wire, gateway_address, request_frame
from tests.helpers import SMALL_INTERNAL_TOPICS, wait_for

NAMESPACE = "rayqueue-long-polls-test"
# Generous for a loaded 2-core machine: what is asserted is that things happen, not how fast.
DEADLINE_S = 60.0
# Shorter than the fetch wait bound (rayqueue.fetch.wait.max.ms, 30 s by default): waits that
# go back to zero within this were ended by their connection's close, not by their deadline.
CANCELLED_WITHIN_S = 20.0
LONG_WAIT_MS = 90_000


@pytest.fixture(scope="module")
def polled(ray_session):
    root = tempfile.mkdtemp(prefix="rayqueue-long-polls-")
    cluster = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace=NAMESPACE,
        rayqueue_num_brokers=1,
        listeners="PLAINTEXT://127.0.0.1:0",
        **SMALL_INTERNAL_TOPICS,
    )
    yield cluster
    cluster.shutdown(delete_data=True)
    shutil.rmtree(root, ignore_errors=True)


def broker_stats() -> dict:
    return ray.get(ray.get_actor(broker_actor_name(0), namespace=NAMESPACE).describe_host.remote(), timeout=60)


def gateway_stats() -> dict:
    """Broker 0's listener figures (its one host serves the listener)."""
    return ray.get(ray.get_actor(broker_actor_name(0), namespace=NAMESPACE).listener_stats.remote(), timeout=60)


def nothing_parked() -> bool:
    broker, gateway = broker_stats(), gateway_stats()
    return (
        broker["replica_calls_in_flight"] == 0 and broker["parked_fetches"] == 0 and gateway["requests_in_flight"] == 0
    )


def produce_elsewhere(cluster, topic: str, partition: int = 0) -> None:
    """A produce the attack has nothing to do with, native and through the gateway, each
    waited for with a deadline."""
    producer = cluster.producer()
    try:
        producer.send(topic, b"native", partition=partition).get(DEADLINE_S)
    finally:
        producer.close()
    from confluent_kafka import Producer

    kafka = Producer({"bootstrap.servers": cluster.bootstrap_servers, "message.timeout.ms": int(DEADLINE_S * 1000)})
    kafka.produce(topic, b"kafka", partition=partition)
    assert kafka.flush(DEADLINE_S) == 0


def pipeline(address, frames: list[bytes]) -> socket.socket:
    sock = socket.create_connection(address, timeout=DEADLINE_S)
    sock.sendall(b"".join(frames))
    return sock


def test_closed_connections_end_their_pipelined_long_polls(polled):
    """Attack one: connections each pipelining long polls at the log end, then closing."""
    admin = polled.admin()
    admin.create_topic("polled", 1)
    admin.create_topic("unrelated", 1)
    address = gateway_address(polled, 0)
    connections, pipelined = 20, 10
    at_end = fetch_request(12, {"polled": [(0, 0, 1 << 20, -1)]}, max_wait_ms=LONG_WAIT_MS)
    socks = [pipeline(address, [request_frame(at_end, i + 1) for i in range(pipelined)]) for _ in range(connections)]
    try:
        wait_for(
            lambda: broker_stats()["replica_calls_in_flight"] >= connections,
            timeout=DEADLINE_S,
            what="every connection's first long poll parked in the broker",
        )
        produce_elsewhere(polled, "unrelated")
        # One request per connection in processing: the other pipelined ones wait unread.
        assert gateway_stats()["requests_in_flight"] == connections
        assert broker_stats()["replica_calls_in_flight"] == connections
    finally:
        for sock in socks:
            sock.close()
    wait_for(nothing_parked, timeout=CANCELLED_WITHIN_S, what="the closed connections' long polls ended")


def test_one_connection_cannot_park_a_call_per_partition(polled):
    """Attack two: one connection pipelining fetches of many partitions with a huge min_bytes."""
    admin = polled.admin()
    partitions = 200
    admin.create_topic("wide", partitions)
    admin.create_topic("aside", 1)
    address = gateway_address(polled, 0)
    wide = fetch_request(
        12,
        {"wide": [(p, 0, 1 << 20, -1) for p in range(partitions)]},
        max_wait_ms=LONG_WAIT_MS,
        min_bytes=10**9,
    )
    sock = pipeline(address, [request_frame(wide, i + 1) for i in range(5)])
    try:
        wait_for(lambda: broker_stats()["parked_fetches"] == 1, timeout=DEADLINE_S, what="the wide fetch parked")
        produce_elsewhere(polled, "aside")
        # The attacked partitions serve other clients: a produce and another consumer's fetch.
        produce_elsewhere(polled, "wide", partition=7)
        with Wire(address, timeout=DEADLINE_S) as other:
            answer = other.call(fetch_request(12, {"wide": [(7, 0, 1 << 20, -1)]}, max_wait_ms=LONG_WAIT_MS))
            assert b"native" in partitions_of(answer)[7].records
        broker = broker_stats()
        assert broker["parked_fetches"] == 1 and broker["replica_calls_in_flight"] == 1
        assert gateway_stats()["requests_in_flight"] == 1
    finally:
        sock.close()
    wait_for(nothing_parked, timeout=CANCELLED_WITHIN_S, what="the closed connection's wide fetch ended")


def test_a_wide_fetch_waits_for_min_bytes_over_its_partitions(polled):
    admin = polled.admin()
    admin.create_topic("summed", 3)
    value = b"v" * 1000
    producer = polled.producer(linger_ms=0)
    try:
        with Wire(gateway_address(polled, 0), timeout=DEADLINE_S) as wire:
            # Two batches of a 1,000-byte record are needed; one is not enough.
            wire.send(
                fetch_request(
                    12, {"summed": [(p, 0, 1 << 20, -1) for p in range(3)]}, max_wait_ms=LONG_WAIT_MS, min_bytes=1800
                )
            )
            wait_for(lambda: broker_stats()["parked_fetches"] == 1, timeout=DEADLINE_S, what="the fetch parked")
            producer.send("summed", value, partition=0).get(DEADLINE_S)
            wire.sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                wire.sock.recv(1)  # not answered for one record
            wire.sock.setblocking(True)
            wire.sock.settimeout(DEADLINE_S)
            producer.send("summed", value, partition=2).get(DEADLINE_S)
            _, response = wire.receive(FETCH, 12)
    finally:
        producer.close()
    parts = partitions_of(response)
    assert value in parts[0].records and value in parts[2].records and parts[1].records == b""
    assert broker_stats()["parked_fetches"] == 0


def test_max_wait_is_cut_to_the_broker_bound(polled):
    """A fetch asking to wait 2^31-1 ms at the log end is answered (empty) once
    rayqueue.fetch.wait.max.ms (30 s here, the default) has passed."""
    polled.admin().create_topic("bounded", 1)
    with Wire(gateway_address(polled, 0), timeout=DEADLINE_S + 30) as wire:
        answer = wire.call(fetch_request(12, {"bounded": [(0, 0, 1 << 20, -1)]}, max_wait_ms=2**31 - 1))
    part = partitions_of(answer)[0]
    assert part.error_code == 0 and part.records == b"" and part.high_watermark == 0


def _listener_up(metrics_export_port: int) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_export_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "ray_rayqueue_broker_listener_up"
        and s.labels.get("cluster") == NAMESPACE
        and s.labels.get("broker") == "0"
    ]
    return sum(found) if found else None


def test_health_reports_a_broker_whose_process_does_not_answer(polled, metrics_export_port):
    """The broker's process stopped (SIGSTOP: its event loop answers nothing) while its
    listener, in the gateway's process, still answers ApiVersions: ``rayqueue health``
    fails naming the broker and the listener-up gauge reads 0; both recover with it."""
    runner = CliRunner()
    ok = runner.invoke(app, ["health", "--name", NAMESPACE])
    assert ok.exit_code == 0, ok.output
    wait_for(lambda: _listener_up(metrics_export_port) == 1, timeout=DEADLINE_S, interval=0.5, what="listener up")
    pid = broker_stats()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        bad = runner.invoke(app, ["health", "--name", NAMESPACE])
        assert bad.exit_code == 1, bad.output
        text = " ".join(bad.output.split())
        assert "broker 0" in text and "does not answer" in text, text
        wait_for(lambda: _listener_up(metrics_export_port) == 0, timeout=DEADLINE_S, interval=0.5, what="gauge 0")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(
        lambda: runner.invoke(app, ["health", "--name", NAMESPACE]).exit_code == 0,
        timeout=DEADLINE_S,
        interval=0.5,
        what="healthy again",
    )
    wait_for(lambda: _listener_up(metrics_export_port) == 1, timeout=DEADLINE_S, interval=0.5, what="gauge 1 again")
