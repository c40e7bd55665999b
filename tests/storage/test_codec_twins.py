"""The compiled record codec against the pure-Python reference, on the same hostile input.

Hypothesis builds record regions with lengths that lie (record, key, value, header lengths
and counts off by a little or a lot, -1 written in more bytes than it needs, over-long
varints), truncations and plain garbage, and every per-record loop of both twins must
agree: the same records, or both a Kafka CorruptRecordError. The builders must write the
same bytes and refuse the same input.
"""

from __future__ import annotations

from itertools import islice
from operator import length_hint
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import extensions
from storage.batch_header import HEADER_SIZE, BatchHeader
from storage.errors import CorruptRecordError, RecordTooLargeError
from storage.records.reader import Record
from tests import twins

pytestmark = pytest.mark.skipif(
    not twins.compiled_available(), reason="the compiled extensions are not built (or RAYQUEUE_NO_EXTENSIONS is set)"
)

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Where each twinned name of the codec lives.
MODULES = {
    "_decode_records": "storage.records.reader",
    "_iter_records": "storage.records.reader",
    "_walk_records": "storage.records.reader",
    "_parse_columns": "storage.records.columns",
    "_iter_rows": "storage.records.columns",
    "RecordBatchBuilder": "storage.records.builder",
}


def pair(name: str) -> tuple:
    return twins.pair(MODULES[name], name)


def outcome(fn, *args):
    """("ok", result) or ("corrupt", None); any other exception fails the test."""
    try:
        return "ok", fn(*args)
    except CorruptRecordError:
        return "corrupt", None


def header(count: int, *, base_offset: int = 1000, base_ts: int = 10_000, last_delta: int | None = None,
           append_time: bool = False) -> BatchHeader:  # fmt: skip
    last = count - 1 if last_delta is None else last_delta
    return BatchHeader(
        0, base_offset, 0, -1, 2, 0, 0x08 if append_time else 0, last, base_ts, 99_999, -1, -1, -1, count
    )


def zigzag(value: int, extra_bytes: int = 0) -> bytes:
    """The varint of ``value``, padded with ``extra_bytes`` redundant continuation bytes (still the same value)."""
    z = ((value << 1) ^ (value >> 63)) & (2**64 - 1)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    for _ in range(extra_bytes):  # 0x80 ... 0x00: more bytes, same value (up to the length limit)
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


lie = st.one_of(st.integers(-3, 3), st.integers(-(2**33), 2**33))
padding = st.integers(0, 6)


@st.composite
def records(draw) -> tuple[bytes, int]:
    """A region of records and how many it claims: honest, with one lie, or with lies everywhere.

    A lie is a length, count or delta off by a little or a lot; padding writes a varint in
    more bytes than it needs (still legal, up to the varint's length limit).
    """
    mode = draw(st.sampled_from(["honest", "one lie", "many lies"]))
    n = draw(st.integers(0, 60))
    fields = n * 9
    lie_at = draw(st.integers(0, max(fields - 1, 0))) if mode == "one lie" else -1
    counter = iter(range(fields + 1000))

    def off() -> int:
        here = next(counter)
        if mode == "many lies" and draw(st.integers(0, 9)) == 0 or here == lie_at:
            return draw(lie)
        return 0

    def pad() -> int:
        return draw(padding) if mode != "honest" and draw(st.integers(0, 7)) == 0 else 0

    header_key = st.text(max_size=3).map(str.encode) if mode == "honest" else st.binary(max_size=4)

    out = bytearray()
    for i in range(n):
        key = draw(st.one_of(st.none(), st.binary(max_size=8)))
        value = draw(st.one_of(st.none(), st.binary(max_size=120)))
        headers = draw(st.lists(st.tuples(header_key, st.one_of(st.none(), st.binary(max_size=4))), max_size=2))
        body = bytearray(b"\x00")
        body += zigzag(draw(st.integers(-(2**40), 2**40)) if draw(st.booleans()) else 0, pad())
        body += zigzag(i + off(), pad())
        for field in (key, value):
            body += zigzag((-1 if field is None else len(field)) + off(), pad())
            body += field or b""
        body += zigzag(len(headers) + off(), pad())
        for hkey, hvalue in headers:
            body += zigzag(len(hkey) + off()) + hkey
            body += zigzag((-1 if hvalue is None else len(hvalue)) + off()) + (hvalue or b"")
        out += zigzag(len(body) + off(), pad()) + body
    if mode != "honest" and draw(st.integers(0, 3)) == 0:
        out = out[: draw(st.integers(0, len(out)))]
    claimed = n + (draw(st.integers(-2, 2)) if mode != "honest" and draw(st.integers(0, 5)) == 0 else 0)
    return bytes(out), max(claimed, 0)


