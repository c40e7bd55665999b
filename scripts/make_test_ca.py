"""Make a throw-away test CA, a broker certificate and client certificates (PEM) with the
``cryptography`` package, for a SASL_SSL or SSL listener on one machine.

    python scripts/make_test_ca.py /tmp/rayqueue-pki --host localhost --ip 127.0.0.1 --client alice

writes ``ca.pem`` (the CA certificate: clients' ``ssl.ca.location`` and the broker's
``ssl.truststore.location``), ``broker.pem`` (the broker's key and certificate chain in one
file: ``ssl.keystore.location``) and, per client, ``<name>.crt`` and ``<name>.key`` (mutual
TLS; subject ``CN=<name>,OU=clients,O=rayqueue-test``). Keys are unencrypted, EC P-256,
valid for 30 days, written with mode 0600. For tests and trials only: never commit them,
never use them for anything real. The tests import :func:`make_test_pki`.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30


@dataclass(frozen=True, slots=True)
class TestPki:
    """Where the files went."""

    ca: Path
    broker: Path  # key + certificate chain
    clients: dict[str, tuple[Path, Path]]  # name -> (certificate, key)


def _name(common_name: str, unit: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rayqueue-test"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def make_test_pki(
    out: str | Path,
    hosts: tuple[str, ...] = ("localhost",),
    ips: tuple[str, ...] = ("127.0.0.1",),
    clients: tuple[str, ...] = (),
    key_password: str | None = None,
) -> TestPki:
    """Write a CA, a broker certificate for ``hosts``/``ips`` and client certificates into
    ``out`` (``key_password``: encrypt the broker key, as ``ssl.key.password`` reads it)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("rayqueue test CA", "ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .sign(ca_key, hashes.SHA256())
    )

    def issue(name: x509.Name, usages: list[x509.ObjectIdentifier], san: list[x509.GeneralName] | None):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    san: list[x509.GeneralName] = [x509.DNSName(h) for h in hosts]
    san += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    # A broker's certificate serves its listeners and is also what it presents as a TLS client
    # (the listener probe on a listener with ssl.client.auth=required, as Kafka's inter-broker
    # client presents the broker's keystore): both usages.
    broker_key, broker_cert = issue(
        _name(hosts[0] if hosts else "broker", "brokers"),
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        san,
    )
    pem = serialization.Encoding.PEM
    ca_path, broker_path = out / "ca.pem", out / "broker.pem"
    _write(ca_path, ca_cert.public_bytes(pem))
    _write(broker_path, _key_pem(broker_key, key_password) + broker_cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    issued = {}
    for client in clients:
        key, cert = issue(_name(client, "clients"), [ExtendedKeyUsageOID.CLIENT_AUTH], None)
        cert_path, key_path = out / f"{client}.crt", out / f"{client}.key"
        _write(cert_path, cert.public_bytes(pem))
        _write(key_path, _key_pem(key))
        issued[client] = (cert_path, key_path)
    return TestPki(ca_path, broker_path, issued)


def main() -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="directory to write the PEM files into")
    parser.add_argument("--host", action="append", default=[], help="a DNS name of the broker (repeatable)")
    parser.add_argument("--ip", action="append", default=[], help="an IP address of the broker (repeatable)")
    parser.add_argument("--client", action="append", default=[], help="a client certificate's CN (repeatable)")
    args = parser.parse_args()
    pki = make_test_pki(
        args.out, tuple(args.host or ["localhost"]), tuple(args.ip or ["127.0.0.1"]), tuple(args.client)
    )
    print(f"CA:     {pki.ca}\nbroker: {pki.broker}")
    for name, (cert, key) in pki.clients.items():
        print(f"client {name}: {cert} {key}")


if __name__ == "__main__":
    main()
