"""Spark on Ray (RayDP) for rayqueue topics: read, write and micro-batch streaming.

``session()`` starts Spark through RayDP with the settings it needs on Java 17 (see
STACK.md). ``read()`` turns a topic into a DataFrame with exactly the schema of Spark's
own Kafka source, through the Ray Data source and RayDP's Dataset-to-Spark conversion;
``write()`` produces a DataFrame's rows to a topic. ``stream()`` runs a micro-batch loop
from source topics to a sink topic with progress committed per (group, topic, partition).

The other path is Spark's own Kafka connector (``spark-sql-kafka-0-10``) pointed at the
brokers' Kafka protocol gateways: ``session(kafka_connector=True)`` puts its jars on the
session, ``kafka_options(cluster)`` gives the options every ``format("kafka")`` reader and
writer needs, and ``read(..., via="connector")`` reads through it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import ray

from actors import launch as actor_launch
from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from rayqueue import data
from rayqueue.connection import ensure_ray, join_ray
from storage.errors import InvalidConfigError, KafkaError

logger = logging.getLogger(__name__)

# Java 17 closes these packages to reflection; Spark and RayDP's app master need them open.
_OPENS = (
    "java.lang",
    "java.lang.invoke",
    "java.io",
    "java.net",
    "java.nio",
    "java.math",
    "java.text",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)
JAVA_OPTIONS = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions", *(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in _OPENS)]
)
"""The JVM option string Spark on Java 17 needs (driver, executors and RayDP's app master)."""


class JavaNotFoundError(RuntimeError):
    """Spark needs a Java runtime (``java`` on PATH or JAVA_HOME) and none was found."""


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


# -- Spark's own Kafka connector ------------------------------------------------------------

KAFKA_CONNECTOR_JARS_ENV = "RAYQUEUE_SPARK_KAFKA_JARS"
"""Environment variable naming the connector's jars (a ``:``-separated classpath)."""

# What `make jvm` writes in a source checkout: the pinned spark-sql-kafka-0-10 set, resolved
# by Maven (tests/jvm/pins.toml), as a classpath of paths into ~/.m2.
CONNECTOR_CLASSPATH_FILE = Path(__file__).resolve().parent.parent / "build" / "jvm" / "spark-kafka.classpath"
"""The classpath file ``make jvm`` writes for Spark's Kafka connector in a source checkout."""

_CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_"
# <artifact>-<version>.jar, where an artifact may hold digits after a dash (spark-sql-kafka-0-10_2.12)
# and a version is dotted numbers with qualifiers (3.5.7, 1.5.6-10, 2.0.0-RC1).
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d+(?:\.\d+)*(?:[-.][A-Za-z0-9]+)*)\.jar$")


class KafkaConnectorNotFoundError(RuntimeError):
    """Spark's Kafka connector was asked for and its jars were not found or do not fit this PySpark."""


def _artifact(jar: str) -> tuple[str, str]:
    """(artifact, version) of a Maven-named jar file (``kafka-clients-3.4.1.jar``)."""
    m = _VERSIONED_JAR.match(os.path.basename(jar))
    return (m["artifact"], m["version"]) if m else (os.path.basename(jar), "")


def _jar_paths(
    jars: str | Sequence[str] | None, env: str, classpath_file: Path, not_found: RuntimeError
) -> tuple[list[str], str]:
    """The jar paths ``jars`` names (paths, or one ``:``-separated classpath), else ``$env``,
    else ``classpath_file``, and where they came from; raises ``not_found`` when none of the
    three names any, or an error of its class naming the jars that do not exist."""
    where = "the jars argument"
    if jars is None:
        if os.environ.get(env):
            jars, where = os.environ[env], f"${env}"
        elif classpath_file.exists():
            jars, where = classpath_file.read_text().strip(), str(classpath_file)
        else:
            raise not_found
    paths = [p for p in (jars.split(os.pathsep) if isinstance(jars, str) else list(jars)) if p]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise type(not_found)(f"jars named by {where} do not exist: {missing}")
    return paths, where


