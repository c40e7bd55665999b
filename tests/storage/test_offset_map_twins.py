"""The compiled offset map against the pure one: the same answers for the same puts and gets,
with the real digests and with digests and check values made to collide."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.cleaner import OffsetMapFullError
from tests import twins

pytestmark = pytest.mark.skipif(
    not twins.compiled_available(), reason="the compiled extensions are not built (or RAYQUEUE_NO_EXTENSIONS is set)"
)

PURE, COMPILED = twins.pair("storage.cleaner", "SkimpyOffsetMap")
KEYS = [b"", b"a", b"b", b"c", b"key-1", b"key-2", b"\xff" * 40]

HASHES = {
    "blake2b": (None, None),
    # Few digests, so keys share them; check values that sometimes collide too (a full collision).
    "colliding": (lambda key: bytes([len(key) % 3]) * 16, lambda key: len(key) % 2),
    "colliding digests only": (lambda key: b"\x07" * 16, None),
}

operation = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(KEYS), st.integers(-5, 10**12)),
    st.tuples(st.just("get"), st.sampled_from(KEYS), st.just(0)),
    st.tuples(st.just("put_many"), st.lists(st.one_of(st.none(), st.sampled_from(KEYS)), max_size=6), st.just(0)),
    st.tuples(st.just("get_many"), st.lists(st.one_of(st.none(), st.sampled_from(KEYS)), max_size=6), st.just(0)),
    st.tuples(st.just("clear"), st.just(b""), st.just(0)),
)


def run(cls, hashes, capacity, operations):
    m = cls(capacity, *hashes)
    out = []
    for offset_base, (name, key, offset) in enumerate(operations):
        try:
            if name == "put":
                out.append(m.put(key, offset))
            elif name == "get":
                out.append(m.get(key))
            elif name == "put_many":
                out.append(m.put_many(key, list(range(offset_base, offset_base + len(key)))))
            elif name == "get_many":
                out.append(m.get_many(key))
            else:
                out.append(m.clear())
        except OffsetMapFullError:
            out.append("full")
        out.append((len(m), m.collisions, m.latest_offset, m.puts, m.utilization))
    return out


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(HASHES)), st.integers(1, 8), st.lists(operation, max_size=40))
def test_both_maps_answer_alike(hash_name, capacity, operations) -> None:
    hashes = HASHES[hash_name]
    assert run(COMPILED, hashes, capacity, operations) == run(PURE, hashes, capacity, operations)


def test_the_compiled_map_grows_past_its_first_table() -> None:
    pure, compiled = PURE(100_000), COMPILED(100_000)
    keys = [b"k%d" % n for n in range(5000)]
    for m in (pure, compiled):
        m.put_many(keys, list(range(5000)))
        m.put_many(keys[::2], list(range(5000, 7500)))
    assert len(compiled) == len(pure) == 5000 and compiled.collisions == 0
    assert compiled.get_many(keys + [b"absent"]) == pure.get_many(keys + [b"absent"])


def test_a_digest_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        COMPILED(10, hash_fn=lambda key: b"short").put(b"k", 1)


def test_keys_are_one_entry_only_when_digest_and_check_value_agree() -> None:
    """The default digest is Kafka's MD5 (the compiled twin calls libcrypto, hashlib's
    library): with every check value equal, keys stay apart by digest alone; with one digest
    as well they are one entry, in both twins."""
    import hashlib

    from storage.cleaner import md5_digest

    assert md5_digest(b"k") == hashlib.md5(b"k").digest()
    keys = [b"", b"k", b"\x00" * 1000]
    for cls in (PURE, COMPILED):
        by_digest = cls(10, check_fn=lambda key: 1)
        by_digest.put_many(keys, [1, 2, 3])
        assert len(by_digest) == 3 and by_digest.get_many(keys) == [1, 2, 3]
        same = cls(10, hash_fn=lambda key: hashlib.md5(b"one").digest(), check_fn=lambda key: 1)
        same.put_many(keys, [1, 2, 3])
        assert len(same) == 1 and same.get_many(keys) == [3, 3, 3]
