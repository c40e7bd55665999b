"""actors.protocol: requests checked field by field (Kafka's ranges, wire values taken as they
come), and every actor method that takes a request refuses anything else with a Kafka error."""

from __future__ import annotations

import json

import numpy as np
import pytest
import ray

from actors.protocol import (
    FetchRequest,
    GroupState,
    InitProducerIdRequest,
    IsolationLevel,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ProduceOrder,
    ProduceRequest,
    ProduceTurns,
    ReplicaRole,
    TransactionResult,
    TransactionState,
    WriteTxnMarkersRequest,
)
from actors.types import OffsetAndMetadata, TopicPartition
from rayqueue.errors import InvalidRequestError, InvalidRequiredAcksError
from storage import AppendOrigin


def test_produce_turns_number_each_partition_s_calls_after_the_oldest_unanswered():
    """The one numbering the producer's sender and the gateway's connections share."""
    turns = ProduceTurns("session")
    a, b = TopicPartition("t", 0), ("t", 1)  # any hashable partition key
    assert [turns.take(a), turns.take(a), turns.take(b)] == [
        ProduceOrder("session", 0, 0),
        ProduceOrder("session", 1, 0),
        ProduceOrder("session", 0, 0),
    ]
    turns.done(a, 0)  # the first answered: later calls no longer wait for it
    assert turns.take(a) == ProduceOrder("session", 2, 1)
    turns.done(a, 2)  # answered out of order: 1 is still the oldest
    assert turns.take(a) == ProduceOrder("session", 3, 1)
    turns.done(a, 1)
    turns.done(a, 3)
    assert turns.take(a) == ProduceOrder("session", 4, 4)  # numbers keep growing
    with pytest.raises(ValueError):
        turns.done(b, 5)  # never taken


def test_checked_requests_carry_plain_ints_and_enums():
    fetch = FetchRequest(np.int64(5), np.int32(1024), 0, 1, 1, np.int32(3)).checked()
    assert fetch == FetchRequest(5, 1024, 0, 1, IsolationLevel.READ_COMMITTED, 3)
    assert type(fetch.fetch_offset) is int and fetch.isolation_level is IsolationLevel.READ_COMMITTED
    produce = ProduceRequest(b"x", np.int8(-1), 100, origin="coordinator", order=ProduceOrder("s", 2, 1)).checked()
    assert (produce.acks, produce.origin, produce.order) == (-1, AppendOrigin.COORDINATOR, ProduceOrder("s", 2, 1))
    # The wire's boolean and the enum mean the same transaction result.
    assert WriteTxnMarkersRequest(7, 0, 0, True).checked().transaction_result is TransactionResult.COMMIT
    assert WriteTxnMarkersRequest(7, 0, 0, 0).checked().transaction_result is TransactionResult.ABORT
    assert ListOffsetsRequest(-3).checked() == ListOffsetsRequest(-3, -1, IsolationLevel.READ_UNCOMMITTED)


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (ProduceRequest(b"x", True), InvalidRequiredAcksError),
        (ProduceRequest(b"x", 1, origin=AppendOrigin.REPLICATION), InvalidRequestError),
        (ProduceRequest(b"x", order=("s", 1, 0)), InvalidRequestError),
        (ProduceRequest(b"x", order=ProduceOrder(7, 1, 0)), InvalidRequestError),
        (ProduceRequest(b"x", order=ProduceOrder("s", -1, 0)), InvalidRequestError),
        (FetchRequest(0, isolation_level=IsolationLevel.READ_COMMITTED + 1), InvalidRequestError),
        (WriteTxnMarkersRequest(7, 2**15, 0, True), InvalidRequestError),
        (WriteTxnMarkersRequest(-1, 0, 0, True), InvalidRequestError),
    ],
)
def test_bad_fields_are_kafka_errors(request_, error):
    with pytest.raises(error):
        request_.checked()


def test_enums_keep_kafka_s_wire_values_and_names():
    assert [int(level) for level in IsolationLevel] == [0, 1]
    assert ReplicaRole.LEADER == "leader"  # what describe() has always shown
    assert [int(r) for r in TransactionResult] == [0, 1]
    # Shown and stored (the coordinators' JSON records) as Kafka's names, read back as members.
    assert json.dumps([GroupState.PREPARING_REBALANCE, TransactionState.PREPARE_COMMIT]) == (
        '["PreparingRebalance", "PrepareCommit"]'
    )
    assert TransactionState(json.loads('"CompleteAbort"')) is TransactionState.COMPLETE_ABORT


def test_every_actor_refuses_what_is_not_its_request(cluster, new_topic):
    """The old positional call shape (a tuple), another method's request, or None: each
    InvalidRequestError from the actor, which goes on serving."""
    topic = new_topic()
    tp = TopicPartition(topic, 0)
    calls = [
        (cluster.controller, "get_metadata"),
        (cluster.controller, "create_topic"),
        (cluster.controller, "allocate_producer_ids"),
        (cluster.controller, "alter_configs"),
        (cluster.group_coordinator, "fetch_offsets"),
        (cluster.group_coordinator, "join_group"),
        (cluster.transaction_coordinator, "init_producer_id"),
        (cluster.transaction_coordinator, "add_partitions_to_txn"),
    ]
    for actor, method in calls:
        for wrong in ((topic, 1, 1), FetchRequest(0), None):
            with pytest.raises(InvalidRequestError):
                ray.get(getattr(actor, method).remote(wrong), timeout=60)
    # Bad offsets inside a well-typed commit are refused too, and nothing is stored.
    for offsets in ({tp: 5}, {(topic, 0): OffsetAndMetadata(5)}, {tp: OffsetAndMetadata(-1)}):
        with pytest.raises(InvalidRequestError):
            ray.get(cluster.group_coordinator.commit_offsets.remote(OffsetCommitRequest("g-bad", offsets)))
    assert ray.get(cluster.group_coordinator.fetch_offsets.remote(OffsetFetchRequest("g-bad"))) == {}
    assert topic in ray.get(cluster.controller.get_metadata.remote(MetadataRequest((topic,)))).topics
    assert ray.get(cluster.transaction_coordinator.init_producer_id.remote(InitProducerIdRequest())).epoch == 0