def kafka_connector_jars(jars: str | Sequence[str] | None = None) -> list[str]:
    """The jars that add Spark's own Kafka connector to a session (for ``spark.jars``).

    Taken from ``jars`` (paths, or one ``:``-separated classpath), else from the
    ``RAYQUEUE_SPARK_KAFKA_JARS`` environment variable (a classpath), else from the
    classpath file ``make jvm`` writes in a source checkout (``build/jvm/spark-kafka.classpath``:
    ``org.apache.spark:spark-sql-kafka-0-10_2.12`` at the pinned PySpark version with its
    dependencies, resolved by Maven). Jars of artifacts PySpark already ships (Hadoop's
    client, Scala, slf4j, snappy, lz4, ...) are left out so that Spark's own versions stay
    the only ones; what remains is the connector, its token provider, kafka-clients and
    commons-pool2. Raises KafkaConnectorNotFoundError when none is found, a jar is missing,
    or the connector's version is not this PySpark's (a mismatch fails later, and obscurely).
    """
    import pyspark

    paths, where = _jar_paths(
        jars,
        KAFKA_CONNECTOR_JARS_ENV,
        CONNECTOR_CLASSPATH_FILE,
        KafkaConnectorNotFoundError(
            "Spark's Kafka connector jars were not found: run `make jvm` in a rayqueue checkout (Maven "
            f"resolves them), set {KAFKA_CONNECTOR_JARS_ENV} to their classpath, or pass them as "
            f"kafka_connector=[...] (org.apache.spark:spark-sql-kafka-0-10_2.12:{pyspark.__version__} "
            "and its dependencies)"
        ),
    )
    connector = [p for p in paths if _artifact(p)[0].startswith(_CONNECTOR_ARTIFACT)]
    if not connector:
        raise KafkaConnectorNotFoundError(f"{where} names no {_CONNECTOR_ARTIFACT}* jar: {paths}")
    version = _artifact(connector[0])[1]
    if version != pyspark.__version__:
        raise KafkaConnectorNotFoundError(
            f"{os.path.basename(connector[0])} is for Spark {version}, this PySpark is {pyspark.__version__}"
        )
    shipped = {_artifact(name)[0] for name in os.listdir(os.path.join(_spark_home(), "jars"))}
    return [p for p in paths if _artifact(p)[0] not in shipped]


# -- Iceberg's Spark runtime (Iceberg topics) -------------------------------------------------

ICEBERG_JARS_ENV = "RAYQUEUE_SPARK_ICEBERG_JARS"
"""Environment variable naming Iceberg's Spark runtime jar (a classpath)."""

ICEBERG_CLASSPATH_FILE = CONNECTOR_CLASSPATH_FILE.parent / "spark-iceberg.classpath"
"""The classpath file ``make jvm`` writes for Iceberg's Spark runtime in a source checkout."""


class IcebergRuntimeNotFoundError(RuntimeError):
    """Iceberg's Spark runtime was asked for and its jars were not found or do not fit this PySpark."""


def iceberg_runtime_jars(jars: str | Sequence[str] | None = None) -> list[str]:
    """The jars that let a session read Iceberg topics' tables (for ``spark.jars``): Iceberg's
    Spark runtime for this PySpark's Spark line (``iceberg-spark-runtime-3.5_2.12``).

    Taken from ``jars`` (paths, or one ``:``-separated classpath), else from
    ``RAYQUEUE_SPARK_ICEBERG_JARS``, else from ``build/jvm/spark-iceberg.classpath`` (``make
    jvm``: the version pinned in tests/jvm/pins.toml, resolved by Maven). Raises
    IcebergRuntimeNotFoundError when none is found, a jar is missing, or the runtime is for
    another Spark line than this PySpark's."""
    import pyspark

    paths, where = _jar_paths(
        jars,
        ICEBERG_JARS_ENV,
        ICEBERG_CLASSPATH_FILE,
        IcebergRuntimeNotFoundError(
            "Iceberg's Spark runtime was not found: run `make jvm` in a rayqueue checkout (Maven resolves "
            f"it), set {ICEBERG_JARS_ENV} to its path, or pass it as iceberg=[...] "
            "(org.apache.iceberg:iceberg-spark-runtime-3.5_2.12)"
        ),
    )
    line = ".".join(pyspark.__version__.split(".")[:2])
    runtimes = [p for p in paths if _artifact(p)[0].startswith("iceberg-spark-runtime-")]
    if not runtimes:
        raise IcebergRuntimeNotFoundError(f"{where} names no iceberg-spark-runtime jar: {paths}")
    if not _artifact(runtimes[0])[0].startswith(f"iceberg-spark-runtime-{line}_"):
        raise IcebergRuntimeNotFoundError(f"{os.path.basename(runtimes[0])} is not for Spark {line} (PySpark's)")
    return paths


