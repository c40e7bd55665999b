"""A cluster with Kafka's StandardAuthorizer and a SCRAM user for the console's login tests
(``test_console_auth.py``, ``test_console_browser.py``): what the user may and may not do
is set up here once, with rayqueue's own Admin (no principal: a super user)."""

from __future__ import annotations

from dataclasses import dataclass

import rayqueue
from rayqueue import TopicPartition
from rayqueue.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

USER = "alice"
PASSWORD = "alice-console-secret"
PRINCIPAL = f"User:{USER}"


@dataclass(frozen=True, slots=True)
class Grants:
    """What alice sees: ``shared`` (READ and WRITE), ``readonly`` (READ; 3 records),
    ``hidden`` (no ACL; 2 records), the group ``group`` (READ) but not ``hidden_group``."""

    shared: str
    readonly: str
    hidden: str
    group: str
    hidden_group: str


def allow(rtype: ResourceType, name: str, *ops: AclOperation) -> list[AclBinding]:
    """ALLOW ``ops`` on a literal resource for alice from any host."""
    return [AclBinding.of(rtype, name, PatternType.LITERAL, PRINCIPAL, "*", op, AclPermissionType.ALLOW) for op in ops]


def set_up(cluster: rayqueue.Cluster, prefix: str) -> Grants:
    """alice's SCRAM user, three topics, two groups with committed offsets, and alice's ACLs."""
    grants = Grants(f"{prefix}-shared", f"{prefix}-readonly", f"{prefix}-hidden", f"{prefix}-g", f"{prefix}-hidden-g")
    admin = cluster.admin()
    admin.add_scram_user(USER, PASSWORD)
    for topic in (grants.shared, grants.readonly, grants.hidden):
        admin.create_topic(topic, 1, 1)
    producer = cluster.producer()
    try:
        producer.send_many(grants.readonly, [f"ro-{i}".encode() for i in range(3)], partition=0).get(30)
        producer.send_many(grants.hidden, [b"secret-0", b"secret-1"], partition=0).get(30)
    finally:
        producer.close()
    for group, topic in ((grants.group, grants.readonly), (grants.hidden_group, grants.hidden)):
        consumer = cluster.consumer(group_id=group, enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.commit({TopicPartition(topic, 0): 1})
        finally:
            consumer.close()
    admin.create_acls(
        allow(ResourceType.TOPIC, grants.shared, AclOperation.READ, AclOperation.WRITE)
        + allow(ResourceType.TOPIC, grants.readonly, AclOperation.READ)
        + allow(ResourceType.GROUP, grants.group, AclOperation.READ)
    )
    return grants
