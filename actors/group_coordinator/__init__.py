"""The group coordinator: consumer group membership, assignment and committed offsets.

Split as Kafka splits it: :mod:`.classic_group` (one group and its members, Kafka's
``ClassicGroup``), :mod:`.group_metadata_manager` (membership: join, sync, heartbeat, leave,
rebalances, timeouts), :mod:`.offset_metadata_manager` (commits, fetches, expiry,
transactional offsets, lag), :mod:`.shard` (all of them, both protocols' calls routed to the
group of that id, and the replay of ``__consumer_offsets``), :mod:`.records` (that topic's
record format) and :mod:`.results` (what the state machines hand back).

KIP-848's consumer groups: :mod:`.consumer_group` (one group and its members, Kafka's
``ConsumerGroup``), :mod:`.consumer_group_manager` (ConsumerGroupHeartbeat: epochs, target
assignment, reconciliation, timeouts, topic changes), :mod:`.consumer_group_classic`
(classic members in consumer groups; upgrade and downgrade), :mod:`.consumer_group_views`
(describing, offset checks), :mod:`.current_assignment` (Kafka's CurrentAssignmentBuilder),
:mod:`.server_assignors` (``uniform``, ``range``), :mod:`.consumer_records` (Kafka's record
types), :mod:`.consumer_protocol` (the embedded assignment and subscription),
:mod:`.metadata_image` (the topics) and :mod:`.consumer_config` (the broker keys).

These are plain classes on an injected clock, without Ray; :mod:`.actor` is the Ray actor
shell, ``GroupCoordinator``.

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