def same_results(name: str, *args) -> None:
    pure, compiled = pair(name)
    expected, got = outcome(pure, *args), outcome(compiled, *args)
    assert got[0] == expected[0], (name, expected, got)
    if expected[0] == "ok":
        if name == "_parse_columns":
            for e, g in zip(expected[1][:7], got[1][:7], strict=True):
                assert np.array_equal(e, g), (name, e, g)
            assert expected[1][7] == got[1][7]
        else:
            assert got[1] == expected[1], name


def check_all(region: bytes, count: int, **fields) -> None:
    h = header(count, **fields)
    prefix = b"\xff" * 3  # the records do not start at 0 in the buffer
    data = prefix + region
    start, end = len(prefix), len(data)
    same_results("_decode_records", data, start, end, h)
    pure_iter, compiled_iter = pair("_iter_records")
    expected = outcome(lambda: list(pure_iter(data, start, end, h)))
    got = outcome(lambda: list(compiled_iter(data, start, end, h)))
    assert got == expected
    if count:
        same_results("_walk_records", data, start, end, h)
    same_results("_parse_columns", data, np.frombuffer(data, np.uint8), [(start, end, h)])


@FUZZ
@given(records(), st.booleans(), st.integers(0, 80))
def test_lying_records_get_the_same_answer_from_both_twins(region, append_time, last_delta) -> None:
    data, count = region
    check_all(data, count, append_time=append_time)
    check_all(data, count, last_delta=last_delta)  # offset deltas checked against another lastOffsetDelta


@FUZZ
@given(st.binary(max_size=600), st.integers(0, 90))
def test_arbitrary_bytes_get_the_same_answer_from_both_twins(region, count) -> None:
    check_all(region, count)


def test_the_differential_harness_sees_a_disagreement() -> None:
    """If the twins disagreed, check_all would say so (the harness is not vacuous)."""
    pure, compiled = pair("_decode_records")
    region, count = bytes([18, 0, 0, 0, 1, 6]) + b"abc" + b"\x00", 1  # one record, value b"abc"
    h = header(count)
    assert pure(region, 0, len(region), h)[3] == [b"abc"]
    key = ("storage.records.reader", "_decode_records")
    with pytest.raises(AssertionError):
        extensions.PAIRS[key] = (pure, lambda *a: ([], [], [], [], []))
        try:
            check_all(region, count)
        finally:
            extensions.PAIRS[key] = (pure, compiled)


def test_a_record_claiming_more_bytes_than_the_batch_holds() -> None:
    """A record length that lies by gigabytes: both refuse, neither reads past the buffer."""
    region = zigzag(2**33) + b"\x00" * 10
    for name in ("_decode_records", "_walk_records"):
        for twin in pair(name):
            with pytest.raises(CorruptRecordError):
                twin(region, 0, len(region), header(1))


# ---------------------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------------------

record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=20)),
    st.integers(-1, 2**45),
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2),
)


def build_one_by_one(cls, recs, **kwargs) -> bytes:
    builder = cls(**kwargs)
    for value, key, ts, headers in recs:
        builder.append(value, key, ts, headers)
    return builder.build()


@FUZZ
@given(st.lists(record, max_size=70), st.sampled_from([0, 1, 2, 3, 4]), st.one_of(st.none(), st.integers(0, 10**6)))
def test_both_builders_write_the_same_bytes(recs, codec, horizon) -> None:
    pure, compiled = pair("RecordBatchBuilder")
    kwargs = {
        "compression": codec,
        "producer_id": 7,
        "producer_epoch": 1,
        "base_sequence": 5,
        "delete_horizon_ms": horizon,
    }
    assert build_one_by_one(compiled, recs, **kwargs) == build_one_by_one(pure, recs, **kwargs)
    values, keys, stamps = [r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs]
    for columns in ((values, keys, stamps), (pa.array(values, pa.binary()), pa.array(keys, pa.large_binary()), stamps)):
        built = [cls.from_columns(*columns, **kwargs).build() for cls in (pure, compiled)]
        assert built[0] == built[1]


@FUZZ
@given(st.lists(record, min_size=1, max_size=30), st.integers(HEADER_SIZE, 3000))
def test_both_builders_stop_at_the_same_record(recs, limit) -> None:
    """max_batch_bytes: the same record is refused by both, and what was built before is the same."""
    built = []
    for cls in pair("RecordBatchBuilder"):
        builder = cls(max_batch_bytes=limit)
        taken = 0
        for value, key, ts, headers in recs:
            fits = builder.has_room_for(value, key, headers)
            try:
                builder.append(value, key, ts, headers)
            except RecordTooLargeError:
                break
            assert fits or builder.estimated_size() <= limit
            taken += 1
        built.append((taken, builder.estimated_size(), builder.build()))
    assert built[0] == built[1]


