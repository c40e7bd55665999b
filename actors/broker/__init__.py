"""The broker: the code that hosts partition replicas in a broker's process (Kafka's
ReplicaManager and what it holds: partitions, their replication state, the replica fetchers).
"""
