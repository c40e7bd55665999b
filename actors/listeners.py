"""Kafka's ``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map``:
where each broker's gateway listens, how, and what Metadata tells clients.

A listener is ``NAME://host:port``. The name picks the listener's security protocol through
``listener.security.protocol.map`` (Kafka's default maps PLAINTEXT, SSL, SASL_PLAINTEXT and
SASL_SSL to themselves, so ``SASL_SSL://host:9093`` needs no map); a broker may have several
listeners, each with its own name and port (``INTERNAL://127.0.0.1:9092,
EXTERNAL://0.0.0.0:9093`` with ``INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL``). One setting serves
every broker: several brokers on one host each take the next port of every listener (broker
ranks on that host 0, 1, 2 -> 9092, 9093, 9094); port 0 asks the OS for any free port.

What Metadata answers a client is the address of the listener the client came in on, as
Kafka does: ``advertised.listeners`` names an address per listener name (a listener left out
advertises itself), with the node's IP for a wildcard host (``0.0.0.0``; Kafka advertises
the canonical host name instead of a wildcard).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from storage.errors import InvalidConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default listener.security.protocol.map (each protocol's own name maps to it).
DEFAULT_PROTOCOL_MAP = tuple(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)")


def uses_tls(protocol: str) -> bool:
    """Whether connections of this security protocol are TLS."""
    return protocol in ("SSL", "SASL_SSL")


def uses_sasl(protocol: str) -> bool:
    """Whether connections of this security protocol authenticate with SASL."""
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Listener:
    """One parsed listener: its name (upper case, as Kafka's ListenerName), host (empty:
    every interface) and port."""

    name: str
    host: str
    port: int

    @property
    def protocol(self) -> str:
        """The name (the security protocol when the default map applies)."""
        return self.name

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerListener:
    """What one of a broker's listeners binds to and advertises (port 0: the bound one)."""

    broker_id: int
    bind_host: str
    bind_port: int
    advertised_host: str
    advertised_port: int
    name: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"


def parse_listener(text: str) -> Listener:
    """``NAME://host:port`` -> Listener; InvalidConfigError for anything else."""
    match = _LISTENER.fullmatch(text.strip())
    if match is None:
        raise InvalidConfigError(f"listener {text!r} is not of the form NAME://host:port")
    port = int(match["port"])
    if port > 65535:
        raise InvalidConfigError(f"listener {text!r}: port {port} is out of range")
    return Listener(match["name"].upper(), match["host"].strip("[]"), port)


def parse_listeners(values: Sequence[str] | str) -> list[Listener]:
    """A comma-separated list (or a sequence) of listeners; each name at most once, and no
    two on the same port (port 0 excepted), as Kafka requires."""
    items = values.split(",") if isinstance(values, str) else list(values)
    listeners = [parse_listener(item) for item in items if item.strip()]
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"listeners {values!r}: each listener name may appear only once")
    ports = [listener.port for listener in listeners if listener.port]
    if len(set(ports)) != len(ports):
        raise InvalidConfigError(f"listeners {values!r}: each listener needs a port of its own")
    return listeners


def protocol_map(values: Sequence[str] | str) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL`` entries) as {name: protocol}."""
    items = values.split(",") if isinstance(values, str) else list(values)
    out: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue
        name, sep, protocol = item.strip().partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not re.fullmatch(r"[A-Z0-9_]+", name):
            raise InvalidConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"listener.security.protocol.map: {item!r}: {protocol} is not one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        if name in out:
            raise InvalidConfigError(f"listener.security.protocol.map: {name} is mapped twice")
        out[name] = protocol
    return out


def listener_protocols(listeners: Sequence[str] | str, mapping: Sequence[str] | str) -> dict[str, str]:
    """Each listener's security protocol, in the order the listeners are given;
    InvalidConfigError for a name the map does not name."""
    protocols = protocol_map(mapping)
    out = {}
    for listener in parse_listeners(listeners):
        protocol = protocols.get(listener.name)
        if protocol is None:
            raise InvalidConfigError(
                f"listener {listener}: no security protocol defined for listener {listener.name}"
                " (listener.security.protocol.map)"
            )
        out[listener.name] = protocol
    return out


def primary_listener(protocols: Mapping[str, str]) -> str | None:
    """The listener whose address a broker is listed under where one address is wanted
    (``bootstrap_servers``, the liveness probe): the first PLAINTEXT one, else the first
    SASL_PLAINTEXT one, else the first; None without listeners."""
    for wanted in ("PLAINTEXT", "SASL_PLAINTEXT"):
        for name, protocol in protocols.items():
            if protocol == wanted:
                return name
    return next(iter(protocols), None)


def broker_endpoints(
    listeners: Sequence[str] | str,
    advertised: Sequence[str] | str,
    brokers: Sequence[tuple[int, str]],
    mapping: Sequence[str] | str = DEFAULT_PROTOCOL_MAP,
) -> dict[int, list[BrokerListener]]:
    """Each broker's listeners: bind and advertised address, name and protocol, in the order
    ``listeners`` gives them. ``brokers`` are ``(broker id, node IP)``; brokers sharing a
    node IP take consecutive ports of every listener in broker id order. Empty when
    ``listeners`` is empty (no gateways)."""
    parsed = parse_listeners(listeners)
    if not parsed:
        return {}
    protocols = listener_protocols(listeners, mapping)
    advertised_by_name: dict[str, Listener] = {}
    for adv in parse_listeners(advertised):
        if adv.name not in protocols:
            raise InvalidConfigError(
                f"advertised.listeners {advertised!r}: {adv.name} is not a listener (listeners: {', '.join(protocols)})"
            )
        advertised_by_name[adv.name] = adv
    out: dict[int, list[BrokerListener]] = {}
    rank: dict[str, int] = {}
    for broker_id, node_ip in sorted(brokers):
        k = rank.get(node_ip, 0)
        rank[node_ip] = k + 1
        planned = []
        for listener in parsed:
            port = listener.port + k if listener.port else 0
            adv = advertised_by_name.get(listener.name)
            if adv is not None:
                adv_host = adv.host if adv.host not in WILDCARD_HOSTS else node_ip
                adv_port = adv.port + k if adv.port else 0
            else:
                adv_host = listener.host if listener.host not in WILDCARD_HOSTS else node_ip
                adv_port = 0  # whatever the bind gets
            if port > 65535 or adv_port > 65535:
                raise InvalidConfigError(
                    f"listeners {listeners!r}: broker {broker_id} would need port {max(port, adv_port)} > 65535"
                )
            planned.append(
                BrokerListener(
                    broker_id, listener.host, port, adv_host, adv_port, listener.name, protocols[listener.name]
                )
            )
        out[broker_id] = planned
    return out


def broker_listeners(
    listeners: Sequence[str] | str,
    advertised: Sequence[str] | str,
    brokers: Sequence[tuple[int, str]],
    mapping: Sequence[str] | str = DEFAULT_PROTOCOL_MAP,
) -> list[BrokerListener]:
    """Each broker's first listener (see :func:`broker_endpoints`); empty without listeners."""
    return [endpoints[0] for endpoints in broker_endpoints(listeners, advertised, brokers, mapping).values()]
