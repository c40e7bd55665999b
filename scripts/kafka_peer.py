"""Apache Kafka itself as the benchmark peer: KRaft brokers from Maven's jars on free loopback ports.

``KafkaPeer(brokers=1)`` is one combined-mode node (``process.roles=broker,controller``);
``KafkaPeer(brokers=3)`` is a three-node KRaft quorum of such nodes, each with its own ports
and directories. The jars are the ``kafka`` set of ``tests/jvm/pins.toml``, resolved by Maven
into ``~/.m2`` (``tests.jvm.maven``); nothing else is downloaded. Each node's log directory is
formatted with Kafka's ``kafka-storage format`` (``kafka.tools.StorageTool``) and the node runs
as ``kafka-server-start`` runs it: ``kafka.Kafka server.properties`` with that script's heap
(``-Xmx1G -Xms1G``), ``kafka-run-class``'s G1 options, a GC log and a file log.

    with KafkaPeer(brokers=3) as kafka:
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap_servers})

The broker runs on Kafka's defaults except for what ``broker_properties`` lists (addresses,
directories, the internal topics' replication on one node, and
``group.initial.rebalance.delay.ms=0`` as Kafka's quickstart config sets it and as rayqueue
defaults). Kafka's tools (``ProducerPerformance``, ``ConsumerPerformance``, ...) run with
``run_tool``. ``python scripts/kafka_peer.py [--brokers 3]`` starts a peer, prints its
bootstrap servers and stops it on Ctrl-C.
"""

from __future__ import annotations

import base64
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: tests.jvm.maven lives in the checkout
    sys.path.insert(0, str(ROOT))

from tests.jvm import maven  # noqa: E402

KAFKA_SET = "kafka"

# kafka-server-start.sh's KAFKA_HEAP_OPTS and kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS
# and KAFKA_JMX_OPTS (no port: JMX stays local), as the scripts start the broker.
SERVER_HEAP = ("-Xmx1G", "-Xms1G")
JVM_PERFORMANCE_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
JMX_OPTS = (
    "-Dcom.sun.management.jmxremote",
    "-Dcom.sun.management.jmxremote.authenticate=false",
    "-Dcom.sun.management.jmxremote.ssl=false",
)
# kafka-run-class.sh's default heap for a tool; the perf-test scripts raise it to 512 MB.
TOOL_HEAP = ("-Xmx256M",)
PERF_TOOL_HEAP = ("-Xmx512M",)

# Kafka's own log4j2 settings for the broker, in properties form: INFO into server.log.
_SERVER_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""
# The tools log WARN to stderr, as Kafka's tools-log4j2.yaml has them.
_TOOL_LOG4J = """\
status = warn
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = STDERR
"""


class KafkaPeerError(RuntimeError):
    """A Kafka node would not format, start, answer or stop; the message ends with its log's tail."""


def classpath() -> str:
    """The pinned Kafka jars (broker, tools, clients, the log binding) as a classpath into
    Maven's cache."""
    return maven.classpath(KAFKA_SET)


def kafka_version() -> str:
    """The pinned Kafka version (``pins.toml``)."""
    return maven.versions()["kafka"]


def free_port() -> int:
    """A port nothing listens on right now (bound to port 0 and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def random_cluster_id() -> str:
    """A KRaft cluster id as ``kafka-storage random-uuid`` prints it (Kafka's Uuid, URL-safe
    base64 without padding; Kafka draws again when it would start with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def broker_properties(
    node_id: int, port: int, controller_port: int, voters: str, data_dir: Path, nodes: int
) -> dict[str, str]:
    """``server.properties`` of one combined-mode node: Kafka's defaults but for these keys."""
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": (
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
        ),
        "log.dirs": str(data_dir),
        # Kafka's quickstart config sets 0 "for a better out-of-the-box experience for
        # development and testing" (the default is 3000); rayqueue's default is 0 too, and no
        # benchmark times a group's first join.
        "group.initial.rebalance.delay.ms": "0",
    }
    if nodes < 3:
        # The internal topics default to RF 3 (min ISR 2): one node cannot hold them.
        props.update(
            {
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
                "share.coordinator.state.topic.replication.factor": "1",
                "share.coordinator.state.topic.min.isr": "1",
            }
        )
    return props


