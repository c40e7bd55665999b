"""The web console: a FastAPI app on uvicorn attached to a running cluster.

Pages are static HTML and a small script of rayqueue's own (no CDN, no build step) that
poll the JSON API (``routes``); charts are drawn as SVG from the history the server
samples (the cluster's Prometheus metrics, else its snapshots: ``state``). Errors from
the cluster reach the page as ``{"error", "message"}``, never a traceback. Unknown ``Host``
names, state changes from other origins and bodies over ``max_body_bytes`` are refused
before any route runs (``guard``). When the cluster has authentication every page and API
route needs a login (``login``, ``sessions``) and acts as the logged-in user. With a TLS
context (:func:`console_ssl_context`, from Kafka's ``ssl.keystore.*`` keys) uvicorn serves
HTTPS.
"""

from __future__ import annotations

import logging
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from actors.clock import SYSTEM, Clock
from actors.config import broker_config
from actors.gateway.ssl_factory import server_context
from rayqueue.cluster import Cluster
from rayqueue.console import DEFAULT_HOST, DEFAULT_PORT
from rayqueue.console.apidocs import OPENAPI_URL, add_api_docs
from rayqueue.console.guard import DEFAULT_MAX_BODY_BYTES, SameOriginMiddleware, allowed_hosts
from rayqueue.console.login import LOGIN_PAGE, Authentication, LoginRequiredMiddleware
from rayqueue.console.login import router as login_router
from rayqueue.console.metrics import ray_metrics_endpoints
from rayqueue.console.routes import AUTHORIZATION_ERRORS, router
from rayqueue.console.schemas import router as schemas_router
from rayqueue.console.sessions import (
    DEFAULT_SESSION_LIFETIME_MS,
    CredentialSource,
    LoginLimiter,
    PasswordVerifier,
    SessionStore,
    authentication_required,
    controller_credentials,
)
from rayqueue.console.state import DEFAULT_SAMPLE_INTERVAL_S, ClusterView, ConsoleState
from rayqueue.errors import (
    GroupIdNotFoundError,
    KafkaError,
    NonEmptyGroupError,
    SaslAuthenticationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    as_kafka_error,
)

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
PAGES = (
    "/",
    "/topics",
    "/topics/{name}",
    "/topics/{name}/messages",
    "/groups",
    "/groups/{group_id:path}",
    "/transactions",
    "/schemas",
)

_STATUS = {
    UnknownTopicOrPartitionError: 404,
    GroupIdNotFoundError: 404,
    TopicAlreadyExistsError: 409,
    NonEmptyGroupError: 409,
    SaslAuthenticationError: 401,
    # The principal may not: Forbidden, with Kafka's name for what was refused.
    **dict.fromkeys(AUTHORIZATION_ERRORS, 403),
}

# The broker keys the console's TLS takes from a cluster config (ssl_factory reads them).
CONSOLE_SSL_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
)


