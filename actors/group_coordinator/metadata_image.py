"""The topics as the group coordinator last learnt them (Kafka's ``MetadataImage``, the topics part).

Consumer groups of KIP-848's protocol assign by topic id and subscribe by topic name (or by a
regex over the names); the image maps one onto the other and gives each topic's partition
count. The actor shell builds it from the controller's metadata; the state machine only
reads it. ``version`` goes up whenever the set of topics changes (a topic created or
deleted), which is when subscribed regexes must be matched again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from actors.names import INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class TopicImage:
    """One topic: its id (Kafka's ``Uuid.toString()``), name and partition count."""

    topic_id: str
    name: str
    partitions: int


@dataclass(frozen=True)
class MetadataImage:
    """Every topic by name and by id; ``version`` counts changes of the set of topics."""

    by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", {t.topic_id: t for t in self.by_name.values() if t.topic_id})

    by_id: Mapping[str, TopicImage] = field(init=False, repr=False, compare=False, default_factory=dict)

    @classmethod
    def of(cls, topics: Iterable[TopicImage], previous: MetadataImage | None = None) -> MetadataImage:
        """An image of ``topics``; its version is ``previous``'s, plus one when the set of
        topics (names and ids) differs from it."""
        by_name = {t.name: t for t in topics}
        if previous is None:
            return cls(by_name, 1)
        same = {(t.name, t.topic_id) for t in by_name.values()} == {
            (t.name, t.topic_id) for t in previous.by_name.values()
        }
        return cls(by_name, previous.version if same else previous.version + 1)

    def topic(self, name: str) -> TopicImage | None:
        """The topic named ``name``, if there is one."""
        return self.by_name.get(name)

    def name_of(self, topic_id: str) -> str | None:
        """The name of the topic with id ``topic_id``, if there is one."""
        t = self.by_id.get(topic_id)
        return None if t is None else t.name

    def user_topics(self) -> list[str]:
        """Every topic name a regex may match (internal topics excluded, as Kafka's consumers do)."""
        return sorted(n for n in self.by_name if n not in INTERNAL_TOPICS)


EMPTY_IMAGE = MetadataImage()

__all__ = ["EMPTY_IMAGE", "MetadataImage", "TopicImage"]
