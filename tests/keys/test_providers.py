"""Key providers (issue 42, item 1): the master key wrapped by a KEK that a real PyKMIP
server or a SoftHSM2 token holds, and key files of version 1 opening as before.

The key file of a provider holds no byte of the master key (checked against
the secret in raw, base64 and hex); an unreachable provider, a wrong TLS
certificate, a wrong PIN, a deleted KEK and a tampered envelope each give a
clear error.
"""

from __future__ import annotations

import base64
import json
import os
import warnings
from pathlib import Path

import pytest

from tests.keys.conftest import pkcs11_uri, require
from tests.keys.servers import KmipServer, make_certificates
from veil.crypto.keys import MasterKey, load_key_file, write_key_file
from veil.errors import KeyFileError, KeyProviderError, WrongKeyError
from veil.keys import create_key, key_status, load_key
from veil.keys.envelope import ENVELOPE_VERSION
from veil.sqlstates import sqlstate

pytestmark = pytest.mark.integration


def secret_of(key: MasterKey) -> bytes:
    return key.sealed_by(lambda secret: secret)


def assert_holds_no_key(path: Path, key: MasterKey) -> None:
    raw = path.read_bytes()
    secret = secret_of(key)
    for form in (secret, base64.b64encode(secret), secret.hex().encode()):
        assert form not in raw


def test_version_1_key_files_open_unchanged(key_path: Path, tmp_path: Path) -> None:
    plain = write_key_file(key_path)
    assert load_key(key_path).fingerprint() == plain.fingerprint()
    assert key_status(key_path).wrapped_by == "nothing (plain key file)"
    protected = write_key_file(tmp_path / "p.key", "correct horse")
    assert load_key(tmp_path / "p.key", "correct horse").fingerprint() == protected.fingerprint()
    assert key_status(tmp_path / "p.key").describe().startswith("file: passphrase")
    with pytest.raises(WrongKeyError):
        load_key(tmp_path / "p.key", "wrong")


def test_kmip_round_trip(kmip_server: KmipServer, key_path: Path) -> None:
    key = create_key(key_path, kmip_server.uri())
    assert_holds_no_key(key_path, key)
    assert key_path.stat().st_mode & 0o777 == 0o600
    assert load_key(key_path).fingerprint() == key.fingerprint()
    document = json.loads(key_path.read_text())
    assert document["version"] == 2 and document["provider"]["kind"] == "kmip"
    assert base64.b64decode(document["wrapped"])[0] == ENVELOPE_VERSION
    status = key_status(key_path)
    assert (status.provider, status.kek_version) == ("kmip", 1)
    # veil.crypto's reader of plain key files points at the provider-aware one
    with pytest.raises(KeyFileError, match=r"veil\.keys\.load_key"):
        load_key_file(key_path)
    with pytest.raises(KeyFileError, match="already exists"):
        create_key(key_path, kmip_server.uri())


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.4"])
def test_kmip_protocol_versions(kmip_server: KmipServer, key_path: Path, version: str) -> None:
    """KMIP 1.0 already has Create, Activate and Get: all Veil asks of a server."""
    key = create_key(key_path, f"{kmip_server.uri()}&version={version}")
    assert f"version={version}" in key_status(key_path).wrapped_by
    assert load_key(key_path).fingerprint() == key.fingerprint()


def test_a_destroyed_kmip_kek_is_named(kmip_server: KmipServer, key_path: Path) -> None:
    create_key(key_path, kmip_server.uri())
    key_id = json.loads(key_path.read_text())["provider"]["key_id"]
    c = kmip_server.certs
    with warnings.catch_warnings():  # PyKMIP's own deprecated calls
        warnings.simplefilter("ignore", DeprecationWarning)
        from kmip.core import enums
        from kmip.pie.client import ProxyKmipClient

        with ProxyKmipClient(
            hostname="127.0.0.1", port=kmip_server.port, cert=str(c.client_cert),
            key=str(c.client_key), ca=str(c.ca), config_file=os.devnull,
        ) as client:  # fmt: skip
            client.revoke(enums.RevocationReasonCode.KEY_COMPROMISE, key_id)
            client.destroy(key_id)
    with pytest.raises(KeyProviderError, match="the server has no such key"):
        load_key(key_path)


def test_kmip_unreachable_is_a_clear_error(tmp_path: Path, key_path: Path) -> None:
    require("kmip", "PyKMIP is not installed (pip install -e '.[keys]')")
    (tmp_path / "kmip").mkdir()
    server = KmipServer(tmp_path / "kmip")
    server.start()
    try:
        create_key(key_path, server.uri())
    finally:
        server.stop()
    with pytest.raises(KeyProviderError, match="cannot reach the key provider kmip://") as caught:
        load_key(key_path)
    assert sqlstate(caught.value) == "08001"
    assert "nothing was opened" in str(caught.value)


