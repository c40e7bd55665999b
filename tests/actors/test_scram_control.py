"""SCRAM users in the controller without Ray: Kafka's checks of AlterUserScramCredentials and
DescribeUserScramCredentials, what the metadata log holds (never the password), and a
replay that rebuilds them."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from scramp import ScramClient

from actors.controller.quorum_controller import QuorumController
from actors.controller.scram_control import ScramControlManager, credential_of
from actors.metadata_log import MetadataLog
from actors.names import METADATA_TOPIC
from actors.protocol_security import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    ScramMechanism,
)
from storage.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SALT = b"0123456789abcdef"


def salted(password: str, mechanism: ScramMechanism = SHA512, iterations: int = 4096, salt: bytes = SALT) -> bytes:
    """What a Kafka client sends (KIP-554): Hi(password, salt, iterations)."""
    name = "sha512" if mechanism is SHA512 else "sha256"
    return hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)


def upsert(user: str, password: str, mechanism: ScramMechanism = SHA512, iterations: int = 4096):
    return ScramCredentialUpsertion(user, int(mechanism), iterations, SALT, salted(password, mechanism, iterations))


def alter(manager: ScramControlManager, deletions=(), upsertions=()):
    result = manager.alter(AlterUserScramCredentialsRequest(tuple(deletions), tuple(upsertions)))
    for record in result.records:
        manager.replay(record)
    return result


def test_a_credential_logs_in_with_the_password_and_not_with_another():
    manager = ScramControlManager()
    result = alter(manager, upsertions=[upsert("alice", "alice-secret", iterations=8192)])
    assert [(r.user, r.error_code) for r in result.response] == [("alice", 0)]
    credential = manager.credential("alice", "SCRAM-SHA-512")
    assert credential is not None and credential.iterations == 8192
    for password, ok in (("alice-secret", True), ("wrong", False)):
        # A real SCRAM exchange (scramp's client) against the stored and server keys.
        from scramp import ScramMechanism as Mech

        server = Mech("SCRAM-SHA-512").make_server(
            lambda _u: (credential.salt, credential.stored_key, credential.server_key, credential.iterations)
        )
        client = ScramClient(["SCRAM-SHA-512"], "alice", password)
        server.set_client_first(client.get_client_first())
        client.set_server_first(server.get_server_first())
        if ok:
            server.set_client_final(client.get_client_final())
            client.set_server_final(server.get_server_final())
        else:
            with pytest.raises(Exception, match="keys don't match|proof"):
                server.set_client_final(client.get_client_final())


def test_the_records_hold_no_password_nor_salted_password():
    manager = ScramControlManager()
    result = alter(manager, upsertions=[upsert("bob", "bob-secret", SHA256)])
    text = json.dumps(result.records)
    assert "bob-secret" not in text
    assert salted("bob-secret", SHA256).hex() not in text
    import base64

    assert base64.b64encode(salted("bob-secret", SHA256)).decode() not in text
    assert result.records[0]["type"] == "user_scram_credential"
    assert set(result.records[0]) == {"type", "name", "mechanism", "salt", "stored_key", "server_key", "iterations"}


def test_describe_lists_mechanisms_and_iterations():
    manager = ScramControlManager()
    alter(manager, upsertions=[upsert("alice", "a", SHA512, 8192), upsert("carol", "c", SHA256)])
    alter(manager, upsertions=[upsert("alice", "a", SHA256, 4096)])
    everyone = manager.describe(None)
    assert [(r.user, r.credential_infos) for r in everyone] == [
        ("alice", ((1, 4096), (2, 8192))),
        ("carol", ((1, 4096),)),
    ]
    assert manager.describe([]) == everyone
    named = manager.describe(["carol", "nobody", "alice", "alice"])
    codes = {r.user: r.error_code for r in named}
    assert codes == {"carol": 0, "nobody": ResourceNotFoundError.code, "alice": DuplicateResourceError.code}


@pytest.mark.parametrize(
    ("upsertion", "code", "message"),
    [
        (upsert("", "x"), UnacceptableCredentialError.code, "Username must not be empty"),
        (upsert("dave", "x", iterations=4095), UnacceptableCredentialError.code, "Too few iterations"),
        (
            ScramCredentialUpsertion("dave", 2, 16385, SALT, salted("x", SHA512, 4096)),
            UnacceptableCredentialError.code,
            "Too many iterations",
        ),
        (ScramCredentialUpsertion("dave", 0, 4096, SALT, b"x"), UnsupportedSaslMechanismError.code, "Unknown SCRAM"),
        (ScramCredentialUpsertion("dave", 7, 4096, SALT, b"x"), UnsupportedSaslMechanismError.code, "Unknown SCRAM"),
    ],
)
def test_bad_upsertions_are_refused_with_kafkas_errors(upsertion, code, message):
    manager = ScramControlManager()
    result = alter(manager, upsertions=[upsertion])
    assert result.records == []
    assert result.response[0].error_code == code
    assert message in result.response[0].error_message
    assert manager.credentials == {}


def test_one_bad_alteration_refuses_all_of_that_users_and_none_of_anothers():
    manager = ScramControlManager()
    result = alter(
        manager,
        deletions=[ScramCredentialDeletion("erin", int(SHA256))],  # erin has none: RESOURCE_NOT_FOUND
        upsertions=[upsert("erin", "e", SHA512), upsert("frank", "f", SHA512)],
    )
    assert {r.user: r.error_code for r in result.response} == {"erin": ResourceNotFoundError.code, "frank": 0}
    assert manager.credential("erin", "SCRAM-SHA-512") is None
    assert manager.credential("frank", "SCRAM-SHA-512") is not None
    twice = alter(manager, deletions=[ScramCredentialDeletion("frank", 2)], upsertions=[upsert("frank", "g")])
    assert twice.response[0].error_code == DuplicateResourceError.code
    assert manager.credential("frank", "SCRAM-SHA-512") is not None


def test_delete_removes_the_user_when_no_mechanism_is_left():
    manager = ScramControlManager()
    alter(manager, upsertions=[upsert("gina", "g", SHA256), upsert("gina", "g", SHA512)])
    alter(manager, deletions=[ScramCredentialDeletion("gina", 1)])
    assert [r.credential_infos for r in manager.describe(["gina"])] == [((2, 4096),)]
    alter(manager, deletions=[ScramCredentialDeletion("gina", 2)])
    assert manager.describe(None) == []
    assert manager.describe(["gina"])[0].error_code == ResourceNotFoundError.code


def test_credential_matches_rfc5802_keys():
    salted_password = salted("pencil", SHA256)
    credential = credential_of(SHA256, SALT, salted_password, 4096)
    from scramp import ScramMechanism as Mech

    salt, stored_key, server_key, iterations = Mech("SCRAM-SHA-256").make_auth_info("pencil", 4096, SALT)
    assert (credential.salt, credential.stored_key, credential.server_key, credential.iterations) == (
        salt,
        stored_key,
        server_key,
        iterations,
    )


def test_users_survive_a_controller_restart_and_a_bad_record_is_skipped(tmp_path):
    config = {"log.dirs": str(tmp_path), "rayqueue.num.brokers": 1}
    quorum = QuorumController(config, rng=random.Random(1))
    quorum.commit(quorum.scram.alter(AlterUserScramCredentialsRequest(upsertions=(upsert("alice", "s"),))))
    before = quorum.scram.credential("alice", "SCRAM-SHA-512")
    quorum.close()
    # A record that is not what the controller writes (a mechanism it does not know) is
    # skipped by the replay, not the end of the start.
    log = MetadataLog(tmp_path / f"{METADATA_TOPIC}-0")
    log.append({"type": "user_scram_credential", "name": "x", "mechanism": "MD5", "salt": "", "stored_key": "",
                "server_key": "", "iterations": 1})  # fmt: skip
    log.close()
    again = QuorumController(config, rng=random.Random(1))
    try:
        assert again.scram.credential("alice", "SCRAM-SHA-512") == before
        assert again.scram.credential("x", "MD5") is None
        assert again.skipped.count == 1
    finally:
        again.close()
