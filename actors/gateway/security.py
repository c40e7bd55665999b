"""What one listener's security protocol asks of its connections (Kafka's ChannelBuilders):
TLS or not, SASL or not, and who a client is once it has shown it.

PLAINTEXT: nobody is asked anything, every connection is ``User:ANONYMOUS``. SSL: a TLS
handshake first (``ssl_factory``); with a client certificate the principal is its subject
mapped by ``ssl.principal.mapping.rules`` (``principal``), without one ANONYMOUS.
SASL_PLAINTEXT and SASL_SSL: SASL (``sasl``) names the principal, over TLS for SASL_SSL.
The TLS handshake and the SASL authentication must be done within
``rayqueue.authentication.timeout.ms`` of the connection's accept.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.config import listener_config
from actors.gateway.principal import SslPrincipalMapper, rfc2253_subject
from actors.gateway.sasl import PlainUsers, SaslConfig, SaslSession, ScramCredentials, check_mechanisms
from actors.gateway.ssl_factory import server_context
from actors.listeners import uses_sasl, uses_tls

# Kafka's KafkaPrincipal.ANONYMOUS, as a string.
ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class ListenerSecurity:
    """One listener's name, security protocol and what it needs to authenticate clients."""

    name: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mapper: SslPrincipalMapper | None = None
    sasl: SaslConfig | None = None
    auth_timeout_s: float = 10.0
    # Told of each TLS-only (SSL) client authentication: succeeded or not.
    on_tls_result: Callable[[bool], None] | None = None

    @property
    def tls(self) -> bool:
        """Whether connections start with a TLS handshake."""
        return self.ssl_context is not None

    def new_session(self, now: Callable[[], float]) -> SaslSession | None:
        """A connection's SASL session (None on a listener without SASL)."""
        return SaslSession(self.sasl, now) if self.sasl is not None else None

    def tls_principal(self, der_certificate: bytes | None) -> str:
        """The principal of a TLS client: its certificate's mapped subject, ANONYMOUS
        without a certificate (``principal.NoMatchingRule`` when no rule applies)."""
        if der_certificate is None or self.mapper is None:
            return ANONYMOUS
        return f"User:{self.mapper.name(rfc2253_subject(der_certificate))}"


def listener_security(
    config: Mapping[str, Any],
    name: str,
    protocol: str,
    scram: ScramCredentials | None = None,
    on_sasl_result: Callable[[str, bool], None] | None = None,
    on_tls_result: Callable[[bool], None] | None = None,
) -> ListenerSecurity:
    """A listener's security from the broker config, with the listener's own
    ``listener.name.<name>.*`` keys over the broker's (InvalidConfigError when its TLS or
    SASL settings cannot work)."""
    config = listener_config(config, name)
    security = ListenerSecurity(name, protocol, auth_timeout_s=config["rayqueue.authentication.timeout.ms"] / 1000)
    if uses_tls(protocol):
        security.ssl_context = server_context(config)
        security.mapper = SslPrincipalMapper(config["ssl.principal.mapping.rules"])
        security.on_tls_result = on_tls_result
    if uses_sasl(protocol):
        mechanisms = tuple(config["sasl.enabled.mechanisms"])
        users_file = config["rayqueue.sasl.plain.users.file"]
        check_mechanisms(mechanisms, users_file)
        security.sasl = SaslConfig(
            mechanisms,
            scram,
            PlainUsers(users_file) if "PLAIN" in mechanisms else None,
            reauth_ms=config["connections.max.reauth.ms"],
            max_receive=config["sasl.server.max.receive.size"],
            on_result=on_sasl_result,
        )
    return security


def check_listener_security(config: Mapping[str, Any], protocols: Mapping[str, str]) -> None:
    """Build every listener's security once (on the driver, before any gateway starts), so
    that a bad key file or SASL setting fails the launch with its reason."""
    for name, protocol in protocols.items():
        listener_security(config, name, protocol)
