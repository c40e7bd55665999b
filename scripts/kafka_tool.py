"""Run one of Kafka's command-line tools against rayqueue, as Kafka's bin/*.sh scripts do.

The tools are Kafka 4.x's own (kafka-tools at the version pinned in tests/jvm/pins.toml),
resolved by Maven into ~/.m2 the first time (``make jvm`` does the same), and started as
``java -cp <classpath> <main class> args`` with Log4j2 at WARN on stderr:

    .venv/bin/python scripts/kafka_tool.py kafka-topics --bootstrap-server HOST:PORT --list
    .venv/bin/python scripts/kafka_tool.py --list-tools

Needs java (17+) and mvn on PATH.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.jvm import maven  # noqa: E402
from tests.jvm.jvm import JVM_OPTIONS, KAFKA_TOOLS  # noqa: E402


def main(argv: list[str]) -> int:
    """Exec the tool named by ``argv[0]`` with the rest as its arguments."""
    if not argv or argv[0] in ("-h", "--help", "--list-tools"):
        print(__doc__.strip(), file=sys.stderr)
        print("\ntools:", file=sys.stderr)
        for name, main_class in KAFKA_TOOLS.items():
            print(f"  {name:28} {main_class}", file=sys.stderr)
        return 0 if argv else 2
    name, args = argv[0], argv[1:]
    main_class = KAFKA_TOOLS.get(name.removesuffix(".sh"))
    if main_class is None:
        print(f"error: unknown tool {name!r} (--list-tools lists them)", file=sys.stderr)
        return 2
    try:
        classpath = maven.classpath("kafka")
    except maven.JvmUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    os.execvp("java", ["java", *JVM_OPTIONS, "-cp", classpath, main_class, *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
