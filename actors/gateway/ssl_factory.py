"""The TLS server context of the SSL and SASL_SSL listeners, from Kafka's PEM keys (KIP-651;
Kafka's ``DefaultSslEngineFactory``).

The broker's key and certificate chain come from ``ssl.keystore.location`` (one PEM file
holding both) or from ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (PEM text in
the configuration), the key decrypted with ``ssl.key.password`` when it is encrypted. The
CAs client certificates are checked against come from ``ssl.truststore.location`` or
``ssl.truststore.certificates``. ``ssl.client.auth`` is ``none`` (no certificate asked
for), ``requested`` (asked for, checked when given) or ``required``;
``ssl.enabled.protocols`` bounds the TLS versions; ``ssl.cipher.suites`` lists the TLS 1.2
suites by their OpenSSL names (Python's ``ssl`` cannot restrict TLS 1.3's).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

from storage.errors import InvalidConfigError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """A server-side SSLContext from the broker's ``ssl.*`` keys; InvalidConfigError when the
    keys are missing, contradict each other, or the PEM material cannot be read."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[v] for v in config["ssl.enabled.protocols"])
    if not versions:
        raise InvalidConfigError("ssl.enabled.protocols is empty: a TLS listener needs TLSv1.2 or TLSv1.3")
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    if config["ssl.cipher.suites"]:
        try:
            context.set_ciphers(":".join(config["ssl.cipher.suites"]))
        except ssl.SSLError as exc:
            raise InvalidConfigError(f"ssl.cipher.suites={','.join(config['ssl.cipher.suites'])}: {exc}") from None
    _load_keystore(context, config)
    client_auth = config["ssl.client.auth"]
    context.verify_mode = _CLIENT_AUTH[client_auth]
    trusted = _load_truststore(context, config)
    if client_auth != "none" and not trusted:
        raise InvalidConfigError(
            f"ssl.client.auth={client_auth} needs the CAs to check client certificates with"
            " (ssl.truststore.location or ssl.truststore.certificates)"
        )
    return context


def client_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """A client-side SSLContext for the broker's own connections to a TLS listener (the
    listener probe): the listener's CAs verify the server when it names them (without them
    the probe checks that the listener serves, not who it is), and the broker's keystore is
    presented as the client certificate when there is one (a listener with
    ``ssl.client.auth=required`` asks for it, as Kafka's inter-broker client presents it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    versions = sorted(_VERSIONS[v] for v in config["ssl.enabled.protocols"]) or [ssl.TLSVersion.TLSv1_2]
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    # The advertised address may be an IP the certificate does not name: the CA check stays,
    # the name check does not.
    context.check_hostname = False
    if not _load_truststore(context, config):
        context.verify_mode = ssl.CERT_NONE
    if config["ssl.keystore.location"] or config["ssl.keystore.certificate.chain"]:
        _load_keystore(context, config)
    return context


def _load_keystore(context: ssl.SSLContext, config: Mapping[str, Any]) -> None:
    location = config["ssl.keystore.location"]
    chain, key = config["ssl.keystore.certificate.chain"], config["ssl.keystore.key"]
    password = config["ssl.key.password"] or None
    if location and (chain or key):
        raise InvalidConfigError(
            "ssl.keystore.location and ssl.keystore.certificate.chain/ssl.keystore.key name the key twice: set one"
        )
    if location:
        _load_chain(context, location, None, password, "ssl.keystore.location")
        return
    if not chain or not key:
        raise InvalidConfigError(
            "a TLS listener needs the broker's key and certificate: ssl.keystore.location, or"
            " ssl.keystore.certificate.chain and ssl.keystore.key"
        )
    # Python's ssl loads a key only from a file: the PEM text goes to a private temporary
    # directory for the load and is removed at once.
    with tempfile.TemporaryDirectory(prefix="rayqueue-ssl-") as tmp:
        os.chmod(tmp, 0o700)
        chain_path, key_path = os.path.join(tmp, "chain.pem"), os.path.join(tmp, "key.pem")
        for path, text in ((chain_path, chain), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
        _load_chain(context, chain_path, key_path, password, "ssl.keystore.certificate.chain/ssl.keystore.key")


def _load_chain(context: ssl.SSLContext, certfile: str, keyfile: str | None, password: str | None, what: str) -> None:
    try:
        # An empty password for an unencrypted key is fine; a callable keeps OpenSSL from
        # prompting on a terminal when an encrypted key comes without one.
        context.load_cert_chain(certfile, keyfile, password=lambda: password or "")
    except FileNotFoundError:
        raise InvalidConfigError(f"{what}: {certfile} does not exist") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise InvalidConfigError(f"{what}: cannot load the key and certificate chain ({exc})") from None


def _load_truststore(context: ssl.SSLContext, config: Mapping[str, Any]) -> bool:
    location, certificates = config["ssl.truststore.location"], config["ssl.truststore.certificates"]
    if location and certificates:
        raise InvalidConfigError("ssl.truststore.location and ssl.truststore.certificates both set: set one")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        elif certificates:
            context.load_verify_locations(cadata=certificates)
        else:
            return False
    except FileNotFoundError:
        raise InvalidConfigError(f"ssl.truststore.location: {location} does not exist") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise InvalidConfigError(f"ssl.truststore: cannot load the CA certificates ({exc})") from None
    return True
