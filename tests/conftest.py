"""Shared fixtures: one Ray instance and one rayqueue cluster per test session.

Storage tests use none of these and never start Ray.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="module", params=["pure", "compiled"])
def twin(request):
    """Run the module's tests over both twins of the hot paths (``tests/twins.py``).

    Request it with ``pytestmark = pytest.mark.usefixtures("twin")``. The compiled twin must
    be built (``make setup``); with RAYQUEUE_NO_EXTENSIONS=1 its runs are skipped.
    """
    from storage import extensions
    from tests import twins

    if request.param == "compiled" and not twins.compiled_available():
        if extensions.NO_EXTENSIONS:
            pytest.skip("RAYQUEUE_NO_EXTENSIONS is set: only the pure-Python twins run")
        pytest.fail(f"the compiled extensions are not built ({extensions.ACTIVE}); run `make setup`")
    with twins.use(request.param, request.module):
        yield request.param


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def metrics_export_port() -> int:
    """The port where the session Ray's metrics agent serves Prometheus (``/metrics``)."""
    return _free_port()


@pytest.fixture(scope="session")
def ray_session(metrics_export_port):
    """One embedded Ray for the whole session (8 logical CPUs on this 2-core machine), its
    metrics agent serving Prometheus on a free port (other test runs share the machine)."""
    import ray

    # address="local": always a fresh Ray of our own, never one that happens to run here.
    ray.init(
        address="local",
        num_cpus=8,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
        _metrics_export_port=metrics_export_port,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def cluster(ray_session):
    """One rayqueue cluster (3 brokers on the local node) for the session; each broker's
    Kafka protocol gateway listens on a free port (``cluster.bootstrap_servers``)."""
    import rayqueue
    from tests.helpers import SMALL_INTERNAL_TOPICS

    root = tempfile.mkdtemp(prefix="rayqueue-test-")
    handle = rayqueue.launch(
        log_dirs=root,
        log_retention_check_interval_ms=1000,
        listeners="PLAINTEXT://127.0.0.1:0",
        # KIP-848's members heartbeat every second (Kafka's default is 5 s): the consumer
        # protocol's tests reconcile in a few seconds, not tens.
        group_consumer_heartbeat_interval_ms=1000,
        group_consumer_min_heartbeat_interval_ms=1000,
        **SMALL_INTERNAL_TOPICS,
    )
    yield handle
    handle.shutdown(delete_data=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def admin(cluster):
    """An Admin client on the session cluster."""
    return cluster.admin()


# Replica placements (rayqueue.broker.placement) the failover cluster runs under: the
# default, one host actor per broker, and the design's one actor per replica.
FAILOVER_PLACEMENTS = ("broker", "replica")


@pytest.fixture(scope="session", params=FAILOVER_PLACEMENTS)
def failover_cluster(request, ray_session):
    """A 3-broker cluster of its own (gateways on free ports) for the tests that kill brokers,
    so that the session cluster's logic tests never lose one; once per replica placement
    (pytest runs every test of one placement, then the other's). A test limited to one
    placement parametrizes it: ``@pytest.mark.parametrize("failover_cluster", ["broker"],
    indirect=True)``."""
    import rayqueue
    from tests.helpers import SMALL_INTERNAL_TOPICS

    placement = request.param
    root = tempfile.mkdtemp(prefix=f"rayqueue-failover-{placement}-")
    handle = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace=f"rayqueue-failover-{placement}",
        rayqueue_broker_placement=placement,
        log_retention_check_interval_ms=1000,
        listeners="PLAINTEXT://127.0.0.1:0",
        **SMALL_INTERNAL_TOPICS,
    )
    yield handle
    handle.shutdown(delete_data=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def failover_admin(failover_cluster):
    """An Admin client on the failover cluster, once it is whole again: every partition led
    and in sync (a previous test's dead broker has come back)."""
    from tests.helpers import wait_for

    def whole() -> bool:
        meta = failover_cluster.metadata()
        return all(not p.offline and not p.under_replicated for t in meta.topics.values() for p in t.partitions)

    wait_for(whole, timeout=120, what="the failover cluster whole again")
    return failover_cluster.admin()


@pytest.fixture
def failover_topic(failover_admin, request):
    """``new_topic`` on the failover cluster: ``failover_topic(partitions=1, **configs) -> name``."""
    yield from _topics(failover_admin, request)


_topic_ids = itertools.count()


def _topics(admin, request):
    """A topic maker for one test (``make(partitions=1, replication_factor=None, **configs)
    -> name``, named after the test), then the deletion of what it made."""
    created: list[str] = []

    def make(partitions: int = 1, replication_factor: int | None = None, **configs) -> str:
        base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
        name = f"{base}-{next(_topic_ids)}"
        admin.create_topic(
            name, partitions, replication_factor, configs={k.replace("_", "."): v for k, v in configs.items()}
        )
        created.append(name)
        return name

    yield make
    for name in created:
        try:
            admin.delete_topic(name)
        except Exception:  # noqa: BLE001 - a test may have deleted it already
            pass


@pytest.fixture
def new_topic(admin, request):
    """Create a uniquely named topic: ``new_topic(partitions=1, **configs) -> name``.

    Topics are deleted at the end of the test so the session cluster stays small.
    """
    yield from _topics(admin, request)


@pytest.fixture(scope="session")
def spark_kafka_jars() -> list[str] | str:
    """Spark's own Kafka connector for the session's Spark: its jars (the pinned
    ``spark-kafka`` set, resolved by Maven as ``make jvm`` does), or why there are none."""
    from rayqueue import spark as rq_spark
    from tests.jvm import maven

    try:
        return rq_spark.kafka_connector_jars(maven.classpath("spark-kafka"))
    except (maven.JvmUnavailable, rq_spark.KafkaConnectorNotFoundError) as exc:
        return str(exc)


@pytest.fixture(scope="session")
def spark_iceberg_jars() -> list[str] | str:
    """Iceberg's Spark runtime and SQLite's JDBC driver for the session's Spark: their jars (the
    pinned ``spark-iceberg`` set, resolved by Maven as ``make jvm`` does), or why there are none."""
    from rayqueue import spark as rq_spark
    from tests.jvm import maven

    try:
        return rq_spark.iceberg_runtime_jars(maven.classpath("spark-iceberg"))
    except (maven.JvmUnavailable, rq_spark.IcebergRuntimeNotFoundError) as exc:
        return str(exc)


@pytest.fixture(scope="session")
def spark(ray_session, spark_kafka_jars, spark_iceberg_jars):
    """One Spark session on the session Ray (RayDP: 1 executor, 1 core, 1 GB), stopped at the
    end; with Spark's Kafka connector and Iceberg's Spark runtime on it when their jars are
    there (RayDP allows one session per process, so their tests share this one)."""
    from rayqueue import spark as rq_spark

    session = rq_spark.session(
        "rayqueue-tests",
        num_executors=1,
        executor_cores=1,
        executor_memory="1G",
        kafka_connector=spark_kafka_jars if isinstance(spark_kafka_jars, list) else False,
        iceberg=spark_iceberg_jars if isinstance(spark_iceberg_jars, list) else False,
    )
    yield session
    rq_spark.stop()


@pytest.fixture
def failover_bootstrap(failover_cluster) -> str:
    """``host:port,...`` of the failover cluster's gateways."""
    servers = failover_cluster.bootstrap_servers
    assert servers, "the failover cluster runs no gateways"
    return servers
