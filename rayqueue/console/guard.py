"""What the console refuses before a route runs: unknown ``Host`` names, state changes from
another origin, and request bodies past a small cap.

The console can delete topics and move offsets, and a browser will send requests to it on
behalf of any page it has open. Three well-known attacks follow, each refused here:

- Cross-site requests (CSRF): a page on ``http://evil.example`` posts to
  ``http://127.0.0.1:8088/api/...``. The browser sends ``Origin: http://evil.example``
  with every POST/DELETE, so a state change (any method but GET/HEAD/OPTIONS) is refused
  unless its ``Origin`` (or, without one, its ``Referer``) is the console's own. A state
  change carrying neither is refused too: every browser sends ``Origin`` on them, so only a
  hand-made request lacks it, and its author can add one (``curl -H 'Origin: ...'``).
- DNS rebinding: ``evil.example`` starts resolving to 127.0.0.1, and the page reads the
  console as its own origin. The request then says ``Host: evil.example``; Starlette's
  TrustedHostMiddleware refuses every host the operator has not listed.
- Oversized bodies: the cap is FastAPI's own ``max_body_size`` (Starlette's
  RequestBodyLimitMiddleware: a Content-Length over it is answered 413 without reading the
  body, a chunked body is counted as it streams); see :func:`rayqueue.console.app.create_app`.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

# Methods that change nothing (HTTP's "safe" methods); everything else is a state change.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The console's JSON bodies are a topic's configs or one test record: far below this.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# Names a browser on this machine uses for a loopback console, always allowed.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def allowed_hosts(bound_host: str, extra: Iterable[str] = ()) -> list[str]:
    """The ``Host`` names the console answers: the address it is bound to (unless that is a
    wildcard, which no browser names), localhost, 127.0.0.1 and [::1], plus ``extra`` (the
    operator's ``--allowed-host`` / ``rayqueue.console.allowed.hosts``: names, addresses,
    ``*.example.com``, or ``*`` for any)."""
    hosts = list(LOCAL_HOSTS)
    if bound_host not in _WILDCARDS:
        hosts.append(_bracketed(bound_host))
    for host in extra:
        host = host.strip()
        if host:
            hosts.append(_bracketed(host))
    return list(dict.fromkeys(h.lower() for h in hosts))


def _bracketed(host: str) -> str:
    """An IPv6 literal as a Host header writes it (``[::1]``), which TrustedHostMiddleware compares."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an Origin or Referer value; None when it names no origin
    (``null``, a relative or garbled URL)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, _bracketed(parts.hostname.lower()), port or _DEFAULT_PORTS[parts.scheme]


def _own_origin(scope: Scope, headers: Headers) -> tuple[str, str, int] | None:
    """The console's origin as this request reached it: its scheme and its Host header
    (already checked against the allowed hosts)."""
    host = headers.get("host")
    if not host:
        return None
    return _origin_of(f"{scope.get('scheme', 'http')}://{host}")


class SameOriginMiddleware:
    """Refuse (403) a state change whose ``Origin`` (or, without one, ``Referer``) is not the
    console's own origin, or that carries neither."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        own = _own_origin(scope, headers)
        origin = headers.get("origin")
        referer = headers.get("referer")
        if origin is not None:
            claimed, why = _origin_of(origin), f"its Origin {origin!r} is not"
        elif referer is not None:
            claimed, why = _origin_of(referer), f"its Referer {referer!r} is not"
        else:
            claimed, why = None, "it carries no Origin or Referer header naming"
        if own is not None and claimed == own:
            await self.app(scope, receive, send)
            return
        here = f"{own[0]}://{headers.get('host')}" if own is not None else "this console's address"
        message = (
            f"{scope['method']} refused: {why} this console ({here}). Changes are accepted from the"
            f" console's own pages; a script or curl must send the header Origin: {here}"
        )
        response = JSONResponse({"error": "CROSS_ORIGIN_REQUEST", "message": message}, status_code=403)
        await response(scope, receive, send)


__all__ = ["DEFAULT_MAX_BODY_BYTES", "LOCAL_HOSTS", "SAFE_METHODS", "SameOriginMiddleware", "allowed_hosts"]
