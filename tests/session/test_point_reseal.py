"""A point UPDATE carries the columns it keeps to the row's new id as stored (issue 41).

``veil.session.stored_columns`` has a point UPDATE fetch an unassigned row-bound RND column as its
stored ciphertexts and XORs them from the old row id's keystream to the new
one's (``veil.ciphers.encrypt.Resealed``), and leaves out the DET columns an
UPDATE in place keeps. Every answer stays plaintext DuckDB's.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pytest

from tests.support.oracle import assert_same, loaded_tables
from veil.ciphers import encrypt
from veil.session import stored_columns
from veil.session.session import Session

pytestmark = pytest.mark.integration

TABLES = {
    "items": """
        SELECT i AS k, (i * 7) % 13 AS grp,
               CAST(i % 100 AS SMALLINT) AS small,
               CASE WHEN i % 5 = 0 THEN NULL ELSE i * 1000003 END AS big,
               CAST(i * 1.25 AS DECIMAL(12, 2)) AS price,
               DATE '2020-01-01' + CAST(i AS INTEGER) AS day,
               CASE WHEN i % 3 = 0 THEN NULL ELSE repeat('\u00e9x', i % 9) END AS note,
               i % 2 = 0 AS flag, i / 3.0 AS ratio,
               'c' || i AS comment
        FROM range(1, 401) t(i)
    """
}
WORKLOAD = [
    "SELECT * FROM items WHERE k = 3",
    "UPDATE items SET comment = 'x' WHERE k = 3",
    "SELECT count(*) FROM items WHERE grp = 2",
]
CHECK = "SELECT * FROM items ORDER BY k"
Pair = tuple[Session, duckdb.DuckDBPyConnection]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("point_reseal")
    with loaded_tables(request, root, TABLES, WORKLOAD) as loaded:
        yield loaded


@pytest.fixture
def carried(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The server columns each write carried as stored (empty: none)."""
    seen: list[set[str]] = []
    original = encrypt.TableEncryptor.encrypt

    def spy(self: Any, plain: Any, first_id: int, **kwargs: Any) -> Any:
        resealed = kwargs.get("resealed")
        seen.append(set(resealed.columns) if resealed is not None else set())
        return original(self, plain, first_id, **kwargs)

    monkeypatch.setattr(encrypt.TableEncryptor, "encrypt", spy)
    return seen


def _both(pair: Pair, sql: str, params: list[object]) -> None:
    session, plain = pair
    expected = plain.execute(sql, params).fetchall()[0][0]
    assert session.run(sql, params).rowcount == expected, (sql, params)


def _same_rows(pair: Pair) -> None:
    session, plain = pair
    assert_same(session.run(CHECK).table, plain.execute(CHECK).fetchall(), True, CHECK)


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        ("UPDATE items SET comment = ? WHERE k = ?", lambda n: f"c{n}"),
        ("UPDATE items SET small = small + ? WHERE k = ?", lambda n: n),
        ("UPDATE items SET price = ?, note = NULL WHERE k = ?", lambda n: n + 0.5),
        ("UPDATE items SET big = ? WHERE grp = ?", lambda n: n * 11),  # several rows at once
    ],
)
def test_kept_columns_are_carried_and_every_value_stays(
    pair: Pair, carried: list[set[str]], sql: str, value: Callable[[int], object]
) -> None:
    rng = random.Random(sql)
    for n in range(6):
        key = rng.randint(0, 12) if "grp" in sql else rng.randint(1, 400)
        _both(pair, sql, [value(n), key])
    _same_rows(pair)
    # the third and later runs bind the kept match; every one carried the kept RND columns
    assert carried and all(carried[2:]), carried


def test_the_same_row_twice(pair: Pair, carried: list[set[str]]) -> None:
    """A row carried twice (old id -> new -> newer) still decrypts to its values."""
    for n in range(4):
        _both(pair, "UPDATE items SET flag = ? WHERE k = ?", [n % 2 == 0, 17])
    _same_rows(pair)
    assert any(carried)


def test_a_table_with_checks_decrypts_every_column(pair: Pair) -> None:
    """Where the write needs whole rows (a CHECK may read any column), nothing is carried."""
    session, _ = pair
    table = session.design.table("items")
    decrypted, sealable, _ = stored_columns.split(session, table, {"comment"}, set())
    assert sealable and "k" not in decrypted  # the key is DET only: never read
    checked = dataclasses.replace(table, checks=[["positive", "small >= 0"]])
    decrypted, sealable, held = stored_columns.split(
        session, checked, {"comment"}, set(), {"comment"}
    )
    assert not sealable and not held and decrypted == [c.name for c in table.columns]


def test_an_assigned_column_made_from_parameters_is_never_read(pair: Pair) -> None:
    """``SET comment = ?`` needs no old comment: the match leaves it out (a column of NULLs
    holds its place); one the SET value reads is decrypted as before."""
    session, _ = pair
    table = session.design.table("items")
    decrypted, _, held = stored_columns.split(session, table, {"comment"}, set(), {"comment"})
    assert held == ["comment"] and "comment" not in decrypted
    decrypted, _, held = stored_columns.split(
        session, table, {"small"}, {"small"}, {"small"}
    )  # small = small + ?
    assert not held and "small" in decrypted
    server = {e.name for e in table.encryptions if e.source == "comment"}
    sql = "UPDATE items SET comment = ? WHERE k = ?"
    for n, value in enumerate(["new", 5, "again", None, "last", "end"]):  # 5: DuckDB casts it
        expected = pair[1].execute(sql, [value, 40 + n % 2]).fetchall()[0][0]
        result = session.run(sql, [value, 40 + n % 2])
        assert result.rowcount == expected
        read = {word.strip(",") for s in result.stats.remote_sql for word in s.split()}
        assert not server & read, result.stats.remote_sql
    _same_rows(pair)
