"""``veil user add|list|remove`` against a running ``veil serve``: real psycopg clients."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from veil._native import WireServer
from veil.serve import users
from veil.serve.engine import Engine

PASSWORD = "correct horse battery"


@pytest.fixture
def client_dir(veil_env: dict[str, object], tmp_path: Path) -> Path:
    source = Path(str(veil_env["root"]))
    shutil.copytree(source / "client", tmp_path / "client")
    return tmp_path / "client"


@pytest.fixture
def port(client_dir: Path) -> Iterator[str]:
    server = WireServer(Engine(client_dir), "127.0.0.1:0", None, None, False)
    yield server.address.rsplit(":", 1)[1]
    server.stop()


def _veil(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veil", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _connect(port: str, user: str) -> psycopg.Connection:
    return psycopg.connect(
        f"host=127.0.0.1 port={port} user={user} dbname=veil password='{PASSWORD}'"
    )


def test_users_are_listed_added_and_removed_while_the_server_runs(
    client_dir: Path, port: str
) -> None:
    listed = _veil("user", "list", str(client_dir))
    assert listed.returncode == 0 and listed.stdout == "" and "no users yet" in listed.stderr
    for name in ("bob", "alice"):
        added = _veil("user", "add", str(client_dir), name, "--password-stdin", stdin=PASSWORD)
        assert added.returncode == 0, added.stderr
    assert _veil("user", "list", str(client_dir)).stdout.splitlines() == [
        "alice\tadmin",
        "bob\tadmin",
    ]
    with _connect(port, "bob") as open_connection:  # a new user connects at once
        removed = _veil("user", "remove", str(client_dir), "bob")
        assert removed.returncode == 0, removed.stderr
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _connect(port, "bob")
        # a connection already open goes on, as with PostgreSQL's DROP ROLE
        assert open_connection.execute("SELECT 1").fetchone() == (1,)
    with _connect(port, "alice") as other:
        assert other.execute("SELECT 1").fetchone() == (1,)
    assert users.names(client_dir) == ["alice"]
    assert (client_dir / users.USERS_FILE).stat().st_mode & 0o777 == 0o600


def test_removing_an_unknown_user_names_the_users(client_dir: Path) -> None:
    users.add(client_dir, "alice", PASSWORD)
    refused = _veil("user", "remove", str(client_dir), "mallory")
    assert refused.returncode != 0
    assert "no user 'mallory'" in refused.stderr and "alice" in refused.stderr
    assert users.names(client_dir) == ["alice"]
