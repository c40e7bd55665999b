# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twin of ``storage/record_batch.py`` (the reference: read it first).

The same names, the same bytes, the same errors: ``RecordBatchBuilder`` (whole class) and
the record loops ``_decode_records`` (RecordBatch iteration), ``_walk_records`` (the
leader's LogValidator walk) and ``_parse_columns`` (``decode_columns``). The pure module
rebinds those names to these when this extension is built (``storage.extensions``).

Every read is bounded by the record it belongs to, so hostile bytes end in
CorruptRecordError, never in a read past a buffer.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromLongLong
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

import struct

import crc32c as _crc32c
import numpy as np
import pyarrow as pa

from storage import compression as _compression
from storage.batch_header import HEADER, HEADER_SIZE, MIN_BATCH_LENGTH
from storage.errors import CorruptRecordError, RecordTooLargeError

cdef extern from *:
    """
    #include <time.h>
    static inline int rq_add_overflow(long long a, long long b, long long *r) { return __builtin_add_overflow(a, b, r); }
    static inline int rq_sub_overflow(long long a, long long b, long long *r) { return __builtin_sub_overflow(a, b, r); }
    static inline long long rq_now_ms(void) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    }
    """
    bint rq_add_overflow(long long a, long long b, long long* r)
    bint rq_sub_overflow(long long a, long long b, long long* r)
    long long rq_now_ms()

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object obj, int* overflow) except? -1
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)

cdef enum:
    # The fields of a BatchHeader named tuple, by position.
    H_BASE_OFFSET = 1
    H_ATTRIBUTES = 6
    H_LAST_OFFSET_DELTA = 7
    H_BASE_TIMESTAMP = 8
    H_MAX_TIMESTAMP = 9
    H_RECORDS_COUNT = 13
    # Attribute bits.
    LOG_APPEND_TIME_BIT = 0x08
    TRANSACTIONAL_MASK = 0x10
    CONTROL_MASK = 0x20
    DELETE_HORIZON_MASK = 0x40
    MAX_INT32 = 2147483647
    # The smallest record: length, attributes, timestampDelta, offsetDelta, keyLength,
    # valueLength and headerCount, one byte each.
    MIN_RECORD_SIZE = 7
    MAX_VARINT_BYTES = 5
    MAX_VARLONG_BYTES = 10
    BATCH_HEADER_BYTES = 61

_UINT32 = struct.Struct(">I")


# ---------------------------------------------------------------------------------------
# Varints (zig-zag, as protobuf and Kafka write them)
# ---------------------------------------------------------------------------------------


cdef int read_varint_long(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t bound, int max_bytes,
                          int64_t* out) except -1:
    """read_varint past its one-byte case."""
    cdef Py_ssize_t p = pos[0]
    cdef uint64_t z = 0
    cdef uint64_t b
    cdef int shift = 0
    cdef int i
    for i in range(max_bytes):
        if p >= bound:
            raise CorruptRecordError(f"truncated varint at byte {pos[0]}")
        b = buf[p]
        p += 1
        # A tenth byte's bits past the 64th fall off, as in Kafka's ByteUtils.readVarlong.
        z |= (b & 0x7F) << shift
        if b < 0x80:
            pos[0] = p
            out[0] = <int64_t>((z >> 1) ^ (~(z & 1) + 1))
            return 0
        shift += 7
    raise CorruptRecordError(f"varint at byte {pos[0]} is longer than {max_bytes} bytes")


cdef inline int read_varint(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t bound, int max_bytes,
                            int64_t* out) except -1:
    """Decode the varint at pos[0], reading nothing at or past ``bound``; advance pos."""
    cdef Py_ssize_t p = pos[0]
    cdef int64_t z
    if p < bound and buf[p] < 0x80:  # one byte: deltas, short keys
        z = buf[p]
        pos[0] = p + 1
    elif p + 1 < bound and buf[p + 1] < 0x80:  # two: lengths of 64 to 8191 bytes
        z = (buf[p] & 0x7F) | (<int64_t>buf[p + 1] << 7)
        pos[0] = p + 2
    else:
        return read_varint_long(buf, pos, bound, max_bytes, out)
    out[0] = (z >> 1) ^ -(z & 1)
    return 0


cdef inline int varint_size(int64_t value) noexcept:
    cdef uint64_t z = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


cdef inline Py_ssize_t write_varint(uint8_t* out, int64_t value) noexcept:
    cdef uint64_t z = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef Py_ssize_t n = 0
    while z >= 0x80:
        out[n] = <uint8_t>((z & 0x7F) | 0x80)
        z >>= 7
        n += 1
    out[n] = <uint8_t>z
    return n + 1


