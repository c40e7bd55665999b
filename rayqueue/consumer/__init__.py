"""The consumer, shaped like Kafka's and aiokafka's.

- ``consumer``: the public :class:`Consumer` (Kafka's KafkaConsumer) and :class:`ConsumerRecords`;
- ``subscription_state``: what is read and where each partition stands (subscription or
  assignment, positions, pauses, seeks);
- ``fetcher``: the fetch path, fetching ahead of the reader and handing out records (also what
  the Ray Data source reads through), over the shared core in ``actors/fetch.py``;
- ``coordinator``: group membership, rebalances and offset commits (the classic protocol);
- ``membership``: the same over KIP-848's consumer protocol (``group.protocol=consumer``).
"""

from rayqueue.consumer.consumer import Consumer, ConsumerRecords
from rayqueue.consumer.coordinator import ConsumerCoordinator
from rayqueue.consumer.fetcher import ConsumerRecord, Fetcher
from rayqueue.consumer.membership import ConsumerMembership
from rayqueue.consumer.subscription_state import ConsumerRebalanceListener, SubscriptionState

__all__ = [
    "Consumer",
    "ConsumerCoordinator",
    "ConsumerMembership",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "Fetcher",
    "SubscriptionState",
]
