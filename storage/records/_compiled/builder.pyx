# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: embedsignature=True, embedsignature.format=clinic, binding=True
"""Compiled twin of ``storage/records/builder.py``'s ``RecordBatchBuilder`` (the reference:
read it first): the whole class, with the same methods, the same bytes and the same errors.
Records are encoded straight into one growing C buffer; ``build`` copies it once into the
batch and computes the CRC once, in place. The builder module picks this class at import
when this extension is built (``storage.extensions``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromLongLong
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

import struct

import crc32c as _crc32c
import numpy as np
import pyarrow as pa

from storage import compression as _compression
from storage.batch_header import HEADER, HEADER_SIZE, MIN_BATCH_LENGTH
from storage.errors import RecordTooLargeError

cdef extern from *:
    """
    #include <time.h>
    static inline int rq_sub_overflow(long long a, long long b, long long *r) { return __builtin_sub_overflow(a, b, r); }
    static inline long long rq_now_ms(void) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    }
    """
    bint rq_sub_overflow(long long a, long long b, long long* r)
    long long rq_now_ms()

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object obj, int* overflow) except? -1

cdef enum:
    TRANSACTIONAL_MASK = 0x10
    CONTROL_MASK = 0x20
    DELETE_HORIZON_MASK = 0x40
    MAX_INT32 = 2147483647
    BATCH_HEADER_BYTES = 61
    CRC_AT = 17
    ATTRIBUTES_AT = 21

_UINT32 = struct.Struct(">I")


# ---------------------------------------------------------------------------------------
# Varints (zig-zag, as protobuf and Kafka write them)
# ---------------------------------------------------------------------------------------


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
    """One record (of record_body's ``body``) at ``out``, as builder.RecordBatchBuilder.append lays it out."""
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
    """builder._as_bytes: bytes or None as they are, other buffers copied, else TypeError."""
    if value is None or PyBytes_CheckExact(value):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes or None, not {type(value).__name__}")


cdef bytes encode_headers(object headers):
    """builder._encode_headers: count, then each key (utf-8) and value."""
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

    As builder._Column.of, without copying the column: items stay Python objects, an
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
    """RecordBatchBuilder(compression=0, *, timestamp_type=0, base_offset=0, partition_leader_epoch=-1, producer_id=-1, producer_epoch=-1, base_sequence=-1, is_transactional=False, is_control=False, max_batch_bytes=None, delete_horizon_ms=None)
--

    Compiled twin of builder.RecordBatchBuilder: accumulates records and builds one v2
    batch (compressed, with its CRC), as Kafka's ``MemoryRecordsBuilder`` does. (The first
    line is the class's signature for ``inspect.signature`` and ``help()``.)

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
    cdef bint _closed                # closed for record appends
    cdef object _region              # the compressed records once closed (None: the records are _buf)

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
        """Size of the batch if built now without compression (an upper bound with it); the
        exact size once closed for record appends (Kafka's estimatedSizeInBytes)."""
        if self._region is not None:
            return BATCH_HEADER_BYTES + len(self._region)
        return BATCH_HEADER_BYTES + self._size

    @property
    def is_closed_for_appends(self):
        """Whether :meth:`close_for_record_appends` was called."""
        return self._closed

    cdef int _check_open(self) except -1:
        if self._closed:
            raise ValueError("the builder is closed for record appends")
        return 0

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
        self._check_open()
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
        self._check_open()
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

    def set_producer_state(self, producer_id, producer_epoch, base_sequence, is_transactional):
        """The producer id, epoch, first sequence and transactional flag the batch is built
        with (Kafka's setProducerState). The producer sets them when the sender drains the
        batch, before its one build: the batch's bytes and CRC are made once."""
        if is_transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional

    def close_for_record_appends(self):
        """No more records (Kafka's closeForRecordAppends): the records are compressed now
        (read in place from the builder's buffer), so that :meth:`estimated_size` is the
        batch's exact size; the header (producer state, CRC) is written by :meth:`build`."""
        if self._closed:
            return
        self._closed = True
        if self.compression and self._size:
            self._region = _compression.compress(self.compression, memoryview(<uint8_t[:self._size]> self._buf))
            free(self._buf)  # the compressed records are all build() needs now
            self._buf = NULL
            self._cap = 0

    def build(self):
        """The batch's bytes: records, compressed, header and CRC-32C written.

        An empty builder builds ``b""`` (no batch), as Kafka's MemoryRecordsBuilder does.
        Building does not close the builder; once closed for record appends the records are
        not compressed again. One copy of the records (into the batch) and one CRC pass.
        """
        cdef Py_ssize_t size
        cdef char* dst
        if not self._count:
            return b""
        region = self._region
        if region is None and self.compression:
            region = _compression.compress(self.compression, memoryview(<uint8_t[:self._size]> self._buf))
        size = self._size if region is None else len(region)
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
        crc = _crc32c.crc32c(memoryview(out)[ATTRIBUTES_AT:])
        memcpy(dst + CRC_AT, PyBytes_AS_STRING(_UINT32.pack(crc)), 4)
        return out
