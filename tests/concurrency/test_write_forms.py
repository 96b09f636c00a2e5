"""The write forms applications use, on DuckDB and PostgreSQL, checked against plaintext DuckDB.

``UPDATE ... FROM``, ``DELETE ... USING``, ``WITH ... INSERT/UPDATE/DELETE``,
and ``SELECT ... FOR UPDATE`` holding its rows until the transaction ends (a
job queue taken by several workers: each job exactly once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import veil
from tests.concurrency.conftest import rows
from veil.errors import SerializationError
from veil.sql.errors import QueryError

SETUP = [
    "CREATE TABLE acc (id INT PRIMARY KEY, owner TEXT, bal INT)",
    "CREATE TABLE moves (acc INT, delta INT)",
    "INSERT INTO acc VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30), (4, 'd', 40)",
    "INSERT INTO moves VALUES (1, 5), (2, -3), (3, 7), (3, 7)",
]
FORMS = [
    "UPDATE acc AS a SET bal = a.bal + m.delta FROM moves m WHERE m.acc = a.id AND m.delta < 0",
    "UPDATE acc SET owner = upper(owner) FROM moves WHERE moves.acc = acc.id AND acc.id = 3",
    "DELETE FROM acc USING moves WHERE moves.acc = acc.id AND moves.delta = 5",
    "WITH rich AS (SELECT id FROM acc WHERE bal >= 30) "
    "UPDATE acc SET owner = owner || '!' WHERE id IN (SELECT id FROM rich)",
    "WITH gone AS (SELECT 4 AS id) DELETE FROM acc WHERE id IN (SELECT id FROM gone)",
    "WITH src AS (SELECT 9 AS id, 'n' AS o, 1 AS b) INSERT INTO acc SELECT * FROM src",
    "UPDATE acc SET (owner, bal) = ('z', 0) WHERE id = 9",
]


@pytest.fixture
def client(load_tables: Callable[[dict[str, pa.Table]], Path]) -> Path:
    return load_tables({"seed": pa.table({"x": pa.array([1], pa.int64())})})


def test_write_forms_match_plaintext(client: Path) -> None:
    plain = duckdb.connect()
    with veil.connect(client) as con:
        cur = con.cursor()
        for sql in SETUP + FORMS:
            plain.execute(sql)
            cur.execute(sql)
            want = plain.execute("SELECT * FROM acc ORDER BY id").fetchall()
            assert rows(client, "SELECT * FROM acc ORDER BY id") == want, sql
        with pytest.raises(QueryError):  # DuckDB: data-modifying WITH only at the top level
            cur.execute("WITH d AS (DELETE FROM moves RETURNING *) SELECT * FROM d")


def test_select_for_update_takes_each_job_once(client: Path) -> None:
    with veil.connect(client) as con:
        con.execute("CREATE TABLE jobs (id INT PRIMARY KEY, taken INT)")
        con.execute("INSERT INTO jobs SELECT i, NULL FROM range(1, 13) AS t(i)")
    taken: list[tuple[int, int]] = []
    errors: list[str] = []

    def worker(me: int) -> None:
        with veil.connect(client) as con:
            con.autocommit = False
            cur = con.cursor()
            for _ in range(40):
                try:
                    cur.execute(
                        "SELECT id FROM jobs WHERE taken IS NULL ORDER BY id LIMIT 1 FOR UPDATE"
                    )
                    found = cur.fetchall()
                    if not found:
                        con.rollback()
                        return
                    cur.execute(f"UPDATE jobs SET taken = {me} WHERE id = {found[0][0]}")
                    con.commit()
                    taken.append((found[0][0], me))
                except SerializationError:
                    con.rollback()
                except Exception as exc:  # an anomaly: reported below
                    errors.append(f"{type(exc).__name__}: {exc}")
                    con.rollback()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    stored = rows(client, "SELECT id, taken FROM jobs ORDER BY id")
    assert [r[0] for r in stored] == list(range(1, 13))
    assert all(r[1] is not None for r in stored), stored  # every job taken
    assert sorted(taken) == stored  # by the worker that committed it, once
