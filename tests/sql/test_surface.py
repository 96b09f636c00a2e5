"""The SQL surface as classes (issue 40): each shape answers as plaintext DuckDB does,
or is refused as DuckDB refuses it, and never by a fallback or an internal error.

- list and string slices (``l[:n]``, ``s[n:]``, ``l[a:b]``) are slices, not parameters;
- a scalar subquery in the select list, pointed at by ``ORDER BY``/``GROUP BY <position>``;
- a JOIN without ON or USING, which sqlglot reads as a cross product and DuckDB refuses;
- a struct literal keeps its keys' case (``{'Y': 1}``).
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
import sqlglot

from tests.fuzz.harness import veil_warnings
from tests.support.oracle import assert_same, load_tables
from veil.errors import ProgrammingError
from veil.session.session import Session

pytestmark = pytest.mark.integration

TABLES = {
    "t1": "SELECT i AS a, i * 2 AS b, i % 3 AS n, 'str' || i AS s, "
    "CASE WHEN i % 4 = 0 THEN NULL ELSE i % 5 END AS c FROM range(1, 30) t(i)"
}


@pytest.fixture(scope="module", params=["duckdb"])
def surface(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(request, tmp_path_factory.mktemp("surface"), TABLES, [])
    yield session, plain
    session.close()
    plain.close()


def answer_alike(
    surface: tuple[Session, duckdb.DuckDBPyConnection], sql: str, params: list[object] | None = None
) -> None:
    """Veil's rows and column names are DuckDB's, and no split plan fell back."""
    session, plain = surface
    with veil_warnings() as notes:
        result = session.run(sql, params)
    expected = plain.execute(sql, params)
    assert result.table.column_names == [d[0] for d in expected.description], sql
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    assert_same(result.table, expected.fetchall(), ordered, sql)
    assert not [n for n in notes if "split plan failed" in n], notes


SLICES = [
    "SELECT a, [1, 2, 3][:n] FROM t1 ORDER BY a",
    "SELECT a, s[:n], s[n:], s[n:a], s[2:] FROM t1 ORDER BY a",
    "SELECT a, [a, b, c][:n] AS l FROM t1 WHERE s[:4] = 'str1' ORDER BY a",
    "SELECT x.s[:y.n], count(*) FROM t1 x JOIN t1 y ON x.a = y.b GROUP BY x.s[:y.n] ORDER BY 1",
    "SELECT a FROM t1 WHERE a IN (SELECT n FROM t1 WHERE s[n:] <> '') ORDER BY a",
]


def test_slices_and_parameters_together(surface: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    answer_alike(
        surface, "SELECT a, [a, b][:?] AS l, s[?:n] AS s FROM t1 WHERE a < ? ORDER BY a", [1, 2, 9]
    )


STRUCTS = [
    "SELECT a, {'Y': a, 'x': s} AS st FROM t1 ORDER BY a",
    "SELECT st.Y FROM (SELECT {'Y': a} AS st FROM t1) WHERE st.y > 25 ORDER BY 1",
]

SUBQUERIES = [
    "SELECT (SELECT 1) FROM t1 ORDER BY 1",
    "SELECT (SELECT max(b) FROM t1 y WHERE y.a < x.a), a FROM t1 x ORDER BY 1 DESC, 2 LIMIT 5",
    "SELECT (SELECT max(b) FROM t1) AS m, count(*) FROM t1 GROUP BY 1 ORDER BY 1",
    "SELECT n, (SELECT max(b) FROM t1), count(*) FROM t1 GROUP BY 2, 1 ORDER BY 2, 1",
    "SELECT DISTINCT (SELECT 1), a % 2 FROM t1 ORDER BY 1, 2",
    "SELECT a FROM t1 WHERE a IN (SELECT (SELECT 2) FROM t1 ORDER BY 1) ORDER BY a",
    "SELECT c, (SELECT count(*) FROM t1 y WHERE y.c = x.c) FROM t1 x ORDER BY 2, 1 NULLS FIRST",
]


@pytest.mark.parametrize("sql", SLICES + STRUCTS + SUBQUERIES)
def test_answered_as_duckdb_does(
    surface: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    answer_alike(surface, sql)


def test_an_integer_parameter_up_to_uhugeint(
    surface: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    answer_alike(surface, "SELECT ? AS u, ? AS h, a FROM t1 WHERE a = 1", [2**128 - 1, -(2**127)])


REFUSED = [  # sqlglot reads each as a cross product (BY the second t1's alias)
    "SELECT * FROM t1 a JOIN t1 b",
    "SELECT * FROM t1 a LEFT JOIN t1 b",
    "SELECT count(*) FROM t1 INNER JOIN t1 AS u",
    "SELECT * FROM t1 JOIN t1 BY (TYPE bogus)",
]


@pytest.mark.parametrize("sql", REFUSED)
def test_what_duckdb_refuses_is_refused(
    surface: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    session, plain = surface
    with pytest.raises(duckdb.ParserException) as plain_error:
        plain.execute(sql)
    with pytest.raises(ProgrammingError) as error:  # a syntax error, DuckDB's words
        session.run(sql)
    assert "syntax error at or near" in str(plain_error.value)
    assert "at or near" in str(error.value)
