"""MkDocs hooks of the documentation site (``mkdocs.yml``): the configuration reference.

``docs/configuration.md`` holds markers such as ``<!-- config-table: broker -->``; each is
replaced, when the site is built, by a table of that ConfigDef's keys as the code defines
them (name, type, default, allowed values, Kafka's name where it differs, description), so
the reference is never written twice and cannot drift from the code.
"""

from __future__ import annotations

import re
from typing import Any

MARKER = re.compile(r"<!-- config-table: (\w+) -->")
# A default this long or longer reads as "no limit" (Kafka's Long.MAX_VALUE, Integer.MAX_VALUE).
UNBOUNDED = 2**31 - 1


def _tables() -> dict[str, Any]:
    """The code's key tables by marker name (imported when a page asks for one)."""
    from actors.config import BROKER_CONFIG, TOPIC_SYNONYMS
    from rayqueue.config import CONSUMER_CONFIG, PRODUCER_CONFIG
    from storage.config import LOG_CONFIG

    return {
        "broker": (BROKER_CONFIG, TOPIC_SYNONYMS),
        "topic": (LOG_CONFIG, {}),
        "producer": (PRODUCER_CONFIG, {}),
        "consumer": (CONSUMER_CONFIG, {}),
    }


def _cell(text: Any) -> str:
    """Text fit for one Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(key: Any) -> str:
    value = key.default
    if value is None:
        return "null" if key.nullable else "(required)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value >= UNBOUNDED:
        return f"`{value}` (no limit)"
    if isinstance(value, int) and value >= 10_000:
        return f"`{value}` ({value:,})".replace(",", "\u2009")
    if isinstance(value, (list, tuple)):
        return f"`{','.join(map(str, value))}`" if value else "empty"
    if value == "":
        return "empty"
    return f"`{value}`"


def _allowed(key: Any) -> str:
    if key.choices:
        return ", ".join(f"`{c}`" for c in key.choices)
    low = None if key.min is None else f"{key.min:g}"
    high = None if key.max is None else f"{key.max:g}"
    if low is not None and high is not None:
        return f"{low} .. {high}"
    if low is not None:
        return f">= {low}"
    if high is not None:
        return f"<= {high}"
    return ""


def _kafka_name(name: str, synonyms: dict[str, str]) -> str:
    if name.startswith("rayqueue."):
        return "rayqueue's own"
    if name in synonyms and synonyms[name] != name:
        return f"default of topic key `{synonyms[name]}`"
    return "same"


def config_table(which: str) -> str:
    """The Markdown table of one ConfigDef (``broker``, ``topic``, ``producer``, ``consumer``)."""
    definition, synonyms = _tables()[which]
    rows = [
        "| key | type | default | allowed | Kafka | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in sorted(definition.keys):
        key = definition.keys[name]
        rows.append(
            f"| `{name}` | {key.type} | {_cell(_default(key))} | {_cell(_allowed(key))} | "
            f"{_cell(_kafka_name(name, synonyms))} | {_cell(key.doc)} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs hook: replace each config-table marker with its generated table."""
    return MARKER.sub(lambda m: config_table(m.group(1)), markdown)
