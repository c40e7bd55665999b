"""SASL on the SASL_PLAINTEXT and SASL_SSL listeners (Kafka's ``SaslServerAuthenticator``):
one :class:`SaslSession` per connection, PLAIN and SCRAM-SHA-256/512 (scramp does SCRAM's
server side), KIP-368 re-authentication.

The client says which mechanism with SaslHandshake, then exchanges tokens with
SaslAuthenticate (or, after a SaslHandshake v0, as raw size-prefixed frames: Kafka's
original framing). Until a token exchange completes, the connection may send only
ApiVersions, SaslHandshake and SaslAuthenticate; anything else closes it, as Kafka does.
A failed exchange answers SASL_AUTHENTICATION_FAILED and closes the connection; so does a
SCRAM message longer than ``SCRAM_MAX_MESSAGE_BYTES``, before scramp reads it. The
principal is ``User:<name>`` for the authenticated name.

With ``connections.max.reauth.ms`` > 0 a session lasts that long (SaslAuthenticate v1+
tells the client, which re-authenticates on the same connection with a new SaslHandshake
and SaslAuthenticate, same mechanism and same principal); a request after the session has
expired closes the connection. PLAIN's users come from the TOML file
``rayqueue.sasl.plain.users.file`` (``alice = "alice-secret"``), re-read when it changes;
SCRAM's credentials from the controller (``credentials.ScramCredentialCache``).
"""

from __future__ import annotations

import enum
import hmac
import logging
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from scramp import ScramException, ScramMechanism

from actors.protocol_security import ScramCredential
from storage.errors import IllegalSaslStateError, InvalidConfigError, UnsupportedSaslMechanismError

logger = logging.getLogger(__name__)

API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 18, 17, 36
AUTHENTICATION_APIS = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
# The longest SCRAM message taken (client-first or client-final). Kafka's clients send a
# client-first of about 40 bytes besides the user name (twice, with an authzid) and a
# client-final of about 200 (SHA-512's proof and both nonces); 1 KB leaves room for user names
# of hundreds of characters. Kafka itself takes any size up to sasl.server.max.receive.size
# (512 KB), but scramp's work grows with a message's length (a tenth of a second of the event
# loop for a 480 KB nonce): a longer message fails the login before scramp sees it.
SCRAM_MAX_MESSAGE_BYTES = 1024
# Kafka's message for a SCRAM exchange that fails on the credentials.
_SCRAM_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


class AuthenticationFailed(Exception):
    """The client did not prove who it is; the message is what it is told."""


