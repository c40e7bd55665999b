"""Admin: topics, configs, records, consumer groups, ACLs and cluster description (Kafka's Admin client)."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import ray

from actors.acl import ANY_ACL, AclBinding, AclBindingFilter
from actors.authorizer import authorizer_enabled
from actors.protocol import (
    AlterableConfig,
    AlterConfigOp,
    AlterPartitionReassignmentsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeTransactionsRequest,
    ElectLeadersRequest,
    GroupLagRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    principal_field,
)
from actors.protocol_security import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    ScramMechanism,
)
from actors.types import (
    GroupDescription,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionLag,
    TopicMetadata,
    TopicPartition,
    TransactionDescription,
)
from rayqueue.connection import ClusterHandle, connect
from rayqueue.errors import (
    CoordinatorNotAvailableError,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    SecurityDisabledError,
    TopicAuthorizationFailedError,
    as_kafka_error,
    error_for_code,
)
from rayqueue.metadata import MetadataCache, call_controller
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

logger = logging.getLogger(__name__)

# Kafka's default.api.timeout.ms: how long a call to partition leaders keeps retrying.
_API_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create (Kafka's NewTopic)."""

    name: str
    num_partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, Any] | None = None
    replica_assignment: list[list[int]] | None = None


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One consumer group in list_groups()."""

    group_id: str
    state: str
    protocol_type: str
    group_type: str = "classic"  # Kafka's GroupType: classic, or consumer (KIP-848's protocol)


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id in list_transactions() (Kafka's TransactionListing)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class PartitionLogInfo:
    """A partition's log as its leader sees it: what Kafka tools piece together from
    ListOffsets (log start, high watermark, LSO) and DescribeLogDirs (size)."""

    leader: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int
    size_bytes: int
    segments: int
    # An Iceberg topic's translation on the leader (rayqueue.iceberg.translation): None when
    # the leader does not translate the partition.
    iceberg: dict[str, Any] | None = None


def _config_dict(configs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Topic configs as the controller takes them: a plain dict, checked key by key there."""
    if configs is None:
        return {}
    if not isinstance(configs, Mapping):
        raise InvalidConfigError(f"topic configs must be a mapping of keys to values, got {type(configs).__name__}")
    return dict(configs)


