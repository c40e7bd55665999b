"""The group coordinator: consumer group membership, assignment and committed offsets.

Split as Kafka splits it: :mod:`.classic_group` (one group and its members, Kafka's
``ClassicGroup``), :mod:`.group_metadata_manager` (membership: join, sync, heartbeat, leave,
rebalances, timeouts), :mod:`.offset_metadata_manager` (commits, fetches, expiry,
transactional offsets, lag), :mod:`.shard` (both, and the replay of ``__consumer_offsets``),
:mod:`.records` (that topic's record format) and :mod:`.results` (what the state machines
hand back). These are plain classes on an injected clock, without Ray; :mod:`.actor` is the
Ray actor shell, ``GroupCoordinator``.

The actor is imported on first use of the name, so that importing the state machines (or
the record format) never loads Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors.group_coordinator.classic_group import PROTOCOL_TYPE
from actors.group_coordinator.records import (
    decode_key,
    decode_offset,
    encode_offset,
    group_key,
    offset_key,
)

if TYPE_CHECKING:
    from actors.group_coordinator.actor import GroupCoordinator


def __getattr__(name: str) -> Any:
    if name == "GroupCoordinator":
        from actors.group_coordinator.actor import GroupCoordinator

        return GroupCoordinator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PROTOCOL_TYPE",
    "GroupCoordinator",
    "decode_key",
    "decode_offset",
    "encode_offset",
    "group_key",
    "offset_key",
]
