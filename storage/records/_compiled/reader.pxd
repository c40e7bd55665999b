# What storage/records/_compiled/reader.pyx shares with the other compiled twins (columns.pyx,
# storage/_compiled/log.pyx): the record parser, the leader's walk, a buffer view.
from libc.stdint cimport int64_t, uint8_t

cdef extern from *:
    """
    static inline int rq_add_overflow(long long a, long long b, long long *r) { return __builtin_add_overflow(a, b, r); }
    """
    bint rq_add_overflow(long long a, long long b, long long* r)

cdef enum:
    # The fields of a BatchHeader named tuple, by position.
    H_BASE_OFFSET = 1
    H_ATTRIBUTES = 6
    H_LAST_OFFSET_DELTA = 7
    H_BASE_TIMESTAMP = 8
    H_MAX_TIMESTAMP = 9
    H_RECORDS_COUNT = 13
    LOG_APPEND_TIME_BIT = 0x08
    # The smallest record: length, attributes, timestampDelta, offsetDelta, keyLength,
    # valueLength and headerCount, one byte each.
    MIN_RECORD_SIZE = 7
    MAX_VARINT_BYTES = 5
    MAX_VARLONG_BYTES = 10


cdef struct RecordFields:
    int64_t tsd          # timestampDelta
    int64_t od           # offsetDelta
    Py_ssize_t kpos      # key bytes start; klen -1 for a null key
    int64_t klen
    Py_ssize_t vpos
    int64_t vlen
    Py_ssize_t hpos      # first header (just past the header count)
    int64_t hcount
    Py_ssize_t end       # just past the record


cdef struct Walk:
    int64_t max_tsd      # the largest timestampDelta
    Py_ssize_t null_keys
    bint in_order        # offset deltas exactly 0..n-1


cdef class _Buffer:
    cdef Py_buffer view
    cdef const uint8_t* ptr
    cdef Py_ssize_t size


cdef int parse_record(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t end, RecordFields* f) except -1
cdef tuple headers_of(const uint8_t* buf, RecordFields* f)
cdef int walk_region(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count, Walk* out) except -1


cdef inline tuple header_tuple(object header):
    """A BatchHeader (a tuple subclass, which Cython's typed arguments refuse) as a tuple."""
    if not isinstance(header, tuple) or len(<tuple>header) != 14:
        raise TypeError(f"expected a BatchHeader, not {type(header).__name__}")
    return <tuple>header
