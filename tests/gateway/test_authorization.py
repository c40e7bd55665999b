"""The gateway handlers' authorization checks, called with a request context whose connection
carries a principal (as an authenticated listener sets it), without Ray or a socket: the
actor calls the handlers would make are fakes that record what reached them, so a refused
request is seen to reach no replica or coordinator."""

from __future__ import annotations

import asyncio
import datetime
from types import SimpleNamespace

import pytest

from actors.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from actors.acl_view import AclView
from actors.authorizer import STANDARD_AUTHORIZER
from actors.gateway import authorization as authz
from actors.gateway.handlers import acls, groups, produce, transactions
from actors.gateway.hosts import Hosts
from actors.gateway.server import RequestContext
from actors.metrics import current_request
from actors.types import PartitionMetadata
from storage import RecordBatchBuilder
from tests.gateway.wire import build_request

ALICE = "User:alice"
HOST = "10.0.0.1"
Op, Perm = AclOperation, AclPermissionType
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID


class _Replica:
    """A leader replica's handle (a ReplicaRef): its host records the produce requests of
    each partition that reach it."""

    host_key = "the leader's host"

    def __init__(self, calls: list) -> None:
        self.host = SimpleNamespace(append_records=SimpleNamespace(remote=self._append))
        self.calls = calls

    async def _append(self, request):
        answers = []
        for _, _, produce_request in request.entries:
            self.calls.append(("produce", produce_request))
            answers.append(SimpleNamespace(base_offset=0, log_append_time_ms=-1, log_start_offset=0))
        return answers


class _Coordinator:
    """A coordinator's handle: every method records its call and answers ``answer``."""

    def __init__(self, calls: list, answer=None) -> None:
        self._calls, self._answer = calls, answer

    def __getattr__(self, method: str):
        async def remote(*args):
            self._calls.append((method, *args))
            return self._answer

        return SimpleNamespace(remote=remote)


class _View:
    """The gateway's BrokerView, as far as the handlers under test use it."""

    def __init__(self, acls: AclView | None) -> None:
        self.acls = acls
        self.calls: list = []
        self.config = {}
        self.broker_id = 0
        self.controller = _Coordinator(self.calls, [None])
        self.group_coordinator = _Coordinator(self.calls)
        self.transaction_coordinator = _Coordinator(self.calls, SimpleNamespace(producer_id=7, epoch=0))
        self.hosts = Hosts()  # no host in this process: every leader is called through its handle

    async def leader(self, topic: str, partition: int) -> PartitionMetadata:
        return PartitionMetadata(topic, partition, 0, 0, (0,), (0,), leader_handle=_Replica(self.calls))

    def on_partition_error(self, topic: str, code: int) -> None:
        pass


def view_with(*bindings: AclBinding, enabled: bool = True) -> _View:
    config = {"authorizer.class.name": STANDARD_AUTHORIZER if enabled else ""}
    acl_view = AclView(config, controller=None)
    for i, b in enumerate(bindings):
        acl_view.authorizer.add_acl(str(i), b)
    return _View(acl_view)


def allow(rtype, name, op, principal=ALICE, pattern=PatternType.LITERAL, host="*") -> AclBinding:
    return AclBinding.of(rtype, name, pattern, principal, host, op, Perm.ALLOW)


def context(view: _View, api_key: int, version: int, principal: str = ALICE, ip: str = HOST) -> RequestContext:
    connection = SimpleNamespace(
        principal=principal,
        ip=ip,
        peer=f"{ip}:50000",
        handler_state={},
        server=SimpleNamespace(state=view),
        fail=lambda reason: None,
    )
    return RequestContext(connection, api_key, version, 1, "test")  # type: ignore[arg-type]


def transactional_batch() -> bytes:
    builder = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    builder.append(b"v")
    return bytes(builder.build())


def produce_request(topics: list[str], transactional_id: str | None = None, records: bytes = b"\x00" * 70):
    return build_request(
        produce.PRODUCE_KEY,
        9,
        transactional_id=transactional_id,
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=[{"name": t, "partition_data": [{"index": 0, "records": records}]} for t in topics],
    )


def codes_of(response) -> dict[str, int]:
    return {t.name: int(p.error_code) for t in response.responses for p in t.partition_responses}


