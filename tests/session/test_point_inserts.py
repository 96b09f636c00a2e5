"""One-row INSERT ... VALUES planned once per shape (``veil.session.point_inserts``).

Each statement runs through Veil and on plaintext DuckDB with the same values;
the rows each side then holds must be the same, and every refusal (NOT NULL,
CHECK, a duplicate key, a value the column's type cannot take) must be the
general path's own, with nothing written.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from veil import statements
from veil.errors import VeilError
from veil.session import dml, point_inserts
from veil.session.session import Session
from veil.sql.errors import CheckViolationError, NotNullViolationError, UniqueViolationError
from veil_dev.bench.oltp import empty_client_dir

pytestmark = pytest.mark.integration

TABLE = (
    "CREATE TABLE acc (id INTEGER PRIMARY KEY, bal BIGINT NOT NULL, note VARCHAR, "
    "day DATE, price DECIMAL(10, 2), kind VARCHAR DEFAULT 'plain', small SMALLINT, "
    "CHECK (bal > -1000))"
)
CHECK = "SELECT * FROM acc ORDER BY id"


@pytest.fixture
def pair(backend_url: str, tmp_path: Path) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session = Session(empty_client_dir(tmp_path / "client", backend_url))
    statements.run(session, TABLE)
    plain = duckdb.connect()
    plain.execute(TABLE)
    yield session, plain
    session.close()
    plain.close()


def _both(pair: tuple[Session, duckdb.DuckDBPyConnection], sql: str, params: list[object]) -> None:
    """``sql`` on both sides; a refusal on one side must be one on the other."""
    session, plain = pair
    try:
        written = plain.execute(sql, params).fetchall()
    except duckdb.Error:
        with pytest.raises(VeilError):
            session.run(sql, params)
        return
    result = session.run(sql, params)
    if result.table.num_columns:  # RETURNING
        assert [tuple(r.values()) for r in result.table.to_pylist()] == written, sql
    else:
        assert [(result.rowcount,)] == written, (sql, params)


def _same_rows(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = pair
    ours = [tuple(row.values()) for row in session.run(CHECK).table.to_pylist()]
    assert ours == plain.execute(CHECK).fetchall()


def test_fresh_values_skip_the_catalogue(
    pair: tuple[Session, duckdb.DuckDBPyConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run keeps the shape; later ones never ask the catalogue's INSERT."""
    sql = "INSERT INTO acc (id, bal, note, small) VALUES (?, ?, ?, ?)"
    _both(pair, sql, [1, 10, "first", 3])
    checks: list[object] = []
    monkeypatch.setattr(dml, "check", lambda *a, **k: checks.append(a))
    for n in range(2, 30):
        _both(pair, sql, [n, n * 7 - 50, f"note {n}" if n % 3 else "", n % 5])
    assert checks == []
    _same_rows(pair)


