# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: embedsignature=True, embedsignature.format=clinic, binding=True
"""Compiled twin of ``storage/cleaner.py``'s offset map (the reference: read it first).

``SkimpyOffsetMap`` with the same digests (MD5, as Kafka's, from OpenSSL's libcrypto: the
library behind ``hashlib.md5``; or the given ``hash_fn``), the same check values (Python's
``hash``, or ``check_fn``) and the same collision rules, held in an open-addressing table of
C structs instead of a dict of Python ints; ``put_many``/``get_many`` take a batch's key
column in one call. The cleaner picks this class at import when this extension is built
(``storage.extensions``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp, memcpy

cdef extern from "openssl/evp.h":
    ctypedef struct EVP_MD
    ctypedef struct EVP_MD_CTX
    EVP_MD* EVP_MD_fetch(void* libctx, const char* algorithm, const char* properties)
    EVP_MD_CTX* EVP_MD_CTX_new()
    int EVP_DigestInit_ex(EVP_MD_CTX* ctx, const EVP_MD* md, void* engine)
    int EVP_DigestUpdate(EVP_MD_CTX* ctx, const void* data, size_t count)
    int EVP_DigestFinal_ex(EVP_MD_CTX* ctx, unsigned char* md, unsigned int* size)

from storage.offset_map import DEFAULT_OFFSET_MAP_ENTRIES, OffsetMapFullError, md5_digest

# MD5 fetched once (a fetch per digest would cost more than the digest) and one context
# reused: the map runs on one thread at a time (one clean pass per log, under its lock).
cdef const EVP_MD* _MD5 = EVP_MD_fetch(NULL, b"MD5", NULL)
cdef EVP_MD_CTX* _CTX = EVP_MD_CTX_new()
if _MD5 == NULL or _CTX == NULL:
    raise ImportError("OpenSSL's libcrypto has no MD5 here")

cdef enum:
    DIGEST_SIZE = 16
    EMPTY = 0
    USED = 1
    COLLIDED = 2  # USED, and two keys with different check values met on this digest

cdef struct Slot:
    uint8_t digest[DIGEST_SIZE]
    int64_t offset
    uint64_t check
    uint8_t state

_MASK64 = 2**64 - 1


cdef int md5(object key, uint8_t* out) except -1:
    """The MD5 digest of ``key`` (any bytes-like object), as hashlib.md5(key).digest()."""
    cdef Py_buffer view
    cdef unsigned int size = 0
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        if (EVP_DigestInit_ex(_CTX, _MD5, NULL) != 1 or EVP_DigestUpdate(_CTX, view.buf, view.len) != 1
                or EVP_DigestFinal_ex(_CTX, out, &size) != 1 or size != DIGEST_SIZE):
            raise RuntimeError("OpenSSL could not compute an MD5 digest")
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline uint64_t mix(const uint8_t* digest) noexcept:
    """The table position of a digest: its two halves folded and mixed (a custom hash_fn's
    digests need not be uniform)."""
    cdef uint64_t a, b
    memcpy(&a, digest, 8)
    memcpy(&b, digest + 8, 8)
    a ^= b * 0x9E3779B97F4A7C15ULL
    a ^= a >> 33
    a *= 0xFF51AFD7ED558CCDULL
    a ^= a >> 33
    return a


cdef class SkimpyOffsetMap:
    """SkimpyOffsetMap(max_entries=None, hash_fn=None, check_fn=None)
