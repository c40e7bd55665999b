"""The leader epoch cache: OffsetsForLeaderEpoch answers, truncation and the checkpoint file."""

from __future__ import annotations

from storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, UNDEFINED_EPOCH, LeaderEpochFileCache


def test_end_offset_for_each_epoch(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    assert cache.end_offset_for(0, 0) == (UNDEFINED_EPOCH, -1)
    assert cache.assign(1, 0) and cache.assign(3, 10) and cache.assign(5, 25)
    assert not cache.assign(4, 30) and not cache.assign(5, 30)  # never an older or repeated epoch
    assert cache.latest_epoch == 5
    assert cache.end_offset_for(0, 40) == (UNDEFINED_EPOCH, -1)  # older than everything held
    assert cache.end_offset_for(1, 40) == (1, 10)
    assert cache.end_offset_for(2, 40) == (1, 10)  # largest epoch <= 2 is 1
    assert cache.end_offset_for(3, 40) == (3, 25)
    assert cache.end_offset_for(5, 40) == (5, 40)  # the newest epoch ends at the log end
    assert cache.end_offset_for(9, 40) == (5, 40)


def test_truncation_and_reload(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    for epoch, start in [(0, 0), (2, 5), (4, 9), (7, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(9)
    assert cache.entries == [(0, 0), (2, 5)]
    cache.truncate_from_start(7)
    assert cache.entries == [(2, 7)]
    lines = (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_text().splitlines()
    assert lines == ["0", "1", "2 7"]  # Kafka's format: version, count, "epoch offset" lines
    assert LeaderEpochFileCache(tmp_path).entries == [(2, 7)]
    # A new epoch starting at or below an existing entry's start replaces that suffix.
    cache.assign(8, 7)
    assert cache.entries == [(8, 7)]


def test_malformed_file_is_ignored(tmp_path):
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n3\n1 0\n")
    assert LeaderEpochFileCache(tmp_path).entries == []
