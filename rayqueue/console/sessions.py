"""Who is logged in to the console: SCRAM password checks, the sessions they open, and the
limit on failed logins.

When the cluster has authentication (:func:`authentication_required`), the console asks for
a SCRAM user's name and password and checks them against the credential the controller
keeps for that user (``actors.controller.scram_control``: salt, iterations, stored key and
server key, never the password). scramp derives the stored and server keys from the typed
password with the credential's own salt and iteration count, and both are compared in
constant time; an unknown user costs the same key derivation against a throw-away
credential, so the answer's timing does not tell which names exist. The password is used
for that derivation and forgotten: it is neither kept nor logged.

A successful login opens a :class:`Session` with a random id (``secrets.token_urlsafe``),
which the browser holds in an HttpOnly, SameSite=Strict cookie. A session acts as
``User:<name>`` through its own :class:`rayqueue.console.state.ClusterView`, ends at logout,
after ``rayqueue.console.session.lifetime.ms``, or on the first request after the user's
credential was removed or changed (checked at most every ``CREDENTIAL_CHECK_S``).
"""

from __future__ import annotations

import collections
import hmac
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from scramp import ScramException, ScramMechanism

from actors.clock import SYSTEM, Clock
from actors.config import BROKER_CONFIG
from actors.gateway.credentials import MAX_AGE_S
from actors.listeners import uses_sasl
from actors.protocol_security import ScramCredential
from rayqueue.cluster import Cluster
from rayqueue.console.state import ClusterView
from rayqueue.metadata import call_controller

logger = logging.getLogger(__name__)

# The cookie that carries a session id.
SESSION_COOKIE = "rayqueue_session"
# rayqueue.console.session.lifetime.ms's default (a working day).
DEFAULT_SESSION_LIFETIME_MS: int = BROKER_CONFIG.keys["rayqueue.console.session.lifetime.ms"].default
# A removed or changed credential ends its sessions within this long (the gateways' SCRAM
# credential cache has the same bound for new Kafka connections).
CREDENTIAL_CHECK_S = MAX_AGE_S
# The strongest first: a user with both credentials logs in with SCRAM-SHA-512's.
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
# Sessions held at once; past it the oldest ends (only logged-in users make sessions).
DEFAULT_MAX_SESSIONS = 1000
# Failed logins: each failure is answered after a pause, and a client address with this many
# failures (and attempts under way) within the window is refused until the oldest ages out;
# so is a user name with MAX_FAILED_LOGINS_PER_USER, from whatever addresses (a brute force
# spread over addresses, or over forged X-Forwarded-For headers, meets it).
FAILED_LOGIN_DELAY_S = 0.5
MAX_FAILED_LOGINS = 5
MAX_FAILED_LOGINS_PER_USER = 10
FAILED_LOGIN_WINDOW_S = 60.0
# Client addresses and user names remembered by the limiter (the oldest are forgotten first).
MAX_TRACKED_CLIENTS = 10000
# Kafka's words for a failed SCRAM exchange (actors/gateway/sasl.py says the same).
AUTHENTICATION_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"

CredentialSource = Callable[[str, str], "ScramCredential | None"]


def authentication_required(cluster: Cluster) -> bool:
    """Whether the cluster has authentication, so the console asks who is there: an
    authorizer is configured, or a broker has a SASL listener. Read from the running
    cluster (the controller's authorizer settings, the listeners the gateways registered),
    so a console attached by name knows as much as one started with the cluster."""
    acls = call_controller(cluster.controller.watch_acls, None, 0.0)
    authorizer_on = bool(acls.settings[0])
    sasl = any(uses_sasl(protocol) for b in cluster.metadata([]).brokers for _, protocol, _, _ in b.endpoints)
    return authorizer_on or sasl


def controller_credentials(cluster: Cluster) -> CredentialSource:
    """The credential source of a running cluster: its controller's SCRAM credentials."""

    def fetch(user: str, mechanism: str) -> ScramCredential | None:
        return call_controller(cluster.controller.scram_credential, user, mechanism)

    return fetch


@dataclass(frozen=True, slots=True)
class VerifiedLogin:
    """A user whose password matched its credential for ``mechanism``."""

    user: str
    mechanism: str
    credential: ScramCredential


