"""ssl.principal.mapping.rules as Kafka's SslPrincipalMapper applies them, and a certificate's
subject in Java's RFC 2253 form (no Ray, no sockets)."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from actors.gateway.principal import NoMatchingRule, SslPrincipalMapper, rfc2253_subject, split_rules
from storage.errors import InvalidConfigError

SUBJECT = "CN=kafka1,OU=ServiceUsers,O=Org,L=Sunnyvale,ST=CA,C=US"


def test_default_keeps_the_subject():
    assert SslPrincipalMapper("DEFAULT").name(SUBJECT) == SUBJECT
    assert SslPrincipalMapper("").name(SUBJECT) == SUBJECT


def test_kafkas_documented_rules():
    # The examples of Kafka's documentation (security.html, "Customizing SSL User Name").
    rules = (
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    mapper = SslPrincipalMapper(rules)
    assert mapper.name(SUBJECT) == "kafka1"
    assert mapper.name("CN=Adminuser,OU=Admin,O=Org,L=Sunnyvale,ST=CA,C=US") == "adminuser@admin"
    assert mapper.name("CN=Client3,O=Org") == "client3"
    assert mapper.name("O=NoName") == "O=NoName"


def test_upper_case_and_no_match():
    mapper = SslPrincipalMapper("RULE:^CN=([^,]*),.*$/$1/U")
    assert mapper.name("CN=alice,O=x") == "ALICE"
    with pytest.raises(NoMatchingRule):
        mapper.name("O=x")


def test_a_pattern_may_hold_commas_and_escaped_slashes():
    assert split_rules("RULE:^CN=(.*?),OU=(.*?)$/$1\\/$2/, DEFAULT") == ["RULE:^CN=(.*?),OU=(.*?)$/$1\\/$2/", "DEFAULT"]
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$1\\/$2/").name("CN=a,OU=b") == "a/b"


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*)$/$1/X", "NONSENSE", "RULE:^CN=([$/x/"])
def test_bad_rules_are_config_errors(rules):
    with pytest.raises(InvalidConfigError):
        SslPrincipalMapper(rules)


def _certificate(name: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def test_rfc2253_subject_is_most_specific_first_with_escapes():
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Inc."),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    assert rfc2253_subject(_certificate(name)) == "CN=alice,OU=eng,O=Example\\, Inc.,C=US"


def test_rfc2253_other_attributes_are_oid_and_der_hex():
    # Java writes emailAddress as its OID and the DER of its IA5String value.
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, "bob"), x509.NameAttribute(NameOID.EMAIL_ADDRESS, "b@x.io")]
    )
    assert rfc2253_subject(_certificate(name)) == "1.2.840.113549.1.9.1=#16066240782e696f,CN=bob"
