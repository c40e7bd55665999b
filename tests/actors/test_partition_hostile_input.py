"""Bad input at a real replica in its host actor: Kafka-named errors, the log as it was, the
host alive (same process, never restarted), and the follower still an exact copy."""

from __future__ import annotations

import numpy as np
import pytest
import ray
from hypothesis import HealthCheck, given, settings

from actors.protocol import (
    DeleteRecordsRequest,
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceOrder,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from actors.protocol_broker import FetchMessagesRequest, FetchPartition, LeaderAndIsrPartitionState, PartitionRequests
from storage import AppendOrigin, RecordBatchBuilder, build_control_batch, decode_columns, iter_batches
from storage.errors import (
    InvalidFetchSizeError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from tests.helpers import close_replica, hosted_replica, kill_broker, set_role, wait_for
from tests.storage.hostile_batches import check_stored, is_kafka_named, requests

EPOCH = 0
P = 77  # a producer id
# No transaction coordinator runs beside these two replicas: nothing could confirm a
# transaction (KIP-890), so the leader takes transactional batches as they come.
FAST = {"replica.fetch.wait.max.ms": 50, "transaction.partition.verification.enable": False}


def batch(values: list[bytes], **kwargs: object) -> bytes:
    builder = RecordBatchBuilder(**kwargs)
    for v in values:
        builder.append(v, key=b"k", timestamp=1_700_000_000_000)
    return builder.build()


class Pair:
    """A leader and a follower replica, and what the leader must still serve."""

    def __init__(self, leader, follower) -> None:  # noqa: ANN001 - actor handles
        self.leader, self.follower = leader, follower
        self.pids = self.pids_now()
        self.stored = b""

    def pids_now(self) -> tuple[int, int]:
        return tuple(ray.get(handle.describe.remote())["pid"] for handle in (self.leader, self.follower))

    def end(self) -> int:
        return ray.get(self.leader.describe.remote())["log_end_offset"]

    def everything(self, replica=None) -> bytes:  # noqa: ANN001 - an actor handle
        """Every batch a consumer (or ``replica``'s own log) holds, a segment per read."""
        out, offset, end = [], 0, self.end()
        while offset < end:
            if replica is None:
                records = ray.get(self.leader.fetch.remote(FetchRequest(offset, 2**31 - 1, 0))).records
            else:
                records = ray.get(replica.read_local.remote(offset, 2**31 - 1))[0]
            out.append(records)
            offset = list(iter_batches(records))[-1].next_offset
        return b"".join(out)

    def check_intact(self) -> None:
        """Same processes, every accepted record served, and the follower has the same bytes."""
        assert self.pids_now() == self.pids
        assert self.everything() == self.stored
        end = self.end()
        wait_for(lambda: ray.get(self.follower.describe.remote())["log_end_offset"] == end, 30, what="replication")
        assert self.everything(self.follower) == self.stored


@pytest.fixture(scope="module")
def pair(ray_session, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-actors")
    # Each in a host actor of its own, never restarted: a crash would show as a dead actor.
    config = {"segment.bytes": 1 << 20}
    leader = hosted_replica(0, "h", 0, str(root / "b0"), config)
    follower = hosted_replica(1, "h", 0, str(root / "b1"), config)
    state = LeaderAndIsrPartitionState(0, EPOCH, (0, 1), (0, 1), leader_handle=leader)
    set_role(leader, state, FAST)
    set_role(follower, state, FAST)
    yield Pair(leader, follower)
    for handle in (leader, follower):
        close_replica(handle)
        kill_broker(handle)


def produce(pair: Pair, records: object, *args: object) -> int:
    result = ray.get(pair.leader.produce.remote(ProduceRequest(records, -1, 30000, EPOCH, *args)))
    pair.stored += ray.get(pair.leader.fetch.remote(FetchRequest(result.base_offset, 2**31 - 1, 0))).records
    return result.base_offset


def test_a_forged_marker_is_refused_from_any_produce_and_the_marker_path_still_works(pair):
    produce(pair, batch([b"t1", b"t2"], producer_id=P, producer_epoch=0, base_sequence=0, is_transactional=True))
    lso = ray.get(pair.leader.describe.remote())["last_stable_offset"]
    forged = build_control_batch(True, P, 0)
    for origin in (AppendOrigin.CLIENT, "client", AppendOrigin.COORDINATOR, "coordinator"):
        with pytest.raises(InvalidRecordError, match="control batch"):
            ray.get(pair.leader.produce.remote(ProduceRequest(forged, 1, 30000, EPOCH, origin)))
    with pytest.raises(InvalidRequestError):
        ray.get(pair.leader.produce.remote(ProduceRequest(batch([b"x"]), 1, 30000, EPOCH, AppendOrigin.REPLICATION)))
    assert ray.get(pair.leader.describe.remote())["last_stable_offset"] == lso  # the transaction is still open
    pair.check_intact()
    marker_offset = ray.get(
        pair.leader.write_txn_marker.remote(WriteTxnMarkersRequest(P, 0, 0, True, EPOCH))
    ).base_offset
    pair.stored += ray.get(pair.leader.fetch.remote(FetchRequest(marker_offset, 2**31 - 1, 0))).records
    wait_for(lambda: ray.get(pair.leader.describe.remote())["last_stable_offset"] == marker_offset + 1, 30)
    pair.check_intact()


REQUESTS = {
    "fetch": FetchRequest,
    "list_offsets": ListOffsetsRequest,
    "delete_records": DeleteRecordsRequest,
    "offset_for_leader_epoch": OffsetForLeaderEpochRequest,
    "produce": ProduceRequest,
    "write_txn_marker": WriteTxnMarkersRequest,
}
BAD_CALLS = [
    # (method, request fields, error)
    ("fetch", (-1, 1024, 0), OffsetOutOfRangeError),
    ("fetch", (2**62, 1024, 0), OffsetOutOfRangeError),
    ("fetch", (2**64, 1024, 0), InvalidRequestError),
    ("fetch", ("0", 1024, 0), InvalidRequestError),
    ("fetch", (0.5, 1024, 0), InvalidRequestError),
    ("fetch", (None, 1024, 0), InvalidRequestError),
    ("fetch", (True, 1024, 0), InvalidRequestError),
    ("fetch", (0, -1, 0), InvalidFetchSizeError),
    ("fetch", (0, 2**40, 0), InvalidFetchSizeError),
    ("fetch", (0, "1MB", 0), InvalidRequestError),
    ("fetch", (0, 1024, 2**40), InvalidRequestError),
    ("fetch", (0, 1024, "soon"), InvalidRequestError),
    ("fetch", (0, 1024, 0, 2**40), InvalidRequestError),
    ("fetch", (0, 1024, 0, 1, 2), InvalidRequestError),
    ("fetch", (0, 1024, 0, 1, "read_committed"), InvalidRequestError),
    ("fetch", (0, 1024, 0, 1, 0, "epoch"), InvalidRequestError),
    ("fetch", (0, 1024, 0, 1, 0, -1, 2**40), InvalidRequestError),
    ("list_offsets", (-4,), InvalidRequestError),
    ("list_offsets", (-(2**63),), InvalidRequestError),
    ("list_offsets", (2**63,), InvalidRequestError),
    ("list_offsets", ("latest",), InvalidRequestError),
    ("list_offsets", (None,), InvalidRequestError),
    ("list_offsets", (1.5,), InvalidRequestError),
    ("list_offsets", (-1, -1, 7), InvalidRequestError),
    ("list_offsets", (-1, 2**31), InvalidRequestError),
    ("delete_records", (-2,), OffsetOutOfRangeError),
    ("delete_records", ("all",), InvalidRequestError),
    ("offset_for_leader_epoch", ("0",), InvalidRequestError),
    ("produce", (batch([b"x"]), "all"), InvalidRequiredAcksError),
    ("produce", (batch([b"x"]), 1, -5), InvalidRequestError),
    ("produce", (batch([b"x"]), 1, "30s"), InvalidRequestError),
    ("produce", (batch([b"x"]), 1, 30000, EPOCH, "nobody"), InvalidRequestError),
    ("produce", (batch([b"x"]), 1, 30000, EPOCH, "client", ProduceOrder("s", "one", 0)), InvalidRequestError),
    ("produce", (batch([b"x"]), 1, 30000, EPOCH, "client", ("s", 1, 0)), InvalidRequestError),
    ("produce", ("records", 1, 30000, EPOCH), InvalidRequestError),
    ("produce", (None, 1, 30000, EPOCH), InvalidRequestError),
    ("write_txn_marker", ("pid", 0, 0, True), InvalidRequestError),
    ("write_txn_marker", (P, 0, 0, 2), InvalidRequestError),
]


@pytest.mark.parametrize(("method", "fields", "error"), BAD_CALLS, ids=[f"{m}{a!r:.40}" for m, a, _ in BAD_CALLS])
def test_bad_requests_get_a_clear_kafka_error_and_no_crash(pair, method, fields, error):
    if not pair.stored:
        produce(pair, batch([b"a", b"b"]))
    with pytest.raises(error) as refused:
        ray.get(getattr(pair.leader, method).remote(REQUESTS[method](*fields)), timeout=60)
    assert is_kafka_named(refused.value)
    pair.check_intact()


@pytest.mark.parametrize("method", sorted(REQUESTS))
def test_anything_but_the_method_s_request_type_is_refused(pair, method):
    """A tuple of the request's fields, another method's request, None or a number:
    InvalidRequestError, and the actor lives on."""
    other = FetchRequest(0) if method != "fetch" else ListOffsetsRequest(-1)
    for wrong in ((0, 1024, 0), other, None, 0):
        with pytest.raises(InvalidRequestError):
            ray.get(getattr(pair.leader, method).remote(wrong), timeout=60)
    pair.check_intact()


def test_good_arguments_of_every_integer_kind_still_work(pair):
    if not pair.stored:
        produce(pair, batch([b"a", b"b"]))
    end = pair.end()
    fetched = ray.get(
        pair.leader.fetch.remote(FetchRequest(np.int64(0), np.int32(1 << 20), 0, np.int64(1), 0, np.int32(EPOCH)))
    )
    assert fetched.records and pair.stored.startswith(fetched.records)  # the first segment's batches
    assert ray.get(pair.leader.fetch.remote(FetchRequest(0, 0, 0))).records  # max_bytes 0: still one batch (KIP-74)
    assert (
        ray.get(pair.leader.fetch.remote(FetchRequest(end, 1024, -5))).records == b""
    )  # a negative wait answers at once
    assert ray.get(pair.leader.list_offsets.remote(ListOffsetsRequest(np.int64(-1)))).offset == end
    latest_ts = max(b.max_timestamp for b in iter_batches(pair.stored))  # markers count too
    found = ray.get(
        pair.leader.list_offsets.remote(ListOffsetsRequest(-3))
    )  # KIP-734: the record with the largest timestamp
    assert found.timestamp == latest_ts and 0 <= found.offset < end


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests())
def test_hostile_requests_through_ray(pair, request):
    """The storage property, end to end: each request is stored as Kafka would or refused
    with a Kafka-named error; the actor lives on and the follower copies exactly."""
    end = pair.end()
    try:
        result = ray.get(pair.leader.produce.remote(ProduceRequest(request, -1, 30000, EPOCH)))
    except KafkaError as error:
        assert is_kafka_named(error), repr(error)
        assert pair.end() == end
    else:
        stored = ray.get(pair.leader.fetch.remote(FetchRequest(result.base_offset, 2**31 - 1, 0))).records
        check_stored(request, stored, end, EPOCH)
        pair.stored += stored
    assert pair.pids_now() == pair.pids
    assert pair.everything() == pair.stored
    assert len(decode_columns(pair.stored)) == sum(not b.is_control for b in iter_batches(pair.stored) for _ in b)


def test_the_host_actor_refuses_calls_it_does_not_serve(pair):
    """What reaches a host actor other than its own calls: no dispatch by name (a method it
    does not have is no remote call at all), a Kafka error for a bad argument or a partition
    it does not host (NOT_LEADER_OR_FOLLOWER), each bad entry of a many-partition call
    answered in its place, the host alive."""
    host = pair.leader.host
    for name in ("call", "_manager", "replica_manager", "no_such_call"):
        with pytest.raises(AttributeError):
            getattr(host, name).remote()
    with pytest.raises(NotLeaderOrFollowerError):
        ray.get(host.partition_describe.remote("h", 99))
    with pytest.raises(InvalidRequestError):
        ray.get(host.partition_describe.remote(["not", "a topic"], 0))
    good = FetchPartition("h", 0, 0, 1 << 20, EPOCH)
    for asked in (
        FetchMessagesRequest((good,), 0, replica_id="1"),
        FetchMessagesRequest("junk", 0, replica_id=1),
        FetchMessagesRequest(None, 0, replica_id=1),
        FetchMessagesRequest((good,), "500", replica_id=1),
        FetchMessagesRequest((good,), 0, 1, -1, replica_id=1),
        FetchMessagesRequest((good,), 0, 1, 2**31, replica_id=1),
        FetchMessagesRequest((good,), 0, 1, "big", replica_id=1),
        FetchMessagesRequest((good,), 0, isolation_level=7),
        "not a request",
    ):
        with pytest.raises(InvalidRequestError):
            ray.get(host.fetch_messages.remote(asked))
    for replica_id in (-1, "1", 2**40):
        with pytest.raises(InvalidRequestError):
            ray.get(host.wake_replica_fetch.remote(replica_id))
    junk = (
        ("h",),
        "not a partition",
        FetchPartition("h", 0, 0, -5, EPOCH),
        FetchPartition("h", 99, 0, 1 << 20, EPOCH),
        FetchPartition(["h"], 0, 0),
    )
    answers = ray.get(host.fetch_messages.remote(FetchMessagesRequest((*junk, good), 10_000, replica_id=1)))
    assert [type(a) for a in answers[:5]] == [
        InvalidRequestError,
        InvalidRequestError,
        InvalidFetchSizeError,
        NotLeaderOrFollowerError,
        InvalidRequestError,
    ]
    assert answers[5].records == pair.everything()[: len(answers[5].records)]  # the good entry is served
    with pytest.raises(InvalidRequestError):
        ray.get(host.write_txn_markers.remote("junk"))
    with pytest.raises(InvalidRequestError):
        ray.get(host.write_txn_markers.remote(PartitionRequests("junk")))
    entries = (("h",), ("h", 0, "not a request"), ("h", 99, WriteTxnMarkersRequest(P, 0, 0, 1)))
    answers = ray.get(host.write_txn_markers.remote(PartitionRequests(entries)))
    assert [type(a) for a in answers] == [InvalidRequestError, InvalidRequestError, NotLeaderOrFollowerError]
    assert pair.pids_now() == pair.pids


def test_after_the_storm_the_follower_is_an_exact_copy(pair):
    pair.check_intact()