def read_table(spark: Any, topic: str, *, cluster: Any = None, dead_letters: bool = False) -> Any:
    """An Iceberg topic's table as a DataFrame, read by Iceberg's Spark runtime at the table's
    latest snapshot (``dead_letters``: the ``<table>~dlq`` table of the records its mode could
    not type). The session needs ``session(iceberg=True)``. For Spark SQL, register it:
    ``read_table(spark, "orders").createOrReplaceTempView("orders")``.

    On the SQL catalog the snapshot is found through the cluster's catalog here (pyiceberg) and
    Spark reads its metadata file, so Spark holds no connection to the catalog (a reader
    holding SQLite open would see an old snapshot, and could hold up the brokers' commits). On
    a REST catalog Spark reads the table through the catalog itself (``iceberg_catalog``)."""
    from rayqueue import iceberg

    cluster = data._cluster_or_connect(cluster)
    table = iceberg.dead_letter_table(topic, cluster) if dead_letters else iceberg.table(topic, cluster)
    if iceberg.settings(cluster).catalog_type == "rest":
        namespace, name = table.name()[-2:]
        return spark.table(f"{iceberg_catalog(spark, cluster)}.`{namespace}`.`{name}`")
    return spark.read.format("iceberg").load(table.metadata_location)


def iceberg_catalog(spark: Any, cluster: Any = None) -> str:
    """Make the cluster's Iceberg REST catalog a catalog of the session (Iceberg's
    ``SparkCatalog`` with ``type=rest``: its URI, credential or token, and for an S3-compatible
    warehouse Iceberg's ``S3FileIO`` with the ``rayqueue.iceberg.s3.*`` settings) and return its
    name: Spark then reads Iceberg topics' tables through the catalog itself, e.g.
    ``spark.table(f"{name}.rayqueue.orders")`` or ``SELECT ... FROM rayqueue.rayqueue.orders``
    (catalog, namespace, table). The catalog caches no table, so each read sees the latest
    snapshot. The session needs ``session(iceberg=True)`` (an S3 warehouse: Iceberg's AWS
    bundle with it, as ``make jvm`` resolves the ``spark-iceberg`` set). Only a REST catalog is
    served to Spark this way (ValueError for the SQL catalog: ``read_table`` reads its tables)."""
    from rayqueue import iceberg

    settings = iceberg.settings(data._cluster_or_connect(cluster))
    if settings.catalog_type != "rest":
        raise ValueError(
            f"the cluster's Iceberg catalog is {settings.catalog_type!r}: Spark reads its tables with read_table"
        )
    prefix = f"spark.sql.catalog.{settings.catalog_name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": settings.catalog_uri,
        f"{prefix}.cache-enabled": "false",
    }
    for key, value in (
        ("credential", settings.credential),
        ("token", settings.token),
        ("oauth2-server-uri", settings.oauth2_server_uri),
        ("warehouse", settings.warehouse),
    ):
        if value:
            conf[f"{prefix}.{key}"] = value
    if settings.s3_endpoint or settings.warehouse.startswith(("s3://", "s3a://")):
        conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        conf[f"{prefix}.client.region"] = settings.s3_region
        for key, value in (
            ("s3.endpoint", settings.s3_endpoint),
            ("s3.access-key-id", settings.s3_access_key_id),
            ("s3.secret-access-key", settings.s3_secret_access_key),
        ):
            if value:
                conf[f"{prefix}.{key}"] = value
        if settings.s3_endpoint:  # an S3-compatible server (MinIO, Ceph, moto): bucket in the path, as pyiceberg's
            conf[f"{prefix}.s3.path-style-access"] = "true"
    for key, value in conf.items():  # Spark loads a catalog from these at its first use
        spark.conf.set(key, value)
    return settings.catalog_name


def _spark_home() -> str:
    import pyspark

    return os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)


def kafka_options(cluster: Any = None, **options: Any) -> dict[str, str]:
    """The options that point Spark's Kafka source and sink at ``cluster``'s gateways.

    ``{"kafka.bootstrap.servers": ...}`` plus ``options`` (Spark's own names, e.g.
    ``subscribe``, ``startingOffsets``, ``topic``, ``kafka.isolation.level``) as strings,
    for ``spark.read/readStream.format("kafka").options(**kafka_options(cluster, subscribe=t))``
    and ``df.write/writeStream.format("kafka").options(**kafka_options(cluster, topic=t))``.
    Raises InvalidConfigError when the cluster has no Kafka listeners.
    """
    cluster = data._cluster_or_connect(cluster)
    servers = cluster.bootstrap_servers
    if not servers:
        raise InvalidConfigError(
            "the cluster has no Kafka protocol listeners (launch it with listeners=..., "
            "e.g. 'PLAINTEXT://127.0.0.1:0'); Spark's Kafka connector needs them"
        )
    return {"kafka.bootstrap.servers": servers, **{k: _option_value(v) for k, v in options.items()}}