def test_produce_without_write_is_refused_and_reaches_no_replica():
    view = view_with(allow(TOPIC, "mine", Op.WRITE))
    response = asyncio.run(produce.handle_produce(context(view, 0, 9), produce_request(["mine", "theirs"])))
    assert codes_of(response)["theirs"] == 29  # TOPIC_AUTHORIZATION_FAILED
    assert [request.records for kind, request in view.calls if kind == "produce"] == [b"\x00" * 70]  # "mine" only
    # The same request from a principal with no ACL at all: nothing reaches a replica.
    view = view_with(allow(TOPIC, "mine", Op.WRITE))
    response = asyncio.run(produce.handle_produce(context(view, 0, 9, "User:mallory"), produce_request(["mine"])))
    assert codes_of(response) == {"mine": 29} and view.calls == []


def test_without_an_authorizer_everything_is_allowed():
    view = view_with(enabled=False)
    response = asyncio.run(produce.handle_produce(context(view, 0, 9), produce_request(["any"])))
    assert codes_of(response) == {"any": 0} and len(view.calls) == 1


def test_transactional_produce_needs_write_on_the_transactional_id():
    """As Kafka's KafkaApis: transactional records need their transactional id and WRITE on
    it (a transactional batch without an id is forged); other records need the topic only."""
    batch = transactional_batch()
    view = view_with(allow(TOPIC, "t", Op.WRITE))
    for tid in ("txn-1", None):
        response = asyncio.run(produce.handle_produce(context(view, 0, 9), produce_request(["t"], tid, batch)))
        assert codes_of(response) == {"t": 53} and view.calls == []  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    response = asyncio.run(produce.handle_produce(context(view, 0, 9), produce_request(["t"], "txn-1")))
    assert codes_of(response) == {"t": 0}  # not transactional records: the topic's WRITE is enough
    view = view_with(allow(TOPIC, "t", Op.WRITE), allow(TXN, "txn-", Op.WRITE, pattern=PatternType.PREFIXED))
    response = asyncio.run(produce.handle_produce(context(view, 0, 9), produce_request(["t"], "txn-1", batch)))
    assert codes_of(response) == {"t": 0}
    ((kind, appended),) = view.calls
    assert kind == "produce" and appended.transactional_id == "txn-1"  # the leader verifies with it


def test_deny_for_a_host_beats_allow_for_every_host():
    view = view_with(
        allow(TOPIC, "t", Op.WRITE), AclBinding.of(TOPIC, "t", PatternType.LITERAL, ALICE, HOST, Op.WRITE, Perm.DENY)
    )
    assert codes_of(asyncio.run(produce.handle_produce(context(view, 0, 9), produce_request(["t"])))) == {"t": 29}
    other = context(view, 0, 9, ip="10.0.0.2")
    assert codes_of(asyncio.run(produce.handle_produce(other, produce_request(["t"])))) == {"t": 0}


def join_request(group: str):
    return build_request(
        groups.JOIN_GROUP_KEY,
        5,
        group_id=group,
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b""}],
    )


def test_join_group_needs_read_on_the_group():
    view = view_with(allow(GROUP, "other", Op.READ))
    response = asyncio.run(groups.handle_join_group(context(view, 11, 5), join_request("g")))
    assert int(response.error_code) == 30 and view.calls == []  # GROUP_AUTHORIZATION_FAILED
    view = view_with(allow(GROUP, "g", Op.READ))
    asyncio.run(groups.handle_join_group(context(view, 11, 5), join_request("g")))
    assert [kind for kind, _ in view.calls] == ["join_group"]


def test_offset_commit_commits_only_the_readable_topics():
    view = view_with(allow(GROUP, "g", Op.READ), allow(TOPIC, "readable", Op.READ))
    request = build_request(
        groups.OFFSET_COMMIT_KEY,
        8,
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            {"name": n, "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}
            for n in ("readable", "secret")
        ],
    )
    response = asyncio.run(groups.handle_offset_commit(context(view, 8, 8), request))
    codes = {t.name: int(t.partitions[0].error_code) for t in response.topics}
    assert codes == {"readable": 0, "secret": 29}
    ((kind, committed),) = view.calls
    assert kind == "commit_offsets" and {tp.topic for tp in committed.offsets} == {"readable"}