@pytest.mark.parametrize(
    "bad",
    [
        {"value": "text"},
        {"value": b"v", "key": 3},
        {"value": b"v", "timestamp": -2},
        {"value": b"v", "timestamp": 2**63},
        {"value": b"v", "timestamp": 1.5},
        {"value": b"v", "headers": [(b"bytes-key", b"v")]},
        {"value": b"v", "headers": [("k", "text")]},
        {"value": b"v", "offset_delta": -1},
    ],
)
def test_both_builders_refuse_the_same_arguments(bad) -> None:
    errors = []
    for cls in pair("RecordBatchBuilder"):
        builder = cls()
        builder.append(b"first", timestamp=5)
        before = builder.build()
        with pytest.raises((TypeError, ValueError)) as caught:
            builder.append(**bad)
        errors.append(type(caught.value))
        assert len(builder) == 1 and builder.build() == before  # left as it was
    assert errors[0] is errors[1]


@pytest.mark.parametrize(
    "values, keys, timestamps",
    [
        (["text"], None, None),
        ([b"a", b"b"], [b"k"], None),
        ([b"a"], None, [1.5]),
        ([b"a"], None, [-2]),
        (pa.array([1, 2]), None, None),
    ],
)
def test_both_bulk_builders_refuse_the_same_columns(values, keys, timestamps) -> None:
    errors = []
    for cls in pair("RecordBatchBuilder"):
        with pytest.raises((TypeError, ValueError)) as caught:
            cls().append_many(values, keys, timestamps)
        errors.append(type(caught.value))
    assert errors[0] is errors[1]


# ---------------------------------------------------------------------------------------
# Records built of row columns (the Consumer's)
# ---------------------------------------------------------------------------------------


class Row(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: object
    value: object
    headers: tuple
    leader_epoch: int


def fetch_of(batches) -> bytes:
    """Batches of ``record`` tuples back to back, as a fetch answer holds them."""
    builder_class = twins.pair("storage.records.builder", "RecordBatchBuilder")[0]
    out, offset = [], 100
    for recs, codec, append_time in batches:
        builder = builder_class(compression=codec, base_offset=offset, timestamp_type=int(append_time))
        for value, key, ts, headers in recs:
            builder.append(value, key, ts, headers)
        out.append(builder.build() if recs else b"")
        offset += len(recs) + 3  # a hole between batches, as compaction leaves
    return b"".join(out)


@FUZZ
@given(
    st.lists(st.tuples(st.lists(record, max_size=12), st.sampled_from([0, 1, 4]), st.booleans()), max_size=4),
    st.integers(0, 60),
    st.integers(0, 20),
    st.booleans(),
    st.integers(0, 30),
)
def test_both_twins_build_the_same_records_of_rows(batches, min_offset, start, deserialized, stop_after) -> None:
    from storage.records.columns import decode_rows

    rows = decode_rows(fetch_of(batches), min_offset=100 + min_offset)
    start = min(start, len(rows))
    pure, compiled = pair("_iter_rows")
    got = []
    for twin in (pure, compiled):
        offsets = rows.offset[start:].tolist()
        keys = [("k", k) for k in rows.keys(start)] if deserialized else None
        records, cursor = (
            twin(rows, Row, ("t", 3), (9,), offsets, start, keys, None) if offsets else (iter(()), iter(()))
        )
        taken = list(islice(records, stop_after))
        left = length_hint(cursor)
        assert left == len(offsets) - len(taken)
        offsets.clear()  # a seek: whatever is left is never handed out
        assert list(records) == [] and length_hint(cursor) == 0
        got.append((taken, left))
    assert got[0] == got[1]
    taken = got[0][0]
    assert all(type(r) is Row and r.topic == "t" and r.partition == 3 and r.leader_epoch == 9 for r in taken)
    assert [r.offset for r in taken] == rows.offset[start : start + len(taken)].tolist()
    if deserialized:
        assert all(r.key == ("k", k) for r, k in zip(taken, rows.keys(start), strict=False))


def test_records_of_rows_refuse_a_record_type_that_does_not_fit() -> None:
    from storage.records.columns import decode_rows

    rows = decode_rows(fetch_of([([(b"v", None, 5, [])], 0, False)]))
    pure, compiled = pair("_iter_rows")
    for wrong in (Record, tuple, Row):  # not a tuple class, no fields, 9 fields for 8
        with pytest.raises(TypeError):
            compiled(rows, wrong, ("t",), (9,), [100], 0, None, None)
    with pytest.raises(ValueError):
        compiled(rows, Row, ("t", 3), (9,), [100, 101], 0, None, None)  # more offsets than rows
    assert list(compiled(rows, Row, ("t", 3), (9,), [100], 0, None, None)[0]) == [
        Row("t", 3, 100, 5, 0, None, b"v", (), 9)
    ]
