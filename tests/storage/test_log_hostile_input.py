"""Property: whatever a client sends, the leader's append either stores it as Kafka would
(readable by every consumer) or refuses it with a Kafka-named error, and the partition
goes on serving every record it held before."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from storage import Log, decode_columns
from storage.errors import KafkaError
from tests.storage.batches import log_bytes
from tests.storage.hostile_batches import check_stored, is_kafka_named, requests

# Every test here runs over both twins of the leader's request checks and the codec (tests/twins.py).
pytestmark = pytest.mark.usefixtures("twin")

LEADER_EPOCH = 3


class Partition:
    """A leader's log and what it must still serve: the bytes of every accepted append."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.stored = b""
        self.accepted = 0
        self.refused: dict[str, int] = {}


@pytest.fixture(scope="module")
def partition(tmp_path_factory, twin):
    # One log per twin for every example: each one runs against everything the earlier ones
    # left (a log shared by both twins would see the second run's batches as duplicates).
    log = Log(tmp_path_factory.mktemp("hostile") / "t-0", {"segment.bytes": 1 << 20})
    yield Partition(log)
    log.close()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests())
def test_appended_as_kafka_would_or_refused_with_a_kafka_error(partition, request):
    log = partition.log
    end, size = log.log_end_offset, log.size_in_bytes
    try:
        info = log.append(request, leader_epoch=LEADER_EPOCH)
    except KafkaError as error:
        assert is_kafka_named(error), repr(error)
        partition.refused[type(error).__name__] = partition.refused.get(type(error).__name__, 0) + 1
        assert (log.log_end_offset, log.size_in_bytes) == (end, size)
    else:
        if info.duplicate:
            # One of its producer's last five batches again (hypothesis may draw a batch
            # twice): Kafka appends nothing and answers with the original offsets.
            assert (log.log_end_offset, log.size_in_bytes) == (end, size) and info.first_offset < end
            return
        assert info.first_offset == end
        stored = log.read(end, 1 << 30).records
        check_stored(request, stored, end, LEADER_EPOCH)
        partition.stored += stored
        partition.accepted += 1
    # Every earlier record is still there, unchanged, and a consumer reads the whole partition.
    assert log_bytes(log) == partition.stored
    assert len(decode_columns(log_bytes(log))) == log.log_end_offset  # every segment, as a consumer reads them


def test_the_property_run_met_both_outcomes(partition):
    """The generator reaches both sides (runs after the property test in this module)."""
    if not partition.accepted and not partition.refused:
        pytest.skip("the property test did not run in this session")
    assert partition.accepted >= 20, partition.accepted
    assert {"CorruptRecordError", "InvalidRecordError"} <= set(partition.refused), partition.refused
