"""Kafka's ``listeners`` / ``advertised.listeners``: where each broker's gateway listens.

A listener is ``PLAINTEXT://host:port`` (only PLAINTEXT: the gateway speaks no TLS or
SASL). One setting serves every broker: several brokers on one host each take the next
port (broker ranks on that host 0, 1, 2 -> 9092, 9093, 9094); port 0 asks the OS for any
free port. The advertised address is what Metadata answers: ``advertised.listeners`` when
set, else the listener itself, with the node's IP for a wildcard host (``0.0.0.0``, as
Kafka advertises the canonical host name instead of a wildcard).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from storage.errors import InvalidConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT",)
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)")


@dataclass(frozen=True, slots=True)
class Listener:
    """One parsed listener: security protocol, host (empty: every interface) and port."""

    protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerListener:
    """What one broker's gateway binds to and what it advertises (port 0: the bound one)."""

    broker_id: int
    bind_host: str
    bind_port: int
    advertised_host: str
    advertised_port: int


def parse_listener(text: str) -> Listener:
    """``PLAINTEXT://host:port`` -> Listener; InvalidConfigError for anything else."""
    match = _LISTENER.fullmatch(text.strip())
    if match is None:
        raise InvalidConfigError(f"listener {text!r} is not of the form PLAINTEXT://host:port")
    protocol = match["name"].upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise InvalidConfigError(
            f"listener {text!r}: security protocol {protocol} is not supported (only {', '.join(SECURITY_PROTOCOLS)})"
        )
    port = int(match["port"])
    if port > 65535:
        raise InvalidConfigError(f"listener {text!r}: port {port} is out of range")
    return Listener(protocol, match["host"].strip("[]"), port)


def parse_listeners(values: Sequence[str] | str) -> list[Listener]:
    """A comma-separated list (or a sequence) of listeners; at most one per protocol, as in Kafka."""
    items = values.split(",") if isinstance(values, str) else list(values)
    listeners = [parse_listener(item) for item in items if item.strip()]
    protocols = [listener.protocol for listener in listeners]
    if len(set(protocols)) != len(protocols):
        raise InvalidConfigError(f"listeners {values!r}: one listener per security protocol")
    return listeners


def broker_listeners(
    listeners: Sequence[str] | str,
    advertised: Sequence[str] | str,
    brokers: Sequence[tuple[int, str]],
) -> list[BrokerListener]:
    """Each broker's bind and advertised address. ``brokers`` are ``(broker id, node IP)``;
    brokers sharing a node IP take consecutive ports in broker id order. Empty when
    ``listeners`` is empty (no gateways)."""
    parsed = parse_listeners(listeners)
    if not parsed:
        return []
    listener = parsed[0]
    advertised_list = parse_listeners(advertised)
    if advertised_list and advertised_list[0].protocol != listener.protocol:
        raise InvalidConfigError(f"advertised.listeners {advertised!r} names no {listener.protocol} listener")
    out = []
    rank: dict[str, int] = {}
    for broker_id, node_ip in sorted(brokers):
        k = rank.get(node_ip, 0)
        rank[node_ip] = k + 1
        port = listener.port + k if listener.port else 0
        if advertised_list:
            adv = advertised_list[0]
            adv_host = adv.host if adv.host not in WILDCARD_HOSTS else node_ip
            adv_port = adv.port + k if adv.port else 0
        else:
            adv_host = listener.host if listener.host not in WILDCARD_HOSTS else node_ip
            adv_port = 0  # whatever the bind gets
        if port > 65535 or adv_port > 65535:
            raise InvalidConfigError(f"listeners {listeners!r}: broker {broker_id} would need port {port} > 65535")
        out.append(BrokerListener(broker_id, listener.host, port, adv_host, adv_port))
    return out
