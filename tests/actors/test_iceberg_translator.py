"""The Iceberg translation without Ray: a host's translators over real logs, pyiceberg's SQL
catalog on SQLite in a temp dir, a manual clock. The table must equal the committed records
(each once, in offset order within a partition, with Kafka's columns), whatever the
interleaving of leaders and commits."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from actors.clock import ManualClock
from actors.iceberg import table as iceberg_table
from actors.iceberg.config import (
    DEFAULT_PARTITION_SPEC,
    PartitionTerm,
    check_topic_config,
    iceberg_settings,
    parse_partition_spec,
)
from actors.iceberg.translator import PartitionTranslator
from actors.iceberg.translators import Translators
from storage import Log, log_config
from storage.errors import InvalidConfigError
from tests.actors.iceberg_support import T0, LogSource, append, end_txn, run, settle

KV = {"rayqueue_iceberg_mode": "key_value"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


def new_log(root: Path, name: str, **config) -> Log:
    return Log(root / name, log_config(config))


def translators(root: Path, clock: ManualClock, schemas=None, **broker) -> Translators:
    t = Translators(1, clock, schemas)
    t.configure({"log.dirs": str(root), **broker})
    return t


def rows(t: Translators, name: str) -> list[dict]:
    table = t.catalog().load(name)
    if table is None:
        return []
    out = table.scan().to_arrow().to_pylist()
    return sorted(out, key=lambda r: (r["rayqueue"]["partition"], r["rayqueue"]["offset"]))


def log_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every committed data record (read_committed)."""
    from actors.iceberg.translator import _Chunk, _decode, _end_offset

    source = LogSource(log, "x")
    start = offset = log.log_start_offset
    parts = []
    while True:
        answer = source.read_committed(offset, 1 << 20)
        if not answer.records:
            break
        parts.append((answer.records, answer.aborted_transactions))
        offset = _end_offset(answer.records)
    columns = _decode(_Chunk(start, offset, parts))
    return list(zip(columns.offset.tolist(), columns.key.to_pylist(), columns.value.to_pylist(), strict=True))


# -- the partition spec and the configs ----------------------------------------------------------


def test_partition_spec_syntax() -> None:
    assert parse_partition_spec(DEFAULT_PARTITION_SPEC) == (PartitionTerm("hour", "rayqueue.timestamp"),)
    assert parse_partition_spec("()") == () == parse_partition_spec("")
    assert parse_partition_spec("(day(rayqueue.timestamp), bucket(8, rayqueue.partition), rayqueue.topic)") == (
        PartitionTerm("day", "rayqueue.timestamp"),
        PartitionTerm("bucket", "rayqueue.partition", 8),
        PartitionTerm("identity", "rayqueue.topic"),
    )
    for bad in ("hour(x)", "(hour(x)", "(nope(x))", "(bucket(x))", "(hour(3, x))", "(x; drop table)", "(a, a)"):
        with pytest.raises(InvalidConfigError):
            parse_partition_spec(bad)
    with pytest.raises(InvalidConfigError):
        parse_partition_spec("(" + ", ".join(f"c{i}" for i in range(17)) + ")")
    with pytest.raises(InvalidConfigError):
        check_topic_config({"rayqueue.iceberg.partition.spec": "hour(rayqueue.timestamp)"})


def test_topic_keys_are_topic_configs() -> None:
    config = log_config({"rayqueue.iceberg.mode": "key_value", "rayqueue.iceberg.target.lag.ms": "5000"})
    assert config["rayqueue.iceberg.target.lag.ms"] == 5000
    assert config["rayqueue.iceberg.invalid.record.action"] == "dlq_table"
    for key, value in (
        ("rayqueue.iceberg.mode", "avro"),
        ("rayqueue.iceberg.target.lag.ms", 0),
        ("rayqueue.iceberg.invalid.record.action", "ignore"),
    ):
        with pytest.raises(InvalidConfigError):
            log_config({key: value})


