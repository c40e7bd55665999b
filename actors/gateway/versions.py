"""The supported-versions table, and ApiVersions, which advertises exactly it.

Each handler module lists its APIs (key, version range, handler) in ``APIS``; the table is
their union. A version is only listed when its handler fills every field of it and kio
has its classes (checked by the tests), so a client never picks a version the gateway
would answer wrongly. Groups and transactions (part 2) add their modules here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.gateway.codec import API_VERSIONS_KEY, ZERO_MS, error_code, make
from actors.gateway.errors import NONE
from actors.gateway.server import Api, RequestContext


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    """ApiVersions v0-v4: the served range of every API."""
    ranges = ctx.connection.server.ranges
    resp = ctx.schema.response
    return ctx.schema.response_of(
        error_code=error_code(NONE),
        api_keys=tuple(
            make(resp, "api_keys", api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in sorted(ranges.items())
        ),
        throttle_time=ZERO_MS,
    )


API_VERSIONS = Api(API_VERSIONS_KEY, 0, 4, handle_api_versions)


def served_apis(families: Iterable[Iterable[Api]]) -> dict[int, Api]:
    """The table: ApiVersions plus every family's APIs (one handler per key)."""
    table = {API_VERSIONS.key: API_VERSIONS}
    for family in families:
        for api in family:
            if api.key in table:
                raise ValueError(f"API key {api.key} is served twice")
            table[api.key] = api
    return table
