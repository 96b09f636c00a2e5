"""The trusted side is closed to SQL: what a ``veil serve`` user (or any session) cannot reach.

A catalogue of hostile statements, taken in part from DuckDB's own
``duckdb_functions()`` at test time (so a new DuckDB cannot add a table
function unseen), is sent through psycopg and psql to ``veil serve`` over
DuckDB and PostgreSQL servers, plain and inside CTEs, subqueries, prepared
statements and multi-statement strings: each is refused with SQLSTATE 42501,
and no answer, error or log line holds the client directory's key.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import psycopg
import pytest

import veil
from veil._native import WireServer
from veil.serve import users
from veil.serve.engine import Engine
from veil.session.session import Session
from veil.sql.errors import InsufficientPrivilegeError
from veil.sql.sandbox import CATALOG_TABLE_FUNCTIONS, TABLE_FUNCTIONS, TRUSTED_SIDE_FUNCTIONS

PASSWORD = "sandbox horse battery"

# Names that suggest state, files, the network or the environment: each DuckDB function
# so named is refused, or reviewed here as computing on its arguments alone.
_SUSPECT = re.compile(
    r"setting|variable|env|file|path|glob|read|secret|extension|log|query|sql|serial|invoke|"
    r"database|catalog|schema|connection|transaction|version|platform|inet|memory|pragma|"
    r"checkpoint|profil|attach|external|resource|http|s3|url"
)
_REVIEWED = {
    # the plaintext schema (the catalogue DuckDB holds an empty copy of it), or constants
    "current_database", "current_catalog", "current_schema", "current_schemas",
    "in_search_path", "pg_conf_load_time", "version", "pg_get_viewdef",
    # pure functions of their arguments
    "json_serialize_sql", "json_deserialize_sql", "json_valid", "json_extract_path",
    "json_extract_path_text", "parse_path", "parse_dirname", "parse_dirpath",
    "parse_filename", "array_to_string_comma_default", "has_database_privilege",
    "has_schema_privilege", "inet_client_addr", "inet_client_port", "inet_server_addr",
    "inet_server_port", "current_connection_id", "current_transaction_id", "current_query_id",
    "txid_current", "uuid_extract_version", "to_json", "list_reverse",
    "string_split_regex", "json_array_length", "json_extract", "regexp_extract",
    "invoke", "log", "log10", "log2", "path_join", "url_decode", "url_encode",
    "pg_conversion_is_visible", "pg_is_other_temp_schema", "pg_my_temp_schema",
    "transaction_timestamp",
}  # fmt: skip


def _duckdb_functions(kinds: tuple[str, ...]) -> list[str]:
    with duckdb.connect() as con:
        rows = con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type IN "
            f"({', '.join('?' for _ in kinds)}) ORDER BY 1",
            list(kinds),
        ).fetchall()
    return [str(r[0]) for r in rows]


def hostile_statements(key_path: str, *, wire: bool) -> list[str]:
    """Statements that reach for the trusted side; each must be refused with 42501."""
    key = key_path.replace("'", "''")
    table_functions = [
        name
        for name in _duckdb_functions(("table", "table_macro"))
        if name not in TABLE_FUNCTIONS | CATALOG_TABLE_FUNCTIONS  # the plaintext schema's
    ]
    statements = [f"SELECT * FROM {name}('{key}')" for name in table_functions]
    statements += [f"SELECT * FROM main.{name}('{key}')" for name in ("read_text", "read_blob")]
    statements += [f"SELECT * FROM {n}()" for n in ("duckdb_settings", "duckdb_extensions")]
    # scalars answered from PostgreSQL's settings on the wire (tested below)
    scalars = sorted(TRUSTED_SIDE_FUNCTIONS - ({"current_setting"} if wire else set()))
    statements += [f"SELECT {name}('{key}')" for name in scalars]
    statements += [
        f"ATTACH '{key}' AS stolen",
        "DETACH stolen",
        "INSTALL httpfs",
        "LOAD httpfs",
        "PRAGMA version",
        "PRAGMA database_list",
        "CALL pragma_version()",
        "SET enable_external_access = true",
        "SET threads = 1",
        "SET VARIABLE stolen = 1",
        "SET GLOBAL memory_limit = '1GB'",
        "RESET threads",
        "EXPORT DATABASE '/tmp/veil-export'",
        "IMPORT DATABASE '/tmp/veil-export'",
        f"COPY nation FROM '{key}'",
        "COPY nation TO '/tmp/veil-nation.csv'",
        "COPY (SELECT 1) TO PROGRAM 'id'",
        "CHECKPOINT",
        "USE memory",
        "CREATE SECRET stolen (TYPE s3, KEY_ID 'a', SECRET 'b')",
        # inside a CTE, a subquery, a join, a set operation, DML and DDL
        f"WITH k AS (SELECT * FROM read_text('{key}')) SELECT content FROM k",
        f"SELECT n_name FROM nation WHERE n_name IN (SELECT content FROM read_text('{key}'))",
        f"SELECT * FROM nation, LATERAL (SELECT * FROM read_blob('{key}')) AS b",
        f"SELECT n_name FROM nation UNION ALL SELECT content FROM read_text('{key}')",
        f"SELECT (SELECT content FROM read_text('{key}')) AS k",
        f"INSERT INTO nation SELECT 99, content, 0, '' FROM read_text('{key}')",
        f"UPDATE nation SET n_comment = (SELECT content FROM read_text('{key}'))",
        f"CREATE TABLE stolen AS SELECT * FROM read_text('{key}')",
        "SELECT * FROM query('SELECT 42')",
        "SELECT * FROM query_table('nation')",
    ]
    if not wire:
        statements.append("SELECT * FROM pg_settings")
    return statements


def _sqlstate(error: psycopg.Error) -> str | None:
    return error.sqlstate


# -- the DB-API and the CLI's session -------------------------------------------


def test_every_hostile_statement_is_refused_by_a_session(session: Session) -> None:
    key = str(session.client.path / "key.json")
    for sql in hostile_statements(key, wire=False):
        with pytest.raises(InsufficientPrivilegeError):
            session.run(sql)


def test_the_allowed_table_functions_still_run(session: Session) -> None:
    assert session.run("SELECT count(*) FROM range(5)").table.column(0)[0].as_py() == 5
    got = session.run(
        "SELECT count(*) FROM nation, generate_series(1, 3) AS g(i) WHERE n_nationkey < 2"
    )
    assert got.table.column(0)[0].as_py() == 6
    assert session.run("SELECT unnest([1, 2, 3]) AS u").table.num_rows == 3


def test_the_local_engines_are_locked(session: Session) -> None:
    for engine in (session.local, session.catalog):
        setting = "SELECT current_setting('enable_external_access')"
        assert engine.execute(setting).fetchone() == (False,)
        with pytest.raises(duckdb.Error):
            engine.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error):
            engine.execute("SET threads = 1")  # the configuration is locked


def test_an_application_may_opt_in_to_reading_its_files(session: Session, tmp_path: Path) -> None:
    """The DB-API's own process may read files it names, when it asks to."""
    data = tmp_path / "extra.csv"
    data.write_text("k,v\n1,one\n2,two\n")
    sql = f"SELECT count(*) FROM read_csv('{data}') AS e JOIN nation ON e.k = n_nationkey"
    with veil.connect(session.client.path) as locked, pytest.raises(InsufficientPrivilegeError):
        locked.execute(sql)
    with veil.connect(session.client.path, external_access=True) as opened:
        assert opened.execute(sql).fetchall() == [(2,)]
        with pytest.raises(InsufficientPrivilegeError):  # statement kinds still checked
            opened.execute("ATTACH '/tmp/x.duckdb'")


