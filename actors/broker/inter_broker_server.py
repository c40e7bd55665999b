"""The leader's side of replication over Kafka's protocol: a host's inter-broker listener.

Each host serves its followers' fetches (``actors.broker.inter_broker``) on a listener of its
own, opened when a follower first asks for its address: the inter-broker listener's bind
host (the node's address for a wildcard or when there are no listeners) and a free port,
with that listener's security protocol, TLS keys and SASL mechanisms
(``actors.gateway.security.listener_security``: the same checks as the Kafka listener's) and
the same connection limits (``actors.gateway.server.KafkaServer``: framing, the muted
connection, sizes, idle and authentication timeouts).

It answers ApiVersions, SaslHandshake, SaslAuthenticate and Fetch v12 from a follower
broker (``replica_id`` >= 0): the request becomes one ``fetch_messages`` of the host's
ReplicaManager, awaited in this process (no Ray call, no pickling), and its answers become
the response: each partition's batches as read from the log, its error code, or nothing for
a partition left out of a full answer. As Kafka's KafkaApis, a follower's fetch needs
CLUSTER_ACTION on the cluster (refused: every partition TOPIC_AUTHORIZATION_FAILED); a
consumer's fetch (``replica_id`` -1) is not served here (INVALID_REQUEST): consumers use
the Kafka listener.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from actors.acl import CLUSTER_NAME
from actors.auth_helper import CLUSTER, AuthHelper, Caller, ClientPrincipal, LazyAclView, Op
from actors.broker.inter_broker import FETCH_KEY, FETCH_VERSION, InterBrokerSettings
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.credentials import ScramCredentialCache
from actors.gateway.errors import NONE, error_code_of
from actors.gateway.handlers.sasl import APIS as SASL_APIS
from actors.gateway.security import listener_security
from actors.gateway.server import Api, KafkaServer, Limits, RequestContext
from actors.gateway.versions import served_apis
from actors.protocol_broker import FetchMessagesRequest, FetchPartition
from actors.protocol_security import ScramCredential
from storage.errors import InvalidRequestError, TopicAuthorizationFailedError

logger = logging.getLogger(__name__)

# Fetches: (FetchMessagesRequest) -> answers, as ReplicaManager.fetch_messages.
Fetches = Callable[[FetchMessagesRequest], Awaitable[list[Any]]]
# SCRAM credentials: (user, mechanism) -> the controller's credential.
Credentials = Callable[[str, str], Awaitable[ScramCredential | None]]


class InterBrokerServer:
    """One host's inter-broker listener (see the module docstring). ``fetch`` is the host's
    ``fetch_messages``; ``controller`` returns the controller's handle (the ACLs load from
    it) and ``credentials`` its SCRAM credentials; ``node_ip`` is the address to listen on
    when the listener names no host."""

    def __init__(
        self,
        broker_id: int,
        settings: InterBrokerSettings,
        fetch: Fetches,
        controller: Callable[[], Any],
        credentials: Credentials | None = None,
        node_ip: str = "",
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self._fetch = fetch
        config = dict(settings.config)
        # The ACLs as the Kafka listener has them: nothing is loaded without an authorizer.
        self._auth = AuthHelper(LazyAclView(controller, config), None, str(broker_id))
        scram = ScramCredentialCache(credentials) if credentials is not None else None
        security = listener_security(config, settings.listener, settings.protocol, scram) if config else None
        self._server = KafkaServer(
            served_apis([SASL_APIS, APIS]),
            self,
            _limits(config),
            f"broker {broker_id} inter-broker listener",
            security=security,
        )
        self._host = settings.host or node_ip or "127.0.0.1"
        self._address: tuple[str, int] | None = None
        self._starting: asyncio.Lock | None = None
        self.fetches = 0  # follower fetches served

    async def endpoint(self) -> tuple[str, int]:
        """The address followers connect to, listening first if not yet."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._address is None:
                host, port = await self._server.start(self._host, 0)
                self._address = (self._host, port)
                logger.info("broker %d: inter-broker listener on %s:%d", self.broker_id, host, port)
        return self._address

    async def close(self) -> None:
        """Stop listening and close every connection."""
        await self._server.close()

    async def authorized(self, ctx: RequestContext) -> bool:
        """Whether the connection's principal may fetch as a follower (CLUSTER_ACTION)."""
        principal = ClientPrincipal(ctx.principal, ctx.connection.ip or "")
        return await self._auth.authorized(Caller(principal, "Fetch"), Op.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)

    async def fetch(self, request: FetchMessagesRequest) -> list[Any]:
        """A follower's fetch, by the host's ReplicaManager."""
        self.fetches += 1
        return await self._fetch(request)


