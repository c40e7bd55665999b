"""The console's login without a Ray cluster: passwords checked against SCRAM credentials
made exactly as the controller stores them (``Admin.add_scram_user``'s salting, then
``scram_control.credential_of``), sessions and their cookie, expiry on a manual clock,
logout, a removed or changed credential, the failed-login limit, Kafka's authorization
errors as 403, and HTTPS from Kafka's PEM keys with a CA made in the test.

The app runs on a :class:`rayqueue.cluster.Cluster` that reaches no actor: only the pages,
the login routes and what needs no cluster call are asked for here. The same login against
a real cluster with ACLs is in ``test_console_auth.py``, in a real browser in
``test_console_browser.py``."""

from __future__ import annotations

import hashlib
import secrets
import socket
import ssl
import time
from http.cookies import SimpleCookie

import httpx
import pytest
from fastapi.testclient import TestClient

from actors.clock import ManualClock
from actors.config import broker_config
from actors.controller.scram_control import credential_of
from actors.protocol_security import ScramCredential, ScramMechanism
from rayqueue.cluster import Cluster
from rayqueue.console.app import ConsoleServer, console_ssl_context, create_app, error_response
from rayqueue.console.sessions import (
    CREDENTIAL_CHECK_S,
    DEFAULT_SESSION_LIFETIME_MS,
    SESSION_COOKIE,
    LoginLimiter,
    PasswordVerifier,
)
from rayqueue.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidConfigError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from scripts.make_test_ca import make_test_pki

OWN = "http://localhost"


