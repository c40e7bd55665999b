"""Kafka record batches, message format v2, byte for byte, as aiokafka's ``record`` package.

A batch is the 61-byte header of :mod:`storage.batch_header` followed by its records,
compressed as a whole when the attributes name a codec. Each record is::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value | headerCount varint | headers

(a length of -1 is a null key or value; a header is keyLength varint, utf-8 key,
valueLength varint, value).

- :mod:`storage.records.reader`: ``RecordBatch`` (lazy, one batch), ``iter_batches``,
  ``walk_records`` (the leader's walk), ``committed_batches`` (read_committed filtering);
- :mod:`storage.records.builder`: ``RecordBatchBuilder`` (Kafka's MemoryRecordsBuilder),
  one record at a time or whole columns;
- :mod:`storage.records.columns`: ``decode_columns``, many batches to numpy/Arrow columns;
- :mod:`storage.records.control`: control batches (transaction markers).

The builder and the per-record loops have compiled twins (``_compiled/``, see
:mod:`storage.extensions`). This package imports nothing itself: only the module a caller
needs is loaded (the columns pull in pyarrow, the reader only numpy).
"""

from __future__ import annotations

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]

__all__ = ["Buffer", "Header"]
