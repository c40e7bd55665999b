"""SaslHandshake (v0-v1) and SaslAuthenticate (v0-v2): the SASL exchange of a SASL listener's
connection (the session in ``actors.gateway.sasl``), answered with Kafka's errors.

On a listener without SASL both answer ILLEGAL_SASL_STATE, as Kafka's KafkaApis does. On a
SASL listener an unsupported mechanism answers UNSUPPORTED_SASL_MECHANISM with the enabled
ones, a failed login SASL_AUTHENTICATION_FAILED, a request out of order ILLEGAL_SASL_STATE;
each of those is the connection's last answer.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.static.primitive import i64Timedelta

from actors.gateway.codec import error_code
from actors.gateway.errors import NONE
from actors.gateway.sasl import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, AuthenticationFailed
from actors.gateway.server import Api, RequestContext
from storage.errors import IllegalSaslStateError, SaslAuthenticationError, UnsupportedSaslMechanismError

_NO_LIFETIME = i64Timedelta.parse(datetime.timedelta(0))


async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    """SaslHandshake v0-v1: the mechanism the client will authenticate with."""
    session = ctx.connection.sasl
    if session is None:
        return ctx.schema.response_of(error_code=error_code(IllegalSaslStateError.code), mechanisms=())
    enabled = tuple(session.config.mechanisms)
    try:
        session.handshake(request.mechanism, ctx.version)
    except (UnsupportedSaslMechanismError, IllegalSaslStateError) as exc:
        ctx.close_after_response(f"SaslHandshake refused: {exc}")
        return ctx.schema.response_of(error_code=error_code(exc.code), mechanisms=enabled)
    return ctx.schema.response_of(error_code=error_code(NONE), mechanisms=enabled)


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    """SaslAuthenticate v0-v2: one token of the exchange; the last one sets the principal
    (and, v1+, tells the session lifetime: connections.max.reauth.ms)."""
    session = ctx.connection.sasl
    if session is None:
        return _answer(ctx, IllegalSaslStateError.code, "SaslAuthenticate on a listener without SASL", b"", 0)
    try:
        answer, lifetime_ms = await session.authenticate(bytes(request.auth_bytes), ctx.version)
    except AuthenticationFailed as exc:
        ctx.close_after_response(f"failed SASL authentication ({session.mechanism}): {exc}")
        return _answer(ctx, SaslAuthenticationError.code, str(exc), b"", 0)
    except IllegalSaslStateError as exc:
        ctx.close_after_response(f"SaslAuthenticate refused: {exc}")
        return _answer(ctx, exc.code, str(exc.args[0]), b"", 0)
    return _answer(ctx, NONE, None, answer, lifetime_ms)


def _answer(ctx: RequestContext, code: int, message: str | None, auth_bytes: bytes, lifetime_ms: int) -> Any:
    lifetime = i64Timedelta.parse(datetime.timedelta(milliseconds=lifetime_ms)) if lifetime_ms else _NO_LIFETIME
    return ctx.schema.response_of(
        error_code=error_code(code), error_message=message, auth_bytes=auth_bytes, session_lifetime=lifetime
    )


APIS = (
    Api(SASL_HANDSHAKE_KEY, 0, 1, handle_sasl_handshake),
    Api(SASL_AUTHENTICATE_KEY, 0, 2, handle_sasl_authenticate),
)
