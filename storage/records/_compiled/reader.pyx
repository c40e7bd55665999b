# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: embedsignature=True, embedsignature.format=clinic, binding=True
"""Compiled twin of the per-record loops of ``storage/records/reader.py`` (the reference:
read it first): kernels over a batch's bytes, with the same results and the same errors.

``decode_records`` and ``iter_records`` (RecordBatch iteration, building ``Record``, the
twin of the reader's named tuple) and ``walk_records`` (the
leader's LogValidator walk). The reader module picks these at import when this extension is
built (``storage.extensions``). Every read is bounded by the record it belongs to, so hostile
bytes end in CorruptRecordError, never in a read past a buffer.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_FromLongLong
from cpython.object cimport PyObject_RichCompare, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc

from storage.errors import CorruptRecordError

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)


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


# ---------------------------------------------------------------------------------------
# Reading records
# ---------------------------------------------------------------------------------------


cdef int parse_record(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t end, RecordFields* f) except -1:
    """Parse the record at pos[0], which must end at or before ``end``; advance pos past it.

    As reader._parse_py: length >= 6, fields that tile the record exactly, key and
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


def decode_records(data, Py_ssize_t pos, Py_ssize_t end, header):
    """Twin of reader._decode_records_py: the records tiling data[pos:end] as lists (offsets,
    timestamps, keys, values, headers), checked whole."""
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


_RECORD_FIELDS = ("offset", "timestamp", "key", "value", "headers")


@cython.final
@cython.freelist(256)  # records alive at once that skip the allocator
cdef class Record:
    """Twin of reader.Record (a named tuple there): one record of a batch, its absolute
    offset and timestamp, key, value and headers.

    Built in C by the iterator, as aiokafka's DefaultRecord is: taken from a free list,
    its offset and timestamp kept as C integers (a Python int is made only when read),
    its other fields set directly. It reads as the named tuple does: fields by name,
    ``len``, indexing, unpacking, equality and ordering against tuples and records,
    ``hash``, ``repr``, ``_fields``, ``_asdict`` and ``_replace``.
    """

    cdef int64_t _offset, _timestamp
    # The offset and timestamp as Python objects instead, when built from Python or past int64.
    cdef object _offset_obj, _timestamp_obj
    cdef readonly object key
    cdef readonly object value
    cdef readonly object headers

    _fields = _RECORD_FIELDS

    def __init__(self, offset, timestamp, key, value, headers=()):
        self._offset_obj = offset
        self._timestamp_obj = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    @property
    def offset(self):
        """Absolute offset of the record."""
        return PyLong_FromLongLong(self._offset) if self._offset_obj is None else self._offset_obj

    @property
    def timestamp(self):
        """Timestamp in ms (the batch's maxTimestamp for LogAppendTime)."""
        return PyLong_FromLongLong(self._timestamp) if self._timestamp_obj is None else self._timestamp_obj

    cpdef tuple _astuple(self):
        """The five fields as a plain tuple."""
        return (self.offset, self.timestamp, self.key, self.value, self.headers)

    def __len__(self):
        return 5

    def __getitem__(self, index):
        return self._astuple()[index]

    def __iter__(self):
        return iter(self._astuple())

    def __richcmp__(self, other, int op):
        if isinstance(other, Record):
            return PyObject_RichCompare(self._astuple(), (<Record>other)._astuple(), op)
        if isinstance(other, tuple):
            return PyObject_RichCompare(self._astuple(), tuple(other), op)
        return NotImplemented

    def __hash__(self):
        return hash(self._astuple())

    def __repr__(self):
        return (f"Record(offset={self.offset!r}, timestamp={self.timestamp!r}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __reduce__(self):
        return Record, self._astuple()

    def _asdict(self):
        """The fields as a dict, as a named tuple's ``_asdict``."""
        return dict(zip(_RECORD_FIELDS, self._astuple()))

    def _replace(self, **changes):
        """A copy with some fields changed, as a named tuple's ``_replace``."""
        fields = self._asdict()
        for name in changes:
            if name not in fields:
                raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        fields.update(changes)
        return Record(**fields)


cdef struct Slot:
    int64_t od
    int64_t tsd
    Py_ssize_t kpos
    int64_t klen
    Py_ssize_t vpos
    int64_t vlen


cdef class _RecordIterator:
    """Twin of reader._iter_records_py: the batch is parsed and checked whole up front into
    a C array of field positions; each step then builds one Record in C (from the free list,
    its ints kept as C ints, its key and value copied out), so records nobody keeps are
    never all alive at once."""

    cdef _Buffer data
    cdef Slot* slots
    cdef list headers             # per record, or None when no record has headers
    cdef int64_t base, base_ts, max_ts
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
        cdef Record record
        cdef long long r
        if i >= self.n:
            raise StopIteration
        self.i = i + 1
        s = &self.slots[i]
        record = Record.__new__(Record)
        if rq_add_overflow(self.base, s.od, &r):
            record._offset_obj = sum_int(self.base, s.od)
        else:
            record._offset = r
            record._offset_obj = None
        if self.append_time:
            # Kafka gives every record of a LogAppendTime batch the batch's maxTimestamp.
            record._timestamp = self.max_ts
            record._timestamp_obj = None
        elif rq_add_overflow(self.base_ts, s.tsd, &r):
            record._timestamp_obj = sum_int(self.base_ts, s.tsd)
        else:
            record._timestamp = r
            record._timestamp_obj = None
        if s.klen >= 0:
            record.key = PyBytes_FromStringAndSize(<const char*>self.data.ptr + s.kpos, s.klen)
        if s.vlen >= 0:
            record.value = PyBytes_FromStringAndSize(<const char*>self.data.ptr + s.vpos, s.vlen)
        record.headers = () if self.headers is None else self.headers[i]
        return record


def iter_records(data, Py_ssize_t pos, Py_ssize_t end, header):
    """Twin of reader._iter_records_py: the records as Records, checked whole up front."""
    cdef tuple h = header_tuple(header)
    cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
    cdef Py_ssize_t count = h[H_RECORDS_COUNT]
    cdef int64_t last_delta = h[H_LAST_OFFSET_DELTA]
    cdef int64_t prev = -1
    cdef Py_ssize_t i
    cdef RecordFields f
    cdef Slot* s
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
    it.max_ts = h[H_MAX_TIMESTAMP]
    it.append_time = h[H_ATTRIBUTES] & LOG_APPEND_TIME_BIT
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


def walk_records(data, Py_ssize_t start, Py_ssize_t end, header):
    """Twin of reader._walk_records_py: (largest timestamp, keyless records, deltas 0..n-1)."""
    cdef tuple h = header_tuple(header)
    cdef _Buffer b = _Buffer(data)
    cdef Walk w
    if start < 0 or end > b.size or start > end:
        raise CorruptRecordError(f"records span {start}..{end} is outside the buffer")
    walk_region(b.ptr, start, end, h[H_RECORDS_COUNT], &w)
    return sum_int(h[H_BASE_TIMESTAMP], w.max_tsd), w.null_keys, w.in_order