def test_suspect_duckdb_functions_are_refused_or_reviewed() -> None:
    """A DuckDB function whose name suggests state or files is refused, or reviewed here."""
    scalars = _duckdb_functions(("scalar", "aggregate", "macro", "window"))
    unreviewed = [
        name
        for name in scalars
        if _SUSPECT.search(name)
        and name not in TRUSTED_SIDE_FUNCTIONS
        and name not in _REVIEWED
        and not name.startswith(("icu_collate_", "collate_", "__internal"))
    ]
    assert unreviewed == [], (
        "new DuckDB functions that may read the trusted side: refuse them in "
        "veil.sql.sandbox.TRUSTED_SIDE_FUNCTIONS or review them in _REVIEWED"
    )


# -- through the wire -------------------------------------------------------------


@pytest.fixture(
    scope="module",
    params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, Session]]:
    """A SCRAM ``veil serve`` over a copy of the backend's client directory; (port, cdir, session)."""
    fixture = {"duckdb": "session", "postgres": "postgres_session"}[request.param]
    session: Session = request.getfixturevalue(fixture)
    client = tmp_path_factory.mktemp(f"sandbox-{request.param}") / "client"
    shutil.copytree(session.client.path, client)  # its own users.json
    users.add(client, "alice", PASSWORD)
    engine = Engine(client)
    server = WireServer(engine, "127.0.0.1:0", None, None, False)
    yield server.address.rsplit(":", 1)[1], client, session
    server.stop()
    engine.close()  # its sessions' server connections


