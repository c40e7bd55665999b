"""Consumer groups of Kafka clients through the gateway, on rayqueue's group coordinator.

Members run in processes of their own (``group_member``) so that one can be killed with
SIGKILL. Each group reads a 6-partition topic: every partition is assigned to exactly one
member, every record is read once, and the partitions of a member that leaves or is killed
go to the others within the session timeout plus one second. Offsets committed by Kafka
clients are the group's offsets for rayqueue's own consumer and ``Admin.group_lag`` (what
``rayqueue groups describe`` prints), and the other way round. Hostile requests (unknown
member, wrong generation, fenced static member) get Kafka's error codes.
"""

from __future__ import annotations

import datetime
import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kio.static.primitive import i32Timedelta

from actors.types import TopicPartition
from tests.gateway.wire import Wire, build_request, parse_bootstrap
from tests.helpers import consume_all, wait_for

PARTITIONS = 6
PER_PARTITION = 10
SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms
ROOT = Path(__file__).parents[2]
_ids = itertools.count()


class Member:
    """One group member process and what it reported."""

    def __init__(self, lib: str, bootstrap: str, group: str, topic: str, assignor: str = "") -> None:
        self.lib = lib
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.gateway.group_member",
                lib,
                bootstrap,
                group,
                topic,
                str(SESSION_MS),
                assignor,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.assignment: list[int] = []
        self.records: list[tuple[int, int]] = []
        self.exited = False
        self.errors: list[str] = []
        self.revoked: list[list[int]] = []  # what each call of its rebalance listener revoked
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("A "):
                self.assignment = [int(p) for p in line[2:].split(",") if p]
            elif line.startswith("R "):
                _, p, o = line.split()
                self.records.append((int(p), int(o)))
            elif line.startswith("V"):
                self.revoked.append([int(p) for p in line[2:].split(",") if p])
            elif line.startswith("E "):
                self.errors.append(line[2:])
            elif line == "X":
                self.exited = True

    def stderr(self) -> str:
        """What the member wrote on stderr (read once it exited)."""
        if self.proc.poll() is None:
            self.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read()[-3000:]

    def leave(self) -> None:
        """Close stdin: the member leaves the group and exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture
def members():
    started: list[Member] = []
    yield started
    for m in started:
        m.stop()


@pytest.fixture
def topic(cluster):
    name = f"groups-{next(_ids)}-{os.getpid()}"
    cluster.admin().create_topic(name, PARTITIONS, 1)
    yield name
    cluster.admin().delete_topic(name)


def produce(cluster, topic: str, per_partition: int, start: int = 0) -> None:
    producer = cluster.producer()
    try:
        for p in range(PARTITIONS):
            for i in range(start, start + per_partition):
                producer.send(topic, f"{p}-{i}".encode(), partition=p)
        producer.flush()
    finally:
        producer.close()


def assigned_once(live: list[Member]) -> bool:
    owned = [p for m in live for p in m.assignment]
    return sorted(owned) == list(range(PARTITIONS))


def read_everything(live: list[Member], total: int) -> bool:
    return len({r for m in live for r in m.records}) >= total


def run_group(cluster, bootstrap, topic, members, libs: list[str], assignor: str = "") -> str:
    group = f"g-{topic}"
    produce(cluster, topic, PER_PARTITION)
    for lib in libs:
        members.append(Member(lib, bootstrap, group, topic, assignor))
    wait_for(lambda: assigned_once(members), timeout=60, what="every partition assigned to exactly one member")
    total = PARTITIONS * PER_PARTITION
    try:
        wait_for(lambda: read_everything(members, total), timeout=60, what="every record read")
    except AssertionError:
        for m in members:
            print(m.lib, m.assignment, sorted({p for p, _ in m.records}), len(m.records), m.proc.poll(), m.stderr())
        raise
    everything = [r for m in members for r in m.records]
    assert len(everything) == len(set(everything)) == total, "a record was read twice"
    return group


def handover(cluster, topic: str, members: list[Member], gone: Member, how: str) -> None:
    """``gone`` leaves or is killed: the others own every partition within the session
    timeout plus one second, and read what is produced next, once."""
    before = {r for m in members for r in m.records}
    getattr(gone, how)()
    started = time.monotonic()
    live = [m for m in members if m is not gone]
    wait_for(lambda: assigned_once(live), timeout=SESSION_MS / 1000 + 1, interval=0.02, what=f"handover after {how}")
    took = time.monotonic() - started
    produce(cluster, topic, 2, start=PER_PARTITION)
    wait_for(
        lambda: len({r for m in live for r in m.records} - before) >= 2 * PARTITIONS,
        timeout=60,
        what="new records read",
    )
    new = [r for m in live for r in m.records if r not in before]
    assert len(new) == len(set(new)) == 2 * PARTITIONS
    print(f"handover after {how}: {took:.2f}s")


@pytest.mark.parametrize("lib", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_a_group_of_three_members_of_one_library(cluster, bootstrap, topic, members, lib):
    run_group(cluster, bootstrap, topic, members, [lib] * 3)
    handover(cluster, topic, members, members[0], "leave")


def test_a_group_of_mixed_libraries_hands_over_a_killed_member(cluster, bootstrap, topic, members):
    group = run_group(cluster, bootstrap, topic, members, ["confluent-kafka", "kafka-python", "aiokafka"])
    handover(cluster, topic, members, members[1], "kill")
    # Settled: a member may still rejoin once after the handover (a follow-up rebalance, as a
    # cooperative member makes after giving partitions up), so the state is waited for.
    admin = cluster.admin()

    def settled():
        d = admin.describe_groups([group])[group]
        return d if d.state == "Stable" and len(d.members) == 2 else None

    desc = wait_for(settled, timeout=30, what="the group stable with two members")
    assert sorted(tp.partition for m in desc.members for tp in m.assignment) == list(range(PARTITIONS))


def test_offsets_committed_by_kafka_clients_are_the_native_groups_and_back(cluster, bootstrap, topic, members):
    group = run_group(cluster, bootstrap, topic, members, ["confluent-kafka"])
    total = PARTITIONS * PER_PARTITION
    wait_for(
        lambda: all(info.lag == 0 for info in cluster.admin().group_lag(group).values()),
        timeout=30,
        what="the Kafka client's commits show as zero lag",
    )
    members[0].leave()
    lag = cluster.admin().group_lag(group)
    assert {tp.partition: info.committed for tp, info in lag.items()} == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    # A native consumer of the same group resumes there, reads what came since, commits.
    produce(cluster, topic, 3, start=PER_PARTITION)
    native = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        native.subscribe([topic])
        got = consume_all(native, 3 * PARTITIONS)
        assert sorted((r.partition, r.offset) for r in got) == [
            (p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION, PER_PARTITION + 3)
        ]
        native.commit()
    finally:
        native.close()
    # ... and a Kafka client after it resumes from the native commits.
    produce(cluster, topic, 1, start=PER_PARTITION + 3)
    again = Member("kafka-python", bootstrap, group, topic)
    members.append(again)
    wait_for(lambda: len(again.records) >= PARTITIONS, timeout=60, what="the Kafka client read the newest records")
    assert sorted(again.records) == [(p, PER_PARTITION + 3) for p in range(PARTITIONS)]
    assert total == PARTITIONS * PER_PARTITION


def test_committed_offsets_survive_a_restart_of_the_group_coordinator(cluster, bootstrap, topic, members):
    import ray

    from actors.names import GROUP_COORDINATOR_NAME

    group = run_group(cluster, bootstrap, topic, members, ["aiokafka"])
    wait_for(lambda: all(i.lag == 0 for i in cluster.admin().group_lag(group).values()), timeout=30, what="commits")
    members[0].leave()
    coordinator = ray.get_actor(GROUP_COORDINATOR_NAME, namespace=cluster.namespace)
    ray.kill(coordinator, no_restart=False)
    lag = wait_for(lambda: _lag_or_none(cluster, group), timeout=60, what="the restarted coordinator answers")
    assert {tp.partition: i.committed for tp, i in lag.items()} == dict.fromkeys(range(PARTITIONS), PER_PARTITION)


def _lag_or_none(cluster, group):
    try:
        return cluster.admin().group_lag(group)
    except Exception:  # noqa: BLE001 - the coordinator is still restarting
        return None


# -- the wire, hostile -----------------------------------------------------------------------

_MS = i32Timedelta.parse(datetime.timedelta(milliseconds=SESSION_MS))
JOIN, SYNC, HEARTBEAT, LEAVE, FIND = 11, 14, 12, 13, 10
MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID = 79, 25, 22, 82


def _join(wire: Wire, group: str, member_id: str = "", instance: str | None = None, version: int = 5):
    return wire.call(
        build_request(
            JOIN,
            version,
            group_id=group,
            session_timeout=_MS,
            rebalance_timeout=_MS,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}],
        )
    )


def _found(wire, request, ok) -> object:
    """The answer to a FindCoordinator once it is not COORDINATOR_NOT_AVAILABLE (the lookup
    that creates an internal topic gets that until the topic exists; clients retry)."""
    answers = []

    def attempt() -> bool:
        answers.append(wire.call(request))
        return ok(answers[-1])

    wait_for(attempt, timeout=120, interval=0.2, what="a coordinator")
    return answers[-1]


def test_find_coordinator_names_a_gateway_single_and_batched(cluster, bootstrap):
    addresses = {(b.host, b.port) for b in cluster.metadata([]).brokers if b.port > 0}
    with Wire(parse_bootstrap(bootstrap)) as wire:
        one = _found(wire, build_request(FIND, 2, key="some-group", key_type=0), lambda a: a.error_code != 15)
        assert one.error_code == 0 and (one.host, one.port) in addresses
        many = _found(
            wire,
            build_request(FIND, 4, key_type=1, coordinator_keys=["txn-a", "txn-b"]),
            lambda a: all(c.error_code != 15 for c in a.coordinators),
        )
        assert [c.key for c in many.coordinators] == ["txn-a", "txn-b"]
        assert all(c.error_code == 0 and (c.host, c.port) in addresses for c in many.coordinators)
        bad = wire.call(build_request(FIND, 4, key_type=7, coordinator_keys=["x"]))
        assert bad.coordinators[0].error_code == 42  # INVALID_REQUEST


def test_hostile_group_requests_get_kafkas_error_codes(cluster, bootstrap):
    group = f"hostile-{next(_ids)}"
    with Wire(parse_bootstrap(bootstrap)) as wire:
        first = _join(wire, group)
        assert first.error_code == MEMBER_ID_REQUIRED and first.member_id  # KIP-394
        joined = _join(wire, group, first.member_id)
        assert joined.error_code == 0 and joined.leader == first.member_id and len(joined.members) == 1
        gen = joined.generation_id
        unknown = wire.call(build_request(HEARTBEAT, 3, group_id=group, generation_id=gen, member_id="nobody"))
        assert unknown.error_code == UNKNOWN_MEMBER_ID
        sync = wire.call(
            build_request(
                SYNC,
                3,
                group_id=group,
                generation_id=gen + 5,
                member_id=first.member_id,
                assignments=[],
            )
        )
        assert sync.error_code == ILLEGAL_GENERATION
        ok = wire.call(
            build_request(
                SYNC,
                3,
                group_id=group,
                generation_id=gen,
                member_id=first.member_id,
                assignments=[{"member_id": first.member_id, "assignment": b"opaque"}],
            )
        )
        assert ok.error_code == 0 and ok.assignment == b"opaque"
        beat = wire.call(build_request(HEARTBEAT, 3, group_id=group, generation_id=gen, member_id=first.member_id))
        assert beat.error_code == 0
        stale = wire.call(build_request(HEARTBEAT, 3, group_id=group, generation_id=gen - 1, member_id=first.member_id))
        assert stale.error_code == ILLEGAL_GENERATION
        # A static member: a second instance with the same id fences the first.
        s1 = _join(wire, f"{group}-static", instance="inst-1")
        assert s1.error_code == 0
        s2 = _join(wire, f"{group}-static", instance="inst-1")
        assert s2.error_code == 0 and s2.member_id != s1.member_id
        fenced = wire.call(
            build_request(
                HEARTBEAT,
                3,
                group_id=f"{group}-static",
                generation_id=s2.generation_id,
                member_id=s1.member_id,
                group_instance_id="inst-1",
            )
        )
        assert fenced.error_code == FENCED_INSTANCE_ID
        left = wire.call(build_request(LEAVE, 3, group_id=group, members=[{"member_id": first.member_id}]))
        assert left.error_code == 0 and left.members[0].error_code == 0
        again = wire.call(build_request(LEAVE, 3, group_id=group, members=[{"member_id": first.member_id}]))
        assert again.members[0].error_code == UNKNOWN_MEMBER_ID


def test_a_native_member_cannot_join_a_group_of_kafka_clients(cluster, bootstrap, topic, members):
    group = run_group(cluster, bootstrap, topic, members, ["confluent-kafka"])
    native = cluster.consumer(group_id=group, enable_auto_commit=False)
    try:
        native.subscribe([topic])
        with pytest.raises(Exception, match="INCONSISTENT_GROUP_PROTOCOL"):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                native.poll(200)
    finally:
        native.close()
    assert members[0].assignment == list(range(PARTITIONS))
    assert not [tp for tp in cluster.admin().group_lag(group) if not isinstance(tp, TopicPartition)]


def test_describe_groups_names_each_members_client_host(cluster, bootstrap, admin):
    """Kafka's coordinator records where a member connects from ("/<address>"); DescribeGroups
    and kafka-consumer-groups --describe show it in HOST (it was empty)."""
    group = f"host-{next(_ids)}"
    with Wire(parse_bootstrap(bootstrap)) as wire:
        first = _join(wire, group)
        joined = _join(wire, group, first.member_id)
        assert joined.error_code == 0
        host = "/" + wire.sock.getsockname()[0]
        described = wire.call(build_request(15, 5, groups=[group], include_authorized_operations=False))
        (g,) = described.groups
        assert [(m.member_id, m.client_host) for m in g.members] == [(first.member_id, host)]
        (native,) = admin.describe_groups([group]).values()
        assert [m.client_host for m in native.members] == [host]
        wire.call(build_request(LEAVE, 2, group_id=group, member_id=first.member_id))