class Users:
    """SCRAM credentials as the controller keeps them (salt, stored key, server key,
    iterations), made from passwords the way Admin.add_scram_user salts them."""

    def __init__(self) -> None:
        self.credentials: dict[tuple[str, str], ScramCredential] = {}
        self.lookups = 0

    def add(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512", iterations: int = 4096) -> None:
        kind = ScramMechanism.of_name(mechanism)
        salt = secrets.token_bytes(32)
        digest = "sha512" if kind is ScramMechanism.SCRAM_SHA_512 else "sha256"
        salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
        self.credentials[(user, mechanism)] = credential_of(kind, salt, salted, iterations)

    def remove(self, user: str) -> None:
        for key in [k for k in self.credentials if k[0] == user]:
            del self.credentials[key]

    def __call__(self, user: str, mechanism: str) -> ScramCredential | None:
        self.lookups += 1
        return self.credentials.get((user, mechanism))


def no_ray_cluster() -> Cluster:
    """A Cluster object whose controller is absent: any call to the cluster would fail."""
    return Cluster("rayqueue-login-test", None, broker_config())


@pytest.fixture
def users() -> Users:
    u = Users()
    u.add("alice", "alice-secret")
    u.add("bob", "bob-secret", "SCRAM-SHA-256")
    return u


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(users, clock):
    app = create_app(
        no_ray_cluster(),
        sample=False,
        authentication=True,
        credentials=users,
        login_limiter=LoginLimiter(max_failures=3, window_s=60.0, clock=clock),
        clock=clock,
    )
    app.state.authentication.failed_login_delay_s = 0.05
    return app


@pytest.fixture
def client(app):
    with TestClient(app, base_url=OWN, headers={"Origin": OWN}, raise_server_exceptions=False) as c:
        yield c


def login(client, user: str, password: str):
    return client.post("/api/login", json={"user": user, "password": password})


def set_cookie_of(resp) -> SimpleCookie:
    cookie = SimpleCookie()
    cookie.load(resp.headers["set-cookie"])
    return cookie


# -- the password check ---------------------------------------------------------------------


def test_password_checked_against_the_stored_credential(users):
    verifier = PasswordVerifier(users)
    alice = verifier.verify("alice", "alice-secret")
    assert alice is not None and alice.mechanism == "SCRAM-SHA-512"
    assert alice.credential == users.credentials[("alice", "SCRAM-SHA-512")]
    bob = verifier.verify("bob", "bob-secret")
    assert bob is not None and bob.mechanism == "SCRAM-SHA-256"
    assert verifier.verify("alice", "alice-secreT") is None
    assert verifier.verify("alice", "") is None
    assert verifier.verify("bob", "alice-secret") is None
    assert verifier.verify("carol", "anything") is None
    assert verifier.verify("", "alice-secret") is None
    # A password SASLprep refuses (a control character) matches nothing and raises nothing.
    assert verifier.verify("alice", "alice\x07secret") is None
    # A user with both credentials logs in with the stronger one's password.
    users.add("alice", "older-secret", "SCRAM-SHA-256")
    assert verifier.verify("alice", "older-secret") is None
    assert verifier.verify("alice", "alice-secret").mechanism == "SCRAM-SHA-512"


def test_an_unknown_user_costs_the_same_lookups_and_derivation(users, monkeypatch):
    import rayqueue.console.sessions as sessions

    derived: list[tuple[str, int]] = []
    real = sessions._matches

    def counting(mechanism, credential, password):
        derived.append((mechanism, credential.iterations))
        return real(mechanism, credential, password)

    monkeypatch.setattr(sessions, "_matches", counting)
    verifier = PasswordVerifier(users)
    before = users.lookups
    assert verifier.verify("alice", "wrong") is None
    known = users.lookups - before
    assert verifier.verify("nobody", "wrong") is None
    assert users.lookups - before == 2 * known  # every mechanism looked up either way
    assert derived == [("SCRAM-SHA-512", 4096), ("SCRAM-SHA-512", 4096)]  # one key derivation each


# -- login, cookie, pages ---------------------------------------------------------------------


def test_login_sets_a_strict_httponly_cookie_and_opens_the_pages(client):
    # Without a session: the API says so, pages go to the login page and back.
    resp = client.get("/api/overview")
    assert resp.status_code == 401 and resp.json()["error"] == "LOGIN_REQUIRED"
    resp = client.get("/topics/t?x=1", follow_redirects=False)
    assert resp.status_code == 303 and resp.headers["location"] == "/login?next=%2Ftopics%2Ft%3Fx%3D1"
    page = client.get("/login")
    assert page.status_code == 200 and 'id="login"' in page.text
    assert client.get("/static/login.js").status_code == 200
    assert client.get("/api/session").json() == {"authentication": True, "user": None, "principal": None}

    resp = login(client, "alice", "alice-secret")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["user"] == "alice" and body["principal"] == "User:alice" and body["mechanism"] == "SCRAM-SHA-512"
    assert "alice-secret" not in resp.text
    morsel = set_cookie_of(resp)[SESSION_COOKIE]
    assert len(morsel.value) >= 40  # token_urlsafe(32)
    assert morsel["httponly"] is True and morsel["samesite"].lower() == "strict" and morsel["path"] == "/"
    assert not morsel["secure"]  # plain HTTP: a Secure cookie would never come back
    assert int(morsel["max-age"]) == DEFAULT_SESSION_LIFETIME_MS // 1000
    assert client.get("/api/session").json()["principal"] == "User:alice"
    assert client.get("/", follow_redirects=False).status_code == 200
    # Each login is a new session id (no fixation).
    again = set_cookie_of(login(client, "alice", "alice-secret"))[SESSION_COOKIE].value
    assert again != morsel.value


def test_failed_logins_are_refused_with_kafkas_error_after_a_pause(client, app):
    for user, password in (("alice", "not-alices-password"), ("nobody", "alice-secret")):
        started = time.monotonic()
        resp = login(client, user, password)
        assert time.monotonic() - started >= app.state.authentication.failed_login_delay_s
        assert resp.status_code == 401
        assert resp.json()["error"] == "SASL_AUTHENTICATION_FAILED" and resp.json()["code"] == 58
        assert "set-cookie" not in resp.headers
        assert password not in resp.text
    assert client.get("/api/session").json()["user"] is None
    # Malformed logins: refused before any check, the password never echoed.
    resp = client.post("/api/login", json={"user": "", "password": "p4ssw0rd-echo"})
    assert resp.status_code == 422 and "p4ssw0rd-echo" not in resp.text
    resp = client.post("/api/login", json={"user": "alice", "password": "x" * 5000})
    assert resp.status_code == 422 and "xxxx" not in resp.text


def test_failed_logins_per_client_are_limited(client, clock, users):
    for _ in range(3):
        assert login(client, "alice", "guess").status_code == 401
    before = users.lookups
    # The limit reached: refused without looking at the password, even the right one.
    resp = login(client, "alice", "alice-secret")
    assert resp.status_code == 429 and resp.json()["error"] == "THROTTLING_QUOTA_EXCEEDED"
    assert 1 <= int(resp.headers["retry-after"]) <= 60
    assert users.lookups == before
    clock.advance(60_000)  # the failures age out of the window
    assert login(client, "alice", "alice-secret").status_code == 200
    # A success forgets the failures.
    for _ in range(2):
        assert login(client, "alice", "guess").status_code == 401
    assert login(client, "alice", "alice-secret").status_code == 200
    assert login(client, "alice", "guess").status_code == 401


def test_the_limiter_counts_attempts_under_way_and_stays_bounded(clock):
    limiter = LoginLimiter(max_failures=2, window_s=10.0, clock=clock, max_clients=3)
    assert limiter.begin("a") == 0 and limiter.begin("a") == 0
    assert limiter.begin("a") > 0  # two still being checked: a third waits
    limiter.done("a", None)  # could not be checked: no one's fault
    assert limiter.begin("a") == 0
    limiter.done("a", False)
    limiter.done("a", False)
    wait = limiter.begin("a")
    assert 0 < wait <= 10
    clock.advance(10_000)
    assert limiter.begin("a") == 0
    limiter.done("a", True)
    for client in ("b", "c", "d", "e"):
        assert limiter.begin(client) == 0
        limiter.done(client, False)
    assert len(limiter._failures) == 3  # the oldest client forgotten


def test_sessions_expire_and_logout_ends_them(client, clock):
    cookie = set_cookie_of(login(client, "alice", "alice-secret"))[SESSION_COOKIE].value
    clock.advance(DEFAULT_SESSION_LIFETIME_MS - 1000)
    assert client.get("/", follow_redirects=False).status_code == 200
    clock.advance(1000)
    resp = client.get("/api/transactions")
    assert resp.status_code == 401 and "expired" in resp.json()["message"]
    assert client.get("/api/session").json()["user"] is None
    # The stale cookie is forgotten in the browser too.
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, cookie)
    resp = client.get("/", follow_redirects=False)
    assert resp.status_code == 303 and set_cookie_of(resp)[SESSION_COOKIE]["max-age"] == "0"

    client.cookies.clear()
    login(client, "bob", "bob-secret")
    assert client.get("/", follow_redirects=False).status_code == 200
    kept = client.cookies.get(SESSION_COOKIE)
    resp = client.post("/api/logout")
    assert resp.json() == {"logged_out": True}
    morsel = set_cookie_of(resp)[SESSION_COOKIE]
    assert morsel["max-age"] == "0" and morsel["httponly"] is True and morsel["samesite"].lower() == "strict"
    # Replaying the cookie after logout gets nothing.
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, kept)
    assert client.get("/api/groups").status_code == 401
    assert client.post("/api/logout").json() == {"logged_out": False}


