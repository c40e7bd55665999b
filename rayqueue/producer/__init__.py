"""The producer, shaped like Kafka's and aiokafka's.

``producer.py`` is the public Producer; ``accumulator.py`` the RecordAccumulator (open
batches per partition, batch.size and linger.ms, drain); ``sender.py`` the Sender thread
(ProduceRequests to the partition leaders, answers, errors and retries); ``futures.py``
RecordMetadata and the futures ``send()`` returns; ``transaction_manager.py`` the producer
id, sequences and transaction state. Imports run one way: producer -> sender ->
accumulator -> futures (and transaction_manager).
"""

from rayqueue.producer.futures import BulkSendResult, FutureRecordMetadata, RecordMetadata
from rayqueue.producer.producer import Producer

__all__ = ["BulkSendResult", "FutureRecordMetadata", "Producer", "RecordMetadata"]