def _option_value(value: Any) -> str:
    """A Spark data source option as Spark wants it: JSON for per-partition maps, ``true``/``false``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return json.dumps({str(t): {str(p): int(v) for p, v in parts.items()} for t, parts in value.items()})
    return str(value)


# The log4j2 configuration of Spark's JVMs (warnings and errors to stderr).
LOG4J2_PROPERTIES = Path(__file__).with_name("spark_log4j2.properties")


@contextlib.contextmanager
def _driver_jvm_output_to_log() -> Iterator[Path | None]:
    """Spark's driver JVM, started meanwhile, writes its stdout and stderr to a file in Ray's
    session log directory (``spark-driver-<pid>.log``), as Ray's own workers do, instead of
    the terminal: it runs Ray's Java runtime, whose C++ core logs at INFO to stderr before its
    logging is set up (``GcsClient has no Cluster ID set``), with no setting to stop it. The
    JVM inherits this process's file descriptors 1 and 2 when it starts, so they point at the
    file for that moment only; Spark's errors still reach Python as exceptions."""
    try:
        logs = Path(ray._private.worker._global_node.get_logs_dir_path())  # where Ray keeps its logs
    except AttributeError:  # no Ray node in this process (a Ray Client): leave the terminal
        yield None
        return
    path = logs / f"spark-driver-{os.getpid()}.log"
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield path
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _quiet_raydp_deprecations() -> None:
    """RayDP 1.6.5 reads ``ray.worker.global_worker`` and ``DataFrame.sql_ctx``, which Ray and
    PySpark announce as deprecated on every first use: notices about RayDP's code that a user
    of rayqueue can do nothing about. Those two notices, and only them, are turned off."""
    warnings.filterwarnings("ignore", message=r"DataFrame\.sql_ctx is an internal property", category=UserWarning)
    ray_logger = logging.getLogger("ray")
    if not any(isinstance(f, _RayWorkerNotice) for f in ray_logger.filters):
        ray_logger.addFilter(_RayWorkerNotice())


class _RayWorkerNotice(logging.Filter):
    """Drops Ray's notice that ``ray.worker.*`` is private (RayDP's access, not the user's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("DeprecationWarning: `ray.worker.")


def _join_or_start_ray() -> None:
    """The Ray Spark runs on: this process's, else the one RAY_ADDRESS names, else the one
    running on this machine (where ``rayqueue start`` runs the cluster, as
    :func:`rayqueue.connect` finds it), else an embedded one of this process's own."""
    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS")
    if address and address != "local":
        join_ray(address)
        return
    if address != "local":
        try:
            join_ray("auto")
            return
        except ConnectionError:  # no Ray runs on this machine
            pass
    ensure_ray("local")


# How long a new session waits for the Spark master actor of a stopped one to be gone.
MASTER_GONE_TIMEOUT_S = 60.0


def _wait_for_stopped_master(app_name: str) -> None:
    """Wait until no Spark master actor of ``app_name`` is alive. RayDP names it after the
    application and ``stop_spark`` kills it without waiting, so a session started right after
    ``stop()`` would find the name taken (ActorAlreadyExistsError)."""
    from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

    name = app_name + RAYDP_SPARK_MASTER_SUFFIX
    deadline = time.monotonic() + MASTER_GONE_TIMEOUT_S
    namespace = ray.get_runtime_context().namespace  # RayDP names it in the driver's namespace
    while time.monotonic() < deadline:
        if actor_launch.find_actor(name, namespace) is None:
            return
        time.sleep(0.2)
    raise InvalidConfigError(f"a Spark session named {app_name!r} still runs on this Ray; stop it or pick another name")