# ---------------------------------------------------------------------------------------
# Reading records
# ---------------------------------------------------------------------------------------


cdef int parse_record(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t end, RecordFields* f) except -1:
    """Parse the record at pos[0], which must end at or before ``end``; advance pos past it.

    As record_batch._parse_py: length >= 6, fields that tile the record exactly, key and
    value length -1 (however encoded) for null, other negative lengths and a header count
    larger than the bytes left refused. Header keys are not decoded here (see headers_of).
    """
    cdef int64_t length, hlen
    cdef Py_ssize_t p = pos[0]
    cdef Py_ssize_t rec_end
    cdef int64_t n
    read_varint(buf, &p, end, MAX_VARINT_BYTES, &length)
    if length < 6 or length > end - p:
        raise CorruptRecordError(f"record length {length} invalid or past the end of the batch")
    rec_end = p + length
    p += 1  # attributes: no bits defined for records
    read_varint(buf, &p, rec_end, MAX_VARLONG_BYTES, &f.tsd)
    read_varint(buf, &p, rec_end, MAX_VARINT_BYTES, &f.od)
    read_varint(buf, &p, rec_end, MAX_VARINT_BYTES, &f.klen)
    if f.klen < -1 or f.klen > rec_end - p:
        raise CorruptRecordError(f"invalid key length {f.klen}")
    f.kpos = p
    if f.klen > 0:
        p += f.klen
    read_varint(buf, &p, rec_end, MAX_VARINT_BYTES, &f.vlen)
    if f.vlen < -1 or f.vlen > rec_end - p:
        raise CorruptRecordError(f"invalid value length {f.vlen}")
    f.vpos = p
    if f.vlen > 0:
        p += f.vlen
    read_varint(buf, &p, rec_end, MAX_VARINT_BYTES, &f.hcount)
    if f.hcount < 0 or f.hcount > rec_end - p:
        raise CorruptRecordError(f"invalid header count {f.hcount}")
    f.hpos = p
    for n in range(f.hcount):
        read_varint(buf, &p, rec_end, MAX_VARINT_BYTES, &hlen)
        if hlen < 0 or hlen > rec_end - p:
            raise CorruptRecordError(f"invalid header key length {hlen}")
        p += hlen
        read_varint(buf, &p, rec_end, MAX_VARINT_BYTES, &hlen)
        if hlen < -1 or hlen > rec_end - p:
            raise CorruptRecordError(f"invalid header value length {hlen}")
        if hlen > 0:
            p += hlen
    if p != rec_end:
        raise CorruptRecordError(f"record fields take {p - rec_end + length} bytes, its length says {length}")
    f.end = rec_end
    pos[0] = p
    return 0


cdef tuple headers_of(const uint8_t* buf, RecordFields* f):
    """The (str, bytes | None) headers of a record that parse_record has checked."""
    cdef Py_ssize_t p = f.hpos
    cdef int64_t klen, vlen
    cdef list out = []
    for _ in range(f.hcount):
        read_varint(buf, &p, f.end, MAX_VARINT_BYTES, &klen)
        try:
            key = PyUnicode_DecodeUTF8(<const char*>buf + p, klen, NULL)
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not valid utf-8") from None
        p += klen
        read_varint(buf, &p, f.end, MAX_VARINT_BYTES, &vlen)
        if vlen < 0:
            out.append((key, None))
        else:
            out.append((key, PyBytes_FromStringAndSize(<const char*>buf + p, vlen)))
            p += vlen
    return tuple(out)


cdef inline tuple header_tuple(object header):
    """A BatchHeader (a tuple subclass, which Cython's typed arguments refuse) as a tuple."""
    if not isinstance(header, tuple) or len(<tuple>header) != 14:
        raise TypeError(f"expected a BatchHeader, not {type(header).__name__}")
    return <tuple>header


cdef inline object sum_int(int64_t a, int64_t b):
    """a + b as a Python int (exact, as the reference's Python ints are, even past int64)."""
    cdef long long r
    if rq_add_overflow(a, b, &r):
        return PyLong_FromLongLong(a) + PyLong_FromLongLong(b)
    return PyLong_FromLongLong(r)


cdef class _Buffer:
    """A read-only view of any bytes-like object, released with the object."""

    def __cinit__(self, obj):
        PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE)
        self.ptr = <const uint8_t*>self.view.buf
        self.size = self.view.len

    def __dealloc__(self):
        PyBuffer_Release(&self.view)


