"""A point UPDATE on DuckDB finds its row by an index of a DET column it keeps (issue 41).

The row id has no index and every write widens its blocks' min/max, so an
``UPDATE ... WHERE row_id = ?`` read most of the table. The match reads the
stored value of an indexed DET column the write keeps, and DuckDB's UPDATE
finds the rows by it, checking the row id among them: the same rows, or none
when the row changed since the match.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from tests.support.oracle import assert_same, loaded_tables
from veil import statements
from veil.backends import duckdb as duckdb_backend
from veil.backends.base import LOCATOR, OLD_KEY
from veil.backends.duckdb import DuckDBBackend
from veil.session.session import Session

pytestmark = pytest.mark.integration

TABLES = {
    "items": """
        SELECT i AS k, i % 7 AS grp, CASE WHEN i % 4 = 0 THEN NULL ELSE i % 5 END AS tag,
               i * 3 AS qty, 'c' || i AS comment
        FROM range(1, 301) t(i)
    """
}
WORKLOAD = [
    "SELECT * FROM items WHERE k = 3",
    "UPDATE items SET comment = 'x' WHERE k = 3",
    "UPDATE items SET qty = 1 WHERE grp = 3",
    "SELECT count(*) FROM items WHERE tag = 2",
]
CHECK = "SELECT * FROM items ORDER BY k"
Pair = tuple[Session, duckdb.DuckDBPyConnection]


# DuckDB only: PostgreSQL finds rows by the row ids' own index
@pytest.fixture(scope="module", params=["duckdb"])
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("point_locator")
    with loaded_tables(request, root, TABLES, WORKLOAD) as loaded:
        session, plain = loaded
        for sql in ("CREATE INDEX items_tag ON items (tag)", "CREATE INDEX items_k ON items (k)"):
            statements.run(session, sql)
            plain.execute(sql)
        yield loaded


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    original = duckdb_backend._update_by_key_statement

    def spy(*args: Any) -> str:
        made = original(*args)
        seen.append(made)
        return made

    monkeypatch.setattr(duckdb_backend, "_update_by_key_statement", spy)
    return seen


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        ("UPDATE items SET comment = ? WHERE k = ?", lambda n: f"n{n}"),
        ("UPDATE items SET qty = qty + ? WHERE k = ?", lambda n: n),
        ("UPDATE items SET qty = ? WHERE k = ? OR k = 4", lambda n: n),  # two rows
        ("UPDATE items SET k = k + 1000, comment = ? WHERE k = ?", lambda n: f"m{n}"),
    ],
)
def test_rows_found_by_a_kept_indexed_column_are_the_rows_matched(
    pair: Pair, sent: list[str], sql: str, value: Any
) -> None:
    session, plain = pair
    rng = random.Random(sql)
    for n in range(6):
        key = 8 if n == 0 else rng.randint(1, 300)  # 8: a NULL tag (by the row id alone)
        params = [value(n), key]
        expected = plain.execute(sql, params).fetchall()[0][0]
        assert session.run(sql, params).rowcount == expected, (sql, params)
    assert_same(session.run(CHECK).table, plain.execute(CHECK).fetchall(), True, CHECK)
    # every write found its rows by a kept indexed column (k, or tag where k is written)
    assert sent and any("random()" in s for s in sent), sent


def test_the_locator_statement_changes_only_the_row_with_the_old_id(tmp_path: Path) -> None:
    backend = DuckDBBackend(f"duckdb://{tmp_path / 's.duckdb'}")
    backend.execute("CREATE TABLE t (id BIGINT, loc BIGINT, v VARCHAR)")
    backend.execute("INSERT INTO t VALUES (1, 10, 'a'), (2, 10, 'b'), (3, 20, 'c')")
    backend.execute("CREATE INDEX t_loc ON t (loc)")

    def write(old: int, place: int | None, new: int) -> int:
        data = pa.table(
            {
                "id": [new],
                "v": [f"w{new}"],
                OLD_KEY: [old],
                LOCATOR + "loc": pa.array([place], pa.int64()),
            }
        )
        return backend.update_rows("t", "id", data)

    assert write(2, 10, 5) == 1  # of the two rows under 10, the one with id 2
    assert write(2, 10, 6) == 0  # its id changed: no row
    assert write(3, 10, 7) == 0  # a stale place finds no row either (then retried)
    assert write(3, None, 8) == 1  # no stored value: by the id alone
    rows = backend.execute("SELECT id, loc, v FROM t ORDER BY id").to_pylist()
    assert rows == [
        {"id": 1, "loc": 10, "v": "a"},
        {"id": 5, "loc": 10, "v": "w5"},
        {"id": 8, "loc": 20, "v": "w8"},
    ]
    backend.close()
