"""Hostile network clients against a running gateway.

Each test watches the gateway's process (its pid and resident memory, through psutil on
this machine) before and after: lying lengths close their connection only, a declared
size reserves nothing, closed connections give their memory back, and huge valid
requests are answered while other connections go on being served.
"""

from __future__ import annotations

import socket
import struct
import threading

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from tests.gateway.hostile import (
    WIDTH,
    filled,
    frame_body,
    length_fields,
    lie,
    request_class,
    requests,
    served_versions,
)
from tests.gateway.wire import Wire, build_request, gateway_address, request_frame
from tests.helpers import listener_stats, wait_for

MB = 1024 * 1024
BROKER = 0
LYING_COUNT_FRAME = bytes.fromhex("000000150003000c00000001000570726f626500ffffffff7f")


def _stats(cluster) -> dict:
    return listener_stats(cluster, BROKER)


def _rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _refused(address, frame: bytes) -> bool:
    """Whether the gateway closes a connection that sent ``frame`` (reading what comes)."""
    with Wire(address) as wire:
        try:
            wire.send_raw(frame)
        except (BrokenPipeError, ConnectionResetError):
            return True
        return wire.closed_by_peer(30)


def _room(body: bytes, pos: int, kind: int) -> int:
    if kind in WIDTH:
        return len(body) - pos - WIDTH[kind]
    end = pos
    while body[end] & 0x80:
        end += 1
    return len(body) - end - 1


@pytest.fixture
def gateway(cluster):
    """(address, pid, RSS) of broker 0's gateway; afterwards it must be the same process, and
    a fresh client must still be served."""
    address = gateway_address(cluster, BROKER)
    before = _stats(cluster)
    yield address, before["pid"], _rss(before["pid"])
    after = _stats(cluster)
    assert after["pid"] == before["pid"], "the gateway process changed"
    with Wire(address) as wire:
        assert wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code == 0


def test_the_25_byte_request_closes_its_connection_and_nothing_else(cluster, gateway):
    """A Metadata v12 request whose topic count says 2^35-1 (kio alone would try to reserve
    256 GiB and abort the process) closes its own connection and nothing else."""
    address, pid, _ = gateway
    with Wire(address) as other:
        small = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        assert other.call(small).error_code == 0
        assert _refused(address, LYING_COUNT_FRAME)
        assert other.call(small).error_code == 0  # the same connection, the same process
    assert _stats(cluster)["pid"] == pid


def test_every_lying_length_of_every_advertised_version_closes_only_its_connection(cluster, gateway):
    """For every API version the gateway advertises: a request with every array filled,
    each of its lengths and counts rewritten to a value it cannot hold (a huge varint up to
    2^63, a fixed-width maximum, a negative), each sent on its own connection."""
    address, pid, rss = gateway
    before = _stats(cluster)["closed_for_errors"]
    sent = 0
    for api_key, version in served_versions():
        body = frame_body(filled(request_class(api_key, version)))
        for pos, kind in length_fields(body, api_key, version):
            room = _room(body, pos, kind)
            lies = [2**35 - 1, 2**63] if kind not in WIDTH else [2 ** (8 * WIDTH[kind] - 1) - 1, -2]
            for value in lies:
                if kind in WIDTH and -1 <= value <= room:
                    continue
                assert _refused(address, _frame(lie(body, pos, kind, value))), (api_key, version, pos, value)
                sent += 1
    stats = _stats(cluster)
    assert stats["pid"] == pid
    assert stats["closed_for_errors"] - before == sent
    assert _rss(pid) - rss < 200 * MB


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_requests_with_a_lying_length_close_only_their_connection(cluster, data):
    address = gateway_address(cluster, BROKER)
    pid = _stats(cluster)["pid"]
    api_key, version = data.draw(st.sampled_from(served_versions()), label="version")
    body = frame_body(data.draw(requests(api_key, version), label="request"))
    pos, kind = data.draw(st.sampled_from(length_fields(body, api_key, version)), label="field")
    room = _room(body, pos, kind)
    if kind in WIDTH:
        top = 2 ** (8 * WIDTH[kind] - 1)
        value = data.draw(st.sampled_from([top - 1, -2, -top]).filter(lambda v: v > room or v < -1), label="lie")
    else:
        value = data.draw(st.integers(room + 2, 2**63) | st.sampled_from([-2, 2**35 - 1]), label="lie")
    assert _refused(address, _frame(lie(body, pos, kind, value)))
    assert _stats(cluster)["pid"] == pid


