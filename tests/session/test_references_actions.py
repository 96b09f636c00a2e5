"""FOREIGN KEY actions (ON DELETE / ON UPDATE CASCADE, SET NULL, SET DEFAULT) as PostgreSQL runs them.

Each script runs statement by statement on a plaintext PostgreSQL schema and
through Veil (the DB-API and ``veil serve`` with psycopg, on DuckDB and
PostgreSQL servers): every statement must fail with the same SQLSTATE or
succeed on both, and the tables must then hold the same rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from veil.errors import VeilError
from veil.load.loader import load
from veil.serve.errors import wire_error

psycopg = pytest.importorskip("psycopg")

TABLES = ("p", "c", "n", "g", "pp", "cc", "tree")
SCRIPT = [
    "CREATE TABLE p (id INT PRIMARY KEY, name TEXT)",
    "CREATE TABLE c (id INT PRIMARY KEY, pid INT DEFAULT 2 REFERENCES p "
    "ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE n (id INT PRIMARY KEY, pid INT REFERENCES p ON DELETE SET NULL "
    "ON UPDATE SET DEFAULT)",
    "CREATE TABLE g (id INT PRIMARY KEY, cid INT NOT NULL REFERENCES c ON DELETE CASCADE "
    "ON UPDATE SET NULL)",
    "CREATE TABLE pp (a INT, b TEXT, PRIMARY KEY (a, b))",
    "CREATE TABLE cc (id INT PRIMARY KEY, a INT, b TEXT, FOREIGN KEY (a, b) REFERENCES pp (a, b) "
    "ON UPDATE CASCADE ON DELETE SET NULL)",
    "CREATE TABLE tree (id INT PRIMARY KEY, up INT REFERENCES tree ON DELETE CASCADE)",
    "INSERT INTO p VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
    "INSERT INTO c VALUES (10, 1), (11, 1), (12, 2), (13, 4)",
    "INSERT INTO n VALUES (20, 1), (21, 3), (22, NULL)",
    "INSERT INTO g VALUES (30, 10), (31, 12), (32, 13)",
    "INSERT INTO pp VALUES (1, 'x'), (1, 'y'), (2, 'x')",
    "INSERT INTO cc VALUES (40, 1, 'x'), (41, 1, 'y'), (42, 2, 'x'), (43, 1, NULL)",
    "INSERT INTO tree VALUES (1, NULL), (2, 1), (3, 2), (4, 1), (5, NULL)",
    "UPDATE p SET id = 5 WHERE id = 1",  # c follows (CASCADE), n's row gets its DEFAULT
    "UPDATE p SET name = 'bb' WHERE id = 2",  # the key stays: nothing to do
    "DELETE FROM p WHERE id = 5",  # c's rows go, and g's rows naming them
    "UPDATE c SET id = 14 WHERE id = 13",  # g.cid is NOT NULL: SET NULL refused
    "DELETE FROM p WHERE id = 3",  # n's row set null
    "UPDATE pp SET b = 'z' WHERE a = 1",  # composite CASCADE; a null b matches nothing
    "DELETE FROM pp WHERE a = 2",  # composite SET NULL
    "DELETE FROM tree WHERE id = 1",  # down the tree
    "BEGIN",
    "DELETE FROM p WHERE id = 4",
    "ROLLBACK",  # the cascade undone with the delete
    "UPDATE p SET id = 6 WHERE id = 2",  # c's row follows; its g row then set null: 23502
    "DELETE FROM g",
    "UPDATE p SET id = 6 WHERE id = 2",
    "CREATE TABLE d (id INT PRIMARY KEY, pid INT DEFAULT 99 REFERENCES p ON DELETE SET DEFAULT)",
    "INSERT INTO d VALUES (50, 6)",
    "DELETE FROM p WHERE id = 6",  # the default names no parent: 23503
]


class Veil:
    """Statements through Veil: the DB-API, or psycopg through ``veil serve``."""

    def __init__(self, client: Path, via: str) -> None:
        self.wire: Any = None
        if via == "dbapi":
            self.connection: Any = veil.connect(client)
            return
        from veil._native import WireServer
        from veil.serve.engine import Engine

        self.engine = Engine(client)
        self.wire = WireServer(self.engine, "127.0.0.1:0", None, None, True)
        port = self.wire.address.rsplit(":", 1)[1]
        self.connection = psycopg.connect(
            f"postgresql://app@127.0.0.1:{port}/veil", autocommit=True
        )

    def run(self, sql: str) -> str | None:
        try:
            self.connection.execute(sql)
        except VeilError as exc:
            return wire_error(exc).sqlstate
        except psycopg.Error as exc:
            return str(exc.sqlstate)
        return None

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        return list(self.connection.execute(sql).fetchall())

    def close(self) -> None:
        self.connection.close()
        if self.wire is not None:
            self.wire.stop()
            self.engine.close()


class Plain:
    """The same statements on a plaintext PostgreSQL schema."""

    def __init__(self, url: str) -> None:
        self.connection = psycopg.connect(url, autocommit=True)

    def run(self, sql: str) -> str | None:
        try:
            self.connection.execute(sql)
        except psycopg.Error as exc:
            if self.connection.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                self.connection.execute("ROLLBACK")
            return str(exc.sqlstate)
        return None

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        return list(self.connection.execute(sql).fetchall())


@pytest.fixture
def client(backend_url: str, tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    pq.write_table(pa.table({"x": pa.array([1], pa.int64())}), source / "seed.parquet")
    load(str(source), backend_url, str(tmp_path / "client"), progress=lambda _: None)
    return tmp_path / "client"


# unique in the run's one cluster however often this module is imported (test_sequences imports it)
_plain_schemas = iter(range(1, 1000))
_PREFIX = f"plain_actions_{uuid.uuid4().hex[:6]}"


@pytest.fixture
def plain(postgres_cluster: Any) -> Iterator[Plain]:
    url = postgres_cluster.create_schema(f"{_PREFIX}_{next(_plain_schemas)}")
    made = Plain(url)
    try:
        yield made
    finally:
        made.connection.close()


def same_as_postgresql(
    client: Path, via: str, plain: Plain, script: list[str], tables: tuple[str, ...]
) -> None:
    ours = Veil(client, via)
    try:
        for sql in script:
            assert ours.run(sql) == plain.run(sql), sql
        for table in tables:
            query = f"SELECT * FROM {table} ORDER BY 1, 2"
            assert ours.rows(query) == plain.rows(query), table
    finally:
        ours.close()


@pytest.mark.postgres
@pytest.mark.parametrize("via", ["dbapi", "wire"])
def test_actions_match_postgresql(client: Path, via: str, plain: Plain) -> None:
    same_as_postgresql(client, via, plain, SCRIPT, (*TABLES, "d"))
