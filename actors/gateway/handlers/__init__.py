"""One handler module per family of Kafka APIs, each a translator from the wire request
(kio's classes) to ``actors/protocol.py`` requests and back: ``metadata``, ``produce``,
``fetch``, ``offsets`` (ListOffsets, OffsetForLeaderEpoch), ``admin`` (topics, partitions,
configs, DeleteRecords, DescribeCluster) and ``transactions`` (InitProducerId; groups and
transactions come with part 2). Each lists what it serves in ``APIS``.
"""
