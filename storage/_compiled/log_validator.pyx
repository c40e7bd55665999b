# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: embedsignature=True, embedsignature.format=clinic, binding=True
"""Compiled twin of ``storage/log_validator.py``'s kernels over an append's request (the
reference: read it first).

``check_request`` is ``check_batches`` (``storage/batch_header.py``: header sanity, CRC,
producer batches) followed by ``validate_batches`` (Kafka's LogValidator: every record
walked) in one call per request, with the same checks in the same order and the same
errors; ``patch_headers`` assigns offsets and the leader epoch without copying the batches.
The CRC is the ``crc32c`` package's. The validator module picks these at import when this
extension is built (``storage.extensions``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc

from storage.records._compiled.reader cimport Walk, _Buffer, rq_add_overflow, walk_region

import crc32c as _crc32c

from storage import compression as _compression
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnknownMagicError,
)
from storage.batch_header import BatchHeader
from storage.producer_state import AppendOrigin

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)


cdef enum:
    # The v2 header, as in storage/batch_header.py.
    HEADER_SIZE = 61
    LOG_OVERHEAD = 12
    MIN_BATCH_LENGTH = 49
    CRC_OFFSET = 17
    ATTRIBUTES_OFFSET = 21
    COMPRESSION_MASK = 0x07
    TIMESTAMP_TYPE_MASK = 0x08
    CONTROL_MASK = 0x20
    HEADER_FIELDS = 14

_CLIENT = AppendOrigin.CLIENT
_REPLICATION = AppendOrigin.REPLICATION
cdef object _checked_type = None  # the header type check_request last found to be a plain named tuple


cdef inline int64_t be64(const uint8_t* p) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline int32_t be32(const uint8_t* p) noexcept:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int16_t be16(const uint8_t* p) noexcept:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline void put64(uint8_t* p, int64_t value) noexcept:
    cdef uint64_t v = <uint64_t>value
    cdef int i
    for i in range(7, -1, -1):
        p[i] = v & 0xFF
        v >>= 8


cdef inline void put32(uint8_t* p, int32_t value) noexcept:
    cdef uint32_t v = <uint32_t>value
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef struct Fields:
    # A header's fields, in BatchHeader order.
    Py_ssize_t position
    int64_t base_offset
    int32_t batch_length
    int32_t partition_leader_epoch
    int32_t magic
    uint32_t crc
    int16_t attributes
    int32_t last_offset_delta
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t records_count


cdef inline void set_item(object header, Py_ssize_t i, object item) noexcept:
    Py_INCREF(item)  # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(header, i, item)


cdef object new_header(PyTypeObject* header_type, Fields* f):
    """A BatchHeader (a named tuple) of ``f``, built as tuple.__new__ would, without the row tuple."""
    header = PyType_GenericAlloc(header_type, HEADER_FIELDS)
    set_item(header, 0, PyLong_FromLongLong(f.position))
    set_item(header, 1, PyLong_FromLongLong(f.base_offset))
    set_item(header, 2, PyLong_FromLong(f.batch_length))
    set_item(header, 3, PyLong_FromLong(f.partition_leader_epoch))
    set_item(header, 4, PyLong_FromLong(f.magic))
    set_item(header, 5, PyLong_FromLongLong(f.crc))
    set_item(header, 6, PyLong_FromLong(f.attributes))
    set_item(header, 7, PyLong_FromLong(f.last_offset_delta))
    set_item(header, 8, PyLong_FromLongLong(f.base_timestamp))
    set_item(header, 9, PyLong_FromLongLong(f.max_timestamp))
    set_item(header, 10, PyLong_FromLongLong(f.producer_id))
    set_item(header, 11, PyLong_FromLong(f.producer_epoch))
    set_item(header, 12, PyLong_FromLong(f.base_sequence))
    set_item(header, 13, PyLong_FromLong(f.records_count))
    return header


cdef int check_batch(object view, const uint8_t* buf, Py_ssize_t position, Py_ssize_t end,
                     Py_ssize_t max_batch_size, Fields* f) except -1:
    """batch_header.check_batch: the batch at ``position`` sane, whole and CRC-correct."""
    cdef const uint8_t* p = buf + position
    cdef int32_t length
    cdef int magic
    cdef Py_ssize_t size
    if end - position < LOG_OVERHEAD + 5:
        raise CorruptRecordError(f"truncated batch at byte {position}: {end - position} bytes left")
    length = be32(p + 8)
    magic = <int>(<signed char>p[16])
    if magic != 2:
        raise UnknownMagicError(f"batch at byte {position} has magic {magic}; only v2 is stored")
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at byte {position} has batchLength {length} < {MIN_BATCH_LENGTH}")
    size = <Py_ssize_t>length + LOG_OVERHEAD
    if size > max_batch_size:
        raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_batch_size}")
    if size > end - position or end - position < HEADER_SIZE:
        raise CorruptRecordError(f"batch at byte {position} needs {size} bytes, {end - position} left")
    f.position = position
    f.base_offset = be64(p)
    f.batch_length = length
    f.partition_leader_epoch = be32(p + 12)
    f.magic = magic
    f.crc = <uint32_t>be32(p + CRC_OFFSET)
    f.attributes = be16(p + 21)
    f.last_offset_delta = be32(p + 23)
    f.base_timestamp = be64(p + 27)
    f.max_timestamp = be64(p + 35)
    f.producer_id = be64(p + 43)
    f.producer_epoch = be16(p + 51)
    f.base_sequence = be32(p + 53)
    f.records_count = be32(p + 57)
    actual = _crc32c.crc32c(view[position + ATTRIBUTES_OFFSET : position + size])
    if actual != f.crc:
        raise CorruptRecordError(
            f"CRC mismatch in batch at byte {position}: stored {f.crc:#x}, computed {actual:#x}"
        )
    if f.last_offset_delta < 0 or f.records_count < 0:
        raise CorruptRecordError(f"batch at byte {position} has negative lastOffsetDelta or recordsCount")
    if (f.attributes & COMPRESSION_MASK) > 4:
        raise CorruptRecordError(
            f"batch at byte {position} has unknown compression codec {f.attributes & COMPRESSION_MASK}"
        )
    return 0


cdef int walk_batch(object view, const uint8_t* buf, Fields* f, object max_decompressed, Walk* w) except -1:
    """record_batch.walk_records of one checked batch (decompressing within ``max_decompressed``)."""
    cdef Py_ssize_t start = f.position + HEADER_SIZE
    cdef Py_ssize_t end = f.position + f.batch_length + LOG_OVERHEAD
    cdef _Buffer body
    cdef int codec = f.attributes & COMPRESSION_MASK
    if codec:
        data = _compression.decompress(codec, view[start:end], max_decompressed)
        body = _Buffer(data)
        buf, start, end = body.ptr, 0, body.size
    if f.records_count == 0:
        if start != end:
            raise CorruptRecordError(f"{end - start} bytes in a batch of 0 records")
        w.max_tsd, w.null_keys, w.in_order = 0, 0, True
        return 0
    walk_region(buf, start, end, f.records_count, w)
    return 0


def check_request(view, Py_ssize_t max_batch_size, bint leader, origin, bint compacted, max_decompressed,
                  header_type=BatchHeader):
    """Twin of log_validator._check_request_py: (headers, fixes) of a request, or the error the pure twin raises."""
    cdef Py_buffer pybuf
    cdef const uint8_t* buf
    cdef Py_ssize_t end, position = 0, index, n = 0, cap = 0
    cdef Fields* all_fields = NULL
    cdef Fields* grown
    cdef Fields* f
    cdef Walk w
    cdef long long max_ts
    cdef bint client, overflow
    cdef list headers = []
    cdef list fixes = []
    global _checked_type
    if header_type is not _checked_type:
        if not (isinstance(header_type, type) and issubclass(header_type, tuple)
                and header_type.__basicsize__ == tuple.__basicsize__):
            raise TypeError(f"{header_type!r} is not a named tuple")
        _checked_type = header_type
    PyObject_GetBuffer(view, &pybuf, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t*>pybuf.buf
        end = pybuf.len
        if end == 0:
            raise CorruptRecordError("empty record set")
        # Every header first (as check_batches), then every batch's records (as validate_batches).
        while True:
            if n == cap:
                cap = max(4, 2 * cap)
                grown = <Fields*>realloc(all_fields, cap * sizeof(Fields))
                if grown == NULL:
                    raise MemoryError()
                all_fields = grown
            f = &all_fields[n]
            check_batch(view, buf, position, end, max_batch_size, f)
            if leader and (f.records_count == 0 or f.records_count != <int64_t>f.last_offset_delta + 1):
                raise InvalidRecordError(
                    f"batch at byte {position}: recordsCount {f.records_count} does not match "
                    f"lastOffsetDelta {f.last_offset_delta}"
                )
            headers.append(new_header(<PyTypeObject*>header_type, f))
            n += 1
            position += <Py_ssize_t>f.batch_length + LOG_OVERHEAD
            if position >= end:
                break
        if origin is _REPLICATION:
            return headers, fixes
        client = origin is _CLIENT
        for index in range(n):
            f = &all_fields[index]
            if client and f.attributes & CONTROL_MASK:
                raise InvalidRecordError(
                    f"batch at byte {f.position} is a control batch: clients may not write transaction markers"
                )
            walk_batch(view, buf, f, max_decompressed, &w)
            if not w.in_order:
                raise InvalidRecordError(
                    f"batch at byte {f.position}: the offset deltas of its {f.records_count} records are not "
                    f"0..{f.records_count - 1}"
                )
            if compacted and w.null_keys:
                raise InvalidRecordError(
                    f"batch at byte {f.position}: a compacted topic cannot accept a record without a key"
                )
            if f.records_count == 0:
                max_ts, overflow = -1, False  # NO_TIMESTAMP
            else:
                overflow = rq_add_overflow(f.base_timestamp, w.max_tsd, &max_ts)
            if overflow or f.max_timestamp != max_ts or f.attributes & TIMESTAMP_TYPE_MASK:
                if overflow:
                    # baseTimestamp + a timestampDelta past what a timestamp (int64) can hold.
                    raise CorruptRecordError(f"batch at byte {f.position}: a record timestamp does not fit int64")
                fixes.append((index, max_ts))
        return headers, fixes
    finally:
        free(all_fields)
        PyBuffer_Release(&pybuf)


def patch_headers(view, list headers, int64_t first_offset, int32_t leader_epoch):
    """Twin of log_validator._patch_headers_py: (write parts, patched headers, next offset), bodies uncopied."""
    cdef Py_ssize_t n = len(headers)
    cdef Py_ssize_t i, at
    cdef int64_t offset = first_offset
    cdef bytearray patched
    cdef uint8_t* out
    cdef tuple h
    cdef PyTypeObject* header_type
    cdef list parts = []
    cdef list moved = []
    cdef Py_ssize_t position
    if n == 0:
        return parts, moved, first_offset
    cls = type(headers[0])
    header_type = <PyTypeObject*>cls
    if n == 1:
        # The common case: the header's first 16 bytes (baseOffset, batchLength, epoch) anew,
        # then the caller's bytes from there on.
        h = <tuple>headers[0]
        head = PyBytes_FromStringAndSize(NULL, 16)
        out = <uint8_t*>PyBytes_AS_STRING(head)
        put64(out, first_offset)
        put32(out + 8, <int32_t>h[2])
        put32(out + 12, leader_epoch)
        position = h[0]
        parts.append(head)
        parts.append(view[position + 16 : position + <Py_ssize_t>h[2] + LOG_OVERHEAD])
        moved.append(with_offset(header_type, h, offset, leader_epoch))
        return parts, moved, offset + <int64_t>h[7] + 1
    patched = bytearray(n * HEADER_SIZE)
    out = <uint8_t*>(<char*>patched)
    view_of_patched = memoryview(patched)
    for i in range(n):
        h = <tuple>headers[i]
        position = h[0]
        at = i * HEADER_SIZE
        patched[at : at + HEADER_SIZE] = view[position : position + HEADER_SIZE]
        put64(out + at, offset)
        put32(out + at + 12, leader_epoch)
        parts.append(view_of_patched[at : at + HEADER_SIZE])
        parts.append(view[position + HEADER_SIZE : position + <Py_ssize_t>h[2] + LOG_OVERHEAD])
        moved.append(with_offset(header_type, h, offset, leader_epoch))
        offset += <int64_t>h[7] + 1
    return parts, moved, offset


cdef object with_offset(PyTypeObject* header_type, tuple h, int64_t base_offset, int32_t leader_epoch):
    """``h`` with baseOffset and partitionLeaderEpoch replaced."""
    cdef Py_ssize_t i
    header = PyType_GenericAlloc(header_type, HEADER_FIELDS)
    for i in range(HEADER_FIELDS):
        if i == 1:
            set_item(header, i, PyLong_FromLongLong(base_offset))
        elif i == 3:
            set_item(header, i, PyLong_FromLong(leader_epoch))
        else:
            set_item(header, i, h[i])
    return header