def test_settings_default_under_the_data_root(root: Path) -> None:
    settings = iceberg_settings({"log.dirs": str(root)})
    assert settings.catalog_uri == f"sqlite:///{root / 'iceberg' / 'catalog.db'}"
    assert settings.warehouse == (root / "iceberg" / "warehouse").as_uri()
    assert settings.catalog_properties()["type"] == "sql"
    s3 = iceberg_settings({"rayqueue.iceberg.warehouse": "s3://b/p", "rayqueue.iceberg.s3.endpoint": "http://h:1"})
    assert s3.catalog_properties()["s3.endpoint"] == "http://h:1"


# -- key_value: the table equals the topic --------------------------------------------------------


def test_key_value_table_equals_the_log(root: Path) -> None:
    log = new_log(root, "kv-0")
    append(log, [b"a", b"b", None], keys=[b"k1", None, b"k3"], headers=[("h", b"1"), ("g", b"")])
    append(log, [f"v{i}".encode() for i in range(200)], compression=4)  # zstd
    append(log, [b"late"], ts=-1)  # no timestamp: null in the table, the record kept
    append(log, [b"far"], ts=2**62)  # beyond microseconds' range: null as well
    clock = ManualClock()
    t = translators(root, clock)
    source = LogSource(log, "kv", **KV)
    run(settle(t, [source], clock))
    table_rows = rows(t, "kv")
    assert [(r["rayqueue"]["offset"], r["key"], r["value"]) for r in table_rows] == log_records(log)
    first = table_rows[0]
    assert first["headers"] == [{"key": "h", "value": b"1"}, {"key": "g", "value": b""}]
    assert first["rayqueue"]["topic"] == "kv" and first["rayqueue"]["partition"] == 0
    assert first["rayqueue"]["timestamp"].timestamp() * 1000 == T0 and first["rayqueue"]["timestamp_type"] == 0
    assert table_rows[-2]["rayqueue"]["timestamp"] is None and table_rows[-1]["rayqueue"]["timestamp"] is None
    stats = t.describe("kv", 0)
    assert stats["next_offset"] == log.log_end_offset and stats["lag_records"] == 0
    assert stats["translated_records"] == len(table_rows) and stats["error"] is None
    # The offset is in the snapshot summary, with the topic id.
    summary = t.catalog().load("kv").current_snapshot().summary.additional_properties
    assert summary["rayqueue.next-offset.0"] == str(log.log_end_offset)
    assert summary["rayqueue.topic-id"] == "topic-id-1"
    # Partitioned by hour of the record timestamp (the default spec).
    spec = t.catalog().load("kv").spec()
    assert [f.transform.__class__.__name__ for f in spec.fields] == ["HourTransform"]


def test_aborted_transactions_and_markers_stay_out(root: Path) -> None:
    log = new_log(root, "tx-0")
    append(log, [b"plain"])
    append(log, [b"t1-a", b"t1-b"], pid=7, txn=True)
    append(log, [b"t2-a"], pid=8, txn=True)
    end_txn(log, 7, commit=False)  # aborted
    append(log, [b"t2-b"], pid=8, seq=1, txn=True)
    end_txn(log, 8, commit=True)
    append(log, [b"open"], pid=9, txn=True)  # still open: past the LSO
    clock = ManualClock()
    t = translators(root, clock)
    source = LogSource(log, "tx", **KV)
    run(settle(t, [source], clock))
    assert [r["value"] for r in rows(t, "tx")] == [b"plain", b"t2-a", b"t2-b"]
    end_txn(log, 9, commit=True)
    run(settle(t, [source], clock))
    assert [r["value"] for r in rows(t, "tx")] == [b"plain", b"t2-a", b"t2-b", b"open"]
    assert t.describe("tx", 0)["next_offset"] == log.log_end_offset  # past the last marker too


