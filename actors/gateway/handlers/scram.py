"""DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0): SCRAM users, kept by
the controller (``actors.controller.scram_control``), so that ``kafka-configs --alter
--add-config 'SCRAM-SHA-512=[password=...]' --entity-type users`` and every admin client's
user calls work. An alteration forgets the gateway's cached credentials of those users at
once (the other gateways' caches expire within ``credentials.MAX_AGE_S``).

With an authorizer, as Kafka's KafkaApis: DescribeUserScramCredentials needs DESCRIBE on the
cluster (refused: CLUSTER_AUTHORIZATION_FAILED for the request and each user named) and
AlterUserScramCredentials ALTER (refused: CLUSTER_AUTHORIZATION_FAILED for each user); nothing
reaches the controller then, and the controller checks the client's principal again.
"""

from __future__ import annotations

from typing import Any

from actors.gateway import authorization as authz
from actors.gateway.broker_view import BrokerView
from actors.gateway.codec import ZERO_MS, error_code, make, nested
from actors.gateway.errors import CONTROLLER_UNAVAILABLE, NONE, error_code_of, error_message_of
from actors.gateway.server import Api, RequestContext
from actors.protocol_security import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UserScramCredentialsResult,
)
from storage.errors import ClusterAuthorizationFailedError

DESCRIBE_USER_SCRAM_CREDENTIALS_KEY = 50
ALTER_USER_SCRAM_CREDENTIALS_KEY = 51


async def _describe(controller: Any, request: DescribeUserScramCredentialsRequest) -> list[UserScramCredentialsResult]:
    return await controller.describe_user_scram_credentials.remote(request)


async def _alter(controller: Any, request: AlterUserScramCredentialsRequest) -> list[UserScramCredentialsResult]:
    return await controller.alter_user_scram_credentials.remote(request)


async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    """Each named user's (or every user's) SCRAM mechanisms and iteration counts."""
    view: BrokerView = ctx.state
    resp = ctx.schema.response
    users = None if request.users is None else tuple(u.name for u in request.users)
    try:
        if not authz.authorized_cluster(ctx, authz.Op.DESCRIBE):
            raise ClusterAuthorizationFailedError(f"{ctx.principal} may not DESCRIBE the cluster's users")
        results = await _describe(view.controller, DescribeUserScramCredentialsRequest(users, authz.client(ctx)))
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        # As Kafka's getErrorResponse: the request's error, and each user named with it.
        code, message = error_code(error_code_of(exc, CONTROLLER_UNAVAILABLE)), error_message_of(exc)
        return ctx.schema.response_of(
            throttle_time=ZERO_MS,
            error_code=code,
            error_message=message,
            results=tuple(
                make(resp, "results", user=user, error_code=code, error_message=message, credential_infos=())
                for user in users or ()
            ),
        )
    result_cls = nested(resp, "results")
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        error_code=error_code(NONE),
        error_message=None,
        results=tuple(
            make(
                resp,
                "results",
                user=r.user,
                error_code=error_code(r.error_code),
                error_message=r.error_message,
                credential_infos=tuple(
                    make(result_cls, "credential_infos", mechanism=m, iterations=i) for m, i in r.credential_infos
                ),
            )
            for r in results
        ),
    )


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    """Add, replace and remove users' SCRAM credentials (salted by the client, KIP-554)."""
    view: BrokerView = ctx.state
    deletions = tuple(ScramCredentialDeletion(d.name, int(d.mechanism)) for d in request.deletions)
    upsertions = tuple(
        ScramCredentialUpsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
        for u in request.upsertions
    )
    named = list(dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions]))
    try:
        if not authz.authorized_cluster(ctx, authz.Op.ALTER):
            raise ClusterAuthorizationFailedError(f"{ctx.principal} may not ALTER the cluster's users")
        results = await _alter(
            view.controller, AlterUserScramCredentialsRequest(deletions, upsertions, authz.client(ctx))
        )
    except Exception as exc:  # noqa: BLE001 - every user answered with the error
        code, message = error_code_of(exc, CONTROLLER_UNAVAILABLE), error_message_of(exc)
        results = [UserScramCredentialsResult(user, code, message) for user in named]
    if view.scram_credentials is not None:
        view.scram_credentials.invalidate(named)
    return ctx.schema.response_of(
        throttle_time=ZERO_MS,
        results=tuple(
            make(
                ctx.schema.response,
                "results",
                user=r.user,
                error_code=error_code(r.error_code),
                error_message=r.error_message,
            )
            for r in results
        ),
    )


APIS = (
    Api(DESCRIBE_USER_SCRAM_CREDENTIALS_KEY, 0, 0, handle_describe_user_scram_credentials),
    Api(ALTER_USER_SCRAM_CREDENTIALS_KEY, 0, 0, handle_alter_user_scram_credentials, exclusive=True),
)