def test_declared_sizes_reserve_nothing(cluster, gateway):
    """30 connections declaring 100 MB and sending 19 bytes hold one small buffer each, and
    none of queued.max.request.bytes (reserving what they declared would take 3 GB)."""
    address, pid, rss = gateway
    socks = [socket.create_connection(address) for _ in range(30)]
    try:
        for sock in socks:
            sock.sendall(struct.pack(">i", 100_000_000) + b"\x00" * 19)
        # Served after those bytes were read (the event loop takes events in turn).
        with Wire(address) as wire:
            assert wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code == 0
        stats = _stats(cluster)
        assert stats["connections"] >= 30
        assert stats["request_memory"] == 0
        assert _rss(pid) - rss < 100 * MB, f"+{(_rss(pid) - rss) / MB:.0f} MB"
    finally:
        for sock in socks:
            sock.close()


def _open_from(address, source_ip: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source_ip, 0))
    sock.connect(address)
    return sock


def test_closed_connections_give_their_memory_back(cluster, gateway):
    """Closed connections keep none of their buffers. 2,000
    connections (from four loopback addresses, under max.connections.per.ip) each fill
    most of a receive buffer, then all close: the gateway's resident memory comes back."""
    address, pid, _ = gateway
    partial = request_frame(ApiVersionsRequest(client_software_name="n" * 200_000, client_software_version="1"), 1)
    partial = partial[: 60 * 1024]
    baseline = _rss(pid)
    socks = []
    try:
        for i in range(2000):
            sock = _open_from(address, f"127.0.0.{2 + i % 4}")
            sock.sendall(partial)
            socks.append(sock)
        wait_for(lambda: _stats(cluster)["connections"] >= 2000, timeout=120, what="2,000 connections")
        with Wire(address) as wire:  # served after the partial requests were read
            assert wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code == 0
        held = _rss(pid) - baseline
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: _stats(cluster)["connections"] < 100, timeout=120, what="the connections closed")
    after = _rss(pid) - baseline
    assert held > 60 * MB, f"only +{held / MB:.0f} MB while open"  # the buffers were really resident
    assert after < 40 * MB, f"+{after / MB:.0f} MB after close (was +{held / MB:.0f} MB while open)"


def _prober_count(address, big_frame: bytes, api_key: int, version: int) -> tuple[int, object]:
    """Send ``big_frame`` on one connection; on another, ApiVersions requests one at a time
    until the big response's first byte arrives. Returns (answered meanwhile, big answer)."""
    first_byte = threading.Event()
    answers: list = []

    def big_client() -> None:
        with Wire(address, timeout=600) as wire:
            wire.send_raw(big_frame)
            wire.sock.recv(1, socket.MSG_PEEK)
            first_byte.set()
            answers.append(wire.receive(api_key, version))

    small = ApiVersionsRequest(client_software_name="p", client_software_version="1")
    with Wire(address) as other:
        other.call(small)
        thread = threading.Thread(target=big_client, daemon=True)
        thread.start()
        count = 0
        while not first_byte.is_set():
            assert other.call(small).error_code == 0
            count += 1
        thread.join(600)
    return count, answers[0][1]


def test_a_list_offsets_of_50000_partitions_is_answered_without_stalling_others(cluster, gateway):
    """A ListOffsets naming 50,000 partitions does not hold the gateway's other clients: it
    is decoded off the event loop, looked up once per topic, answered in
    pieces; another connection's requests are answered meanwhile."""
    address, pid, _ = gateway
    body = build_request(
        2,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            {
                "name": "no-such-topic-27",
                "partitions": [
                    {"partition_index": i, "current_leader_epoch": -1, "timestamp": -1} for i in range(50_000)
                ],
            }
        ],
    )
    before = _stats(cluster)["big_requests"]
    count, answer = _prober_count(address, request_frame(body, 1), 2, 7)
    (topic,) = answer.topics
    assert topic.name == "no-such-topic-27"
    assert [p.partition_index for p in topic.partitions] == list(range(50_000))
    assert {int(p.error_code) for p in topic.partitions} == {3}  # UNKNOWN_TOPIC_OR_PARTITION
    assert _stats(cluster)["big_requests"] == before + 1
    # With the work on the event loop, the other connection was answered only while the
    # gateway awaited the controller (16 answers, against 310 now, in the same setting).
    assert count >= 50, count


def test_a_metadata_request_naming_100000_topics_is_answered_without_stalling_others(cluster, gateway):
    address, pid, _ = gateway
    names = [f"absent-27-{i:06d}" for i in range(100_000)]
    body = build_request(
        3,
        12,
        topics=[{"name": n, "topic_id": None} for n in names],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    count, answer = _prober_count(address, request_frame(body, 1), 3, 12)
    assert [t.name for t in answer.topics] == names
    assert {int(t.error_code) for t in answer.topics} == {3}
    assert count >= 5, count
