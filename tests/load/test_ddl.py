"""DDL through Veil (DB-API): CREATE TABLE [AS SELECT], ALTER, TRUNCATE, DROP, CREATE INDEX.

Every change is checked by querying the table afterwards, on both backends,
and a canary checks that rows written to new tables reach the server only as
ciphertexts.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

import veil
from veil.design.model import DET, OPE
from veil.load.loader import load
from veil.session.session import Session
from veil.sql.errors import NotNullViolationError, QueryError, UnsupportedStatementError


@pytest.fixture
def con(backend_url: str, tmp_path: Path) -> Iterator[veil.dbapi.Connection]:
    source = tmp_path / "source"
    source.mkdir()
    (source / "people.csv").write_text("id,name\n1,ann\n2,bob\n")
    load(str(source), backend_url, str(tmp_path / "client"), progress=lambda _: None)
    connection = veil.connect(tmp_path / "client")
    yield connection
    connection.close()


def rows(con: veil.dbapi.Connection, sql: str) -> list[tuple[object, ...]]:
    return con.execute(sql).fetchall()


def test_create_insert_alter_truncate_drop(con: veil.dbapi.Connection) -> None:
    con.execute(
        "CREATE TABLE visits (id BIGINT, day DATE, note VARCHAR, amount DECIMAL(10,2)) "
        "WITH (det = 'id', ope = 'day', sum = 'amount')"
    )
    table = con.session.design.tables["visits"]
    assert table.find("id", DET) is not None and table.find("day", OPE) is not None
    assert table.find("note", DET) is None  # fetch-only unless asked for
    con.execute(
        "INSERT INTO visits VALUES (1, DATE '2024-01-02', 'a', 10.50), (2, NULL, NULL, 3.25)"
    )
    assert rows(con, "SELECT sum(amount), count(day) FROM visits WHERE id = 1") == [
        (Decimal("10.50"), 1)
    ]
    con.execute("ALTER TABLE visits ADD COLUMN tag VARCHAR DEFAULT 'new'")
    con.execute("ALTER TABLE visits RENAME COLUMN note TO remark")
    con.execute("ALTER TABLE visits DROP COLUMN amount")
    assert rows(con, "SELECT * FROM visits ORDER BY id") == [
        (1, dt.date(2024, 1, 2), "a", "new"),
        (2, None, None, "new"),
    ]
    kept = con.session.design.tables["visits"]
    assert kept.find("id", DET) is not None and kept.find("day", OPE) is not None
    assert [d[0] for d in con.execute("SELECT * FROM visits").description] == [
        "id",
        "day",
        "remark",
        "tag",
    ]
    con.execute("CREATE INDEX v_id ON visits (id)")
    assert rows(con, "SELECT remark FROM visits WHERE id = 1") == [("a",)]
    con.execute("TRUNCATE visits")
    assert rows(con, "SELECT count(*) FROM visits") == [(0,)]
    con.execute("DROP TABLE visits")
    assert ("visits",) not in rows(con, "SHOW TABLES")
    with pytest.raises(QueryError, match="does not exist"):
        con.execute("SELECT * FROM visits")
    con.execute("DROP TABLE IF EXISTS visits")


def test_create_table_as_select(con: veil.dbapi.Connection) -> None:
    con.execute("CREATE TABLE named AS SELECT id * 10 AS big, upper(name) AS shout FROM people")
    assert rows(con, "SELECT * FROM named ORDER BY big") == [(10, "ANN"), (20, "BOB")]
    con.execute("CREATE TABLE IF NOT EXISTS named AS SELECT 1 AS x")  # already there: nothing
    assert rows(con, "SELECT count(*) FROM named") == [(2,)]


def test_clear_refusals(con: veil.dbapi.Connection) -> None:
    with pytest.raises(UnsupportedStatementError, match="Veil enforces"):
        con.execute("CREATE TABLE t (id INT COLLATE nocase)")
    with pytest.raises(QueryError, match="already exists"):
        con.execute("CREATE TABLE people (id INT)")
    with pytest.raises(UnsupportedStatementError, match="unknown table option"):
        con.execute("CREATE TABLE t (id INT) WITH (fast = 'id')")
    with pytest.raises(QueryError, match="no column"):
        con.execute("CREATE TABLE t (id INT) WITH (det = 'nope')")
    con.execute("CREATE TABLE fetched (name VARCHAR)")  # no options: stored for fetching only
    with pytest.raises(QueryError, match="fetching only"):
        con.execute("CREATE INDEX i ON fetched (name)")
    con.execute("CREATE INDEX i ON people (name)")  # loaded as onions: its DET onion
    with pytest.raises(QueryError, match="a table keeps at least one"):
        con.execute("ALTER TABLE people DROP COLUMN id, DROP COLUMN name")
    assert rows(con, "SELECT count(*) FROM people") == [(2,)]  # untouched


def test_other_sessions_see_ddl(con: veil.dbapi.Connection) -> None:
    other = Session(con.session.client.path)
    try:
        con.execute("CREATE TABLE shared (v INTEGER)")
        con.execute("INSERT INTO shared VALUES (7)")
        assert other.run("SELECT v FROM shared").table.to_pylist() == [{"v": 7}]
        con.execute("DROP TABLE shared")
        with pytest.raises(QueryError):
            other.run("SELECT v FROM shared")
    finally:
        other.close()


def test_new_tables_hold_only_ciphertexts(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "seed.csv").write_text("x\n1\n")
    server = tmp_path / "server.duckdb"
    load(str(source), f"duckdb:///{server}", str(tmp_path / "client"), progress=lambda _: None)
    canary = "ddl-canary-5d1e"
    with veil.connect(tmp_path / "client") as con:
        con.execute("CREATE TABLE secrets (s VARCHAR, n INTEGER) WITH (det = 's')")
        con.execute(f"INSERT INTO secrets VALUES ('{canary}', 424242)")
        con.execute("ALTER TABLE secrets ADD COLUMN t VARCHAR")
        con.execute("CREATE TABLE copied AS SELECT s || '-copy' AS s FROM secrets")
        assert rows(con, "SELECT s FROM copied") == [(f"{canary}-copy",)]
    copy = tmp_path / "copy.duckdb"
    shutil.copy(server, copy)
    stored = copy.read_bytes()
    assert canary.encode() not in stored and b"secrets" not in stored and b"copied" not in stored


def test_not_null_is_enforced_before_anything_is_written(con: veil.dbapi.Connection) -> None:
    con.execute("CREATE TABLE strict (id INT NOT NULL, note VARCHAR NULL, n BIGINT)")
    con.execute("INSERT INTO strict VALUES (1, NULL, NULL), (2, 'b', 2)")
    for bad in (
        "INSERT INTO strict VALUES (NULL, 'x', 1)",
        "INSERT INTO strict (note) VALUES ('no id')",
        "INSERT INTO strict SELECT NULL, 'y', 3",
        "UPDATE strict SET id = NULL WHERE id = 2",
        "UPDATE strict SET id = CASE WHEN id = 1 THEN NULL ELSE id END",
    ):
        with pytest.raises(NotNullViolationError, match='column "id" of relation "strict"'):
            con.execute(bad)
    assert rows(con, "SELECT * FROM strict ORDER BY id") == [(1, None, None), (2, "b", 2)]
    nullable = rows(
        con,
        "SELECT column_name, is_nullable FROM information_schema.columns "
        "WHERE table_name = 'strict' ORDER BY ordinal_position",
    )
    assert nullable == [("id", "NO"), ("note", "YES"), ("n", "YES")]  # ORMs reflect it
    con.execute("ALTER TABLE strict ADD COLUMN extra INT")  # a rebuild keeps NOT NULL
    with pytest.raises(NotNullViolationError):
        con.execute("INSERT INTO strict (id) VALUES (NULL)")
    con.execute("DROP TABLE strict")