def test_waits_for_half_the_target_lag_or_enough_bytes(root: Path) -> None:
    log = new_log(root, "lag-0")
    clock = ManualClock()
    t = translators(root, clock, **{"rayqueue.iceberg.translation.max.bytes": 4096})
    source = LogSource(log, "lag", rayqueue_iceberg_mode="key_value", rayqueue_iceberg_target_lag_ms=10_000)

    async def scenario() -> None:
        t.tick([source])
        await t._running  # the first step reads the table's state
        append(log, [b"x"])
        t.tick([source])
        assert t._running.done() and t.describe("lag", 0)["lag_records"] == 1
        clock.advance(4_000)
        t.tick([source])
        assert t.describe("lag", 0)["lag_seconds"] == pytest.approx(4.0) and t._running.done()
        clock.advance(1_000)  # half the target lag
        t.tick([source])
        await t._running
        assert t.describe("lag", 0)["next_offset"] == 1
        # About max.bytes waiting: at once, before the lag.
        append(log, [b"y" * 100 for _ in range(100)])
        t.tick([source])
        await t._running
        assert t.describe("lag", 0)["next_offset"] == 101

    run(scenario())


def test_mode_turned_on_translates_from_the_log_start(root: Path) -> None:
    log = new_log(root, "on-0")
    for i in range(3):
        append(log, [f"old{i}".encode()])
    log.delete_records(1, high_watermark=log.log_end_offset)  # the log starts at 1
    start = log.log_start_offset
    append(log, [b"new"])
    clock = ManualClock()
    t = translators(root, clock)
    source = LogSource(log, "on")  # disabled
    run(settle(t, [source], clock))
    assert t.catalog().load("on") is None and t.describe("on", 0) is None
    source.set_config(**KV)
    run(settle(t, [source], clock))
    offsets = [r["rayqueue"]["offset"] for r in rows(t, "on")]
    assert offsets == [o for o, _, _ in log_records(log)] and offsets[0] == start


def test_retention_past_the_translated_offset_is_skipped_and_counted(root: Path) -> None:
    log = new_log(root, "ret-0")
    clock = ManualClock()
    t = translators(root, clock)
    source = LogSource(log, "ret", **KV)
    append(log, [b"a"])
    run(settle(t, [source], clock))
    append(log, [b"b", b"c"])
    append(log, [b"d"])
    log.delete_records(3, high_watermark=log.log_end_offset)  # b and c go before they are translated
    run(settle(t, [source], clock))
    assert [r["value"] for r in rows(t, "ret")] == [b"a", b"d"]
    assert t.describe("ret", 0)["skipped_offsets"] == 2


# -- exactly once: leaders racing, steps cut short, many brokers on one table ---------------------


def test_a_new_leader_resumes_from_the_summary(root: Path) -> None:
    log = new_log(root, "lead-0")
    append(log, [b"a", b"b"])
    clock = ManualClock()
    first = translators(root, clock)
    old = LogSource(log, "lead", epoch=0, **KV)
    run(settle(first, [old], clock))
    append(log, [b"c"])
    # Another broker's translator (a new leader, epoch 1) takes over.
    second = translators(root, clock)
    new = LogSource(log, "lead", epoch=1, **KV)
    run(settle(second, [new], clock))
    assert [r["value"] for r in rows(second, "lead")] == [b"a", b"b", b"c"]
    # The old leader, not yet told, steps again: the table holds a newer epoch; it stops.
    append(log, [b"d"])
    run(settle(first, [old], clock))
    assert first.describe("lead", 0)["error"] and first._translators[("lead", 0)].stopped
    run(settle(second, [new], clock))
    assert [r["value"] for r in rows(second, "lead")] == [b"a", b"b", b"c", b"d"]


