"""Kafka Connect 4.4.0 standalone against rayqueue: FileStreamSource -> topic -> FileStreamSink.

``org.apache.kafka.connect.cli.ConnectStandalone worker.properties source.properties
sink.properties``, as ``connect-standalone.sh`` runs it. The source's offsets (the file
position) live in the worker's offset file (``offset.storage.file.filename``); the sink's
consumer group ``connect-<name>`` commits its offsets to rayqueue. Stopped and restarted, the
worker carries on from both: each line reaches the sink file once, in order.

The file connectors are not served by Maven at 4.4.0; 4.3.1's (``pins.toml``) runs as a
plugin on ``plugin.path``, in its own class loader with its own kafka-clients 4.3.1 beside
it: on the runtime's classpath it fails with ``NoClassDefFoundError:
org/apache/kafka/common/utils/AppInfoParser`` (Kafka 4.4 moved that class to
``common.utils.internals``; the plugin's loader finds it in its own jars, since classes the
runtime lacks fall through to them).
"""

from __future__ import annotations

import os

import pytest

from rayqueue import TopicPartition
from tests.helpers import wait_for
from tests.jvm.records import read_topic

MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"


def properties(path, values: dict) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return str(path)


def sink_lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def connect_worker(jvm_classpath, java_services, cluster, new_topic, tmp_path):
    """``start() -> JavaService``: a standalone worker running the file source and sink over
    one topic (one partition: a file's lines keep their order); every start is the same
    worker (same properties, offset file and sink group)."""
    # The file connectors only on plugin.path (the kafka set no longer has them; checked anyway).
    runtime = [p for p in jvm_classpath("kafka").split(os.pathsep) if "/connect-file/" not in p]
    plugin = tmp_path / "plugins" / "connect-file"
    plugin.mkdir(parents=True)
    for jar in jvm_classpath("connect-file").split(os.pathsep):
        (plugin / os.path.basename(jar)).symlink_to(jar)
    topic = new_topic(partitions=1)
    source_file, sink_file = tmp_path / "source.txt", tmp_path / "sink.txt"
    source_file.write_text("")
    worker = properties(
        tmp_path / "worker.properties",
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.storage.file.filename": tmp_path / "source.offsets",
            "offset.flush.interval.ms": 1000,
            "plugin.path": tmp_path / "plugins",
            # Every plugin has a ServiceLoader manifest: skip the reflective scan (tens of seconds here).
            "plugin.discovery": "service_load",
            "listeners": "http://127.0.0.1:0",  # the REST API on a free port, not 8083
        },
    )
    source = properties(
        tmp_path / "source.properties",
        {"name": "lines-source", "connector.class": "FileStreamSource", "tasks.max": 1, "file": source_file,
         "topic": topic},
    )  # fmt: skip
    sink = properties(
        tmp_path / "sink.properties",
        {"name": "lines-sink", "connector.class": "FileStreamSink", "tasks.max": 1, "file": sink_file,
         "topics": topic},
    )  # fmt: skip
    runs = []

    def start():
        service = java_services(os.pathsep.join(runtime), MAIN, [worker, source, sink], f"connect-{len(runs)}")
        runs.append(service)
        return service.start()

    start.topic, start.source_file, start.sink_file, start.group = topic, source_file, sink_file, "connect-lines-sink"
    return start


def append(path, first: int, last: int) -> list[str]:
    new = [f"line {i}: {'x' * (i % 17)}" for i in range(first, last)]
    with path.open("a") as f:
        f.write("".join(line + "\n" for line in new))
    return new


def test_file_source_and_sink_restart_without_repeats_or_gaps(cluster, connect_worker):
    topic, source_file, sink_file = connect_worker.topic, connect_worker.source_file, connect_worker.sink_file
    tp = TopicPartition(topic, 0)
    admin = cluster.admin()

    def committed() -> int:
        found = admin.list_group_offsets(connect_worker.group, [tp]).get(tp)
        return found.offset if found is not None else -1

    lines = append(source_file, 0, 300)
    worker = connect_worker()
    wait_for(lambda: len(sink_lines(sink_file)) >= 300, timeout=240, interval=1, what="the first 300 lines")
    lines += append(source_file, 300, 400)  # picked up by the running source
    wait_for(lambda: len(sink_lines(sink_file)) >= 400, timeout=120, interval=1, what="lines 300-399")
    wait_for(lambda: committed() == 400, timeout=120, interval=1, what="the sink group's commit")
    assert worker.stop() in (0, 143), worker.tail()

    lines += append(source_file, 400, 650)  # written while the worker is down
    worker = connect_worker()
    wait_for(lambda: len(sink_lines(sink_file)) >= 650, timeout=240, interval=1, what="lines 400-649")
    lines += append(source_file, 650, 700)
    wait_for(lambda: len(sink_lines(sink_file)) >= 700, timeout=120, interval=1, what="lines 650-699")
    wait_for(lambda: committed() == 700, timeout=120, interval=1, what="the sink group's commit")
    assert worker.stop() in (0, 143), worker.tail()

    assert sink_lines(sink_file) == lines  # each line once, in order
    assert [r.value.decode() for r in read_topic(cluster, topic, "read_uncommitted")] == lines