def test_a_removed_or_changed_credential_ends_its_sessions(client, clock, users):
    login(client, "alice", "alice-secret")
    users.remove("alice")
    # Within CREDENTIAL_CHECK_S the session stands (the gateways' cache has the same bound).
    assert client.get("/", follow_redirects=False).status_code == 200
    clock.advance(CREDENTIAL_CHECK_S * 1000)
    resp = client.get("/api/topics")
    assert resp.status_code == 401 and "SCRAM-SHA-512 credential of alice was removed" in resp.json()["message"]

    users.add("alice", "alice-secret")  # the same password, a new salt: a changed credential
    login(client, "alice", "alice-secret")
    clock.advance(CREDENTIAL_CHECK_S * 1000)
    assert client.get("/", follow_redirects=False).status_code == 200  # unchanged: checked, kept
    users.add("alice", "new-secret")
    clock.advance(CREDENTIAL_CHECK_S * 1000)
    resp = client.get("/api/topics")
    assert resp.status_code == 401 and "was changed" in resp.json()["message"]
    assert login(client, "alice", "alice-secret").status_code == 401
    assert login(client, "alice", "new-secret").status_code == 200


def test_login_and_logout_are_refused_from_another_origin(app):
    with TestClient(app, base_url=OWN, raise_server_exceptions=False) as stranger:
        evil = {"Origin": "http://evil.example"}
        resp = stranger.post("/api/login", json={"user": "alice", "password": "alice-secret"}, headers=evil)
        assert resp.status_code == 403 and resp.json()["error"] == "CROSS_ORIGIN_REQUEST"
        assert "set-cookie" not in resp.headers


def test_without_authentication_there_is_no_login(users):
    app = create_app(no_ray_cluster(), sample=False, authentication=False, credentials=users)
    with TestClient(app, base_url=OWN, headers={"Origin": OWN}) as c:
        assert c.get("/api/session").json() == {"authentication": False, "user": None, "principal": None}
        assert c.get("/", follow_redirects=False).status_code == 200
        assert c.get("/login", follow_redirects=False).headers["location"] == "/"
        resp = login(c, "alice", "alice-secret")
        assert resp.status_code == 400 and "set-cookie" not in resp.headers
    assert users.lookups == 0


