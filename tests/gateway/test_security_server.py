"""A listener's TLS and SASL on the gateway's server alone (no Ray): who a connection is
after mutual TLS, SCRAM and PLAIN; what an unauthenticated, mismatched, slow or flooding
client gets (a closed connection, one log line per address); re-authentication (KIP-368).
Certificates are made here with ``cryptography`` (scripts/make_test_ca.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import sys
import threading
import time
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from scramp import ScramClient

from actors.config import broker_config
from actors.controller.scram_control import credential_of
from actors.gateway.handlers import sasl as sasl_handlers
from actors.gateway.security import listener_security
from actors.gateway.server import Api, KafkaServer, Limits
from actors.gateway.versions import API_VERSIONS
from actors.protocol_security import ScramMechanism
from tests.gateway.test_server import _metadata, _Probe, metadata
from tests.gateway.wire import Wire, request_frame
from tests.helpers import wait_for

sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
from make_test_ca import make_test_pki  # noqa: E402

APIS = {
    18: API_VERSIONS,
    3: Api(3, 12, 12, _metadata),
    **{api.key: api for api in sasl_handlers.APIS},
}
SALT = b"salt-of-the-test"


class _Scram:
    """A stand-in for the gateway's credential cache: users -> password."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.asked: list[tuple[str, str]] = []

    async def get(self, user: str, mechanism: str):
        import hashlib

        self.asked.append((user, mechanism))
        password = self.users.get(user)
        if password is None:
            return None
        digest = "sha512" if mechanism.endswith("512") else "sha256"
        salted = hashlib.pbkdf2_hmac(digest, password.encode(), SALT, 4096)
        return credential_of(ScramMechanism.of_name(mechanism), SALT, salted, 4096)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(tmp_path_factory.mktemp("pki"), clients=("alice", "bob"))


@pytest.fixture(scope="module")
def plain_users(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("users") / "plain.toml"
    path.write_text('carol = "carol-secret"\n')
    return str(path)


@contextlib.contextmanager
def serve(protocol: str, scram=None, **config):
    """A KafkaServer with one listener of ``protocol``, in a loop on a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    security = listener_security(broker_config(config), "TEST", protocol, scram)
    server = KafkaServer(APIS, _Probe(), Limits(), name="security-test", security=security)
    address = asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), loop).result(10)
    try:
        yield server, address
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def tls_wire(address, pki, client: str | None = None, timeout: float = 10.0) -> Wire:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client is not None:
        cert, key = pki.clients[client]
        context.load_cert_chain(str(cert), str(key))
    wire = Wire(address, timeout=timeout)
    wire.sock = context.wrap_socket(wire.sock, server_hostname="localhost")
    return wire


def closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the peer closes ``sock`` within ``timeout`` (reading what comes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return True
        except TimeoutError:
            return False
    return False


def principals(server: KafkaServer) -> list[str]:
    return sorted(c.principal for c in list(server.connections))


def scram_login(wire: Wire, user: str, password: str, mechanism: str = "SCRAM-SHA-512"):
    """SaslHandshake v1 + SaslAuthenticate v2 with scramp's client; the last answer."""
    handshake = wire.call(SaslHandshakeRequest(mechanism=mechanism))
    assert handshake.error_code == 0, handshake
    client = ScramClient([mechanism], user, password)
    first = wire.call(SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode()))
    if first.error_code:
        return first
    client.set_server_first(first.auth_bytes.decode())
    final = wire.call(SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode()))
    if final.error_code == 0:
        client.set_server_final(final.auth_bytes.decode())  # the server proved it knows the key too
    return final


def ssl_config(pki, **extra):
    return {"ssl.keystore.location": str(pki.broker), "ssl.truststore.location": str(pki.ca), **extra}


# -- mutual TLS ---------------------------------------------------------------------------------


def test_mutual_tls_principal_is_the_mapped_certificate_subject(pki):
    rules = "RULE:^CN=([^,]*),OU=clients,.*$/$1/L,DEFAULT"
    with serve("SSL", **ssl_config(pki, **{"ssl.client.auth": "required", "ssl.principal.mapping.rules": rules})) as (
        server,
        address,
    ):
        with tls_wire(address, pki, "alice") as wire:
            assert wire.call(metadata("0")).topics[0].name == "0"
            assert principals(server) == ["User:alice"]
        assert_refused_without_a_certificate(address, pki)


