"""Authorize or refuse (Kafka's AuthHelper): the one place a principal meets the authorizer,
for the gateway's Kafka clients and for rayqueue's native clients alike.

Native clients: a Producer, Consumer or Admin made with a principal (``User:alice``) puts it
on every request it sends (the ``principal`` field of the ``actors.protocol`` messages). The
actor serving the request (a partition leader, the controller, a coordinator) asks its
:class:`AuthHelper` with Kafka's rules for that request (which operation on which resource:
KafkaApis, as the gateway's handlers do) and raises Kafka's error for the resource type:
TopicAuthorizationFailedError, GroupAuthorizationFailedError,
ClusterAuthorizationFailedError or TransactionalIdAuthorizationFailedError. A request
without a principal is a super user's: whoever can call the actors holds the Ray cluster's
token, as whoever holds a Kafka broker's files can read its data. Ray calls carry no client
address, so only ACLs for every host (``*``) apply to a native principal.

Kafka clients: a listener never calls without a principal. Every call a gateway handler
makes to the controller or a coordinator carries the connection's :class:`ClientPrincipal`
(the principal, the client's address, and the version of the ACLs the gateway authorized
with; ``actors.gateway.broker_view.ListenerHandle`` refuses a call without one), so the actor
checks the same rules for the same client as the gateway did, host-specific ACLs included,
and a handler that forgot a check is still refused there. An actor whose copy of the ACLs is
older than the gateway's catches up (one controller call) before it checks, so an ACL just
created applies at once on both sides.

Where the ACLs come from: a replica or coordinator loads an :class:`~actors.acl_view.AclView`
from the controller when the first request with a principal arrives (:class:`LazyAclView`),
kept fresh by its long poll from then on, so an ACL created or deleted applies to the next
request; the controller authorizes with the ACLs it owns. A request without a principal
never loads anything.

Every refusal is counted in ``rayqueue_authorization_denied_total`` by resource type
(:func:`authorize`): the gateway's under its request, a native call's with path ``actor``,
the actor's broker tag and the request's name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.acl import CLUSTER_NAME, AclOperation, ResourceType
from actors.acl_view import AclView
from actors.authorizer import StandardAuthorizer
from actors.metrics import PATH_ACTOR, Recorder, count_authorization_denied
from actors.protocol import principal_field
from storage.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

Op = AclOperation
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
# Kafka's error for a refused resource of each type.
DENIED: dict[ResourceType, type[KafkaError]] = {
    TOPIC: TopicAuthorizationFailedError,
    GROUP: GroupAuthorizationFailedError,
    CLUSTER: ClusterAuthorizationFailedError,
    TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
}
# The host a native principal asks from: Ray calls carry none, so only ``*`` ACLs match.
NO_HOST = ""


class ClientPrincipal(str):
    """A Kafka client's principal as a listener authenticated it (``User:alice``), with what
    Kafka's RequestContext adds: the client's address (``host``, for host-specific ACLs) and
    the version of the ACLs the gateway authorized the request with (``acls``: an actor with
    an older copy catches up first). It is a ``str``, so it goes wherever a principal goes."""

    host: str
    acls: tuple[int, int] | None

    def __new__(cls, principal: str, host: str = NO_HOST, acls: tuple[int, int] | None = None) -> ClientPrincipal:
        self = super().__new__(cls, principal)
        self.host = host if isinstance(host, str) else NO_HOST
        self.acls = acls
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (ClientPrincipal, (str(self), self.host, self.acls))


def host_of(principal: str) -> str:
    """The client address a principal asks from (NO_HOST for a native one)."""
    return principal.host if type(principal) is ClientPrincipal else NO_HOST


def _acls_version(principal: str) -> tuple[int, int] | None:
    version = principal.acls if type(principal) is ClientPrincipal else None
    if type(version) is not tuple or len(version) != 2 or not all(type(v) is int for v in version):
        return None
    return version


Served = tuple[Recorder, Mapping[str, str]]


def authorize(
    authorizer: StandardAuthorizer,
    principal: str,
    host: str,
    op: AclOperation,
    resource_type: ResourceType,
    name: str,
    served: Served | None = None,
    count: bool = True,
) -> bool:
    """Whether ``principal`` may do ``op`` to the resource; a refusal is counted (to
    ``served``, else to the gateway request being served) unless ``count`` is False (a
    filter leaving out what may not be seen is no refusal)."""
    ok = authorizer.authorize(principal, host, op, resource_type, name)
    if not ok and count:
        count_authorization_denied(resource_type.name, served)
    return ok


def denied(principal: str, op: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> KafkaError:
    """Kafka's error for ``principal`` refused ``op`` on these resources of one type."""
    listed = ", ".join(repr(n)[:200] for n in sorted(names))
    return DENIED[resource_type](f"{principal} may not {op.name} {resource_type.name} {listed}")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks, and for which request: for the actor calls whose argument is no request
    message (a request message is its own caller: its ``principal`` and its class's name)."""

    principal: str | None
    api: str


def _names(resource_type: ResourceType, names: Iterable[Any]) -> list[str]:
    """The names, each a string (a caller may put anything in a request)."""
    try:
        out = list(names)
    except TypeError:
        raise InvalidRequestError(f"{resource_type.name} names must be a list, not {names!r:.60}") from None
    for name in out:
        if not isinstance(name, str):
            raise InvalidRequestError(f"a {resource_type.name} name is a string, not {type(name).__name__}")
    return out


def _api(who: Any) -> str:
    return who.api if type(who) is Caller else type(who).__name__.removesuffix("Request")


def _configured(config: Mapping[str, Any]) -> bool:
    return StandardAuthorizer.from_config(config).enabled


class LazyAclView:
    """The cluster's ACLs, loaded from the controller by the first request that needs them
    and kept fresh from then on (an :class:`~actors.acl_view.AclView`).

    ``controller`` returns the controller's handle (it may raise: a replica told no role yet
    has none). ``config`` is the broker configuration when the actor has it (then no load
    at all happens without an authorizer); without it the settings come with the ACLs.
    """

    def __init__(self, controller: Callable[[], Any], config: Mapping[str, Any] | None = None) -> None:
        self._controller = controller
        self._config = config
        self._view: AclView | None = None
        self._loading: asyncio.Lock | None = None
        # Configured without an authorizer: everything is allowed, nothing is ever loaded.
        self._off = StandardAuthorizer(enabled=False) if config is not None and not _configured(config) else None

    async def __call__(self, at_least: tuple[int, int] | None = None) -> StandardAuthorizer:
        """The authorizer, loaded on the first call; at ACL version ``at_least`` or newer
        when given (the gateway's: a copy behind it catches up with one controller call)."""
        if self._off is not None:
            return self._off
        view = self._view
        if view is None:
            if self._loading is None:
                self._loading = asyncio.Lock()  # created in the actor's event loop
            async with self._loading:
                if self._view is None:
                    loaded = AclView(self._config, self._controller())
                    await loaded.start()
                    self._view = loaded
            view = self._view
        if at_least is not None and (view.version is None or view.version < at_least):
            await view.catch_up()
        return view.authorizer

    def close(self) -> None:
        """Stop keeping the ACLs fresh."""
        if self._view is not None:
            self._view.close()


class AuthHelper:
    """One actor's checks of native clients' principals (see the module docstring).

    ``authorizer`` returns the ACLs to check with (awaited: the first may load them; a
    listener's principal passes the version of the gateway's ACLs, which it must have);
    ``recorder`` (None: metrics off) and ``broker`` tag the refusals counted.
    Every check takes ``who``: a request message with a ``principal`` field, or a
    :class:`Caller`. A principal of None passes every check at once.
    """

    def __init__(
        self,
        authorizer: Callable[[], Awaitable[StandardAuthorizer]],
        recorder: Recorder | None = None,
        broker: str = "",
    ) -> None:
        self._authorizer = authorizer
        self._recorder = recorder
        self._broker = broker
        self._served: dict[str, Served] = {}

    def _served_for(self, who: Any) -> Served | None:
        if self._recorder is None:
            return None
        api = _api(who)
        served = self._served.get(api)
        if served is None:
            tags = {"broker": self._broker, "path": PATH_ACTOR, "request": api}
            served = self._served[api] = (self._recorder, tags)
        return served

    async def _enabled(self, who: Any) -> tuple[str, StandardAuthorizer] | None:
        """The principal and the authorizer when ``who`` is to be checked, else None."""
        principal = principal_field(getattr(who, "principal", None))
        if principal is None:
            return None
        version = _acls_version(principal)
        authorizer = await (self._authorizer() if version is None else self._authorizer(version))
        return (principal, authorizer) if authorizer.enabled else None

    async def authorized(
        self, who: Any, op: AclOperation, resource_type: ResourceType, name: str, count: bool = True
    ) -> bool:
        """Whether the caller may do ``op`` to the resource (a refusal is counted unless
        ``count`` is False)."""
        asking = await self._enabled(who)
        if asking is None:
            return True
        principal, authorizer = asking
        (name,) = _names(resource_type, [name])
        host = host_of(principal)
        return authorize(authorizer, principal, host, op, resource_type, name, self._served_for(who), count)

    async def check(self, who: Any, op: AclOperation, resource_type: ResourceType, name: str) -> None:
        """Raise Kafka's *AuthorizationFailedError for the resource type unless authorized."""
        if not await self.authorized(who, op, resource_type, name):
            raise denied(who.principal, op, resource_type, [name])

    async def check_cluster(self, who: Any, op: AclOperation) -> None:
        """ClusterAuthorizationFailedError unless the caller may do ``op`` to the cluster."""
        await self.check(who, op, CLUSTER, CLUSTER_NAME)

    async def refused(self, who: Any, op: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
        """The names among ``names`` the caller may not ``op`` (each refusal counted once)."""
        asking = await self._enabled(who)
        if asking is None:
            return set()
        principal, authorizer = asking
        served = self._served_for(who)
        unique = set(_names(resource_type, names))
        host = host_of(principal)
        return {n for n in unique if not authorize(authorizer, principal, host, op, resource_type, n, served)}

    async def check_all(self, who: Any, op: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> None:
        """Raise one error naming every resource the caller may not ``op`` (none: nothing)."""
        refused = await self.refused(who, op, resource_type, names)
        if refused:
            raise denied(who.principal, op, resource_type, refused)

    async def visible(self, who: Any, op: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> list[str]:
        """The names the caller may ``op``, in order; the others are left out silently (a
        listing of everything, as Metadata and ListGroups leave them out)."""
        asking = await self._enabled(who)
        if asking is None:
            return list(names)
        principal, authorizer = asking
        host = host_of(principal)
        return [n for n in _names(resource_type, names) if authorizer.authorize(principal, host, op, resource_type, n)]

    async def authorized_by_resource_type(self, who: Any, op: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the caller may do ``op`` to some resource of the type (Kafka's
        authorizeByResourceType); a refusal is counted."""
        asking = await self._enabled(who)
        if asking is None:
            return True
        principal, authorizer = asking
        ok = authorizer.authorize_by_resource_type(principal, host_of(principal), op, resource_type)
        if not ok:
            count_authorization_denied(resource_type.name, self._served_for(who))
        return ok


__all__ = [
    "CLUSTER",
    "DENIED",
    "GROUP",
    "NO_HOST",
    "TOPIC",
    "TRANSACTIONAL_ID",
    "AuthHelper",
    "Caller",
    "ClientPrincipal",
    "LazyAclView",
    "Op",
    "authorize",
    "denied",
    "host_of",
]
