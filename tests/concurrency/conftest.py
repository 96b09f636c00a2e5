"""Clients writing the same tables at once, each through its own ``veil.connect``.

Each test loads small tables into a fresh server on each backend (``backend_url``:
an embedded DuckDB file, a schema of the session's PostgreSQL cluster), runs a few
threads with a connection each, then checks its invariants on what the statements
reported. A statement may fail only with ``SerializationError`` (SQLSTATE 40001:
it collided with other writers on each of its attempts and changed nothing).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from veil.errors import SerializationError, VeilError
from veil.load.loader import load


@dataclass(frozen=True)
class Done:
    """One statement a client ran, and what it reported."""

    client: int
    sql: str
    rowcount: int | None  # None: it failed
    error: str | None = None  # the class of its error


@dataclass
class Race:
    """What every client's statements reported."""

    done: list[Done]

    def succeeded(self, starts: str = "") -> list[Done]:
        return [d for d in self.done if d.error is None and d.sql.startswith(starts)]

    def failures(self) -> Counter[str]:
        """The errors by class: anything but SerializationError is an anomaly."""
        return Counter(d.error for d in self.done if d.error is not None)


@pytest.fixture
def load_tables(backend_url: str, tmp_path: Path) -> Callable[[dict[str, pa.Table]], Path]:
    """Load ``{name: rows}`` into this test's server; returns the client directory."""

    def loaded(tables: dict[str, pa.Table]) -> Path:
        source = tmp_path / "source"
        source.mkdir()
        for name, rows in tables.items():
            pq.write_table(rows, source / f"{name}.parquet")
        client = tmp_path / "client"
        load(str(source), backend_url, str(client), progress=lambda _: None)
        return client

    return loaded


def race(client: Path, statements: list[Iterable[str]]) -> Race:
    """Run ``statements[k]`` on client k's own connection, all clients at once."""
    start = threading.Barrier(len(statements))
    reports: list[list[Done]] = [[] for _ in statements]
    crashed: list[BaseException] = []

    def run(number: int) -> None:
        try:
            with connected(client) as cursor:
                start.wait()
                reports[number].extend(_each(cursor, number, statements[number]))
        except BaseException as exc:
            crashed.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(statements))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not crashed, crashed
    return Race([d for report in reports for d in report])


def _each(cursor: veil.dbapi.Cursor, number: int, statements: Iterable[str]) -> list[Done]:
    done = []
    for sql in statements:
        try:
            done.append(Done(number, sql, cursor.execute(sql).rowcount))
        except SerializationError as exc:
            done.append(Done(number, sql, None, type(exc).__name__))
        except VeilError as exc:  # an anomaly: reported with the statement
            done.append(Done(number, sql, None, f"{type(exc).__name__}: {exc}"))
    return done


@contextmanager
def connected(client: Path) -> Iterator[veil.dbapi.Cursor]:
    """A cursor on a new connection that commits each statement on its own."""
    connection = veil.connect(client)
    if hasattr(connection, "autocommit"):  # psycopg's spelling, where offered
        connection.autocommit = True
    try:
        yield connection.cursor()
    finally:
        connection.close()


def rows(client: Path, sql: str) -> list[tuple[object, ...]]:
    """The rows of a query, read on a connection of its own."""
    with connected(client) as cursor:
        cursor.execute(sql)
        return cursor.fetchall()