class Admin:
    """Administrative operations on a rayqueue cluster.

    ``principal`` (``User:alice``) is who the calls act as: the actors check each call
    against the cluster's ACLs with Kafka's rules and errors (TopicAuthorizationFailedError,
    GroupAuthorizationFailedError, ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError). None acts as a super user: whoever may call
    the actors holds the Ray cluster's token.
    """

    def __init__(self, cluster: ClusterHandle | None = None, principal: str | None = None) -> None:
        self.principal = principal_field(principal)
        self._cluster = cluster if cluster is not None else connect()
        self._controller = self._cluster.controller
        self._metadata = MetadataCache(self._controller, principal=self.principal)

    def create_topic(
        self,
        name: str,
        num_partitions: int | None = None,
        replication_factor: int | None = None,
        configs: Mapping[str, Any] | None = None,
        replica_assignment: list[list[int]] | None = None,
    ) -> TopicMetadata:
        """Create one topic. ``num_partitions`` / ``replication_factor`` of None or -1 take the
        broker's num.partitions / default.replication.factor (KIP-464); 0 and other negatives
        are InvalidPartitionsError / InvalidReplicationFactorError, as is a replication factor
        above the number of live brokers. A name that differs from an existing topic's only
        in '.' versus '_' is an InvalidTopicError (their metric names would collide).

        A replication factor below the topic's effective ``min.insync.replicas`` is logged as
        a warning (see :meth:`min_isr_warning`): the topic is created, but every acks=all
        produce to it will fail with NOT_ENOUGH_REPLICAS."""
        request = CreateTopicsRequest(
            name,
            -1 if num_partitions is None else num_partitions,
            -1 if replication_factor is None else replication_factor,
            None if replica_assignment is None else tuple(tuple(r) for r in replica_assignment),
            _config_dict(configs),
            principal=self.principal,
        )
        meta = call_controller(self._controller.create_topic, request)
        try:
            warning = self.min_isr_warning(meta)
        except TopicAuthorizationFailedError:
            # A principal may CREATE a topic without DESCRIBE_CONFIGS on it (Kafka then
            # leaves the configs out of the answer): no warning it could not be given.
            warning = None
        if warning is not None:
            logger.warning("%s", warning)
        return meta

    def min_isr_warning(self, meta: TopicMetadata) -> str | None:
        """Why acks=all cannot succeed on a topic whose replication factor is below its
        effective ``min.insync.replicas`` (its override, else the broker's); None when it can."""
        if not meta.partitions:
            return None
        rf = len(meta.partitions[0].replicas)
        min_isr = self.describe_configs(meta.name)["min.insync.replicas"][0]
        if rf >= min_isr:
            return None
        return (
            f"topic {meta.name!r} has replication factor {rf}, below its min.insync.replicas={min_isr}: "
            f"every acks=all produce to it will fail with NOT_ENOUGH_REPLICAS (acks=0 and 1 are not affected); "
            f"raise the replication factor or lower min.insync.replicas"
        )

    def create_topics(self, topics: Iterable[NewTopic]) -> list[TopicMetadata]:
        """Create several topics, in order."""
        return [
            self.create_topic(t.name, t.num_partitions, t.replication_factor, t.configs, t.replica_assignment)
            for t in topics
        ]

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data."""
        call_controller(self._controller.delete_topic, DeleteTopicsRequest(name, self.principal))

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete several topics."""
        for name in names:
            self.delete_topic(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names (those the principal may DESCRIBE)."""
        return call_controller(self._controller.list_topics, include_internal, self.principal)

    def describe_topics(self, names: Iterable[str] | None = None) -> dict[str, TopicMetadata]:
        """Partitions, leaders, replicas and ISR of each topic: every topic the principal may
        DESCRIBE, or the named ones (TopicAuthorizationFailedError for one it may not)."""
        wanted = tuple(names) if names is not None else None
        request = MetadataRequest(wanted, principal=self.principal)
        return call_controller(self._controller.get_metadata, request).topics

    def create_partitions(self, name: str, total: int, assignment: list[list[int]] | None = None) -> TopicMetadata:
        """Grow ``name`` to ``total`` partitions."""
        assignments = None if assignment is None else tuple(tuple(r) for r in assignment)
        request = CreatePartitionsRequest(name, total, assignments, principal=self.principal)
        return call_controller(self._controller.create_partitions, request)

    def describe_configs(self, name: str) -> dict[str, tuple[Any, str]]:
        """Each topic config: (value, source)."""
        request = DescribeConfigsRequest(name, principal=self.principal)
        return call_controller(self._controller.describe_configs, request)

    def alter_configs(
        self, name: str, set_configs: Mapping[str, Any] | None = None, delete_configs: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """Set or remove topic config overrides; returns the topic's overrides. A key both set
        and removed is set. A bad key or value is an InvalidConfigError and changes nothing."""
        if isinstance(delete_configs, str):
            delete_configs = [delete_configs]  # one key, not its characters
        elif delete_configs is not None and not isinstance(delete_configs, Iterable):
            raise InvalidConfigError(f"configs to delete must be a list of keys, got {type(delete_configs).__name__}")
        set_configs = _config_dict(set_configs)
        changes = [AlterableConfig(k, AlterConfigOp.DELETE) for k in delete_configs or () if k not in set_configs]
        changes += [AlterableConfig(k, AlterConfigOp.SET, v) for k, v in set_configs.items()]
        request = IncrementalAlterConfigsRequest(name, tuple(changes), principal=self.principal)
        return call_controller(self._controller.alter_configs, request)

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete records before each offset (-1: the high watermark); returns the new log start offsets.

        Sent to each partition's leader; a leader that moved or died meanwhile is looked up
        again (default.api.timeout.ms).
        """
        calls = {
            tp: lambda m, o=offset: m.leader_handle.delete_records.remote(
                DeleteRecordsRequest(o, m.leader_epoch, self.principal)
            )
            for tp, offset in offsets.items()
        }
        answers = self._metadata.call_leaders(calls, _API_TIMEOUT_S)
        return {tp: answer.low_watermark for tp, answer in answers.items()}

    def list_offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets by spec: -2 earliest, -1 latest, or a timestamp in ms (leaders looked up again as needed)."""
        calls = {
            tp: lambda m, ts=spec: m.leader_handle.list_offsets.remote(
                ListOffsetsRequest(ts, m.leader_epoch, principal=self.principal)
            )
            for tp, spec in specs.items()
        }
        return self._metadata.call_leaders(calls, _API_TIMEOUT_S)

    def describe_partition_logs(
        self, partitions: Iterable[TopicPartition], timeout_s: float = _API_TIMEOUT_S
    ) -> dict[TopicPartition, PartitionLogInfo]:
        """Log start, high watermark, LSO, log end, size and segment count of each partition,
        from its leader (looked up again if it moved; a partition with no leader within
        ``timeout_s`` is a LeaderNotAvailableError or KafkaTimeoutError)."""
        calls = {tp: lambda m: m.leader_handle.describe.remote(self.principal) for tp in partitions}
        answers = self._metadata.call_leaders(calls, timeout_s)
        return {
            tp: PartitionLogInfo(
                a["broker_id"],
                a["log_start_offset"],
                a["high_watermark"],
                a["last_stable_offset"],
                a["log_end_offset"],
                a["size_bytes"],
                a["segments"],
                a.get("iceberg"),
            )
            for tp, a in answers.items()
        }

    def describe_cluster(self) -> dict[str, Any]:
        """Cluster id, controller epoch, brokers and counts (DESCRIBE on the cluster)."""
        return call_controller(self._controller.describe_cluster, DescribeClusterRequest(self.principal))

    # -- SCRAM users ----------------------------------------------------------------------

    def add_scram_user(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-512", iterations: int = 4096
    ) -> None:
        """Add or replace a SCRAM user (what ``kafka-configs --alter --add-config
        'SCRAM-SHA-512=[iterations=..,password=..]' --entity-type users`` does). The password
        is salted here (RFC 5802's Hi, PBKDF2) and never leaves this process."""
        kind = ScramMechanism.of_name(mechanism)
        if kind is ScramMechanism.UNKNOWN:
            raise InvalidRequestError(f"unknown SCRAM mechanism {mechanism!r}; use SCRAM-SHA-256 or SCRAM-SHA-512")
        # Kafka's client salts with 32 random bytes' worth of a base-36 string; any random salt does.
        salt = secrets.token_bytes(32)
        digest = "sha512" if kind is ScramMechanism.SCRAM_SHA_512 else "sha256"
        salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)
        upsertion = ScramCredentialUpsertion(user, int(kind), iterations, salt, salted)
        self._scram_results(AlterUserScramCredentialsRequest(upsertions=(upsertion,), principal=self.principal))

    def remove_scram_user(self, user: str, mechanisms: Iterable[str] | None = None) -> None:
        """Remove a user's SCRAM credentials (every mechanism it has, or the given ones);
        RESOURCE_NOT_FOUND when it has none."""
        if mechanisms is None:
            described = self.describe_scram_users([user])[user]
            kinds = [ScramMechanism(m) for m, _ in described]
        else:
            kinds = [ScramMechanism.of_name(m) for m in mechanisms]
        deletions = tuple(ScramCredentialDeletion(user, int(k)) for k in kinds)
        self._scram_results(AlterUserScramCredentialsRequest(deletions=deletions, principal=self.principal))

    def describe_scram_users(self, users: Iterable[str] | None = None) -> dict[str, list[tuple[int, int]]]:
        """Each user's SCRAM (mechanism, iterations): every user, or the named ones (an
        unknown one raises RESOURCE_NOT_FOUND)."""
        wanted = None if users is None else tuple(users)
        results = call_controller(
            self._controller.describe_user_scram_credentials,
            DescribeUserScramCredentialsRequest(wanted, self.principal),
        )
        out = {}
        for result in results:
            if result.error_code:
                raise error_for_code(result.error_code, f"{result.user}: {result.error_message}")
            out[result.user] = list(result.credential_infos)
        return out

    def _scram_results(self, request: AlterUserScramCredentialsRequest) -> None:
        for result in call_controller(self._controller.alter_user_scram_credentials, request):
            if result.error_code:
                raise error_for_code(result.error_code, f"{result.user}: {result.error_message}")

    # -- consumer groups ------------------------------------------------------------------

    def list_groups(self) -> list[GroupListing]:
        """Every consumer group with its state (those the principal may DESCRIBE, unless it
        may DESCRIBE the cluster)."""
        request = ListGroupsRequest(self.principal)
        return [GroupListing(*g) for g in self._group_call(lambda c: c.list_groups.remote(request))]

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol, generation, members and their assignments (unknown groups show state Dead)."""
        ids = list(group_ids)
        request = DescribeGroupsRequest(tuple(ids), self.principal)
        return {d.group_id: d for d in self._group_call(lambda c: c.describe_groups.remote(request))}

    def list_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all, or of ``partitions``)."""
        wanted = tuple(partitions) if partitions is not None else None
        request = OffsetFetchRequest(group_id, wanted, principal=self.principal)
        return self._group_call(lambda c: c.fetch_offsets.remote(request))

    def group_lag(self, group_id: str, topics: Iterable[str] | None = None) -> dict[TopicPartition, PartitionLag]:
        """Per partition: committed offset, log end offset (high watermark) and lag = end - committed,
        as the group coordinator computes it (the same numbers as its ``rayqueue_group_lag`` gauge,
        with the high watermarks asked of the leaders now).

        Covers the partitions the group committed for or is assigned, plus every partition of
        ``topics``; a partition never committed counts its whole log as lag.
        """
        for topic in topics or ():
            self._metadata.num_partitions(topic)  # UnknownTopicOrPartitionError for a topic that is not there
        request = GroupLagRequest(group_id, tuple(topics or ()), self.principal)
        return self._group_call(lambda c: c.group_lag.remote(request))

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Set a group's committed offsets; the group must have no members (NonEmptyGroupError)."""
        request = OffsetCommitRequest(
            group_id,
            {tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om)) for tp, om in offsets.items()},
            principal=self.principal,
        )
        self._group_call(lambda c: c.alter_offsets.remote(request))

    def reset_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition | str],
        *,
        to: str | None = None,
        timestamp: int | None = None,
        offset: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Reset an empty group's offsets (``kafka-consumer-groups --reset-offsets``).

        ``partitions`` are TopicPartitions or whole topic names. Exactly one target:
        ``to="earliest"`` / ``to="latest"``, ``timestamp=`` (first offset at or after it;
        the log end when there is none) or ``offset=`` (clamped to [log start, log end]).
        Returns the offsets written; NonEmptyGroupError if the group has members.
        """
        if sum(x is not None for x in (to, timestamp, offset)) != 1:
            raise InvalidConfigError("give exactly one of to=, timestamp=, offset=")
        if to is not None and to not in ("earliest", "latest"):
            raise InvalidConfigError(f"to={to!r}: use 'earliest' or 'latest'")
        tps: list[TopicPartition] = []
        for item in partitions:
            if isinstance(item, str):
                tps.extend(TopicPartition(item, p) for p in range(self._metadata.num_partitions(item)))
            else:
                tps.append(item if isinstance(item, TopicPartition) else TopicPartition(*item))
        earliest = self.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps})
        latest = self.list_offsets({tp: LATEST_TIMESTAMP for tp in tps})
        if to == "earliest":
            target = {tp: earliest[tp].offset for tp in tps}
        elif to == "latest":
            target = {tp: latest[tp].offset for tp in tps}
        elif timestamp is not None:
            if timestamp < 0:
                raise InvalidRequestError(f"timestamp must be >= 0, got {timestamp}")
            found = self.list_offsets({tp: timestamp for tp in tps})
            target = {tp: found[tp].offset if found[tp].offset >= 0 else latest[tp].offset for tp in tps}
        else:
            target = {tp: min(max(offset, earliest[tp].offset), latest[tp].offset) for tp in tps}
        self.alter_group_offsets(group_id, target)
        return target

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete empty groups and their offsets; raises the first error (GroupIdNotFoundError,
        NonEmptyGroupError) after attempting them all."""
        ids = list(group_ids)
        request = DeleteGroupsRequest(tuple(ids), self.principal)
        results = self._group_call(lambda c: c.delete_groups.remote(request))
        for error in results.values():
            if error is not None:
                raise error

    # -- transactions ---------------------------------------------------------------------

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """Producer id and epoch, state, timeout, start time and partitions of each
        transactional id (unknown ids show state Dead)."""
        ids = list(transactional_ids)
        request = DescribeTransactionsRequest(tuple(ids), self.principal)
        descriptions = self._coordinator_call(
            "transaction_coordinator", lambda c: c.describe_transactions.remote(request)
        )
        return {d.transactional_id: d for d in descriptions}

    def list_transactions(
        self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None
    ) -> list[TransactionListing]:
        """Every transactional id the coordinator knows, optionally only those in ``states``
        or of ``producer_ids`` (Kafka's ListTransactions filters)."""
        wanted_states = set(states) if states is not None else None
        wanted_pids = set(producer_ids) if producer_ids is not None else None
        descriptions = self._coordinator_call(
            "transaction_coordinator",
            lambda c: c.describe_transactions.remote(DescribeTransactionsRequest(principal=self.principal)),
        )
        return [
            TransactionListing(d.transactional_id, d.producer_id, d.state)
            for d in descriptions
            if (wanted_states is None or d.state in wanted_states)
            and (wanted_pids is None or d.producer_id in wanted_pids)
        ]

    def _group_call(self, make_ref: Callable[[Any], Any], timeout_s: float = 60.0) -> Any:
        """Call the group coordinator, retrying while it (re)loads or Ray restarts it."""
        return self._coordinator_call("group_coordinator", make_ref, timeout_s)

    def _coordinator_call(self, which: str, make_ref: Callable[[Any], Any], timeout_s: float = 60.0) -> Any:
        """Call a coordinator (``group_coordinator`` or ``transaction_coordinator``), retrying
        while it (re)loads or Ray restarts it."""
        coordinator = getattr(self._cluster, which, None)
        if coordinator is None:
            raise InvalidConfigError(f"this cluster has no {which.replace('_', ' ')}")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return ray.get(make_ref(coordinator))
            except Exception as exc:  # noqa: BLE001 - sorted into retriable and not below
                error = as_kafka_error(exc, CoordinatorNotAvailableError, which.replace("_", " "))
                if not (isinstance(error, KafkaError) and error.retriable) or time.monotonic() > deadline:
                    raise error from None
            time.sleep(0.1)

    # -- replication ----------------------------------------------------------------------

    # -- ACLs (Kafka's Admin.createAcls / describeAcls / deleteAcls) ------------------------

    def _require_authorizer(self) -> None:
        """SecurityDisabledError on a cluster without an authorizer, as Kafka answers the ACL
        requests there: ACLs it would store would not be enforced."""
        if not authorizer_enabled(self._cluster.config["authorizer.class.name"]):
            raise SecurityDisabledError("No Authorizer is configured (authorizer.class.name is empty)")

    def create_acls(self, acls: Iterable[AclBinding]) -> None:
        """Create ACLs in the cluster's metadata log (an existing one is left as it is);
        the first refused binding raises its error (InvalidRequestError) after the others
        are created. SecurityDisabledError on a cluster without an authorizer."""
        self._require_authorizer()
        answers = call_controller(self._controller.create_acls, CreateAclsRequest(tuple(acls), self.principal))
        for error in answers:
            if error is not None:
                raise error

    def describe_acls(self, selector: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        """The ACLs a filter matches (every ACL by default); SecurityDisabledError without an authorizer."""
        self._require_authorizer()
        return call_controller(self._controller.describe_acls, DescribeAclsRequest(selector, self.principal))

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL one of the filters matches; returns them (each once).
        SecurityDisabledError without an authorizer."""
        self._require_authorizer()
        deleted = call_controller(self._controller.delete_acls, DeleteAclsRequest(tuple(filters), self.principal))
        out: list[AclBinding] = []
        for matched in deleted:
            out.extend(b for b in matched if b not in out)
        return out

    def elect_leaders(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, str | None]:
        """Preferred leader election; per partition None when leadership moved, else the reason
        (``ElectionNotNeededError``, ``PreferredLeaderNotAvailableError``). All partitions by default."""
        wanted = None if partitions is None else tuple(partitions)
        return call_controller(self._controller.elect_leaders, ElectLeadersRequest(wanted, self.principal))

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, list[int]]) -> None:
        """Move partitions to new replica lists; the move completes in the background once the
        new replicas have caught up (see ``list_partition_reassignments``)."""
        request = AlterPartitionReassignmentsRequest({tp: tuple(r) for tp, r in reassignments.items()}, self.principal)
        call_controller(self._controller.alter_partition_reassignments, request)

    def list_partition_reassignments(self) -> dict[TopicPartition, dict[str, list[int]]]:
        """Ongoing reassignments: ``replicas``, ``adding`` and ``removing`` broker ids per partition."""
        out = call_controller(
            self._controller.list_partition_reassignments, ListPartitionReassignmentsRequest(self.principal)
        )
        return {TopicPartition(t, p): v for (t, p), v in out.items()}

    def stop_broker(self, broker_id: int) -> None:
        """Shut a broker down cleanly: its replicas close, leave the ISRs and hand over leadership."""
        call_controller(self._controller.stop_broker, broker_id, self.principal)

    def start_broker(self, broker_id: int) -> None:
        """Start a stopped broker: its replicas recover from disk and catch up with their leaders."""
        call_controller(self._controller.start_broker, broker_id, self.principal)

    def add_broker(self, node_id: str, broker_id: int | None = None) -> int:
        """Register a new broker on a Ray node (hex node id); returns its id."""
        return call_controller(self._controller.add_broker, node_id, broker_id, self.principal)

    def replica_handles(self, tp: TopicPartition) -> dict[int, Any]:
        """Actor handles of a partition's live replicas by broker id (for tools and tests)."""
        return call_controller(self._controller.replica_handles, tp, self.principal)