def test_a_step_killed_before_its_commit_leaves_no_trace(root: Path, monkeypatch) -> None:
    log = new_log(root, "kill-0")
    append(log, [b"a", b"b"])
    clock = ManualClock()
    t = translators(root, clock)
    source = LogSource(log, "kill", **KV)
    run(settle(t, [source], clock))
    append(log, [b"c", b"d"])

    def dies(*args, **kwargs):
        raise SystemExit("the broker died between writing the files and committing them")

    monkeypatch.setattr(iceberg_table, "commit", dies)
    translator = t._translators[("kill", 0)]
    with pytest.raises(SystemExit):
        translator._translate(translator._read())
    monkeypatch.undo()
    # The next leader (a fresh translator) starts from the table's state: c and d once.
    again = translators(root, clock)
    run(settle(again, [LogSource(log, "kill", epoch=1, **KV)], clock))
    assert [r["value"] for r in rows(again, "kill")] == [b"a", b"b", b"c", b"d"]


def test_two_leaders_of_one_partition_commit_the_range_once(root: Path) -> None:
    """Both read the same range; the second commit finds the partition's offset moved and is
    dropped (its files deleted), whoever wins the race."""
    log = new_log(root, "race-0")
    append(log, [b"a", b"b", b"c"])
    clock = ManualClock()
    t1, t2 = translators(root, clock), translators(root, clock)
    s1, s2 = LogSource(log, "race", epoch=3, **KV), LogSource(log, "race", epoch=3, **KV)
    a = PartitionTranslator(s1, t1.catalog, 1, clock)
    b = PartitionTranslator(s2, t2.catalog, 2, clock)
    a._load_state()
    b._load_state()
    chunk_a, chunk_b = a._read(), b._read()
    a._translate(chunk_a)
    b._translate(chunk_b)
    assert [r["value"] for r in rows(t1, "race")] == [b"a", b"b", b"c"]
    assert b.stats.conflicts == 1 and b.stats.next_offset is None
    data_dir = Path(t1.catalog().load("race").location().removeprefix("file://")) / "data"
    files = {p.name for p in data_dir.rglob("*.parquet")}
    assert len(files) == len(t1.catalog().load("race").inspect.files())  # the loser's files were deleted


def test_brokers_committing_to_one_table_at_once(root: Path) -> None:
    """Partitions of one topic on different brokers commit concurrently (threads): every
    conflict is retried, no partition's records are lost or doubled, no offset set back."""
    clock = ManualClock()
    hosts = [translators(root, clock) for _ in range(4)]
    logs = [new_log(root, f"many-{p}") for p in range(4)]
    for p, log in enumerate(logs):
        for b in range(5):
            append(log, [f"p{p}-b{b}-{i}".encode() for i in range(20)])
    workers = [
        PartitionTranslator(LogSource(log, "many", p, **KV), hosts[p].catalog, p, clock) for p, log in enumerate(logs)
    ]
    workers[0]._load_state()  # makes the table
    errors = []

    def work(w: PartitionTranslator) -> None:
        try:
            w._load_state()
            from actors.iceberg import translator as tr

            budget = tr.FIRST_READ_BYTES
            tr.FIRST_READ_BYTES = 200  # a step per batch: many commits
            try:
                while w.stats.next_offset < w.source.log.log_end_offset:
                    w._translate(w._read())
            finally:
                tr.FIRST_READ_BYTES = budget
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors
    got = rows(hosts[0], "many")
    want = sorted((p, o, v) for p, log in enumerate(logs) for o, _, v in log_records(log))
    assert [(r["rayqueue"]["partition"], r["rayqueue"]["offset"], r["value"]) for r in got] == want
    state = iceberg_table.read_state(hosts[0].catalog().load("many"), "topic-id-1")
    assert {p: s.next_offset for p, s in state.items()} == {p: 100 for p in range(4)}


def test_a_failing_catalog_is_retried_with_a_backoff(root: Path) -> None:
    log = new_log(root, "fail-0")
    append(log, [b"a"])
    clock = ManualClock()
    bad = Translators(1, clock)
    bad.configure({"log.dirs": str(root), "rayqueue.iceberg.catalog.uri": "sqlite:////proc/no/catalog.db"})
    source = LogSource(log, "fail", **KV)

    async def scenario() -> None:
        bad.tick([source])
        await bad._running
        stats = bad.describe("fail", 0)
        assert stats["error"] and stats["next_offset"] is None
        first = bad._running
        bad.tick([source])  # within the backoff: nothing starts
        assert bad._running is first
        clock.advance(1_500)
        bad.tick([source])
        assert bad._running is not first
        await bad._running

    run(scenario())


