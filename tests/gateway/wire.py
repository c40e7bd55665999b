"""A minimal Kafka protocol client for tests: kio requests over a plain socket.

It lets a test send exactly the request it means (a stale leader epoch, a topic id, a
byte limit, garbage) and read the raw answer, which the real clients do not allow.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


class _Chunks(list):
    write = list.append


def encode(obj: Any) -> bytes:
    """A kio entity's bytes."""
    chunks = _Chunks()
    entity_writer(type(obj))(chunks, obj)
    return b"".join(chunks)


def request_frame(body: Any, correlation_id: int, client_id: str | None = "wire-test") -> bytes:
    """The size-prefixed frame of a kio request body."""
    header_cls = body.__header_schema__
    header = header_cls(
        request_api_key=body.__api_key__,
        request_api_version=body.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    payload = encode(header) + encode(body)
    return struct.pack(">i", len(payload)) + payload


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """The first ``host:port`` of a bootstrap list."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


class Wire:
    """One connection to a gateway."""

    def __init__(self, address: tuple[str, int] | str, timeout: float = 30.0) -> None:
        if isinstance(address, str):
            address = parse_bootstrap(address)
        self.sock = socket.create_connection(address, timeout=timeout)
        self._next = 1

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are."""
        self.sock.sendall(data)

    def send(self, body: Any) -> int:
        """Send a request; returns its correlation id."""
        cid = self._next
        self._next += 1
        self.sock.sendall(request_frame(body, cid))
        return cid

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """(correlation id, decoded response) of the next response frame."""
        frame = self.read_frame()
        cls = load_response_schema(api_key, version)
        header, used = entity_reader(cls.__header_schema__)(frame, 0)
        body, _ = entity_reader(cls)(frame, used)
        return header.correlation_id, body

    def call(self, body: Any) -> Any:
        """Send a request and return its decoded response."""
        cid = self.send(body)
        got, response = self.receive(body.__api_key__, body.__version__)
        assert got == cid, f"correlation id {got} != {cid}"
        return response

    def read_frame(self) -> bytes:
        """The next size-prefixed frame's payload (ConnectionError when the peer closed)."""
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the gateway")
            out += chunk
        return bytes(out)

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """Whether the gateway closes this connection within ``timeout`` (reading what comes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
        return False

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request_class(api_key: int, version: int) -> type:
    """kio's request class of an API version."""
    return load_request_schema(api_key, version)


def build_request(api_key: int, version: int, **values: Any) -> Any:
    """A kio request of any version from the newest fields' names; nested entities are given
    as dicts (lists of dicts for arrays) and built in that version's classes."""
    from dataclasses import fields

    from actors.gateway.codec import build, nested

    def convert(cls: type, data: dict[str, Any]) -> Any:
        names = {f.name: f for f in fields(cls)}
        out = {}
        for key, value in data.items():
            if key not in names:
                continue
            if isinstance(value, dict):
                value = convert(nested(cls, key), value)
            elif isinstance(value, list) and value and isinstance(value[0], dict):
                value = tuple(convert(nested(cls, key), v) for v in value)
            elif isinstance(value, list):
                value = tuple(value)
            out[key] = value
        return build(cls, out)

    return convert(request_class(api_key, version), values)


def gateway_address(cluster: Any, broker_id: int) -> tuple[str, int]:
    """Where broker ``broker_id``'s gateway listens."""
    broker = next(b for b in cluster.metadata([]).brokers if b.broker_id == broker_id)
    return broker.host, broker.port


def leader_address(cluster: Any, topic: str, partition: int) -> tuple[str, int]:
    """The gateway of the partition's current leader."""
    leader = cluster.metadata([topic]).topics[topic].partitions[partition].leader
    return gateway_address(cluster, leader)
