"""Re-wrap rotation and the commands (issue 42, items 1 and 2): ``veil load
--key-provider``, ``veil keygen --provider``, ``veil rotate --rewrap`` and
``veil status``, on a loaded client directory whose queries keep answering.

A rotation moves the same master key under a new KEK of the same provider or
of another (KMIP -> PKCS#11 -> passphrase file -> KMIP); the data is never
touched. A process killed anywhere in ``veil rotate`` leaves a key file that
opens, old or new; a rotation cut just before or after its rename does too.
``veil serve`` answers a connection whose key provider is down with SQLSTATE
08001 and opens nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from tests.keys.conftest import pkcs11_uri, require
from tests.keys.servers import KmipServer
from veil._native import WireServer
from veil.cli import main
from veil.errors import KeyFileError, KeyProviderError
from veil.keys import create_key, key_status, load_key, rewrap_key
from veil.load.loader import load
from veil.serve.engine import Engine

pytestmark = pytest.mark.integration

VEIL = [sys.executable, "-m", "veil"]
COUNT = "SELECT count(*), sum(amount) FROM payments WHERE id > 10"
EXPECTED = [(40, sum(range(11, 51)) * 3)]


def load_payments(root: Path, key_file: str | None = None, key_provider: str | None = None) -> Path:
    table = pa.table(
        {"id": pa.array(range(1, 51), pa.int64()), "amount": [i * 3 for i in range(1, 51)]}
    )
    pq.write_table(table, root / "payments.parquet")
    cdir = root / "client"
    load(
        str(root / "payments.parquet"),
        f"duckdb:///{root / 'server.duckdb'}",
        str(cdir),
        progress=lambda _: None,
        key_file=key_file,
        key_provider=key_provider,
    )
    return cdir


def query(cdir: Path) -> list[tuple[object, ...]]:
    with veil.connect(cdir) as connection:
        cursor = connection.cursor()
        cursor.execute(COUNT)
        return [tuple(row) for row in cursor.fetchall()]


def test_rewrap_across_providers_keeps_answers(
    kmip_server: KmipServer, softhsm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cdir = load_payments(tmp_path, key_provider=kmip_server.uri())
    key_file = cdir / "key.json"
    fingerprint = load_key(key_file).fingerprint()
    assert json.loads(key_file.read_text())["version"] == 2
    assert query(cdir) == EXPECTED
    server_bytes = (tmp_path / "server.duckdb").read_bytes()

    first_kek = json.loads(key_file.read_text())["provider"]["key_id"]
    status = rewrap_key(key_file)  # a new KEK on the same KMIP server
    assert (status.provider, status.kek_version) == ("kmip", 2)
    assert json.loads(key_file.read_text())["provider"]["key_id"] != first_kek
    assert query(cdir) == EXPECTED

    assert rewrap_key(key_file, pkcs11_uri(softhsm, "veil-2")).provider == "pkcs11"
    assert query(cdir) == EXPECTED
    with pytest.raises(KeyFileError, match="needs a new passphrase"):
        rewrap_key(key_file, "file")
    status = rewrap_key(key_file, "file", new_passphrase="a long passphrase")
    assert status.describe() == "file: passphrase (Argon2id), key-encryption key version 4"
    monkeypatch.setenv("VEIL_PASSPHRASE", "a long passphrase")
    assert query(cdir) == EXPECTED
    status = rewrap_key(key_file, kmip_server.uri())
    monkeypatch.delenv("VEIL_PASSPHRASE")
    assert (status.provider, status.kek_version, status.fingerprint) == ("kmip", 5, fingerprint)
    assert query(cdir) == EXPECTED
    # a re-wrap touches no data: the server's file is as it was
    assert (tmp_path / "server.duckdb").read_bytes() == server_bytes


def test_commands(
    kmip_server: KmipServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "client.key"
    assert main(["keygen", str(key_file), "--provider", kmip_server.uri()]) == 0
    out = capsys.readouterr().out
    assert "wrapped by kmip: kmip://127.0.0.1" in out
    cdir = load_payments(tmp_path, key_file=str(key_file))
    assert query(cdir) == EXPECTED
    assert main(["status", str(cdir)]) == 0
    out = capsys.readouterr().out
    assert "key-encryption key version 1" in out and "payments: all under this master key" in out
    assert main(["rotate", str(cdir), "--rewrap"]) == 0
    out = capsys.readouterr().out
    assert "now: kmip:" in out and "version 2" in out and "no data was touched" in out
    # a re-key of a KMIP-kept key: the new key sealed under the same KEK
    assert main(["rotate", str(cdir), "--rekey"]) == 0
    assert "every table is under generation 2" in capsys.readouterr().out
    after = key_status(cdir / "key.json")
    assert (after.provider, after.kek_version, after.generation) == ("kmip", 2, 2)
    assert query(cdir) == EXPECTED
    assert main(["rotate", str(cdir), "--rekey", "--provider", kmip_server.uri()]) == 2
    assert "--rekey keeps the key where it is" in capsys.readouterr().err
    assert main(["load", "--source", str(tmp_path / "payments.parquet"), "--server",
                 f"duckdb:///{tmp_path / 'other.duckdb'}", "--client-dir", str(tmp_path / "c2"),
                 "--key", str(key_file), "--key-provider", kmip_server.uri()]) == 2  # fmt: skip
    assert "not both" in capsys.readouterr().err
    assert query(cdir) == EXPECTED


def test_help_loads_no_provider_library() -> None:
    code = "import sys; from veil.cli import build_parser; build_parser(); " + (
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'kmip', 'pkcs11', 'sqlalchemy'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_rotation_cut_before_or_after_its_rename(
    kmip_server: KmipServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cdir = load_payments(tmp_path, key_provider=kmip_server.uri())
    key_file = cdir / "key.json"
    before = key_file.read_bytes()

    def crash(*_: object) -> None:
        raise OSError("killed")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", crash)
        with pytest.raises(KeyFileError, match="the old key file, if any, is unchanged"):
            rewrap_key(key_file)
    assert key_file.read_bytes() == before  # the old file, whole
    assert (cdir / ".key.json.new").exists()  # the new one never took its place
    assert query(cdir) == EXPECTED
    assert rewrap_key(key_file).kek_version == 2  # the leftover is cleared
    assert not (cdir / ".key.json.new").exists()
    assert query(cdir) == EXPECTED


def test_killed_rotations_leave_an_openable_key(kmip_server: KmipServer, tmp_path: Path) -> None:
    cdir = load_payments(tmp_path, key_provider=kmip_server.uri())
    key_file = cdir / "key.json"
    fingerprint = load_key(key_file).fingerprint()
    rotate = [*VEIL, "rotate", str(cdir), "--rewrap"]
    started = time.monotonic()
    subprocess.run(rotate, stdout=subprocess.DEVNULL, check=True)
    whole = time.monotonic() - started  # how long one rotation takes on this machine now
    # killed at twelve points spread over a rotation: while Python starts, while a KEK
    # is made, while the file is written, after; each time the key file opens to the
    # same key (which point each kill hit is not asserted: the machine's load decides)
    for step in range(1, 13):
        process = subprocess.Popen(rotate, stdout=subprocess.DEVNULL)
        time.sleep(whole * step / 12)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert load_key(key_file).fingerprint() == fingerprint
        assert key_status(key_file).kek_version >= 2
    assert query(cdir) == EXPECTED


def test_serve_answers_08001_when_the_provider_is_down(tmp_path: Path) -> None:
    require("kmip", "PyKMIP is not installed (pip install -e '.[keys]')")
    (tmp_path / "kmip").mkdir()
    kmip = KmipServer(tmp_path / "kmip")
    kmip.start()
    try:
        cdir = load_payments(tmp_path, key_provider=kmip.uri())
    finally:
        kmip.stop()
    engine = Engine(cdir)
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    try:
        port = server.address.rsplit(":", 1)[1]
        # the wire server opens a connection's session when it first needs it
        url = f"host=127.0.0.1 port={port} user=alice dbname=veil"
        with pytest.raises(psycopg.Error) as caught, psycopg.connect(url) as pg:
            pg.execute(COUNT)
        assert caught.value.sqlstate == "08001"
        assert "cannot reach the key provider" in str(caught.value)
    finally:
        server.stop()
        engine.close()
    with pytest.raises(KeyProviderError):
        veil.connect(cdir)


def test_concurrent_rotations_take_turns(kmip_server: KmipServer, tmp_path: Path) -> None:
    key_file = tmp_path / "client.key"
    fingerprint = create_key(key_file, kmip_server.uri()).fingerprint()
    errors: list[BaseException] = []

    def rotate_twice() -> None:
        try:
            for _ in range(2):
                rewrap_key(key_file)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=rotate_twice) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert key_status(key_file).kek_version == 9  # each of the 8 rotations counted once
    assert load_key(key_file).fingerprint() == fingerprint