def session(
    app_name: str = "rayqueue",
    num_executors: int = 1,
    executor_cores: int = 1,
    executor_memory: str | int = "1G",
    configs: Mapping[str, str] | None = None,
    log_level: str = "WARN",
    kafka_connector: bool | str | Sequence[str] = False,
    iceberg: bool | str | Sequence[str] = False,
) -> Any:
    """Start Spark through RayDP on this process's Ray, else the Ray running on this machine
    (the one ``rayqueue start`` runs), else an embedded one.

    Sets what RayDP needs here: Python workers on this interpreter, the Java 17
    ``--add-opens`` options on driver, executors and app master, no console progress
    bars. ``configs`` override these. ``kafka_connector`` (True, or the jars as for
    ``kafka_connector_jars``) adds Spark's own Kafka connector to ``spark.jars``, for
    ``format("kafka")`` against rayqueue's gateways (see ``kafka_options``). ``iceberg`` (True,
    or the jars as for ``iceberg_runtime_jars``) adds Iceberg's Spark runtime, for Iceberg
    topics' tables (``read_table``). Raises JavaNotFoundError without Java,
    KafkaConnectorNotFoundError without the connector, IcebergRuntimeNotFoundError without
    Iceberg's runtime.
    """
    if _java() is None:
        raise JavaNotFoundError(
            "Spark needs Java (OpenJDK 17 works): install it and put `java` on PATH or set JAVA_HOME"
        )
    import raydp

    _join_or_start_ray()
    # Spark's Python workers must run this interpreter, or they miss pyspark and rayqueue.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    settings = {
        # RayDP hands these to every JVM it starts as log4j2.configurationFile: without them
        # log4j finds no configuration in the app master and reports so on the terminal.
        "spark.log4j.config.file.name": str(LOG4J2_PROPERTIES),
        "spark.ray.log4j.config.file.name": str(LOG4J2_PROPERTIES),
        "spark.driver.extraJavaOptions": JAVA_OPTIONS,
        "spark.executor.extraJavaOptions": JAVA_OPTIONS,
        "spark.ray.raydp_app_master.extraJavaOptions": JAVA_OPTIONS,
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # A small machine: few shuffle partitions keep small aggregations fast.
        "spark.sql.shuffle.partitions": str(max(2, num_executors * executor_cores * 2)),
    }
    settings.update({k: str(v) for k, v in (configs or {}).items()})
    if kafka_connector is not False:
        jars = kafka_connector_jars(None if kafka_connector is True else kafka_connector)
        # spark-submit adds spark.jars to the driver's classpath and ships them to executors.
        settings["spark.jars"] = ",".join([*filter(None, settings.get("spark.jars", "").split(",")), *jars])
    if iceberg is not False:
        jars = iceberg_runtime_jars(None if iceberg is True else iceberg)
        settings["spark.jars"] = ",".join([*filter(None, settings.get("spark.jars", "").split(",")), *jars])
    _quiet_raydp_deprecations()
    if getattr(raydp.context, "_global_spark_context", None) is None:  # else RayDP says a session runs
        _wait_for_stopped_master(app_name)
    with _driver_jvm_output_to_log():
        spark = raydp.init_spark(app_name, num_executors, executor_cores, executor_memory, configs=settings)
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop() -> None:
    """Stop the Spark session started by ``session()`` (and its RayDP actors)."""
    import raydp

    raydp.stop_spark()


# -- topics as DataFrames -------------------------------------------------------------------


def kafka_schema(include_headers: bool = False) -> Any:
    """The schema of Spark's own Kafka source (every field nullable, as Spark declares it)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


# Smaller read tasks than Ray Data's default for Spark: Spark converts the first blocks
# while later ones are still being read, so smaller blocks overlap more of the two.
SPARK_MAX_RECORDS_PER_TASK = 250_000


@ray.remote
def _read_block(task: Any, schema: Any) -> Any:
    """Run one of the datasource's read tasks as a plain task: one Arrow table."""
    import pyarrow as pa

    tables = list(task())
    return pa.concat_tables(tables) if tables else schema.empty_table()


# rayqueue.data's read options and the names Spark's Kafka source gives them.
_CONNECTOR_OPTIONS = {
    "starting_offsets": "startingOffsets",
    "ending_offsets": "endingOffsets",
    "starting_timestamp": "startingTimestamp",
    "ending_timestamp": "endingTimestamp",
    "starting_offsets_by_timestamp": "startingOffsetsByTimestamp",
    "ending_offsets_by_timestamp": "endingOffsetsByTimestamp",
    "include_headers": "includeHeaders",
    "isolation_level": "kafka.isolation.level",
}


