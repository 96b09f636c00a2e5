"""A plan made for some parameter values answers others (``veil.session.templates``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import assert_same
from veil.load.loader import load
from veil.session.result import Result
from veil.session.session import Session

pytestmark = pytest.mark.integration

WORKLOAD = [
    "SELECT * FROM orders WHERE o_orderkey = 1",
    "SELECT count(*) FROM orders WHERE o_custkey = 1",
    "SELECT o_orderkey FROM orders WHERE o_orderdate < DATE '1995-01-01'",
    "SELECT o_orderkey FROM orders WHERE o_orderpriority = '1-URGENT'",
]


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def session(
    request: pytest.FixtureRequest, tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """Orders on each server: PostgreSQL's statements take a slot as a parameter where
    they otherwise write ciphertexts into the text."""
    work = tmp_path_factory.mktemp("templates")
    source = work / "src"
    source.mkdir()
    (source / "orders.parquet").symlink_to(tpch_dir / "orders.parquet")
    url = (
        f"duckdb:///{work}/s.duckdb"
        if request.param == "duckdb"
        else request.getfixturevalue("postgres_cluster").create_schema("veil_templates")
    )
    load(str(source), url, str(work / "c"), WORKLOAD, progress=print)
    opened = Session(work / "c")
    yield opened
    opened.close()


def _check(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str, params: list[object]
) -> Result:
    result = session.run(sql, params)
    assert_same(result.table, plain.execute(sql, params).fetchall(), False, f"{sql} {params}")
    return result


def test_a_point_query_plans_twice_then_binds(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    """The second value checks the first one's plan; every later value runs it."""
    sql = "SELECT * FROM orders WHERE o_orderkey = ?"
    first = _check(session, plain, sql, [1])
    second = _check(session, plain, sql, [3])
    assert not first.stats.plan_hit and not second.stats.plan_hit
    for key in (4, 5, 7, 999_999_999, -1):  # found or not, always the first plan
        again = _check(session, plain, sql, [key])
        assert again.stats.plan_hit and again.plan is not None
        assert first.plan is not None and again.plan.scans[0] is first.plan.scans[0]


@pytest.mark.parametrize(
    ("sql", "values"),
    [
        ("SELECT count(*) FROM orders WHERE o_custkey = ?", [[1], [2], [4], [7], [10]]),
        (
            "SELECT o_orderkey FROM orders WHERE o_orderdate < ? ORDER BY 1 LIMIT 5",
            [["1993-01-01"], ["1994-03-01"], ["1992-01-02"], ["1998-01-01"]],
        ),
        (
            "SELECT o_orderkey FROM orders WHERE o_orderpriority = ? ORDER BY 1 LIMIT 3",
            [["1-URGENT"], ["5-LOW"], ["2-HIGH"], ["no such"]],
        ),
        # a value an INTEGER cannot hold is planned for itself (found nowhere)
        ("SELECT count(*) FROM orders WHERE o_custkey = ?", [[3], [5], [2**40], [1.5], [6]]),
        # the same value twice: nothing checked on it; both markers the same parameter
        (
            "SELECT count(*) FROM orders WHERE o_custkey = ? OR o_custkey = ?",
            [[1, 1], [2, 3], [4, 4]],
        ),
        # a parameter the planner may fold with a constant
        (
            "SELECT count(*) FROM orders WHERE ? = 1 AND o_custkey = ?",
            [[1, 1], [2, 2], [1, 4], [3, 4]],
        ),
    ],
)
def test_every_value_answers_as_plaintext(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str, values: list[list[object]]
) -> None:
    for params in values:
        _check(session, plain, sql, params)


def test_literals_meet_the_plan_of_their_shape(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    """A statement with its values written in (pgbench -M simple, psql) runs the template
    of its shape: after two plannings, no parsing or planning (``veil.sql.literals``)."""
    runs = []
    for key in (1, 3, 4, 5, 7, 999_999_999):
        sql = f"SELECT o_totalprice, o_orderstatus FROM orders WHERE o_orderkey = {key}"
        runs.append(_check(session, plain, sql, []))
    assert [r.stats.plan_hit for r in runs] == [False, False, True, True, True, True]
    # a literal the shape's plan cannot take (LIMIT's count) stays in the text
    for limit in (1, 2, 3):
        sql = f"SELECT o_orderkey FROM orders WHERE o_custkey = 1 ORDER BY 1 LIMIT {limit}"
        _check(session, plain, sql, [])


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM orders WHERE o_orderpriority = '{}'",
        "SELECT o_orderkey FROM orders WHERE o_orderdate < '{}' ORDER BY 1 LIMIT 4",
        "SELECT count(*) FROM orders WHERE o_custkey IN ({}, 7) AND o_orderkey > -{}",
    ],
)
def test_every_literal_answers_as_plaintext(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    values = {
        "'{}'": ["1-URGENT", "5-LOW", "2-HIGH", "it''s"],
        "< '{}'": ["1993-01-01", "1994-03-01", "1998-01-01"],
    }
    if "IN (" in sql:
        for key in (1, 2, 4, 10):
            _check(session, plain, sql.format(key, key), [])
        return
    for value in values["< '{}'" if "<" in sql else "'{}'"]:
        _check(session, plain, sql.format(value), [])


def test_an_integers_literal_type_is_kept_per_bit_length() -> None:
    """A template's key holds each integer's literal type, found once per sign and bit
    length: the same as binding the value would give, at every boundary."""
    from sqlglot import exp

    from veil.session.templates import shape
    from veil.sql.literals import TextInt
    from veil.sql.parse import literal

    def bound(value: int) -> str:
        node = literal(value)
        return node.to.sql() if isinstance(node, exp.Cast) else node.key

    edges = [0, 1, -1, 2**31, 2**63, 2**64, 2**127, 2**128 - 1]
    values = [
        v + d for e in edges for v in (e, -e) for d in (-1, 0, 1) if -(2**127) <= v + d < 2**128
    ]
    for value in values * 2:  # the second time from what the first kept
        assert shape([value]) == ((type(value).__qualname__, bound(value)),), value
    assert shape([TextInt("12")]) == (("TextInt", "literal"),)
