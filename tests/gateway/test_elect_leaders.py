"""ElectLeaders through the gateway (Kafka's Admin.electLeaders, kafka-leader-election.sh),
request by request: preferred elections by the controller, per-partition answers, unknown
partitions, the all-partitions form, unclean elections."""

from __future__ import annotations

import datetime

from tests.gateway.wire import Wire, build_request
from tests.helpers import rotate_preferred_leader, wait_for

ELECT_LEADERS = 43
NONE, UNKNOWN_TOPIC_OR_PARTITION, ELECTION_NOT_NEEDED = 0, 3, 84


def _answers(response) -> dict[tuple[str, int], int]:
    return {
        (r.topic, p.partition_id): int(p.error_code)
        for r in response.replica_election_results
        for p in r.partition_result
    }


def _elect(bootstrap: str, version: int, topic_partitions, election_type: int = 0):
    with Wire(bootstrap) as wire:
        return wire.call(
            build_request(
                ELECT_LEADERS,
                version,
                election_type=election_type,
                topic_partitions=topic_partitions,
                timeout=datetime.timedelta(seconds=60),
            )
        )


def test_preferred_election_per_partition(bootstrap, admin, new_topic):
    topic = new_topic(partitions=3, replication_factor=3)
    wait_for(lambda: all(len(p.isr) == 3 for p in admin.describe_topics([topic])[topic].partitions), 60, what="isr")
    preferred = rotate_preferred_leader(admin, topic, 0)
    for version in (2, 0):
        asked = [{"topic": topic, "partitions": [0, 1, 7]}, {"topic": "no-such-topic", "partitions": [0]}]
        response = _elect(bootstrap, version, asked)
        want_0 = NONE if version == 2 else ELECTION_NOT_NEEDED  # v0 runs second: already moved
        assert _answers(response) == {
            (topic, 0): want_0,
            (topic, 1): ELECTION_NOT_NEEDED,
            (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
            ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert admin.describe_topics([topic])[topic].partitions[0].leader == preferred


def test_election_of_every_partition_lists_only_what_moved(bootstrap, admin, new_topic):
    topic = new_topic(partitions=2, replication_factor=3)
    wait_for(lambda: all(len(p.isr) == 3 for p in admin.describe_topics([topic])[topic].partitions), 60, what="isr")
    preferred = rotate_preferred_leader(admin, topic, 1)
    response = _elect(bootstrap, 2, None)
    assert response.error_code == NONE
    # Other tests' topics may be mid-election too; this topic's answer is exact.
    assert {tp: code for tp, code in _answers(response).items() if tp[0] == topic} == {(topic, 1): NONE}
    assert ELECTION_NOT_NEEDED not in _answers(response).values()
    assert admin.describe_topics([topic])[topic].partitions[1].leader == preferred


def test_unclean_election_of_a_led_partition_is_not_needed(bootstrap, new_topic):
    topic = new_topic(partitions=1, replication_factor=3)
    response = _elect(bootstrap, 2, [{"topic": topic, "partitions": [0]}], election_type=1)
    assert _answers(response) == {(topic, 0): ELECTION_NOT_NEEDED}
