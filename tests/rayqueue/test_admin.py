"""Admin calls that go to partition leaders: they follow a leader that moved or died."""

from __future__ import annotations

from rayqueue import TopicPartition
from rayqueue.admin import Admin
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from tests.helpers import kill_broker, wait_for


def test_list_offsets_and_delete_records_follow_a_new_leader(failover_cluster, failover_topic):
    cluster, new_topic = failover_cluster, failover_topic
    topic = new_topic(partitions=1, replication_factor=3)
    tp = TopicPartition(topic, 0)
    producer = cluster.producer()
    producer.send_many(topic, [b"%d" % i for i in range(10)], partition=0).get(30)
    producer.close()
    admin = Admin(cluster)  # its own metadata cache, filled by the first call
    assert admin.list_offsets({tp: LATEST_TIMESTAMP})[tp].offset == 10
    old = cluster.metadata([topic]).topics[topic].partitions[0]
    kill_broker(old.leader_handle)

    def new_leader():
        meta = cluster.metadata([topic]).topics[topic].partitions[0]
        return meta if meta.leader >= 0 and meta.leader != old.leader else None

    wait_for(new_leader, timeout=60, what="a new leader")
    # The cached leader is dead: both calls look the partition up again and succeed.
    assert admin.delete_records({tp: 4}) == {tp: 4}
    assert admin.list_offsets({tp: EARLIEST_TIMESTAMP})[tp].offset == 4
    assert admin.list_offsets({tp: LATEST_TIMESTAMP})[tp].offset == 10
