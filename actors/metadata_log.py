"""The controller's metadata log: every cluster metadata change, durable before it acts.

Each change is one JSON record in a v2 batch appended to a ``storage.Log`` that fsyncs
every append (``flush.messages=1``). A restarted controller replays the records in order
to rebuild its state, as KRaft's ``__cluster_metadata`` log does. A record that is not a
JSON object with a ``type`` is skipped, logged and counted, never the end of a start.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actors.internal_records import SkippedRecords, json_object
from actors.names import METADATA_TOPIC
from storage import Log, RecordBatchBuilder, iter_batches, log_config

# Never deleted by retention, fsynced on every record.
_METADATA_LOG_CONFIG = {
    "retention.ms": -1,
    "retention.bytes": -1,
    "flush.messages": 1,
    "segment.bytes": 64 * 1024 * 1024,
}


class MetadataLog:
    """An append-only log of JSON metadata records."""

    def __init__(self, directory: str | Path) -> None:
        self._log = Log(Path(directory), log_config(_METADATA_LOG_CONFIG))

    def append(self, record: dict[str, Any]) -> int:
        """Write one record durably; returns its offset."""
        return self.append_all([record])

    def append_all(self, records: list[dict[str, Any]]) -> int:
        """Write records durably, in one batch (one fsync); returns the first one's offset."""
        builder = RecordBatchBuilder()
        for record in records:
            builder.append(json.dumps(record, sort_keys=True).encode(), key=record["type"].encode())
        return self._log.append(builder.build()).first_offset

    def entries(self, skipped: SkippedRecords | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(offset, record)`` for every record from the start, in order. One that is not a
        JSON object with a string ``type`` is left out and told to ``skipped`` (logged and
        counted; a fresh SkippedRecords when None)."""
        skipped = skipped if skipped is not None else SkippedRecords(METADATA_TOPIC)
        offset = self._log.log_start_offset
        while offset < self._log.log_end_offset:
            data = self._log.read(offset, 1 << 20).records
            for batch in iter_batches(data):
                for record in skipped.records(0, batch, offset):
                    try:
                        value = json_object(record.value)
                        if not isinstance(value.get("type"), str):
                            raise ValueError("the record has no string 'type'")
                    except ValueError as exc:
                        skipped.skip(0, record.offset, exc)
                        continue
                    yield record.offset, value
                offset = batch.next_offset

    def replay(self) -> Iterator[dict[str, Any]]:
        """Every readable record from the start, in order (see :meth:`entries`)."""
        for _, record in self.entries():
            yield record

    def close(self) -> None:
        """Close the underlying log cleanly."""
        self._log.close()
