"""Kafka's clients over SASL_SSL (SCRAM-SHA-512) and mutual TLS against a cluster of its own
(one broker, three listeners: INTERNAL PLAINTEXT, EXTERNAL SASL_SSL, MTLS SSL): users made
with AlterUserScramCredentials by a Kafka admin client, each client's Metadata naming the
listener it came in on, principals as the gateway sees them, a wrong password refused, and
SCRAM users that survive a controller restart. Certificates are made here (cryptography)."""

from __future__ import annotations

import asyncio
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray

import rayqueue
from actors import launch
from actors.names import broker_actor_name
from tests.helpers import SMALL_INTERNAL_TOPICS, wait_for

sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
from make_test_ca import make_test_pki  # noqa: E402

NAMESPACE = "rayqueue-security-test"
PASSWORD = "alice-secret"
_ids = itertools.count()


@pytest.fixture(scope="module")
def secure(ray_session, tmp_path_factory):
    """{"cluster", "pki", "internal", "external", "mtls"}: a dedicated 1-broker cluster."""
    pki = make_test_pki(tmp_path_factory.mktemp("pki"), clients=("alice",))
    users = tmp_path_factory.mktemp("users") / "plain-users.toml"
    users.write_text('kcat-user = "kcat-secret"\n')
    root = tempfile.mkdtemp(prefix="rayqueue-security-")
    cluster = rayqueue.launch(
        log_dirs=root,
        rayqueue_namespace=NAMESPACE,
        rayqueue_num_brokers=1,
        listeners="INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0,MTLS://127.0.0.1:0",
        listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL,MTLS:SSL",
        ssl_keystore_location=str(pki.broker),
        ssl_truststore_location=str(pki.ca),
        ssl_client_auth="requested",
        ssl_principal_mapping_rules="RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        rayqueue_sasl_plain_users_file=str(users),
        # The MTLS listener's own key (Kafka's per-listener keys): certificates required there.
        **{"listener.name.mtls.ssl.client.auth": "required"},
        **SMALL_INTERNAL_TOPICS,
    )
    try:
        state = {
            "cluster": cluster,
            "pki": pki,
            "internal": cluster.listener_bootstrap_servers("INTERNAL"),
            "external": cluster.listener_bootstrap_servers("EXTERNAL"),
            "mtls": cluster.listener_bootstrap_servers("MTLS"),
        }
        add_user(state["internal"], "alice", PASSWORD)
        yield state
    finally:
        cluster.shutdown(delete_data=True)
        shutil.rmtree(root, ignore_errors=True)


def add_user(bootstrap: str, user: str, password: str, iterations: int = 8192) -> None:
    """What ``kafka-configs --alter --add-config 'SCRAM-SHA-512=[iterations=..,password=..]'``
    sends: AlterUserScramCredentials, here from confluent-kafka's admin client."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, iterations)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())])
    for future in futures.values():
        future.result(30)


def sasl_conf(state, user: str = "alice", password: str = PASSWORD) -> dict:
    return {
        "bootstrap.servers": state["external"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(state["pki"].ca),
    }


def mtls_conf(state) -> dict:
    cert, key = state["pki"].clients["alice"]
    return {
        "bootstrap.servers": state["mtls"],
        "security.protocol": "SSL",
        "ssl.ca.location": str(state["pki"].ca),
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
    }


def new_topic(state, request) -> str:
    name = f"sec-{request.node.name[:40]}-{next(_ids)}".replace("[", "-").replace("]", "")
    state["cluster"].admin().create_topic(name, 1, 1)
    return name


def listener_stats() -> dict:
    """Broker 0's listener figures (its host serves the listener: the default placement)."""
    return ray.get(launch.find_actor(broker_actor_name(0), NAMESPACE).listener_stats.remote(), timeout=30)