def test_a_closed_or_following_replica_stops_its_translator(root: Path) -> None:
    log = new_log(root, "follow-0")
    clock = ManualClock()
    t = translators(root, clock)
    source = LogSource(log, "follow", **KV)
    run(settle(t, [source], clock))
    assert t.describe("follow", 0) is not None

    async def scenario() -> None:
        source.leading = False
        t.tick([source])
        assert t.describe("follow", 0) is None
        source.leading, source.epoch = True, 5
        t.tick([source])
        assert t._translators[("follow", 0)].epoch == 5

    run(scenario())


def test_decode_takes_the_columns_of_storage(root: Path) -> None:
    """The translator's columns come from storage's decoder: numpy offsets, Arrow binaries."""
    log = new_log(root, "cols-0")
    append(log, [b"v"], keys=[b"k"])
    values = log_records(log)
    assert values == [(0, b"k", b"v")] and isinstance(np.int64(values[0][0]), np.integer)


def one_record_partitions(root: Path, topic: str, partitions: int) -> list[LogSource]:
    """``partitions`` partitions of ``topic``, one record each."""
    sources = []
    for p in range(partitions):
        log = new_log(root, f"{topic}-{p}")
        append(log, [b"x"])
        sources.append(LogSource(log, topic, p, **KV))
    return sources


def test_steps_run_one_at_a_time_per_host(root: Path) -> None:
    clock = ManualClock()
    t = translators(root, clock)
    sources = one_record_partitions(root, "one", 3)

    async def go() -> None:
        t.tick(sources)
        first = t._running
        t.tick(sources)
        assert t._running is first  # no second step while one runs
        await first
        await settle(t, sources, clock)

    run(go())
    assert len(rows(t, "one")) == 3


def test_a_cancelled_step_starts_no_other(root: Path) -> None:
    # The host's loop going away cancels the running step: no further step is started on it
    # (it would be left pending on a closed loop).
    t = translators(root, ManualClock())
    sources = one_record_partitions(root, "cancel", 2)

    async def go() -> None:
        t.tick(sources)
        first = t._running
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.sleep(0)
        assert t._running is first and first.cancelled()

    run(go())


def test_a_new_leaders_first_step_goes_before_a_busy_partitions(root: Path) -> None:
    # Partition 0 always has records waiting (its leader is behind); partition 1's leader is
    # new and has not read the table's state: it must not wait behind partition 0's steps.
    clock = ManualClock()
    t = translators(root, clock)
    busy = LogSource(new_log(root, "fair-0"), "fair", 0, **KV)
    append(busy.log, [b"a"])
    run(settle(t, [busy], clock))
    append(busy.log, [b"b"])
    last = t._running
    t.tick([busy])  # partition 0 sees a record waiting ...
    assert t._running is last  # (no step yet: it has not waited half its target lag)
    clock.advance(120_000)  # ... past its target lag: it is due
    fresh_log = new_log(root, "fair-1")
    append(fresh_log, [b"c"])
    sources = [busy, LogSource(fresh_log, "fair", 1, **KV)]

    async def go() -> None:
        t.tick(sources)
        assert t._running_key == ("fair", 1)
        await t._running

    run(go())
    run(settle(t, sources, clock))
    assert [r["value"] for r in rows(t, "fair")] == [b"a", b"b", b"c"]