--

    Key -> latest offset with bounded memory: compiled twin of cleaner.SkimpyOffsetMap (see
    there for the collision rules). Digests must be 16 bytes. (The first line is the class's
    signature for ``inspect.signature`` and ``help()``.)
    """

    cdef public Py_ssize_t max_entries
    cdef public int64_t latest_offset
    cdef public Py_ssize_t puts
    cdef object _hash, _check
    cdef bint _default_hash, _default_check
    cdef Slot* _slots
    cdef Py_ssize_t _capacity      # a power of two
    cdef Py_ssize_t _size
    cdef Py_ssize_t _collisions

    def __init__(self, max_entries=None, hash_fn=None, check_fn=None):
        if max_entries is None:
            max_entries = DEFAULT_OFFSET_MAP_ENTRIES
        if max_entries < 1:
            raise ValueError("the offset map needs room for at least one entry")
        self.max_entries = max_entries
        self._default_hash = hash_fn is None or hash_fn is md5_digest
        self._default_check = check_fn is None or check_fn is hash
        self._hash = hash_fn
        self._check = check_fn
        self.latest_offset = -1
        self.puts = 0
        self._allocate(64)

    def __dealloc__(self):
        free(self._slots)

    cdef int _allocate(self, Py_ssize_t capacity) except -1:
        cdef Slot* slots = <Slot*>calloc(capacity, sizeof(Slot))
        if slots == NULL:
            raise MemoryError()
        free(self._slots)
        self._slots = slots
        self._capacity = capacity
        self._size = 0
        self._collisions = 0
        return 0

    cdef int _grow(self) except -1:
        cdef Slot* old = self._slots
        cdef Py_ssize_t old_capacity = self._capacity, i
        cdef Slot* slot
        self._slots = NULL
        self._allocate(2 * old_capacity)
        for i in range(old_capacity):
            if old[i].state != EMPTY:
                slot = self._find(old[i].digest)
                slot[0] = old[i]
                self._size += 1
                if old[i].state == COLLIDED:
                    self._collisions += 1
        free(old)
        return 0

    cdef Slot* _find(self, const uint8_t* digest) noexcept:
        """The slot holding ``digest``, or the empty slot where it would go."""
        cdef uint64_t mask = self._capacity - 1
        cdef uint64_t i = mix(digest) & mask
        cdef Slot* slot
        while True:
            slot = &self._slots[i]
            if slot.state == EMPTY or memcmp(slot.digest, digest, DIGEST_SIZE) == 0:
                return slot
            i = (i + 1) & mask

    cdef int _digest(self, object key, uint8_t* out, uint64_t* check) except -1:
        """The key's digest (into ``out``) and its check value, as the pure map computes them."""
        if self._default_hash:
            md5(key, out)
        else:
            digest = self._hash(key)
            if not PyBytes_CheckExact(digest) or PyBytes_GET_SIZE(digest) != DIGEST_SIZE:
                raise ValueError(f"hash_fn must return {DIGEST_SIZE} bytes, not {digest!r}")
            memcpy(out, PyBytes_AS_STRING(digest), DIGEST_SIZE)
        if self._default_check:
            check[0] = <uint64_t>hash(key)
        else:
            check[0] = <uint64_t>(self._check(key) & _MASK64)
        return 0

    def __len__(self):
        return self._size

    @property
    def collisions(self):
        """Digests found shared by keys with different check values (their records are all kept)."""
        return self._collisions

    @property
    def utilization(self):
        """Entries held / max entries."""
        return self._size / <double>self.max_entries

    cdef int _put(self, object key, int64_t offset) except -1:
        cdef uint8_t digest[DIGEST_SIZE]
        cdef uint64_t check
        cdef Slot* slot
        self._digest(key, digest, &check)
        slot = self._find(digest)
        if slot.state == EMPTY:
            if self._size >= self.max_entries:
                raise OffsetMapFullError(f"offset map full at {self.max_entries} entries")
            if 2 * (self._size + 1) > self._capacity:
                self._grow()
                slot = self._find(digest)
            memcpy(slot.digest, digest, DIGEST_SIZE)
            slot.state = USED
            self._size += 1
        elif slot.check != check and slot.state != COLLIDED:
            slot.state = COLLIDED
            self._collisions += 1
        slot.offset = offset
        slot.check = check
        self.puts += 1
        if offset > self.latest_offset:
            self.latest_offset = offset
        return 0

    cdef int64_t _get(self, object key) except? -2:
        cdef uint8_t digest[DIGEST_SIZE]
        cdef uint64_t check
        cdef Slot* slot
        self._digest(key, digest, &check)
        slot = self._find(digest)
        if slot.state != USED or slot.check != check:  # unknown, another key's, or collided
            return -1
        return slot.offset

    def put(self, key, int64_t offset):
        """Record ``offset`` as the latest for ``key``; raise OffsetMapFullError when a new key has no room."""
        self._put(key, offset)

    def get(self, key):
        """The latest offset of ``key``, or -1 when unknown or its digest is collided."""
        return self._get(key)

    def put_many(self, keys, offsets):
        """``put`` each (key, offset) in order; null keys are skipped (a batch's columns)."""
        if len(keys) != len(offsets):
            raise ValueError(f"{len(keys)} keys for {len(offsets)} offsets")
        for key, offset in zip(keys, offsets):
            if key is not None:
                self._put(key, offset)

    def get_many(self, keys):
        """``get`` of each key, -1 for a null one (a batch's column)."""
        return [-1 if key is None else self._get(key) for key in keys]

    def clear(self):
        """Forget every entry."""
        self._allocate(64)
        self.latest_offset = -1
        self.puts = 0
