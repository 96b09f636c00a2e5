"""A prepared statement's portal Describe (``veil-wire``'s handler): a command that
returns no rows is described as NoData without asking the engine; anything else
(a query, a write with RETURNING) is described by it. The answers are the same
either way, and an error in a command still reaches the client, at its Execute."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from veil_dev.bench.oltp import empty_client_dir, served

pytestmark = pytest.mark.integration


@pytest.fixture
def con(backend_url: str, tmp_path: Path) -> Iterator[psycopg.Connection]:
    with (
        served(empty_client_dir(tmp_path / "client", backend_url)) as port,
        psycopg.connect(f"host=127.0.0.1 port={port} user=bench dbname=veil") as con,
    ):
        con.execute("CREATE TABLE acc (aid INT PRIMARY KEY, bal INT)")
        con.execute("INSERT INTO acc VALUES (1, 10), (2, 20)")
        con.commit()
        yield con


def test_prepared_commands_and_queries(con: psycopg.Connection) -> None:
    for _ in range(3):  # prepared at once, then run again as the prepared statement
        cur = con.execute("BEGIN", prepare=True)
        assert cur.description is None
        cur = con.execute("UPDATE acc SET bal = bal + %s WHERE aid = %s", (5, 1), prepare=True)
        assert (cur.description, cur.rowcount, cur.statusmessage) == (None, 1, "UPDATE 1")
        cur = con.execute("SELECT bal FROM acc WHERE aid = %s", (1,), prepare=True)
        assert [d.name for d in cur.description or []] == ["bal"]
        assert cur.fetchall()
        cur = con.execute(
            "UPDATE acc SET bal = bal - %s WHERE aid = %s RETURNING aid, bal", (5, 2), prepare=True
        )
        assert [d.name for d in cur.description or []] == ["aid", "bal"]
        assert len(cur.fetchall()) == 1
        cur = con.execute("COMMIT", prepare=True)
        assert cur.description is None
    rows = con.execute("SELECT aid, bal FROM acc ORDER BY aid").fetchall()
    assert rows == [(1, 25), (2, 5)]


def test_an_error_in_a_prepared_command_reaches_the_client(con: psycopg.Connection) -> None:
    con.rollback()
    with pytest.raises(psycopg.Error) as caught:
        con.execute("UPDATE missing SET a = %s WHERE k = %s", (1, 2), prepare=True)
    assert caught.value.sqlstate is not None and caught.value.sqlstate != "XX000"
    con.rollback()
    assert con.execute("SELECT count(*) FROM acc", prepare=True).fetchone() == (2,)


def test_descriptions_follow_ddl_from_another_connection(backend_url: str, tmp_path: Path) -> None:
    """The wire server keeps a query's description until the design changes: another
    connection's ALTER TABLE shows in the next Describe of a statement described before."""
    query = "SELECT * FROM acc WHERE aid = %s"
    with served(empty_client_dir(tmp_path / "client", backend_url)) as port:
        dsn = f"host=127.0.0.1 port={port} user=bench dbname=veil"
        with psycopg.connect(dsn, autocommit=True) as one, psycopg.connect(dsn) as two:
            one.execute("CREATE TABLE acc (aid INT PRIMARY KEY, bal INT)")
            one.execute("INSERT INTO acc VALUES (1, 10)")
            for _ in range(3):  # described by the engine, then from the kept description
                cur = two.execute(query, (1,), prepare=False)
                assert [d.name for d in cur.description or []] == ["aid", "bal"]
                assert cur.fetchall() == [(1, 10)]
            two.rollback()
            one.execute("ALTER TABLE acc ADD COLUMN note VARCHAR")
            cur = two.execute(query, (1,), prepare=False)
            assert [d.name for d in cur.description or []] == ["aid", "bal", "note"]
            assert cur.fetchall() == [(1, 10, None)]
