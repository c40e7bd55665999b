"""Confluent Schema Registry's REST API as a FastAPI app over a :class:`RegistryService`.

Paths, query parameters, bodies and answers are Confluent's (``application/vnd.schemaregistry.v1+json``);
every refusal is Confluent's ``{"error_code": ..., "message": ...}`` with its HTTP status,
unknown paths and methods included. Bodies are read up to ``max_body_bytes`` (413 beyond),
must be JSON objects nested at most ``MAX_BODY_DEPTH`` deep (400 otherwise); a schema that
does not parse is 42201. With an authenticator every request needs HTTP basic credentials of a
SCRAM user (401) and each route checks the ACLs (403; see ``auth``). Nothing a request sends
can stop the server: an unexpected failure is logged and answered 500 (50001).

With ``observe``, every answered request is told to it (method, route, status, seconds), for
the registry's metrics: the route is the path template that matched
(``/subjects/{subject}/versions``), never the path itself, so a subject name never becomes a
label; a path that matched none is ``unmatched`` and a method outside HTTP's usual ones is
``OTHER``, so no client can grow the label sets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from actors.acl import AclOperation
from actors.clock import SYSTEM, Clock
from actors.schema_registry import errors
from actors.schema_registry.auth import OPEN, SUBJECT, Access, BasicAuthenticator
from actors.schema_registry.model import SchemaType, load_json
from actors.schema_registry.service import RegistryService
from actors.schema_registry.state import RegistryState

logger = logging.getLogger(__name__)

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_BODY_DEPTH = 32
_TRUE = ("true", "1", "yes")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})
OTHER_METHOD = "OTHER"
UNMATCHED_ROUTE = "unmatched"

# observe(method, route, status, seconds): one answered request.
Observe = Callable[[str, str, int, float], None]

Op = AclOperation


class _Answer(JSONResponse):
    media_type = MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _error(exc: errors.RegistryError) -> Response:
    return _Answer(exc.body(), status_code=exc.status)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").strip().lower() in _TRUE


def _normalize(request: Request) -> bool | None:
    value = request.query_params.get("normalize")
    return None if value is None else value.strip().lower() in _TRUE


def _schema_id(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise errors.schema_not_found() from None
    if not 1 <= number <= 2**31 - 1:
        raise errors.schema_not_found()
    return number


async def _body(request: Request, limit: int) -> Any:
    """The request's JSON body, read up to ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise errors.RegistryError(413, errors.PAYLOAD_TOO_LARGE, f"the request body exceeds {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise errors.RegistryError(413, errors.PAYLOAD_TOO_LARGE, f"the request body exceeds {limit} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    if not data.strip():
        raise errors.bad_request("the request has no body")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise errors.bad_request(f"the request body is not JSON: {exc}") from None
    value = load_json(text, "request body", MAX_BODY_DEPTH, errors.bad_request)
    if not isinstance(value, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return value


class ObservedRequests:
    """ASGI middleware that tells ``observe`` of every HTTP request once it is answered (or
    failed: a request whose answer never started counts as 500), with its route template."""

    def __init__(self, app: ASGIApp, observe: Observe, clock: Clock = SYSTEM) -> None:
        self.app = app
        self.observe = observe
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock.monotonic()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            method = scope.get("method", "")
            route = getattr(scope.get("route"), "path", None)
            try:
                self.observe(
                    method if method in METHODS else OTHER_METHOD,
                    route if isinstance(route, str) else UNMATCHED_ROUTE,
                    status,
                    self.clock.monotonic() - started,
                )
            except Exception:  # noqa: BLE001 - counting never fails a request
                logger.exception("recording a schema registry request failed")


def create_app(
    service: RegistryService,
    authenticator: BasicAuthenticator | None = None,
    authorizer: Callable[[], Any] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    observe: Observe | None = None,
) -> FastAPI:
    """The registry's HTTP app. ``authenticator`` (None: no authentication) checks basic
    credentials; ``authorizer()`` gives the StandardAuthorizer the ACLs are checked with;
    ``observe`` is told of every request (see the module docstring)."""
    app = FastAPI(title="rayqueue schema registry", docs_url=None, redoc_url=None, openapi_url=None)
    if observe is not None:
        app.add_middleware(ObservedRequests, observe=observe)

    async def access(request: Request) -> Access:
        if authenticator is None:
            return OPEN
        principal = await authenticator.principal(request.headers.get("authorization"))
        host = request.client.host if request.client is not None else "*"
        return Access(authorizer() if authorizer is not None else None, principal, host)

    def route(method: str, path: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            async def endpoint(request: Request) -> Response:
                try:
                    who = await access(request)
                    result = await handler(request, who, **request.path_params)
                except errors.RegistryError as exc:
                    return _error(exc)
                if isinstance(result, Response):
                    return result
                return _Answer(result)

            app.add_api_route(path, endpoint, methods=[method], include_in_schema=False)
            return handler

        return register

    read = service.read
    read_parsing = service.read_parsing
    write = service.write

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _Answer(
            {"error_code": exc.status_code, "message": f"HTTP {exc.status_code} {exc.detail}"}, exc.status_code
        )

    @app.exception_handler(Exception)
    async def on_error(request: Request, exc: Exception) -> Response:
        logger.exception("schema registry request %s %s failed", request.method, request.url.path)
        return _Answer({"error_code": errors.STORE_ERROR, "message": f"{type(exc).__name__}: {exc}"[:500]}, 500)

    # -- the server ------------------------------------------------------------------------

    @route("GET", "/")
    async def root(request: Request, who: Access) -> Any:
        return {}

    @route("GET", "/schemas/types")
    async def schema_types(request: Request, who: Access) -> Any:
        return [t.value for t in (SchemaType.JSON, SchemaType.PROTOBUF, SchemaType.AVRO)]

    # -- schemas by id ---------------------------------------------------------------------

    def check_id_readable(who: Access, state: RegistryState, schema_id: int) -> None:
        holders = state.id_versions(schema_id, deleted=True)
        if who.principal is not None and not any(who.allowed(Op.READ, *_subject(s)) for s, _ in holders):
            raise errors.forbidden(str(who.principal), "READ", f"Schema:{schema_id}")

    async def schema_answer(request: Request, who: Access, schema_id: int) -> dict[str, Any]:
        def query(state: RegistryState) -> dict[str, Any]:
            check_id_readable(who, state, schema_id)
            out = state.schema_json(schema_id)
            if request.query_params.get("format") == "serialized":
                out["schema"] = state.serialized(schema_id)
            if _flag(request, "fetchMaxId"):
                out["maxId"] = state.max_id
            return out

        if request.query_params.get("format") == "serialized":
            return await read_parsing(query)
        return read(query)

    @route("GET", "/schemas/ids/{schema_id}")
    async def schema_by_id(request: Request, who: Access, schema_id: str) -> Any:
        return await schema_answer(request, who, _schema_id(schema_id))

    @route("GET", "/schemas/ids/{schema_id}/schema")
    async def schema_text(request: Request, who: Access, schema_id: str) -> Any:
        answer = await schema_answer(request, who, _schema_id(schema_id))
        return Response(answer["schema"], media_type=MEDIA_TYPE)

    @route("GET", "/schemas/ids/{schema_id}/subjects")
    async def id_subjects(request: Request, who: Access, schema_id: str) -> Any:
        holders = read(lambda s: s.id_versions(_schema_id(schema_id), _flag(request, "deleted")))
        return list(dict.fromkeys(s for s, _ in holders if who.allowed(Op.DESCRIBE, *_subject(s))))

    @route("GET", "/schemas/ids/{schema_id}/versions")
    async def id_versions(request: Request, who: Access, schema_id: str) -> Any:
        holders = read(lambda s: s.id_versions(_schema_id(schema_id), _flag(request, "deleted")))
        return [{"subject": s, "version": v} for s, v in holders if who.allowed(Op.DESCRIBE, *_subject(s))]

    @route("GET", "/schemas")
    async def list_schemas(request: Request, who: Access) -> Any:
        prefix = request.query_params.get("subjectPrefix", "")
        found = read(lambda s: s.list_schemas(prefix, _flag(request, "deleted"), _flag(request, "latestOnly")))
        return [v for v in found if who.allowed(Op.READ, *_subject(v["subject"]))]

    # -- subjects --------------------------------------------------------------------------

    @route("GET", "/subjects")
    async def list_subjects(request: Request, who: Access) -> Any:
        prefix = request.query_params.get("subjectPrefix", "")
        found = read(lambda s: s.list_subjects(_flag(request, "deleted"), _flag(request, "deletedOnly"), prefix))
        return [s for s in found if who.allowed(Op.DESCRIBE, *_subject(s))]

    @route("GET", "/subjects/{subject}/versions")
    async def list_versions(request: Request, who: Access, subject: str) -> Any:
        who.subject(Op.DESCRIBE, subject)
        return read(lambda s: s.list_versions(subject, _flag(request, "deleted"), _flag(request, "deletedOnly")))

    async def version_answer(request: Request, who: Access, subject: str, version: str) -> dict[str, Any]:
        who.subject(Op.READ, subject)
        deleted = _flag(request, "deleted")
        if request.query_params.get("format") == "serialized":

            def serialized(state: RegistryState) -> dict[str, Any]:
                out = state.get_version(subject, version, deleted)
                out["schema"] = state.serialized(out["id"])
                return out

            return await read_parsing(serialized)
        return read(lambda s: s.get_version(subject, version, deleted))

    @route("GET", "/subjects/{subject}/versions/{version}")
    async def get_version(request: Request, who: Access, subject: str, version: str) -> Any:
        return await version_answer(request, who, subject, version)

    @route("GET", "/subjects/{subject}/versions/{version}/schema")
    async def get_version_schema(request: Request, who: Access, subject: str, version: str) -> Any:
        answer = await version_answer(request, who, subject, version)
        return Response(answer["schema"], media_type=MEDIA_TYPE)

    @route("GET", "/subjects/{subject}/versions/{version}/referencedby")
    async def referenced_by(request: Request, who: Access, subject: str, version: str) -> Any:
        who.subject(Op.DESCRIBE, subject)

        def query(state: RegistryState) -> list[int]:
            number, _ = state.resolve_version(subject, version, deleted=True)
            return state.referenced_by(subject, number)

        return read(query)

    @route("POST", "/subjects/{subject}/versions")
    async def register(request: Request, who: Access, subject: str) -> Any:
        who.subject(Op.WRITE, subject)
        body = await _body(request, max_body_bytes)
        return await write(lambda s: s.register(subject, body, _normalize(request)))

    @route("POST", "/subjects/{subject}")
    async def lookup(request: Request, who: Access, subject: str) -> Any:
        who.subject(Op.READ, subject)
        body = await _body(request, max_body_bytes)
        return await read_parsing(lambda s: s.lookup(subject, body, _normalize(request), _flag(request, "deleted")))

    @route("DELETE", "/subjects/{subject}")
    async def delete_subject(request: Request, who: Access, subject: str) -> Any:
        who.subject(Op.DELETE, subject)
        return await write(lambda s: s.delete_subject(subject, _flag(request, "permanent")))

    @route("DELETE", "/subjects/{subject}/versions/{version}")
    async def delete_version(request: Request, who: Access, subject: str, version: str) -> Any:
        who.subject(Op.DELETE, subject)
        return await write(lambda s: s.delete_version(subject, version, _flag(request, "permanent")))

    # -- compatibility ---------------------------------------------------------------------

    async def compatibility(request: Request, who: Access, subject: str, version: str | None) -> Any:
        who.subject(Op.READ, subject)
        body = await _body(request, max_body_bytes)
        messages = await read_parsing(lambda s: s.check_compatibility(subject, version, body, _normalize(request)))
        answer: dict[str, Any] = {"is_compatible": not messages}
        if _flag(request, "verbose"):
            answer["messages"] = messages
        return answer

    @route("POST", "/compatibility/subjects/{subject}/versions/{version}")
    async def compatibility_version(request: Request, who: Access, subject: str, version: str) -> Any:
        return await compatibility(request, who, subject, version)

    @route("POST", "/compatibility/subjects/{subject}/versions")
    async def compatibility_all(request: Request, who: Access, subject: str) -> Any:
        return await compatibility(request, who, subject, None)

    # -- config and mode -------------------------------------------------------------------

    def guard(who: Access, subject: str | None, op: AclOperation) -> None:
        if subject is None:
            who.registry(op)
        else:
            who.subject(op, subject)

    def settings_routes(path: str, getter: str, setter: str, deleter: str, with_force: bool) -> None:
        for subject_path in (path, path + "/{subject}"):

            @route("GET", subject_path)
            async def get(request: Request, who: Access, subject: str | None = None) -> Any:
                guard(who, subject, Op.DESCRIBE_CONFIGS)
                return read(lambda s: getattr(s, getter)(subject, _flag(request, "defaultToGlobal")))

            @route("PUT", subject_path)
            async def put(request: Request, who: Access, subject: str | None = None) -> Any:
                guard(who, subject, Op.ALTER_CONFIGS)
                body = await _body(request, max_body_bytes)
                if with_force:
                    return await write(lambda s: getattr(s, setter)(subject, body, _flag(request, "force")))
                return await write(lambda s: getattr(s, setter)(subject, body))

            if subject_path != path or deleter == "delete_config":

                @route("DELETE", subject_path)
                async def delete(request: Request, who: Access, subject: str | None = None) -> Any:
                    guard(who, subject, Op.ALTER_CONFIGS)
                    return await write(lambda s: getattr(s, deleter)(subject))

    settings_routes("/config", "get_config", "set_config", "delete_config", False)
    settings_routes("/mode", "get_mode", "set_mode", "delete_mode", True)
    return app


def _subject(subject: str) -> tuple[Any, str]:
    return SUBJECT, subject
