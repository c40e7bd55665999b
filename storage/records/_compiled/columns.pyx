# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: embedsignature=True, embedsignature.format=clinic, binding=True
"""Compiled twin of ``storage/records/columns.py``'s pass over every record (the reference:
read it first): ``parse_columns``, the records of many batches as row columns, with the same
results and the same errors. The columns module picks it at import when this extension is
built (``storage.extensions``).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from storage.records._compiled.reader cimport (
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_TIMESTAMP,
    H_LAST_OFFSET_DELTA,
    H_MAX_TIMESTAMP,
    H_RECORDS_COUNT,
    LOG_APPEND_TIME_BIT,
    MIN_RECORD_SIZE,
    RecordFields,
    _Buffer,
    header_tuple,
    headers_of,
    parse_record,
)

import numpy as np

from storage.errors import CorruptRecordError


def parse_columns(data, arr, list spans):
    """Twin of columns._parse_columns_py: every record of the (start, end, header) spans as
    row columns (offsets, timestamps, timestamp types, key/value starts and lengths, headers)."""
    cdef _Buffer b = _Buffer(data)
    cdef const uint8_t* buf = b.ptr
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t row = 0
    cdef Py_ssize_t start, end, pos, count, i
    cdef int64_t base, base_ts, max_ts, last_delta, prev
    cdef int32_t ts_type
    cdef RecordFields f
    cdef tuple h
    for span in spans:
        start, end, header = span
        h = header_tuple(header)
        count = h[H_RECORDS_COUNT]
        if start < 0 or end > b.size or start > end or count < 0 or count > (end - start) // MIN_RECORD_SIZE:
            raise CorruptRecordError(f"{count} records cannot fit in {end - start} bytes")
        total += count
    offsets_a = np.empty(total, np.int64)
    timestamps_a = np.empty(total, np.int64)
    types_a = np.empty(total, np.int32)
    kstart_a = np.empty(total, np.int64)
    klen_a = np.empty(total, np.int64)
    vstart_a = np.empty(total, np.int64)
    vlen_a = np.empty(total, np.int64)
    cdef int64_t[::1] offsets = offsets_a
    cdef int64_t[::1] timestamps = timestamps_a
    cdef int32_t[::1] types = types_a
    cdef int64_t[::1] kstart = kstart_a
    cdef int64_t[::1] klen = klen_a
    cdef int64_t[::1] vstart = vstart_a
    cdef int64_t[::1] vlen = vlen_a
    cdef dict row_headers = {}
    for span in spans:
        start, end, header = span
        h = header_tuple(header)
        count = h[H_RECORDS_COUNT]
        base = h[H_BASE_OFFSET]
        base_ts = h[H_BASE_TIMESTAMP]
        max_ts = h[H_MAX_TIMESTAMP]
        last_delta = h[H_LAST_OFFSET_DELTA]
        ts_type = 1 if h[H_ATTRIBUTES] & LOG_APPEND_TIME_BIT else 0
        pos = start
        prev = -1
        for i in range(count):
            parse_record(buf, &pos, end, &f)
            if f.od <= prev or f.od > last_delta:
                raise CorruptRecordError("offset deltas not increasing within a batch's lastOffsetDelta")
            prev = f.od
            # int64 arithmetic wraps here, as the reference's numpy columns do.
            offsets[row] = <int64_t>(<uint64_t>base + <uint64_t>f.od)
            timestamps[row] = max_ts if ts_type else <int64_t>(<uint64_t>base_ts + <uint64_t>f.tsd)
            types[row] = ts_type
            kstart[row] = f.kpos
            klen[row] = f.klen
            vstart[row] = f.vpos
            vlen[row] = f.vlen
            if f.hcount:
                row_headers[row] = headers_of(buf, &f)
            row += 1
        if pos != end:
            raise CorruptRecordError(f"records of the batch end at byte {pos}, the batch at {end}")
    return offsets_a, timestamps_a, types_a, kstart_a, klen_a, vstart_a, vlen_a, row_headers
