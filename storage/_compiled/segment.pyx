# cython: language_level=3
"""Compiled twin of ``storage/segment.py``'s append path (the reference: read it first).

``LogSegment_append`` and ``LogSegment_should_roll`` replace ``LogSegment.append`` and
``LogSegment.should_roll``: the same steps on the same attributes (the write through the
pure ``write_fully``, the sparse offset and time index entries, the roll checks), without
the interpreter.
"""

import os

from storage.errors import KafkaStorageError

# Handed over by storage.extensions.bind from storage/segment.py (never imported back).
PURE_NAMES = ("write_fully", "INT32_MAX")
write_fully = INT32_MAX = None
cdef Py_ssize_t IOV_MAX = 1024  # segment._IOV_MAX: POSIX's minimum, Linux's value

def LogSegment_append(self, list parts, Py_ssize_t size, headers):
    """Twin of LogSegment.append (see there)."""
    cdef Py_ssize_t start = self._size
    cdef Py_ssize_t since
    cdef tuple h
    cdef Py_ssize_t written
    try:
        written = os.writev(self._fd, parts) if len(parts) <= IOV_MAX else 0
        if written != size:  # rare: a short write; the pure loop writes the rest
            write_fully(self._fd, rest_of(parts, written), size - written)
    except OSError as exc:
        self._undo_partial_write(start)
        raise KafkaStorageError(f"append to {self.log_path} failed: {exc}") from exc
    if start == 0:
        self._rolling_based_timestamp = headers[0].max_timestamp
    if len(headers) == 1:  # the usual append: _index_batches without its loop
        h = <tuple>headers[0]
        # BatchHeader fields: 1 baseOffset, 7 lastOffsetDelta, 9 maxTimestamp.
        last_offset = h[1] + h[7]
        max_timestamp = h[9]
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp = last_offset
        since = self._bytes_since_last_index_entry
        if since > self._index_interval:
            self.offset_index.append(last_offset, start)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            since = 0
        self._bytes_since_last_index_entry = since + size
        self._next_offset = last_offset + 1
    else:
        self._index_batches(headers, start)
        self._next_offset = headers[-1].next_offset
    self._size = start + size


cdef list rest_of(list parts, Py_ssize_t written):
    """What is left of ``parts`` once their first ``written`` bytes are out."""
    cdef list rest = []
    for part in parts:
        view = memoryview(part)
        if written >= view.nbytes:
            written -= view.nbytes
        else:
            rest.append(view[written:] if written else view)
            written = 0
    return rest


def LogSegment_should_roll(self, Py_ssize_t size_in_bytes, max_timestamp, last_offset, now_ms, Py_ssize_t max_size):
    """Twin of LogSegment.should_roll (see there)."""
    cdef Py_ssize_t size = self._size
    if size == 0:
        return False
    if size > max_size - size_in_bytes:
        return True
    # The indexes' is_full, read directly (two property calls cost more than the rest).
    offset_index, time_index = self.offset_index, self.time_index
    if offset_index._entries >= offset_index._max_entries or time_index._entries >= time_index._max_entries - 1:
        return True
    if last_offset - self.base_offset > INT32_MAX or size + size_in_bytes > INT32_MAX:
        return True
    first = self._rolling_based_timestamp
    if first is None:
        first = self.rolling_based_timestamp  # read from the file once
    if first is not None and first >= 0:
        waited = max_timestamp - first
    else:
        waited = (now_ms() if callable(now_ms) else now_ms) - self.created_ms
    return waited > self._segment_ms