def console_ssl_context(config: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The console's HTTPS context from Kafka's PEM keys (``ssl.keystore.location``, or
    ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``; ``ssl.key.password``;
    ``ssl.enabled.protocols``, ``ssl.cipher.suites``), loaded by the listeners' own
    ``ssl_factory``; None when no key is named. No client certificate is asked for (the
    console asks for a password), whatever ``ssl.client.auth`` the Kafka listeners use.
    InvalidConfigError when the keys cannot be loaded."""
    values = {k: config[k] for k in CONSOLE_SSL_KEYS if k in config}
    if not (values.get("ssl.keystore.location") or values.get("ssl.keystore.certificate.chain")):
        return None
    # Through the broker config for its types, defaults and checks.
    settings = dict(broker_config(values))
    settings.update({"ssl.client.auth": "none", "ssl.truststore.location": "", "ssl.truststore.certificates": ""})
    context = server_context(settings)
    context.set_alpn_protocols(["http/1.1"])
    return context


def _one_line(text: str) -> str:
    return " ".join(text.split())


def error_response(exc: BaseException) -> JSONResponse:
    """A cluster error as the page shows it: Kafka's error name, code and message, no traceback."""
    error = as_kafka_error(exc, what="rayqueue actor")
    if isinstance(error, KafkaError):
        status = next((code for cls, code in _STATUS.items() if isinstance(error, cls)), None)
        if status is None:
            status = 503 if error.retriable else 400
        message = error.args[0] if error.args else ""
        body = {"error": error.kafka_name, "code": error.code, "message": _one_line(str(message))}
        return JSONResponse(body, status_code=status)
    logger.error("console request failed", exc_info=exc)
    return JSONResponse({"error": type(error).__name__, "message": _one_line(str(error))[:500]}, status_code=500)


def create_app(
    cluster: Cluster,
    sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
    sample: bool = True,
    metrics_endpoints: Callable[[], Iterable[str]] = ray_metrics_endpoints,
    hosts: Iterable[str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    authentication: bool | None = None,
    session_lifetime_ms: int = DEFAULT_SESSION_LIFETIME_MS,
    credentials: CredentialSource | None = None,
    login_limiter: LoginLimiter | None = None,
    clock: Clock = SYSTEM,
) -> FastAPI:
    """The console app for ``cluster``; with ``sample`` a thread fills the chart history
    while the app runs (started and stopped by the app's lifespan), scraping the
    ``metrics_endpoints`` (by default every Ray node's metrics agent) on each tick.

    It answers only requests whose ``Host`` is one of ``hosts`` (default: localhost,
    127.0.0.1 and [::1]; :func:`rayqueue.console.guard.allowed_hosts`), accepts a state
    change only from its own origin, and refuses a body over ``max_body_bytes`` with 413.

    ``authentication`` (default: whether the cluster has it,
    :func:`rayqueue.console.sessions.authentication_required`) asks for a SCRAM user's
    password (checked against ``credentials``, by default the controller's) and runs every
    request as that user; sessions last ``session_lifetime_ms``
    (``rayqueue.console.session.lifetime.ms``)."""
    state = ConsoleState(cluster, sample_interval_s, metrics_endpoints=metrics_endpoints)
    if authentication is None:
        authentication = authentication_required(cluster)
    auth: Authentication | None = None
    if authentication:

        def make_view(principal: str) -> ClusterView:
            return ClusterView(cluster, principal)

        verifier = PasswordVerifier(credentials if credentials is not None else controller_credentials(cluster))
        auth = Authentication(
            SessionStore(make_view, verifier, session_lifetime_ms, clock=clock),
            login_limiter if login_limiter is not None else LoginLimiter(clock=clock),
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202 - FastAPI's lifespan protocol
        if sample:
            state.start_sampling()
        try:
            yield
        finally:
            state.close()
            if auth is not None:
                auth.sessions.close()

    # max_body_size: FastAPI's own cap (Starlette's RequestBodyLimitMiddleware): a larger
    # Content-Length is answered 413 before a byte of the body is read, a chunked body is
    # counted as it arrives (uvicorn buffers at most ~64 KiB of it before the app asks).
    app = FastAPI(
        title="rayqueue console",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI comes from a CDN: apidocs renders the schema itself
        redoc_url=None,
        openapi_url=OPENAPI_URL,
        max_body_size=max_body_bytes,
    )
    app.state.console = state
    app.state.authentication = auth
    # The last added runs first: an unknown Host is refused before its Origin is looked at,
    # and a foreign Origin before the session is.
    if auth is not None:
        app.add_middleware(LoginRequiredMiddleware, authentication=auth)
    app.add_middleware(SameOriginMiddleware)
    app.add_middleware(
        TrustedHostMiddleware,
        allowed_hosts=allowed_hosts("") if hosts is None else list(hosts),
        www_redirect=False,
    )
    app.include_router(login_router)
    app.include_router(router)
    app.include_router(schemas_router)
    add_api_docs(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(Exception)
    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(KafkaError)
    async def on_kafka_error(request: Request, exc: KafkaError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: {e.get('msg', '')}" for e in exc.errors()
        )
        return JSONResponse({"error": "INVALID_REQUEST", "code": 42, "message": problems}, status_code=422)

    def page() -> FileResponse:
        # One shell for every page: the script renders what the path names.
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    def login_page() -> Response:
        if auth is None:  # nothing to log in to
            return RedirectResponse("/", status_code=303)
        return FileResponse(STATIC / "login.html", headers={"Cache-Control": "no-store"})

    for path in PAGES:
        app.add_api_route(path, page, methods=["GET"], include_in_schema=False)
    app.add_api_route(LOGIN_PAGE, login_page, methods=["GET"], include_in_schema=False)
    return app


class ConsoleServer:
    """uvicorn serving the console in a background thread (for `rayqueue start --console`
    and tests); ``rayqueue console`` runs the same in the foreground through ``serve``.
    HTTPS with ``ssl_context`` (:func:`console_ssl_context`); ``app_options`` go to
    :func:`create_app` as they are. ``X-Forwarded-For`` / ``X-Forwarded-Proto`` are believed
    only from the ``trusted_proxies`` (addresses or networks: uvicorn's forwarded_allow_ips;
    rayqueue.console.trusted.proxies); without any, a client is its TCP peer's address, so a
    client cannot pick the address the login limit counts."""

    def __init__(
        self,
        cluster: Cluster,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        extra_hosts: Iterable[str] = (),
        ssl_context: ssl.SSLContext | None = None,
        authentication: bool | None = None,
        session_lifetime_ms: int = DEFAULT_SESSION_LIFETIME_MS,
        app_options: Mapping[str, Any] | None = None,
        trusted_proxies: Iterable[str] = (),
    ) -> None:
        # The Host names it answers: its own address, loopback names and ``extra_hosts``.
        self.allowed_hosts = allowed_hosts(host, extra_hosts)
        self.app = create_app(
            cluster,
            sample_interval_s,
            hosts=self.allowed_hosts,
            authentication=authentication,
            session_lifetime_ms=session_lifetime_ms,
            **(app_options or {}),
        )
        self.tls = ssl_context is not None
        # Bound here, before the thread starts, so a busy port fails in the caller and
        # port 0 resolves to the port actually taken.
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError:
            self._socket.close()
            raise
        self._socket.listen(128)
        self.host = host
        self.port = self._socket.getsockname()[1]
        tls: dict[str, Any] = {}
        if ssl_context is not None:
            # uvicorn serves the context as it is (ssl_factory made it from Kafka's keys).
            tls["ssl_context_factory"] = lambda config, default: ssl_context
        # uvicorn believes forwarded headers from 127.0.0.1 unless told otherwise: told here.
        proxies = [p.strip() for p in trusted_proxies if p.strip()]
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                log_level="warning",
                access_log=False,
                lifespan="on",
                timeout_graceful_shutdown=5,
                proxy_headers=bool(proxies),
                forwarded_allow_ips=proxies,
                **tls,
            )
        )
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where a browser opens the console."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def login_required(self) -> bool:
        """Whether the console asks who is there (the cluster has authentication)."""
        return self.app.state.authentication is not None

    def start(self, timeout_s: float = 30.0) -> ConsoleServer:
        """Serve in a daemon thread; returns once uvicorn has started."""
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="rayqueue-console", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        # uvicorn offers a flag, not an event, to wait on.
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._server.started:
            self.stop()
            raise RuntimeError(f"the console server did not start within {timeout_s}s (see the log)")
        return self

    def serve(self) -> None:
        """Serve in this thread until Ctrl-C / SIGTERM (uvicorn's own signal handling), then
        return normally. uvicorn hands the signal on to the handler it found once it has
        shut down; that would be ray.init's (sys.exit with the signal number) or Python's
        KeyboardInterrupt, so ours stands behind uvicorn's instead: it asks the server to
        exit (a signal before uvicorn took over still stops it) and is all the re-raised
        signal reaches."""

        def exit_server(signum: int, frame: object) -> None:
            self._server.should_exit = True

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, exit_server)
        self._server.run(sockets=[self._socket])

    def stop(self) -> None:
        """Stop serving and wait for the server (and its sampler) to finish."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._socket.close()