def _decode_records(data, Py_ssize_t pos, Py_ssize_t end, header):
    """Twin of record_batch._decode_records: offsets, timestamps, keys, values, headers lists."""
    cdef tuple h = header_tuple(header)
    cdef _Buffer b = _Buffer(data)
    cdef const uint8_t* buf = b.ptr
    cdef Py_ssize_t count = h[H_RECORDS_COUNT]
    cdef int64_t base = h[H_BASE_OFFSET]
    cdef int64_t base_ts = h[H_BASE_TIMESTAMP]
    cdef int64_t last_delta = h[H_LAST_OFFSET_DELTA]
    cdef bint append_time = h[H_ATTRIBUTES] & LOG_APPEND_TIME_BIT
    cdef int64_t prev = -1
    cdef Py_ssize_t i
    cdef RecordFields f
    if pos < 0 or end > b.size or pos > end:
        raise CorruptRecordError(f"records span {pos}..{end} is outside the buffer")
    if count < 0 or count > (end - pos) // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"{count} records cannot fit in {end - pos} bytes")
    cdef list offsets = [None] * count
    cdef list timestamps = [None] * count
    cdef list keys = [None] * count
    cdef list values = [None] * count
    cdef list headers = [()] * count
    # Records of one batch mostly share a timestamp (a producer's millisecond): one int for them.
    cdef int64_t last_tsd = 0
    timestamp = h[H_MAX_TIMESTAMP] if append_time else sum_int(base_ts, 0)
    for i in range(count):
        parse_record(buf, &pos, end, &f)
        # Offsets inside a batch increase; compaction may leave holes, never disorder.
        if f.od <= prev or f.od > last_delta:
            raise CorruptRecordError(f"offset delta {f.od} not increasing within 0..{last_delta}")
        prev = f.od
        offsets[i] = sum_int(base, f.od)
        if f.tsd != last_tsd and not append_time:
            last_tsd = f.tsd
            timestamp = sum_int(base_ts, f.tsd)
        timestamps[i] = timestamp
        if f.klen >= 0:
            keys[i] = PyBytes_FromStringAndSize(<const char*>buf + f.kpos, f.klen)
        if f.vlen >= 0:
            values[i] = PyBytes_FromStringAndSize(<const char*>buf + f.vpos, f.vlen)
        if f.hcount:
            headers[i] = headers_of(buf, &f)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the batch's {count} records")
    return offsets, timestamps, keys, values, headers


cdef inline void set_item(object record, Py_ssize_t i, object item) noexcept:
    Py_INCREF(item)  # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(record, i, item)


cdef struct Slot:
    int64_t od
    int64_t tsd
    Py_ssize_t kpos
    int64_t klen
    Py_ssize_t vpos
    int64_t vlen


cdef class _RecordIterator:
    """Twin of record_batch._iter_records: the batch is parsed and checked whole up front into
    a C array of field positions; each step then builds one ``record_type`` tuple (its ints
    and bytes) in C, so records nobody keeps are never all alive at once."""

    cdef object record_type
    cdef _Buffer data
    cdef Slot* slots
    cdef list headers             # per record, or None when no record has headers
    cdef int64_t base, base_ts
    cdef object timestamp         # the last timestamp built (records mostly share one)
    cdef int64_t last_tsd
    cdef bint append_time
    cdef Py_ssize_t i, n

    def __dealloc__(self):
        free(self.slots)

    def __iter__(self):
        return self

    def __length_hint__(self):
        return self.n - self.i

    def __next__(self):
        cdef Py_ssize_t i = self.i
        cdef Slot* s
        if i >= self.n:
            raise StopIteration
        self.i = i + 1
        s = &self.slots[i]
        if s.tsd != self.last_tsd and not self.append_time:
            self.last_tsd = s.tsd
            self.timestamp = sum_int(self.base_ts, s.tsd)
        # As tuple.__new__(record_type, row) does, without building the row first: the
        # subtype's own allocation, then the five items.
        record = PyType_GenericAlloc(<PyTypeObject*>self.record_type, 5)
        set_item(record, 0, sum_int(self.base, s.od))
        set_item(record, 1, self.timestamp)
        set_item(record, 2, None if s.klen < 0 else
                 PyBytes_FromStringAndSize(<const char*>self.data.ptr + s.kpos, s.klen))
        set_item(record, 3, None if s.vlen < 0 else
                 PyBytes_FromStringAndSize(<const char*>self.data.ptr + s.vpos, s.vlen))
        set_item(record, 4, () if self.headers is None else self.headers[i])
        return record


