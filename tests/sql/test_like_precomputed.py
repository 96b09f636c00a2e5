"""A workload's LIKE filters, precomputed as DET of their boolean, run exactly on the server.

``o_comment NOT LIKE '%special%requests%'`` (TPC-H Q13) bounds no whole word,
so SEARCH cannot pre-filter it; the design stores DET of
``o_comment LIKE '%special%requests%'`` per row instead, and the server
tests it in WHERE and in a LEFT JOIN's ON, negated or not, NULLs following
SQL. The text column itself, read by no other query, is stored in BLOCKS.
Checked against plain DuckDB on both backends, before and after writes.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query, load_tables
from veil.design.model import BLOCKS, DET
from veil.frontend.explain import explain
from veil.session.session import Session

NOTES = """
SELECT i AS n_id, i % 40 AS n_owner,
       CASE WHEN i % 23 = 0 THEN NULL
            WHEN i % 7 = 0 THEN 'some special pending requests ' || i
            WHEN i % 5 = 0 THEN 'Special Requests wait ' || i
            ELSE 'quiet note ' || i END AS n_text
FROM range(1500) t(i)
"""
OWNERS = "SELECT i AS w_id, 'owner ' || i AS w_name FROM range(50) t(i)"
WORKLOAD = [
    "SELECT w_id, COUNT(n_id) FROM owners LEFT JOIN notes ON w_id = n_owner "
    "AND n_text NOT LIKE '%special%requests%' GROUP BY w_id",
    "SELECT COUNT(*) FROM notes WHERE n_text ILIKE '%special%requests%'",
]
QUERIES = [
    *WORKLOAD,
    "SELECT COUNT(*) FROM notes WHERE n_text LIKE '%special%requests%'",
    "SELECT COUNT(*) FROM notes WHERE n_text NOT LIKE '%special%requests%'",
    "SELECT n_id FROM notes WHERE n_text NOT ILIKE '%special%requests%' AND n_id < 60 ORDER BY n_id",
    "SELECT COUNT(*) FROM notes WHERE n_text LIKE '%special%requests%' OR n_owner = 3",
    "SELECT w_name, COUNT(n_id) AS c FROM owners LEFT JOIN notes ON w_id = n_owner "
    "AND n_text NOT LIKE '%special%requests%' GROUP BY w_name ORDER BY c, w_name LIMIT 5",
    "SELECT n_text FROM notes WHERE n_text LIKE '%quiet%' AND n_id < 30 ORDER BY n_id",
]
STATEMENTS = [
    "INSERT INTO notes VALUES (5000, 1, 'special and then requests'), (5001, 1, NULL), "
    "(5002, 2, 'SPECIAL REQUESTS'), (5003, 2, 'requests special')",
    "UPDATE notes SET n_text = 'special requests now' WHERE n_id % 100 = 1",
    "DELETE FROM notes WHERE n_id % 100 = 14",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def notes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("like"), {"notes": NOTES, "owners": OWNERS}, WORKLOAD
    )
    yield session, plain
    session.close()


def test_the_design_precomputes_the_likes(notes: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, _ = notes
    table = session.design.table("notes")
    sources = {e.source: e.scheme for e in table.encryptions}
    assert sources["n_text LIKE '%special%requests%'"] == DET
    assert sources["n_text ILIKE '%special%requests%'"] == DET
    assert sources["n_text"] == BLOCKS  # no query reads the text itself


def test_q13_shape_runs_on_the_server(notes: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, _ = notes
    text = explain(session, WORKLOAD[0])
    assert "server filter notes.n_text NOT LIKE '%special%requests%'  [DET" in text
    assert "fetch n_text" not in text


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_match_plaintext(
    notes: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    check_query(*notes, sql)


def test_writes_then_queries(notes: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = notes
    for statement in STATEMENTS:
        session.run(statement)
        plain.execute(statement)
        for sql in QUERIES:
            check_query(session, plain, sql)
