"""Key files and key derivation: permissions, no overwrite, passphrases, labels."""

from __future__ import annotations

import json
import os
import stat

import pytest

from veil.cli import main as veil_main
from veil.crypto.keys import KeyLabel, MasterKey, load_key_file, write_key_file
from veil.errors import KeyFileError, WrongKeyError

pytestmark = pytest.mark.unit


def test_key_file_is_private_and_round_trips(tmp_path):
    path = tmp_path / "client.key"
    written = write_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_key_file(path).fingerprint() == written.fingerprint()


def test_key_file_is_never_overwritten(tmp_path):
    path = tmp_path / "client.key"
    write_key_file(path)
    before = path.read_bytes()
    with pytest.raises(KeyFileError, match="already exists"):
        write_key_file(path)
    assert path.read_bytes() == before


def test_group_readable_key_file_is_refused(tmp_path):
    path = tmp_path / "client.key"
    write_key_file(path)
    os.chmod(path, 0o640)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_key_file(path)


def test_missing_and_foreign_files_give_clear_errors(tmp_path):
    with pytest.raises(KeyFileError, match="veil keygen"):
        load_key_file(tmp_path / "absent.key")
    foreign = tmp_path / "foreign.key"
    foreign.write_text(json.dumps({"hello": "world"}))
    os.chmod(foreign, 0o600)
    with pytest.raises(KeyFileError, match="not a Veil key file"):
        load_key_file(foreign)


def test_passphrase_protects_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("VEIL_PASSPHRASE", raising=False)
    path = tmp_path / "client.key"
    written = write_key_file(path, passphrase="correct horse")
    assert "key" in json.loads(path.read_text())
    assert load_key_file(path, "correct horse").fingerprint() == written.fingerprint()
    with pytest.raises(WrongKeyError, match="wrong passphrase"):
        load_key_file(path, "battery staple")
    with pytest.raises(KeyFileError, match="VEIL_PASSPHRASE"):
        load_key_file(path)
    monkeypatch.setenv("VEIL_PASSPHRASE", "correct horse")
    assert load_key_file(path).fingerprint() == written.fingerprint()


def test_labels_separate_purposes():
    master = MasterKey(bytes(range(32)))
    det = master.derive(KeyLabel("det", "orders.o_custkey"))
    assert len(det) == 32
    assert det == master.derive(KeyLabel("det", "orders.o_custkey"))
    assert det != master.derive(KeyLabel("ope", "orders.o_custkey"))
    assert det != master.derive(KeyLabel("det", "orders.o_custkey", version=2))
    # Length-prefixed parts: moving a boundary gives a different label.
    assert KeyLabel("de", "torders").info() != KeyLabel("det", "orders").info()


def test_hkdf_matches_rfc5869_construction():
    # Cross-check against an independent HKDF-SHA256 (RFC 5869 §2.2-2.3).
    import hashlib
    import hmac

    secret = bytes(range(32))
    label = KeyLabel("rnd", "t.c")
    prk = hmac.new(b"\x00" * 32, secret, hashlib.sha256).digest()
    okm = hmac.new(prk, label.info() + b"\x01", hashlib.sha256).digest()
    assert MasterKey(secret).derive(label) == okm


def test_keys_never_show_themselves(tmp_path, capsys):
    master = MasterKey(bytes(range(32)))
    assert bytes(range(32)).hex() not in repr(master)
    path = tmp_path / "cli.key"
    assert veil_main(["keygen", str(path)]) == 0
    secret = json.loads(path.read_text())["key"]
    out = capsys.readouterr()
    assert secret not in out.out + out.err
    assert veil_main(["keygen", str(path)]) == 2
    assert "already exists" in capsys.readouterr().err