def _iter_records(record_type, data, Py_ssize_t pos, Py_ssize_t end, header):
    """Twin of record_batch._iter_records."""
    cdef tuple h = header_tuple(header)
    cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
    cdef Py_ssize_t count = h[H_RECORDS_COUNT]
    cdef int64_t last_delta = h[H_LAST_OFFSET_DELTA]
    cdef int64_t prev = -1
    cdef Py_ssize_t i
    cdef RecordFields f
    cdef Slot* s
    if not (isinstance(record_type, type) and issubclass(record_type, tuple)
            and record_type.__basicsize__ == tuple.__basicsize__ and len(record_type._fields) == 5):
        raise TypeError(f"{record_type!r} is not a five-field named tuple")
    it.record_type = record_type
    it.data = _Buffer(data)
    if pos < 0 or end > it.data.size or pos > end:
        raise CorruptRecordError(f"records span {pos}..{end} is outside the buffer")
    if count < 0 or count > (end - pos) // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"{count} records cannot fit in {end - pos} bytes")
    it.slots = <Slot*>malloc(max(count, 1) * sizeof(Slot))
    if it.slots == NULL:
        raise MemoryError()
    for i in range(count):
        parse_record(it.data.ptr, &pos, end, &f)
        # Offsets inside a batch increase; compaction may leave holes, never disorder.
        if f.od <= prev or f.od > last_delta:
            raise CorruptRecordError(f"offset delta {f.od} not increasing within 0..{last_delta}")
        prev = f.od
        s = &it.slots[i]
        s.od, s.tsd, s.kpos, s.klen, s.vpos, s.vlen = f.od, f.tsd, f.kpos, f.klen, f.vpos, f.vlen
        if f.hcount:
            if it.headers is None:
                it.headers = [()] * count
            it.headers[i] = headers_of(it.data.ptr, &f)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the batch's {count} records")
    it.base = h[H_BASE_OFFSET]
    it.base_ts = h[H_BASE_TIMESTAMP]
    it.append_time = h[H_ATTRIBUTES] & LOG_APPEND_TIME_BIT
    # Kafka gives every record of a LogAppendTime batch the batch's maxTimestamp.
    it.timestamp = h[H_MAX_TIMESTAMP] if it.append_time else sum_int(it.base_ts, 0)
    it.last_tsd = 0
    it.n = count
    it.i = 0
    return it


cdef int walk_region(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
                     Walk* out) except -1:
    """The leader's walk over the ``count`` (> 0) records tiling buf[start:end]: every record
    parsed as the readers parse it (header keys decoded too), nothing built."""
    cdef Py_ssize_t pos = start
    cdef Py_ssize_t i
    cdef RecordFields f
    if count <= 0 or count > (end - start) // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"{count} records cannot fit in {end - start} bytes")
    out.max_tsd = 0
    out.null_keys = 0
    out.in_order = True
    for i in range(count):
        parse_record(buf, &pos, end, &f)
        if i == 0 or f.tsd > out.max_tsd:
            out.max_tsd = f.tsd
        if f.klen < 0:
            out.null_keys += 1
        if f.od != i:
            out.in_order = False
        if f.hcount:
            headers_of(buf, &f)  # the keys must be utf-8, as the readers require
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the batch's {count} records")
    return 0


def _walk_records(data, Py_ssize_t start, Py_ssize_t end, header):
    """Twin of record_batch._walk_records: (largest timestamp, keyless records, deltas 0..n-1)."""
    cdef tuple h = header_tuple(header)
    cdef _Buffer b = _Buffer(data)
    cdef Walk w
    if start < 0 or end > b.size or start > end:
        raise CorruptRecordError(f"records span {start}..{end} is outside the buffer")
    walk_region(b.ptr, start, end, h[H_RECORDS_COUNT], &w)
    return sum_int(h[H_BASE_TIMESTAMP], w.max_tsd), w.null_keys, w.in_order


