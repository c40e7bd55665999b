"""Broker (cluster-wide) configuration: Kafka's broker keys and defaults.

Kafka's ``log.*`` broker keys are the defaults of the topic-level keys a topic may
override; :func:`topic_defaults` maps one onto the other as Kafka's ``LogConfig`` does.
A few keys are rayqueue's own and say so in their name (``rayqueue.*``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actors.authorizer import authorizer_enabled
from actors.consumer_group_config import CONSUMER_GROUP_KEYS, check_consumer_group_config
from actors.iceberg_keys import BROKER_KEYS as ICEBERG_KEYS
from actors.iceberg_keys import ICEBERG_BROKER_KEYS as ICEBERG_BROKER_KEYS  # what the leaders are handed
from actors.iceberg_keys import check_iceberg_config
from actors.listeners import broker_endpoints, parse_listeners
from actors.registry_keys import REGISTRY_KEYS
from storage.config import LOG_CONFIG, LONG_MAX, Config, ConfigDef, ConfigKey
from storage.errors import InvalidConfigError

# broker key -> topic key, as Kafka's LogConfig.TopicConfigSynonyms
TOPIC_SYNONYMS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
    "log.preallocate": "preallocate",
}


def _synonym_key(broker_key: str) -> ConfigKey:
    topic_key = LOG_CONFIG.keys[TOPIC_SYNONYMS[broker_key]]
    return ConfigKey(
        broker_key,
        topic_key.type,
        topic_key.default,
        f"Default of the topic config {topic_key.name}.",
        topic_key.min,
        topic_key.max,
        topic_key.choices,
    )


# Kafka's per-listener keys: ``listener.name.<listener>.<key>`` sets <key> for that listener
# only (its TLS keys, its SASL mechanisms, ...), the listener's name written in lower case as
# Kafka writes it. These keys may be set per listener (Kafka allows the ssl.*, sasl.* and
# connection-authentication ones):
LISTENER_PREFIX = "listener.name."
_LISTENER_KEY_NAMES = (
    "sasl.enabled.mechanisms",
    "sasl.server.max.receive.size",
    "connections.max.reauth.ms",
    "rayqueue.sasl.plain.users.file",
    "rayqueue.authentication.timeout.ms",
    "sasl.jaas.config",
)
# The SASL mechanisms a listener's JAAS configuration may be given for, as Kafka writes the
# key: ``listener.name.<listener>.<mechanism>.sasl.jaas.config``.
_JAAS_MECHANISMS = ("plain", "scram-sha-256", "scram-sha-512")
JAAS_KEY = "sasl.jaas.config"


class _BrokerConfigDef(ConfigDef):
    """The broker's keys, plus Kafka's per-listener overrides of some of them
    (``listener.name.<listener>.<key>``, converted and checked as <key> is)."""

    def listener_keys(self) -> frozenset[str]:
        """The keys a listener may override."""
        return frozenset(k for k in self.keys if k.startswith("ssl.") or k in _LISTENER_KEY_NAMES)

    def split_listener_key(self, key: str) -> tuple[str, str]:
        """``listener.name.<listener>.<key>`` -> (listener in lower case, canonical key);
        InvalidConfigError for a key a listener cannot override."""
        listener, _, base = key[len(LISTENER_PREFIX) :].partition(".")
        if not listener or not base:
            raise InvalidConfigError(f"{key!r}: a per-listener key is listener.name.<listener>.<key>")
        mechanism, _, rest = base.partition(".")
        if mechanism.lower() in _JAAS_MECHANISMS and rest == JAAS_KEY:
            return listener.lower(), f"{mechanism.lower()}.{JAAS_KEY}"
        base = super().canonical(base)
        if base not in self.listener_keys():
            raise InvalidConfigError(f"{key!r}: {base} cannot be set per listener (only ssl.*, sasl.* and auth keys)")
        return listener.lower(), base

    def canonical(self, key: str) -> str:
        if isinstance(key, str) and key.startswith(LISTENER_PREFIX):
            listener, base = self.split_listener_key(key)
            return f"{LISTENER_PREFIX}{listener}.{base}"
        return super().canonical(key)

    def parse(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
        given = {**(values or {}), **kwargs}
        per_listener = {k: given.pop(k) for k in list(given) if isinstance(k, str) and k.startswith(LISTENER_PREFIX)}
        config = super().parse(given)
        if not per_listener:
            return config
        out = dict(config.items())
        for key, value in per_listener.items():
            listener, base = self.split_listener_key(key)
            try:
                key_def = self.keys[JAAS_KEY if base.endswith(JAAS_KEY) else base]
                out[f"{LISTENER_PREFIX}{listener}.{base}"] = key_def.convert(value)
            except InvalidConfigError as exc:
                raise InvalidConfigError(f"{key}: {exc.args[0] if exc.args else exc}") from None
        return Config(out, self)


def listener_config(config: Mapping[str, Any], listener: str) -> dict[str, Any]:
    """The configuration listener ``listener`` runs with: the broker's keys, each replaced by
    its ``listener.name.<listener>.<key>`` override where one is set."""
    prefix = f"{LISTENER_PREFIX}{listener.lower()}."
    out = {k: v for k, v in config.items() if not k.startswith(LISTENER_PREFIX)}
    out.update((k[len(prefix) :], v) for k, v in config.items() if k.startswith(prefix))
    return out


BROKER_CONFIG = _BrokerConfigDef(
    "broker",
    [
        ConfigKey(
            "log.dirs", "string", "/tmp/rayqueue-logs", "Root data directory; broker N uses <log.dirs>/broker-N."
        ),
        ConfigKey("rayqueue.num.brokers", "int", 3, "Logical brokers to run, spread over the Ray nodes.", min=1),
        ConfigKey("rayqueue.namespace", "string", "rayqueue", "Ray namespace holding this cluster's named actors."),
        ConfigKey(
            "rayqueue.broker.placement",
            "string",
            "broker",
            "How a broker's replicas are placed onto host actors: broker (one host actor per broker, holding all"
            " of its replicas), hosts (rayqueue.broker.num.hosts host actors per broker, partitions spread by a"
            " stable hash of topic and partition, as Kafka spreads them over num.replica.fetchers) or replica"
            " (one actor per replica).",
            choices=("broker", "hosts", "replica"),
        ),
        ConfigKey(
            "rayqueue.broker.num.hosts",
            "int",
            2,
            "Host actors per broker when rayqueue.broker.placement is hosts (one Python process uses one core).",
            min=1,
            max=256,
        ),
        ConfigKey(
            "rayqueue.metrics.enabled",
            "boolean",
            True,
            "Record metrics through ray.util.metrics (Prometheus via Ray's metrics agent); false records nothing.",
        ),
        ConfigKey(
            "rayqueue.console.allowed.hosts",
            "list",
            (),
            "Host names the web console of `rayqueue start --console` answers besides its bound address, localhost,"
            " 127.0.0.1 and [::1] (*.example.com: a domain; *: any).",
        ),
        ConfigKey(
            "rayqueue.console.trusted.proxies",
            "list",
            (),
            "Addresses or networks of reverse proxies whose X-Forwarded-For and X-Forwarded-Proto headers the web"
            " console believes (empty: none; each client is its TCP peer's address).",
        ),
        ConfigKey(
            "rayqueue.console.session.lifetime.ms",
            "long",
            8 * 60 * 60 * 1000,
            "How long a web console login lasts (when the cluster has authentication); logging out ends it sooner.",
            min=1000,
        ),
        ConfigKey("num.partitions", "int", 1, "Partitions of an auto-created topic.", min=1),
        ConfigKey("default.replication.factor", "int", 1, "Replication factor of an auto-created topic.", min=1),
        ConfigKey("auto.create.topics.enable", "boolean", True, "Create a topic on first produce/metadata request."),
        ConfigKey("delete.topic.enable", "boolean", True, "Allow topic deletion."),
        # Authorization (actors/authorizer.py): Kafka's keys. Empty authorizer.class.name: no
        # authorizer, everything allowed, as Kafka.
        ConfigKey(
            "authorizer.class.name",
            "string",
            "",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer turns ACL checks on at the gateways; empty: off.",
        ),
        ConfigKey("super.users", "string", "", "Principals allowed everything, e.g. User:admin;User:ops."),
        ConfigKey(
            "allow.everyone.if.no.acl.found",
            "boolean",
            False,
            "With an authorizer: allow an operation on a resource that has no ACL at all.",
        ),
        ConfigKey(
            "log.retention.hours", "int", 168, "Retention in hours, used when log.retention.ms is unset.", min=-1
        ),
        ConfigKey("log.retention.check.interval.ms", "long", 300000, "How often replicas apply retention.", min=1),
        ConfigKey("replica.lag.time.max.ms", "long", 30000, "A follower this far behind leaves the ISR.", min=1),
        ConfigKey("replica.fetch.wait.max.ms", "int", 500, "Follower fetch long-poll time.", min=0),
        ConfigKey("replica.fetch.max.bytes", "int", 1048576, "Follower fetch size per partition.", min=0),
        ConfigKey(
            "replica.fetch.response.max.bytes",
            "int",
            10485760,
            "Follower fetch size per source broker and round (one batch more at most).",
            min=0,
        ),
        ConfigKey(
            "replica.high.watermark.checkpoint.interval.ms",
            "long",
            5000,
            "How often a replica writes its high watermark to disk.",
            min=1,
        ),
        ConfigKey("auto.leader.rebalance.enable", "boolean", True, "Move leadership back to preferred replicas."),
        ConfigKey("leader.imbalance.check.interval.seconds", "long", 300, "How often to rebalance leaders.", min=1),
        # Kafka's default is 50 partitions; a local cluster gets 3 (each partition's group
        # state is loaded by the coordinator at start). Raise it for many busy groups.
        ConfigKey("offsets.topic.num.partitions", "int", 3, "Partitions of __consumer_offsets.", min=1),
        # Kafka's default, capped at the broker count when the topic is created.
        ConfigKey("offsets.topic.replication.factor", "int", 3, "Replication factor of __consumer_offsets.", min=1),
        ConfigKey("offsets.retention.minutes", "int", 10080, "Offsets of an empty group live this long.", min=1),
        ConfigKey("offsets.retention.check.interval.ms", "long", 600000, "How often stale offsets expire.", min=1),
        # Same reasoning as offsets.topic.num.partitions: Kafka's default is 50.
        ConfigKey("transaction.state.log.num.partitions", "int", 3, "Partitions of __transaction_state.", min=1),
        # Kafka's defaults, capped at the broker count (and the min ISR at the RF) at creation.
        ConfigKey(
            "transaction.state.log.replication.factor", "int", 3, "Replication factor of __transaction_state.", min=1
        ),
        ConfigKey("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state.", min=1),
        ConfigKey(
            "transaction.max.timeout.ms", "int", 900000, "Largest transaction.timeout.ms a producer may ask for.", min=1
        ),
        ConfigKey(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "int",
            10000,
            "How often the transaction coordinator aborts timed-out transactions.",
            min=1,
        ),
        ConfigKey(
            "transaction.partition.verification.enable",
            "boolean",
            True,
            "KIP-890: a partition leader has the transaction coordinator confirm a transaction before its "
            "first batch opens it there (a batch of a transaction the coordinator does not know is refused).",
        ),
        ConfigKey(
            "transactional.id.expiration.ms",
            "int",
            604800000,
            "A transactional id idle this long (no transaction open) is forgotten.",
            min=1,
        ),
        # Kafka's default is 3000; rayqueue's groups are small and local, so no delay by default.
        ConfigKey("group.initial.rebalance.delay.ms", "int", 0, "Wait for more members when a group fills.", min=0),
        ConfigKey(
            "rayqueue.group.lag.refresh.interval.ms",
            "long",
            5000,
            "How often the group coordinator asks partition leaders for high watermarks (the lag gauge).",
            min=1,
        ),
        ConfigKey(
            "rayqueue.group.metadata.check.interval.ms", "long", 1000, "Partition-count/regex check period.", min=1
        ),
        # KIP-848's consumer group protocol (actors/consumer_group_config.py).
        *CONSUMER_GROUP_KEYS,
        # The Kafka wire protocol gateway (actors/gateway): one listener per broker; with
        # several brokers on one host each takes the next port. Empty: no gateways.
        ConfigKey(
            "listeners",
            "list",
            (),
            "Where each broker's Kafka protocol gateway listens, e.g. PLAINTEXT://127.0.0.1:9092 (port 0: any free port).",
        ),
        ConfigKey(
            "advertised.listeners",
            "list",
            (),
            "The addresses Metadata gives Kafka clients (default: the listeners, the node's IP for a wildcard host).",
        ),
        ConfigKey(
            "listener.security.protocol.map",
            "list",
            ("PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"),
            "Each listener name's security protocol (NAME:PROTOCOL; PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).",
        ),
        # Replication between brokers (actors/broker/inter_broker.py): followers fetch over
        # Kafka's protocol through the inter-broker listener, authenticated as its clients are.
        ConfigKey(
            "inter.broker.listener.name",
            "string",
            "",
            "The listener brokers replicate over (its TLS and SASL settings); empty: the listener named as"
            " security.inter.broker.protocol, else the first listener.",
        ),
        ConfigKey(
            "security.inter.broker.protocol",
            "string",
            "PLAINTEXT",
            "The inter-broker listener's name when inter.broker.listener.name is empty.",
            choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        ),
        ConfigKey(
            "sasl.mechanism.inter.broker.protocol",
            "string",
            "GSSAPI",
            "The SASL mechanism brokers log in to a SASL inter-broker listener with (PLAIN, SCRAM-SHA-256 or"
            " SCRAM-SHA-512 here; Kafka's default GSSAPI is not served).",
        ),
        ConfigKey(
            "sasl.jaas.config",
            "password",
            "",
            "The broker's own SASL login for the inter-broker listener, as Kafka writes it"
            ' (org.apache.kafka.common.security.plain.PlainLoginModule required username="..." password="...";),'
            " usually per listener and mechanism: listener.name.<listener>.<mechanism>.sasl.jaas.config.",
        ),
        ConfigKey(
            "rayqueue.replica.fetch.transport",
            "string",
            "kafka",
            "How followers fetch from their leaders: kafka (Kafka's Fetch over the inter-broker listener,"
            " a TCP connection per leader host) or ray (Ray calls between the host actors).",
            choices=("kafka", "ray"),
        ),
        # TLS of the SSL and SASL_SSL listeners (actors/gateway/ssl_factory.py): PEM material
        # only (KIP-651), as Python's ssl reads it. Kafka's default store type is JKS, a Java
        # keystore Python cannot read, so PEM is the default and the only choice here.
        ConfigKey("ssl.keystore.type", "string", "PEM", "The broker key store's format.", choices=("PEM",)),
        ConfigKey(
            "ssl.keystore.location", "string", "", "A PEM file with the broker's private key and certificate chain."
        ),
        ConfigKey("ssl.keystore.certificate.chain", "password", "", "The broker's certificate chain as PEM text."),
        ConfigKey("ssl.keystore.key", "password", "", "The broker's private key as PEM text."),
        ConfigKey("ssl.key.password", "password", "", "The password of an encrypted private key."),
        ConfigKey("ssl.truststore.type", "string", "PEM", "The trust store's format.", choices=("PEM",)),
        ConfigKey(
            "ssl.truststore.location",
            "string",
            "",
            "A PEM file of the CA certificates client certificates are checked against.",
        ),
        ConfigKey("ssl.truststore.certificates", "password", "", "Trusted CA certificates as PEM text."),
        ConfigKey(
            "ssl.client.auth",
            "string",
            "none",
            "Whether TLS clients must (required), may (requested) or need not (none) present a certificate.",
            choices=("none", "requested", "required"),
        ),
        ConfigKey(
            "ssl.enabled.protocols",
            "list",
            ("TLSv1.2", "TLSv1.3"),
            "TLS versions the listeners accept.",
            choices=("TLSv1.2", "TLSv1.3"),
        ),
        ConfigKey("ssl.cipher.suites", "list", (), "TLS 1.2 cipher suites (OpenSSL names; empty: OpenSSL's defaults)."),
        ConfigKey(
            "ssl.principal.mapping.rules",
            "string",
            "DEFAULT",
            "Rules mapping a client certificate's subject to a user name (RULE:pattern/replacement/[LU], DEFAULT).",
        ),
        # SASL of the SASL_PLAINTEXT and SASL_SSL listeners (actors/gateway/sasl.py). Kafka's
        # default is GSSAPI (Kerberos), which rayqueue does not serve: the SCRAM ones are the default.
        ConfigKey(
            "sasl.enabled.mechanisms",
            "list",
            ("SCRAM-SHA-256", "SCRAM-SHA-512"),
            "SASL mechanisms the SASL listeners offer.",
            choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        ),
        ConfigKey(
            "rayqueue.sasl.plain.users.file",
            "string",
            "",
            'A TOML file of PLAIN users (user = "password" lines), read by the gateways; needed when PLAIN is enabled.',
        ),
        ConfigKey(
            "sasl.server.max.receive.size",
            "int",
            524288,
            "The largest request a SASL listener reads before the client is authenticated.",
            min=1,
        ),
        ConfigKey(
            "connections.max.reauth.ms",
            "long",
            0,
            "A SASL session's lifetime: the client re-authenticates within it or is disconnected (0: forever).",
            min=0,
        ),
        ConfigKey(
            "rayqueue.authentication.timeout.ms",
            "long",
            10000,
            "How long a connection may take to finish its TLS handshake and its SASL authentication.",
            min=1,
        ),
        ConfigKey("socket.request.max.bytes", "int", 104857600, "The largest Kafka request a gateway accepts.", min=1),
        ConfigKey("connections.max.idle.ms", "long", 600000, "A gateway closes connections idle this long.", min=1),
        # Kafka's connection limits default to 2^31-1 (none); these fit a 24 GB node with a few
        # gateways: an idle connection costs a gateway a few KB, a busy one its receive buffer
        # (bounded with the others by queued.max.request.bytes), and each is a file descriptor.
        ConfigKey(
            "max.connections", "int", 10000, "Connections one gateway accepts at a time; it closes the next.", min=1
        ),
        ConfigKey(
            "max.connections.per.ip",
            "int",
            1000,
            "Connections one gateway accepts from one client address; it closes the next.",
            min=1,
        ),
        ConfigKey(
            "max.connections.per.ip.overrides",
            "list",
            (),
            "Per-address exceptions to max.connections.per.ip, e.g. 127.0.0.1:5000,client-host:200.",
        ),
        # Kafka's default is -1 (unbounded). 512 MiB per gateway: five requests of the largest
        # size (socket.request.max.bytes) at once, and a node running three or four gateways
        # keeps this memory to about 2 GB of its 24. Must be -1 or at least
        # socket.request.max.bytes (as Kafka requires), or the largest request could never be read.
        ConfigKey(
            "queued.max.request.bytes",
            "long",
            536870912,
            "Bytes of partial and queued requests a gateway holds before it stops reading (-1: no bound).",
            min=-1,
        ),
        ConfigKey(
            "fetch.max.bytes", "int", 57671680, "The most bytes a gateway returns for one Fetch request.", min=1024
        ),
        # Kafka's discipline: a channel is muted while its request is processed, so a client
        # that pipelines is paced and its requests are answered in order.
        ConfigKey(
            "rayqueue.gateway.max.inflight.requests",
            "int",
            1,
            "Requests of one connection a gateway works on at once; it stops reading that connection beyond.",
            min=1,
        ),
        # Kafka's broker waits as long as a Fetch's max_wait_ms asks; its clients give up on a
        # request after request.timeout.ms (30 s by default), so longer waits serve no client.
        ConfigKey(
            "rayqueue.fetch.wait.max.ms",
            "int",
            30000,
            "The longest a gateway lets a Fetch wait for min_bytes (a longer max_wait_ms is cut to it).",
            min=0,
            max=60000,
        ),
        *(_synonym_key(key) for key in TOPIC_SYNONYMS),
        # The schema registry (actors/schema_registry): Confluent's keys under schema.registry.
        *REGISTRY_KEYS,
        # Iceberg topics' catalog and warehouse (actors/iceberg).
        *ICEBERG_KEYS,
    ],
)

# Kafka leaves log.retention.ms unset and falls back to log.retention.hours; rayqueue marks
# "unset" with this sentinel default so that an explicit value always wins.
_UNSET = LONG_MAX - 1
BROKER_CONFIG.keys["log.retention.ms"] = ConfigKey(
    "log.retention.ms", "long", _UNSET, "Retention in ms (-1: forever); overrides log.retention.hours.", min=-1
)


def broker_config(values: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
    """A broker configuration with Kafka's defaults and the given overrides."""
    config = BROKER_CONFIG.parse(values, **kwargs)
    queued, largest = config["queued.max.request.bytes"], config["socket.request.max.bytes"]
    if queued == 0 or 0 < queued < largest:
        raise InvalidConfigError(
            f"queued.max.request.bytes={queued} must be -1 or at least socket.request.max.bytes={largest}"
        )
    connection_overrides(config["max.connections.per.ip.overrides"])
    if config["listeners"]:
        # Every listener name has a security protocol, every advertised one is a listener.
        broker_endpoints(
            config["listeners"], config["advertised.listeners"], [], config["listener.security.protocol.map"]
        )
        named = {listener.name.lower() for listener in parse_listeners(config["listeners"])}
        for key in config:
            if key.startswith(LISTENER_PREFIX) and key[len(LISTENER_PREFIX) :].partition(".")[0] not in named:
                raise InvalidConfigError(f"{key}: there is no listener of that name in listeners")
    authorizer_enabled(config["authorizer.class.name"])  # an unknown authorizer fails the launch
    check_consumer_group_config(config)
    check_iceberg_config(config)
    return config


