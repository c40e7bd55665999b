"""Producer id blocks (Kafka's ``ProducerIdControlManager``): handed out from the metadata
log, so a restarted controller never hands an id out twice."""

from __future__ import annotations

from typing import Any

from actors.controller import records
from actors.controller.records import ControllerResult
from actors.protocol import AllocateProducerIdsResponse
from storage.errors import InvalidRequestError

MAX_BLOCK = 1_000_000
LONG_MAX = 2**63 - 1


class ProducerIdControlManager:
    """The first producer id not yet handed out (Kafka's ProducerIdsRecord.nextProducerId)."""

    def __init__(self) -> None:
        self.next_producer_id = 0

    def replay(self, record: dict[str, Any]) -> None:
        """Apply a checked ``producer_ids`` record (never moves back)."""
        self.next_producer_id = max(self.next_producer_id, record["next_producer_id"])

    def generate(self, count: Any) -> ControllerResult[AllocateProducerIdsResponse]:
        """A block of ``count`` ids (1..1,000,000); INVALID_REQUEST otherwise or when the ids
        are exhausted."""
        if type(count) is not int or not 1 <= count <= MAX_BLOCK:
            raise InvalidRequestError(f"producer id block size {count!r:.40}; use 1..{MAX_BLOCK}")
        first = self.next_producer_id
        if first + count > LONG_MAX:
            raise InvalidRequestError("producer ids are exhausted")
        return ControllerResult([records.producer_ids(first + count)], AllocateProducerIdsResponse(first, count))