def read(spark: Any, topics: str | Iterable[str], *, cluster: Any = None, via: str = "bridge", **options: Any) -> Any:
    """A DataFrame of the records of ``topics`` with the schema of Spark's Kafka source.

    Takes the options of ``rayqueue.data.read`` (offset or timestamp ranges,
    ``include_headers``, ``isolation_level``, ``max_records_per_task``, ``parallelism``).
    ``via="bridge"`` (the default): ranges are fixed when this is called, the datasource's
    read tasks run as Ray tasks and RayDP's Arrow-blocks-to-DataFrame conversion takes
    their results as they come. ``via="connector"``: Spark's own Kafka source reads from
    the brokers' gateways (the session needs ``kafka_connector=True``); the range and
    header options are handed to it under Spark's names (``startingOffsets``, ...), with
    Spark's rules (a batch read cannot start at latest; a per-partition JSON names every
    partition), and ranges are resolved when Spark plans the query.
    """
    if via == "connector":
        unknown = sorted(set(options) - set(_CONNECTOR_OPTIONS))
        if unknown:
            raise InvalidConfigError(f"read(via='connector') takes {sorted(_CONNECTOR_OPTIONS)}, not {unknown}")
        subscribe = ",".join(data._topic_list(topics))
        spark_options = {_CONNECTOR_OPTIONS[k]: v for k, v in options.items() if v is not None}
        return spark.read.format("kafka").options(**kafka_options(cluster, subscribe=subscribe, **spark_options)).load()
    if via != "bridge":
        raise InvalidConfigError(f"via must be 'bridge' or 'connector', got {via!r}")
    import raydp.spark

    include_headers = bool(options.get("include_headers", False))
    options.setdefault("max_records_per_task", SPARK_MAX_RECORDS_PER_TASK)
    # Zoned timestamps: Spark's Arrow conversion takes naive ones as session-local time.
    source = data.datasource(topics, cluster=cluster, timestamp_tz="UTC", **options)
    schema = kafka_schema(include_headers)
    if not source.pieces():
        # RayDP's conversion needs at least one block; an empty read has none to give.
        return spark.createDataFrame([], schema)
    # Not through Dataset.to_spark: that waits for the whole read before converting, while
    # RayDP's conversion fetches each block only when Spark reaches it, so handing it the
    # refs of running tasks overlaps reading with converting.
    arrow_schema = source.schema
    blocks = [_read_block.remote(task, arrow_schema) for task in source.get_read_tasks(1)]
    df = raydp.spark.ray_dataset_to_spark_dataframe(spark, arrow_schema, blocks)
    from pyspark.sql import functions as F

    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


_SINK_COLUMNS = ("key", "value", "partition", "headers", "timestamp")


def _sink_dataset(df: Any) -> Any:
    """The Ray Dataset of the DataFrame's sink columns (Spark's Kafka sink takes the same);
    a DataFrame without ``value`` is refused before anything leaves Spark."""
    if "value" not in df.columns:
        raise InvalidConfigError(f"writing to a topic needs a 'value' column; got {df.columns}")
    import raydp.spark

    # RayDP's own conversion, which ray.data.from_spark wraps: Ray 2.60's wrapper passes its
    # parallelism=None on as if it had been given and logs that the argument is deprecated.
    return raydp.spark.spark_dataframe_to_ray_dataset(df.select(*[c for c in _SINK_COLUMNS if c in df.columns]))


def write(df: Any, topic: str, *, cluster: Any = None, producer_config: Mapping[str, Any] | None = None) -> int:
    """Produce the rows of ``df`` to ``topic``; returns the number of rows written.

    Columns as Spark's Kafka sink takes them: ``value`` (required, binary or string),
    ``key``, ``partition``, ``headers`` optional; a ``timestamp`` column, if present,
    sets the record timestamps. Other columns are left out before leaving Spark.
    """
    ds = _sink_dataset(df)
    return data.write(ds, topic, cluster=cluster, producer_config=producer_config)


# -- committed offsets of streams -----------------------------------------------------------
# A stream's progress is its group's committed offsets, kept by the group coordinator in
# __consumer_offsets (so `rayqueue groups describe GROUP` shows a stream's lag).


def load_offsets(group_id: str, tps: Iterable[TopicPartition], *, cluster: Any = None) -> dict[TopicPartition, int]:
    """The offsets ``group_id`` committed for ``tps`` in ``__consumer_offsets`` (absent: never committed)."""
    cluster = data._cluster_or_connect(cluster)
    committed = cluster.admin().list_group_offsets(group_id, list(tps))
    return {tp: om.offset for tp, om in committed.items() if om is not None and om.offset >= 0}