def test_kmip_refuses_a_certificate_of_another_ca(
    kmip_server: KmipServer, key_path: Path, tmp_path: Path
) -> None:
    create_key(key_path, kmip_server.uri())
    (tmp_path / "stranger").mkdir()
    stranger = make_certificates(tmp_path / "stranger")
    document = json.loads(key_path.read_text())
    uri = kmip_server.uri(certs=stranger)
    with pytest.raises(KeyProviderError, match=r"cannot reach|refused"):
        create_key(tmp_path / "other.key", uri)
    # the envelope is bound to its provider's reference: swapping it for another fails
    document["provider"]["key_id"] = "999999"
    key_path.write_text(json.dumps(document))
    with pytest.raises((KeyProviderError, WrongKeyError)):
        load_key(key_path)


def test_tampered_envelope_fails_authentication(kmip_server: KmipServer, key_path: Path) -> None:
    create_key(key_path, kmip_server.uri())
    document = json.loads(key_path.read_text())
    raw = bytearray(base64.b64decode(document["wrapped"]))
    raw[-1] ^= 1
    document["wrapped"] = base64.b64encode(bytes(raw)).decode()
    key_path.write_text(json.dumps(document))
    with pytest.raises(WrongKeyError):
        load_key(key_path)
    raw[0] = 0x7F  # an envelope version this Veil does not know
    document["wrapped"] = base64.b64encode(bytes(raw)).decode()
    key_path.write_text(json.dumps(document))
    with pytest.raises(KeyFileError, match="envelope version 127"):
        load_key(key_path)


def test_pkcs11_round_trip(softhsm: str, key_path: Path) -> None:
    import pkcs11

    key = create_key(key_path, pkcs11_uri(softhsm))
    assert_holds_no_key(key_path, key)
    assert load_key(key_path).fingerprint() == key.fingerprint()
    status = key_status(key_path)
    assert status.provider == "pkcs11" and "token=veil" in status.wrapped_by
    # the KEK was made inside the token and can never leave it
    key_id = bytes.fromhex(json.loads(key_path.read_text())["provider"]["key_id"])
    token = pkcs11.lib(softhsm).get_token(token_label="veil")
    with token.open(user_pin="1234") as session:
        kek = session.get_key(object_class=pkcs11.ObjectClass.SECRET_KEY, id=key_id)
        assert kek[pkcs11.Attribute.EXTRACTABLE] is False
        assert kek[pkcs11.Attribute.SENSITIVE] is True


def test_pkcs11_errors(
    softhsm: str, key_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pkcs11

    create_key(key_path, pkcs11_uri(softhsm))
    monkeypatch.setenv("VEIL_PKCS11_PIN", "0000")
    with pytest.raises(KeyProviderError, match="the user PIN is wrong") as caught:
        load_key(key_path)
    assert "0000" not in str(caught.value)
    monkeypatch.delenv("VEIL_PKCS11_PIN")
    with pytest.raises(KeyProviderError, match="VEIL_PKCS11_PIN"):
        load_key(key_path)
    pin_file = tmp_path / "pin"
    pin_file.write_text("1234\n")
    uri = pkcs11_uri(softhsm) + f"&pin-source=file:{pin_file}"
    assert load_key(_key_with(tmp_path / "b.key", uri)).fingerprint()
    with pytest.raises(KeyProviderError, match="pin-source"):
        create_key(tmp_path / "c.key", pkcs11_uri(softhsm) + "&pin-value=1234")
    with pytest.raises(KeyProviderError, match="does not exist"):
        create_key(tmp_path / "d.key", "pkcs11:token=veil?module-path=/nonexistent/lib.so")
    with pytest.raises(KeyProviderError, match="no token with that label"):
        create_key(tmp_path / "e.key", pkcs11_uri(softhsm, token="no-such-token"))
    # a KEK deleted from the token: the key cannot be unwrapped, and the error says so
    monkeypatch.setenv("VEIL_PKCS11_PIN", "1234")
    key_id = bytes.fromhex(json.loads(key_path.read_text())["provider"]["key_id"])
    with pkcs11.lib(softhsm).get_token(token_label="veil").open(user_pin="1234", rw=True) as s:
        s.get_key(object_class=pkcs11.ObjectClass.SECRET_KEY, id=key_id).destroy()
    with pytest.raises(KeyProviderError, match="has no key-encryption key"):
        load_key(key_path)


def _key_with(path: Path, uri: str) -> Path:
    create_key(path, uri)
    return path


def test_unknown_provider_is_refused(key_path: Path) -> None:
    with pytest.raises(KeyProviderError, match="unknown key provider"):
        create_key(key_path, "vault://somewhere")
    assert not key_path.exists()


def test_key_value_store_opens_with_a_provider_key(softhsm: str, tmp_path: Path) -> None:
    import veil.kv

    key_file = tmp_path / "kv.key"
    create_key(key_file, pkcs11_uri(softhsm))
    with veil.kv.open(f"sqlite:{tmp_path / 'store.db'}", key_file) as store:
        store.put(42, b"value")
    with veil.kv.open(f"sqlite:{tmp_path / 'store.db'}", key_file) as store:
        assert store.get(42) == b"value"
