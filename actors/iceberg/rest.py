"""An Iceberg REST catalog as the translation and the readers use it: pyiceberg's REST client,
with every request bounded in time and its failures named after the catalog.

pyiceberg's ``RestCatalog`` sends its requests with no timeout: a catalog that accepts the
connection and never answers would hold a translation step (and the one worker thread a host
translates in) for ever. :class:`RestCatalog` here mounts a transport on the client's HTTP
session that gives each request ``rayqueue.iceberg.catalog.request.timeout.ms`` (to connect,
and for each wait on the answer) and turns a refused, broken or timed-out connection into
:class:`CatalogUnreachableError`, whose message names the catalog's URL and the request. A
catalog that answers but is no REST catalog (a wrong path, another kind of server) fails at
opening with :class:`CatalogUnavailableError`, naming the URL and what came back. Either way
the translation step fails, its error shows in ``rayqueue status`` and the metrics, and the
step is tried again after a backoff: the broker and the partition's data path go on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests
from pyiceberg.catalog.rest import RestCatalog as _PyIcebergRestCatalog
from requests.adapters import HTTPAdapter

from actors.iceberg.config import IcebergSettings


class CatalogUnreachableError(requests.exceptions.ConnectionError):
    """The REST catalog did not answer a request: nothing listens at its URL, the connection
    broke, or no answer came within the request timeout. (A ``ConnectionError``, as requests
    raises for these, so pyiceberg's own handling is unchanged.)"""


class CatalogUnavailableError(RuntimeError):
    """The REST catalog could not be opened: the server at its URL answered, but not as an
    Iceberg REST catalog (or refused the credentials)."""


class _BoundedTransport(HTTPAdapter):
    """requests' HTTP transport with a default timeout and errors that name the catalog."""

    def __init__(self, timeout_s: float, catalog_uri: str) -> None:
        super().__init__()
        self._timeout_s = timeout_s
        self._catalog_uri = catalog_uri

    def send(self, request: Any, **kwargs: Any) -> Any:
        """Send with the catalog's timeout unless the caller gave one."""
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout_s
        try:
            return super().send(request, **kwargs)
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            timed_out = isinstance(exc, requests.exceptions.Timeout)
            reason = f"no answer within {self._timeout_s:g} s" if timed_out else _root_cause(exc)
            path = urlsplit(request.url).path or "/"
            raise CatalogUnreachableError(
                f"the Iceberg REST catalog at {self._catalog_uri} did not answer {request.method} {path}: {reason}",
                request=request,
            ) from exc


def _root_cause(exc: BaseException) -> str:
    """The innermost cause's message (urllib3 wraps the socket's error in two layers)."""
    seen = exc
    while True:
        inner = seen.__cause__ or seen.__context__
        if inner is None and seen.args and isinstance(seen.args[0], BaseException):
            inner = seen.args[0]
        if inner is None or inner is seen:
            break
        seen = inner
    text = str(seen)
    # urllib3's "<...HTTPConnection object at 0x...>: Failed to establish a new connection: [Errno 111] ..."
    return text.split(">: ", 1)[-1] if ">: " in text else text


class RestCatalog(_PyIcebergRestCatalog):
    """pyiceberg's REST catalog whose requests each take at most ``timeout_s`` (see the module
    docstring)."""

    def __init__(self, name: str, timeout_s: float, **properties: str) -> None:
        self._timeout_s = timeout_s
        super().__init__(name, **properties)

    def _create_session(self) -> requests.Session:
        session = super()._create_session()
        transport = _BoundedTransport(self._timeout_s, self.properties.get("uri", ""))
        # Longer prefixes win in requests: an adapter pyiceberg mounted on the catalog's own
        # URL (SigV4 signing, which rayqueue does not set) keeps its place.
        session.mount("http://", transport)
        session.mount("https://", transport)
        return session


def open_rest_catalog(settings: IcebergSettings) -> RestCatalog:
    """The REST catalog of ``settings`` (its configuration fetched from the server now):
    CatalogUnreachableError if the server does not answer, CatalogUnavailableError if it
    answers but not as an Iceberg REST catalog."""
    try:
        return RestCatalog(settings.catalog_name, settings.request_timeout_ms / 1000.0, **settings.catalog_properties())
    except CatalogUnreachableError:
        raise
    except Exception as exc:  # a 404 page, an HTML body, a refused credential: named, with the cause
        raise CatalogUnavailableError(
            f"cannot open the Iceberg REST catalog at {settings.catalog_uri}: {type(exc).__name__}: {exc}"[:1000]
        ) from exc
