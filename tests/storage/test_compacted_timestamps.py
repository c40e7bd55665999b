"""ListOffsets by timestamp on a compacted log: batches the cleaner emptied or thinned keep their
header (a producer's last batch, a batch's offset range), so a batch's maxTimestamp may belong to
a record that is gone. The lookup must answer with a record that exists (Kafka's
searchForTimestamp walks on to the next batch)."""

from __future__ import annotations

import pytest

from storage import Log, RecordBatchBuilder
from storage.cleaner import clean
from storage.log import TimestampOffset

# Every test here runs over both twins of the offset map, the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "file.delete.delay.ms": 0}


def _batch(records, **kwargs) -> bytes:
    builder = RecordBatchBuilder(0, **kwargs)
    for key, value, ts in records:
        builder.append(value, key, ts)
    return bytes(builder.build())


def test_a_producers_emptied_last_batch_is_not_an_answer(tmp_path):
    with Log(tmp_path / "t-0", CONFIG) as log:
        log.append(_batch([(b"a", b"1", 100)], producer_id=5, producer_epoch=0, base_sequence=0))
        log.append(_batch([(b"a", b"2", 200)]))
        log.roll()
        log.append(_batch([(b"z", b"3", 300)]))
        assert clean(log, force=True) is not None
        first = log.segments[0]
        kept = list(first.headers_from(0))
        assert kept[0].records_count == 0  # emptied, kept for the producer's state
        assert log.offset_for_timestamp(50) == TimestampOffset(200, 1)
        assert log.offset_for_timestamp(150) == TimestampOffset(200, 1)
        assert log.offset_for_timestamp(250) == TimestampOffset(300, 2)


def test_a_log_append_time_batch_that_lost_its_first_record_answers_with_a_record(tmp_path):
    clock = iter(range(1000, 10**6, 1000))
    config = {**CONFIG, "message.timestamp.type": "LogAppendTime"}
    with Log(tmp_path / "t-0", config, time_ms=lambda: next(clock)) as log:
        first = log.append(_batch([(b"a", b"1", 1), (b"b", b"2", 2)])).log_append_time
        log.append(_batch([(b"a", b"3", 3)]))
        log.roll()
        log.append(_batch([(b"z", b"4", 4)]))
        assert clean(log, force=True) is not None
        assert [h.records_count for h in log.segments[0].headers_from(0)] == [1, 1]
        assert log.offset_for_timestamp(first - 1) == TimestampOffset(first, 1)  # offset 0 is gone
