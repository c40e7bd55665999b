"""rayqueue.snapshot (one view of the cluster, rates between two views) and the frame that
``rayqueue status --watch`` draws from it, on the session cluster."""

from __future__ import annotations

import io
import itertools
import os

import pytest
from rich.console import Console
from typer.testing import CliRunner

from rayqueue import TopicPartition
from rayqueue.cli import app, status_view
from rayqueue.snapshot import RateSampler, rates, take_snapshot
from tests.helpers import consume_all, wait_for

_ids = itertools.count()


@pytest.fixture
def topic(admin):
    """``topic(partitions, rf, assignment=None) -> name``; deleted after the test."""
    names: list[str] = []

    def make(partitions: int = 1, rf: int = 1, assignment: list[list[int]] | None = None) -> str:
        name = f"snap-{os.getpid()}-{next(_ids)}"
        if assignment is not None:
            admin.create_topic(name, replica_assignment=assignment)
        else:
            admin.create_topic(name, partitions, rf)
        names.append(name)
        return name

    yield make
    for name in names:
        admin.delete_topic(name)


def _render(view) -> Console:
    console = Console(file=io.StringIO(), width=220, force_terminal=True, color_system="standard", record=True)
    console.print(view)
    return console


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")[1:-1]] if line.startswith("│") else []


def _red_cells(view) -> set[str]:
    """Texts drawn in red (rich segments whose style's colour is red)."""
    console = Console(file=io.StringIO(), width=220, force_terminal=True, color_system="standard")
    return {
        seg.text.strip()
        for seg in console.render(view)
        if seg.style is not None and seg.style.color is not None and seg.style.color.name == "red" and seg.text.strip()
    }


def test_snapshot_offsets_groups_and_rates_between_two_views(cluster, admin, topic):
    name = topic(partitions=2)
    producer = cluster.producer()
    producer.send_many(name, [b"x" * 10] * 7, partition=0).get()
    producer.send_many(name, [b"y"] * 3, partition=1).get()

    before = take_snapshot(cluster)
    t = before.topics[name]
    assert [p.high_watermark for p in t.partitions] == [7, 3]
    assert [p.log_start_offset for p in t.partitions] == [0, 0]
    assert [p.last_stable_offset for p in t.partitions] == [7, 3]
    assert all(p.size_bytes > 0 and p.segments == 1 for p in t.partitions)
    assert t.messages == 10 and t.high_watermark_sum == 10
    meta = cluster.metadata([name]).topics[name]
    assert [p.leader for p in t.partitions] == [p.leader for p in meta.partitions]
    # Every broker's leader count is what the controller says.
    all_meta = cluster.metadata()
    for b in before.brokers:
        leads = sum(p.leader == b.broker_id for tm in all_meta.topics.values() for p in tm.partitions)
        hosts = sum(b.broker_id in p.replicas for tm in all_meta.topics.values() for p in tm.partitions)
        assert (b.leaders, b.partitions) == (leads, hosts)

    # A group that reads partition 0 and commits 5 of its 7 records.
    group = f"snap-group-{os.getpid()}-{next(_ids)}"
    consumer = cluster.consumer(group_id=group, enable_auto_commit=False)
    tp0 = TopicPartition(name, 0)
    consumer.assign([tp0])
    consumer.commit({tp0: 2})
    mid = take_snapshot(cluster)
    g = mid.groups[group]
    assert [(o.partition, o.committed, o.log_end_offset, o.lag) for o in g.offsets] == [(0, 2, 7, 5)]
    assert g.lag == 5 and g.state == "Empty"

    producer.send_many(name, [b"z"] * 11, partition=1).get()
    consumer.commit({tp0: 6})
    after = take_snapshot(cluster)
    consumer.close()
    producer.close()
    elapsed = after.monotonic - mid.monotonic
    r = rates(mid, after)[name]
    assert r.messages_in * elapsed == pytest.approx(11)
    assert r.messages_out * elapsed == pytest.approx(4)  # the committed offset moved 2 -> 6
    assert after.groups[group].lag == 1
    # The sampler: zeros on the first sample, then the rates since the previous one.
    sampler = RateSampler()
    assert sampler.sample(mid)[name].messages_in == 0
    assert sampler.sample(after)[name].messages_in == pytest.approx(r.messages_in)
    # to_dict is JSON-ready and carries the derived totals.
    data = after.to_dict()
    assert data["topics"][name]["messages"] == 21 and data["groups"][group]["lag"] == 1
    admin.delete_groups([group])


def test_status_frame_shows_brokers_rates_groups_and_unhealthy_partitions_in_red(cluster, admin, topic):
    brokers = sorted(b.broker_id for b in cluster.metadata([]).brokers)
    down = brokers[-1]
    replicated = topic(assignment=[[brokers[0], brokers[1], down]])
    single = topic(assignment=[[down]])
    producer = cluster.producer()
    producer.send_many(replicated, [b"a"] * 4, partition=0).get()
    producer.close()
    group = f"status-group-{os.getpid()}-{next(_ids)}"
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(replicated, 0)])
    consume_all(consumer, 4)
    consumer.commit({TopicPartition(replicated, 0): 1})
    consumer.close()

    sampler = RateSampler()
    first = take_snapshot(cluster)
    sampler.sample(first)
    healthy = take_snapshot(cluster)
    frame = _render(status_view(healthy, sampler.sample(healthy))).export_text()
    assert "Under-replicated partitions: 0" in frame
    rows = {cells[0]: cells for cells in map(_cells, frame.splitlines()) if cells}
    for b in healthy.brokers:
        assert rows[str(b.broker_id)] == [
            str(b.broker_id),
            f"{b.node_address} ({b.node_id[:12]})",
            "yes",
            str(b.partitions),
            str(b.leaders),
        ]
    assert rows[replicated] == [replicated, "1", "4", "0.0", "0.0"]  # partitions, high watermarks, in/s, out/s
    assert rows[group] == [group, "Empty", "0", "3"]  # lag 4 - 1
    assert replicated not in _red_cells(status_view(healthy, {}))

    admin.stop_broker(down)
    try:
        broken = wait_for(
            lambda: (
                (s := take_snapshot(cluster)).topics[single].partitions[0].offline
                and s.topics[replicated].partitions[0].under_replicated
                and s
            ),
            60,
            what="the stopped broker's partitions to go offline / under-replicated",
        )
        view = status_view(broken, sampler.sample(broken))
        red = _red_cells(view)
        assert replicated in red and single in red
        assert "offline" in red and "under-replicated" in red
        text = _render(view).export_text()
        assert f"Offline partitions: {len(broken.offline)}" in text
        assert f"Under-replicated partitions: {len(broken.under_replicated)}" in text
        assert len(broken.offline) >= 1 and len(broken.under_replicated) >= 1
        alive = {b.broker_id: b.alive for b in broken.brokers}
        assert alive[down] is False
    finally:
        admin.start_broker(down)
        wait_for(
            lambda: not take_snapshot(cluster).topics[replicated].partitions[0].under_replicated,
            60,
            what="the restarted broker to rejoin the ISR",
        )
    admin.delete_groups([group])


def test_status_watch_command_refreshes_and_stops_after_count(cluster, topic):
    name = topic(partitions=3)
    result = CliRunner().invoke(app, ["status", "--watch", "--interval", "0.2", "--count", "2"])
    assert result.exit_code == 0, result.output
    assert "Brokers" in result.output and name in result.output
    assert "Under-replicated partitions:" in result.output
