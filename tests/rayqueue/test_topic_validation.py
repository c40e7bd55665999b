"""Bad topic requests at the controller: Kafka's error for each, nothing created, nothing crashed.

Partition counts and replication factors follow KIP-464 (None or -1: the broker default);
topic names Kafka's rules (and its '.'/'_' collision check); topic configs are checked key by
key, value by value, and between keys, before anything is written.
"""

from __future__ import annotations

import itertools
import string

import pytest
import ray
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from actors.config import BROKER_CONFIG
from rayqueue.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    PolicyViolationError,
    TopicAlreadyExistsError,
)
from storage.config import LOG_CONFIG

_names = itertools.count()


def fresh(prefix: str = "tv") -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture
def topics(admin):
    """Names handed out by a test; whichever of them exist at the end are deleted."""
    made: list[str] = []

    def name(prefix: str = "tv") -> str:
        made.append(fresh(prefix))
        return made[-1]

    yield name
    existing = set(admin.list_topics())
    for topic in made:
        if topic in existing:
            admin.delete_topic(topic)


def controller_epoch(cluster) -> int:
    return cluster.describe()["controller_epoch"]


@pytest.mark.parametrize("partitions", [0, -2, -1000, 2**31, 1.0, "3", True])
def test_a_partition_count_that_is_not_positive_is_refused(admin, topics, partitions):
    name = topics()
    with pytest.raises(InvalidPartitionsError):
        admin.create_topic(name, partitions, 1)
    assert name not in admin.list_topics()


@pytest.mark.parametrize("rf", [0, -2, -7, 2.0, "1", False])
def test_a_replication_factor_that_is_not_positive_is_refused(admin, topics, rf):
    name = topics()
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topic(name, 1, rf)
    assert name not in admin.list_topics()


@pytest.mark.parametrize("partitions, rf", [(-1, -1), (None, None), (-1, None), (None, -1)])
def test_minus_one_or_none_take_the_broker_defaults(cluster, admin, topics, partitions, rf):
    """KIP-464: -1 asks for num.partitions / default.replication.factor."""
    name = topics()
    meta = admin.create_topic(name, partitions, rf)
    assert len(meta.partitions) == cluster.config["num.partitions"] == BROKER_CONFIG.keys["num.partitions"].default
    assert {len(p.replicas) for p in meta.partitions} == {cluster.config["default.replication.factor"]}


def test_a_replication_factor_above_the_live_brokers_is_refused(cluster, admin, topics):
    brokers = len(cluster.describe()["brokers"])
    with pytest.raises(InvalidReplicationFactorError, match="available brokers"):
        admin.create_topic(topics(), 1, brokers + 1)
    admin.stop_broker(brokers - 1)
    try:
        # Registered but stopped: Kafka counts only the brokers that can take a replica.
        name = topics()
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topic(name, 1, brokers)
        assert name not in admin.list_topics()
        assert len(admin.create_topic(topics(), 1, brokers - 1).partitions[0].replicas) == brokers - 1
    finally:
        admin.start_broker(brokers - 1)


def test_a_request_for_too_many_partitions_is_a_policy_violation(admin, topics):
    """Kafka's controller refuses more than 10,000 new partitions in one request, and so does
    rayqueue's: opening that many replicas would hold the controller for minutes."""
    name = topics()
    with pytest.raises(PolicyViolationError, match="excessively large"):
        admin.create_topic(name, 10_001, 1)
    assert name not in admin.list_topics()
    admin.create_topic(name, 1, 1)
    with pytest.raises(PolicyViolationError):
        admin.create_partitions(name, 1_000_000)
    assert len(admin.describe_topics([name])[name].partitions) == 1


def test_create_partitions_must_grow_the_topic(admin, topics):
    name = topics()
    admin.create_topic(name, 2, 1)
    for total in (2, 1, 0, -1, "3", 3.0):
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions(name, total)
    assert len(admin.describe_topics([name])[name].partitions) == 2