def commit_offsets(
    group_id: str, offsets: Mapping[TopicPartition, int], *, cluster: Any = None, timeout: float = 60.0
) -> None:
    """Commit ``offsets`` (the next offset to process) for ``group_id`` through the group coordinator.

    The stream is not a member of the group, so these are standalone commits (generation
    -1), as Kafka takes from a consumer that assigns its partitions itself; they land in
    ``__consumer_offsets`` and show in ``rayqueue groups describe``.
    """
    if not offsets:
        return
    cluster = data._cluster_or_connect(cluster)
    consumer = cluster.consumer(group_id=group_id, enable_auto_commit=False, default_api_timeout_ms=int(timeout * 1000))
    try:
        consumer.commit({tp: int(offset) for tp, offset in offsets.items()})
    finally:
        consumer.close()


# -- micro-batch streaming ------------------------------------------------------------------


def _write_batch_in_transaction(
    producer: Any, df: Any, topic: str, group_id: str, offsets: Mapping[TopicPartition, int]
) -> int:
    """Write ``df`` to ``topic`` and commit ``offsets`` for ``group_id`` in one transaction.

    The rows leave Spark as Arrow blocks (RayDP) and are produced from this process by the
    one transactional producer: a Kafka transaction belongs to one producer, so the write
    tasks of ``write()`` cannot share it. Any failure aborts the transaction and raises.
    """
    ds = _sink_dataset(df)
    producer.begin_transaction()
    try:
        rows = 0
        for table in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            rows += data.write_table(producer, topic, table)[0]
        group = ConsumerGroupMetadata(group_id, -1, "", None)  # a standalone stream, not a group member
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(o) for tp, o in offsets.items()}, group)
        producer.commit_transaction()
    except BaseException:
        try:
            producer.abort_transaction()
        except Exception:  # noqa: BLE001 - the first error is the one to report
            logger.warning("stream %r: abort after a failed batch failed too", group_id, exc_info=True)
        raise
    return rows


