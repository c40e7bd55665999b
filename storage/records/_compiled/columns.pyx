# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: embedsignature=True, embedsignature.format=clinic, binding=True
"""Compiled twins of ``storage/records/columns.py``'s kernels (the reference: read it first):
``parse_columns``, the records of many batches as row columns, with the same results and the
same errors, and ``iter_rows``, records built of those rows one at a time. The columns module
picks them at import when this extension is built (``storage.extensions``).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_FromLongLong
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
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

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)
    PyObject* PyTuple_GET_ITEM_ "PyTuple_GET_ITEM" (object t, Py_ssize_t i)


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


cdef inline void set_item(object record, Py_ssize_t i, object item) noexcept:
    Py_INCREF(item)  # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(record, i, item)


cdef class _RowIterator:
    """Twin of columns._iter_rows_py: each step builds one ``record_type`` tuple in C from the
    row columns (its offset from the ``offsets`` list, its key and value copied out of the
    buffer, the timestamp and type ints shared between records that have the same), while
    ``offsets`` holds items; its own cursor."""

    cdef object record_type
    cdef tuple prefix, suffix
    cdef Py_ssize_t nprefix, size
    cdef _Buffer data
    cdef object rows              # keeps the arrays below alive
    cdef const int64_t[::1] timestamps
    cdef const int32_t[::1] types
    cdef const int64_t[::1] kstart, klen, vstart, vlen
    cdef dict headers             # row -> headers, None when no row has any
    cdef list offsets, keys, values
    cdef Py_ssize_t start, j, n   # n: the rows it may build (offsets may only shrink)
    cdef object timestamp         # the last timestamp built (records mostly share one)
    cdef int64_t last_ts
    cdef object type_int
    cdef int32_t last_type

    def __iter__(self):
        return self

    def __length_hint__(self):
        return max(min(PyList_GET_SIZE(self.offsets), self.n) - self.j, 0)

    def __next__(self):
        cdef Py_ssize_t j = self.j
        cdef Py_ssize_t row = self.start + j
        cdef Py_ssize_t k
        cdef Py_ssize_t n = self.nprefix
        cdef int64_t ts
        cdef PyObject* found
        if j >= PyList_GET_SIZE(self.offsets) or j >= self.n:  # cleared: the chunk was stopped
            raise StopIteration
        ts = self.timestamps[row]
        if ts != self.last_ts:
            self.last_ts = ts
            self.timestamp = PyLong_FromLongLong(ts)
        if self.types[row] != self.last_type:
            self.last_type = self.types[row]
            self.type_int = PyLong_FromLongLong(self.last_type)
        record = PyType_GenericAlloc(<PyTypeObject*>self.record_type, self.size)
        for k in range(n):
            set_item(record, k, <object>PyTuple_GET_ITEM_(self.prefix, k))
        set_item(record, n, <object>PyList_GET_ITEM(self.offsets, j))
        set_item(record, n + 1, self.timestamp)
        set_item(record, n + 2, self.type_int)
        if self.keys is not None:
            set_item(record, n + 3, <object>PyList_GET_ITEM(self.keys, j))
        elif self.klen[row] < 0:
            set_item(record, n + 3, None)
        else:
            set_item(record, n + 3, PyBytes_FromStringAndSize(
                <const char*>self.data.ptr + self.kstart[row], self.klen[row]))
        if self.values is not None:
            set_item(record, n + 4, <object>PyList_GET_ITEM(self.values, j))
        elif self.vlen[row] < 0:
            set_item(record, n + 4, None)
        else:
            set_item(record, n + 4, PyBytes_FromStringAndSize(
                <const char*>self.data.ptr + self.vstart[row], self.vlen[row]))
        found = NULL if self.headers is None else PyDict_GetItem(self.headers, row)
        set_item(record, n + 5, () if found == NULL else <object>found)
        for k in range(len(self.suffix)):
            set_item(record, n + 6 + k, <object>PyTuple_GET_ITEM_(self.suffix, k))
        self.j = j + 1
        return record


def iter_rows(rows, record_type, tuple prefix, tuple suffix, list offsets, Py_ssize_t start, keys, values):
    """Twin of columns._iter_rows_py: the records of ``rows`` from row ``start``, one per item
    of ``offsets`` while it holds them; (records, cursor), both the iterator itself."""
    cdef _RowIterator it = _RowIterator.__new__(_RowIterator)
    cdef Py_ssize_t n = len(offsets)
    cdef Py_ssize_t size = len(prefix) + 6 + len(suffix)
    if not (isinstance(record_type, type) and issubclass(record_type, tuple)
            and record_type.__basicsize__ == tuple.__basicsize__
            and len(getattr(record_type, "_fields", ())) == size):
        raise TypeError(f"{record_type!r} is not a named tuple of {size} fields")
    if start < 0 or start + n > len(rows.offset):
        raise ValueError(f"rows {start}..{start + n} past the {len(rows.offset)} rows")
    if (keys is not None and len(keys) < n) or (values is not None and len(values) < n):
        raise ValueError("fewer keys or values than offsets")
    it.record_type = record_type
    it.prefix, it.suffix = prefix, suffix
    it.nprefix, it.size = len(prefix), size
    it.data = _Buffer(rows.data)
    it.rows = rows
    it.timestamps = rows.timestamp
    it.types = rows.timestamp_type
    it.kstart, it.klen, it.vstart, it.vlen = rows.kstart, rows.klen, rows.vstart, rows.vlen
    it.headers = rows.headers or None
    it.offsets = offsets
    it.keys = None if keys is None else list(keys)  # lists of their own: nobody shrinks them under it
    it.values = None if values is None else list(values)
    it.start = start
    it.n = n
    it.j = 0
    it.last_type = -1
    it.last_ts = 0
    it.timestamp = 0
    return it, it