def test_a_commit_that_loses_the_race_is_retried_and_sets_nothing_back(root: Path, monkeypatch) -> None:
    """Partition 0's commit is overtaken by partition 1's between reading the table and
    swapping its metadata: the catalog refuses it (optimistic concurrency), it reads the table
    again and commits on top, carrying partition 1's new offset forward."""
    clock = ManualClock()
    host = translators(root, clock)
    logs = [new_log(root, f"occ-{p}") for p in range(2)]
    for p, log in enumerate(logs):
        append(log, [f"p{p}".encode()])
    a, b = (PartitionTranslator(LogSource(log, "occ", p, **KV), host.catalog, 1, clock) for p, log in enumerate(logs))
    a._load_state()
    b._load_state()
    chunk_a, chunk_b = a._read(), b._read()
    real_read_state, calls = iceberg_table.read_state, []

    def read_state(table, topic_id):
        calls.append(table.metadata_location)
        if len(calls) == 1:  # a's first attempt has read the table: b commits now
            b._translate(chunk_b)
        return real_read_state(table, topic_id)

    monkeypatch.setattr(iceberg_table, "read_state", read_state)
    a._translate(chunk_a)
    monkeypatch.undo()
    assert a.stats.commits == 1 and b.stats.commits == 1
    assert len({c for c in calls if c}) >= 2  # a read the table again after losing
    state = iceberg_table.read_state(host.catalog().load("occ"), "topic-id-1")
    assert {p: s.next_offset for p, s in state.items()} == {0: 1, 1: 1}
    assert [r["value"] for r in rows(host, "occ")] == [b"p0", b"p1"]


def test_the_translation_imports_no_ray() -> None:
    """The translator component is plain (the broker's shell hands it the replicas): every
    module of actors/iceberg imports with Ray unavailable."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    names = [f"actors.iceberg.{p.stem}" for p in sorted((root / "actors" / "iceberg").glob("*.py"))]
    code = (
        "import importlib, json, sys; sys.modules['ray'] = None; "
        f"[importlib.import_module(n) for n in {names!r}]; import actors.iceberg.table as t; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'ray')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["ray"]


def lose_the_first_commit_answer(monkeypatch) -> list:
    """The SQL catalog takes the next commit, then answers with an error (SQLite busy at
    COMMIT): the list gets the metadata location it committed."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import OperationalError

    real, lost = SqlCatalog.commit_table, []

    def commit_then_lose_the_answer(self, table, requirements, updates):
        answer = real(self, table, requirements, updates)
        if not lost:
            lost.append(answer.metadata_location)
            raise OperationalError("COMMIT", {}, Exception("database is locked"))
        return answer

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_then_lose_the_answer)
    return lost


def translated(root: Path, topic: str, *batches: list[bytes]) -> tuple[Log, ManualClock, Translators, LogSource]:
    """A partition's log, its translators and source, each batch appended and translated; the
    clock's wall time starts at the real one (pyiceberg stamps snapshots with it)."""
    log = new_log(root, f"{topic}-0")
    clock = ManualClock(wall_ms=int(time.time() * 1000))
    t = translators(root, clock)
    source = LogSource(log, topic, **KV)
    for values in batches:
        append(log, values)
        run(settle(t, [source], clock))
    return log, clock, t, source


def test_a_commit_whose_answer_is_lost_is_found_not_redone(root: Path, monkeypatch) -> None:
    """The catalog takes the commit but the answer is an error (SQLite busy at COMMIT, a lost
    reply): the outcome is unknown, so the translator looks for its commit's id before anything
    else. It finds it: nothing is written twice and none of its files is deleted."""
    log = new_log(root, "lost-0")
    append(log, [b"a", b"b"])
    clock = ManualClock()
    t = translators(root, clock)
    source = LogSource(log, "lost", **KV)
    run(settle(t, [source], clock))
    append(log, [b"c"])
    lost = lose_the_first_commit_answer(monkeypatch)
    run(settle(t, [source], clock))
    monkeypatch.undo()
    assert lost and t.describe("lost", 0)["commits"] == 2 and t.describe("lost", 0)["conflicts"] == 0
    assert [r["value"] for r in rows(t, "lost")] == [b"a", b"b", b"c"]  # every data file still there