class PasswordVerifier:
    """Checks a user's password against its stored SCRAM credential (see the module docstring)."""

    def __init__(self, credentials: CredentialSource) -> None:
        self._credentials = credentials
        # What an unknown user's password is checked against: the same work, never a match.
        salt, stored, server, iterations = ScramMechanism(MECHANISMS[0]).make_auth_info(secrets.token_urlsafe(32))
        self._decoy = ScramCredential(salt, stored, server, iterations)

    def verify(self, user: str, password: str) -> VerifiedLogin | None:
        """The login when ``password`` is ``user``'s, else None (the reason is not told)."""
        # Every mechanism is looked up, known user or not: the same calls either way.
        credentials = {m: self._credentials(user, m) for m in MECHANISMS} if user else {}
        found = next(((m, c) for m, c in credentials.items() if isinstance(c, ScramCredential)), None)
        mechanism, credential = found if found is not None else (MECHANISMS[0], self._decoy)
        if not _matches(mechanism, credential, password) or found is None:
            return None
        return VerifiedLogin(user, mechanism, credential)

    def current(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for ``mechanism`` as the controller has it now."""
        credential = self._credentials(user, mechanism)
        return credential if isinstance(credential, ScramCredential) else None


def _matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether the keys scramp derives from ``password`` (with the credential's salt and
    iteration count) are the credential's, compared in constant time."""
    try:
        _, stored_key, server_key, _ = ScramMechanism(mechanism).make_auth_info(
            password, credential.iterations, credential.salt
        )
    except ScramException:  # a password SASLprep refuses (control characters...): no match
        return False
    # Both compared, whatever the first says: no early exit to time.
    stored_ok = hmac.compare_digest(stored_key, credential.stored_key)
    server_ok = hmac.compare_digest(server_key, credential.server_key)
    return stored_ok and server_ok


@dataclass(eq=False)
class Session:
    """One logged-in browser: who (``User:<name>``), with which credential, until when,
    and the view of the cluster it acts through."""

    session_id: str
    user: str
    mechanism: str
    credential: ScramCredential
    created: float  # monotonic
    expires: float  # monotonic
    expires_at_ms: int  # wall clock, for the page
    view: ClusterView
    checked: float  # when the credential was last found unchanged (monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def principal(self) -> str:
        """The Kafka principal the session acts as."""
        return f"User:{self.user}"

    def close(self) -> None:
        """Close what the session's view made (its producer)."""
        try:
            self.view.close()
        except Exception:  # noqa: BLE001 - a session ends whatever its producer says
            logger.warning("closing the console session of %s failed", self.principal, exc_info=True)


class SessionStore:
    """The console's sessions by id (see the module docstring). Thread-safe."""

    def __init__(
        self,
        make_view: Callable[[str], ClusterView],
        verifier: PasswordVerifier,
        lifetime_ms: int = DEFAULT_SESSION_LIFETIME_MS,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        clock: Clock = SYSTEM,
    ) -> None:
        if lifetime_ms <= 0:
            raise ValueError(f"rayqueue.console.session.lifetime.ms must be positive, got {lifetime_ms}")
        self._make_view = make_view
        self.verifier = verifier
        self.lifetime_ms = lifetime_ms
        self._max = max_sessions
        self._clock = clock
        self._sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, login: VerifiedLogin) -> Session:
        """A new session for a verified login (a fresh id every time: no fixation)."""
        now = self._clock.monotonic()
        session = Session(
            secrets.token_urlsafe(32),
            login.user,
            login.mechanism,
            login.credential,
            now,
            now + self.lifetime_ms / 1000,
            self._clock.wall_ms() + self.lifetime_ms,
            self._make_view(f"User:{login.user}"),
            now,
        )
        ended = []
        with self._lock:
            self._sessions[session.session_id] = session
            ended += self._expired_locked(now)
            while len(self._sessions) > self._max:
                ended.append(self._sessions.popitem(last=False)[1])
        for old in ended:
            old.close()
        logger.info("console login of %s", session.principal)
        return session

    def get(self, session_id: str | None) -> tuple[Session | None, str]:
        """The live session of ``session_id``, or None with why not (no session, expired,
        credential removed or changed). A credential older than CREDENTIAL_CHECK_S is
        looked up again (a controller call) before the session is handed out."""
        if not session_id:
            return None, "no session: log in"
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            return None, "no such session (logged out, expired or from before a console restart): log in again"
        now = self._clock.monotonic()
        if now >= session.expires:
            self.end(session_id)
            return None, "the session expired (rayqueue.console.session.lifetime.ms): log in again"
        with session.lock:  # one credential lookup per session at a time
            if now - session.checked >= CREDENTIAL_CHECK_S:
                current = self.verifier.current(session.user, session.mechanism)
                if current != session.credential:
                    self.end(session_id)
                    what = "removed" if current is None else "changed"
                    return None, f"the {session.mechanism} credential of {session.user} was {what}: log in again"
                session.checked = self._clock.monotonic()
        return session, ""

    def end(self, session_id: str) -> bool:
        """End a session (logout); whether there was one."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        session.close()
        return True

    def close(self) -> None:
        """End every session."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.close()

    def _expired_locked(self, now: float) -> list[Session]:
        gone = [sid for sid, s in self._sessions.items() if now >= s.expires]
        return [self._sessions.pop(sid) for sid in gone]