@pytest.mark.parametrize(
    ("error", "name"),
    [
        (TopicAuthorizationFailedError, "TOPIC_AUTHORIZATION_FAILED"),
        (GroupAuthorizationFailedError, "GROUP_AUTHORIZATION_FAILED"),
        (ClusterAuthorizationFailedError, "CLUSTER_AUTHORIZATION_FAILED"),
        (TransactionalIdAuthorizationFailedError, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
    ],
)
def test_an_authorization_error_is_403_with_kafkas_name(error, name):
    resp = error_response(error("User:alice may not DELETE topic t"))
    assert resp.status_code == 403
    assert resp.body == (
        b'{"error":"' + name.encode() + b'","code":' + str(error.code).encode() + b',"message":'
        b'"User:alice may not DELETE topic t"}'
    )


# -- HTTPS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(tmp_path_factory.mktemp("console-pki"), key_password="key-secret")


def test_console_tls_from_kafkas_pem_keys(pki, tmp_path):
    assert console_ssl_context(broker_config()) is None  # no key named: plain HTTP
    located = console_ssl_context(
        broker_config({"ssl.keystore.location": str(pki.broker), "ssl.key.password": "key-secret"})
    )
    assert isinstance(located, ssl.SSLContext)
    # Chain and key as PEM text (KIP-651); ssl.client.auth of the listeners is not the console's.
    pem = pki.broker.read_text()
    key = pem[: pem.index("-----END ENCRYPTED PRIVATE KEY-----") + len("-----END ENCRYPTED PRIVATE KEY-----")]
    chain = pem[len(key) :].strip()
    text = console_ssl_context(
        broker_config(
            {
                "ssl.keystore.certificate.chain": chain,
                "ssl.keystore.key": key,
                "ssl.key.password": "key-secret",
                "ssl.client.auth": "required",
                "ssl.truststore.location": str(pki.ca),
            }
        )
    )
    assert text.verify_mode == ssl.CERT_NONE
    with pytest.raises(InvalidConfigError, match="cannot load"):
        console_ssl_context(broker_config({"ssl.keystore.location": str(pki.broker), "ssl.key.password": "wrong"}))
    with pytest.raises(InvalidConfigError, match="does not exist"):
        console_ssl_context(broker_config({"ssl.keystore.location": str(tmp_path / "missing.pem")}))


def test_https_login_sets_a_secure_cookie_and_the_guard_takes_https_origins(pki, users):
    context = console_ssl_context(
        broker_config({"ssl.keystore.location": str(pki.broker), "ssl.key.password": "key-secret"})
    )
    server = ConsoleServer(
        no_ray_cluster(),
        "127.0.0.1",
        0,
        ssl_context=context,
        authentication=True,
        app_options={"credentials": users, "sample": False},
    ).start()
    try:
        assert server.url.startswith("https://127.0.0.1:")
        origin = f"https://localhost:{server.port}"
        trusted = ssl.create_default_context(cafile=str(pki.ca))
        with httpx.Client(base_url=origin, verify=trusted, headers={"Origin": origin}) as c:
            resp = c.post("/api/login", json={"user": "alice", "password": "alice-secret"})
            assert resp.status_code == 200, resp.text
            morsel = set_cookie_of(resp)[SESSION_COOKIE]
            assert morsel["secure"] is True and morsel["httponly"] is True and morsel["samesite"].lower() == "strict"
            assert c.get("/api/session").json()["principal"] == "User:alice"
            # The same page over plain HTTP, or posting from the http origin: refused.
            resp = c.post("/api/logout", headers={"Origin": f"http://localhost:{server.port}"})
            assert resp.status_code == 403 and resp.json()["error"] == "CROSS_ORIGIN_REQUEST"
            resp = c.post("/api/logout")
            assert resp.json() == {"logged_out": True}
            expired = set_cookie_of(resp)[SESSION_COOKIE]
            assert expired["secure"] is True and expired["max-age"] == "0"
        # A client that does not trust the test CA cannot talk to it.
        with pytest.raises(httpx.ConnectError), httpx.Client(verify=True) as c:
            c.get(f"{origin}/login")
        # Plain HTTP to the TLS port gets no page.
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET /login HTTP/1.1\r\nHost: localhost\r\n\r\n")
            answer = sock.recv(4096)
        assert b"login" not in answer
    finally:
        server.stop()


def test_the_cookie_lasts_as_long_as_the_session(users):
    app = create_app(
        no_ray_cluster(), sample=False, authentication=True, credentials=users, session_lifetime_ms=3_600_000
    )
    with TestClient(app, base_url=OWN, headers={"Origin": OWN}) as c:
        resp = login(c, "alice", "alice-secret")
        morsel = set_cookie_of(resp)[SESSION_COOKIE]
        assert morsel["max-age"] == "3600"
        assert abs(resp.json()["expires_at_ms"] / 1000 - (time.time() + 3600)) < 120


def test_the_oldest_session_ends_past_the_cap(users, clock):
    from rayqueue.console.sessions import SessionStore

    closed: list[str] = []

    class View:
        def __init__(self, principal: str) -> None:
            self.principal = principal

        def close(self) -> None:
            closed.append(self.principal)

    verifier = PasswordVerifier(users)
    store = SessionStore(View, verifier, lifetime_ms=60_000, max_sessions=2, clock=clock)
    first = store.open(verifier.verify("alice", "alice-secret"))
    second = store.open(verifier.verify("bob", "bob-secret"))
    third = store.open(verifier.verify("alice", "alice-secret"))
    assert len(store) == 2 and closed == ["User:alice"]
    assert store.get(first.session_id)[0] is None
    assert store.get(second.session_id)[0] is second and store.get(third.session_id)[0] is third
    # Expired sessions are swept when the next one opens, their views closed.
    clock.advance(60_000)
    store.open(verifier.verify("bob", "bob-secret"))
    assert len(store) == 1 and closed == ["User:alice", "User:bob", "User:alice"]
    store.close()
    assert len(store) == 0


def test_failed_logins_per_user_are_limited_whatever_the_address(clock, users):
    limiter = LoginLimiter(max_failures=100, max_user_failures=3, window_s=60.0, clock=clock)
    for i in range(3):
        assert limiter.begin(f"10.0.0.{i}", "alice") == 0
        limiter.done(f"10.0.0.{i}", False, "alice")
    assert 0 < limiter.begin("10.0.0.99", "alice") <= 60  # a new address: alice is refused all the same
    assert limiter.begin("10.0.0.99", "bob") == 0  # another user is not
    limiter.done("10.0.0.99", True, "bob")
    clock.advance(60_000)
    assert limiter.begin("10.0.0.99", "alice") == 0
    limiter.done("10.0.0.99", True, "alice")  # a success forgets the user's failures
    assert limiter.begin("10.0.0.5", "alice") == 0


def _forged_logins(server, attempts: int, user=lambda i: "alice") -> list[int]:
    """Failed logins each claiming another client address in X-Forwarded-For; their statuses."""
    origin = f"http://localhost:{server.port}"
    with httpx.Client(base_url=origin, headers={"Origin": origin}) as c:
        return [
            c.post(
                "/api/login",
                json={"user": user(i), "password": "guess"},
                headers={"X-Forwarded-For": f"203.0.113.{i}"},
            ).status_code
            for i in range(attempts)
        ]


def _console(users, **options) -> ConsoleServer:
    server = ConsoleServer(
        no_ray_cluster(),
        "127.0.0.1",
        0,
        authentication=True,
        app_options={"credentials": users, "sample": False},
        **options,
    )
    server.app.state.authentication.failed_login_delay_s = 0.01
    return server.start()


def test_forwarded_headers_are_not_believed_unless_the_proxy_is_trusted(users):
    """A brute force that changes X-Forwarded-For each time meets the 429: by default the
    header is ignored (the address is the TCP peer's), and from a trusted proxy the user's
    own limit counts every address."""
    server = _console(users)
    try:
        statuses = _forged_logins(server, 7, user=lambda i: f"user-{i}")
        assert statuses[:5] == [401] * 5 and statuses[5:] == [429, 429]  # all from 127.0.0.1
    finally:
        server.stop()
    server = _console(users, trusted_proxies=["127.0.0.1"])
    try:
        # Believed: seven addresses with one failure each, no limit met...
        assert _forged_logins(server, 7, user=lambda i: f"user-{i}") == [401] * 7
        # ...but one user's failures count over every address.
        statuses = _forged_logins(server, 12)
        assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
    finally:
        server.stop()
