"""The controller: brokers, topics, replica placement, leaders, ISR, epochs, configs.

Split as Kafka splits its controller: :mod:`.cluster_control` (brokers, their listeners and
liveness), :mod:`.replication_control` (topics, partitions, elections, ISR changes,
reassignment), :mod:`.configuration_control` (topic configs), :mod:`.producer_id_control`
(producer id blocks), :mod:`.records` (the metadata records), :mod:`.topics` and
:mod:`.placement` (name rules, replica placement) and :mod:`.quorum_controller` (the managers
over the metadata log). These are plain classes without Ray; :mod:`.actor` is the Ray actor
shell, ``Controller``, imported on first use of the name so that the state modules load
without Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors.controller.placement import assign_replicas
from actors.controller.records import NO_LEADER, new_cluster_id, new_topic_id
from actors.topics import validate_topic_name

if TYPE_CHECKING:
    from actors.controller.actor import Controller


def __getattr__(name: str) -> Any:
    if name == "Controller":
        from actors.controller.actor import Controller

        return Controller
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["NO_LEADER", "Controller", "assign_replicas", "new_cluster_id", "new_topic_id", "validate_topic_name"]