class StreamHandle:
    """A running (or finished) stream: progress counters, waiting and a clean stop."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.batches = 0
        self.rows_read = 0  # offsets consumed (records, unless compacted or transactional)
        self.rows_written = 0
        self.offsets: dict[TopicPartition, int] = {}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._progress = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        """Whether the loop still runs."""
        return not self._done.is_set()

    def stop(self, timeout: float | None = 300.0) -> None:
        """Finish the batch under way (write and commit), then stop; re-raises a loop error."""
        self._stop.set()
        if not self._done.wait(timeout):
            raise KafkaError(f"stream {self.group_id!r} did not stop within {timeout}s")
        if self.error is not None:
            raise self.error

    def await_batches(self, n: int, timeout: float | None = None) -> bool:
        """Wait until ``n`` batches committed in total; False on timeout or when the loop ended first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._progress:
            while self.batches < n and not self._done.is_set():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._progress.wait(remaining if remaining is not None else 1.0)
        if self.error is not None:
            raise self.error
        return self.batches >= n

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the loop to end by itself (max_batches, until_idle, an error); True if it did."""
        ended = self._done.wait(timeout)
        if self.error is not None:
            raise self.error
        return ended

    def _batch_done(self, rows_read: int, rows_written: int, offsets: Mapping[TopicPartition, int]) -> None:
        with self._progress:
            self.batches += 1
            self.rows_read += rows_read
            self.rows_written += rows_written
            self.offsets.update(offsets)
            self._progress.notify_all()

    def _finish(self, error: BaseException | None) -> None:
        self.error = error
        with self._progress:
            self._done.set()
            self._progress.notify_all()


def _spec(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp, offset in offsets.items():
        out.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return out


def stream(
    spark: Any,
    source_topics: str | Iterable[str],
    group_id: str,
    transform: Callable[[Any], Any],
    sink_topic: str,
    *,
    cluster: Any = None,
    trigger_interval: float = 1.0,
    starting_offsets: str = "earliest",
    max_records_per_partition: int | None = None,
    max_batches: int | None = None,
    until_idle: bool = False,
    producer_config: Mapping[str, Any] | None = None,
    transactional_id: str | None = None,
    background: bool = True,
) -> StreamHandle:
    """Run ``transform`` over new records of ``source_topics`` in micro-batches into ``sink_topic``, exactly once.

    Each batch reads committed records (read_committed) from the committed offsets of
    ``group_id`` (``starting_offsets`` for partitions never committed) up to the last
    stable offsets seen when the batch starts (at most ``max_records_per_partition``
    each), and writes ``transform(df)`` (a DataFrame with a ``value`` column and optional
    key/partition/headers/timestamp) to ``sink_topic`` and the batch's end offsets to
    the group in ONE transaction of a producer with ``transactional_id`` (default
    ``rayqueue-stream-<group_id>``). A stream that dies mid-batch leaves an open
    transaction that the next stream with the same id aborts when it starts (it fences
    the old one), so a read_committed reader of ``sink_topic`` sees every batch once.
    Batches start every ``trigger_interval`` seconds, or at once while data is waiting.
    The loop ends on ``StreamHandle.stop()``, after ``max_batches`` batches, or
    (``until_idle``) at the first batch with no new data. With ``background`` it runs
    in a thread; otherwise this returns when it ends.
    """
    if starting_offsets not in ("earliest", "latest"):
        raise InvalidConfigError(f"starting_offsets must be 'earliest' or 'latest', got {starting_offsets!r}")
    cluster = data._cluster_or_connect(cluster)
    topics = data._topic_list(source_topics)
    handle = StreamHandle(group_id)

    def run() -> None:
        error = None
        try:
            _run_stream(
                spark, cluster, topics, group_id, transform, sink_topic, handle,
                trigger_interval, starting_offsets, max_records_per_partition, max_batches, until_idle,
                producer_config, transactional_id or f"rayqueue-stream-{group_id}",
            )  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the handle
            logger.exception("stream %r failed", group_id)
            error = exc
        handle._finish(error)

    if background:
        handle._thread = threading.Thread(target=run, name=f"rayqueue-stream-{group_id}", daemon=True)
        handle._thread.start()
    else:
        run()
        if handle.error is not None:
            raise handle.error
    return handle


def _run_stream(
    spark: Any,
    cluster: Any,
    topics: list[str],
    group_id: str,
    transform: Callable[[Any], Any],
    sink_topic: str,
    handle: StreamHandle,
    trigger_interval: float,
    starting_offsets: str,
    max_records_per_partition: int | None,
    max_batches: int | None,
    until_idle: bool,
    producer_config: Mapping[str, Any] | None,
    transactional_id: str,
) -> None:
    producer = cluster.producer({**(producer_config or {}), "transactional.id": transactional_id})
    try:
        # Fences an earlier stream with this id and aborts its open transaction, so the
        # offsets loaded below are those of the last committed batch.
        producer.init_transactions()
        positions: dict[TopicPartition, int] = {}
        loaded = False
        committed_only = {"isolation_level": "read_committed"}
        while not handle._stop.is_set():
            started = time.monotonic()
            # Partitions are looked up every batch so that added partitions are picked up.
            current = [r.tp for r in data.offset_ranges(topics, cluster=cluster, starting_offsets="latest")]
            new = [tp for tp in current if tp not in positions]
            if new:
                committed = load_offsets(group_id, new, cluster=cluster)
                fresh = [tp for tp in new if tp not in committed]
                if fresh:
                    # Partitions added after the stream started are read from their beginning.
                    first = starting_offsets if not loaded else "earliest"
                    for r in data.offset_ranges(topics, cluster=cluster, starting_offsets=first):
                        if r.tp in fresh:
                            committed[r.tp] = r.start
                positions.update(committed)
                loaded = True
            ranges = data.offset_ranges(topics, cluster=cluster, starting_offsets=_spec(positions), **committed_only)
            ends = {r.tp: r.end for r in ranges}
            if max_records_per_partition:
                ends = {tp: min(end, positions[tp] + max_records_per_partition) for tp, end in ends.items()}
            advanced = {tp: end for tp, end in ends.items() if end > positions[tp]}
            if advanced:
                df = read(
                    spark, topics, cluster=cluster, starting_offsets=_spec(positions), ending_offsets=_spec(ends),
                    **committed_only,
                )  # fmt: skip
                rows_read = sum(end - positions[tp] for tp, end in advanced.items())
                written = _write_batch_in_transaction(producer, transform(df), sink_topic, group_id, advanced)
                positions.update(advanced)
                handle._batch_done(rows_read, written, advanced)
                logger.info(
                    "stream %r: batch %d wrote %d rows; offsets %s", group_id, handle.batches, written, advanced
                )
                if max_batches is not None and handle.batches >= max_batches:
                    return
            elif until_idle:
                return
            wait = trigger_interval - (time.monotonic() - started)
            if not advanced and wait > 0:
                handle._stop.wait(wait)
    finally:
        producer.close(30)