def test_create_partitions_checks_an_explicit_assignment(cluster, admin, topics):
    name = topics()
    admin.create_topic(name, 1, 2)
    brokers = sorted(b.broker_id for b in cluster.describe()["brokers"])
    # Two new partitions need two replica lists, each as long as the topic's replication factor.
    for assignment in ([[brokers[0], brokers[1]]], [[brokers[0]], [brokers[1]]], [[brokers[0], 99], [0, 1]], [[]]):
        with pytest.raises(InvalidReplicaAssignmentError):
            admin.create_partitions(name, 3, assignment)
    assert len(admin.describe_topics([name])[name].partitions) == 1
    grown = admin.create_partitions(name, 3, [[brokers[1], brokers[2]], [brokers[2], brokers[0]]])
    assert [list(p.replicas) for p in grown.partitions[1:]] == [[brokers[1], brokers[2]], [brokers[2], brokers[0]]]


def test_an_explicit_assignment_leaves_the_counts_unset(admin, topics):
    """Kafka: with a manual assignment numPartitions and replicationFactor must be -1."""
    name = topics()
    with pytest.raises(InvalidRequestError):
        admin.create_topic(name, 2, None, replica_assignment=[[0]])
    with pytest.raises(InvalidReplicaAssignmentError):
        admin.create_topic(name, replica_assignment=[[0, 0]])
    with pytest.raises(InvalidReplicaAssignmentError):
        admin.create_topic(name, replica_assignment=[["0"]])
    assert name not in admin.list_topics()
    assert len(admin.create_topic(name, -1, -1, replica_assignment=[[0], [1]]).partitions) == 2


def test_names_that_collide_in_metrics_are_refused(admin, topics):
    """Kafka's Topic.hasCollision: 'a.b' and 'a_b' would share metric names."""
    dotted = topics("tv.dot")
    admin.create_topic(dotted, 1, 1)
    underscored = dotted.replace(".", "_")
    with pytest.raises(InvalidTopicError, match="collides"):
        admin.create_topic(underscored, 1, 1)
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topic(dotted, 1, 1)
    assert underscored not in admin.list_topics()


def test_config_values_are_checked_before_anything_changes(admin, topics):
    name = topics()
    admin.create_topic(name, 1, 1, configs={"retention.ms": 1000})
    bad = [
        {"segment.bytes": 2**31},  # above Kafka's int
        {"retention.ms": 2**63},  # above Kafka's long
        {"min.cleanable.dirty.ratio": float("nan")},
        {"min.cleanable.dirty.ratio": True},
        {"cleanup.policy": {"compact": 1}},
        {"cleanup.policy": [1]},
        {"compression.type": ["lz4"]},
        {"flush.messages": b"1"},
        {"retention.ms": None},
        {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5},
        {5: "x"},
        {"retention.ms": 5, "no.such.key": 1},
    ]
    for configs in bad:
        with pytest.raises(InvalidConfigError):
            admin.alter_configs(name, configs)
        with pytest.raises(InvalidConfigError):
            admin.create_topic(fresh(), 1, 1, configs=configs)
    with pytest.raises(InvalidConfigError):
        admin.alter_configs(name, delete_configs=[3])
    assert admin.describe_topics([name])[name].configs == {"retention.ms": 1000}


def test_an_override_equal_to_kafkas_default_is_kept(cluster, admin, topics):
    """A topic override wins over the broker's default even when it equals Kafka's default."""
    name = topics()
    kafka_default = LOG_CONFIG.keys["retention.ms"].default
    meta = admin.create_topic(name, 1, 1, configs={"retention_ms": str(kafka_default)})
    assert meta.configs == {"retention.ms": kafka_default}
    assert admin.describe_configs(name)["retention.ms"] == (kafka_default, "DYNAMIC_TOPIC_CONFIG")


# -- property: arbitrary names and configs ------------------------------------------------------

