"""What TLS and SASL cost a Kafka client: confluent-kafka through one broker's two listeners,
PLAINTEXT and SASL_SSL (SCRAM-SHA-512, TLS with a CA made for the run), in the same run.

One cluster (one broker, RF 1) with both listeners on loopback; one user made with
AlterUserScramCredentials. Each round produces ``--records`` values of 100 bytes with
confluent-kafka's producer (one ``produce()`` per record, librdkafka's defaults but for lz4)
through each listener, each to a topic of its own, then reads them back with its consumer
(defaults); the order of the two listeners alternates between rounds. Printed: both rates
per round, the median and range of each, and the median (range) of the rounds' paired ratios
SASL_SSL / PLAINTEXT; the target is >= 0.7x (Kafka's own TLS cost is in that range). The last
line is one JSON object with every figure.

Run: ``.venv/bin/python scripts/bench_security.py [--records N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import bench_clients as bc  # noqa: E402
import ray  # noqa: E402
from bench_ray import start_ray  # noqa: E402
from bench_stats import paired_ratios, spread  # noqa: E402
from make_test_ca import make_test_pki  # noqa: E402

import rayqueue  # noqa: E402

TARGET = 0.7
USER, PASSWORD = "bench", "bench-secret"
CLIENT = {"compression.type": "lz4"}
SIDES = ("PLAINTEXT", "SASL_SSL")


def launch(root: str, pki) -> rayqueue.Cluster:  # noqa: ANN001 - make_test_ca.TestPki
    """One broker with a PLAINTEXT and a SASL_SSL listener on loopback, one SCRAM user."""
    cluster = rayqueue.launch(
        log_dirs=os.path.join(root, "data"),
        rayqueue_namespace="rayqueue-bench-security",
        rayqueue_num_brokers=1,
        listeners="PLAIN://127.0.0.1:0,SECURE://127.0.0.1:0",
        listener_security_protocol_map="PLAIN:PLAINTEXT,SECURE:SASL_SSL",
        ssl_keystore_location=str(pki.broker),
        ssl_truststore_location=str(pki.ca),
        sasl_enabled_mechanisms="SCRAM-SHA-512",
        offsets_topic_num_partitions=1,
        transaction_state_log_num_partitions=1,
    )
    cluster.admin().add_scram_user(USER, PASSWORD, "SCRAM-SHA-512")
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    start_ray()
    root = tempfile.mkdtemp(prefix="rayqueue-bench-security-")
    pki = make_test_pki(os.path.join(root, "pki"))
    cluster = launch(root, pki)
    secure = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(pki.ca),
    }
    sides = {
        "PLAINTEXT": (cluster.listener_bootstrap_servers("PLAIN"), {}),
        "SASL_SSL": (cluster.listener_bootstrap_servers("SECURE"), secure),
    }
    value = bc.payload(100)
    rates: dict[str, dict[str, list[float]]] = {f: {s: [] for s in SIDES} for f in ("produce", "consume")}
    try:
        print(f"confluent-kafka through one broker's PLAINTEXT and SASL_SSL listeners, {args.records:,} x 100 B, lz4")
        for r in range(args.rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                bootstrap, security = sides[side]
                topic = bc.unique(f"bench-{side.lower()}")
                cluster.admin().create_topic(topic, 1, 1)
                produced = bc.ck_produce(bootstrap, topic, args.records, value, {**CLIENT, **security})
                # ck_produce's first (untimed) record is in the topic too.
                consumed = bc.ck_consume(bootstrap, topic, args.records + 1, security)
                rates["produce"][side].append(produced)
                rates["consume"][side].append(consumed)
                print(f"  round {r + 1} {side:>9}: produce {produced:>10,.0f} records/s  consume {consumed:>10,.0f}")
                cluster.admin().delete_topic(topic)
        result: dict[str, object] = {
            "date": datetime.date.today().isoformat(),
            "records": args.records,
            "rounds": args.rounds,
            "target": TARGET,
        }
        for flow, by_side in rates.items():
            ratios = paired_ratios(by_side["SASL_SSL"], by_side["PLAINTEXT"])
            plain, tls, ratio = spread(by_side["PLAINTEXT"]), spread(by_side["SASL_SSL"]), spread(ratios)
            verdict = "meets" if ratio["median"] >= TARGET else "MISSES"
            print(
                f"{flow}: PLAINTEXT {plain['median']:,.0f} records/s ({plain['min']:,.0f}-{plain['max']:,.0f}),"
                f" SASL_SSL {tls['median']:,.0f} ({tls['min']:,.0f}-{tls['max']:,.0f}):"
                f" {ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f}), {verdict} the {TARGET}x target"
            )
            result[flow] = {"plaintext": plain, "sasl_ssl": tls, "ratio": ratio}
        print(json.dumps(result))
    finally:
        cluster.shutdown(delete_data=True)
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