def _parse_columns(data, arr, list spans):
    """Twin of record_batch._parse_columns: every record of the (start, end, header) spans as
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


# ---------------------------------------------------------------------------------------
# Building batches
# ---------------------------------------------------------------------------------------


cdef inline Py_ssize_t record_body(int64_t tsd, int64_t delta, Py_ssize_t klen, Py_ssize_t vlen,
                                   Py_ssize_t hlen) noexcept:
    """A record's bytes after its length varint: attributes, deltas, key, value, headers
    (``hlen`` bytes of encoded headers, or -1 for none: one zero count byte)."""
    cdef Py_ssize_t body = 1 + varint_size(tsd) + varint_size(delta)
    body += 1 if klen < 0 else varint_size(klen) + klen
    body += 1 if vlen < 0 else varint_size(vlen) + vlen
    return body + (hlen if hlen >= 0 else 1)


cdef inline Py_ssize_t write_field(uint8_t* out, const char* data, Py_ssize_t length) noexcept:
    """A key or value: its length varint (-1, one byte, for null) and its bytes."""
    cdef Py_ssize_t n
    if length < 0:
        out[0] = 1
        return 1
    n = write_varint(out, length)
    if length:
        memcpy(out + n, data, length)
    return n + length


cdef inline void write_record(uint8_t* out, Py_ssize_t body, int64_t tsd, int64_t delta, const char* key,
                              Py_ssize_t klen, const char* value, Py_ssize_t vlen, const char* headers,
                              Py_ssize_t hlen) noexcept:
    """One record (of record_body's ``body``) at ``out``, as record_batch.RecordBatchBuilder.append lays it out."""
    cdef Py_ssize_t p = write_varint(out, body)
    out[p] = 0  # attributes: no bits defined for records
    p += 1
    p += write_varint(out + p, tsd)
    p += write_varint(out + p, delta)
    p += write_field(out + p, key, klen)
    p += write_field(out + p, value, vlen)
    if hlen < 0:
        out[p] = 0  # no headers
    else:
        memcpy(out + p, headers, hlen)


cdef object as_bytes(object value, str what):
    """record_batch._as_bytes: bytes or None as they are, other buffers copied, else TypeError."""
    if value is None or PyBytes_CheckExact(value):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes or None, not {type(value).__name__}")


cdef bytes encode_headers(object headers):
    """record_batch._encode_headers: count, then each key (utf-8) and value."""
    cdef list parts = []
    cdef uint8_t tmp[10]
    cdef Py_ssize_t n
    items = list(headers)
    n = write_varint(tmp, len(items))
    parts.append(PyBytes_FromStringAndSize(<const char*>tmp, n))
    for key, value in items:
        if not isinstance(key, str):
            raise TypeError(f"header key must be str, not {type(key).__name__}")
        k = key.encode("utf-8")
        n = write_varint(tmp, len(k))
        parts.append(PyBytes_FromStringAndSize(<const char*>tmp, n))
        parts.append(k)
        v = as_bytes(value, "header value")
        if v is None:
            parts.append(b"\x01")
        else:
            n = write_varint(tmp, len(v))
            parts.append(PyBytes_FromStringAndSize(<const char*>tmp, n))
            parts.append(v)
    return b"".join(parts)


cdef class _Column:
    """A binary column (list of bytes/None, or an Arrow binary/string/null array) read in C.

    As record_batch._Column.of, without copying the column: items stay Python objects, an
    Arrow array's offsets, data and validity buffers are read in place.
    """

    cdef Py_ssize_t n
    cdef list items            # the list form, or None for Arrow
    cdef object keep           # Arrow buffers kept alive
    cdef Py_buffer offsets_view, data_view, validity_view
    cdef bint has_offsets, has_data, has_validity, wide, all_null
    cdef Py_ssize_t offset     # the Arrow array's slice offset

    def __cinit__(self):
        self.has_offsets = self.has_data = self.has_validity = False

    def __dealloc__(self):
        if self.has_offsets:
            PyBuffer_Release(&self.offsets_view)
        if self.has_data:
            PyBuffer_Release(&self.data_view)
        if self.has_validity:
            PyBuffer_Release(&self.validity_view)

    cdef inline bint get(self, Py_ssize_t i, const uint8_t** ptr, Py_ssize_t* length) except -1:
        """Item i: False for null, else True with its bytes in ptr/length."""
        cdef int64_t lo, hi
        cdef const uint8_t* bits
        cdef Py_ssize_t j
        if self.items is not None:
            item = self.items[i]
            if item is None:
                return False
            ptr[0] = <const uint8_t*>PyBytes_AS_STRING(item)
            length[0] = PyBytes_GET_SIZE(item)
            return True
        if self.all_null:
            return False
        j = self.offset + i
        if self.has_validity:
            bits = <const uint8_t*>self.validity_view.buf
            if not (bits[j >> 3] >> (j & 7)) & 1:
                return False
        if self.wide:
            lo = (<const int64_t*>self.offsets_view.buf)[j]
            hi = (<const int64_t*>self.offsets_view.buf)[j + 1]
        else:
            lo = (<const int32_t*>self.offsets_view.buf)[j]
            hi = (<const int32_t*>self.offsets_view.buf)[j + 1]
        ptr[0] = <const uint8_t*>self.data_view.buf + lo if self.has_data else NULL
        length[0] = hi - lo
        return True


cdef _Column column_of(object column, str what):
    cdef _Column c = _Column.__new__(_Column)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.Array):
        t = column.type
        c.n = len(column)
        c.offset = column.offset
        if pa.types.is_null(t):
            c.all_null = True
            return c
        if not (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t)
                or pa.types.is_large_string(t)):
            raise TypeError(f"{what} must be a binary Arrow array, not {t}")
        c.wide = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        validity, obuf, dbuf = column.buffers()
        c.keep = (column, validity, obuf, dbuf)
        c.all_null = c.n > 0 and column.null_count == c.n
        if c.n == 0 or c.all_null:
            return c
        PyObject_GetBuffer(obuf, &c.offsets_view, PyBUF_SIMPLE)
        c.has_offsets = True
        if dbuf is not None:
            PyObject_GetBuffer(dbuf, &c.data_view, PyBUF_SIMPLE)
            c.has_data = True
        if validity is not None and column.null_count:
            PyObject_GetBuffer(validity, &c.validity_view, PyBUF_SIMPLE)
            c.has_validity = True
        return c
    items = column if isinstance(column, list) else list(column)
    for item in items:
        if item is not None and not PyBytes_CheckExact(item):
            items = [as_bytes(v, what) for v in items]
            break
    c.items = items
    c.n = len(items)
    return c


