"""The host class (ReplicaManager, Kafka's ReplicaManager) driven by hand, without Ray: two or
three brokers' hosts in one process on one manual clock, calling each other directly (their
links are the objects themselves). ISR expiry and rejoining on the broker-wide tick, fetches
with one wait for many partitions, transaction markers for many partitions, the answers' byte
budgets, one LeaderAndIsr for many partitions, checkpoints and retention on the tick, and the
placement hash. Every test runs with each replication transport: followers fetching over
Kafka's protocol from the leader host's inter-broker listener (a real TCP listener in this
process) and followers calling the leader host's ``fetch_messages`` directly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.broker.inter_broker import SETTINGS_KEY, TRANSPORTS, InterBrokerSettings
from actors.broker.placement import HostId, HostPlacement, Placement, fetcher_id
from actors.broker.replica_manager import ReplicaManager
from actors.broker.replica_ref import ReplicaRef
from actors.clock import ManualClock
from actors.names import broker_actor_name, host_actor_name, java_string_hash
from actors.protocol import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    FetchRequest,
    IsolationLevel,
    ListOffsetsRequest,
    ProduceRequest,
    TransactionResult,
    WriteTxnMarkersRequest,
)
from actors.protocol_broker import (
    FetchMessagesRequest,
    FetchPartition,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    OpenReplica,
    PartitionRequests,
    only_answer,
)
from storage import RecordBatchBuilder
from storage.checkpoint import read_offset
from storage.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    TopicAuthorizationFailedError,
)
from storage.log import LATEST_TIMESTAMP

LAG_MS = 10_000
# Transaction verification (KIP-890) asks a transaction coordinator, which these tests have not.
FAST = {
    "replica.lag.time.max.ms": LAG_MS,
    "replica.fetch.wait.max.ms": 50,
    "transaction.partition.verification.enable": False,
}


# The replication transport of the test running (the ``transport`` fixture sets it).
TRANSPORT = {"name": "kafka"}


@pytest.fixture(autouse=True, params=TRANSPORTS)
def transport(request):
    """Each test once per replication transport."""
    TRANSPORT["name"] = request.param
    yield request.param
    TRANSPORT["name"] = "kafka"


class _Controller:
    """Accepts every ISR change (Kafka's controller answering AlterPartition)."""

    def __init__(self) -> None:
        self.proposed: list[tuple[int, ...]] = []

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.proposed.append(request.new_isr)
        return AlterPartitionResponse(request.leader_epoch, request.partition_epoch + 1, request.new_isr)


async def _until(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.01)


def _batch(*values: bytes, producer: tuple[int, int, int] | None = None) -> bytes:
    builder = RecordBatchBuilder()
    if producer is not None:
        builder = RecordBatchBuilder(
            producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2], is_transactional=True
        )
    for value in values:
        builder.append(value)
    return builder.build()


