"""Reading back what the coordinators and the controller stored, and skipping what cannot be read.

``__consumer_offsets``, ``__transaction_state`` and the controller's metadata log hold JSON
keys and values that only rayqueue's own actors write. A record that is not what they write
(bad UTF-8 or JSON, a field missing or of the wrong type, a truncated value: left by an older
version, written before clients were kept out of internal topics, or damaged under the CRC)
must not stop a start. As Kafka's loaders do, a replay skips it with one error line naming
topic, partition, offset and the reason, counts it, and goes on (``SkippedRecords``).

The readers here check types strictly before anything is applied, so that a record is either
applied whole or skipped whole: ``field`` refuses a bool where an int is wanted (JSON's
``true`` is not a number) and ``None`` unless allowed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

logger = logging.getLogger(__name__)

# What reading an unreadable record raises: json's and the UTF-8 decoder's errors are
# ValueErrors, base64's binascii.Error too; a missing key, a short list or a wrong type the rest.
READ_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, KeyError, IndexError, AttributeError)
REQUIRED = object()  # field(): the key must be there


def loads(data: bytes | None, what: str = "value") -> Any:
    """``data`` as JSON (UTF-8); ValueError when it is missing or not JSON."""
    if data is None:
        raise ValueError(f"the {what} is null")
    return json.loads(bytes(data).decode("utf-8"))


def json_object(data: bytes | None, what: str = "value") -> dict[str, Any]:
    """``data`` as a JSON object; ValueError for anything else."""
    value = loads(data, what)
    if not isinstance(value, dict):
        raise ValueError(f"the {what} is a JSON {type(value).__name__}, not an object")
    return value


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        return False  # JSON true/false is not a number
    return isinstance(value, kinds)


def field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any = REQUIRED) -> Any:
    """``d[key]``, checked to be of ``kind`` (a missing key takes ``default`` when given);
    TypeError / KeyError otherwise."""
    if key not in d:
        if default is REQUIRED:
            raise KeyError(f"field {key!r} is missing")
        return default
    value = d[key]
    if not _is(value, kind):
        raise TypeError(f"field {key!r} is {type(value).__name__} {value!r:.40}, not {_kind_name(kind)}")
    return value


def items_of(values: Any, kind: type | tuple[type, ...], what: str) -> list[Any]:
    """``values`` as a list whose every item is of ``kind``; TypeError otherwise."""
    if not isinstance(values, list):
        raise TypeError(f"{what} is {type(values).__name__}, not a list")
    for value in values:
        if not _is(value, kind):
            raise TypeError(f"{what} holds {type(value).__name__} {value!r:.40}, not {_kind_name(kind)}")
    return values


def topic_partitions(values: Any, what: str) -> list[tuple[str, int]]:
    """A list of ``[topic, partition]`` pairs; TypeError otherwise."""
    pairs = []
    for pair in items_of(values, list, what):
        if len(pair) != 2 or not _is(pair[0], str) or not _is(pair[1], int):
            raise TypeError(f"{what} holds {pair!r:.60}, not a [topic, partition] pair")
        pairs.append((pair[0], pair[1]))
    return pairs


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


class SkippedRecords:
    """The records one replay of ``topic`` skipped: each logged once, all counted.

    ``on_skip`` (optional) is told of each, to count it in a metric.
    """

    def __init__(self, topic: str, on_skip: Callable[[str], None] | None = None) -> None:
        self.topic = topic
        self.count = 0
        self._on_skip = on_skip

    def skip(self, partition: int, offset: int, reason: BaseException | str) -> None:
        """Skip the record at ``offset`` of ``partition``: one error line, one count."""
        self.count += 1
        why = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else reason
        logger.error(
            "skipping unreadable record at offset %d of %s-%d: %s", offset, self.topic, partition, " ".join(why.split())
        )
        if self._on_skip is not None:
            try:
                self._on_skip(self.topic)
            except Exception:  # noqa: BLE001 - counting must never stop a load
                logger.exception("counting a skipped record failed")

    def records(self, partition: int, batch: Any, first: int) -> Iterator[Any]:
        """The records of ``batch`` from offset ``first`` on. A batch whose records cannot be
        decoded (its CRC matched, its body does not parse) is skipped from there on, as one."""
        records = None
        while True:
            try:
                if records is None:
                    records = iter(batch)  # the compiled reader decodes here already
                record = next(records)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - any decoding failure: the rest of the batch is unreadable
                self.skip(partition, batch.base_offset, f"its batch cannot be decoded: {type(exc).__name__}: {exc}")
                return
            if record.offset >= first:
                yield record


__all__ = ["READ_ERRORS", "REQUIRED", "SkippedRecords", "field", "items_of", "json_object", "loads", "topic_partitions"]