class ScramCredentials(Protocol):
    """Where SCRAM credentials come from (the gateway's cache of the controller's)."""

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential of ``user`` for ``mechanism``, None when there is none."""


class PlainUsers:
    """PLAIN's users: a TOML file of ``user = "password"``, re-read when it changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, bytes] = {}
        self._load()

    def _load(self) -> None:
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise InvalidConfigError(f"rayqueue.sasl.plain.users.file: cannot read {self.path} ({exc})") from None
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        try:
            with open(self.path, "rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidConfigError(f"rayqueue.sasl.plain.users.file: cannot read {self.path} ({exc})") from None
        users = {}
        for user, password in data.items():
            if not isinstance(password, str):
                raise InvalidConfigError(f"rayqueue.sasl.plain.users.file: {user} = {password!r:.20}: not a string")
            users[user] = password.encode()
        self._users, self._stamp = users, stamp

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (the file re-read first if it changed; a file
        that became unreadable keeps the users last read)."""
        try:
            self._load()
        except InvalidConfigError as exc:
            logger.warning("%s; the users read before are kept", exc)
        expected = self._users.get(user)
        # compare_digest on a stand-in for an unknown user too: the same work either way.
        ok = hmac.compare_digest(expected if expected is not None else b"\0" * 16, password.encode())
        return ok and expected is not None


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """A SASL listener's settings."""

    mechanisms: tuple[str, ...]
    scram: ScramCredentials | None
    plain: PlainUsers | None
    reauth_ms: int = 0  # connections.max.reauth.ms
    max_receive: int = 524288  # sasl.server.max.receive.size
    # Told of each completed exchange: (mechanism, succeeded).
    on_result: Callable[[str, bool], None] | None = None


class _Plain:
    """RFC 4616: one token ``authzid NUL authcid NUL password``; the answer is empty."""

    name = "PLAIN"

    def __init__(self, users: PlainUsers | None) -> None:
        self.users = users
        self.complete = False
        self.authorization_id = ""

    async def evaluate(self, token: bytes) -> bytes:
        # Kafka's PlainSaslServer, with its messages.
        try:
            parts = token.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if self.users is None or not self.users.check(user, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.complete, self.authorization_id = True, user
        return b""


class _Scram:
    """RFC 5802 / 7677 with scramp: client-first -> server-first, client-final -> server-final."""

    def __init__(self, name: str, credentials: ScramCredentials | None) -> None:
        self.name = name
        self.credentials = credentials
        self.complete = False
        self.authorization_id = ""
        self._server: Any = None
        self._user = ""

    async def evaluate(self, token: bytes) -> bytes:
        if len(token) > SCRAM_MAX_MESSAGE_BYTES:
            raise AuthenticationFailed(
                f"Invalid SCRAM message from the client ({self.name}): {len(token)} bytes, above the"
                f" {SCRAM_MAX_MESSAGE_BYTES} a SCRAM message may have"
            )
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"Invalid SCRAM message from the client ({self.name}): not UTF-8") from None
        if self._server is None:
            return await self._first(text)
        if self.complete:
            raise AuthenticationFailed(f"Unexpected SASL token: the {self.name} exchange is complete")
        try:
            self._server.set_client_final(text)
            final = self._server.get_server_final()
        except ScramException:
            raise AuthenticationFailed(_SCRAM_FAILED.format(self.name)) from None
        self.complete, self.authorization_id = True, self._user
        return final.encode("utf-8")

    async def _first(self, text: str) -> bytes:
        user, authzid, extensions = _client_first(text)
        if "tokenauth" in extensions:
            raise AuthenticationFailed("Authentication failed: delegation tokens are not supported")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        credential = await self.credentials.get(user, self.name) if self.credentials is not None else None
        if credential is None:
            raise AuthenticationFailed(_SCRAM_FAILED.format(self.name))
        c = credential
        server = ScramMechanism(self.name).make_server(lambda _user: (c.salt, c.stored_key, c.server_key, c.iterations))
        # scramp refuses any authzid; Kafka accepts one equal to the username (checked above).
        # scramp is given the message without it, and checks the client-final's channel
        # binding against the header the client really sent (with ``a=``), over which the
        # client computed its proof.
        gs2_flag, sent_header, bare = _split_gs2(text)
        try:
            server.set_client_first(f"{gs2_flag},,{bare}" if authzid else text)
            if authzid:
                server.gs2_header = _SentGs2Header(server.gs2_header, sent_header)
            first = server.get_server_first()
        except ScramException as exc:
            raise AuthenticationFailed(f"Invalid SCRAM client-first message ({exc})") from None
        self._server, self._user = server, user
        return first.encode("utf-8")


class _SentGs2Header:
    """scramp's gs2-header of a client-first message, as the client sent it (with its
    authzid): what the client-final's channel binding (``c=``) must carry."""

    def __init__(self, parsed: Any, sent: str) -> None:
        self._parsed = parsed
        self._sent = sent.encode("utf-8")

    def make_cbind_input(self, _cb: Any) -> bytes:
        """The channel binding input of a client without channel binding (``n`` or ``y``)."""
        return self._sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parsed, name)


def _split_gs2(text: str) -> tuple[str, str, str]:
    """(cbind flag, gs2-header as sent, client-first-message-bare) of a client-first message
    that ``_client_first`` accepted."""
    flag, rest = text.split(",", 1)
    authzid, bare = rest.split(",", 1)
    return flag, f"{flag},{authzid},", bare


def _client_first(text: str) -> tuple[str, str, set[str]]:
    """The username, authorization id and extension names of a SCRAM client-first message
    (``n,[a=authzid],n=user,r=nonce[,ext=...]``); saslnames decoded (``=2C`` ``=3D``)."""
    parts = text.split(",")
    if len(parts) < 4 or parts[0] not in ("n", "y") and not parts[0].startswith("p="):
        raise AuthenticationFailed("Invalid SCRAM client-first message")
    authzid = _saslname(parts[1][2:]) if parts[1].startswith("a=") else ""
    bare = parts[2:]
    if bare and bare[0].startswith("m="):
        raise AuthenticationFailed("Invalid SCRAM client-first message: mandatory extensions are not supported")
    if len(bare) < 2 or not bare[0].startswith("n=") or not bare[1].startswith("r="):
        raise AuthenticationFailed("Invalid SCRAM client-first message")
    extensions = {item.partition("=")[0] for item in bare[2:]}
    return _saslname(bare[0][2:]), authzid, extensions


def _saslname(value: str) -> str:
    return value.replace("=2C", ",").replace("=3D", "=")


class _State(enum.Enum):
    HANDSHAKE = "handshake"  # before a SaslHandshake (ApiVersions allowed)
    AUTHENTICATE = "authenticate"  # a mechanism chosen: tokens expected
    COMPLETE = "complete"  # authenticated (a SaslHandshake starts a re-authentication)
    FAILED = "failed"


