"""``veil init``: an empty encrypted database that psql and the DB-API CREATE TABLE into."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from veil._native import WireServer
from veil.dbapi import connect
from veil.errors import VeilError
from veil.frontend.init import init
from veil.serve.engine import Engine

CANARY = "init-canary-5d1e"


def _veil(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veil", *args], capture_output=True, text=True, timeout=120
    )


def test_psql_creates_tables_in_an_empty_database(tmp_path: Path) -> None:
    server = tmp_path / "server.duckdb"
    made = _veil("init", str(tmp_path / "client"), "--server", f"duckdb:///{server}")
    assert made.returncode == 0, made.stderr
    assert "keep it safe" in made.stdout and (tmp_path / "client" / "key.json").exists()
    engine = Engine(tmp_path / "client")
    wire = WireServer(engine, "127.0.0.1:0", None, None, True)
    port = wire.address.rsplit(":", 1)[1]
    try:
        with psycopg.connect(f"host=127.0.0.1 port={port} user=app dbname=veil") as con:
            con.execute(
                "CREATE TABLE accounts (id integer PRIMARY KEY, owner text NOT NULL, "
                "balance numeric(12,2) DEFAULT 0)"
            )
            con.execute("INSERT INTO accounts (id, owner) VALUES (1, %s), (2, 'bob')", [CANARY])
            con.commit()
            rows = con.execute("SELECT id, owner, balance FROM accounts ORDER BY id").fetchall()
            assert [(r[0], r[1], float(r[2])) for r in rows] == [(1, CANARY, 0.0), (2, "bob", 0.0)]
            with pytest.raises(psycopg.errors.UniqueViolation):
                con.execute("INSERT INTO accounts (id, owner) VALUES (1, 'again')")
    finally:
        wire.stop()
        engine.close()
    assert CANARY.encode() not in server.read_bytes()


def test_the_db_api_creates_tables_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    client = init(tmp_path / "client", postgres_url)
    with connect(str(client.path)) as con:
        con.execute("CREATE TABLE notes (id bigint PRIMARY KEY, body text)")
        con.execute("INSERT INTO notes VALUES (1, 'one'), (2, 'two')")
        con.commit()
        assert con.execute("SELECT body FROM notes WHERE id = 2").fetchall() == [("two",)]


def test_init_refuses_a_used_directory_and_an_unreachable_server(tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(VeilError, match="not empty"):
        init(tmp_path / "used", f"duckdb:///{tmp_path / 's.duckdb'}")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = _veil(
        "init", str(tmp_path / "new"), "--server", f"postgresql://u@127.0.0.1:{port}/db"
    )
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "cannot connect" in refused.stderr
    assert not (tmp_path / "new").exists()  # nothing half-made