def test_a_lost_answer_is_found_by_the_partitions_state_when_its_snapshot_is_gone(root: Path, monkeypatch) -> None:
    """As above, but the commit's snapshot can no longer be found by its id (expired meanwhile,
    or past the newest hundred): the partition's state in the table is the one the commit set,
    so it landed. Nothing is written twice, no file deleted."""
    log, clock, t, source = translated(root, "gone", [b"a"])
    append(log, [b"b"])
    lost = lose_the_first_commit_answer(monkeypatch)
    monkeypatch.setattr(iceberg_table, "_has_commit", lambda table, commit_id, depth=100: False)
    run(settle(t, [source], clock))
    monkeypatch.undo()
    assert lost and t.describe("gone", 0)["commits"] == 2 and t.describe("gone", 0)["conflicts"] == 0
    assert [r["value"] for r in rows(t, "gone")] == [b"a", b"b"]


def _set_table_properties(t: Translators, name: str, props: dict[str, str]) -> None:
    table = t.catalog().load(name)
    with table.transaction() as txn:
        txn.set_properties(props)


def test_a_table_rayqueue_makes_expires_snapshots_after_an_hour(root: Path) -> None:
    _, _, t, _ = translated(root, "made", [b"a"])
    assert t.catalog().load("made").properties[iceberg_table.MAX_SNAPSHOT_AGE] == str(3600 * 1000)


def test_snapshots_the_table_lets_go_are_expired_and_every_record_stays(root: Path) -> None:
    # history.expire.max-snapshot-age-ms=0 and min-snapshots-to-keep=2: after each commit
    # every snapshot but the newest two goes; the table still holds every record once, and a
    # new leader resumes from the state in the newest snapshot.
    log, clock, t, source = translated(root, "exp", [b"r0"])
    _set_table_properties(
        t, "exp", {"history.expire.max-snapshot-age-ms": "0", "history.expire.min-snapshots-to-keep": "2"}
    )
    for i in range(1, 8):
        append(log, [b"r%d" % i])
        run(settle(t, [source], clock))
    table = t.catalog().load("exp")
    assert len(table.metadata.snapshots) == 2
    assert t.describe("exp", 0)["expired_snapshots"] >= 6
    want = [b"r%d" % i for i in range(8)]
    assert [r["value"] for r in rows(t, "exp")] == want
    successor = translators(root, clock)
    newer = LogSource(log, "exp", epoch=1, **KV)
    append(log, [b"r8"])
    run(settle(successor, [newer], clock))
    assert [r["value"] for r in rows(successor, "exp")] == [*want, b"r8"]


def test_expiry_keeps_the_newest_snapshot_rayqueue_wrote_under_anothers(root: Path) -> None:
    # Another writer's snapshot (no translated offsets in its summary) is the newest: with
    # min-snapshots-to-keep=1 Iceberg's rule alone would let rayqueue's go, and with it the
    # translated offsets. It stays.
    _, _, t, _ = translated(root, "other", [b"a"], [b"b"])
    table = t.catalog().load("other")
    ours = table.current_snapshot().snapshot_id
    table.append(table.scan().to_arrow().slice(0, 1))  # a foreign writer
    table = t.catalog().load("other")
    theirs = table.current_snapshot().snapshot_id
    ids = iceberg_table.expirable_snapshots(table, now_ms=2**62)
    assert ids and ours not in ids and theirs not in ids
    iceberg_table.expire_snapshots(table, ids)
    table = t.catalog().load("other")
    assert {s.snapshot_id for s in table.metadata.snapshots} == {ours, theirs}
    assert iceberg_table.read_state(table, "topic-id-1")[0].next_offset == 2


def test_an_expiry_property_that_is_not_a_number_expires_nothing(root: Path) -> None:
    _, _, t, _ = translated(root, "nan", [b"a"], [b"b"])
    _set_table_properties(t, "nan", {"history.expire.max-snapshot-age-ms": "soon"})
    assert iceberg_table.expirable_snapshots(t.catalog().load("nan"), now_ms=2**62) == []
