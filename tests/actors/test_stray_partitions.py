"""remove_stray_partitions: what a starting broker deletes from its data dir, and what it
must leave alone (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

from actors.broker.partition_files import remove_stray_partitions, write_topic_id
from storage import Log, RecordBatchBuilder
from storage.file_lock import FileLock


def _partition_log(root: Path, name: str) -> Path:
    with Log(root / name) as log:
        log.append(_one_record())
    write_topic_id(root / name, "AAAAAAAAAAAAAAAAAAAAAA")
    return root / name


def _one_record() -> bytes:
    builder = RecordBatchBuilder(0)
    builder.append(b"v", timestamp=1)
    return bytes(builder.build())


def test_only_unhosted_partition_logs_are_removed(tmp_path):
    hosted = _partition_log(tmp_path, "orders-0")
    gone = _partition_log(tmp_path, "orders-1")  # a partition this broker no longer hosts
    deleted = _partition_log(tmp_path, "old.topic-3")  # a deleted topic's
    leftover = tmp_path / "old.topic-2.0123abcd-stray"  # a removal cut short
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    not_a_log = tmp_path / "notes-1"  # named like a partition, but holds no log
    not_a_log.mkdir()
    (not_a_log / "readme.txt").write_text("mine")
    other = tmp_path / "scratch"
    other.mkdir()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n0\n")

    removed = remove_stray_partitions(tmp_path, {"orders-0"})

    assert sorted(removed) == ["old.topic-3", "orders-1"]
    assert not gone.exists() and not deleted.exists() and not leftover.exists()
    assert hosted.is_dir() and (hosted / "00000000000000000000.log").exists()
    assert not_a_log.is_dir() and other.is_dir() and (tmp_path / "recovery-point-offset-checkpoint").exists()
    assert not list(tmp_path.glob("*-stray"))


def test_a_partition_still_open_is_left_alone(tmp_path):
    open_one = _partition_log(tmp_path, "busy-0")
    lock = FileLock(open_one)  # as a live replica holds it
    lock.acquire()
    try:
        assert remove_stray_partitions(tmp_path, set()) == []
        assert (open_one / "00000000000000000000.log").exists()
    finally:
        lock.release()
    assert remove_stray_partitions(tmp_path, set()) == ["busy-0"]


def test_a_missing_data_dir_is_nothing_to_do(tmp_path):
    assert remove_stray_partitions(tmp_path / "never-created", set()) == []