def connection_overrides(entries: tuple[str, ...] | list[str]) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` (``host:count`` entries) as {host: count}."""
    overrides = {}
    for entry in entries:
        host, _, count = entry.strip().rpartition(":")
        try:
            value = int(count)
        except ValueError:
            value = -1
        if not host or value < 0:
            raise InvalidConfigError(f"max.connections.per.ip.overrides: {entry!r} is not host:count")
        overrides[host.strip("[]")] = value
    return overrides


def topic_defaults(broker: Config) -> dict[str, Any]:
    """The topic-level defaults this broker configuration implies."""
    defaults = {topic_key: broker[broker_key] for broker_key, topic_key in TOPIC_SYNONYMS.items()}
    if broker["log.retention.ms"] == _UNSET:
        hours = broker["log.retention.hours"]
        defaults["retention.ms"] = -1 if hours < 0 else hours * 3600 * 1000
    return defaults


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Turn TOML's nested tables back into Kafka's dotted keys (``log.dirs = ...``)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file into a dict of dotted Kafka keys.

    Top-level keys are broker keys; a ``[topics.<name>]`` table (optional) lists topics to
    create at launch with ``partitions``, ``replication.factor`` and topic config keys.
    """
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    topics = data.pop("topics", {})
    result = flatten(data)
    if topics:
        result["topics"] = {name: flatten(spec) for name, spec in topics.items()}
    return result
