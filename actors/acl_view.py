"""A copy of the cluster's ACLs kept fresh from the controller: what the gateways (and the
partition replicas, for native clients that carry a principal) authorize with.

``AclView`` holds a ``StandardAuthorizer`` with every ACL, loaded with one controller call
and then kept fresh by a long poll (``Controller.watch_acls``): an ACL created or deleted
reaches every copy within one controller round trip. The controller's epoch is part of the
version, so a restarted controller hands every copy a fresh one; while the controller is away
a copy keeps authorizing with what it has. A view made without the broker configuration
(a replica has only its topic's) takes the authorizer's settings from the snapshot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import ray

from actors.authorizer import StandardAuthorizer
from actors.protocol_security import AclsSnapshot
from storage.errors import RequestTimedOutError

logger = logging.getLogger(__name__)

WATCH_S = 10.0  # one long poll of the controller for ACL changes
RETRY_S = 0.5  # after a failed poll (the controller restarting)
FIRST_LOAD_S = 30.0  # how long a first load waits for the controller before giving up


async def watch_acls(controller: Any, known: tuple[int, int] | None, timeout_s: float) -> AclsSnapshot:
    """The controller's ACLs once they differ from version ``known`` (or after ``timeout_s``)."""
    return await controller.watch_acls.remote(known, timeout_s)


class AclView:
    """A copy of the ACLs (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any] | None, controller: Any) -> None:
        # Without a configuration the settings come with the first snapshot.
        self._configured = config is not None
        self.authorizer = StandardAuthorizer.from_config(config or {})
        self.controller = controller
        self.version: tuple[int, int] | None = None
        self._task: asyncio.Task | None = None

    @property
    def enabled(self) -> bool:
        """Whether an authorizer is configured."""
        return self.authorizer.enabled

    async def start(self) -> None:
        """Load the ACLs (a gateway: before it listens), then keep them fresh. Nothing to do
        when the configuration says there is no authorizer."""
        if self._configured and not self.enabled:
            return
        deadline = asyncio.get_running_loop().time() + FIRST_LOAD_S
        while self.version is None:
            try:
                self.apply(await watch_acls(self.controller, None, 0.0))
            except ray.exceptions.RayActorError:
                if asyncio.get_running_loop().time() > deadline:
                    raise RequestTimedOutError("the controller did not hand over the ACLs") from None
                await asyncio.sleep(RETRY_S)
        if self._task is None and self.enabled:
            self._task = asyncio.get_running_loop().create_task(self._keep_fresh())

    def apply(self, snapshot: AclsSnapshot) -> None:
        """Take the controller's ACLs when they are a version this copy does not have."""
        if not self._configured:
            enabled, super_users, allow_everyone = snapshot.settings
            auth = self.authorizer
            auth.enabled, auth.super_users, auth.allow_everyone_if_no_acl_found = (
                bool(enabled),
                frozenset(super_users),
                bool(allow_everyone),
            )
        if snapshot.version != self.version:
            self.authorizer.replace(snapshot.acls)
            self.version = snapshot.version
            logger.info("ACLs at version %s: %d ACLs", snapshot.version, len(self.authorizer))

    async def catch_up(self) -> None:
        """Take the controller's ACLs now (a caller saw a newer version than this copy's);
        while the controller is away the copy stays as it is."""
        try:
            self.apply(await watch_acls(self.controller, None, 0.0))
        except ray.exceptions.RayActorError:
            logger.debug("the controller is away; ACLs stay at version %s", self.version)

    async def _keep_fresh(self) -> None:
        while True:
            try:
                self.apply(await watch_acls(self.controller, self.version, WATCH_S))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the controller restarting: keep the copy, ask again
                logger.debug("watching the ACLs failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_S)

    def close(self) -> None:
        """Stop watching."""
        if self._task is not None:
            self._task.cancel()
            self._task = None


__all__ = ["AclView", "watch_acls"]
