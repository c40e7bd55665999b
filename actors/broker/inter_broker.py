"""Replication over Kafka's own protocol: a follower host fetches from a leader host with
Kafka's Fetch and its replica id, on one TCP connection per source host, through the
inter-broker listener (Kafka's ``inter.broker.listener.name``), authenticated as that
listener authenticates its clients.

What travels: a fetcher's round (``ReplicaFetcher``: every partition this host follows from
one leader host) becomes one Fetch v12 request with this broker's id as ``replica_id``
(Kafka's follower fetch; the topics by name), answered by the leader host's
:class:`~actors.broker.inter_broker_server.InterBrokerServer` from its ReplicaManager, in
the same process and with no pickling: the batches go from the leader's log into the
response and from the response into the follower's log as the bytes they are. Each
partition comes back as the FetchResponse the follower applies, its error (Kafka's error
code as the exception of that code), or, when the leader left it out of an answer that
reached ``replica.fetch.response.max.bytes``, not at all (None: fetched first next round).

The rest of what a follower asks its leader's host stays a Ray call on the host's actor
(OffsetForLeaderEpoch and ListOffsets when a follower truncates or starts over, the wake
of a round that is out): rare, and not on the path of a write. The leader host's listening
address comes from one such call (``inter_broker_endpoint``) when a connection is opened.

Security, as Kafka's inter-broker client has it: the listener's TLS (its trust store checks
the leader; the broker's key store is presented when it has one) and SASL with
``sasl.mechanism.inter.broker.protocol`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) and the
broker's credentials from the listener's JAAS configuration
(``listener.name.<listener>.<mechanism>.sasl.jaas.config``, or ``sasl.jaas.config``). The
leader's side checks the principal may CLUSTER_ACTION the cluster, as Kafka does.

``rayqueue.replica.fetch.transport=ray`` keeps the fetches as Ray calls between the host
actors instead (the measured difference: ``docs/performance.md``).

:class:`InterBrokerLinks` wraps a host's links so that ``fetch_messages`` goes this way;
:func:`inter_broker_settings` is what the controller hands every host with its replication
settings (under ``SETTINGS_KEY``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import re
import ssl
import struct
from collections.abc import Hashable, Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.fetch.v12.request import FetchPartition as WireFetchPartition
from kio.schema.fetch.v12.request import FetchTopic as WireFetchTopic
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

from actors.broker.links import HostLink, Links
from actors.clock import SYSTEM
from actors.config import JAAS_KEY, LISTENER_PREFIX, listener_config
from actors.gateway.ssl_factory import client_context
from actors.listeners import WILDCARD_HOSTS, listener_protocols, parse_listeners, uses_sasl, uses_tls
from actors.protocol import FetchResponse
from actors.protocol_broker import FetchMessagesRequest
from storage.errors import (
    InvalidConfigError,
    NetworkError,
    SaslAuthenticationError,
    error_for_code,
)

logger = logging.getLogger(__name__)

TRANSPORT_KEY = "rayqueue.replica.fetch.transport"
TRANSPORTS = ("kafka", "ray")
SETTINGS_KEY = "inter.broker"  # the replication settings' entry carrying InterBrokerSettings
FETCH_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 1, 17, 36
FETCH_VERSION = 12  # the newest Fetch with topic names and a plain replica_id
SASL_HANDSHAKE_VERSION, SASL_AUTHENTICATE_VERSION = 1, 2
CLIENT_ID = "rayqueue-replica-fetcher"
# Kafka's replica.socket.timeout.ms: a fetch not answered this long after its max wait is lost.
SOCKET_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
# The largest answer taken (a bigger size prefix is a broken or hostile peer): Kafka's
# replica.fetch.response.max.bytes may ask for at most this much, plus the framing.
MAX_RESPONSE_BYTES = 2**31 - 1
# A SASL session is renewed (a new connection) this long before the leader's lifetime ends.
REAUTH_MARGIN = 0.1
_SIZE = struct.Struct(">i")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


# -- the settings -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class InterBrokerSettings:
    """How hosts reach each other for replication: the transport (``kafka``: Kafka's Fetch
    over the inter-broker listener; ``ray``: Ray calls), the listener's name, security
    protocol and bind host (empty: the node's address), the SASL mechanism and the broker's
    own credentials, and the listener's configuration (its TLS, SASL and authorizer keys)."""

    transport: str = "kafka"
    listener: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"
    host: str = ""
    mechanism: str = ""
    username: str = ""
    password: str = dataclasses.field(default="", repr=False)
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)


