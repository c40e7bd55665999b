"""The ports that tests must never bind: the defaults of ``rayqueue start`` (Kafka's 9092 and
the next ones, one per broker; Ray's metrics on 8080; the console on 8088) and of ``ray start``.

A Kafka broker or a ``rayqueue start`` may run beside the test suite on the same machine, so
every test takes free ports (port 0). ``tests/test_ports.py`` checks the test sources for
these numbers; ``hold`` occupies them while a test runs, to show that it needs none of them.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable, Iterator


def rayqueue_default_ports() -> dict[int, str]:
    """The ports ``rayqueue start`` binds when told nothing, read from the code that picks them."""
    from actors.config import BROKER_CONFIG
    from actors.listeners import parse_listener
    from rayqueue.cli import DEFAULT_LISTENERS, DEFAULT_METRICS_EXPORT_PORT
    from rayqueue.cli.common import DEFAULT_SCHEMA_REGISTRY_LISTENERS
    from rayqueue.console import DEFAULT_PORT as CONSOLE_PORT

    first = parse_listener(DEFAULT_LISTENERS).port
    brokers = BROKER_CONFIG.keys["rayqueue.num.brokers"].default
    ports = {first + rank: f"Kafka listener of broker rank {rank} (`rayqueue start`)" for rank in range(brokers)}
    ports[DEFAULT_METRICS_EXPORT_PORT] = "Prometheus metrics of `rayqueue start`'s embedded Ray"
    ports[CONSOLE_PORT] = "the web console (`rayqueue console`, `rayqueue start --console`)"
    ports[int(DEFAULT_SCHEMA_REGISTRY_LISTENERS.rsplit(":", 1)[1])] = "the schema registry of `rayqueue start`"
    return ports


def ray_default_ports() -> dict[int, str]:
    """The fixed ports ``ray start`` binds unless told otherwise."""
    from ray._private import ray_constants

    return {
        ray_constants.DEFAULT_PORT: "Ray's GCS (`ray start --head`)",
        ray_constants.DEFAULT_DASHBOARD_PORT: "Ray's dashboard",
        ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT: "Ray's dashboard agent (every `ray start`)",
        # Hard-coded in ray/scripts/scripts.py when Ray's client server is installed.
        10001: "Ray's client server (`ray start --head`)",
    }


def default_ports() -> dict[int, str]:
    """Every port a test must not bind, with what it is the default of."""
    return {**ray_default_ports(), **rayqueue_default_ports()}


@contextlib.contextmanager
def hold(ports: Iterable[int], host: str = "127.0.0.1") -> Iterator[dict[int, bool]]:
    """Listen on ``host`` at each of ``ports`` for the duration, as a broker running beside the
    tests would. Yields ``{port: held}``: False where someone else has the port already (it is
    taken either way)."""
    sockets: list[socket.socket] = []
    held: dict[int, bool] = {}
    try:
        for port in ports:
            sock = socket.socket()
            try:
                sock.bind((host, port))
                sock.listen(1)
            except OSError:
                sock.close()
                held[port] = False
                continue
            sockets.append(sock)
            held[port] = True
        yield held
    finally:
        for sock in sockets:
            sock.close()
