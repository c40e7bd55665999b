"""The console's schema registry page: ``GET /api/schemas`` lists the subjects with their
versions, latest schema id and type, and compatibility level, from the registry actor (the
same call ``rayqueue schemas list`` makes). With a login, the subjects are those the session's
principal may DESCRIBE (the registry's ACL rules); without a registry the list is empty and
``url`` is null."""

from __future__ import annotations

from typing import Any

import ray
from fastapi import APIRouter, Request

from actors import launch
from actors.names import SCHEMA_REGISTRY_NAME
from rayqueue.console.login import session_of

router = APIRouter(prefix="/api")

CALL_TIMEOUT_S = 30.0


@router.get("/schemas")
def schemas(request: Request) -> dict[str, Any]:
    """The registry's URL and subjects (what the principal may see)."""
    cluster = request.app.state.console.cluster
    handle = launch.find_actor(SCHEMA_REGISTRY_NAME, cluster.namespace)
    if handle is None:
        return {"url": None, "subjects": []}
    session = session_of(request)
    principal = session.principal if session is not None else None
    urls, subjects = ray.get([handle.urls.remote(), handle.overview.remote(principal)], timeout=CALL_TIMEOUT_S)
    return {"url": urls[0] if urls else None, "subjects": subjects}
