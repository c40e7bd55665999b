"""Running the JVM programs and Kafka's command-line tools from the tests.

One JVM per call, started as Kafka's shell scripts start theirs (``java -cp <classpath>
<main class> args``), with Log4j2 kept at WARN on stderr (``log4j2.properties``) and
settings that suit short runs on a shared machine: a small heap, the serial collector and
the C1 compiler only (a JVM then starts in about a second and takes little CPU). Programs
answer with one JSON object per line on stdout (``Json.emit`` in the Java sources).
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOG_CONFIG = HERE / "log4j2.properties"
JVM_OPTIONS = (
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    f"-Dlog4j2.configurationFile={LOG_CONFIG}",
)


def run_java(
    classpath: str,
    main: str,
    args: Sequence[str],
    timeout: float = 240,
    stdin: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``main`` on ``classpath``; with ``check``, fail the test (showing stderr's tail)
    when it exits non-zero."""
    result = subprocess.run(
        ["java", *JVM_OPTIONS, "-cp", classpath, main, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        tail = "\n".join((result.stderr or "").strip().splitlines()[-30:])
        raise AssertionError(f"{main} {' '.join(args)} exited {result.returncode}:\n{tail}")
    return result


def start_java(classpath: str, main: str, args: Sequence[str]) -> subprocess.Popen[str]:
    """Start ``main`` in the background (stdout and stderr to pipes); the caller stops it."""
    return subprocess.Popen(
        ["java", *JVM_OPTIONS, "-cp", classpath, main, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def events(stdout: str) -> dict[str, list[dict]]:
    """A program's JSON lines, grouped by their ``event`` name, in order."""
    out: dict[str, list[dict]] = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            out.setdefault(item.pop("event"), []).append(item)
    return out


def b64(value: str | None) -> bytes | None:
    """A byte array as the programs print it (base64; null stays None)."""
    return None if value is None else base64.b64decode(value)


# Kafka's command-line tools: the script's name -> the main class it runs (Kafka 4.x's
# bin/*.sh, every one of these a class in kafka-tools).
KAFKA_TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
}