class SaslSession:
    """One connection's SASL state; the server asks it what the connection may send, the
    SaslHandshake and SaslAuthenticate handlers (and raw v0 tokens) drive it."""

    def __init__(self, config: SaslConfig, now: Callable[[], float]) -> None:
        self.config = config
        self._now = now
        self.state = _State.HANDSHAKE
        self.principal: str | None = None  # "User:<name>" once authenticated
        self.mechanism: str | None = None  # of the session (kept across re-authentications)
        self.raw_tokens = False  # after SaslHandshake v0: tokens come as raw frames
        self.expires_at: float | None = None  # monotonic seconds; None: never
        self._exchange: _Plain | _Scram | None = None
        self._reauth_possible = False  # the client authenticated with SaslAuthenticate v1+

    @property
    def expects_raw_token(self) -> bool:
        """Whether the next frame is a raw SASL token (after a SaslHandshake v0)."""
        return self.raw_tokens and self.state is _State.AUTHENTICATE

    @property
    def authenticated(self) -> bool:
        """Whether a principal was established (it stays during a re-authentication)."""
        return self.principal is not None

    def refusal(self, api_key: int) -> str | None:
        """Why a request of ``api_key`` may not be served now (None: it may)."""
        if api_key in AUTHENTICATION_APIS:
            return None
        if not self.authenticated:
            return f"API key {api_key} before SASL authentication (only ApiVersions, SaslHandshake, SaslAuthenticate)"
        if self.expires_at is not None and self._now() >= self.expires_at:
            return "its SASL session expired (connections.max.reauth.ms) and it did not re-authenticate"
        return None

    def handshake(self, mechanism: str, version: int) -> None:
        """A SaslHandshake: the mechanism to use next. UnsupportedSaslMechanismError or
        IllegalSaslStateError (the connection is closed after the answer)."""
        if self.state is _State.AUTHENTICATE or self.state is _State.FAILED:
            raise IllegalSaslStateError("Unexpected SaslHandshake during SASL authentication")
        if self.state is _State.COMPLETE:
            if not self._reauth_possible or version == 0:
                raise IllegalSaslStateError("Unexpected SaslHandshake: the connection is authenticated")
            if mechanism != self.mechanism:
                raise UnsupportedSaslMechanismError(
                    f"Re-authentication with {mechanism}: the session's mechanism is {self.mechanism}"
                )
        if mechanism not in self.config.mechanisms:
            raise UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {mechanism!r:.60}")
        self._exchange = _Plain(self.config.plain) if mechanism == "PLAIN" else _Scram(mechanism, self.config.scram)
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self.state = _State.AUTHENTICATE

    async def authenticate(self, token: bytes, version: int | None) -> tuple[bytes, int]:
        """One token of the exchange (``version`` None: a raw v0 token); returns the answer
        and the session lifetime in ms to tell the client (0: none, or not done yet).
        AuthenticationFailed or IllegalSaslStateError end the connection."""
        exchange = self._exchange
        if self.state is not _State.AUTHENTICATE or exchange is None:
            raise IllegalSaslStateError("Unexpected SaslAuthenticate before a SaslHandshake")
        if (version is None) != self.raw_tokens:
            raise IllegalSaslStateError("SaslAuthenticate after a SaslHandshake v0 (raw tokens expected)")
        try:
            answer = await exchange.evaluate(token)
            if exchange.complete:
                principal = f"User:{exchange.authorization_id}"
                if self.principal is not None and principal != self.principal:
                    raise AuthenticationFailed(
                        f"Cannot change principals during re-authentication from {self.principal}: {principal}"
                    )
        except AuthenticationFailed:
            self.state, self._exchange = _State.FAILED, None
            self._report(exchange, False)
            raise
        if not exchange.complete:
            return answer, 0
        self.principal = principal
        self.state, self._exchange = _State.COMPLETE, None
        self._reauth_possible = version is not None and version >= 1
        lifetime = self.config.reauth_ms
        self.expires_at = self._now() + lifetime / 1000 if lifetime > 0 else None
        self._report(exchange, True)
        return answer, lifetime if version is not None and version >= 1 else 0

    def _report(self, exchange: _Plain | _Scram, ok: bool) -> None:
        if self.config.on_result is not None:
            try:
                self.config.on_result(exchange.name, ok)
            except Exception:  # noqa: BLE001 - metrics never fail an authentication
                logger.exception("recording an authentication failed")


def check_mechanisms(mechanisms: tuple[str, ...], plain_users_file: str) -> None:
    """InvalidConfigError for a SASL setting no client could authenticate with."""
    if not mechanisms:
        raise InvalidConfigError("sasl.enabled.mechanisms is empty: a SASL listener needs a mechanism")
    if "PLAIN" in mechanisms and not plain_users_file:
        raise InvalidConfigError("sasl.enabled.mechanisms has PLAIN: set rayqueue.sasl.plain.users.file")
