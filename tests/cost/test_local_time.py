"""The local plan's work, read from its SQL over the fetched tables' rows."""

from __future__ import annotations

import pytest
import sqlglot

from veil.cost.local_time import local_work
from veil.cost.server_time import AGGREGATE_SHARE

pytestmark = pytest.mark.unit


def _work(sql: str, rows: dict[str, float], distinct: dict[tuple[str, str], float] | None = None):
    known = distinct or {}
    return local_work(
        sqlglot.parse_one(sql, dialect="duckdb"), rows, lambda t, c: known.get((t, c))
    )


def test_a_key_join_probes_the_largest_input_and_keeps_its_rows() -> None:
    work, out = _work("SELECT f.a FROM f JOIN d ON f.k = d.k", {"f": 1000, "d": 10})
    assert out == 1000
    assert (work.probe, work.build) == (1000, 10)
    assert work.expression == 1010  # each source read once; a column passed on is free


def test_groups_come_from_the_keys_distinct_counts_and_cost_per_key() -> None:
    sql = "SELECT f.a, f.b, count(*) FROM f GROUP BY f.a, f.b"
    work, out = _work(sql, {"f": 1000}, {("f", "a"): 3, ("f", "b"): 2})
    assert out == 6
    assert work.group == 6 * 2
    assert work.group_input == pytest.approx(1000)
    # unknown keys: 100 each, never more groups than rows
    assert _work(sql, {"f": 1000})[1] == 1000
    assert _work("SELECT f.a, count(*) FROM f GROUP BY f.a", {"f": 1000})[1] == 100


def test_a_derived_table_and_an_in_subquery_are_walked_too() -> None:
    sql = (
        "SELECT s.n, count(*) FROM (SELECT f.a AS a, count(*) AS n FROM f GROUP BY f.a) AS s "
        "WHERE s.a IN (SELECT d.k FROM d) GROUP BY s.n ORDER BY 2 DESC LIMIT 5"
    )
    work, out = _work(sql, {"f": 1000, "d": 10}, {("f", "a"): 50})
    assert out == 5
    assert work.build == 10  # the subquery's keys
    assert work.probe == 50  # each derived row probes them
    # f into 50 groups, then the 50 rows into 50 (their count has no recorded distinct)
    weight = (AGGREGATE_SHARE + 1) / (AGGREGATE_SHARE + 1)
    assert work.group_input == pytest.approx(1000 * weight + 50 * weight + 50)  # + the sort


def test_a_distinct_aggregate_groups_its_rows_again() -> None:
    plain = _work("SELECT f.a, count(f.b) FROM f GROUP BY f.a", {"f": 1000})[0]
    distinct = _work("SELECT f.a, count(DISTINCT f.b) FROM f GROUP BY f.a", {"f": 1000})[0]
    assert distinct.group_input == pytest.approx(plain.group_input + 1000)
    assert distinct.group == pytest.approx(plain.group + 1000 * 2)


def test_a_cte_is_walked_and_its_readers_read_its_rows() -> None:
    # sqlglot keeps the WITH under ``with_``: it was never walked, and each reader of a CTE
    # counted 1,000 rows (TPC-DS q05's fact tables, unioned in CTEs, priced at nothing)
    sql = (
        "WITH u AS (SELECT f.a AS a FROM f UNION ALL SELECT g.a FROM g) "
        "SELECT count(*) FROM u JOIN d ON u.a = d.k"
    )
    work, out = _work(sql, {"f": 100_000, "g": 50_000, "d": 10})
    assert out == 1
    assert (work.probe, work.build) == (150_000, 10)
    union = _work(
        "WITH u AS (SELECT f.a FROM f) SELECT u.a FROM u UNION ALL SELECT u.a FROM u",
        {"f": 100_000},
    )[1]
    assert union == 200_000
