"""Columns a query only outputs (and groups by) are decrypted in its result's rows only.

``veil.sql.passes.decrypt_outputs``: TPC-H Q10's shape (a GROUP BY over a
customer's DET text columns, 20 rows of the groups returned) keeps them
encrypted through the local plan. The answers must be plaintext DuckDB's,
with NULLs, on every backend, streamed or not; and the pass must stay away
from an output the plan reads by its name or position (ORDER BY, HAVING),
from DISTINCT, from a column compared or computed, and from floats.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pytest

from tests.support.oracle import assert_same, check_query, load_tables
from veil.frontend.explain import explain
from veil.session.result import Streamed
from veil.session.session import Session
from veil.sql.parse import parse_statement

PEOPLE = """
SELECT i AS p_id,
       CASE WHEN i % 41 = 0 THEN NULL ELSE 'name ' || (i % 300) END AS p_name,
       CASE WHEN i % 43 = 0 THEN NULL ELSE 'street ' || (i % 97) END AS p_street,
       ((i % 13) / 4)::DECIMAL(10, 2) AS p_balance,
       DATE '2024-01-01' + (i % 30)::INT AS p_day,
       (i % 5)::DOUBLE / 2 AS p_score,
       i % 25 AS p_town
FROM range(3000) t(i)
"""
ORDERS = """
SELECT i AS o_id, i % 3100 AS o_person, ((i % 17) * 1.25)::DECIMAL(12, 2) AS o_amount
FROM range(20000) t(i)
"""
TOWNS = "SELECT i AS t_id, 'town ' || i AS t_name FROM range(25) t(i)"
LATE = [
    # Q10's shape: grouped by the key and the payload, ordered by the sum, limited
    "SELECT p_id, p_name, SUM(o_amount) AS total, p_balance, t_name, p_street "
    "FROM people, orders, towns WHERE p_id = o_person AND p_town = t_id "
    "GROUP BY p_id, p_name, p_balance, p_street, t_name ORDER BY total DESC, p_id LIMIT 20",
    # outputs only, aliased, one twice
    "SELECT p_id, p_name AS who, p_day, p_name FROM people WHERE p_id < 50 ORDER BY p_id",
    # a filter the server runs exactly (the workload's LIKE, precomputed) leaves the output
    "SELECT p_id, p_name FROM people WHERE p_name LIKE '%7' ORDER BY p_id LIMIT 9",
    # NULL-extended by an outer join
    "SELECT o_id, p_name, p_street FROM orders LEFT JOIN people ON o_person = p_id "
    "WHERE o_id % 997 = 0 ORDER BY o_id",
]
EARLY = [
    # ordered by the output's name, or by a position
    "SELECT p_id, p_name FROM people WHERE p_id < 40 ORDER BY p_name, p_id",
    "SELECT p_name, COUNT(*) FROM people GROUP BY p_name ORDER BY 1 LIMIT 7",
    # HAVING and DISTINCT read the values
    "SELECT p_name AS n, COUNT(*) AS c FROM people GROUP BY p_name HAVING n > 'name 2' "
    "ORDER BY c DESC, n LIMIT 5",
    "SELECT DISTINCT p_street FROM people ORDER BY p_street NULLS FIRST",
    # compared with another table's value, or computed
    "SELECT o_id, p_name FROM orders, people WHERE o_person = p_id "
    "AND p_name <> concat('name ', o_id % 300) ORDER BY o_id LIMIT 9",
    "SELECT p_id, upper(p_name) FROM people WHERE p_id < 9 ORDER BY p_id",
    # a float (its encodings of -0.0 and 0.0 differ)
    "SELECT p_score, COUNT(*) FROM people GROUP BY p_score ORDER BY 2, 1",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def people(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    tables = {"people": PEOPLE, "orders": ORDERS, "towns": TOWNS}
    session, plain = load_tables(request, tmp_path_factory.mktemp("outputs"), tables, LATE + EARLY)
    yield session, plain
    session.close()


def _late(session: Session, sql: str) -> list[str]:
    return [o.column for o in session.plan(parse_statement(sql)).late_outputs]


@pytest.mark.parametrize("sql", LATE + EARLY)
def test_queries_match_plaintext(
    people: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    check_query(*people, sql)


def test_q10_shape_decrypts_its_result_only(
    people: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = people
    assert sorted(_late(session, LATE[0])) == ["p_balance", "p_name", "p_street", "t_name"]
    assert "in the result's rows only: people.p_name" in explain(session, LATE[0])
    assert sorted(_late(session, LATE[1])) == ["p_name", "p_name"]  # p_day: RND, not DET


@pytest.mark.parametrize("sql", EARLY)
def test_values_the_plan_reads_are_decrypted_first(
    people: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, _ = people
    late = _late(session, sql)
    assert "p_name" not in late and "p_street" not in late and "p_score" not in late


@pytest.mark.parametrize("sql", LATE)
def test_streamed_rows_are_decrypted(
    people: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = people
    streamed = session.stream(sql)
    assert isinstance(streamed, Streamed)
    table = pa.Table.from_batches(list(streamed.batches()), schema=streamed.schema)
    assert_same(table, plain.execute(sql).fetchall(), True, sql)