# Every key broker_properties may set on top of Kafka's defaults, and why (the benchmark prints it).
CONFIG_CHANGES = {
    "listeners/advertised.listeners/controller.*": "free loopback ports, one KRaft combined-mode node per broker",
    "group.initial.rebalance.delay.ms": "0 (Kafka's quickstart config; rayqueue's default)",
    "offsets/transaction/share internal topics RF, min ISR": "1 on a single node (Kafka's quickstart config)",
}


@dataclass
class KafkaNode:
    """One running (or stopped) KRaft node: its id, ports, directory and JVM process."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen | None = None
    log_file: Any = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs."""
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    @property
    def server_log(self) -> Path:
        """Kafka's own log of this node."""
        return self.directory / "server.log"

    def port_taken(self) -> bool:
        """Whether the node failed because one of its ports was taken (its log says so)."""
        return any(
            path.exists() and "Address already in use" in path.read_text(errors="replace")
            for path in (self.directory / "console.out", self.server_log)
        )

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the node's console output and server.log."""
        out = []
        for path in (self.directory / "console.out", self.server_log):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path.name} (node {self.node_id}) ---\n" + "\n".join(text))
        return "\n".join(out)


def _java_command(heap: tuple[str, ...], log4j: Path, cp: str, main: str, *args: str, gc_log: Path | None = None):
    cmd = ["java", *heap, *JVM_PERFORMANCE_OPTS]
    if gc_log is not None:  # kafka-server-start.sh passes -loggc
        cmd.append(f"-Xlog:gc*:file={gc_log}:time,tags:filecount=10,filesize=100M")
    cmd += [*JMX_OPTS, f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={log4j.parent}"]
    return [*cmd, "-cp", cp, main, *args]


class KafkaPeer:
    """A Kafka cluster of ``brokers`` combined-mode KRaft nodes (1 or 3) in a temp directory.

    ``start()`` (or ``with``) formats and starts every node and waits until each one answers
    a Metadata request; ``stop()`` sends SIGTERM (Kafka's controlled shutdown), SIGKILLs what
    is left after ``stop_timeout_s`` and removes the directories.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        overrides: dict[str, str] | None = None,
        heap: tuple[str, ...] = SERVER_HEAP,
        start_timeout_s: float = 180.0,
        stop_timeout_s: float = 30.0,
        root: str | Path | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError("a Kafka peer needs at least one broker")
        self.brokers = brokers
        self.overrides = dict(overrides or {})
        self.heap = tuple(heap)
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._root_arg = root
        self.root: Path | None = None
        self.nodes: list[KafkaNode] = []
        self.cluster_id = random_cluster_id()

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> KafkaPeer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> KafkaPeer:
        """Format and start every node; returns once all of them answer. Raises KafkaPeerError
        (with the nodes' log tails) if one exits or does not answer within ``start_timeout_s``;
        whatever was started is stopped and removed first."""
        cp = classpath()
        self.root = Path(self._root_arg or tempfile.mkdtemp(prefix="kafka-peer-"))
        try:
            # A port taken between choosing and binding it (the machine is shared) makes a node
            # exit at once: choose fresh ports and try again.
            for attempt in range(3):
                self._create_nodes()
                self._format(cp)
                for node in self.nodes:
                    self._launch(node, cp)
                try:
                    self._wait_ready()
                    return self
                except KafkaPeerError:
                    if attempt == 2 or not any(n.port_taken() for n in self.nodes):
                        raise
                    self._kill_nodes()
            raise AssertionError("unreachable")
        except BaseException:
            self.stop()
            raise

    def _create_nodes(self) -> None:
        assert self.root is not None
        ports = [(free_port(), free_port()) for _ in range(self.brokers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        self.nodes = []
        for i, (port, cport) in enumerate(ports):
            directory = self.root / f"node-{i + 1}"
            shutil.rmtree(directory, ignore_errors=True)
            (directory / "data").mkdir(parents=True)
            node = KafkaNode(i + 1, port, cport, directory)
            props = broker_properties(node.node_id, port, cport, voters, directory / "data", self.brokers)
            props.update(self.overrides)
            (directory / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            (directory / "log4j2.properties").write_text(_SERVER_LOG4J.format(log=directory / "server.log"))
            self.nodes.append(node)

    def _format(self, cp: str) -> None:
        """``kafka-storage format -t <cluster id> -c server.properties`` for every node, at once."""
        running = []
        for node in self.nodes:
            log4j = node.directory / "tools-log4j2.properties"
            log4j.write_text(_TOOL_LOG4J)
            cmd = _java_command(
                TOOL_HEAP,
                log4j,
                cp,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(node.directory / "server.properties"),
            )
            running.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        failures = []
        for node, process in running:
            try:
                out, _ = process.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()
                out, _ = process.communicate()
            if process.returncode != 0:
                failures.append(f"node {node.node_id} (exit {process.returncode}):\n{out}")
        if failures:
            raise KafkaPeerError("kafka-storage format failed for " + "\n".join(failures))

    def _launch(self, node: KafkaNode, cp: str) -> None:
        cmd = _java_command(
            self.heap,
            node.directory / "log4j2.properties",
            cp,
            "kafka.Kafka",
            str(node.directory / "server.properties"),
            gc_log=node.directory / "kafkaServer-gc.log",
        )
        node.log_file = open(node.directory / "console.out", "wb")  # noqa: SIM115 - closed in stop()
        node.process = subprocess.Popen(
            cmd, stdout=node.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def _wait_ready(self) -> None:
        """Until every node is alive and a Metadata request names all of them as brokers."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.start_timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        seen: set[int] = set()
        while True:
            for node in self.nodes:
                if node.process is not None and node.process.poll() is not None:
                    raise KafkaPeerError(
                        f"Kafka node {node.node_id} exited with {node.process.returncode} while starting:\n"
                        + node.log_tail()
                    )
            try:
                seen = set(admin.list_topics(timeout=2).brokers)
            except Exception:  # noqa: BLE001 - not answering yet (KafkaException): ask again
                seen = set()
            if seen >= {n.node_id for n in self.nodes}:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(n.log_tail() for n in self.nodes)
                raise KafkaPeerError(
                    f"Kafka ({self.brokers} nodes) did not answer within {self.start_timeout_s:.0f}s "
                    f"(brokers seen: {sorted(seen)}):\n{tails}"
                )
            time.sleep(0.2)

    def _kill_nodes(self) -> None:
        """SIGTERM every node at once (their controlled shutdowns overlap), SIGKILL the rest."""
        running = [n for n in self.nodes if n.process is not None and n.process.poll() is None]
        for node in running:
            node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for node in running:
            try:
                node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(30)
        for node in self.nodes:
            if node.log_file is not None:
                node.log_file.close()
                node.log_file = None

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after ``stop_timeout_s``) and remove the directory."""
        self._kill_nodes()
        if self.root is not None and self._root_arg is None:
            shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    # -- what clients and benchmarks need ----------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every node's PLAINTEXT listener."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def pids(self) -> list[int]:
        """The pids of the running JVMs (one per node)."""
        return [n.pid for n in self.nodes if n.pid is not None]

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node (a crash), leaving its directory."""
        node = next(n for n in self.nodes if n.node_id == node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait(30)


def run_tool(
    main_class: str,
    args: list[str],
    *,
    heap: tuple[str, ...] = PERF_TOOL_HEAP,
    timeout_s: float = 900.0,
    work_dir: str | Path | None = None,
) -> subprocess.CompletedProcess:
    """Run one of Kafka's tools (``org.apache.kafka.tools.ProducerPerformance``, ...) as its
    script does (``kafka-run-class``'s JVM options), WARN logging to stderr; returns the
    finished process (text output). Raises KafkaPeerError if it fails or outlives ``timeout_s``."""
    cp = classpath()
    with tempfile.TemporaryDirectory(prefix="kafka-tool-", dir=work_dir) as tmp:
        log4j = Path(tmp) / "tools-log4j2.properties"
        log4j.write_text(_TOOL_LOG4J)
        cmd = _java_command(heap, log4j, cp, main_class, *args)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise KafkaPeerError(f"{main_class} ran past {timeout_s:.0f}s: {exc.stdout!r} {exc.stderr!r}") from exc
    if done.returncode != 0:
        raise KafkaPeerError(f"{main_class} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1, choices=[1, 3])
    args = parser.parse_args(argv)
    with KafkaPeer(args.brokers) as peer:
        print(f"Kafka {kafka_version()} ({args.brokers} node(s)) at {peer.bootstrap_servers}; pids {peer.pids()}")
        print("Ctrl-C stops it")
        try:
            while all(n.pid is not None for n in peer.nodes):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