def test_idempotent_init_producer_id_needs_idempotent_write_or_write_on_some_topic():
    def init(view):
        request = build_request(
            transactions.INIT_PRODUCER_ID_KEY,
            4,
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        return int(asyncio.run(transactions.handle_init_producer_id(context(view, 22, 4), request)).error_code)

    view = view_with(allow(TOPIC, "t", Op.READ))
    assert init(view) == 31 and view.calls == []  # CLUSTER_AUTHORIZATION_FAILED
    assert init(view_with(allow(TOPIC, "t", Op.WRITE))) == 0
    assert init(view_with(allow(CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))) == 0


def test_acl_requests_need_an_authorizer_and_cluster_alter():
    request = build_request(
        acls.CREATE_ACLS_KEY,
        3,
        creations=[
            {
                "resource_type": 2,
                "resource_name": "t",
                "resource_pattern_type": 3,
                "principal": "User:bob",
                "host": "*",
                "operation": 3,
                "permission_type": 3,
            }
        ],
    )

    def create(view):
        return [int(r.error_code) for r in asyncio.run(acls.handle_create_acls(context(view, 30, 3), request)).results]

    assert create(view_with(enabled=False)) == [54]  # SECURITY_DISABLED
    view = view_with(allow(CLUSTER, "kafka-cluster", Op.DESCRIBE))
    assert create(view) == [31] and view.calls == []
    view = view_with(allow(CLUSTER, "kafka-cluster", Op.ALTER))
    assert create(view) == [0]
    ((kind, sent),) = [call for call in view.calls if call[0] == "create_acls"]
    assert sent.creations[0].principal == "User:bob"


def test_denials_are_counted_by_resource_type():
    added = []
    recorder = SimpleNamespace(metrics=SimpleNamespace(authorization_denied="denied"), add=lambda *a: added.append(a))
    token = current_request.set((recorder, {"broker": "0", "path": "gateway", "request": "Produce"}))
    try:
        view = view_with()
        ctx = context(view, 0, 9)
        assert not authz.authorized(ctx, Op.WRITE, TOPIC, "t")
        assert not authz.authorized(ctx, Op.READ, GROUP, "g")
        assert authz.visible(ctx, Op.DESCRIBE, TOPIC, ["t"]) == []  # leaving out is not a refusal
    finally:
        current_request.reset(token)
    assert [dict(tags)["resource_type"] for _, _, tags in added] == ["TOPIC", "GROUP"]
    assert all(counter == "denied" and value == 1 for counter, value, _ in added)


@pytest.mark.parametrize("rtype", [TOPIC, GROUP, CLUSTER, TXN])
def test_check_raises_kafkas_error_for_the_resource_type(rtype):
    view = view_with()
    with pytest.raises(authz.DENIED[rtype]) as refused:
        authz.check(context(view, 0, 9), Op.ALTER, rtype, "kafka-cluster")
    assert refused.value.code == {TOPIC: 29, GROUP: 30, CLUSTER: 31, TXN: 53}[rtype]


# -- the other handlers' refusals: answered with Kafka's code, nothing reaches an actor ----------


def _admin_requests():
    from actors.gateway.handlers import admin, offsets

    topic_partition = [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1, "offset": 0}]}]
    return [
        (
            admin.handle_create_topics,
            build_request(
                admin.CREATE_TOPICS_KEY,
                7,
                topics=[{"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
                timeout=datetime.timedelta(seconds=5),
                validate_only=False,
            ),
            lambda r: [int(t.error_code) for t in r.topics],
            [29],
        ),
        (
            admin.handle_delete_topics,
            build_request(admin.DELETE_TOPICS_KEY, 5, topic_names=["t"], timeout=datetime.timedelta(seconds=5)),
            lambda r: [int(t.error_code) for t in r.responses],
            [29],
        ),
        (
            admin.handle_create_partitions,
            build_request(
                admin.CREATE_PARTITIONS_KEY,
                3,
                topics=[{"name": "t", "count": 3, "assignments": None}],
                timeout=datetime.timedelta(seconds=5),
                validate_only=False,
            ),
            lambda r: [int(t.error_code) for t in r.results],
            [29],
        ),
        (
            admin.handle_describe_configs,
            build_request(
                admin.DESCRIBE_CONFIGS_KEY,
                4,
                resources=[
                    {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
                    {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
                ],
                include_synonyms=False,
                include_documentation=False,
            ),
            lambda r: [int(x.error_code) for x in r.results],
            [29, 31],
        ),
        (
            admin.handle_incremental_alter_configs,
            build_request(
                admin.INCREMENTAL_ALTER_CONFIGS_KEY,
                1,
                resources=[
                    {
                        "resource_type": 2,
                        "resource_name": "t",
                        "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}],
                    }
                ],
                validate_only=False,
            ),
            lambda r: [int(x.error_code) for x in r.responses],
            [29],
        ),
        (
            admin.handle_delete_records,
            build_request(
                admin.DELETE_RECORDS_KEY,
                2,
                topics=[{"name": "t", "partitions": [{"partition_index": 0, "offset": 5}]}],
                timeout=datetime.timedelta(seconds=5),
            ),
            lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
            [29],
        ),
        (
            offsets.handle_list_offsets,
            build_request(offsets.LIST_OFFSETS_KEY, 7, replica_id=-1, isolation_level=0, topics=topic_partition),
            lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
            [29],
        ),
        (
            offsets.handle_offset_for_leader_epoch,
            build_request(
                offsets.OFFSET_FOR_LEADER_EPOCH_KEY,
                4,
                replica_id=-1,
                topics=[{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}]}],
            ),
            lambda r: [int(p.error_code) for t in r.topics for p in t.partitions],
            [29],
        ),
        (
            transactions.handle_end_txn,
            build_request(
                transactions.END_TXN_KEY, 3, transactional_id="tx", producer_id=1, producer_epoch=0, committed=True
            ),
            lambda r: [int(r.error_code)],
            [53],
        ),
        (
            transactions.handle_add_offsets_to_txn,
            build_request(
                transactions.ADD_OFFSETS_TO_TXN_KEY,
                3,
                transactional_id="tx",
                producer_id=1,
                producer_epoch=0,
                group_id="g",
            ),
            lambda r: [int(r.error_code)],
            [53],
        ),
        (
            groups.handle_delete_groups,
            build_request(groups.DELETE_GROUPS_KEY, 2, groups_names=["g"]),
            lambda r: [int(x.error_code) for x in r.results],
            [30],
        ),
        (
            groups.handle_offset_fetch,
            build_request(groups.OFFSET_FETCH_KEY, 7, group_id="g", topics=None, require_stable=False),
            lambda r: [int(r.error_code)],
            [30],
        ),
        (
            groups.handle_find_coordinator,
            build_request(groups.FIND_COORDINATOR_KEY, 3, key="g", key_type=0),
            lambda r: [int(r.error_code)],
            [30],
        ),
    ]


@pytest.mark.parametrize("handler, request_, codes_of_response, expected", _admin_requests())
def test_refused_requests_reach_no_actor(handler, request_, codes_of_response, expected):
    view = view_with(allow(TOPIC, "other", Op.ALL))  # alice has ACLs, none for these resources
    view.invalidate = lambda name: None
    api_key = type(request_).__api_key__
    response = asyncio.run(handler(context(view, api_key, type(request_).__version__), request_))
    assert codes_of_response(response) == expected
    assert view.calls == []


def test_list_groups_shows_only_describable_groups_unless_cluster_describe():
    listing = [("g1", "Stable", "consumer", "classic"), ("g2", "Empty", "consumer", "classic")]
    request = build_request(groups.LIST_GROUPS_KEY, 4, states_filter=[])

    def listed(view):
        view.group_coordinator = _Coordinator(view.calls, listing)
        response = asyncio.run(groups.handle_list_groups(context(view, 16, 4), request))
        return [g.group_id for g in response.groups]

    assert listed(view_with(allow(GROUP, "g2", Op.READ))) == ["g2"]
    assert listed(view_with(allow(CLUSTER, "kafka-cluster", Op.DESCRIBE))) == ["g1", "g2"]
    assert listed(view_with()) == []


def test_describe_groups_refuses_per_group():
    request = build_request(
        groups.DESCRIBE_GROUPS_KEY, 5, groups=["mine", "theirs"], include_authorized_operations=False
    )
    view = view_with(allow(GROUP, "mine", Op.DESCRIBE))
    view.group_coordinator = _Coordinator(view.calls, [])
    response = asyncio.run(groups.handle_describe_groups(context(view, 15, 5), request))
    assert {g.group_id: int(g.error_code) for g in response.groups} == {"theirs": 30}
    ((kind, asked),) = view.calls
    assert kind == "describe_groups" and asked.groups == ("mine",)
