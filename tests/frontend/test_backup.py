"""``veil backup`` / ``veil restore``: a client directory and its server, on DuckDB and
PostgreSQL; the key kept apart; damaged backups and wrong keys refused; a dump taken
while another session writes is a consistent snapshot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from veil.crypto.keys import write_key_file
from veil.dbapi import connect
from veil.errors import VeilError, WrongKeyError
from veil.frontend.backup import BackupError, backup, restore
from veil.load.loader import load

ROWS = 200


def _load(tmp_path: Path, url: str) -> Path:
    source = tmp_path / "people.csv"
    lines = ["id,name,balance"] + [f"{i},person {i},{i * 7 % 1000}" for i in range(ROWS)]
    source.write_text("\n".join(lines) + "\n")
    client = tmp_path / "client"
    load(str(source), url, str(client), progress=lambda _: None)
    return client


def _rows(client: Path) -> list[tuple[object, ...]]:
    with connect(str(client)) as con:
        return con.execute("SELECT id, name, balance FROM people ORDER BY id").fetchall()


def test_a_duckdb_server_is_backed_up_and_restored_elsewhere(tmp_path: Path) -> None:
    client = _load(tmp_path, f"duckdb:///{tmp_path / 'server.duckdb'}")
    with connect(str(client)) as con:
        con.execute("INSERT INTO people VALUES (1000, 'added later', 5)")
        con.commit()
    want = _rows(client)
    (client / "derivations.sealed").write_bytes(b"\x01" + bytes(40))  # derived again instead
    done = subprocess.run(
        [sys.executable, "-m", "veil", "backup", str(client), str(tmp_path / "bk")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "holds no key" in done.stdout
    manifest = json.loads((tmp_path / "bk" / "manifest.json").read_text())
    assert manifest["tables"] == ["people"] and manifest["key_included"] is False
    assert not (tmp_path / "bk" / "client" / "key.json").exists()
    assert not (tmp_path / "bk" / "client" / "derivations.sealed").exists()
    assert (client / "plans.sealed").exists()  # the sessions above kept their plans
    assert not (tmp_path / "bk" / "client" / "plans.sealed").exists()
    assert (tmp_path / "bk" / "manifest.json").stat().st_mode & 0o777 == 0o600

    elsewhere = tmp_path / "other-machine"
    url = f"duckdb:///{elsewhere / 'server.duckdb'}"
    with pytest.raises(BackupError, match="holds no key"):
        restore(tmp_path / "bk", elsewhere / "client", url)
    write_key_file(tmp_path / "wrong.key")
    with pytest.raises(WrongKeyError):
        restore(tmp_path / "bk", elsewhere / "client", url, key_file=tmp_path / "wrong.key")
    assert not (elsewhere / "client").exists() and not (elsewhere / "server.duckdb").exists()
    restored = restore(tmp_path / "bk", elsewhere / "client", url, key_file=client / "key.json")
    assert _rows(restored.path) == want
    assert (restored.path / "key.json").stat().st_mode & 0o777 == 0o600
    assert _rows(client) == want  # the original is untouched
    with pytest.raises(BackupError, match="exists"):
        backup(client, tmp_path / "bk")
    with pytest.raises(BackupError, match="not empty"):
        restore(tmp_path / "bk", elsewhere / "client", url, key_file=client / "key.json")


def test_a_damaged_or_partial_backup_is_refused(tmp_path: Path) -> None:
    client = _load(tmp_path, f"duckdb:///{tmp_path / 'server.duckdb'}")
    backup(client, tmp_path / "bk", include_key=True)
    assert (tmp_path / "bk" / "client" / "key.json").exists()
    server = tmp_path / "bk" / "server.duckdb"
    data = bytearray(server.read_bytes())
    data[len(data) // 2] ^= 0xFF
    server.write_bytes(bytes(data))
    with pytest.raises(BackupError, match="damaged"):
        restore(tmp_path / "bk", tmp_path / "new", f"duckdb:///{tmp_path / 'new.duckdb'}")
    server.unlink()
    with pytest.raises(BackupError, match="incomplete"):
        restore(tmp_path / "bk", tmp_path / "new", f"duckdb:///{tmp_path / 'new.duckdb'}")
    with pytest.raises(BackupError, match="not a Veil backup"):
        restore(tmp_path, tmp_path / "new", f"duckdb:///{tmp_path / 'new.duckdb'}")
    assert not (tmp_path / "new").exists() and not (tmp_path / "new.duckdb").exists()


def test_a_postgres_dump_taken_during_writes_is_a_consistent_snapshot(
    tmp_path: Path, postgres_url: str, postgres_cluster: object
) -> None:
    client = _load(tmp_path, postgres_url)
    stop, failures = threading.Event(), []

    def write() -> None:  # ten rows a statement: a snapshot holds whole statements only
        try:
            with connect(str(client)) as con:
                start = 10_000
                while not stop.is_set():
                    values = ", ".join(f"({start + i}, 'w', {i})" for i in range(10))
                    con.execute(f"INSERT INTO people VALUES {values}")
                    con.commit()
                    start += 10
        except Exception as exc:
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        backup(client, tmp_path / "bk")
    finally:
        stop.set()
        writer.join()
    assert not failures, failures
    assert (tmp_path / "bk" / "server.pgdump").exists()

    schema = re.search(r"search_path%3D([a-z0-9_]+)", postgres_url)
    assert schema is not None
    database = f"restored_{schema.group(1)}"
    admin = postgres_cluster.url_for("postgres")  # type: ignore[attr-defined]
    with psycopg.connect(admin, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{database}"')
    target = postgres_cluster.create_schema(schema.group(1), database=database)  # type: ignore[attr-defined]
    restored = restore(tmp_path / "bk", tmp_path / "new", target, key_file=client / "key.json")
    rows = _rows(restored.path)
    written = [r for r in rows if int(r[0]) >= 10_000]  # type: ignore[call-overload]
    assert len(rows) - len(written) == ROWS and len(written) % 10 == 0
    assert rows[:ROWS] == _rows(client)[:ROWS]
    with pytest.raises(VeilError, match="already holds"):
        restore(tmp_path / "bk", tmp_path / "again", target, key_file=client / "key.json")
    assert not (tmp_path / "again").exists()