def confluent_round_trip(conf: dict, topic: str, n: int = 5) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(conf)
    for i in range(n):
        producer.produce(topic, key=b"k%d" % i, value=b"confluent-%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < n and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        # While the consumer is connected, the listener sees it as its principal.
        listener = "EXTERNAL" if conf["security.protocol"] == "SASL_SSL" else "MTLS"
        assert "User:alice" in listener_stats()["principals"][listener]
    finally:
        consumer.close()
    return values


# -- listeners --------------------------------------------------------------------------------


def test_metadata_answers_with_the_listener_a_client_came_in_on(secure):
    from confluent_kafka.admin import AdminClient

    for conf, listener in ((sasl_conf(secure), "external"), (mtls_conf(secure), "mtls"), ({}, "internal")):
        conf = {**conf, "bootstrap.servers": secure[listener]}
        brokers = AdminClient(conf).list_topics(timeout=30).brokers
        assert [f"{b.host}:{b.port}" for b in brokers.values()] == [secure[listener]]
    assert len({secure["internal"], secure["external"], secure["mtls"]}) == 3
    # The cluster's primary bootstrap servers are the PLAINTEXT listener's.
    assert secure["cluster"].bootstrap_servers == secure["internal"]


# -- SASL_SSL with SCRAM-SHA-512 ------------------------------------------------------------------


def test_confluent_kafka_over_sasl_ssl_scram_512(secure, request):
    topic = new_topic(secure, request)
    assert confluent_round_trip(sasl_conf(secure), topic) == [b"confluent-%d" % i for i in range(5)]


def test_kafka_python_over_sasl_ssl_scram_512(secure, request):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = new_topic(secure, request)
    options = {
        "bootstrap_servers": secure["external"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
        "ssl_cafile": str(secure["pki"].ca),
    }
    producer = KafkaProducer(**options)
    for i in range(5):
        producer.send(topic, b"kp-%d" % i).get(30)
    producer.close()
    consumer = KafkaConsumer(**options, auto_offset_reset="earliest", consumer_timeout_ms=30000)
    consumer.assign([TopicPartition(topic, 0)])
    values = [m.value for _, m in zip(range(5), consumer, strict=False)]
    consumer.close()
    assert values == [b"kp-%d" % i for i in range(5)]


def test_aiokafka_over_sasl_ssl_and_mutual_tls(secure, request):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    cert, key = secure["pki"].clients["alice"]
    setups = {
        "sasl": {
            "bootstrap_servers": secure["external"],
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice",
            "sasl_plain_password": PASSWORD,
            "ssl_context": create_ssl_context(cafile=str(secure["pki"].ca)),
        },
        "mtls": {
            "bootstrap_servers": secure["mtls"],
            "security_protocol": "SSL",
            "ssl_context": create_ssl_context(cafile=str(secure["pki"].ca), certfile=str(cert), keyfile=str(key)),
        },
    }

    async def round_trip(options: dict, topic: str) -> list[bytes]:
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"aio-%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **options, auto_offset_reset="earliest")
        await consumer.start()
        try:
            values = []
            while len(values) < 5:
                message = await asyncio.wait_for(consumer.getone(), 30)
                values.append(message.value)
            return values
        finally:
            await consumer.stop()

    for name, options in setups.items():
        topic = new_topic(secure, request)
        assert asyncio.run(round_trip(options, topic)) == [b"aio-%d" % i for i in range(5)], name


def test_kcat_over_sasl_ssl_and_mutual_tls(secure, request, kcat):
    # kcat 1.7.1 from Debian links librdkafka 2.0.2, whose SCRAM client repeats its nonce in
    # the client-final message (fixed in librdkafka 2.6.1, confluentinc/librdkafka#4895);
    # Kafka 4 refuses that, and so does rayqueue (test_kcat_scram_is_refused_as_kafka_4_refuses_it).
    # kcat goes over SASL_SSL with PLAIN here, and over mutual TLS.
    cert, key = secure["pki"].clients["alice"]
    ca = str(secure["pki"].ca)
    setups = {
        "sasl": [
            "-b", secure["external"], "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=PLAIN",
            "-X", "sasl.username=kcat-user", "-X", "sasl.password=kcat-secret", "-X", f"ssl.ca.location={ca}",
        ],
        "mtls": [
            "-b", secure["mtls"], "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={ca}",
            "-X", f"ssl.certificate.location={cert}", "-X", f"ssl.key.location={key}",
        ],
    }  # fmt: skip
    for name, args in setups.items():
        topic = new_topic(secure, request)
        lines = "".join(f"kcat-{name}-{i}\n" for i in range(5))
        subprocess.run([kcat, *args, "-P", "-t", topic], input=lines.encode(), check=True, timeout=60)
        out = subprocess.run(
            [kcat, *args, "-C", "-t", topic, "-o", "beginning", "-c", "5", "-e", "-q"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
        assert out.split() == [f"kcat-{name}-{i}" for i in range(5)]


def test_kcat_scram_is_refused_as_kafka_4_refuses_it(secure, kcat):
    ca = str(secure["pki"].ca)
    args = [
        "-b", secure["external"], "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
        "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}", "-X", f"ssl.ca.location={ca}",
    ]  # fmt: skip
    version = subprocess.run([kcat, "-V"], capture_output=True, timeout=30).stdout.decode()
    found = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", version)
    if found is None or tuple(map(int, found.groups())) >= (2, 6, 1):
        pytest.skip(f"this kcat's librdkafka has the SCRAM nonce fix: {found and found.group(0)}")
    done = subprocess.run([kcat, *args, "-L", "-m", "10"], capture_output=True, timeout=60)
    assert done.returncode != 0
    assert b"invalid credentials with SASL mechanism SCRAM-SHA-512" in done.stderr


def test_a_wrong_password_fails_with_the_authentication_error(secure):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list = []
    started = time.monotonic()
    admin = AdminClient({**sasl_conf(secure, password="not-it"), "error_cb": errors.append})
    wait_for(
        lambda: admin.poll(0.1) is not None and any(e.code() == KafkaError._AUTHENTICATION for e in errors),
        30,
        what="the authentication error",
    )
    elapsed = time.monotonic() - started
    message = next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert "SASL authentication error" in message and "invalid credentials" in message, message
    # The gateway answered at once (SASL_AUTHENTICATION_FAILED, then closed): no timeout was
    # involved (librdkafka's socket.timeout.ms is 60 s).
    assert elapsed < 30, elapsed


# -- mutual TLS ----------------------------------------------------------------------------------


def test_confluent_kafka_over_mutual_tls_is_the_certificates_principal(secure, request):
    topic = new_topic(secure, request)
    assert confluent_round_trip(mtls_conf(secure), topic) == [b"confluent-%d" % i for i in range(5)]


def test_kafka_python_over_mutual_tls(secure, request):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    cert, key = secure["pki"].clients["alice"]
    topic = new_topic(secure, request)
    options = {
        "bootstrap_servers": secure["mtls"],
        "security_protocol": "SSL",
        "ssl_cafile": str(secure["pki"].ca),
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
    }
    producer = KafkaProducer(**options)
    for i in range(5):
        producer.send(topic, b"kp-tls-%d" % i).get(30)
    producer.close()
    consumer = KafkaConsumer(**options, auto_offset_reset="earliest", consumer_timeout_ms=30000)
    consumer.assign([TopicPartition(topic, 0)])
    values = [m.value for _, m in zip(range(5), consumer, strict=False)]
    consumer.close()
    assert values == [b"kp-tls-%d" % i for i in range(5)]


# -- users ---------------------------------------------------------------------------------------


def test_users_are_listed_and_survive_a_controller_restart(secure, request):
    from confluent_kafka.admin import AdminClient

    # A user that never logged in: no gateway has its credential cached, so the login after
    # the restart asks the restarted controller.
    add_user(secure["internal"], "restart-user", "r-secret", iterations=4096)
    admin = AdminClient({"bootstrap.servers": secure["internal"]})
    futures = admin.describe_user_scram_credentials(["alice", "restart-user"])
    described = {user: future.result(30) for user, future in futures.items()}
    assert {u: [(str(i.mechanism), i.iterations) for i in d.scram_credential_infos] for u, d in described.items()} == {
        "alice": [("ScramMechanism.SCRAM_SHA_512", 8192)],
        "restart-user": [("ScramMechanism.SCRAM_SHA_512", 4096)],
    }
    cluster = secure["cluster"]
    before = cluster.describe()["controller_epoch"]
    ray.kill(cluster.controller, no_restart=False)  # Ray restarts it; it replays its metadata log
    wait_for(lambda: cluster.describe()["controller_epoch"] > before, 60, what="controller restart")
    topic = new_topic(secure, request)
    conf = sasl_conf(secure, "restart-user", "r-secret")
    from confluent_kafka import Producer

    producer = Producer(conf)
    producer.produce(topic, b"after-restart")
    assert producer.flush(30) == 0


def test_rayqueue_users_add_list_remove(secure, request):
    from confluent_kafka import KafkaError, Producer
    from typer.testing import CliRunner

    from rayqueue.cli import app

    runner = CliRunner()

    def rq(*args: str) -> str:
        result = runner.invoke(app, [*args, "--name", NAMESPACE])
        assert result.exit_code == 0, f"exit {result.exit_code}: {result.output}\n{result.exception!r}"
        return result.output

    rq("users", "add", "cli-user", "--password", "cli-secret", "--iterations", "8192")
    assert "cli-user: SCRAM-SHA-512 (8192 iterations)" in rq("users", "list")
    topic = new_topic(secure, request)
    # The new user logs in at once (nothing cached it as unknown).
    producer = Producer(sasl_conf(secure, "cli-user", "cli-secret"))
    producer.produce(topic, b"from-cli-user")
    assert producer.flush(30) == 0
    rq("users", "remove", "cli-user")
    assert "cli-user" not in rq("users", "list")
    # Removed: refused once the gateway's cached credential expires (credentials.MAX_AGE_S).
    errors: list = []

    def refused() -> bool:
        fresh = Producer({**sasl_conf(secure, "cli-user", "cli-secret"), "error_cb": errors.append})
        fresh.poll(2)
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    wait_for(refused, 30, what="the removed user refused")


def test_broker_configs_hide_key_material_and_list_a_listeners_own_keys(secure):
    """DescribeConfigs of a broker answers the PASSWORD keys as Kafka does (sensitive, no
    value) and lists the per-listener keys; the MTLS listener's own ssl.client.auth=required
    refuses a TLS client without a certificate there."""
    import socket
    import ssl

    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": secure["internal"]})
    broker = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([broker])[broker].result(30)
    for key in (
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
    ):
        assert configs[key].is_sensitive and configs[key].value is None, key
    assert configs["ssl.keystore.location"].value == str(secure["pki"].broker)
    assert configs["listener.name.mtls.ssl.client.auth"].value == "required"
    assert configs["ssl.client.auth"].value == "requested"

    host, port = secure["mtls"].split(",")[0].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(secure["pki"].ca))
    context.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=10) as raw, pytest.raises((ssl.SSLError, OSError)):
        sock = context.wrap_socket(raw, server_hostname=host)
        sock.sendall(b"\x00\x00\x00\x00")
        if not sock.recv(4):
            raise ConnectionError("closed without a certificate")


def test_authentications_are_counted_by_listener_and_mechanism(secure, request, metrics_export_port):
    """Kafka's successful-authentication-total / failed-authentication-total, scraped from the
    session Ray's Prometheus endpoint: SCRAM logins on EXTERNAL (one refused), a certificate on MTLS."""
    import urllib.request

    from confluent_kafka.admin import AdminClient
    from prometheus_client.parser import text_string_to_metric_families

    topic = new_topic(secure, request)
    assert confluent_round_trip(sasl_conf(secure), topic, 1)
    assert confluent_round_trip(mtls_conf(secure), topic, 1)
    refused: list = []
    admin = AdminClient({**sasl_conf(secure, password="not-it"), "error_cb": refused.append})
    wait_for(lambda: admin.poll(0.1) is not None and refused, 30, what="a refused login")

    def counted(name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_export_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
            and s.labels.get("cluster") == NAMESPACE
            and all(s.labels.get(k) == v for k, v in labels.items())
        )

    ok, failed = "ray_rayqueue_successful_authentication_total", "ray_rayqueue_failed_authentication_total"
    wait_for(
        lambda: (
            counted(ok, listener="EXTERNAL", mechanism="SCRAM-SHA-512") >= 1
            and counted(failed, listener="EXTERNAL", mechanism="SCRAM-SHA-512") >= 1
            and counted(ok, listener="MTLS", mechanism="SSL") >= 1
        ),
        90,
        what="the authentication counters in the scrape",
    )
