"""The gateway's kio layer and listener parsing, without Ray or sockets."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.response import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from kio.serial import entity_reader

from actors.gateway.codec import (
    RequestDecodeError,
    api_versions_unsupported,
    decode_request,
    decode_request_split,
    error_code,
    peek,
    schema,
)
from actors.gateway.listener import FAMILIES
from actors.gateway.versions import served_apis
from actors.listeners import broker_listeners, parse_listener
from storage.errors import InvalidConfigError
from tests.gateway.wire import encode, request_frame


def _body(frame: bytes) -> memoryview:
    """A request frame without its size prefix, read-only (as the server hands it to kio)."""
    return memoryview(frame[4:]).toreadonly()


def test_every_advertised_version_has_kio_classes():
    table = served_apis(FAMILIES)
    assert {
        0,
        1,
        2,
        3,
        8,
        9,
        10,
        11,
        12,
        13,
        14,
        15,
        16,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        24,
        25,
        26,
        28,
        29,
        30,
        31,
        32,
        36,
        37,
        42,
        43,
        44,
        47,
        50,
        51,
        60,
        65,
        66,
        68,
        69,
    } == set(table)
    for key, api in table.items():
        for version in range(api.min_version, api.max_version + 1):
            sch = schema(key, version)
            assert sch.request.__api_key__ == key and sch.response.__version__ == version


def test_the_readme_table_lists_exactly_the_served_versions():
    """The Kafka clients page's API table is what ApiVersions advertises, name for name, range for range."""
    page = (Path(__file__).parents[2] / "docs" / "kafka-clients.md").read_text()
    section = page.split("| API | versions | notes |", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"\d+-\d+", cells[1]):
            low, high = map(int, cells[1].split("-"))
            listed[cells[0]] = (low, high)
    served = {
        schema(key, api.min_version).request.__name__.removesuffix("Request"): (api.min_version, api.max_version)
        for key, api in served_apis(FAMILIES).items()
    }
    assert listed == served


def test_the_gateway_imports_only_actors_storage_and_libraries():
    """actors/gateway sits in the actors tier: it never imports rayqueue (the layer above)."""
    root = Path(__file__).parents[2]
    for path in sorted((root / "actors" / "gateway").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n == "rayqueue" or n.startswith("rayqueue.") for n in names), (path, names)


def test_unsupported_api_versions_answer_is_a_v0_body_with_the_ranges():
    ranges = {18: (0, 4), 3: (0, 13)}
    chunks = api_versions_unsupported(42, ranges)
    frame = b"".join(chunks)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 42  # response header v0: the correlation id only
    body, _ = entity_reader(ApiVersionsV0)(frame[8:], 0)
    assert body.error_code == 35
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == ranges


def _metadata_frame() -> bytes:
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="abc"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return request_frame(request, correlation_id=9, client_id="c")


def test_unknown_tagged_fields_are_skipped_in_header_and_nested_entities():
    clean = _body(_metadata_frame())
    plain = bytes(clean)
    # Header v2: api key, version, correlation id, client id (legacy string "c"), then its
    # tag section; the body: topics array of one (uuid, compact name, tags), two bools, tags.
    header_end = 2 + 2 + 4 + 2 + 1
    assert plain[header_end] == 0
    body_start = header_end + 1
    topic_tags = body_start + 1 + 16 + 4
    assert plain[topic_tags] == 0 and plain[-1] == 0
    unknown = bytes([1, 77, 2, 0xAB, 0xCD])  # one tag (77), two bytes
    tagged = (
        plain[:header_end]
        + unknown
        + plain[body_start:topic_tags]
        + unknown
        + plain[topic_tags + 1 : -1]
        + bytes([2, 90, 0, 91, 1, 0xEE])  # two unknown top-level tags
    )
    # kio alone refuses it...
    from kio.schema.request_header.v2.header import RequestHeader

    with pytest.raises(KeyError):
        entity_reader(RequestHeader)(memoryview(tagged).toreadonly(), 0)
    # ...the gateway skips the unknown tags, as the spec says.
    got = decode_request(memoryview(tagged).toreadonly(), 3, 12)
    want = decode_request(clean, 3, 12)
    assert got == want
    assert decode_request_split(tagged, 3, 12) == want  # the decoder of big requests does the same
    assert got.body.topics[0].name == "abc" and got.correlation_id == 9 and got.client_id == "c"