class Cluster:
    """Hosts of brokers 0..n-1 in one process, each with a data dir under ``root``."""

    def __init__(self, root: Path, brokers: int, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self.controller = _Controller()
        self.root = root
        self.hosts = [ReplicaManager(b, metrics_enabled=False, clock=self.clock) for b in range(brokers)]

    async def open(self, topic: str, partition: int, brokers: list[int], config: dict | None = None) -> None:
        for b in brokers:
            spec = OpenReplica(topic, partition, str(self.root / f"b{b}"), config or {})
            assert await self.hosts[b].open_replicas([spec]) == [True]

    def ref(self, topic: str, partition: int, broker: int) -> ReplicaRef:
        return ReplicaRef(self.hosts[broker], topic, partition, broker)

    async def elect(self, partitions: list[tuple]) -> list[list]:
        """One LeaderAndIsr per host, each with every partition it holds: (topic, partition,
        leader, epoch, replicas[, isr]), the ISR all replicas unless given (a replica of a
        broker without a host here stands for a follower the leader hears from by hand)."""
        per_host: dict[int, list] = {}
        for topic, partition, leader, epoch, replicas, *isr in partitions:
            state = LeaderAndIsrPartitionState(
                leader,
                epoch,
                replicas,
                isr[0] if isr else replicas,
                0,
                leader_handle=self.ref(topic, partition, leader),
            )
            for b in replicas:
                if b < len(self.hosts):
                    per_host.setdefault(b, []).append((topic, partition, state))
        settings = {**FAST, SETTINGS_KEY: InterBrokerSettings(TRANSPORT["name"])}
        return [
            await self.hosts[b].leader_and_isr(LeaderAndIsrRequest(tuple(entries), self.controller, settings))
            for b, entries in sorted(per_host.items())
        ]

    def replica(self, topic: str, partition: int, broker: int):
        return self.hosts[broker]._replicas[(topic, partition)]

    async def close(self) -> None:
        for host in self.hosts:
            await host.shutdown()


def run(scenario: Callable) -> None:
    asyncio.run(scenario())


def test_a_follower_leaves_the_isr_on_the_hosts_tick_and_rejoins_once_caught_up(tmp_path) -> None:
    """Two hosts on one manual clock: a paused follower leaves the ISR only when the tick sees
    it lag past replica.lag.time.max.ms, and comes back once it caught up."""

    async def scenario() -> None:
        c = Cluster(tmp_path, 2)
        ticking = True

        async def tick() -> None:  # time passes for the follower's long polls while wanted
            while True:
                await asyncio.sleep(0.01)
                if ticking:
                    c.clock.advance(10)

        ticker = asyncio.ensure_future(tick())
        try:
            await c.open("t", 0, [0, 1])
            assert await c.elect([("t", 0, 0, 1, (0, 1))]) == [[0], [True]]
            leader, follower = c.replica("t", 0, 0), c.replica("t", 0, 1)
            answer = await c.hosts[0].partition_produce("t", 0, ProduceRequest(_batch(b"a", b"b", b"c"), -1, 30000))
            assert answer.last_offset == 2 and leader.high_watermark == 3
            await _until(lambda: follower.high_watermark == 3, "the follower learns the HW")
            with pytest.raises(FencedLeaderEpochError):
                await c.hosts[0].partition_fetch("t", 0, FetchRequest(0, 1000, 0, current_leader_epoch=0))

            await c.hosts[1].partition_pause_fetching("t", 0, True)
            # A round already out still reaches the leader: time stands still from its end on.
            fetchers = c.hosts[1]._fetchers._fetchers.values()
            await _until(lambda: not any(f._in_flight for f in fetchers), "the round in flight ends")
            ticking = False
            c.clock.advance(LAG_MS - 100)
            await c.hosts[0].tick()
            assert c.controller.proposed == []  # not yet past the lag time
            c.clock.advance(200)
            await c.hosts[0].tick()
            await _until(lambda: leader._state.isr == (0,), "the ISR shrinks")
            assert c.controller.proposed == [(0,)]
            # acks=all now needs only the leader: the HW moves without the paused follower.
            await c.hosts[0].partition_produce("t", 0, ProduceRequest(_batch(b"d"), -1, 30000))
            assert leader.high_watermark == 4

            ticking = True
            await c.hosts[1].partition_pause_fetching("t", 0, False)
            await _until(lambda: leader._state.isr == (0, 1), "the caught-up follower rejoins")
            assert c.controller.proposed == [(0,), (0, 1)]
            await _until(lambda: follower.high_watermark == 4, "the follower catches up")
        finally:
            ticker.cancel()
            await c.close()

    run(scenario)


def test_one_leader_and_isr_carries_every_partition_and_followers_fetch_per_leader_host(tmp_path, transport) -> None:
    """Three hosts: one LeaderAndIsr per host carries all of its partitions (leaders of some,
    followers of others); each host fetches what it follows from one leader host in one call
    per round; a partition the host does not hold is answered with its error in its place."""

    async def scenario() -> None:
        c = Cluster(tmp_path, 3)
        try:
            for p in range(4):
                await c.open("t", p, [0, 1, 2])
            answers = await c.elect([("t", p, p % 2, 1, (0, 1, 2)) for p in range(4)])
            assert answers == [[0, True, 0, True], [True, 0, True, 0], [True, True, True, True]]
            assert (await c.hosts[2].describe_host())["most_partitions_per_leader_and_isr"] == 4
            unknown = LeaderAndIsrPartitionState(0, 1, (0,), (0,), 0)
            (refused,) = await c.hosts[0].leader_and_isr(LeaderAndIsrRequest((("other", 0, unknown),), c.controller))
            assert isinstance(refused, NotLeaderOrFollowerError)

            produced = await c.hosts[0].append_records(
                PartitionRequests(
                    (("t", 0, ProduceRequest(_batch(b"p0"), -1)), ("t", 2, ProduceRequest(_batch(b"p2"), -1)))
                )
            )
            assert [r.base_offset for r in produced] == [0, 0]
            await _until(lambda: all(c.replica("t", p, 2).log_end_offset == 1 for p in (0, 2)), "broker 2 follows")
            fetchers = (await c.hosts[2].describe_host())["fetchers"]
            # One fetcher per leader host, each with that host's partitions.
            assert sorted((f["leader"], f["partitions"]) for f in fetchers) == [
                (0, [("t", 0), ("t", 2)]),
                (1, [("t", 1), ("t", 3)]),
            ]
            assert (await c.hosts[0].describe_host())["most_partitions_per_fetch"] == 2
            # Over Kafka's protocol: one connection per source host, the leaders' listeners serving.
            described = [await host.describe_host() for host in c.hosts]
            kafka = TRANSPORT["name"] == "kafka"
            assert described[2]["inter_broker_connects"] == (2 if kafka else 0)
            assert (described[0]["inter_broker_fetches_served"] > 0) is kafka
            # A produce to a follower, or to a partition not held, answers that one's error only.
            mixed = await c.hosts[1].append_records(
                PartitionRequests(
                    (
                        ("t", 1, ProduceRequest(_batch(b"p1"), 1)),
                        ("t", 0, ProduceRequest(_batch(b"x"), 1)),
                        ("nope", 0, ProduceRequest(_batch(b"x"), 1)),
                        ("bad", "0", ProduceRequest(_batch(b"x"), 1)),
                    )
                )
            )
            assert mixed[0].base_offset == 0
            assert [type(a) for a in mixed[1:]] == [NotLeaderOrFollowerError] * 2 + [InvalidRequestError]
            # Broker 1 takes over partition 0 at a new epoch; broker 0 follows it from there.
            await c.elect([("t", 0, 1, 2, (0, 1, 2))])
            await c.hosts[1].partition_produce("t", 0, ProduceRequest(_batch(b"after"), -1, 30000, 2))
            await _until(lambda: c.replica("t", 0, 0).log_end_offset == 2, "the old leader follows the new one")
        finally:
            await c.close()

    run(scenario)


def test_a_fetch_of_many_partitions_waits_once_and_an_append_to_any_of_them_answers_it(tmp_path) -> None:
    """fetchMessages: a consumer's fetch of three partitions with nothing to read waits (one
    wait), an append to one of them answers it with that partition's batch and the others
    empty; without appends it answers empty after max_wait; min_bytes over all partitions."""

    async def scenario() -> None:
        c = Cluster(tmp_path, 1)
        host = c.hosts[0]
        try:
            for p in range(3):
                await c.open("t", p, [0])
            await c.elect([("t", p, 0, 1, (0,)) for p in range(3)])
            request = FetchMessagesRequest(tuple(FetchPartition("t", p, 0) for p in range(3)), 10_000, 1)
            waiting = asyncio.ensure_future(host.fetch_messages(request))
            await _until(lambda: len(host._purgatory) == 1, "the fetch parks")
            assert not waiting.done()
            await host.partition_produce("t", 1, ProduceRequest(_batch(b"wake"), 1))
            answers = await asyncio.wait_for(waiting, 10)
            assert [len(a.records) > 0 for a in answers] == [False, True, False]
            assert [a.high_watermark for a in answers] == [0, 1, 0]

            again = await host.fetch_messages(FetchMessagesRequest(request.partitions, 50, 1))
            assert [a.records for a in again] == [b"", answers[1].records, b""]
            nothing = FetchMessagesRequest(tuple(FetchPartition("t", p, 0) for p in (0, 2)), 50, 1)
            assert [a.records for a in await host.fetch_messages(nothing)] == [b"", b""]
            # min_bytes over all partitions: one small batch is not enough, two are.
            fresh = tuple(FetchPartition("t", p, 1 if p == 1 else 0) for p in range(3))
            size = len(_batch(b"0123456789"))
            waiting = asyncio.ensure_future(host.fetch_messages(FetchMessagesRequest(fresh, 10_000, 2 * size - 1)))
            await _until(lambda: len(host._purgatory) == 1, "the fetch parks")
            await host.partition_produce("t", 0, ProduceRequest(_batch(b"0123456789"), 1))
            # Counted, one batch is fewer than min_bytes: it stays parked.
            await host.partition_produce("t", 2, ProduceRequest(_batch(b"0123456789"), 1))
            answers = await asyncio.wait_for(waiting, 10)
            assert sum(len(a.records) for a in answers) == 2 * size
            # A partition it does not hold and a fenced epoch answer at once, each in its place.
            bad = FetchMessagesRequest((FetchPartition("gone", 0, 0), FetchPartition("t", 0, 0, 1000, 0)), 10_000)
            gone, fenced = await asyncio.wait_for(host.fetch_messages(bad), 5)
            assert isinstance(gone, NotLeaderOrFollowerError) and isinstance(fenced, FencedLeaderEpochError)
        finally:
            await c.close()

    run(scenario)


def test_fetch_answers_keep_to_their_byte_budget(tmp_path) -> None:
    """Kafka's max_bytes: a consumer's answer has whole batches, the first one even past the
    budget (KIP-74), later partitions nothing past it (their offsets still); a follower's
    partition with data past replica.fetch.response.max.bytes is left out (None, first in its
    next round) while a caught-up one is read; the same partition twice is refused."""

    async def scenario() -> None:
        c = Cluster(tmp_path, 1)
        host = c.hosts[0]
        try:
            for topic in ("a", "b", "c"):
                await c.open(topic, 0, [0])
            await c.elect([(topic, 0, 0, 1, (0, 1), (0,)) for topic in ("a", "b", "c")])
            for topic in ("a", "b"):
                await host.partition_produce(topic, 0, ProduceRequest(_batch(b"x" * 100), 1, 30000))
            size = len(_batch(b"x" * 100))

            def parts(*topics: str) -> tuple[FetchPartition, ...]:
                return tuple(FetchPartition(t, 0, 0, 1 << 20, 1) for t in topics)

            consumer = await host.fetch_messages(FetchMessagesRequest(parts("a", "b", "c"), 0, 1, 1))
            assert [len(x.records) for x in consumer] == [size, 0, 0]
            assert consumer[1].log_end_offset == 1  # left empty, with its offsets
            consumer = await host.fetch_messages(FetchMessagesRequest(parts("a", "b"), 0, 1, 2 * size))
            assert [len(x.records) for x in consumer] == [size, size]

            a, b, cc = await host.fetch_messages(FetchMessagesRequest(parts("a", "b", "c"), 0, 1, 1, replica_id=1))
            assert a.records and b is None and cc.records == b"" and cc.log_end_offset == 0
            a, b, cc = await host.fetch_messages(
                FetchMessagesRequest(parts("b", "a", "c"), 0, 1, 1 << 20, replica_id=1)
            )
            assert a.records and b.records and cc.records == b""
            twice = await host.fetch_messages(FetchMessagesRequest(parts("a", "a"), 0, replica_id=1))
            assert isinstance(twice[1], InvalidRequestError)
            with pytest.raises(InvalidRequestError):
                await host.fetch_messages(FetchMessagesRequest(parts("a"), 0, 1, -5))
        finally:
            await c.close()

    run(scenario)


def test_transaction_markers_for_many_partitions_in_one_call(tmp_path) -> None:
    """WriteTxnMarkers: one call with the COMMIT markers of two partitions writes both (acks=all
    over each ISR), answers a partition the host does not lead with its error in its place, and
    moves each partition's last stable offset past the transaction."""

    async def scenario() -> None:
        c = Cluster(tmp_path, 2)
        try:
            for p in range(2):
                await c.open("t", p, [0, 1])
            await c.elect([("t", p, 0, 1, (0, 1)) for p in range(2)])
            host = c.hosts[0]
            for p in range(2):
                await host.partition_produce("t", p, ProduceRequest(_batch(b"txn", producer=(7, 0, 0)), -1, 30000))
            lso = ListOffsetsRequest(LATEST_TIMESTAMP, isolation_level=IsolationLevel.READ_COMMITTED)
            assert [(await host.partition_list_offsets("t", p, lso)).offset for p in range(2)] == [0, 0]
            marker = WriteTxnMarkersRequest(7, 0, 0, TransactionResult.COMMIT)
            answers = await host.write_txn_markers(
                PartitionRequests((("t", 0, marker), ("t", 1, marker), ("t", 9, marker)))
            )
            assert [a.base_offset for a in answers[:2]] == [1, 1]
            assert isinstance(answers[2], NotLeaderOrFollowerError)
            assert [(await host.partition_list_offsets("t", p, lso)).offset for p in range(2)] == [2, 2]
            assert (await host.describe_host())["most_markers_per_call"] == 3
            # The followers have the markers too (acks=all).
            assert [c.replica("t", p, 1).log_end_offset for p in range(2)] == [2, 2]
        finally:
            await c.close()

    run(scenario)


def test_the_tick_checkpoints_high_watermarks_and_applies_retention(tmp_path) -> None:
    """One tick for every replica: the high watermarks that moved are written together once
    replica.high.watermark.checkpoint.interval.ms passed; retention deletes old segments
    every log.retention.check.interval.ms."""

    async def scenario() -> None:
        c = Cluster(tmp_path, 1)
        host = c.hosts[0]
        config = {"segment.bytes": 200, "retention.bytes": 250}
        try:
            for p in range(2):
                await c.open("t", p, [0], config)
            request = LeaderAndIsrRequest(
                tuple(("t", p, LeaderAndIsrPartitionState(0, 1, (0,), (0,), 0, c.ref("t", p, 0))) for p in range(2)),
                c.controller,
                {"replica.high.watermark.checkpoint.interval.ms": 5000},
                retention_check_ms=60_000,
            )
            await host.leader_and_isr(request)
            for i in range(6):
                for p in range(2):
                    await host.partition_produce("t", p, ProduceRequest(_batch(b"v" * 60, str(i).encode()), 1))
            files = [tmp_path / "b0" / f"t-{p}" / "high-watermark-checkpoint" for p in range(2)]
            await host.tick()  # schedules every step
            c.clock.advance(4900)
            await host.tick()
            assert [read_offset(f) for f in files] == [None, None]
            c.clock.advance(200)
            await host.tick()
            assert [read_offset(f) for f in files] == [12, 12]
            starts = [c.replica("t", p, 0)._log.log_start_offset for p in range(2)]
            c.clock.advance(60_000)
            await host.tick()
            after = [c.replica("t", p, 0)._log.log_start_offset for p in range(2)]
            assert all(a > s for a, s in zip(after, starts, strict=True)), (starts, after)
        finally:
            await c.close()

    run(scenario)


def test_a_native_principal_is_checked_once_per_topic_against_the_hosts_one_acl_view(tmp_path) -> None:
    """The host's one ACL view: a fetch with a principal that may not READ the topic is
    refused for every partition of it (the ACLs loaded once, from the controller the
    LeaderAndIsr named)."""
    from actors.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
    from actors.protocol_security import AclsSnapshot

    class _AclController(_Controller):
        def __init__(self) -> None:
            super().__init__()
            self.loads = 0

        @property
        def watch_acls(self):  # the ACL view calls ``watch_acls.remote(...)`` as on an actor
            async def watch(known, timeout_s):
                self.loads += 1
                if known is not None:
                    await asyncio.sleep(timeout_s)
                allow = AclBinding.of(
                    ResourceType.TOPIC, "t", PatternType.LITERAL, "User:bob", "*",
                    AclOperation.READ, AclPermissionType.ALLOW,
                )  # fmt: skip
                return AclsSnapshot((1, 1), {"1": allow}, (True, (), False))

            return type("M", (), {"remote": staticmethod(watch)})

    async def scenario() -> None:
        c = Cluster(tmp_path, 1)
        c.controller = _AclController()
        host = c.hosts[0]
        try:
            for p in range(2):
                await c.open("t", p, [0])
            await c.elect([("t", p, 0, 1, (0,)) for p in range(2)])
            parts = tuple(FetchPartition("t", p, 0) for p in range(2))
            denied = await host.fetch_messages(FetchMessagesRequest(parts, 0, principal="User:alice"))
            assert [type(a) for a in denied] == [TopicAuthorizationFailedError] * 2
            allowed = await host.fetch_messages(FetchMessagesRequest(parts, 0, principal="User:bob"))
            assert [a.records for a in allowed] == [b"", b""]
            assert c.controller.loads >= 1
        finally:
            await c.close()

    run(scenario)


def test_placement_hashes_a_partition_as_kafka_spreads_it_over_its_fetchers() -> None:
    """Kafka's AbstractFetcherManager.getFetcherId: abs(31 * topic.hashCode() + partition) %
    num.replica.fetchers, in Java's int arithmetic; the host names follow the setting."""
    # "orders".hashCode() in Java is -1008770331.
    assert java_string_hash("orders") == -1008770331
    expected = ((31 * -1008770331 + 5) & 0xFFFFFFFF) & 0x7FFFFFFF
    assert fetcher_id("orders", 5, 3) == expected % 3
    counts = [0, 0, 0]
    for p in range(300):
        counts[fetcher_id("orders", p, 3)] += 1
    assert all(80 <= n <= 120 for n in counts), counts  # consecutive partitions spread evenly
    assert HostPlacement().host_for(2, "orders", 5) == HostId(2)
    hosts = HostPlacement(Placement.HOSTS, 3)
    assert hosts.host_for(2, "orders", 5) == HostId(2, str(expected % 3)) == hosts.host_for(2, "orders", 5)
    assert HostPlacement(Placement.REPLICA).host_for(2, "orders", 5) == HostId(2, "orders-5")
    assert HostId(2).name == broker_actor_name(2) == "broker|2"
    assert HostId(2, "1").name == host_actor_name(2, "1") == "broker|2|host|1"
    assert HostId(2, "orders-5").name == "broker|2|replica|orders-5"
    setting = HostPlacement.from_config({"rayqueue.broker.placement": "hosts", "rayqueue.broker.num.hosts": 4})
    assert setting == HostPlacement(Placement.HOSTS, 4)
    assert HostPlacement.from_config({"rayqueue.broker.num.hosts": 4}) == HostPlacement()


def test_hostile_many_partition_requests_get_errors_not_crashes(tmp_path) -> None:
    """Entries that are not (topic, partition, request), the wrong request type, a huge wait
    for a follower: each answered with its error, the host unharmed."""

    async def scenario() -> None:
        c = Cluster(tmp_path, 1)
        host = c.hosts[0]
        try:
            await c.open("t", 0, [0])
            await c.elect([("t", 0, 0, 1, (0, 1), (0,))])
            answers = await host.append_records(
                PartitionRequests(((1, 2), ("t", 0, "records"), ("t", -1, ProduceRequest(_batch(b"x"))), None))
            )
            assert all(isinstance(a, (InvalidRequestError, NotLeaderOrFollowerError)) for a in answers), answers
            with pytest.raises(InvalidRequestError):
                await host.append_records(PartitionRequests("not a list"))
            with pytest.raises(InvalidRequestError):
                await host.fetch_messages(FetchMessagesRequest((FetchPartition("t", 0, 0),), replica_id="x"))
            (junk,) = await host.fetch_messages(FetchMessagesRequest(("junk",), 0))
            assert isinstance(junk, InvalidRequestError)
            with pytest.raises(InvalidRequestError):
                host.wake_replica_fetch(-1)
            # A follower's wait is capped (replica.fetch.wait.max.ms bounds), and answered
            # early when its broker asks to be woken.
            follower = FetchMessagesRequest((FetchPartition("t", 0, 0, 1024, 1),), 2**31 - 1, replica_id=1)
            waiting = asyncio.ensure_future(host.fetch_messages(follower))
            await _until(lambda: len(host._waiters) == 1, "the follower's fetch waits")
            host.wake_replica_fetch(1)
            (answer,) = await asyncio.wait_for(waiting, 5)
            assert answer.records == b""
            assert only_answer([answer]) is answer
            # A wake that comes before the fetch it is meant for (Ray may run calls out of
            # order) answers that fetch at once, and only that one.
            host.wake_replica_fetch(1)
            (answer,) = await asyncio.wait_for(host.fetch_messages(follower), 5)
            waiting = asyncio.ensure_future(host.fetch_messages(follower))
            await _until(lambda: len(host._waiters) == 1, "the next fetch waits")
            assert not waiting.done()
            waiting.cancel()
        finally:
            await c.close()

    run(scenario)