def _connect(port: str) -> psycopg.Connection:
    return psycopg.connect(
        f"host=127.0.0.1 port={port} user=alice dbname=veil password='{PASSWORD}'",
        autocommit=True,
    )


def _key_canaries(client: Path) -> list[str]:
    """What of the key file must appear nowhere: its text, its key in base64 and hex."""
    text = (client / "key.json").read_text()
    key = json.loads(text)["key"]
    return [text.strip(), key, base64.b64decode(key).hex(), key[:16]]


def test_hostile_statements_are_refused_through_the_wire(
    served: tuple[str, Path, Session], caplog: pytest.LogCaptureFixture
) -> None:
    port, client, _ = served
    caplog.set_level(logging.DEBUG)
    key = str(client / "key.json")
    heard: list[str] = []
    wrong: list[tuple[str, str | None]] = []
    with _connect(port) as con:
        for sql in hostile_statements(key, wire=True):
            try:
                rows = con.execute(sql).fetchall()
                heard.append(repr(rows))
                wrong.append((sql, "answered"))
            except psycopg.Error as exc:
                heard.append(str(exc))
                if _sqlstate(exc) != "42501":
                    wrong.append((sql, _sqlstate(exc)))
        # prepared (extended protocol, with a parameter) and multi-statement strings
        for sql, params in [
            ("SELECT content FROM read_text(%s)", [key]),
            ("SELECT n_name FROM nation WHERE n_nationkey = %s AND n_name <> "
             f"(SELECT content FROM read_text('{key}'))", [1]),
        ]:  # fmt: skip
            try:
                heard.append(repr(con.execute(sql, params, prepare=True).fetchall()))
                wrong.append((sql, "answered"))
            except psycopg.Error as exc:
                heard.append(str(exc))
                if _sqlstate(exc) != "42501":
                    wrong.append((sql, _sqlstate(exc)))
        try:
            con.execute(f"SELECT 1; SELECT content FROM read_text('{key}'); SELECT 2")
            wrong.append(("multi-statement", "answered"))
        except psycopg.Error as exc:
            heard.append(str(exc))
            if _sqlstate(exc) != "42501":
                wrong.append(("multi-statement", _sqlstate(exc)))
        assert con.execute("SELECT count(*) FROM nation").fetchone() == (25,)  # still serving
    assert wrong == []
    said = "\n".join(heard + [r.getMessage() for r in caplog.records])
    for canary in _key_canaries(client):
        assert canary not in said


def test_settings_are_postgres_settings_on_the_wire(served: tuple[str, Path, Session]) -> None:
    """current_setting() and pg_settings answer from the connection's PostgreSQL settings."""
    port, _, _ = served
    with _connect(port) as con:
        con.execute("SET TimeZone = 'UTC'")
        assert con.execute("SELECT current_setting('TimeZone')").fetchone() == ("UTC",)
        with pytest.raises(psycopg.Error) as refused:
            con.execute("SELECT current_setting('temp_directory')")
        assert refused.value.sqlstate == "42704"
        names = {r[0] for r in con.execute("SELECT name FROM pg_settings").fetchall()}
        assert "timezone" in names and not names & {"temp_directory", "home_directory"}
        assert con.execute("SELECT current_setting('nope', true)").fetchone() == (None,)


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (postgresql-client) not installed")
def test_the_issues_two_statements_through_psql(served: tuple[str, Path, Session]) -> None:
    port, client, _ = served
    for sql in (
        f"SELECT content FROM read_text('{client / 'key.json'}')",
        "SELECT * FROM read_csv('/etc/passwd', header=false)",
    ):
        done = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", port, "-U", "alice", "-d", "veil", "-X",
             "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-c", sql],
            capture_output=True, text=True, timeout=60,
            env={"PGPASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode != 0
        assert "42501" in done.stderr and "permission denied" in done.stderr
        for canary in _key_canaries(client):
            assert canary not in done.stdout + done.stderr