def assert_refused_without_a_certificate(address, pki) -> None:
    """A TLS client without a certificate fails the handshake (required): closed, nothing served."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    raw = socket.create_connection(address, timeout=10)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        sock = context.wrap_socket(raw, server_hostname="localhost")
        sock.sendall(request_frame(metadata("0"), 1))
        assert not sock.recv(4)
        raise ConnectionError("closed")
    raw.close()


def test_requested_client_auth_without_a_certificate_is_anonymous(pki):
    with serve("SSL", **ssl_config(pki, **{"ssl.client.auth": "requested"})) as (server, address):
        with tls_wire(address, pki) as wire:
            assert wire.call(metadata("1")).topics[0].name == "1"
            assert principals(server) == ["User:ANONYMOUS"]
        with tls_wire(address, pki, "bob") as wire:
            assert wire.call(metadata("1")).topics[0].name == "1"
            assert principals(server) == ["User:CN=bob,OU=clients,O=rayqueue-test"]


def test_pem_text_keys_and_an_encrypted_key(pki, tmp_path):
    encrypted = make_test_pki(tmp_path, key_password="kp")
    text = Path(pki.broker).read_text()
    key = text[: text.index("-----END PRIVATE KEY-----") + len("-----END PRIVATE KEY-----\n")]
    chain = text[len(key) :]
    config = {
        "ssl.keystore.certificate.chain": chain,
        "ssl.keystore.key": key,
        "ssl.truststore.certificates": Path(pki.ca).read_text(),
    }
    with serve("SSL", **config) as (_, address), tls_wire(address, pki) as wire:
        assert wire.call(metadata("2")).topics[0].name == "2"
    with serve("SSL", **{"ssl.keystore.location": str(encrypted.broker), "ssl.key.password": "kp"}) as (_, address):
        with tls_wire(address, encrypted) as wire:
            assert wire.call(metadata("3")).topics[0].name == "3"
    from storage.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match="cannot load"):
        listener_security(broker_config({"ssl.keystore.location": str(encrypted.broker)}), "X", "SSL")
    with pytest.raises(InvalidConfigError, match="needs the broker's key"):
        listener_security(broker_config({}), "X", "SSL")


def test_tls_1_3_only_refuses_a_tls_1_2_client(pki):
    with serve("SSL", **ssl_config(pki, **{"ssl.enabled.protocols": "TLSv1.3"})) as (_, address):
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(address, timeout=10) as raw, pytest.raises(ssl.SSLError):
            context.wrap_socket(raw, server_hostname="localhost")


# -- mismatches and hostile clients -------------------------------------------------------------


def test_a_tls_client_on_a_plaintext_listener_is_closed_with_one_log_line(pki, caplog):
    caplog.set_level(logging.WARNING, logger="actors.gateway.server")
    with serve("PLAINTEXT") as (server, address):
        context = ssl.create_default_context(cafile=str(pki.ca))
        for _ in range(5):  # a client retrying
            with socket.create_connection(address, timeout=10) as raw, pytest.raises((ssl.SSLError, OSError)):
                context.wrap_socket(raw, server_hostname="localhost")
        assert server.closed_for_errors == 5
        lines = [r for r in caplog.records if "TLS handshake on the PLAINTEXT listener" in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in caplog.records]
        assert_served_plain(address)


def assert_served_plain(address) -> None:
    with Wire(address) as wire:
        assert wire.call(metadata("0")).topics[0].name == "0"


def test_a_plaintext_client_on_a_tls_listener_is_closed_with_one_log_line(pki, caplog):
    caplog.set_level(logging.WARNING, logger="actors.gateway.server")
    with serve("SASL_SSL", scram=_Scram({}), **ssl_config(pki)) as (server, address):
        for _ in range(5):
            with Wire(address) as wire:
                wire.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
                assert closed(wire.sock)
        lines = [r for r in caplog.records if "does not speak TLS" in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in caplog.records]
        wait_for(lambda: not server.connections, 10, what="every connection closed")


def test_a_slow_handshake_and_a_slow_login_are_closed(pki):
    config = ssl_config(pki, **{"rayqueue.authentication.timeout.ms": 300})
    with serve("SASL_SSL", scram=_Scram({}), **config) as (server, address):
        with socket.create_connection(address, timeout=10) as silent:  # connects, never says hello
            assert closed(silent)
        with tls_wire(address, pki) as wire:  # TLS done, never logs in
            assert closed(wire.sock)
        wait_for(lambda: not server.connections, 10, what="every connection closed")


def test_a_huge_sasl_token_and_a_request_before_login_close_the_connection(pki):
    with serve("SASL_SSL", scram=_Scram({"dave": "pw"}), **ssl_config(pki)) as (server, address):
        with tls_wire(address, pki) as wire:
            wire.send_raw(struct.pack(">i", 600_000) + b"\0" * 1000)  # above sasl.server.max.receive.size
            assert closed(wire.sock)
        with tls_wire(address, pki) as wire:
            # ApiVersions is allowed before the login, Metadata is not.
            assert wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code == 0
            wire.send(metadata("0"))
            assert closed(wire.sock)
        with tls_wire(address, pki) as wire:
            assert wire.call(SaslHandshakeRequest(mechanism="GSSAPI")).error_code == 33  # UNSUPPORTED_SASL_MECHANISM
            assert closed(wire.sock)
        with tls_wire(address, pki) as wire:  # a token before a handshake: ILLEGAL_SASL_STATE
            assert wire.call(SaslAuthenticateRequest(auth_bytes=b"x")).error_code == 34
            assert closed(wire.sock)


# -- SASL ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_sets_the_principal_and_a_wrong_password_fails_and_closes(pki, mechanism):
    with serve("SASL_SSL", scram=_Scram({"alice": "alice-secret"}), **ssl_config(pki)) as (server, address):
        with tls_wire(address, pki) as wire:
            assert scram_login(wire, "alice", "alice-secret", mechanism).error_code == 0
            assert wire.call(metadata("0")).topics[0].name == "0"
            assert principals(server) == ["User:alice"]
        for user, password in (("alice", "wrong"), ("nobody", "x")):
            with tls_wire(address, pki) as wire:
                answer = scram_login(wire, user, password, mechanism)
                assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
                assert "invalid credentials" in answer.error_message
                assert closed(wire.sock)


def test_plain_login_on_sasl_plaintext(plain_users):
    config = {"sasl.enabled.mechanisms": "PLAIN", "rayqueue.sasl.plain.users.file": plain_users}
    with serve("SASL_PLAINTEXT", **config) as (server, address):
        with Wire(address) as wire:
            assert wire.call(SaslHandshakeRequest(mechanism="PLAIN")).mechanisms == ("PLAIN",)
            answer = wire.call(SaslAuthenticateRequest(auth_bytes=b"\0carol\0carol-secret"))
            assert answer.error_code == 0
            assert wire.call(metadata("0")).topics[0].name == "0"
            assert principals(server) == ["User:carol"]
        with Wire(address) as wire:
            wire.call(SaslHandshakeRequest(mechanism="PLAIN"))
            answer = wire.call(SaslAuthenticateRequest(auth_bytes=b"\0carol\0nope"))
            assert (answer.error_code, answer.error_message) == (
                58,
                "Authentication failed: Invalid username or password",
            )
            assert closed(wire.sock)
        # SaslHandshake v0: the token goes as a raw frame, the answer comes as one.
        with Wire(address) as wire:
            assert wire.call(SaslHandshakeV0(mechanism="PLAIN")).error_code == 0
            wire.send_raw(struct.pack(">i", 19) + b"\0carol\0carol-secret")
            assert wire.read_frame() == b""
            assert wire.call(metadata("1")).topics[0].name == "1"


def test_reauthentication_keeps_the_connection_and_an_expired_session_closes_it(pki):
    config = ssl_config(pki, **{"connections.max.reauth.ms": 1500})
    with serve("SASL_SSL", scram=_Scram({"alice": "a", "bob": "b"}), **config) as (server, address):
        with tls_wire(address, pki) as wire:
            answer = scram_login(wire, "alice", "a")
            assert answer.session_lifetime.total_seconds() == 1.5
            assert scram_login(wire, "alice", "a").error_code == 0  # KIP-368: same connection
            assert wire.call(metadata("0")).topics[0].name == "0"
            # A re-authentication as someone else is refused, and ends the connection.
            assert scram_login(wire, "bob", "b").error_code == 58
            assert closed(wire.sock)
        with tls_wire(address, pki) as wire:
            scram_login(wire, "alice", "a")
            wait_for(lambda: _expired(server), timeout=30, what="the session's lifetime to end")
            wire.send(metadata("1"))
            assert closed(wire.sock)


def _expired(server: KafkaServer) -> bool:
    return all(c.sasl.refusal(3) is not None for c in list(server.connections))


# -- a listener's own keys (listener.name.<listener>.*) -----------------------------------------


def test_a_listeners_own_tls_keys_override_the_brokers(pki):
    # The broker asks TLS clients for no certificate; listener TEST's own keys require one and
    # map its subject.
    config = ssl_config(
        pki,
        **{
            "ssl.client.auth": "none",
            "listener.name.test.ssl.client.auth": "required",
            "listener.name.TEST.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        },
    )
    with serve("SSL", **config) as (server, address):
        with tls_wire(address, pki, "bob") as wire:
            assert wire.call(metadata("7")).topics[0].name == "7"
            assert principals(server) == ["User:bob"]
        assert_refused_without_a_certificate(address, pki)


def test_a_listeners_own_sasl_mechanisms(plain_users):
    config = {"rayqueue.sasl.plain.users.file": plain_users, "listener.name.test.sasl.enabled.mechanisms": "PLAIN"}
    with serve("SASL_PLAINTEXT", _Scram({}), **config) as (_, address), Wire(address) as wire:
        refused = wire.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert refused.error_code == 33 and list(refused.mechanisms) == ["PLAIN"]  # UNSUPPORTED_SASL_MECHANISM


def test_per_listener_keys_are_checked_at_startup():
    from storage.errors import InvalidConfigError

    listeners = {"listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0"}
    mapping = {"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL"}
    config = broker_config({**listeners, **mapping, "listener.name.external.ssl.client.auth": "required"})
    assert config["listener.name.external.ssl.client.auth"] == "required" and config["ssl.client.auth"] == "none"
    with pytest.raises(InvalidConfigError, match="no listener of that name"):
        broker_config({**listeners, **mapping, "listener.name.other.ssl.client.auth": "required"})
    with pytest.raises(InvalidConfigError, match="cannot be set per listener"):
        broker_config({**listeners, **mapping, "listener.name.external.num.partitions": 3})
    with pytest.raises(InvalidConfigError, match="listener.name.external.ssl.client.auth.*not one of"):
        broker_config({**listeners, **mapping, "listener.name.external.ssl.client.auth": "sometimes"})


# -- the listener probe over TLS ----------------------------------------------------------------


def test_the_listener_probe_speaks_tls_to_a_tls_listener(pki):
    from actors.gateway.probe import probe_listener, probe_listeners, probe_targets
    from actors.gateway.ssl_factory import client_context
    from actors.types import BrokerMetadata

    # Client certificates required: the probe presents the broker's own (both usages).
    config = broker_config(ssl_config(pki, **{"ssl.client.auth": "required"}))
    with serve("SSL", **config) as (_, (host, port)):
        assert asyncio.run(probe_listener(host, port, 5.0, client_context(config))) is None
        # Plain bytes to a TLS listener: closed, so down.
        assert "closed" in asyncio.run(probe_listener(host, port, 5.0))
        tls_only = BrokerMetadata(1, "node", "/data", True, host, port, (("TEST", "SSL", host, port),))
        plain = BrokerMetadata(2, "node", "/data", True, host, 1, (("PLAIN", "PLAINTEXT", host, 1),))
        targets = probe_targets([tls_only, plain], config)
        assert targets[0][3] is not None and targets[1][3] is None
        assert asyncio.run(probe_listeners(targets[:1], 5.0)) == {1: None}
    # SASL_SSL: ApiVersions is answered before any login.
    sasl = ssl_config(pki, **{"ssl.client.auth": "none"})
    with serve("SASL_SSL", _Scram({}), **sasl) as (_, (host, port)):
        assert asyncio.run(probe_listener(host, port, 5.0, client_context(broker_config(sasl)))) is None


def test_a_flood_of_huge_scram_messages_is_refused_before_scramp_and_holds_up_no_one(monkeypatch):
    """SCRAM client-first messages with a 480 KB nonce on one SASL listener: each login fails
    (SASL_AUTHENTICATION_FAILED, connection closed) without scramp reading the message, while
    a client logged in on another listener of the same event loop keeps being served."""
    import scramp.core

    read: list[int] = []
    set_client_first = scramp.core.ScramServer.set_client_first

    def spy(self, client_first):
        read.append(len(client_first))
        return set_client_first(self, client_first)

    monkeypatch.setattr(scramp.core.ScramServer, "set_client_first", spy)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    scram = _Scram({"alice": "alice-secret"})
    servers = []
    for name in ("FLOODED", "OTHER"):
        security = listener_security(broker_config({}), name, "SASL_PLAINTEXT", scram)
        servers.append(KafkaServer(APIS, _Probe(), Limits(), name=f"flood-{name}", security=security))
    flooded, other = (asyncio.run_coroutine_threadsafe(s.start("127.0.0.1", 0), loop).result(10) for s in servers)
    huge = ("n,,n=alice,r=" + "x" * 480_000).encode()
    attackers: list[Wire] = []
    try:
        with Wire(other, timeout=60) as alice:
            assert scram_login(alice, "alice", "alice-secret").error_code == 0
            assert len(read) == 1  # alice's own client-first
            for _ in range(100):
                wire = Wire(flooded, timeout=60)
                attackers.append(wire)
                assert wire.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
                wire.send(SaslAuthenticateRequest(auth_bytes=huge))
                # Meanwhile alice's requests on the other listener are answered.
                assert alice.call(metadata("0")).topics[0].name == "0"
            for wire in attackers:
                _, answer = wire.receive(36, 2)
                assert answer.error_code == 58 and "SCRAM message" in answer.error_message  # SASL_AUTHENTICATION_FAILED
                assert closed(wire.sock)
            assert alice.call(metadata("0")).topics[0].name == "0"
        assert read == [read[0]] and read[0] < 100  # scramp never saw a huge message
        assert servers[1].closed_for_errors == 0 and servers[0].closed_for_errors == 100
    finally:
        for wire in attackers:
            wire.close()
        for server in servers:
            asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
