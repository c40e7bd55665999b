"""Photographs of the web console over the demo's own topics and groups, for the docs.

Runs the demo's pipeline (``scripts/demo.py``, a smaller run), then, before its cluster shuts
down, serves the console on a free port, keeps some traffic going (a producer, and the demo's
consumer group reading and committing) so that the rates and charts have something to show,
and takes three screenshots with headless Chromium (Playwright's pip package driving Debian's
``chromium``; ``apt-get install chromium``):

    docs/console-overview.png   the overview: brokers, rates, charts
    docs/console-topic.png      the demo's page-views topic
    docs/console-group.png      the demo's consumer group and its lag

    .venv/bin/python scripts/console_screenshots.py [--records 200000] [--out docs]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CHROMIUM = os.environ.get("RAYQUEUE_CHROMIUM", "/usr/bin/chromium")
# How long the console samples the traffic before the pictures: its rates cover 20 s.
TRAFFIC_S = 25.0


def load_demo() -> Any:
    """scripts/demo.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("rayqueue_demo", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def keep_traffic(cluster: Any, demo: Any, stop: threading.Event) -> None:
    """More page views, read and committed by the demo's group, until ``stop``."""
    import numpy as np

    rng = np.random.default_rng(11)
    producer = cluster.producer(compression_type="lz4", linger_ms=5)
    consumer = cluster.consumer(group_id=demo.SAMPLE_GROUP, auto_offset_reset="earliest", max_poll_records=2_000)
    consumer.subscribe([demo.EVENTS_TOPIC])
    try:
        while not stop.is_set():
            now_ms = int(time.time() * 1000)
            values, keys, stamps = demo.page_view_chunk(rng, now_ms - 1000, 1000, 500, users=50_000)
            producer.send_many(demo.EVENTS_TOPIC, values, keys, timestamps=stamps).get(60)
            consumer.poll(200)
            consumer.commit()
            stop.wait(0.2)
    finally:
        consumer.close()
        producer.close()


def shoot(cluster: Any, demo: Any, out: Path) -> None:
    """Serve the console over ``cluster`` and photograph its three pages into ``out``."""
    from playwright.sync_api import sync_playwright

    from rayqueue.console.app import ConsoleServer

    stop = threading.Event()
    traffic = threading.Thread(target=keep_traffic, args=(cluster, demo, stop), daemon=True)
    traffic.start()
    server = ConsoleServer(cluster, "127.0.0.1", 0, sample_interval_s=2.0).start()
    try:
        time.sleep(TRAFFIC_S)  # the console's history fills meanwhile: a picture of a moment
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(server.url + "/")
            page.wait_for_function(
                "parseFloat(document.getElementById('messages-in').textContent.replace(/,/g, '')) > 0"
            )
            page.locator("#chart svg path").first.wait_for(state="attached")
            page.screenshot(path=str(out / "console-overview.png"), full_page=True)
            page.goto(f"{server.url}/topics/{demo.EVENTS_TOPIC}")
            page.locator("#partitions-table tbody tr").first.wait_for()
            page.locator("#chart svg path").first.wait_for(state="attached")
            page.screenshot(path=str(out / "console-topic.png"), full_page=True)
            page.goto(f"{server.url}/groups/{demo.SAMPLE_GROUP}")
            page.locator("#offsets-table tbody tr").first.wait_for()
            page.locator("#chart svg path").first.wait_for(state="attached")
            page.screenshot(path=str(out / "console-group.png"), full_page=True)
            browser.close()
    finally:
        stop.set()
        traffic.join(60)
        server.stop()
    print(f"screenshots in {out}: console-overview.png, console-topic.png, console-group.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="page views the demo produces")
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set RAYQUEUE_CHROMIUM)", file=sys.stderr)
        return 1
    demo = load_demo()
    return demo.main(["--records", str(args.records)], after=lambda cluster: shoot(cluster, demo, args.out))


if __name__ == "__main__":
    sys.exit(main())
