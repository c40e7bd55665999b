"""Replication over Kafka's protocol (actors/broker/inter_broker.py, inter_broker_server.py):
followers fetching with Kafka's Fetch and their replica id from the leader host's inter-broker
listener, driven by hand without Ray (two hosts in one process, real TCP listeners).

The settings a broker configuration gives (which listener, its security, the broker's own
login), the listener's TLS and SASL (PLAIN, SCRAM) as the Kafka listener has them, a login
refused, CLUSTER_ACTION, and hostile traffic both ways: a client that sends what a follower
would not, and a "leader" that answers what a leader would not."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
from pathlib import Path

import pytest
from kio.index import load_request_schema
from scramp import ScramMechanism

from actors.broker import inter_broker_server
from actors.broker.inter_broker import (
    SETTINGS_KEY,
    InterBrokerSettings,
    KafkaFetchLink,
    cluster_settings,
    inter_broker_settings,
    jaas_credentials,
)
from actors.broker.replica_manager import ReplicaManager
from actors.broker.replica_ref import ReplicaRef
from actors.clock import ManualClock
from actors.config import broker_config
from actors.gateway.codec import error_code
from actors.protocol import AlterPartitionRequest, AlterPartitionResponse, ProduceRequest
from actors.protocol_broker import (
    FetchMessagesRequest,
    FetchPartition,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    OpenReplica,
)
from actors.protocol_security import AclsSnapshot, ScramCredential
from storage import RecordBatchBuilder
from storage.errors import InvalidConfigError, NetworkError, RequestTimedOutError
from tests.gateway.wire import Wire, build_request, encode, request_frame

SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"

FAST = {
    "replica.lag.time.max.ms": 10_000,
    "replica.fetch.wait.max.ms": 50,
    "transaction.partition.verification.enable": False,
}
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="{}";'
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="{}";'


def _batch(*values: bytes) -> bytes:
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(value)
    return builder.build()


# -- the settings ---------------------------------------------------------------------------------


def test_the_inter_broker_listener_is_named_by_the_broker_configuration():
    plain = inter_broker_settings(broker_config(listeners="PLAINTEXT://127.0.0.1:0"))
    assert (plain.transport, plain.listener, plain.protocol, plain.host) == (
        "kafka",
        "PLAINTEXT",
        "PLAINTEXT",
        "127.0.0.1",
    )
    two = {
        "listeners": "EXTERNAL://0.0.0.0:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "EXTERNAL:SSL,INTERNAL:PLAINTEXT",
    }
    # Without a name and no listener called PLAINTEXT: the first one (Kafka would refuse).
    first = inter_broker_settings(broker_config(two))
    assert (first.listener, first.protocol, first.host) == ("EXTERNAL", "SSL", "")  # a wildcard: the node's address
    named = inter_broker_settings(broker_config({**two, "inter.broker.listener.name": "internal"}))
    assert (named.listener, named.protocol) == ("INTERNAL", "PLAINTEXT")
    by_protocol = inter_broker_settings(
        broker_config(listeners="SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0", security_inter_broker_protocol="SSL")
    )
    assert by_protocol.listener == "SSL"
    with pytest.raises(InvalidConfigError, match="no listener of that name"):
        inter_broker_settings(broker_config({**two, "inter.broker.listener.name": "REPLICATION"}))
    with pytest.raises(InvalidConfigError):
        broker_config(rayqueue_replica_fetch_transport="carrier-pigeon")
    assert inter_broker_settings(broker_config(rayqueue_replica_fetch_transport="ray")).transport == "ray"
    # No listeners at all: PLAINTEXT on the node's address, as a Kafka broker's default listener.
    bare = inter_broker_settings(broker_config())
    assert (bare.protocol, bare.host) == ("PLAINTEXT", "")


def test_a_sasl_inter_broker_listener_needs_a_served_mechanism_and_the_brokers_login(tmp_path):
    base = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "rayqueue.sasl.plain.users.file": str(tmp_path / "users.toml"),
    }
    with pytest.raises(InvalidConfigError, match="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"):
        inter_broker_settings(broker_config(base))  # Kafka's default mechanism, GSSAPI
    with pytest.raises(InvalidConfigError, match="not enabled"):
        inter_broker_settings(broker_config({**base, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"}))
    with pytest.raises(InvalidConfigError, match="sasl.jaas.config"):
        inter_broker_settings(broker_config({**base, "sasl.mechanism.inter.broker.protocol": "PLAIN"}))
    config = broker_config(
        {
            **base,
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            # Kafka's per-listener, per-mechanism key; the other mechanism's login is not taken.
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format("s3cret"),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS.format("other"),
        }
    )
    settings = inter_broker_settings(config)
    assert (settings.mechanism, settings.username, settings.password) == ("SCRAM-SHA-512", "broker", "s3cret")
    assert not any(key.endswith("sasl.jaas.config") for key in settings.config)  # no login travels twice
    assert "s3cret" not in repr(settings)
    # With one broker nothing replicates between brokers: a login left out is no error there.
    assert cluster_settings({**broker_config(base), "rayqueue.num.brokers": 1}) is None
    with pytest.raises(InvalidConfigError):
        cluster_settings(broker_config(base))


def test_jaas_lines_are_read_as_kafka_writes_them():
    assert jaas_credentials(PLAIN_JAAS.format('pa"ss'.replace('"', '\\"')), "PLAIN") == ("broker", 'pa"ss')
    with pytest.raises(InvalidConfigError, match="ScramLoginModule"):
        jaas_credentials(PLAIN_JAAS.format("x"), "SCRAM-SHA-256")
    with pytest.raises(InvalidConfigError, match="username"):
        jaas_credentials("org.apache.kafka.common.security.plain.PlainLoginModule required;", "PLAIN")


# -- two hosts over TCP ---------------------------------------------------------------------------------


class _Remote:
    """An awaitable ``.remote(...)``, as a Ray actor method is called."""

    def __init__(self, fn) -> None:
        self.remote = fn


class _Controller:
    """Accepts ISR changes, knows one SCRAM user and has no ACLs (the authorizer's settings
    come from the broker configuration)."""

    def __init__(self, scram: dict[tuple[str, str], ScramCredential] | None = None) -> None:
        self.scram = scram or {}
        self.watch_acls = _Remote(self._watch_acls)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        return AlterPartitionResponse(request.leader_epoch, request.partition_epoch + 1, request.new_isr)

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.scram.get((user, mechanism))

    async def _watch_acls(self, known, timeout_s: float) -> AclsSnapshot:
        if known is not None:
            await asyncio.sleep(timeout_s)
        return AclsSnapshot((1, 0), {})


class Hosts:
    """Brokers 0 (the leader) and 1 (its follower) of one partition, ``t``-0."""

    def __init__(self, root: Path, settings: InterBrokerSettings, controller: _Controller | None = None) -> None:
        self.controller = controller or _Controller()
        self.settings = settings
        self.hosts = [ReplicaManager(b, metrics_enabled=False, clock=ManualClock()) for b in range(2)]
        self.root = root

    async def start(self) -> None:
        for b, host in enumerate(self.hosts):
            await host.open_replicas([OpenReplica("t", 0, str(self.root / f"b{b}"), {})])
        state = LeaderAndIsrPartitionState(0, 1, (0, 1), (0, 1), 0, leader_handle=ReplicaRef(self.hosts[0], "t", 0, 0))
        for host in self.hosts:
            replication = {**FAST, SETTINGS_KEY: self.settings}
            await host.leader_and_isr(LeaderAndIsrRequest((("t", 0, state),), self.controller, replication))

    def replica(self, broker: int):
        return self.hosts[broker]._replicas[("t", 0)]

    async def produce(self, *values: bytes, timeout_ms: int = 30000):
        return await self.hosts[0].partition_produce("t", 0, ProduceRequest(_batch(*values), -1, timeout_ms))

    async def close(self) -> None:
        for host in self.hosts:
            await host.shutdown()


async def _until(predicate, what: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.01)


def _replicates(tmp_path: Path, settings: InterBrokerSettings, controller: _Controller | None = None) -> dict:
    """acks=all through a follower fetching over the inter-broker listener; the leader's
    describe_host afterwards."""

    async def scenario() -> dict:
        hosts = Hosts(tmp_path, settings, controller)
        try:
            await hosts.start()
            answer = await hosts.produce(b"a", b"b")
            assert answer.last_offset == 1
            await _until(lambda: hosts.replica(1).log_end_offset == 2, "the follower has both records")
            leader = await hosts.hosts[0].describe_host()
            assert (await hosts.hosts[1].describe_host())["inter_broker_connects"] == 1
            return leader
        finally:
            await hosts.close()

    return asyncio.run(scenario())


def test_followers_fetch_over_a_plaintext_inter_broker_listener(tmp_path):
    settings = inter_broker_settings(broker_config(listeners="PLAINTEXT://127.0.0.1:0"))
    assert _replicates(tmp_path, settings)["inter_broker_fetches_served"] > 0


def test_followers_log_in_with_sasl_plain(tmp_path):
    users = tmp_path / "users.toml"
    users.write_text('broker = "broker-secret"\n')
    config = broker_config(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "rayqueue.sasl.plain.users.file": str(users),
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS.format("broker-secret"),
        }
    )
    assert _replicates(tmp_path, inter_broker_settings(config))["inter_broker_fetches_served"] > 0


def _scram(password: str, mechanism: str = "SCRAM-SHA-512") -> ScramCredential:
    salt, stored_key, server_key, iterations = ScramMechanism(mechanism).make_auth_info(password, iteration_count=4096)
    return ScramCredential(salt, stored_key, server_key, iterations)


def test_followers_log_in_with_scram_over_tls_presenting_the_brokers_certificate(tmp_path):
    import sys

    sys.path.insert(0, str(SCRIPTS))
    from make_test_ca import make_test_pki

    pki = make_test_pki(tmp_path / "pki")
    config = broker_config(
        {
            "listeners": "SASL_SSL://127.0.0.1:0",
            "ssl.keystore.location": str(pki.broker),
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format("broker-secret"),
            "connections.max.reauth.ms": 60_000,
        }
    )
    controller = _Controller({("broker", "SCRAM-SHA-512"): _scram("broker-secret")})
    assert _replicates(tmp_path, inter_broker_settings(config), controller)["inter_broker_fetches_served"] > 0


def test_a_refused_login_replicates_nothing_and_acks_all_times_out(tmp_path, caplog):
    config = broker_config(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "sasl.jaas.config": SCRAM_JAAS.format("not-the-password"),
        }
    )
    controller = _Controller({("broker", "SCRAM-SHA-256"): _scram("broker-secret", "SCRAM-SHA-256")})

    async def scenario() -> None:
        hosts = Hosts(tmp_path, inter_broker_settings(config), controller)
        try:
            await hosts.start()
            with pytest.raises(RequestTimedOutError):
                await hosts.produce(b"a", timeout_ms=1000)
            assert hosts.replica(1).log_end_offset == 0
            assert (await hosts.hosts[0].describe_host())["inter_broker_fetches_served"] == 0
        finally:
            await hosts.close()

    with caplog.at_level(logging.ERROR, logger="actors.broker.replica_fetcher"):
        asyncio.run(scenario())
    assert any("SASL" in r.getMessage() or "SASL" in str(r.exc_info) for r in caplog.records)


def test_a_follower_fetch_needs_cluster_action(tmp_path):
    # An authorizer with no ACLs: only the super user may fetch as a follower.
    base = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    }
    allowed = inter_broker_settings(broker_config({**base, "super.users": "User:ANONYMOUS"}))
    assert _replicates(tmp_path / "allowed", allowed)["inter_broker_fetches_served"] > 0
    refused = inter_broker_settings(broker_config({**base, "super.users": "User:broker"}))

    async def scenario() -> None:
        hosts = Hosts(tmp_path / "refused", refused)
        try:
            await hosts.start()
            host, port = await hosts.hosts[0].inter_broker_endpoint()
            wire = await asyncio.to_thread(Wire, (host, port))
            try:
                response = await asyncio.to_thread(wire.call, _fetch(replica_id=1))
            finally:
                wire.close()
            assert [p.error_code for t in response.responses for p in t.partitions] == [
                29
            ]  # TOPIC_AUTHORIZATION_FAILED
            assert hosts.replica(1).log_end_offset == 0
        finally:
            await hosts.close()

    asyncio.run(scenario())


# -- hostile traffic --------------------------------------------------------------------------------


def _fetch(replica_id: int = 1, topic: str = "t", partitions: int = 1, max_wait_ms: int = 0):
    return build_request(
        1,
        12,
        replica_id=replica_id,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                    for p in range(partitions)
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def test_the_listener_refuses_what_a_follower_would_not_send_and_keeps_serving(tmp_path):
    settings = inter_broker_settings(broker_config(listeners="PLAINTEXT://127.0.0.1:0"))

    async def scenario() -> None:
        hosts = Hosts(tmp_path, settings)
        try:
            await hosts.start()
            await hosts.produce(b"a")
            address = await hosts.hosts[0].inter_broker_endpoint()

            def probe() -> None:
                with Wire(address) as wire:  # a consumer's fetch: not served here
                    assert wire.call(_fetch(replica_id=-1)).error_code == 42  # INVALID_REQUEST
                with Wire(address) as wire:  # an API the listener does not serve: closed
                    wire.send(
                        build_request(
                            3,
                            12,
                            topics=None,
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False,
                        )
                    )
                    assert wire.closed_by_peer()
                with Wire(address) as wire:  # a size prefix that lies
                    wire.send_raw(struct.pack(">i", 2**31 - 1) + b"\0" * 16)
                    assert wire.closed_by_peer()
                with Wire(address) as wire:  # garbage where a request's body should be
                    frame = request_frame(_fetch(), 7)
                    wire.send_raw(frame[:14] + b"\xff" * (len(frame) - 14))
                    assert wire.closed_by_peer()
                with Wire(address) as wire:  # a partition it does not hold, one it does
                    response = wire.call(_fetch(topic="nope"))
                    assert [p.error_code for t in response.responses for p in t.partitions] == [6]
                    response = wire.call(_fetch())
                    (part,) = response.responses[0].partitions
                    assert part.error_code == 0 and part.high_watermark == 1 and part.records

            await asyncio.to_thread(probe)
            # The follower went on meanwhile.
            await hosts.produce(b"b")
            await _until(lambda: hosts.replica(1).log_end_offset == 2, "the follower replicates")
        finally:
            await hosts.close()

    asyncio.run(scenario())


class _Leader:
    """A host that answers every fetch with ``answer(frame)``'s bytes (None: close)."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.server = None
        self.accepted = 0

    async def inter_broker_endpoint(self) -> tuple[str, int]:
        if self.server is None:
            self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return "127.0.0.1", self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer) -> None:
        self.accepted += 1
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                out = self.answer(frame)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _fetch_response(correlation_id: int, records: bytes = b"") -> bytes:
    from kio.index import load_response_schema

    cls = load_response_schema(1, 12)
    import kio.schema.fetch.v12.response as r

    body = cls(
        throttle_time=datetime.timedelta(0),
        error_code=error_code(0),
        session_id=0,
        responses=(
            r.FetchableTopicResponse(
                topic="t",
                partitions=(
                    r.PartitionData(
                        partition_index=0,
                        error_code=error_code(0),
                        high_watermark=5,
                        last_stable_offset=5,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=records,
                    ),
                ),
            ),
        ),
    )
    payload = encode(cls.__header_schema__(correlation_id=correlation_id)) + encode(body)
    return struct.pack(">i", len(payload)) + payload


