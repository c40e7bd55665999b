"""The SchemaRegistry actor: one per cluster, a thin Ray shell over the registry's state.

It loads ``_schemas`` (``schema.registry.kafkastore.topic``; created compacted, one partition,
on first start) through the coordinators' internal-topic machinery, replaying every record
into a :class:`RegistryState` (a record it cannot read is skipped, logged and counted; the
start goes on), then serves Confluent's REST API with uvicorn in the actor's own event loop on
``schema.registry.listeners``. Writes go to the topic with acks=all before they change the
state (:class:`RegistryService`). Named ``schema_registry``, detached, restarted by Ray (it
then replays and listens again by itself). The methods below the HTTP server are what the CLI
and the console call; they run the same state functions as the REST routes, as the
cluster's super user (whoever holds the Ray token may call an actor directly).

Metrics (``actors.metrics``, unless ``rayqueue.metrics.enabled`` is off): every HTTP request
by method, route template and status, and its time; subjects, versions and schemas held
(recounted on the tick after a change); records of ``_schemas`` skipped at load, as the
coordinators count theirs (``rayqueue_internal_records_skipped_total``, topic ``_schemas``).

Why one actor and not a server in each broker's process: Confluent's registry has one
primary that hands out ids (the others forward writes to it); one actor is that primary
without an election, every write is ordered by it, and every reader sees the same ids
(there is one state). A restart replays the topic, so ids and subjects survive it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import ray
import uvicorn

from actors import launch
from actors.acl import AclOperation
from actors.acl_view import AclView
from actors.authorizer import authorizer_enabled
from actors.config import broker_config
from actors.gateway.credentials import ScramCredentialCache
from actors.gateway.ssl_factory import server_context
from actors.internal_records import READ_ERRORS, SkippedRecords
from actors.internal_topic import InternalTopic
from actors.listeners import listener_protocols, uses_sasl
from actors.metrics import TICK_S, Recorder
from actors.names import CONTROLLER_NAME, SCHEMA_REGISTRY_NAME
from actors.schema_registry import records
from actors.schema_registry.auth import SUBJECT, Access, BasicAuthenticator
from actors.schema_registry.config import RegistrySettings, registry_settings
from actors.schema_registry.errors import RegistryError
from actors.schema_registry.model import Reference, SchemaType
from actors.schema_registry.rest import create_app
from actors.schema_registry.service import RegistryService
from actors.schema_registry.state import RegistryState

logger = logging.getLogger(__name__)

START_BACKOFF_S = 0.5
START_BACKOFF_MAX_S = 10.0
STOP_TIMEOUT_S = 10.0


def cluster_has_authentication(config: Any) -> bool:
    """Whether the cluster authenticates its clients: an authorizer, or a SASL listener."""
    if authorizer_enabled(config["authorizer.class.name"]):
        return True
    if not config["listeners"]:
        return False
    protocols = listener_protocols(config["listeners"], config["listener.security.protocol.map"])
    return any(uses_sasl(p) for p in protocols.values())


def settings_of(config: Any) -> RegistrySettings:
    """The registry settings of a broker configuration."""
    return registry_settings(config, cluster_has_authentication(config))


class SchemaRegistry:
    """The registry actor (see the module docstring)."""

    def __init__(self, namespace: str, config: dict[str, Any]) -> None:
        self._namespace = namespace
        self._config = broker_config(config)
        self._settings = settings_of(self._config)
        self._controller: Any = None
        self._topic = InternalTopic(self._settings.topic, self._controller_handle, 1, self._settings.replication_factor)
        self._service = RegistryService(RegistryState(self._settings.compatibility), self._append)
        self._recorder = Recorder(namespace, True) if self._config["rayqueue.metrics.enabled"] else None
        self._request_tags: dict[tuple[str, str], dict[str, str]] = {}
        self._counted = -1  # the service's change count the gauges show
        self.skipped = SkippedRecords(self._settings.topic, self._count_skipped)
        self._acls: AclView | None = None
        self._servers: list[uvicorn.Server] = []
        self._serving: list[asyncio.Task] = []
        self._urls: list[str] = []
        self._starting: asyncio.Lock | None = None
        self._keeper: asyncio.Task | None = None
        self._ticker: asyncio.Task | None = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            # Listen without being asked: after a restart by Ray nobody asks (as the gateways).
            self._keeper = loop.create_task(self._keep_started())
            if self._recorder is not None:
                self._ticker = loop.create_task(self._tick())

    def _controller_handle(self) -> Any:
        if self._controller is None:
            self._controller = launch.get_actor(CONTROLLER_NAME, self._namespace)
        return self._controller

    async def _append(self, batch: tuple[records.Record, ...]) -> None:
        await self._topic.append(0, [records.encode(r) for r in batch])

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> list[str]:
        """Load ``_schemas`` and listen (idempotent); returns the URLs served."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if not self._urls:
                if not self._service.loaded:
                    await self._load()
                await self._listen()
            return list(self._urls)

    async def _keep_started(self) -> None:
        backoff = START_BACKOFF_S
        while True:
            try:
                await self.start()
                return
            except Exception as exc:  # noqa: BLE001 - logged, then retried
                logger.warning(
                    "schema registry could not start (%s: %s); retrying in %.1f s", type(exc).__name__, exc, backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, START_BACKOFF_MAX_S)

    async def _load(self) -> None:
        state = RegistryState(self._settings.compatibility)
        skipped = SkippedRecords(self._settings.topic, self._count_skipped)
        count = 0
        async for p, batch, first in self._topic.replay():
            for record in skipped.records(p, batch, first):
                try:
                    decoded = records.decode(record.key, record.value)
                    state.apply(decoded)
                    count += 1
                except READ_ERRORS as exc:
                    skipped.skip(p, record.offset, exc)
        self._service.state = state
        self._service.loaded = True
        self._service.changes += 1
        self.skipped = skipped
        logger.info(
            "schema registry loaded %s: %d records, %d subjects, %d schemas, %d records skipped",
            self._settings.topic,
            count,
            len(state.subjects),
            len(state.schemas),
            skipped.count,
        )

    async def _listen(self) -> None:
        authenticator = None
        if self._settings.basic_auth:
            controller = self._controller_handle()
            cache = ScramCredentialCache(lambda user, mechanism: controller.scram_credential.remote(user, mechanism))
            authenticator = BasicAuthenticator(cache.get)
            if self._acls is None:
                self._acls = AclView(self._config, controller)
                await self._acls.start()
        acls = self._acls
        app = create_app(
            self._service,
            authenticator,
            (lambda: acls.authorizer) if acls is not None else None,
            self._settings.max_request_bytes,
            self._observe if self._recorder is not None else None,
        )
        tls: dict[str, Any] = {}
        if self._settings.listeners and self._settings.listeners[0].tls:
            settings = dict(self._config)
            settings.update(
                {"ssl.client.auth": "none", "ssl.truststore.location": "", "ssl.truststore.certificates": ""}
            )
            context = server_context(settings)
            context.set_alpn_protocols(["http/1.1"])
            tls["ssl_context_factory"] = lambda config, default: context
        urls = []
        try:
            for listener in self._settings.listeners:
                family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((listener.host, listener.port))
                    sock.listen(128)
                except OSError:
                    sock.close()
                    raise
                server = uvicorn.Server(
                    uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", **tls)
                )
                self._servers.append(server)
                self._serving.append(asyncio.get_running_loop().create_task(server.serve(sockets=[sock])))
                while not server.started and not self._serving[-1].done():
                    await asyncio.sleep(0.01)
                if self._serving[-1].done():
                    self._serving[-1].result()  # raises why it stopped
                    raise OSError(f"the schema registry stopped serving {listener.url()}")
                urls.append(listener.url(sock.getsockname()[1]))
        except BaseException:
            await self.stop()
            raise
        self._urls = urls
        for url in urls:
            logger.info("schema registry serving %s (%s)", url, "basic auth" if authenticator else "no authentication")

    # -- metrics ---------------------------------------------------------------------------

    def _observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """One answered HTTP request: counted until the next tick, its time observed now."""
        rec = self._recorder
        if rec is None:
            return
        rec.add(rec.metrics.registry_requests, 1, (("method", method), ("route", route), ("status", str(status))))
        tags = self._request_tags.get((method, route))
        if tags is None:
            tags = self._request_tags[(method, route)] = rec.tags(method=method, route=route)
        rec.metrics.registry_request_time.observe(seconds * 1000.0, tags)

    def _count_skipped(self, topic: str) -> None:
        if self._recorder is not None:
            self._recorder.add(self._recorder.metrics.internal_records_skipped, 1, (("topic", topic),))

    async def _tick(self) -> None:
        """Every TICK_S: the summed counters to Ray; after a change, the gauges recounted."""
        rec = self._recorder
        if rec is None:
            return
        metrics = rec.metrics
        while True:
            await asyncio.sleep(TICK_S)
            try:
                rec.flush()
                service = self._service
                if service.loaded and service.changes != self._counted:
                    self._counted = service.changes
                    census = service.state.census()
                    metrics.registry_subjects.set(census.subjects, rec.tags())
                    metrics.registry_versions.set(census.live_versions, rec.tags(state="live"))
                    metrics.registry_versions.set(census.deleted_versions, rec.tags(state="soft_deleted"))
                    for schema_type, count in census.schemas.items():
                        metrics.registry_schemas.set(count, rec.tags(schema_type=schema_type.value))
            except Exception:  # noqa: BLE001 - metrics never stop the registry
                logger.exception("recording the schema registry's metrics failed")

    async def stop(self) -> None:
        """Stop serving HTTP (the state stays loaded)."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not keeper.done() and keeper is not asyncio.current_task():
            keeper.cancel()
        for server in self._servers:
            server.should_exit = True
        if self._serving:
            await asyncio.wait(self._serving, timeout=STOP_TIMEOUT_S)
        self._servers, self._serving, self._urls = [], [], []
        if self._acls is not None:
            self._acls.close()
            self._acls = None

    async def urls(self) -> list[str]:
        """Where the REST API is served (empty until it listens)."""
        return list(self._urls)

    async def ping(self) -> bool:
        """Liveness probe; True once loaded and listening."""
        return bool(self._urls)

    async def stats(self) -> dict[str, Any]:
        """Subjects, schemas, the highest id, records skipped at load, the URLs served."""
        state = self._service.state
        return {
            "loaded": self._service.loaded,
            "urls": list(self._urls),
            "topic": self._settings.topic,
            "subjects": len(state.list_subjects()),
            "schemas": len(state.schemas),
            "max_id": state.max_id,
            "skipped_records": self.skipped.count,
            "compatibility": state.compatibility(None).value,
            "mode": state.mode(None).value,
        }

    # -- what the CLI and the console call -------------------------------------------------

    async def subjects(self, deleted: bool = False) -> list[str]:
        """``GET /subjects``."""
        return self._service.read(lambda s: s.list_subjects(deleted))

    async def versions(self, subject: str, deleted: bool = False) -> list[int]:
        """``GET /subjects/{subject}/versions``."""
        return self._service.read(lambda s: s.list_versions(subject, deleted))

    async def overview(self, principal: str | None = None) -> list[dict[str, Any]]:
        """Every subject with its versions, latest id and type, and compatibility level (the
        console's page); with ``principal``, only the subjects it may DESCRIBE when the
        registry checks ACLs."""
        acls = self._acls
        access = Access(acls.authorizer if acls is not None else None, principal, "*")

        def query(state: RegistryState) -> list[dict[str, Any]]:
            out = []
            for subject in state.list_subjects(deleted=True):
                if not access.allowed(AclOperation.DESCRIBE, SUBJECT, subject):
                    continue
                versions = state.list_versions(subject, deleted=True)
                live = [v for v in versions if not state.subjects[subject][v].deleted]
                latest = state.subjects[subject][max(live or versions)]
                stored = state.schemas[latest.schema_id]
                out.append(
                    {
                        "subject": subject,
                        "versions": live,
                        "deleted_versions": [v for v in versions if v not in live],
                        "latest_id": latest.schema_id,
                        "schema_type": stored.schema_type.value,
                        "compatibility": state.compatibility(subject).value,
                    }
                )
            return out

        return self._service.read(query)

    async def get_version(self, subject: str, version: Any = "latest", deleted: bool = False) -> dict[str, Any]:
        """``GET /subjects/{subject}/versions/{version}``."""
        return self._service.read(lambda s: s.get_version(subject, version, deleted))

    async def schema(self, schema_id: int) -> dict[str, Any]:
        """``GET /schemas/ids/{id}``."""
        return self._service.read(lambda s: s.schema_json(schema_id))

    async def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = "AVRO",
        references: list[dict[str, Any]] | None = None,
        normalize: bool | None = None,
    ) -> int:
        """``POST /subjects/{subject}/versions``: the schema's id."""
        body = {"schema": schema, "schemaType": SchemaType.of(schema_type).value}
        if references:
            body["references"] = [Reference.from_json(r).to_json() for r in references]
        answer = await self._service.write(lambda s: s.register(subject, body, normalize))
        return answer["id"]

    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """``DELETE /subjects/{subject}``."""
        return await self._service.write(lambda s: s.delete_subject(subject, permanent))

    async def delete_version(self, subject: str, version: Any, permanent: bool = False) -> int:
        """``DELETE /subjects/{subject}/versions/{version}``."""
        return await self._service.write(lambda s: s.delete_version(subject, version, permanent))

    async def get_config(self, subject: str | None = None) -> str:
        """The compatibility level that applies to ``subject`` (None: the global one)."""
        return self._service.read(lambda s: s.compatibility(subject).value)

    async def set_config(self, subject: str | None, level: str) -> str:
        """``PUT /config[/{subject}]``."""
        answer = await self._service.write(lambda s: s.set_config(subject, {"compatibility": level}))
        return answer["compatibility"]

    async def get_mode(self, subject: str | None = None) -> str:
        """The mode that applies to ``subject`` (None: the global one)."""
        return self._service.read(lambda s: s.mode(subject).value)

    async def set_mode(self, subject: str | None, mode: str, force: bool = False) -> str:
        """``PUT /mode[/{subject}]``."""
        answer = await self._service.write(lambda s: s.set_mode(subject, {"mode": mode}, force))
        return answer["mode"]


def start_schema_registry(namespace: str, config: dict[str, Any], node_id: str, timeout_s: float) -> Any:
    """Start the registry actor (replacing one a dead cluster left) and wait until it serves;
    returns its handle. The settings are checked here first, so a bad one fails the launch."""
    settings_of(broker_config(config))
    stale = launch.find_actor(SCHEMA_REGISTRY_NAME, namespace)
    if stale is not None:
        launch.kill(stale)
        launch.wait_name_free(SCHEMA_REGISTRY_NAME, namespace)
    handle = launch.launch(
        SchemaRegistry, launch.CLUSTER_ACTOR, SCHEMA_REGISTRY_NAME, namespace, node_id, namespace, config
    )
    try:
        ray.get(handle.start.remote(), timeout=timeout_s)
    except Exception:
        launch.kill(handle)
        raise
    return handle


def stop_schema_registry(namespace: str) -> None:
    """Stop and remove the registry actor, if one runs."""
    handle = launch.find_actor(SCHEMA_REGISTRY_NAME, namespace)
    if handle is None:
        return
    try:
        ray.get(handle.stop.remote(), timeout=STOP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - killed below all the same
        logger.warning("the schema registry did not stop cleanly", exc_info=True)
    launch.kill(handle)


__all__ = ["RegistryError", "SchemaRegistry", "settings_of", "start_schema_registry", "stop_schema_registry"]