cdef class RecordBatchBuilder:
    """Compiled twin of record_batch.RecordBatchBuilder: accumulates records and builds one v2
    batch (compressed, with its CRC), as Kafka's ``MemoryRecordsBuilder`` does.

    ``append`` adds one record; ``append_many``/``from_columns`` add whole columns. With
    ``max_batch_bytes`` an append that would make the (uncompressed) batch larger raises
    RecordTooLargeError and leaves the builder as it was. Records are encoded straight into
    one growing buffer; ``build`` copies it once into the batch.
    """

    cdef public object compression, timestamp_type, base_offset, partition_leader_epoch
    cdef public object producer_id, producer_epoch, base_sequence, is_transactional, is_control
    cdef public object delete_horizon_ms
    cdef object _max_batch_bytes
    cdef Py_ssize_t _limit           # max_batch_bytes, or -1 for none
    cdef uint8_t* _buf               # the encoded records, uncompressed
    cdef Py_ssize_t _cap, _size, _count
    cdef int64_t _next_delta, _first_ts, _max_ts, _last_offset_delta
    cdef bint _has_first, _has_last_offset

    def __init__(
        self,
        compression=0,
        *,
        timestamp_type=0,
        base_offset=0,
        partition_leader_epoch=-1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        is_transactional=False,
        is_control=False,
        max_batch_bytes=None,
        delete_horizon_ms=None,
    ):
        if timestamp_type not in (0, 1):
            raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
        if is_transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        self.compression = _compression.codec_id(compression)
        self.timestamp_type = timestamp_type
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.max_batch_bytes = max_batch_bytes
        self._size = self._count = 0
        self._next_delta = 0
        self._max_ts = -1
        self._has_first = False
        self._has_last_offset = False
        # KIP-534 (the log cleaner): baseTimestamp holds the delete horizon, flagged by
        # attribute bit 6, and record timestamp deltas count from it.
        self.delete_horizon_ms = delete_horizon_ms
        if delete_horizon_ms is not None:
            self._first_ts = delete_horizon_ms
            self._has_first = True

    def __dealloc__(self):
        free(self._buf)

    @property
    def max_batch_bytes(self):
        """The largest batch (uncompressed) that appends may build, or None."""
        return self._max_batch_bytes

    @max_batch_bytes.setter
    def max_batch_bytes(self, value):
        self._max_batch_bytes = value
        self._limit = -1 if value is None else value

    def __len__(self):
        return self._count

    def estimated_size(self):
        """Size of the batch if built now without compression (an upper bound with it)."""
        return BATCH_HEADER_BYTES + self._size

    cdef int _check_room(self, Py_ssize_t extra) except -1:
        if self._limit >= 0 and BATCH_HEADER_BYTES + self._size + extra > self._limit:
            raise RecordTooLargeError(
                f"batch would grow to {BATCH_HEADER_BYTES + self._size + extra} bytes, "
                f"over max_batch_bytes={self._max_batch_bytes}"
            )
        return 0

    cdef int _reserve(self, Py_ssize_t extra) except -1:
        """Room for ``extra`` more bytes past the records held."""
        cdef Py_ssize_t need = self._size + extra
        cdef Py_ssize_t cap
        cdef uint8_t* grown
        if need <= self._cap:
            return 0
        cap = max(need, 2 * self._cap, 1024)
        grown = <uint8_t*>realloc(self._buf, cap)
        if grown == NULL:
            raise MemoryError()
        self._buf = grown
        self._cap = cap
        return 0

    def has_room_for(self, value, key=None, headers=()):
        """Whether ``append`` of this record would stay within ``max_batch_bytes``."""
        if self._max_batch_bytes is None:
            return True
        size = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        size += len(encode_headers(headers)) if headers else 1
        return BATCH_HEADER_BYTES + self._size + size <= self._max_batch_bytes

    def append(self, value, key=None, timestamp=None, headers=(), *, offset_delta=None):
        """Add one record; return its offset delta in the batch.

        ``timestamp`` defaults to now (ms). ``offset_delta`` (for rewriting compacted data)
        may skip offsets but never go back.
        """
        cdef long long ts, first, tsd
        cdef int overflow = 0
        cdef int64_t delta = self._next_delta
        cdef Py_ssize_t vlen = -1, klen = -1, hlen = -1, body, size
        if value is not None and not PyBytes_CheckExact(value):
            value = as_bytes(value, "value")
        if timestamp is None:
            ts = rq_now_ms()
        else:
            if type(timestamp) is not int:
                raise ValueError(f"invalid timestamp {timestamp!r}")
            ts = PyLong_AsLongLongAndOverflow(timestamp, &overflow)
            if overflow or ts < -1:
                raise ValueError(f"invalid timestamp {timestamp!r}")
        if offset_delta is not None:
            if offset_delta < delta or offset_delta > MAX_INT32:
                raise ValueError(f"offset delta {offset_delta} is before the next one, {delta}")
            delta = offset_delta
        first = self._first_ts if self._has_first else ts
        if rq_sub_overflow(ts, first, &tsd):
            raise ValueError(f"{PyLong_FromLongLong(ts) - PyLong_FromLongLong(first)} does not fit a varlong")
        if key is not None:
            if not PyBytes_CheckExact(key):
                key = as_bytes(key, "key")
            klen = PyBytes_GET_SIZE(key)
        hdr = encode_headers(headers) if headers else None
        if hdr is not None:
            hlen = PyBytes_GET_SIZE(hdr)
        if value is not None:
            vlen = PyBytes_GET_SIZE(value)
        body = record_body(tsd, delta, klen, vlen, hlen)
        size = varint_size(body) + body
        self._check_room(size)
        self._reserve(size)
        write_record(
            self._buf + self._size, body, tsd, delta,
            PyBytes_AS_STRING(key) if klen >= 0 else NULL, klen,
            PyBytes_AS_STRING(value) if vlen >= 0 else NULL, vlen,
            PyBytes_AS_STRING(hdr) if hlen >= 0 else NULL, hlen,
        )
        self._first_ts = first
        self._has_first = True
        self._size += size
        self._count += 1
        self._next_delta = delta + 1
        if ts > self._max_ts:
            self._max_ts = ts
        return delta

    def append_many(self, values, keys=None, timestamps=None):
        """Add many records (no headers) at once; return the offset delta of the first.

        ``values``/``keys`` are lists of bytes (None for null) or Arrow binary arrays;
        ``timestamps`` a column, one int for all, or None for now.
        """
        cdef _Column vcol = column_of(values, "values")
        cdef _Column kcol = None
        cdef Py_ssize_t n = vcol.n
        cdef Py_ssize_t i, body, size, at
        cdef Py_ssize_t vlen = -1, klen = -1
        cdef const uint8_t* vptr = NULL
        cdef const uint8_t* kptr = NULL
        cdef int64_t first, tsd, delta, scalar_ts = 0
        cdef int64_t[::1] ts
        cdef bint scalar
        if n == 0:
            return self._next_delta
        if keys is not None:
            kcol = column_of(keys, "keys")
            if kcol.n != n:
                raise ValueError(f"{kcol.n} keys for {n} values")
        scalar = timestamps is None or isinstance(timestamps, int)
        if scalar:
            scalar_ts = rq_now_ms() if timestamps is None else timestamps
            first = self._first_ts if self._has_first else scalar_ts
            max_ts = scalar_ts
        else:
            if isinstance(timestamps, (pa.ChunkedArray, pa.Array)):
                timestamps = timestamps.to_numpy(zero_copy_only=False)
            array = np.asarray(timestamps)
            if array.dtype.kind not in "iu" or len(array) != n:
                raise ValueError("timestamps must be one integer per value")
            array = np.ascontiguousarray(array.astype(np.int64, copy=False))
            if (array < -1).any():
                raise ValueError("timestamps must be >= -1")
            ts = array
            first = self._first_ts if self._has_first else ts[0]
            max_ts = int(array.max())
        if self._next_delta + n - 1 > MAX_INT32:
            raise ValueError("too many records for one batch")
        at = self._size
        for i in range(n):
            if not vcol.get(i, &vptr, &vlen):
                vlen = -1
            if kcol is None or not kcol.get(i, &kptr, &klen):
                klen = -1
            # int64 arithmetic wraps, as the reference's numpy columns do.
            tsd = <int64_t>(<uint64_t>(scalar_ts if scalar else ts[i]) - <uint64_t>first)
            delta = self._next_delta + i
            body = record_body(tsd, delta, klen, vlen, -1)
            size = varint_size(body) + body
            if at + size > self._cap:
                self._reserve(at - self._size + size)
            write_record(self._buf + at, body, tsd, delta, <const char*>kptr, klen, <const char*>vptr, vlen, NULL, -1)
            at += size
        self._check_room(at - self._size)
        first_delta = self._next_delta
        self._size = at
        self._count += n
        self._next_delta += n
        self._first_ts = first
        self._has_first = True
        if max_ts > self._max_ts:
            self._max_ts = max_ts
        return first_delta

    def override_last_offset(self, last_offset):
        """Keep ``last_offset`` as the batch's last offset even if its record is gone (Kafka's
        overrideLastOffset: a cleaned v2 batch keeps its original offset and sequence range)."""
        delta = last_offset - self.base_offset
        if delta < self._next_delta - 1 or delta > MAX_INT32:
            raise ValueError(f"last offset {last_offset} is before the batch's records or too far")
        self._last_offset_delta = delta
        self._has_last_offset = True

    @classmethod
    def from_columns(cls, values, keys=None, timestamps=None, **kwargs):
        """A builder (``kwargs`` as for the constructor) holding the given columns."""
        builder = cls(**kwargs)
        builder.append_many(values, keys, timestamps)
        return builder

    def build(self):
        """The batch's bytes: records, compressed, header and CRC-32C written.

        An empty builder builds ``b""`` (no batch), as Kafka's MemoryRecordsBuilder does.
        """
        cdef Py_ssize_t size
        cdef char* dst
        if not self._count:
            return b""
        region = None
        if self.compression:
            region = _compression.compress(self.compression, PyBytes_FromStringAndSize(<const char*>self._buf, self._size))
            size = len(region)
        else:
            size = self._size
        attributes = self.compression | (self.timestamp_type << 3)
        if self.is_transactional:
            attributes |= TRANSACTIONAL_MASK
        if self.is_control:
            attributes |= CONTROL_MASK
        if self.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_MASK
        last_delta = self._next_delta - 1
        if self._has_last_offset and self._last_offset_delta > last_delta:
            last_delta = self._last_offset_delta
        head = HEADER.pack(
            self.base_offset,
            MIN_BATCH_LENGTH + size,
            self.partition_leader_epoch,
            2,
            0,
            attributes,
            last_delta,
            self._first_ts,
            self._max_ts,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._count,
        )
        if self._max_batch_bytes is not None and HEADER_SIZE + size > self._max_batch_bytes:
            raise RecordTooLargeError(
                f"batch of {HEADER_SIZE + size} bytes exceeds max_batch_bytes={self._max_batch_bytes}"
            )
        out = PyBytes_FromStringAndSize(NULL, BATCH_HEADER_BYTES + size)
        dst = PyBytes_AS_STRING(out)
        memcpy(dst, PyBytes_AS_STRING(head), BATCH_HEADER_BYTES)
        if region is None:
            memcpy(dst + BATCH_HEADER_BYTES, self._buf, size)
        else:
            memcpy(dst + BATCH_HEADER_BYTES, PyBytes_AS_STRING(region), size)
        # The new bytes object is ours alone until returned: the CRC goes in place.
        crc = _crc32c.crc32c(memoryview(out)[21:])
        memcpy(dst + 17, PyBytes_AS_STRING(_UINT32.pack(crc)), 4)
        return out
