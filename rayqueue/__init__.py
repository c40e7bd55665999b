"""rayqueue: a Kafka-style distributed commit log on Ray.

Start or attach to a cluster with :func:`launch` / :func:`connect`, then use
:class:`Producer`, :class:`Consumer` and :class:`Admin` as you would Kafka's clients.
"""

from actors.types import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicMetadata, TopicPartition
from rayqueue import errors
from rayqueue.admin import Admin, NewTopic
from rayqueue.cluster import Cluster, connect, launch
from rayqueue.consumer import Consumer, ConsumerRebalanceListener, ConsumerRecord, ConsumerRecords
from rayqueue.producer import FutureRecordMetadata, Producer, RecordMetadata

__all__ = [
    "Admin",
    "Cluster",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "FutureRecordMetadata",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "RecordMetadata",
    "TopicMetadata",
    "TopicPartition",
    "connect",
    "errors",
    "launch",
]
