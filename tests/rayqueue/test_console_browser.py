"""The console in a real browser: the OS's headless Chromium driven by Playwright (never a
browser downloaded at run time), against uvicorn serving the session cluster. Each page is
opened and its numbers checked against what the test produced; a topic is created through
the form, a message is found by offset, and every page is photographed under tmp_path
(``RAYQUEUE_CONSOLE_SCREENSHOTS=dir`` also copies them there, for docs/). Then, on a
cluster with an authorizer, the console over HTTPS (a test CA made here, trusted by the
browser through its NSS database): the login page, a refused password, alice's session
cookie, only her topics, actions her ACLs refuse, and logout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rayqueue import TopicPartition
from rayqueue.console.app import ConsoleServer
from tests.helpers import authorizer_cluster, consume_all, wait_for

CHROMIUM = os.environ.get("RAYQUEUE_CHROMIUM", "/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it when run as root)",
)


@pytest.fixture(scope="module")
def server(cluster):
    """uvicorn on a free loopback port, sampling every 0.5 s; stopped at the end."""
    console = ConsoleServer(cluster, "127.0.0.1", 0, sample_interval_s=0.5).start()
    yield console
    console.stop()


@pytest.fixture(scope="module")
def playwright():
    """One Playwright for the module (its sync API runs one at a time in a process)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright):
    b = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
    yield b
    b.close()


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


@pytest.fixture
def data(cluster, admin):
    """A topic with 3 partitions (12 JSON records on partition 1, 5 on partition 2) and a
    group that committed 8 of partition 1; removed afterwards."""
    topic = f"browser-{os.getpid()}-{int(time.time())}"
    group = f"{topic}-readers"
    admin.create_topic(topic, 3, 2)
    producer = cluster.producer()
    for i in range(12):
        producer.send(
            topic, json.dumps({"order": i, "item": f"widget-{i}"}).encode(), key=f"order-{i}".encode(), partition=1
        )
    producer.send_many(topic, [b"plain"] * 5, partition=2).get()
    producer.flush()
    producer.close()
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 1)])
    consume_all(consumer, 12)
    consumer.commit({TopicPartition(topic, 1): 8})
    consumer.close()
    traffic = _Traffic(cluster, f"{topic}-traffic")
    yield {"topic": topic, "group": group, "traffic_topic": traffic.topic, "traffic_group": traffic.group}
    traffic.stop()
    admin.delete_groups([group, traffic.group])
    for name in admin.list_topics():
        if name.startswith(topic):
            admin.delete_topic(name)


