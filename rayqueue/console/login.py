"""The console's login: the page, ``/api/login`` / ``/api/logout`` / ``/api/session``, and
the middleware that lets no other request through without a live session when the cluster
has authentication (``rayqueue.console.sessions`` checks passwords and keeps sessions).

Without a session, an API request is answered 401 ``LOGIN_REQUIRED`` (the page's script
then opens the login page) and a page request is redirected to ``/login?next=<path>``.
The login page and the static assets (rayqueue's own code, no data) need no session.
A failed login is answered ``SASL_AUTHENTICATION_FAILED`` after a pause; a client address,
or a user name, with too many recent failures is answered 429 ``THROTTLING_QUOTA_EXCEEDED``
with ``Retry-After``, without its password being looked at. The client address is the TCP
peer's: ``X-Forwarded-For`` counts only from the proxies ``rayqueue.console.trusted.proxies``
names (``ConsoleServer``'s ``trusted_proxies``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from rayqueue.console.sessions import (
    FAILED_LOGIN_DELAY_S,
    SESSION_COOKIE,
    LoginLimiter,
    Session,
    SessionStore,
    VerifiedLogin,
)

logger = logging.getLogger(__name__)

LOGIN_PAGE = "/login"
# What a request may reach without a session.
PUBLIC_PATHS = frozenset({LOGIN_PAGE, "/api/login", "/api/logout", "/api/session"})
PUBLIC_PREFIXES = ("/static/",)
# Where handlers find the request's session (Starlette's request.state).
STATE_KEY = "console_session"
# Key derivations (PBKDF2, up to 16384 rounds) run at once: logins cannot take every core.
MAX_CONCURRENT_CHECKS = 2
MAX_USER_CHARS = 256
MAX_PASSWORD_CHARS = 1024


@dataclass
class Authentication:
    """The console's login state (the app holds None when the cluster has no authentication)."""

    sessions: SessionStore
    limiter: LoginLimiter
    failed_login_delay_s: float = FAILED_LOGIN_DELAY_S

    def __post_init__(self) -> None:
        self._checks = threading.BoundedSemaphore(MAX_CONCURRENT_CHECKS)

    def verify(self, user: str, password: str) -> VerifiedLogin | None:
        """Check a password (blocking: run it in a worker thread)."""
        with self._checks:
            return self.sessions.verifier.verify(user, password)


def session_of(request: Request) -> Session | None:
    """The request's session (None when the console has no login)."""
    return getattr(request.state, STATE_KEY, None)


def _is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def _cookie_attributes(scope_or_request: Any) -> dict[str, Any]:
    """The session cookie's attributes: HttpOnly, SameSite=Strict, Path=/, Secure under TLS."""
    secure = scope_or_request.url.scheme == "https"
    return {"path": "/", "httponly": True, "samesite": "strict", "secure": secure}


def _forget_cookie(response: Response, connection: Any) -> None:
    response.delete_cookie(SESSION_COOKIE, **_cookie_attributes(connection))


class LoginRequiredMiddleware:
    """Lets a request through only with a live session (public paths excepted) and hands
    the session to the handlers; see the module docstring."""

    def __init__(self, app: ASGIApp, authentication: Authentication) -> None:
        self.app = app
        self.authentication = authentication

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        session_id = connection.cookies.get(SESSION_COOKIE)
        # The credential check may call the controller: off the event loop.
        session, why = await anyio.to_thread.run_sync(self.authentication.sessions.get, session_id)
        if session is not None:
            scope.setdefault("state", {})[STATE_KEY] = session
            await self.app(scope, receive, send)
            return
        response: Response
        if scope["path"].startswith("/api/"):
            response = JSONResponse({"error": "LOGIN_REQUIRED", "message": why}, status_code=401)
        else:
            target = scope["path"] + (f"?{scope['query_string'].decode('latin-1')}" if scope["query_string"] else "")
            response = RedirectResponse(f"{LOGIN_PAGE}?next={quote(target, safe='')}", status_code=303)
        if session_id:
            _forget_cookie(response, connection)
        await response(scope, receive, send)


class LoginBody(BaseModel):
    """A login: a SCRAM user's name and password."""

    user: str = Field(min_length=1, max_length=MAX_USER_CHARS)
    password: str = Field(max_length=MAX_PASSWORD_CHARS)


router = APIRouter()


def _authentication(request: Request) -> Authentication | None:
    return request.app.state.authentication


def _session_body(session: Session) -> dict[str, Any]:
    return {
        "authentication": True,
        "user": session.user,
        "principal": session.principal,
        "mechanism": session.mechanism,
        "expires_at_ms": session.expires_at_ms,
    }


@router.post("/api/login")
async def login(request: Request, body: LoginBody) -> Response:
    """Check a SCRAM user's password and open a session (the cookie); see the module docstring."""
    auth = _authentication(request)
    if auth is None:
        message = "this console has no login: the cluster has no authentication"
        return JSONResponse({"error": "INVALID_REQUEST", "code": 42, "message": message}, status_code=400)
    client = request.client.host if request.client is not None else "unknown"
    wait_s = auth.limiter.begin(client, body.user)
    if wait_s:
        message = f"too many failed logins from {client} or for this user: try again in {math.ceil(wait_s)} s"
        return JSONResponse(
            {"error": "THROTTLING_QUOTA_EXCEEDED", "code": 89, "message": message},
            status_code=429,
            headers={"Retry-After": str(math.ceil(wait_s))},
        )
    outcome: bool | None = None
    verified: VerifiedLogin | None = None
    try:
        verified = await anyio.to_thread.run_sync(auth.verify, body.user, body.password)
        outcome = verified is not None
    finally:
        # A controller that did not answer counts neither way.
        auth.limiter.done(client, outcome, body.user)
    if verified is None:
        logger.warning("console login failed for user %r from %s", body.user[:64], client)
        await asyncio.sleep(auth.failed_login_delay_s)
        message = "Authentication failed due to invalid credentials: unknown user or wrong password"
        return JSONResponse({"error": "SASL_AUTHENTICATION_FAILED", "code": 58, "message": message}, status_code=401)
    session = await anyio.to_thread.run_sync(auth.sessions.open, verified)
    response = JSONResponse(_session_body(session))
    response.set_cookie(
        SESSION_COOKIE,
        session.session_id,
        max_age=auth.sessions.lifetime_ms // 1000,
        **_cookie_attributes(request),
    )
    return response


@router.post("/api/logout")
def logout(request: Request) -> Response:
    """End the request's session (if any) and forget its cookie."""
    auth = _authentication(request)
    session_id = request.cookies.get(SESSION_COOKIE)
    ended = bool(auth is not None and session_id and auth.sessions.end(session_id))
    response = JSONResponse({"logged_out": ended})
    _forget_cookie(response, request)
    return response


@router.get("/api/session")
def current_session(request: Request) -> dict[str, Any]:
    """Whether the console asks for a login, and who the request's session is (user null
    without one)."""
    auth = _authentication(request)
    if auth is None:
        return {"authentication": False, "user": None, "principal": None}
    session, _ = auth.sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is None:
        return {"authentication": True, "user": None, "principal": None}
    return _session_body(session)