_LEGAL = string.ascii_letters + string.digits + "._-"
_ERRORS = (
    InvalidTopicError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    PolicyViolationError,
    TopicAlreadyExistsError,
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=4),
)
_values = st.one_of(
    _scalars,
    st.lists(st.sampled_from(["delete", "compact", "lz4", "x", ""]), max_size=3),
    st.sampled_from(["delete", "compact", "compact,delete", "CreateTime", "LogAppendTime", "gzip", "true", "-1", "0"]),
)
_keys = st.one_of(
    st.sampled_from(sorted(LOG_CONFIG.keys)),
    st.sampled_from(sorted(k.replace(".", "_") for k in LOG_CONFIG.keys)),
    st.text(_LEGAL, max_size=20),
    st.integers(),
)
_names_strategy = st.one_of(
    st.text(_LEGAL, min_size=1, max_size=12),
    st.text(max_size=12),
    st.sampled_from([".", "..", "x" * 249, "x" * 250, "a/b", "../x", "\x00", "é"]),
    st.integers(),
)


@pytest.fixture(scope="module")
def survivors(cluster, admin):
    """Topics made before the property runs: the first two must come out of it untouched; the
    last one takes the config changes of the examples that create no topic."""
    made = {}
    for name, configs in (
        (fresh("tv-keep"), {}),
        (fresh("tv.keep"), {"retention.ms": 60_000}),
        (fresh("tv-alter"), {}),
    ):
        made[name] = admin.create_topic(name, 2, 1, configs=configs)
    yield made
    for name in made:
        admin.delete_topic(name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=_names_strategy,
    partitions=st.one_of(st.none(), st.sampled_from([-1, 0, 1, 2, -2, 2**31]), st.text(max_size=2)),
    rf=st.one_of(st.none(), st.sampled_from([-1, 0, 1, 2, 4, -3]), st.floats(max_value=3)),
    configs=st.one_of(st.dictionaries(_keys, _values, max_size=4), st.lists(st.integers(), max_size=2)),
    alter=st.dictionaries(_keys, _values, max_size=3),
)
def test_any_topic_request_is_done_or_refused_by_name(cluster, admin, survivors, name, partitions, rf, configs, alter):
    """Whatever the input, the controller answers with the result or a Kafka-named error; it
    never crashes or restarts, and the topics made before stay as they were."""
    epoch = controller_epoch(cluster)
    before = set(admin.list_topics())
    assume(name not in survivors)
    created = False
    try:
        meta = admin.create_topic(name, partitions, rf, configs=configs)
        created = True
    except _ERRORS as exc:
        assert isinstance(exc, KafkaError) and exc.code > 0
        assert isinstance(name, str) and name in before or name not in admin.list_topics()
    else:
        # Accepted: the topic is what was asked, the configs as converted.
        expected = LOG_CONFIG.convert_overrides(configs)
        assert meta.configs == {k: list(v) if isinstance(v, tuple) else v for k, v in expected.items()}
        assert len(meta.partitions) == (partitions if partitions not in (None, -1) else 1)
    target = name if created else list(survivors)[-1]
    configs_before = admin.describe_topics([target])[target].configs
    try:
        admin.alter_configs(target, alter)
    except (InvalidConfigError, InvalidRequestError) as exc:
        # INVALID_CONFIG, or INVALID_REQUEST for a key given twice (one key in two spellings,
        # "file.delete.delay.ms" and "file_delete_delay_ms"), as Kafka refuses duplicate keys.
        assert exc.code in (40, 42)
        assert admin.describe_topics([target])[target].configs == configs_before
    if created:
        admin.delete_topic(name)
    # Nothing crashed: same controller life, the earlier topics as they were.
    assert controller_epoch(cluster) == epoch
    assert ray.get(cluster.controller.list_topics.remote(), timeout=30) is not None
    now = admin.describe_topics(list(survivors))
    for topic, meta in survivors.items():
        assert now[topic].topic_id == meta.topic_id
        assert len(now[topic].partitions) == len(meta.partitions)
        if topic != list(survivors)[-1]:
            assert now[topic].configs == meta.configs