class LoginLimiter:
    """Failed logins per client address and per user name: at most ``max_failures`` from one
    address and ``max_user_failures`` for one user (each counting attempts still being
    checked) within ``window_s``; past either, the attempt is refused until the oldest of
    those failures ages out. A success forgets the address's and the user's failures.
    Thread-safe, bounded (``max_clients`` addresses and users together)."""

    def __init__(
        self,
        max_failures: int = MAX_FAILED_LOGINS,
        window_s: float = FAILED_LOGIN_WINDOW_S,
        clock: Clock = SYSTEM,
        max_clients: int = MAX_TRACKED_CLIENTS,
        max_user_failures: int = MAX_FAILED_LOGINS_PER_USER,
    ) -> None:
        self.max_failures = max_failures
        self.max_user_failures = max_user_failures
        self.window_s = window_s
        self._clock = clock
        self._max_clients = max_clients
        # ("client", address) or ("user", name) -> failure times
        self._failures: collections.OrderedDict[tuple[str, str], collections.deque[float]] = collections.OrderedDict()
        self._in_flight: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def _keys(self, client: str, user: str | None) -> list[tuple[tuple[str, str], int]]:
        keys = [(("client", client), self.max_failures)]
        if user is not None:
            keys.append((("user", user), self.max_user_failures))
        return keys

    def begin(self, client: str, user: str | None = None) -> float:
        """Start an attempt from ``client`` for ``user``: 0 when it may go on (then call
        :meth:`done`), else how many seconds until it may try again."""
        now = self._clock.monotonic()
        with self._lock:
            wait = 0.0
            for key, limit in self._keys(client, user):
                failures = self._failures.get(key)
                if failures is not None:
                    while failures and now - failures[0] >= self.window_s:
                        failures.popleft()
                count = (len(failures) if failures else 0) + self._in_flight.get(key, 0)
                if count >= limit:
                    oldest = failures[0] if failures else now
                    wait = max(wait, 0.1, self.window_s - (now - oldest))
            if wait:
                return wait
            for key, _ in self._keys(client, user):
                self._in_flight[key] = self._in_flight.get(key, 0) + 1
            return 0.0

    def done(self, client: str, succeeded: bool | None, user: str | None = None) -> None:
        """End an attempt :meth:`begin` let through: succeeded, failed, or None when the
        password could not be checked (the controller did not answer: no one's fault)."""
        now = self._clock.monotonic()
        with self._lock:
            for key, limit in self._keys(client, user):
                left = self._in_flight.get(key, 1) - 1
                if left > 0:
                    self._in_flight[key] = left
                else:
                    self._in_flight.pop(key, None)
                if succeeded is None:
                    continue
                if succeeded:
                    self._failures.pop(key, None)
                    continue
                failures = self._failures.setdefault(key, collections.deque(maxlen=limit))
                failures.append(now)
                self._failures.move_to_end(key)
            while len(self._failures) > self._max_clients:
                self._failures.popitem(last=False)


__all__ = [
    "AUTHENTICATION_FAILED",
    "CREDENTIAL_CHECK_S",
    "DEFAULT_SESSION_LIFETIME_MS",
    "SESSION_COOKIE",
    "LoginLimiter",
    "PasswordVerifier",
    "Session",
    "SessionStore",
    "VerifiedLogin",
    "authentication_required",
    "controller_credentials",
]