def inter_broker_settings(config: Mapping[str, Any]) -> InterBrokerSettings:
    """The inter-broker settings of a broker configuration (InvalidConfigError when they
    cannot work): the listener is ``inter.broker.listener.name``, else the one named as
    ``security.inter.broker.protocol``, else (rayqueue's own fallback, where Kafka refuses to
    start) the first of ``listeners``; without listeners, PLAINTEXT on the node's address."""
    transport = str(config.get(TRANSPORT_KEY, "kafka"))
    if transport not in TRANSPORTS:
        raise InvalidConfigError(f"{TRANSPORT_KEY}={transport!r}: choose one of {', '.join(TRANSPORTS)}")
    listeners = config.get("listeners") or ()
    if not listeners:
        return InterBrokerSettings(transport, config=_without_credentials(config))
    protocols = listener_protocols(listeners, config["listener.security.protocol.map"])
    named = str(config.get("inter.broker.listener.name") or "").upper()
    by_protocol = str(config.get("security.inter.broker.protocol") or "PLAINTEXT").upper()
    if named and named not in protocols:
        raise InvalidConfigError(f"inter.broker.listener.name={named}: there is no listener of that name in listeners")
    name = named or (by_protocol if by_protocol in protocols else next(iter(protocols)))
    protocol = protocols[name]
    host = next(listener.host for listener in parse_listeners(listeners) if listener.name == name)
    settings = listener_config(config, name)
    mechanism = username = password = ""
    if uses_sasl(protocol):
        mechanism = str(config.get("sasl.mechanism.inter.broker.protocol") or "GSSAPI").upper()
        if mechanism not in _LOGIN_MODULES:
            raise InvalidConfigError(
                f"sasl.mechanism.inter.broker.protocol={mechanism}: the inter-broker listener {name} needs PLAIN,"
                " SCRAM-SHA-256 or SCRAM-SHA-512"
            )
        enabled = [m.upper() for m in settings.get("sasl.enabled.mechanisms", ())]
        if mechanism not in enabled:
            raise InvalidConfigError(
                f"sasl.mechanism.inter.broker.protocol={mechanism} is not enabled on listener {name}"
                f" (sasl.enabled.mechanisms={','.join(enabled)})"
            )
        jaas = settings.get(f"{mechanism.lower()}.sasl.jaas.config") or settings.get("sasl.jaas.config") or ""
        if not jaas:
            raise InvalidConfigError(
                f"the inter-broker listener {name} uses SASL {mechanism}: set the broker's credentials in"
                f" {LISTENER_PREFIX}{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
            )
        username, password = jaas_credentials(jaas, mechanism)
    return InterBrokerSettings(
        transport,
        name,
        protocol,
        "" if host in WILDCARD_HOSTS else host,
        mechanism,
        username,
        password,
        _without_credentials(settings),
    )


