# What storage/_compiled/record_batch.pyx shares with the other compiled twins (log.pyx).
from libc.stdint cimport int64_t, uint8_t


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
cdef int walk_region(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count, Walk* out) except -1
