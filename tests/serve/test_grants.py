"""GRANT and REVOKE through ``veil serve``: checked before anything is decrypted, 42501 as
PostgreSQL, through psycopg and psql, with the audit log recording each refusal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.tpch import copy_veil_env
from veil._native import WireServer
from veil.serve import users
from veil.serve.engine import Engine

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def served(
    veil_env: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    """A copy of the TPC-H client directory and server, an administrator and a clerk,
    behind a SCRAM server with the audit log on."""
    root = tmp_path_factory.mktemp("grants")
    copy_veil_env(veil_env, root)
    users.add(root / "client", "root", PASSWORD)
    users.add(root / "client", "clerk", PASSWORD, admin=False)
    engine = Engine(root / "client", audit=True)
    server = WireServer(engine, "127.0.0.1:0", None, None, False)
    yield root / "client", server.address.rsplit(":", 1)[1]
    server.stop()
    engine.close()


def _as(port: str, user: str) -> psycopg.Connection:
    return psycopg.connect(
        f"host=127.0.0.1 port={port} user={user} dbname=veil password='{PASSWORD}'",
        autocommit=True,
    )


def _refused(con: psycopg.Connection, sql: str, what: str) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=what):
        con.execute(sql)


def test_a_restricted_user_does_only_what_was_granted(served: tuple[Path, str]) -> None:
    client_dir, port = served
    with _as(port, "root") as root, _as(port, "clerk") as clerk:
        _refused(clerk, "SELECT r_name FROM region", "table region")
        _refused(clerk, "SELECT count(*) FROM region", "table region")
        root.execute("GRANT SELECT ON region TO clerk")
        assert len(clerk.execute("SELECT r_name FROM region").fetchall()) == 5
        assert clerk.execute("SELECT count(*) FROM region").fetchone() == (5,)

        root.execute("GRANT SELECT (c_custkey, c_name) ON TABLE customer TO clerk")
        assert clerk.execute("SELECT c_name FROM customer WHERE c_custkey = 1").fetchall()
        _refused(clerk, "SELECT c_phone FROM customer", "column c_phone of table customer")
        _refused(clerk, "SELECT * FROM customer", "of table customer")
        _refused(clerk, "SELECT c_name FROM customer WHERE c_acctbal > 0", "c_acctbal")
        _refused(  # a subquery's columns count too
            clerk,
            "SELECT r_name FROM region WHERE r_regionkey IN (SELECT n_regionkey FROM nation)",
            "nation",
        )

        _refused(clerk, "UPDATE region SET r_comment = 'x' WHERE r_regionkey = 1", "UPDATE")
        root.execute("GRANT UPDATE (r_comment) ON region TO clerk")
        clerk.execute("UPDATE region SET r_comment = 'checked' WHERE r_regionkey = 1")
        _refused(clerk, "UPDATE region SET r_name = 'x' WHERE r_regionkey = 1", "r_name")
        _refused(clerk, "DELETE FROM region WHERE r_regionkey = 4", "DELETE")
        _refused(clerk, "INSERT INTO region VALUES (9, 'X', 'y')", "INSERT")
        _refused(clerk, "CREATE TABLE mine (id int)", "administrator")
        _refused(clerk, "GRANT SELECT ON customer TO clerk", "administrator")

        root.execute("REVOKE SELECT ON region FROM clerk")  # the open connection sees it
        _refused(clerk, "SELECT r_name FROM region", "table region")
        assert root.execute("SELECT count(*) FROM customer").fetchone() is not None
        with pytest.raises(psycopg.errors.UndefinedObject):
            root.execute("GRANT SELECT ON region TO nobody")
        with pytest.raises(psycopg.errors.UndefinedTable):
            root.execute("GRANT SELECT ON no_such_table TO clerk")
        with pytest.raises(psycopg.errors.UndefinedColumn):
            root.execute("GRANT SELECT (no_such_column) ON region TO clerk")

    listed = subprocess.run(
        [sys.executable, "-m", "veil", "user", "list", str(client_dir)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "root\tadmin" in listed.stdout.splitlines()
    assert "clerk\tcustomer: SELECT(c_custkey, c_name); region: UPDATE(r_comment)" in (
        listed.stdout.splitlines()
    )
    records = [json.loads(line) for line in (client_dir / "audit.jsonl").read_text().splitlines()]
    refused = [r for r in records if r["user"] == "clerk" and r["sqlstate"] == "42501"]
    assert refused and all(not r.get("tables") for r in refused)  # nothing was decrypted


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (postgresql-client) not installed")
def test_grants_through_psql(served: tuple[Path, str]) -> None:
    _, port = served

    def psql(user: str, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", port, "-U", user, "-d", "veil", "-X", "-A", "-t"],
            input=script, capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "PGPASSWORD": PASSWORD},
        )  # fmt: skip

    denied = psql("clerk", "SELECT n_name FROM nation WHERE n_nationkey = 0;\n")
    assert "ERROR:  permission denied for table nation" in denied.stderr
    granted = psql("root", "GRANT SELECT ON nation TO clerk;\n")
    assert granted.stdout.strip() == "GRANT", granted.stderr
    allowed = psql("clerk", "SELECT n_name FROM nation WHERE n_nationkey = 0;\n")
    assert allowed.stdout.strip() == "ALGERIA", allowed.stderr
    assert psql("root", "REVOKE ALL ON nation FROM clerk;\n").stdout.strip() == "REVOKE"
    again = psql("clerk", "SELECT n_name FROM nation WHERE n_nationkey = 0;\n")
    assert "permission denied" in again.stderr
