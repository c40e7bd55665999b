"""rayqueue.data: topics as Ray Datasets and Datasets into topics (no Spark)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
import ray

from actors.broker.replica_ref import ReplicaRef
from rayqueue import data
from rayqueue.errors import InvalidConfigError
from storage.records.columns import HEADERS_TYPE
from tests.helpers import wait_for

# Recent timestamps: time-based retention (7 days by default) would delete older records.
BASE_TS = (int(time.time()) - 3600) * 1000


def produce(cluster, topic: str, partitions: int, per_partition: int, compression: str = "none", **cfg) -> dict:
    """Produce ``per_partition`` keyed records to each empty partition (explicitly, so
    offsets are 0..n-1) with timestamps BASE_TS + 10 * i; returns {(p, offset): (key, value, ts)}."""
    producer = cluster.producer(compression_type=compression, **cfg)
    expected = {}
    sent = []
    for p in range(partitions):
        keys = [f"user-{p}-{i % 17}".encode() if i % 5 else None for i in range(per_partition)]
        values = [f"p{p}-v{i}-".encode() * (1 + i % 4) for i in range(per_partition)]
        stamps = [BASE_TS + 10 * i for i in range(per_partition)]
        sent.append((p, keys, values, stamps, producer.send_many(topic, values, keys, partition=p, timestamps=stamps)))
    for p, keys, values, stamps, result in sent:
        # Where each batch landed, as the broker acknowledged it.
        i = 0
        for tp, base_offset, count in result.get(60):
            assert tp.partition == p
            for j in range(count):
                expected[(p, base_offset + j)] = (keys[i], values[i], stamps[i])
                i += 1
        assert i == per_partition
    producer.close()
    return expected


def rows_of(ds) -> dict:
    """{(partition, offset): (key, value, ts_ms)} from a Dataset, checking schema and topic."""
    table = pa.concat_tables([data.SCHEMA.empty_table(), *ray.get(ds.to_arrow_refs())], promote_options="default")
    assert table.schema.names[:7] == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    out = {}
    cols = table.to_pydict()
    for i in range(table.num_rows):
        key = (cols["partition"][i], cols["offset"][i])
        assert key not in out, f"record {key} read twice"
        ts = cols["timestamp"][i]
        out[key] = (cols["key"][i], cols["value"][i], int(ts.timestamp() * 1000) if ts is not None else None)
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_dataset_equals_records_produced(cluster, new_topic, codec):
    topic = new_topic(partitions=3)
    expected = produce(cluster, topic, 3, 700, compression=codec)
    ds = data.read(topic, cluster=cluster)
    assert ds.schema().base_schema == data.SCHEMA
    assert rows_of(ds) == expected
    # The same records in small tasks (split ranges) and a requested parallelism.
    assert rows_of(data.read(topic, cluster=cluster, max_records_per_task=150)) == expected


def test_ranges_are_split_into_tasks():
    ranges = [data.OffsetRange("t", 0, 5, 1005), data.OffsetRange("t", 1, 0, 0), data.OffsetRange("t", 2, 0, 100)]
    pieces = data.split_ranges(ranges, 300)
    assert [(p.partition, p.start, p.end) for p in pieces] == [
        (0, 5, 255),
        (0, 255, 505),
        (0, 505, 755),
        (0, 755, 1005),
        (2, 0, 100),
    ]
    big = [data.OffsetRange("t", 0, 0, 100_000)]
    pieces = data.split_ranges(big, 1_000_000, parallelism=4)
    assert len(pieces) == 4 and sum(p.count for p in pieces) == 100_000
    assert data.split_ranges([data.OffsetRange("t", 0, 0, 100)], 10**6, parallelism=8) == [
        data.OffsetRange("t", 0, 0, 100)
    ]


def test_parallelism_splits_a_partition_into_several_read_tasks(cluster, new_topic):
    topic = new_topic(partitions=1)
    expected = produce(cluster, topic, 1, 40_000)
    ds = data.read(topic, cluster=cluster, parallelism=4)
    source_tasks = data.TopicDatasource(
        cluster.controller, data.offset_ranges(topic, cluster=cluster), parallelism=4
    ).get_read_tasks(200)
    assert len(source_tasks) == 4
    assert rows_of(ds) == expected


def test_offset_ranges_cut_exactly(cluster, new_topic):
    topic = new_topic(partitions=2)
    expected = produce(cluster, topic, 2, 500)
    # Offsets inside batches on both ends; -2/-1 for earliest/latest; JSON string form.
    spec = {topic: {"0": 37, "1": -2}}
    ds = data.read(
        topic, cluster=cluster, starting_offsets=spec, ending_offsets=f'{{"{topic}": {{"0": 401, "1": -1}}}}'
    )
    want = {k: v for k, v in expected.items() if (k[0] == 0 and 37 <= k[1] < 401) or k[0] == 1}
    assert rows_of(ds) == want
    # A partition left out starts at earliest and ends at latest.
    ds = data.read(topic, cluster=cluster, ending_offsets={topic: {"1": 3}})
    assert rows_of(ds) == {k: v for k, v in expected.items() if k[0] == 0 or k[1] < 3}
    ranges = data.offset_ranges(topic, cluster=cluster, starting_offsets={topic: {"0": 10_000}})
    assert ranges[0] == data.OffsetRange(topic, 0, 500, 500)  # clamped to the high watermark


def test_latest_start_gives_an_empty_dataset_with_the_schema(cluster, new_topic):
    topic = new_topic(partitions=2)
    produce(cluster, topic, 2, 50)
    ds = data.read(topic, cluster=cluster, starting_offsets="latest")
    assert ds.count() == 0
    assert ds.schema().base_schema == data.SCHEMA
    empty = new_topic(partitions=1)
    assert data.read(empty, cluster=cluster, include_headers=True).schema().base_schema == data.SCHEMA_WITH_HEADERS


def test_timestamp_ranges(cluster, new_topic):
    topic = new_topic(partitions=2)
    expected = produce(cluster, topic, 2, 300)
    # Records of offsets 50..149 have timestamps BASE_TS+500 .. BASE_TS+1490.
    ds = data.read(topic, cluster=cluster, starting_timestamp=BASE_TS + 500, ending_timestamp=BASE_TS + 1500)
    assert rows_of(ds) == {k: v for k, v in expected.items() if 50 <= k[1] < 150}
    # Between two records' timestamps: the first record at or after it.
    ds = data.read(topic, cluster=cluster, starting_timestamp=BASE_TS + 2985, ending_timestamp=BASE_TS + 10**9)
    assert rows_of(ds) == {k: v for k, v in expected.items() if k[1] == 299}
    # Past every record: nothing (the start resolves to latest).
    assert rows_of(data.read(topic, cluster=cluster, starting_timestamp=BASE_TS + 2995)) == {}
    ds = data.read(
        topic,
        cluster=cluster,
        starting_offsets_by_timestamp={topic: {"0": BASE_TS + 1000}},
        ending_offsets_by_timestamp={topic: {"1": BASE_TS + 100}},
    )
    assert rows_of(ds) == {
        k: v for k, v in expected.items() if (k[0] == 0 and k[1] >= 100) or (k[0] == 1 and k[1] < 10)
    }
    # The global timestamp wins over per-partition offsets, as in Spark.
    ds = data.read(
        topic, cluster=cluster, starting_offsets={topic: {"0": 0, "1": 0}}, starting_timestamp=BASE_TS + 2900
    )
    assert rows_of(ds) == {k: v for k, v in expected.items() if k[1] >= 290}


def test_bad_options_are_refused(cluster, new_topic):
    topic = new_topic(partitions=1)
    with pytest.raises(InvalidConfigError):
        data.read(topic, cluster=cluster, starting_offsets="middle")
    with pytest.raises(InvalidConfigError):
        data.read(topic, cluster=cluster, ending_offsets={topic: {"0": -2}})
    with pytest.raises(InvalidConfigError):
        data.read(topic, cluster=cluster, starting_offsets={topic: {"5": 0}})
    with pytest.raises(InvalidConfigError):
        data.read(f"{topic}-missing", cluster=cluster)
    with pytest.raises(InvalidConfigError):
        data.read(topic, cluster=cluster, isolation_level="dirty")


def test_headers_are_read_when_asked(cluster, new_topic):
    topic = new_topic(partitions=1)
    producer = cluster.producer()
    producer.send(topic, b"a", key=b"k", headers=[("h1", b"x"), ("h2", None)])
    producer.send(topic, b"b")
    producer.flush(30)
    table = pa.concat_tables(ray.get(data.read(topic, cluster=cluster, include_headers=True).to_arrow_refs()))
    assert table.schema == data.SCHEMA_WITH_HEADERS and table.schema.field("headers").type == HEADERS_TYPE
    assert table.column("headers").to_pylist() == [[{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}], []]
    assert "headers" not in data.read(topic, cluster=cluster).schema().names


def test_read_committed_leaves_out_aborted_transactions(cluster, new_topic):
    topic = new_topic(partitions=1)
    producer = cluster.producer(transactional_id=f"{topic}-txn")
    producer.init_transactions()
    for value, commit in ((b"aborted-1", False), (b"committed-1", True), (b"aborted-2", False)):
        producer.begin_transaction()
        producer.send(topic, value, partition=0)
        producer.send(topic, value + b"-b", partition=0)
        if commit:
            producer.commit_transaction()
        else:
            producer.flush(30)  # written, then aborted
            producer.abort_transaction()
    plain = cluster.producer()
    plain.send(topic, b"plain", partition=0).get(30)
    plain.close()
    producer.close()
    # The last abort's marker follows its answer; until it is in, the LSO stays before it.
    txn_id = f"{topic}-txn"
    wait_for(lambda: cluster.admin().describe_transactions([txn_id])[txn_id].state == "CompleteAbort", 60)

    def values(isolation_level: str) -> list[bytes]:
        ds = data.read(topic, cluster=cluster, isolation_level=isolation_level)
        return pa.concat_tables(ray.get(ds.to_arrow_refs())).column("value").to_pylist()

    assert values("read_committed") == [b"committed-1", b"committed-1-b", b"plain"]
    everything = [
        b"aborted-1",
        b"aborted-1-b",
        b"committed-1",
        b"committed-1-b",
        b"aborted-2",
        b"aborted-2-b",
        b"plain",
    ]
    assert values("read_uncommitted") == everything


def test_read_retries_a_stale_or_dead_leader(cluster, new_topic):
    topic = new_topic(partitions=1)
    expected = produce(cluster, topic, 1, 1000, linger_ms=1)
    meta = cluster.metadata([topic]).topics[topic].partitions[0]
    r = data.OffsetRange(topic, 0, 0, 1000)
    # A leader epoch the replica does not know (a stale cache on either side) is refused
    # with a retriable error: the reader refreshes metadata and goes on.
    tables = list(data.read_range(cluster.controller, r, leader=(meta.leader_handle, meta.leader_epoch + 5)))
    assert pa.concat_tables(tables).column("offset").to_pylist() == list(range(1000))

    # A dead actor (a leader that crashed) is retried with a fresh leader.
    @ray.remote(num_cpus=0)
    class Gone:
        def fetch(self, *args) -> None:
            return None

        def fetch_messages(self, *args) -> None:
            return None

    gone = Gone.remote()
    ray.get(gone.fetch.remote())
    ray.kill(gone)

    def dead() -> bool:  # ray.kill takes effect a moment later
        try:
            ray.get(gone.fetch.remote(), timeout=10)
            return False
        except ray.exceptions.RayActorError:
            return True

    wait_for(dead, timeout=30, what="the killed actor to be gone")
    tables = list(data.read_range(cluster.controller, r, leader=(ReplicaRef(gone, r.topic, r.partition, 0), 0)))
    got = pa.concat_tables(tables).to_pydict()
    assert [(k, v) for k, v in zip(got["key"], got["value"], strict=True)] == [
        expected[(0, i)][:2] for i in range(1000)
    ]


def test_write_round_trip(cluster, new_topic):
    topic = new_topic(partitions=3)
    rows = [
        {"key": f"k{i % 7}", "value": f"value-{i}".encode(), "timestamp": BASE_TS + i, "extra": i} for i in range(2000)
    ]
    n = data.write(ray.data.from_items(rows, override_num_blocks=4), topic, cluster=cluster)
    assert n == 2000
    got = pa.concat_tables(ray.get(data.read(topic, cluster=cluster).to_arrow_refs())).to_pylist()
    assert sorted((r["key"], r["value"], int(r["timestamp"].timestamp() * 1000)) for r in got) == sorted(
        (r["key"].encode(), r["value"], r["timestamp"]) for r in rows
    )
    # Keys land where the default partitioner puts them: one partition per key.
    by_key: dict = {}
    for r in got:
        by_key.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(p) == 1 for p in by_key.values())


def test_write_partition_and_headers_columns(cluster, new_topic):
    topic = new_topic(partitions=3)
    table = pa.table(
        {"value": [f"v{i}" for i in range(30)], "partition": pa.array([i % 3 for i in range(30)], pa.int32())}
    )
    assert data.write(ray.data.from_arrow(table), topic, cluster=cluster) == 30
    got = pa.concat_tables(ray.get(data.read(topic, cluster=cluster).to_arrow_refs())).to_pylist()
    assert sorted((r["partition"], r["value"]) for r in got) == sorted((i % 3, f"v{i}".encode()) for i in range(30))
    # Order inside a partition is the Dataset's order.
    assert [r["value"] for r in got if r["partition"] == 1] == [f"v{i}".encode() for i in range(1, 30, 3)]

    topic = new_topic(partitions=1)
    headers = pa.array([[{"key": "trace", "value": b"t1"}], None, []], HEADERS_TYPE)
    table = pa.table({"key": pa.array([b"a", None, b"c"]), "value": pa.array([b"1", b"2", None]), "headers": headers})
    assert data.write(ray.data.from_arrow(table), topic, cluster=cluster) == 3
    got = pa.concat_tables(ray.get(data.read(topic, cluster=cluster, include_headers=True).to_arrow_refs()))
    assert got.select(["key", "value"]).to_pylist() == table.select(["key", "value"]).to_pylist()
    assert got.column("headers").to_pylist() == [[{"key": "trace", "value": b"t1"}], [], []]


def test_write_needs_a_value_column(cluster, new_topic):
    topic = new_topic(partitions=1)
    with pytest.raises(Exception, match="value"):
        data.write(ray.data.from_items([{"key": "a"}]), topic, cluster=cluster)
