"""The message browser: read a window of one partition (by offset, by timestamp or the
newest N) with a plain assign-mode consumer, and show each record's bytes as text, JSON
and hex. Offsets are looked up and records read as the view's principal (DESCRIBE and
READ on the topic, under the cluster's ACLs)."""

from __future__ import annotations

import json
import time
from typing import Any

from actors.types import TopicPartition
from rayqueue.console.state import ClusterView
from rayqueue.errors import InvalidRequestError, UnknownTopicOrPartitionError
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

MODES = ("offset", "timestamp", "newest")
MAX_LIMIT = 500
# A key filter reads past non-matching records; this bounds how far one request reads.
MAX_SCAN = 20_000
# A browser shows this much of a large key or value (the size is always given).
SHOW_BYTES = 64 * 1024
_READ_DEADLINE_S = 10.0


def show_bytes(data: bytes | None) -> dict[str, Any] | None:
    """Bytes in the three views the browser offers: UTF-8 text (None when not UTF-8),
    pretty-printed JSON (None when not JSON) and hex; None stays None (Kafka's null)."""
    if data is None:
        return None
    shown = bytes(data[:SHOW_BYTES])
    try:
        text: str | None = shown.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    pretty = None
    if text is not None and len(data) <= SHOW_BYTES:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    return {
        "size": len(data),
        "truncated": len(data) > SHOW_BYTES,
        "text": text,
        "json": pretty,
        "hex": shown.hex(" "),
    }


def _record(r: Any) -> dict[str, Any]:
    return {
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestamp_type": "LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
        "key": show_bytes(r.key),
        "value": show_bytes(r.value),
        "headers": [{"key": k, "value": show_bytes(v)} for k, v in r.headers],
    }


def _key_matches(key: bytes | None, wanted: str) -> bool:
    if key is None:
        return False
    return wanted in key.decode("utf-8", errors="backslashreplace")


def browse(
    view: ClusterView,
    topic: str,
    partition: int,
    mode: str = "newest",
    offset: int | None = None,
    timestamp: int | None = None,
    limit: int = 20,
    key_filter: str | None = None,
) -> dict[str, Any]:
    """Records of one partition. ``mode``: ``offset`` (from ``offset``), ``timestamp`` (from
    the first record at or after ``timestamp`` ms) or ``newest`` (the last ``limit``).
    ``key_filter`` keeps records whose key (as text) contains it, reading at most MAX_SCAN
    records. Returns the partition's bounds, where reading started and the records."""
    if mode not in MODES:
        raise InvalidRequestError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    admin = view.admin
    meta = admin.describe_topics([topic]).get(topic)
    if meta is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    if not 0 <= partition < len(meta.partitions):
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    tp = TopicPartition(topic, partition)
    start_of_log = admin.list_offsets({tp: EARLIEST_TIMESTAMP})[tp].offset
    end = admin.list_offsets({tp: LATEST_TIMESTAMP})[tp].offset
    if mode == "offset":
        if offset is None or offset < 0:
            raise InvalidRequestError("mode=offset needs an offset >= 0")
        start = max(offset, start_of_log)
    elif mode == "timestamp":
        if timestamp is None or timestamp < 0:
            raise InvalidRequestError("mode=timestamp needs a timestamp (ms since the epoch) >= 0")
        found = admin.list_offsets({tp: timestamp})[tp].offset
        start = found if found >= 0 else end
    else:
        start = max(start_of_log, end - limit)
    records = _read(view, tp, start, end, limit, key_filter) if start < end else []
    return {
        "topic": topic,
        "partition": partition,
        "log_start_offset": start_of_log,
        "high_watermark": end,
        "start_offset": start,
        "records": records,
    }


def _read(view: ClusterView, tp: TopicPartition, start: int, end: int, limit: int, key_filter: str | None) -> list:
    consumer = view.consumer(client_id="rayqueue-console", enable_auto_commit=False)
    out: list[dict[str, Any]] = []
    scanned = 0
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + _READ_DEADLINE_S
        # Offsets may have gaps (compaction, transaction markers), so stop on the position.
        while len(out) < limit and scanned < MAX_SCAN and time.monotonic() < deadline:
            if consumer.position(tp) >= end:
                break
            for r in consumer.poll(200, max_records=MAX_SCAN - scanned):
                if r.offset >= end:
                    break
                scanned += 1
                if key_filter and not _key_matches(r.key, key_filter):
                    continue
                out.append(_record(r))
                if len(out) >= limit:
                    break
    finally:
        consumer.close()
    return out