def test_a_leader_that_answers_wrongly_is_a_network_error_and_the_next_fetch_reconnects():
    def correlation(frame: bytes) -> int:
        return struct.unpack_from(">i", frame, 4)[0]

    answers = [
        lambda f: _fetch_response(correlation(f) + 1),  # another request's answer
        lambda f: struct.pack(">i", -5),  # a negative size
        lambda f: struct.pack(">i", 8) + b"\xff" * 8,  # bytes that are no FetchResponse
        lambda f: None,  # closes
        lambda f: _fetch_response(correlation(f), _batch(b"x")),  # at last, a proper answer
    ]
    request = FetchMessagesRequest((FetchPartition("t", 0, 0, 1 << 20, 1), FetchPartition("u", 0, 0)), 0, replica_id=1)

    async def scenario() -> None:
        turn = {"i": 0}
        leader = _Leader(lambda f: answers[turn["i"]](f))
        link = KafkaFetchLink(leader, InterBrokerSettings())
        try:
            for i in range(4):
                turn["i"] = i
                with pytest.raises(NetworkError):
                    await link.fetch_messages(request)
            turn["i"] = 4
            got = await link.fetch_messages(request)
            assert got[0].high_watermark == 5 and got[0].records == _batch(b"x")
            assert got[1] is None  # left out of the answer: asked first next round
            assert leader.accepted == link.connects == 5  # every failure closed its connection
        finally:
            link.close()
            leader.server.close()

    asyncio.run(scenario())


def test_the_fetch_request_is_kafkas_follower_fetch():
    from actors.broker.inter_broker import fetch_values

    request = FetchMessagesRequest(
        (FetchPartition("a", 1, 10, 100, 3), FetchPartition("b", 0, 5), FetchPartition("a", 0, 7)),
        250,
        1,
        999,
        replica_id=2,
    )
    values = fetch_values(request)
    kio_request = load_request_schema(1, 12)(**values)
    assert kio_request.replica_id == 2 and kio_request.max_wait == datetime.timedelta(milliseconds=250)
    assert [
        (t.topic, [(p.partition, p.fetch_offset, p.current_leader_epoch) for p in t.partitions])
        for t in kio_request.topics
    ] == [
        ("a", [(1, 10, 3), (0, 7, -1)]),
        ("b", [(0, 5, -1)]),
    ]
    assert inter_broker_server.APIS[0].key == 1
