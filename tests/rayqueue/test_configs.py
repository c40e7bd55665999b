"""The shipped TOML files in configs/: they parse, use only known keys, and launch."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.config import BROKER_CONFIG, broker_config, load_toml
from storage.config import LOG_CONFIG
from tests.helpers import SMALL_INTERNAL_TOPICS

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))
TOPIC_SPEC_KEYS = {"partitions", "replication.factor"}


def test_the_shipped_configs_are_there():
    assert {p.name for p in CONFIGS} >= {"local.toml", "cluster.toml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_parses_with_only_known_broker_keys(path):
    values = load_toml(path)
    topics = values.pop("topics", {})
    unknown = sorted(set(values) - set(BROKER_CONFIG.keys))
    assert not unknown, f"{path.name}: not broker keys: {unknown}"
    # The file's values set what they say (no silent fallback to a default).
    cfg = broker_config(values)
    for key, value in values.items():
        # As the key's type reads it (a list key written "a,b" is the tuple of its items).
        assert cfg[key] == BROKER_CONFIG.keys[key].convert(value), key
    for name, spec in topics.items():
        assert isinstance(spec.get("partitions", 1), int) and isinstance(spec.get("replication.factor", 1), int), name
        LOG_CONFIG.parse({k: v for k, v in spec.items() if k not in TOPIC_SPEC_KEYS})


def test_topic_tables_are_read_with_kafka_keys(tmp_path):
    path = tmp_path / "with-topics.toml"
    path.write_text(
        'log.dirs = "/tmp/x"\n[topics.events]\npartitions = 4\nreplication.factor = 1\nretention.ms = 1000\n'
        'cleanup.policy = "compact"\n'
    )
    values = load_toml(path)
    assert values["log.dirs"] == "/tmp/x"
    assert values["topics"] == {
        "events": {"partitions": 4, "replication.factor": 1, "retention.ms": 1000, "cleanup.policy": "compact"}
    }


@pytest.mark.parametrize("name", ["local.toml", "cluster.toml"])
def test_launch_accepts_the_config(cluster, tmp_path, name):
    """rayqueue.launch takes the file as it is (data dir and namespace moved aside)."""
    import rayqueue

    path = next(p for p in CONFIGS if p.name == name)
    namespace = f"rayqueue-config-{path.stem}"
    # One partition per internal topic: each is a replica in each of its brokers (cluster.toml's
    # 12 + 12 at RF 3 are 72), and this test is about the file. Its [topics.*] are checked by the
    # parsing tests; creating them here would open dozens of replicas for nothing.
    handle = rayqueue.launch(
        path,
        log_dirs=str(tmp_path),
        rayqueue_namespace=namespace,
        create_topics=False,
        **SMALL_INTERNAL_TOPICS,
    )
    try:
        info = handle.describe()
        assert len(info["brokers"]) == load_toml(path)["rayqueue.num.brokers"]
        assert handle.namespace == namespace
        assert handle.bootstrap_servers == ""  # no listeners set: no gateways (the files leave them commented)
    finally:
        handle.shutdown(delete_data=True)


def test_launch_creates_the_topics_of_the_file(cluster, tmp_path):
    import rayqueue

    config = tmp_path / "with-topics.toml"
    config.write_text(
        'rayqueue.num.brokers = 1\n[topics."from-file"]\npartitions = 2\nreplication.factor = 1\n"retention.ms" = 60000\n'
    )
    handle = rayqueue.launch(config, log_dirs=str(tmp_path / "data"), rayqueue_namespace="rayqueue-config-topics")
    try:
        admin = handle.admin()
        meta = admin.describe_topics(["from-file"])["from-file"]
        assert len(meta.partitions) == 2
        assert admin.describe_configs("from-file")["retention.ms"] == (60000, "DYNAMIC_TOPIC_CONFIG")
    finally:
        handle.shutdown(delete_data=True)
