"""The cluster's ACLs (Kafka's ``AclControlManager``): created and deleted through the
metadata log, so they survive controller restarts, and handed to the gateways, which
authorize with a copy (``actors.gateway.authorization``).

CreateAcls is idempotent per binding (an ACL that exists already is not written twice);
DeleteAcls removes every ACL each filter matches and answers, per filter, the ACLs it
matched. Each applied change moves ``version`` on, which is what gateways watch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.acl import AclBinding, AclBindingFilter
from actors.controller import records
from actors.controller.records import ControllerResult
from storage.errors import InvalidRequestError, KafkaError


class AclControlManager:
    """Every ACL by id, rebuilt by :meth:`replay`."""

    def __init__(self) -> None:
        self.acls: dict[str, AclBinding] = {}
        self.version = 0  # moves on with every applied ACL record

    def replay(self, record: dict[str, Any]) -> None:
        """Apply a checked ``acl`` or ``remove_acl`` record (ValueError for one whose fields
        make no valid ACL, KeyError for the removal of an unknown one: nothing changes)."""
        kind = record["type"]
        if kind == "acl":
            try:
                binding = AclBinding.from_record(record)
            except InvalidRequestError as exc:  # a ValueError to the replay, which skips it
                raise ValueError(f"ACL record {record['id']!r:.60} is no valid ACL: {exc}") from None
            self.acls[record["id"]] = binding
        elif kind == "remove_acl":
            if self.acls.pop(record["id"], None) is None:
                raise KeyError(f"removal of unknown ACL {record['id']!r:.60}")
        else:
            raise ValueError(f"not an ACL record: {kind!r:.40}")
        self.version += 1

    def create_acls(self, bindings: Iterable[AclBinding | KafkaError]) -> ControllerResult[list[KafkaError | None]]:
        """CreateAcls: one record per binding not there yet; per binding, None or the error
        it came with (a binding the gateway could not read, passed on as its error)."""
        existing = set(self.acls.values())
        out: list[KafkaError | None] = []
        new: list[dict[str, Any]] = []
        for binding in bindings:
            if isinstance(binding, KafkaError):
                out.append(binding)
                continue
            if binding not in existing:
                existing.add(binding)
                new.append(records.acl(self._new_id(), binding))
            out.append(None)
        return ControllerResult(new, out)

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> ControllerResult[list[list[AclBinding]]]:
        """DeleteAcls: per filter, the ACLs it matched (all removed; an ACL two filters
        match is removed once and listed under both)."""
        removed: set[str] = set()
        new: list[dict[str, Any]] = []
        out: list[list[AclBinding]] = []
        for selector in filters:
            matched = []
            for acl_id, binding in self.acls.items():
                if selector.matches(binding):
                    matched.append(binding)
                    if acl_id not in removed:
                        removed.add(acl_id)
                        new.append(records.remove_acl(acl_id))
            out.append(matched)
        return ControllerResult(new, out)

    def describe(self, selector: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls: the ACLs the filter matches."""
        return [b for b in self.acls.values() if selector.matches(b)]

    def _new_id(self) -> str:
        while True:
            acl_id = records.new_topic_id()  # a random Uuid, as Kafka gives each ACL
            if acl_id not in self.acls:
                return acl_id