class _Traffic:
    """Steady load on another topic while the pages are open (about 100 records/s in, read
    and committed by a group), so the charts have something to draw."""

    def __init__(self, cluster, topic: str) -> None:
        cluster.admin().create_topic(topic, 2, 1)
        self.topic = topic
        self.group = f"{topic}-readers"
        self._stop = threading.Event()
        self._producer = cluster.producer(linger_ms=5)
        self._consumer = cluster.consumer(group_id=self.group, auto_offset_reset="earliest")
        self._consumer.subscribe([topic])
        self._threads = [
            threading.Thread(target=self._produce, args=(topic,), daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _produce(self, topic: str) -> None:
        i = 0
        while not self._stop.wait(0.2):  # pacing the load, not waiting on a condition
            self._producer.send_many(topic, [f"tick-{i + j}".encode() for j in range(20)])
            i += 20

    def _consume(self) -> None:
        while not self._stop.is_set():
            if self._consumer.poll(200):
                self._consumer.commit()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        self._producer.close()
        self._consumer.close()


def _shots(tmp_path: Path) -> Path:
    out = tmp_path / "screenshots"
    out.mkdir(exist_ok=True)
    return out


def _cell_texts(page, table_id: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        f"#{table_id} tbody tr", "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))"
    )


def test_every_page_in_a_real_browser(cluster, server, page, data, tmp_path):
    from playwright.sync_api import expect

    shots = _shots(tmp_path)
    topic, group = data["topic"], data["group"]
    meta = cluster.metadata()
    info = cluster.describe()
    # Creating a topic opens a replica per partition and elects leaders: seconds on a loaded 2-core machine.
    page.set_default_timeout(30_000)
    expect.set_options(timeout=30_000)

    # Overview: cluster id, brokers with their leaders, no unhealthy partitions.
    page.goto(server.url + "/")
    expect(page.locator("#cluster-id")).to_have_text(info["cluster_id"])
    expect(page.locator("#broker-count")).to_have_text(str(len(info["brokers"])))
    expect(page.locator("#urp-count")).to_have_text("0")
    expect(page.locator("#offline-count")).to_have_text("0")

    def agree():
        # Other tests of the session cluster may create a topic between the page's read and the
        # metadata's: the page is read again until both agree.
        shown = {int(r[0]): int(r[5]) for r in _cell_texts(page, "brokers-table")}
        held = {b.broker_id: 0 for b in info["brokers"]}
        for t in cluster.metadata().topics.values():
            for p in t.partitions:
                held[p.leader] += 1
        if shown != held:
            page.reload()
            page.locator("#brokers-table tbody tr").first.wait_for()
        return shown == held

    wait_for(agree, timeout=60, interval=1.0, what="the brokers table's leader counts match the metadata")
    page.locator("#chart svg path").first.wait_for(state="attached")  # the throughput chart has a line
    # The background traffic (about 100 records/s in, committed as read) shows as rates.
    page.wait_for_function("Number(document.getElementById('messages-in').textContent) > 0")
    page.wait_for_function("Number(document.getElementById('messages-out').textContent) > 0")
    # The session Ray exports metrics: the charts say so, and once the traffic topic's
    # leaders have exported (every few seconds) its row shows records and bytes coming in.
    expect(page.locator("#chart-source")).to_have_text("from Prometheus metrics")
    traffic_row = page.locator("#rates-table tr", has_text=data["traffic_topic"])
    page.wait_for_function(
        """name => [...document.querySelectorAll('#rates-table tbody tr')].some(r =>
             r.cells[0].innerText.trim() === name && Number(r.cells[1].innerText) > 0 && r.cells[4].innerText !== '0 B/s')""",
        arg=data["traffic_topic"],
        timeout=90_000,
    )
    assert traffic_row.locator("td").nth(3).inner_text().endswith("/s")
    page.screenshot(path=shots / "overview.png", full_page=True)

    # Topics: the list, then a topic created through the form.
    page.goto(server.url + "/topics")
    row = page.locator("#topics-table tr", has_text=topic)
    expect(row.locator("td").nth(1)).to_have_text("3")
    expect(row.locator("td").nth(2)).to_have_text("2")
    expect(row.locator("td").nth(3)).to_have_text("17")
    created = f"{topic}-made-in-browser"
    page.fill("#create-topic input[name=name]", created)
    page.fill("#create-topic input[name=partitions]", "4")
    page.fill("#create-topic input[name=replication_factor]", "1")
    page.fill("#create-topic textarea[name=configs]", "retention.ms=3600000")
    page.click("#create-topic button[type=submit]")
    # The answer comes once the 4 leaders (a Ray worker process each) answer: slow under load.
    expect(page.locator("#banner")).to_contain_text(f"Created topic {created} (4 partitions", timeout=120_000)
    expect(page.locator("#topics-table tr", has_text=created).locator("td").nth(5)).to_have_text("3,600,000")
    made = cluster.admin().describe_topics([created])[created]
    assert len(made.partitions) == 4 and made.configs == {"retention.ms": 3600000}
    # A refused create shows Admin's error on the page.
    page.fill("#create-topic input[name=name]", created)
    page.click("#create-topic button[type=submit]")
    expect(page.locator("#banner")).to_contain_text("TOPIC_ALREADY_EXISTS")
    page.screenshot(path=shots / "topics.png", full_page=True)
    # Delete asks for the name; a wrong answer deletes nothing.
    page.once("dialog", lambda d: d.accept("not-the-name"))
    page.click(f"button[data-delete='{created}']")
    expect(page.locator("#banner")).to_contain_text("Not deleted")
    assert created in cluster.admin().list_topics()
    page.once("dialog", lambda d: d.accept(created))
    page.click(f"button[data-delete='{created}']")
    expect(page.locator("#banner")).to_contain_text(f"Deleted topic {created}")
    assert created not in cluster.admin().list_topics()

    # Topic detail: each partition's high watermark and leader.
    page.goto(f"{server.url}/topics/{topic}")
    expect(page.locator("#partition-count")).to_have_text("3")
    page.locator("#partitions-table tbody tr").nth(2).wait_for()
    expect(page.locator("#partitions-table tbody tr").nth(1).locator("td").nth(6)).to_have_text("12")
    rows = _cell_texts(page, "partitions-table")
    tmeta = meta.topics[topic]
    assert [(int(r[0]), int(r[1]), int(r[6])) for r in rows] == [
        (p.partition, p.leader, hw) for p, hw in zip(tmeta.partitions, (0, 12, 5), strict=True)
    ]
    page.locator("#chart svg path").first.wait_for(state="attached")
    page.screenshot(path=shots / "topic.png", full_page=True)
    page.goto(f"{server.url}/topics/{data['traffic_topic']}")
    expect(page.locator("#partition-count")).to_have_text("2")
    page.wait_for_function("Number(document.getElementById('messages-in').textContent) > 0")
    expect(page.locator("#chart-source")).to_have_text("from Prometheus metrics")
    page.locator("#bytes-chart svg path").first.wait_for(state="attached")
    page.screenshot(path=shots / "topic-active.png", full_page=True)

    # Message browser: to offset 7 of partition 1, value as JSON; then produce a record.
    page.goto(f"{server.url}/topics/{topic}/messages")
    page.select_option("#partition", "1")
    page.select_option("#mode", "offset")
    page.fill("#offset", "7")
    page.fill("#limit", "2")
    page.select_option("#view", "json")
    page.click("#browse button[type=submit]")
    first = page.locator("#records-table tbody tr").first
    expect(first.locator("td").nth(0)).to_have_text("7")
    expect(first.locator("td").nth(2)).to_have_text("order-7")
    expect(first.locator("td").nth(3)).to_have_text(json.dumps({"order": 7, "item": "widget-7"}, indent=2))
    expect(page.locator("#records-table tbody tr")).to_have_count(2)
    page.fill("#key-filter", "order-1")  # order-1, order-10, order-11
    page.select_option("#mode", "offset")
    page.fill("#offset", "0")
    page.fill("#limit", "20")
    page.click("#browse button[type=submit]")
    expect(page.locator("#records-table tbody tr")).to_have_count(3)
    page.fill("#produce-key", "from-the-browser")
    page.fill("#produce-value", "hello console")
    page.fill("#produce-partition", "0")
    page.click("#produce button[type=submit]")
    expect(page.locator("#banner")).to_contain_text("Produced to partition 0 at offset 0")
    consumer = cluster.consumer()
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    (record,) = consume_all(consumer, 1)
    consumer.close()
    assert (record.key, record.value) == (b"from-the-browser", b"hello console")
    page.screenshot(path=shots / "messages.png", full_page=True)

    # Consumer groups: the list and the group's lag (12 - 8 = 4) with its chart.
    page.goto(server.url + "/groups")
    expect(page.locator("#groups-table tr", has_text=group).locator("td").nth(5)).to_have_text("4")
    page.screenshot(path=shots / "groups.png", full_page=True)
    page.goto(f"{server.url}/groups/{group}")
    expect(page.locator("#lag")).to_have_text("4")
    expect(page.locator("#state")).to_have_text("Empty")
    expect(page.locator("#offsets-table tbody tr").first.locator("td").nth(2)).to_have_text("8")
    page.locator("#chart svg path").first.wait_for(state="attached")
    page.screenshot(path=shots / "group.png", full_page=True)
    # Reset to latest, confirmed: lag 0.
    page.select_option("#reset-to", "latest")
    page.once("dialog", lambda d: d.accept())
    page.click("#reset button[type=submit]")
    expect(page.locator("#banner")).to_contain_text(f"Reset 1 partition(s) of {group}")
    expect(page.locator("#lag")).to_have_text("0")
    assert cluster.admin().list_group_offsets(group)[TopicPartition(topic, 1)].offset == 12

    # The busy group: a member that owns both partitions, committing as it reads.
    page.goto(f"{server.url}/groups/{data['traffic_group']}")
    expect(page.locator("#state")).to_have_text("Stable")
    expect(page.locator("#member-count")).to_have_text("1")
    expect(page.locator("#offsets-table tbody tr")).to_have_count(2)
    page.wait_for_function("document.querySelectorAll('#chart svg path').length > 0")
    expect(page.locator("#chart-source")).not_to_be_empty()
    # Resetting an active group's offsets is refused, as kafka-consumer-groups refuses it.
    page.select_option("#reset-to", "earliest")
    page.once("dialog", lambda d: d.accept())
    page.click("#reset button[type=submit]")
    expect(page.locator("#banner")).to_contain_text("NON_EMPTY_GROUP")
    page.screenshot(path=shots / "group-active.png", full_page=True)
    # Transactions: an open one, with its state.
    txn_id = f"{topic}-txn"
    producer = cluster.producer(transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"pending", partition=2).get()
        page.goto(server.url + "/transactions")
        row = page.locator("#transactions-table tr", has_text=txn_id)
        expect(row.locator("td").nth(3)).to_have_text("Ongoing")
        expect(row.locator("td").nth(6)).to_have_text(f"{topic}-2")
        page.screenshot(path=shots / "transactions.png", full_page=True)
        producer.abort_transaction()
    finally:
        producer.close()

    assert sorted(p.name for p in shots.iterdir()) == sorted(
        [
            "overview.png",
            "topics.png",
            "topic.png",
            "topic-active.png",
            "messages.png",
            "groups.png",
            "group.png",
            "group-active.png",
            "transactions.png",
        ]
    )
    keep = os.environ.get("RAYQUEUE_CONSOLE_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for shot in shots.iterdir():
            shutil.copy(shot, Path(keep) / f"console-{shot.name}")


def test_cluster_errors_show_as_messages_on_the_page(server, page):
    from playwright.sync_api import expect

    page.goto(f"{server.url}/topics/no-such-topic")
    expect(page.locator("#banner")).to_contain_text("UNKNOWN_TOPIC_OR_PARTITION")
    assert "Traceback" not in page.content()


# -- login over HTTPS, on a cluster with an authorizer --------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A test CA and the console's key and certificate (for localhost), made here."""
    from scripts.make_test_ca import make_test_pki

    return make_test_pki(tmp_path_factory.mktemp("console-pki"))


@pytest.fixture(scope="module")
def secure_console(ray_session, pki):
    """A cluster with an authorizer and alice's grants, its console on HTTPS from Kafka's
    PEM key (ssl.keystore.location), found to need a login by itself."""
    from actors.config import broker_config
    from rayqueue.console.app import console_ssl_context
    from tests.rayqueue.secured_console import set_up

    with authorizer_cluster("rayqueue-console-browser-auth") as cluster:
        grants = set_up(cluster, f"browser-auth-{os.getpid()}")
        context = console_ssl_context(broker_config({"ssl.keystore.location": str(pki.broker)}))
        console = ConsoleServer(cluster, "127.0.0.1", 0, sample_interval_s=0.5, ssl_context=context).start()
        try:
            yield cluster, grants, console
        finally:
            console.stop()


@pytest.fixture(scope="module")
def trusting_browser(playwright, pki, tmp_path_factory):
    """Chromium whose HOME has an NSS database trusting the test CA (Chromium on Linux reads
    the CAs a user added from ~/.pki/nssdb): the console's certificate is verified for real."""
    certutil = shutil.which("certutil")
    if certutil is None:
        pytest.skip("no certutil to make Chromium trust the test CA (apt-get install libnss3-tools)")
    home = tmp_path_factory.mktemp("browser-home")
    db = home / ".pki" / "nssdb"
    db.mkdir(parents=True)
    subprocess.run([certutil, "-d", f"sql:{db}", "-N", "--empty-password"], check=True, capture_output=True)
    subprocess.run(
        [certutil, "-d", f"sql:{db}", "-A", "-t", "C,,", "-n", "rayqueue test CA", "-i", str(pki.ca)],
        check=True,
        capture_output=True,
    )
    b = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=["--no-sandbox"], env={**os.environ, "HOME": str(home)}
    )
    yield b
    b.close()


def test_login_over_https_and_actions_as_the_user(secure_console, trusting_browser, tmp_path):
    from playwright.sync_api import expect

    from tests.rayqueue.secured_console import PASSWORD, USER

    cluster, grants, console = secure_console
    assert console.url.startswith("https://") and console.login_required
    url = f"https://localhost:{console.port}"
    shots = _shots(tmp_path)
    context = trusting_browser.new_context(viewport={"width": 1400, "height": 1000})  # no ignore_https_errors
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(30_000)
    expect.set_options(timeout=30_000)
    try:
        # Any page without a session leads to the login page, and back after it.
        page.goto(url + "/topics")
        expect(page).to_have_url(f"{url}/login?next=%2Ftopics")
        page.fill("#user", USER)
        page.fill("#password", "not-her-password")
        page.click("#login button[type=submit]")
        expect(page.locator("#banner")).to_contain_text("SASL_AUTHENTICATION_FAILED")
        expect(page).to_have_url(f"{url}/login?next=%2Ftopics")
        page.screenshot(path=shots / "login-failed.png", full_page=True)
        page.fill("#password", PASSWORD)
        page.click("#login button[type=submit]")
        expect(page).to_have_url(url + "/topics")
        expect(page.locator("#who-name")).to_have_text("User:alice")

        # The cookie: HttpOnly (no script reads it), SameSite=Strict, Secure (HTTPS).
        (cookie,) = context.cookies()
        assert cookie["name"] == "rayqueue_session" and cookie["httpOnly"] and cookie["secure"]
        assert cookie["sameSite"] == "Strict"
        assert "rayqueue_session" not in page.evaluate("document.cookie")

        # Only the topics alice may describe.
        expect(page.locator("#topics-table tbody tr")).to_have_count(2)
        names = sorted(r[0] for r in _cell_texts(page, "topics-table"))
        assert names == sorted([grants.shared, grants.readonly])
        page.screenshot(path=shots / "topics-as-alice.png", full_page=True)

        # Deleting a topic needs DELETE: refused with Kafka's error, and the topic stays.
        page.once("dialog", lambda d: d.accept(grants.shared))
        page.click(f"button[data-delete='{grants.shared}']")
        expect(page.locator("#banner")).to_contain_text("TOPIC_AUTHORIZATION_FAILED")
        assert grants.shared in cluster.admin().list_topics()

        # Reading what she may READ; producing where she may not WRITE is refused.
        page.goto(f"{url}/topics/{grants.readonly}/messages")
        expect(page.locator("#records-table tbody tr")).to_have_count(3)
        page.fill("#produce-value", "not allowed")
        page.click("#produce button[type=submit]")
        expect(page.locator("#banner")).to_contain_text("TOPIC_AUTHORIZATION_FAILED")
        tp = TopicPartition(grants.readonly, 0)
        assert cluster.admin().describe_partition_logs([tp])[tp].log_end_offset == 3
        page.screenshot(path=shots / "refused-as-alice.png", full_page=True)

        # Logging out ends the session: the pages lead to the login page again.
        page.click("#logout")
        expect(page).to_have_url(url + "/login")
        page.goto(url + "/groups")
        expect(page).to_have_url(f"{url}/login?next=%2Fgroups")
        assert context.cookies() == []
    finally:
        context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"