def test_values_written_in_take_the_kept_shape(
    pair: tuple[Session, duckdb.DuckDBPyConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An INSERT with its values written in (a script, psql, an ORM) meets the shape of its
    parameterised text (``veil.sql.literals``): the catalogue never makes its row."""
    _both(pair, "INSERT INTO acc (id, bal, note, small) VALUES (1, 10, 'first', 3)", [])
    _both(pair, "INSERT INTO acc (id, bal, note, small) VALUES (2, -20, 'it''s', 4)", [])
    checks: list[object] = []
    monkeypatch.setattr(dml, "check", lambda *a, **k: checks.append(a))
    for n in range(3, 20):
        note = f"'note {n}'" if n % 3 else "''"
        _both(
            pair,
            f"INSERT INTO acc (id, bal, note, small) VALUES ({n}, {n * 7 - 50}, {note}, {n % 5})",
            [],
        )
    assert checks == []
    monkeypatch.undo()
    # values whose text steers the row: a decimal, a date, a typed literal, bulk rows
    _both(pair, "INSERT INTO acc (id, bal, price, day) VALUES (40, 2.5, 1.25, '2024-02-29')", [])
    _both(pair, "INSERT INTO acc (id, bal, day) VALUES (41, 1, DATE '2020-01-01')", [])
    _both(pair, "INSERT INTO acc (id, bal) VALUES (42, 1), (43, 2), (44, -3)", [])
    _both(pair, "INSERT INTO acc (id, bal, small) VALUES (45, 1, 100000)", [])  # out of range
    _both(pair, "INSERT INTO acc (id, bal, note) VALUES (46, 'x', 'y')", [])  # not a number
    _same_rows(pair)


def test_sequence_calls_take_one_number(tmp_path: Path) -> None:
    """A write calling nextval with parameters (or values written in) takes one number a
    call, as PostgreSQL does: the kept-shape paths leave it to the general path before
    admitting it, since admitting evaluates the calls (each took two numbers)."""
    session = Session(empty_client_dir(tmp_path / "client", f"duckdb://{tmp_path / 's.duckdb'}"))
    try:
        statements.run(session, "CREATE TABLE t (id serial PRIMARY KEY, name text)")
        session.run("INSERT INTO t (name) VALUES ('a')")
        session.run("INSERT INTO t (id, name) VALUES (nextval(?), ?)", ["t_id_seq", "b"])
        session.run("INSERT INTO t (id, name) VALUES (nextval('t_id_seq'), ?)", ["c"])
        session.run("INSERT INTO t (id, name) VALUES (nextval('t_id_seq'), 'd')")
        session.run("UPDATE t SET id = nextval(?) WHERE name = ?", ["t_id_seq", "a"])
        rows = session.run("SELECT id, name FROM t ORDER BY id").table.to_pylist()
        assert [(r["id"], r["name"]) for r in rows] == [(2, "b"), (3, "c"), (4, "d"), (5, "a")]
    finally:
        session.close()


def test_casts_defaults_and_constants(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    """Values the column casts (str to DATE, float to BIGINT, Decimal), DEFAULT, constants."""
    sql = (
        "INSERT INTO acc (id, bal, day, price, kind, note) VALUES (?, ?, ?, ?, DEFAULT, 'a' || 'b')"
    )
    values: list[list[object]] = [
        [1, 2.5, "2024-02-29", decimal.Decimal("1.25")],
        [2, 3.5, dt.date(2020, 1, 1), 7],
        [3, 10**12, "2021-12-31", "3.14159"],
        [4, -7, "1999-01-01", 0.5],
    ]
    for given in values:
        _both(pair, sql, given)
    _both(pair, "INSERT INTO acc VALUES (?, ?, ?, ?, ?, ?, ?)", [5, 1, None, None, None, "k", 1])
    for n in range(6, 9):
        _both(
            pair,
            "INSERT INTO acc VALUES (?, ?, ?, ?, ?, ?, ?)",
            [n, 1, "x", "2000-01-01", 2, "k", n],
        )
    _same_rows(pair)


def test_refusals_are_the_general_paths(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    """Kept shapes refuse as the general path does, and write nothing."""
    session, _ = pair
    sql = "INSERT INTO acc (id, bal, note, small) VALUES (?, ?, ?, ?)"
    for n in (1, 2, 3):
        _both(pair, sql, [n, n, "ok", n])
    with pytest.raises(UniqueViolationError):
        session.run(sql, [2, 5, "again", 1])
    with pytest.raises(CheckViolationError):
        session.run(sql, [9, -5000, "low", 1])
    with pytest.raises(NotNullViolationError):
        session.run("INSERT INTO acc (id, note) VALUES (?, ?)", [9, "no balance"])
    with pytest.raises(NotNullViolationError):
        session.run("INSERT INTO acc (id, note) VALUES (?, ?)", [10, "no balance"])
    for bad in ([9, "x", "not a number", 1], [9, 1, "too big", 40_000]):
        _both(pair, sql, bad)
    _same_rows(pair)


def test_current_timestamp_is_taken_each_run(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """pgbench's history row: CURRENT_TIMESTAMP read from the clock, in DuckDB's zone."""
    session, plain = pair
    statements.run(
        session, "CREATE TABLE hist (tid INT, delta INT, mtime TIMESTAMP, at TIMESTAMPTZ)"
    )
    sql = "INSERT INTO hist (tid, delta, mtime, at) VALUES (?, ?, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
    for n in range(5):
        session.run(sql, [n, -n])
    names = ["tid", "delta", "mtime", "at"]  # another test's "hist" may be kept too
    kept = [
        v
        for v in point_inserts._KEPT.entries.values()
        if v and v.table.name == "hist" and [c.name for c in v.table.columns] == names
    ]
    assert [s.clock is not None for s in kept[0].sources] == [False, False, True, True]
    query = "SELECT tid, delta, mtime, at FROM hist ORDER BY tid"
    rows = [tuple(r.values()) for r in session.run(query).table.to_pylist()]
    assert [r[:2] for r in rows] == [(n, -n) for n in range(5)]
    now, now_tz = plain.execute("SELECT CURRENT_TIMESTAMP::TIMESTAMP, CURRENT_TIMESTAMP").fetchone()
    for _, _, stamp, stamp_tz in rows:
        assert dt.timedelta(0) <= now - stamp < dt.timedelta(minutes=2)
        assert dt.timedelta(0) <= now_tz - stamp_tz < dt.timedelta(minutes=2)
    stamps = [r[2] for r in rows]
    assert stamps == sorted(stamps) and len(set(stamps)) == 5


def test_a_shape_is_kept_only_while_plain(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    """ON CONFLICT, RETURNING, several rows, a query as source: the general path.

    Asked of each statement's own entries: the process keeps its last 256 shapes, so
    the tests before this one may leave the count of kept shapes at its bound."""
    for sql, params in [
        ("INSERT INTO acc (id, bal) VALUES (?, ?) ON CONFLICT DO NOTHING", [1, 1]),
        ("INSERT INTO acc (id, bal) VALUES (?, ?) RETURNING id", [2, 1]),
        ("INSERT INTO acc (id, bal) VALUES (?, ?), (?, ?)", [3, 1, 4, 1]),
        ("INSERT INTO acc (id, bal) SELECT ?, ?", [5, 1]),
    ]:
        _both(pair, sql, params)
        assert _shapes_of(sql) and not any(_shapes_of(sql)), sql
    _same_rows(pair)


def _shapes_of(sql: str) -> list[bool]:
    """For each kept entry of ``sql``'s shapes, whether it keeps a shape (or says none)."""
    with point_inserts._KEPT.lock:
        return [v is not None for k, v in point_inserts._KEPT.entries.items() if k[1] == sql]


def test_omitted_columns_take_their_defaults(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """Constant defaults are computed once, others each run, a column without one is null."""
    session, plain = pair
    table = (
        "CREATE TABLE d (id INT, a VARCHAR DEFAULT 'x' || 'y', b INT DEFAULT 7, "
        "c TIMESTAMP DEFAULT now(), e INT)"
    )
    statements.run(session, table)
    plain.execute(table)
    for n in range(4):
        _both(pair, "INSERT INTO d (id) VALUES (?)", [n])
        _both(pair, "INSERT INTO d (id, b) VALUES (?, DEFAULT)", [n + 10])
    query = "SELECT id, a, b, e, c IS NOT NULL FROM d ORDER BY id"
    ours = [tuple(r.values()) for r in session.run(query).table.to_pylist()]
    assert ours == plain.execute(query).fetchall()


def test_fewer_values_fill_the_leading_columns(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """Without a column list, N values fill the table's first N columns and the rest take
    their defaults, as in PostgreSQL (DuckDB refuses the count): the one-row path, the
    general path and a query's rows alike; too many values, or a NOT NULL left out, refused."""
    session, _ = pair
    session.run("INSERT INTO acc VALUES (?, ?)", [1, 5])
    session.run("INSERT INTO acc VALUES (2, 6, 'n'), (3, 7, 'm')")
    session.run("INSERT INTO acc SELECT 4, 8")
    rows = session.run("SELECT id, bal, note, kind, small FROM acc ORDER BY id").table
    assert [tuple(r.values()) for r in rows.to_pylist()] == [
        (1, 5, None, "plain", None),
        (2, 6, "n", "plain", None),
        (3, 7, "m", "plain", None),
        (4, 8, None, "plain", None),
    ]
    with pytest.raises(NotNullViolationError):
        session.run("INSERT INTO acc VALUES (5)")
    with pytest.raises(VeilError):
        session.run("INSERT INTO acc VALUES (6, 1, 'x', NULL, 1, 'k', 1, 99)")
    assert session.run("SELECT count(*) FROM acc").table.column(0)[0].as_py() == 4
