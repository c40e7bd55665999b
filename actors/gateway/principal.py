"""Who a TLS client is: its certificate's subject in Kafka's form, mapped to a user name by
``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``).

Kafka names a client certificate by Java's ``X500Principal.getName()``: RFC 2253, the most
specific RDN first (``CN=alice,OU=eng,O=Example,C=US``), the keywords CN, C, L, ST, O, OU,
STREET, DC and UID, any other attribute as ``<OID>=#<hex of its DER value>``, and RFC 2253's
escapes. :func:`rfc2253_subject` writes that string from the certificate's DER bytes (read
with ``cryptography``).

The rules are Kafka's: a comma-separated list of ``DEFAULT`` (the subject as it is) and
``RULE:pattern/replacement/[LU]`` (when ``pattern`` matches the whole subject, the subject
with every match replaced; ``$1`` names a group; ``L``/``U`` lower- or upper-case the
result). The first rule that applies names the user; when none does the client is not let
in (Kafka fails the connection the same way).
"""

from __future__ import annotations

import re

from cryptography import x509
from cryptography.x509.oid import NameOID

from storage.errors import InvalidConfigError

# Kafka's RULE_PATTERN and RULE_SPLITTER (SslPrincipalMapper), in Python's regex syntax.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)

# The attribute keywords Java's RFC 2253 output uses; any other attribute is <OID>=#<hex>.
_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
# ASN.1 string tags and how their bytes are encoded (for the #hex form).
_STRING_ENCODINGS = {
    12: "utf-8",
    19: "ascii",
    20: "latin-1",
    22: "ascii",
    26: "ascii",
    28: "utf-32-be",
    30: "utf-16-be",
}


class NoMatchingRule(Exception):
    """No ``ssl.principal.mapping.rules`` rule applies to a subject."""


class _Rule:
    __slots__ = ("pattern", "replacement", "lower", "upper")

    def __init__(self, pattern: str | None = None, replacement: str = "", case: str = "") -> None:
        try:
            self.pattern = None if pattern is None else re.compile(pattern)
        except re.error as exc:
            raise InvalidConfigError(f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {exc}") from None
        self.replacement = replacement
        self.lower = case == "L"
        self.upper = case == "U"

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        if self.pattern.fullmatch(subject) is None:
            return None
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), subject)
        return result.lower() if self.lower else result.upper() if self.upper else result


def _expand(replacement: str, match: re.Match) -> str:
    """Java's Matcher replacement: ``$n`` is group n (the longest number that is a group),
    a backslash quotes the next character; a ``$n`` beyond the groups is literal (Kafka
    escapes those before replacing)."""
    out = []
    i, n = 0, len(replacement)
    groups = match.re.groups
    while i < n:
        c = replacement[i]
        if c == "\\" and i + 1 < n:
            out.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < n and replacement[i + 1].isdigit():
            j = i + 2
            group = int(replacement[i + 1])
            while j < n and replacement[j].isdigit() and int(replacement[i + 1 : j + 1]) <= groups:
                group = int(replacement[i + 1 : j + 1])
                j += 1
            if group > groups:
                out.append(replacement[i:j])
            else:
                out.append(match.group(group) or "")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``, parsed once."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = [_parse_rule(text) for text in split_rules(rules)]

    def name(self, subject: str) -> str:
        """The user name of ``subject``; NoMatchingRule when no rule applies."""
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {subject!r}")


def split_rules(rules: str) -> list[str]:
    """The rules of the configuration string (Kafka splits them with its RULE_SPLITTER, so a
    pattern may hold commas)."""
    rules = rules.strip()
    if not rules:
        return ["DEFAULT"]
    out = []
    pos = 0
    while pos < len(rules):
        match = _SPLITTER.match(rules, pos)
        if match is None or match.end() == pos:
            raise InvalidConfigError(f"ssl.principal.mapping.rules: cannot read {rules[pos:]!r}")
        if match.group(1):
            out.append(match.group(1))
        pos = match.end()
    return out


def _parse_rule(text: str) -> _Rule:
    match = _PARSER.match(text)
    if match is None or match.end() != len(text) or match.group(7):
        raise InvalidConfigError(f"ssl.principal.mapping.rules: invalid rule {text!r}")
    if match.group(1) is not None:
        return _Rule()
    return _Rule(match.group(2), match.group(4), match.group(6) or "")


def rfc2253_subject(der_certificate: bytes) -> str:
    """The certificate's subject as Java's ``X500Principal.getName()`` writes it."""
    subject = x509.load_der_x509_certificate(der_certificate).subject
    rdns = []
    for rdn in reversed(subject.rdns):
        rdns.append("+".join(_attribute(attr) for attr in rdn))
    return ",".join(rdns)


def _attribute(attr: x509.NameAttribute) -> str:
    keyword = _KEYWORDS.get(attr.oid)
    value = attr.value
    if keyword is not None and isinstance(value, str):
        return f"{keyword}={_escape(value)}"
    return f"{attr.oid.dotted_string}=#{_der_value(attr).hex()}"


def _escape(value: str) -> str:
    """RFC 2253's escapes: ``,+"\\<>;`` anywhere, ``#`` or a space first, a space last."""
    out = []
    for i, c in enumerate(value):
        if c in ',+"\\<>;' or (i == 0 and c in "# ") or (i == len(value) - 1 and c == " "):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def _der_value(attr: x509.NameAttribute) -> bytes:
    value = attr.value
    if isinstance(value, bytes):  # a BIT STRING (x500UniqueIdentifier): tag 3, no unused bits
        tag, body = 3, b"\x00" + value
    else:
        tag = attr._type.value  # the ASN.1 string type the certificate used
        body = value.encode(_STRING_ENCODINGS.get(tag, "utf-8"))
    n = len(body)
    length = (
        bytes([n]) if n < 128 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8)
    )
    return bytes([tag]) + length + body