def _without_credentials(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration a host's listener needs: all but the brokers' own logins (those are
    in the settings' username and password, for the mechanism in use only)."""
    return {k: v for k, v in config.items() if not k.endswith(JAAS_KEY)}


def cluster_settings(config: Mapping[str, Any]) -> InterBrokerSettings | None:
    """``inter_broker_settings`` of a cluster's configuration, checked at launch: with one
    broker nothing is replicated between brokers, so settings that could not work are no
    error there (None: the hosts keep the Ray transport, which nothing uses)."""
    try:
        return inter_broker_settings(config)
    except InvalidConfigError:
        if int(config.get("rayqueue.num.brokers", 3)) > 1:
            raise
        return None


def jaas_credentials(jaas: str, mechanism: str) -> tuple[str, str]:
    """(username, password) of a JAAS configuration line as Kafka writes it
    (``<LoginModule> required username="..." password="...";``); InvalidConfigError when
    the module does not fit ``mechanism`` or a credential is missing."""
    module = jaas.strip().split(None, 1)[0] if jaas.strip() else ""
    if module != _LOGIN_MODULES[mechanism]:
        raise InvalidConfigError(
            f"sasl.jaas.config: SASL {mechanism} takes {_LOGIN_MODULES[mechanism]}, not {module!r}"
        )
    options = {key: re.sub(r"\\(.)", r"\1", value) for key, value in _JAAS_OPTION.findall(jaas)}
    if not options.get("username") or "password" not in options:
        raise InvalidConfigError("sasl.jaas.config names no username and password")
    return options["username"], options["password"]


# -- the client's side --------------------------------------------------------------------------


class _Codec:
    """kio's classes and writers for the requests the fetcher sends and the answers it reads."""

    def __init__(self) -> None:
        self._writers: dict[tuple[int, int], tuple[Any, Any, type, type]] = {}

    def _of(self, api_key: int, version: int) -> tuple[Any, Any, type, type]:
        found = self._writers.get((api_key, version))
        if found is None:
            request, response = load_request_schema(api_key, version), load_response_schema(api_key, version)
            found = (entity_writer(request.__header_schema__), entity_writer(request), request, response)
            self._writers[(api_key, version)] = found
        return found

    def request(self, api_key: int, version: int, correlation_id: int, **values: Any) -> tuple[list[Any], type]:
        """The size-prefixed frame of a request as chunks, and its response class."""
        header_writer, writer, request_cls, response_cls = self._of(api_key, version)
        chunks = _Chunks()
        chunks.append(b"")
        header_writer(
            chunks,
            request_cls.__header_schema__(
                request_api_key=api_key,
                request_api_version=version,
                correlation_id=correlation_id,
                client_id=CLIENT_ID,
            ),
        )
        writer(chunks, request_cls(**values))
        chunks[0] = _SIZE.pack(sum(map(len, chunks)))
        return chunks, response_cls

    @staticmethod
    def response(frame: bytes, response_cls: type) -> tuple[int, Any]:
        """(correlation id, body) of a response frame."""
        header, used = entity_reader(response_cls.__header_schema__)(frame, 0)
        body, _ = entity_reader(response_cls)(frame, used)
        return header.correlation_id, body


class _Chunks(list):
    write = list.append


CODEC = _Codec()


def fetch_values(request: FetchMessagesRequest) -> dict[str, Any]:
    """The fields of a Fetch v12 request for a follower's FetchMessagesRequest (its
    partitions grouped by topic, in request order within a topic)."""
    topics: dict[str, list[Any]] = {}
    for part in request.partitions:
        topics.setdefault(part.topic, []).append(
            WireFetchPartition(
                partition=part.partition,
                current_leader_epoch=part.current_leader_epoch,
                fetch_offset=part.fetch_offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=part.partition_max_bytes,
            )
        )
    return {
        "replica_id": request.replica_id,
        "max_wait": i32Timedelta.parse(datetime.timedelta(milliseconds=request.max_wait_ms)),
        "min_bytes": request.min_bytes,
        "max_bytes": request.max_bytes,
        "isolation_level": int(request.isolation_level),
        "session_id": 0,
        "session_epoch": -1,
        "topics": tuple(WireFetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
        "forgotten_topics_data": (),
        "rack_id": "",
    }


def answers_of(request: FetchMessagesRequest, response: Any) -> list[Any]:
    """Each partition of ``request``'s answer, in order: its FetchResponse, its error, or
    None when the answer leaves it out. A top-level error answers every partition."""
    code = int(response.error_code)
    if code:
        return [error_for_code(code, "the leader refused the fetch") for _ in request.partitions]
    by_partition: dict[tuple[str, int], Any] = {}
    for topic in response.responses:
        for part in topic.partitions:
            by_partition[(topic.topic, part.partition_index)] = part
    out: list[Any] = []
    for asked in request.partitions:
        part = by_partition.get((asked.topic, asked.partition))
        if part is None:
            out.append(None)
            continue
        code = int(part.error_code)
        if code:
            out.append(error_for_code(code, f"{asked.topic}-{asked.partition}: error {code} from the leader"))
            continue
        out.append(
            FetchResponse(
                part.records or b"",
                part.high_watermark,
                part.last_stable_offset,
                part.log_start_offset,
                -1,
                part.current_leader.leader_epoch,
            )
        )
    return out


class InterBrokerConnection:
    """One follower host's connection to one leader host's inter-broker listener: opened
    (TLS, SASL) when first needed, one request at a time, closed on any failure (the next
    request opens a new one)."""

    def __init__(self, settings: InterBrokerSettings) -> None:
        self.settings = settings
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._expires: float | None = None  # when the SASL session ends (monotonic)
        self._lifetime = 0.0  # the SASL session's lifetime the leader told, in seconds
        self._lock = asyncio.Lock()
        self.connects = 0

    @property
    def connected(self) -> bool:
        """Whether a connection is open."""
        return self._writer is not None and not self._writer.is_closing()

    async def open(self, host: str, port: int) -> None:
        """Connect and authenticate (NetworkError when that fails, SaslAuthenticationError
        when the leader refuses the broker's credentials)."""
        self.close()
        tls = client_context(self.settings.config) if uses_tls(self.settings.protocol) else None
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None),
                CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise NetworkError(f"inter-broker connection to {host}:{port} failed: {exc}") from None
        self.connects += 1
        if uses_sasl(self.settings.protocol):
            try:
                await self._authenticate()
            except BaseException:
                self.close()
                raise

    async def call(self, api_key: int, version: int, timeout_s: float, **values: Any) -> Any:
        """Send one request and read its answer (NetworkError when the connection fails or
        the answer is not this request's)."""
        if self._writer is None or self._reader is None:
            raise NetworkError("the inter-broker connection is not open")
        async with self._lock:
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            chunks, response_cls = CODEC.request(api_key, version, self._correlation, **values)
            try:
                self._writer.writelines(chunks)
                size = _SIZE.unpack(await asyncio.wait_for(self._reader.readexactly(4), timeout_s))[0]
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise NetworkError(f"the leader answered a frame of {size} bytes")
                frame = await asyncio.wait_for(self._reader.readexactly(size), SOCKET_TIMEOUT_S)
                correlation, body = CODEC.response(frame, response_cls)
            except asyncio.CancelledError:
                self.close()  # the answer would come to the next request: start afresh
                raise
            except NetworkError:
                self.close()
                raise
            except Exception as exc:  # noqa: BLE001 - a reset, an end of file, a frame kio cannot read
                self.close()
                raise NetworkError(f"inter-broker request failed: {type(exc).__name__}: {exc}") from None
            if correlation != self._correlation:
                self.close()
                raise NetworkError(f"the leader answered correlation id {correlation}, not {self._correlation}")
            return body

    def expired(self) -> bool:
        """Whether the SASL session is about to end (a new connection logs in again)."""
        return self._expires is not None and SYSTEM.monotonic() >= self._expires

    async def _authenticate(self) -> None:
        settings = self.settings
        handshake = await self.call(
            SASL_HANDSHAKE_KEY, SASL_HANDSHAKE_VERSION, CONNECT_TIMEOUT_S, mechanism=settings.mechanism
        )
        if int(handshake.error_code):
            raise SaslAuthenticationError(
                f"the leader's inter-broker listener refused SASL {settings.mechanism}"
                f" (it takes {', '.join(handshake.mechanisms)})"
            )
        if settings.mechanism == "PLAIN":
            await self._exchange(b"\0" + settings.username.encode() + b"\0" + settings.password.encode())
        else:
            from scramp import ScramClient

            scram = ScramClient([settings.mechanism], settings.username, settings.password)
            first = await self._exchange(scram.get_client_first().encode())
            scram.set_server_first(first.decode())
            final = await self._exchange(scram.get_client_final().encode())
            try:
                scram.set_server_final(final.decode())
            except Exception as exc:  # noqa: BLE001 - scramp's ScramException: the leader is not who it says
                raise SaslAuthenticationError(f"the leader's SCRAM proof did not check: {exc}") from None
        lifetime = self._lifetime
        self._expires = SYSTEM.monotonic() + lifetime * (1 - REAUTH_MARGIN) if lifetime else None

    async def _exchange(self, token: bytes) -> bytes:
        answer = await self.call(SASL_AUTHENTICATE_KEY, SASL_AUTHENTICATE_VERSION, CONNECT_TIMEOUT_S, auth_bytes=token)
        if int(answer.error_code):
            raise SaslAuthenticationError(
                f"inter-broker SASL {self.settings.mechanism} as {self.settings.username!r} refused:"
                f" {answer.error_message or answer.error_code}"
            )
        lifetime = answer.session_lifetime
        self._lifetime = lifetime.total_seconds() if isinstance(lifetime, datetime.timedelta) else 0.0
        return bytes(answer.auth_bytes or b"")

    def close(self) -> None:
        """Close the connection (if open)."""
        writer, self._writer, self._reader = self._writer, None, None
        self._expires = None
        if writer is not None:
            writer.close()


class KafkaFetchLink:
    """A leader host reached for its fetches by Kafka's Fetch over the inter-broker listener,
    and for everything else as ``inner`` reaches it."""

    def __init__(self, inner: HostLink, settings: InterBrokerSettings) -> None:
        self.inner = inner
        self._connection = InterBrokerConnection(settings)
        self._opening: asyncio.Lock | None = None

    @property
    def connects(self) -> int:
        """Connections opened so far."""
        return self._connection.connects

    async def fetch_messages(self, request: FetchMessagesRequest) -> list[Any]:
        """The follower's round as one Fetch (see the module docstring)."""
        connection = self._connection
        if not connection.connected or connection.expired():
            if self._opening is None:
                self._opening = asyncio.Lock()
            async with self._opening:
                if not connection.connected or connection.expired():
                    host, port = await self.inner.inter_broker_endpoint()
                    await connection.open(host, port)
        timeout = request.max_wait_ms / 1000 + SOCKET_TIMEOUT_S
        response = await connection.call(FETCH_KEY, FETCH_VERSION, timeout, **fetch_values(request))
        return answers_of(request, response)

    def wake_replica_fetch(self, replica_id: int) -> None:
        """See HostLink.wake_replica_fetch."""
        self.inner.wake_replica_fetch(replica_id)

    async def offsets_for_leader_epoch(self, request: Any) -> list[Any]:
        """See HostLink.offsets_for_leader_epoch."""
        return await self.inner.offsets_for_leader_epoch(request)

    async def list_offsets(self, request: Any) -> list[Any]:
        """See HostLink.list_offsets."""
        return await self.inner.list_offsets(request)

    async def inter_broker_endpoint(self) -> tuple[str, int]:
        """See HostLink.inter_broker_endpoint."""
        return await self.inner.inter_broker_endpoint()

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()


class InterBrokerLinks(Links):
    """A host's links with the fetches to other hosts over Kafka's protocol, when the
    settings the controller sent say so (``settings()``: None until its first LeaderAndIsr,
    which is before any follower fetches); every other call as ``inner`` makes it."""

    def __init__(self, inner: Links, settings: Any) -> None:
        self._inner = inner
        self._settings = settings
        self._links: dict[Hashable, KafkaFetchLink] = {}

    def host(self, handle: Any) -> HostLink:
        """The link to the host ``handle``: Kafka's Fetch unless the transport is Ray."""
        inner = self._inner.host(handle)
        settings = self._settings()
        if settings is None or settings.transport != "kafka":
            return inner
        key = self._inner.key(handle)
        link = self._links.get(key)
        if link is None or link.inner is not inner or link._connection.settings != settings:
            if link is not None:
                link.close()
            link = self._links[key] = KafkaFetchLink(inner, settings)
        return link

    def controller(self, handle: Any) -> Any:
        """As ``inner``."""
        return self._inner.controller(handle)

    def key(self, handle: Any) -> Hashable:
        """As ``inner``."""
        return self._inner.key(handle)

    def schema_registry(self, namespace: str) -> Any:
        """As ``inner``."""
        return self._inner.schema_registry(namespace)

    def connects(self) -> int:
        """Connections opened so far to other hosts' inter-broker listeners."""
        return sum(link.connects for link in self._links.values())

    def close(self) -> None:
        """Close every connection (the host shuts down)."""
        for link in self._links.values():
            link.close()
        self._links.clear()