def _limits(config: Mapping[str, Any]) -> Limits:
    """The Kafka listener's limits, from the broker configuration (Kafka's keys)."""
    defaults = Limits()
    return Limits(
        max_request_bytes=config.get("socket.request.max.bytes", defaults.max_request_bytes),
        idle_ms=config.get("connections.max.idle.ms", defaults.idle_ms),
        max_connections=config.get("max.connections", defaults.max_connections),
        max_connections_per_ip=config.get("max.connections.per.ip", defaults.max_connections_per_ip),
        queued_max_request_bytes=config.get("queued.max.request.bytes", defaults.queued_max_request_bytes),
    )


async def handle_replica_fetch(ctx: RequestContext, request: Any) -> Any:
    """Fetch v12 from a follower broker (see the module docstring)."""
    server: InterBrokerServer = ctx.state
    asked = [(t.topic, p) for t in request.topics for p in t.partitions]
    code = NONE
    if request.replica_id < 0:
        return _refused(ctx, InvalidRequestError.code)
    if not await server.authorized(ctx):
        code = TopicAuthorizationFailedError.code
    answers: list[Any] = []
    if code == NONE and asked:
        many = FetchMessagesRequest(
            tuple(
                FetchPartition(topic, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
                for topic, p in asked
            ),
            max(0, int(request.max_wait.total_seconds() * 1000)),
            max(0, int(request.min_bytes)),
            max(0, int(request.max_bytes)),
            replica_id=int(request.replica_id),
        )
        try:
            answers = await server.fetch(many)
        except Exception as exc:  # noqa: BLE001 - a request the host refused whole: each partition's code
            answers = [exc] * len(asked)
    return _response(ctx, asked, answers, code)


def _refused(ctx: RequestContext, code: int) -> Any:
    return ctx.schema.response_of(throttle_time=ZERO_MS, error_code=error_code(code), session_id=0, responses=())


def _response(ctx: RequestContext, asked: list[tuple[str, Any]], answers: list[Any], code: int) -> Any:
    resp_cls = ctx.schema.response
    topic_cls = nested(resp_cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    leader_cls = nested(part_cls, "current_leader")
    topics: dict[str, list[Any]] = {}
    for i, (topic, p) in enumerate(asked):
        answer = answers[i] if answers else None
        if code == NONE and answer is None:
            continue  # left out of a full answer: the follower asks for it first next round
        if code != NONE or isinstance(answer, BaseException):
            part_code = code if code != NONE else error_code_of(answer)
            topics.setdefault(topic, []).append(
                make(
                    topic_cls,
                    "partitions",
                    partition_index=p.partition,
                    error_code=error_code(part_code),
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=b"",
                )
            )
            continue
        topics.setdefault(topic, []).append(
            make(
                topic_cls,
                "partitions",
                partition_index=p.partition,
                error_code=error_code(NONE),
                high_watermark=answer.high_watermark,
                last_stable_offset=answer.last_stable_offset,
                log_start_offset=answer.log_start_offset,
                current_leader=leader_cls(leader_id=-1, leader_epoch=answer.leader_epoch),
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=answer.records,
            )
        )
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(NONE),
        session_id=0,
        responses=tuple(make(resp_cls, "responses", topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
    )


APIS = (Api(FETCH_KEY, FETCH_VERSION, FETCH_VERSION, handle_replica_fetch),)
