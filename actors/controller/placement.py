"""Where a partition's replicas go: Kafka's default assignment, and the checks a replica
assignment given by the user passes (Kafka's ``ReplicaPlacer`` and its validation).

rayqueue's brokers carry no ``broker.rack``, so the placement is Kafka's rack-unaware one.
"""

from __future__ import annotations

import random
from typing import Any

from actors.topics import check_partitions_per_request
from storage.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    brokers: list[int],
    first_partition: int = 0,
    start: int | None = None,
    rng: random.Random | None = None,
) -> list[list[int]]:
    """Kafka's rack-unaware default assignment: leaders round-robin from a random start
    (``start``, or drawn from ``rng``), followers shifted so that the replicas of consecutive
    partitions spread out."""
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactorError(f"replication factor {replication_factor} > {n} available brokers")
    if start is None:
        start = (rng or random).randrange(n)
    shift = start
    out = []
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out.append(replicas)
    return out


def check_assignment(assignment: Any, known_brokers: set[int] | dict[int, Any]) -> None:
    """INVALID_REPLICA_ASSIGNMENT unless ``assignment`` is a non-empty list of non-empty
    replica lists of known, distinct broker ids, all of one replication factor."""
    if not isinstance(assignment, (list, tuple)) or not assignment:
        raise InvalidReplicaAssignmentError("a replica assignment is a non-empty list of replica lists")
    for replicas in assignment:
        if not isinstance(replicas, (list, tuple)) or not replicas:
            raise InvalidReplicaAssignmentError("every partition needs at least one replica")
        if any(type(b) is not int for b in replicas):
            raise InvalidReplicaAssignmentError(f"bad replica list {replicas!r}: broker ids are integers")
    sizes = {len(replicas) for replicas in assignment}
    if len(sizes) != 1:
        raise InvalidReplicaAssignmentError("all partitions must have the same replication factor")
    for replicas in assignment:
        if len(set(replicas)) != len(replicas) or any(b not in known_brokers for b in replicas):
            raise InvalidReplicaAssignmentError(f"bad replica list {list(replicas)}")


def manual_assignment(raw: Any, known_brokers: set[int] | dict[int, Any], live: list[int]) -> list[list[int]]:
    """A replica assignment given by the user, checked as Kafka's controller does: known
    brokers, no duplicates, one replication factor, and some live replica per partition."""
    check_assignment(raw, known_brokers)
    check_partitions_per_request(len(raw))
    assignment = [list(replicas) for replicas in raw]
    for p, replicas in enumerate(assignment):
        if not any(b in live for b in replicas):
            raise InvalidReplicaAssignmentError(f"every broker in the replica list {replicas} of partition {p} is down")
    return assignment