def test_trailing_bytes_after_a_body_are_ignored():
    frame = _metadata_frame() + b"\x00\x01trailing"
    got = decode_request(_body(frame), 3, 12)
    assert got.body.topics[0].name == "abc"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b[:-3],  # truncated body
        lambda b: b[:12] + b"\xff" * 40,  # garbage after the header
        lambda b: b[:10],  # header only, client id cut
    ],
)
def test_malformed_requests_raise_request_decode_error(mangle):
    data = mangle(bytes(_body(_metadata_frame())))
    with pytest.raises(RequestDecodeError):
        decode_request(memoryview(data).toreadonly(), 3, 12)


def test_peek_needs_eight_bytes():
    assert peek(memoryview(b"\x00\x03\x00\x0c\x00\x00\x00\x07")) == (3, 12, 7)
    with pytest.raises(RequestDecodeError):
        peek(memoryview(b"\x00\x03\x00"))


def test_responses_round_trip_and_record_bytes_are_not_copied():
    sch = schema(0, 9)
    response = sch.response_of(
        responses=(
            TopicProduceResponse(
                name="t",
                partition_responses=(
                    PartitionProduceResponse(index=0, error_code=error_code(0), base_offset=5, record_errors=()),
                ),
            ),
        ),
        unknown_field_of_a_newer_version=1,  # dropped: not in v9
    )
    frame = b"".join(sch.encode(7, response))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, used = entity_reader(ProduceResponse.__header_schema__)(frame[4:], 0)
    decoded, _ = entity_reader(ProduceResponse)(frame[4:], used)
    assert header.correlation_id == 7 and decoded == response

    fetch = schema(1, 12)
    records = b"\x00" * 100_000
    topic_cls = fetch.response.__dataclass_fields__["responses"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partitions"].type.__args__[0]
    body = fetch.response_of(
        error_code=error_code(0),
        responses=(
            topic_cls(
                topic="t",
                partitions=(
                    part_cls(
                        partition_index=0,
                        error_code=error_code(0),
                        high_watermark=1,
                        aborted_transactions=None,
                        records=records,
                    ),
                ),
            ),
        ),
    )
    chunks = fetch.encode(1, body)
    assert any(chunk is records for chunk in chunks)


def test_encode_helper_matches_kio():
    request = MetadataRequest(topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    assert encode(request) == b"\x00\x01\x00\x00"


# -- listeners ------------------------------------------------------------------------------------


def test_brokers_on_one_host_take_consecutive_ports():
    plan = broker_listeners("PLAINTEXT://127.0.0.1:9092", (), [(0, "10.0.0.1"), (1, "10.0.0.1"), (2, "10.0.0.1")])
    assert [(b.bind_host, b.bind_port, b.advertised_host, b.advertised_port) for b in plan] == [
        ("127.0.0.1", 9092, "127.0.0.1", 0),
        ("127.0.0.1", 9093, "127.0.0.1", 0),
        ("127.0.0.1", 9094, "127.0.0.1", 0),
    ]


def test_brokers_on_separate_hosts_share_the_port_and_a_wildcard_advertises_the_node_ip():
    plan = broker_listeners(
        "PLAINTEXT://0.0.0.0:9092", (), [(0, "10.0.0.1"), (1, "10.0.0.2"), (2, "10.0.0.1"), (3, "10.0.0.2")]
    )
    assert [(b.broker_id, b.bind_port, b.advertised_host) for b in plan] == [
        (0, 9092, "10.0.0.1"),
        (1, 9092, "10.0.0.2"),
        (2, 9093, "10.0.0.1"),
        (3, 9093, "10.0.0.2"),
    ]


def test_port_zero_and_advertised_listeners():
    plan = broker_listeners(["PLAINTEXT://:0"], ["PLAINTEXT://kafka.example:19092"], [(0, "10.0.0.1"), (1, "10.0.0.1")])
    assert [(b.bind_host, b.bind_port, b.advertised_host, b.advertised_port) for b in plan] == [
        ("", 0, "kafka.example", 19092),
        ("", 0, "kafka.example", 19093),
    ]
    assert broker_listeners((), (), [(0, "10.0.0.1")]) == []


@pytest.mark.parametrize("text", ["127.0.0.1:9092", "PLAINTEXT://127.0.0.1", "PLAINTEXT://h:99999", "A-B://h:1"])
def test_bad_listeners_are_config_errors(text):
    with pytest.raises(InvalidConfigError):
        parse_listener(text)


def test_ipv6_listener():
    listener = parse_listener("PLAINTEXT://[::1]:9092")
    assert (listener.host, listener.port, str(listener)) == ("::1", 9092, "PLAINTEXT://[::1]:9092")
