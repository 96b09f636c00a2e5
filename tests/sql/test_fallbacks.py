"""Fallbacks to fetching whole tables: the documented shapes, named and counted.

docs/sql.md "Fallbacks" lists the shapes Veil cannot split; everything else that
falls back fails the SQL suites (``tests/conftest.py``) and the fuzzer.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import check_query
from veil.frontend.explain import explain
from veil.session.session import Session
from veil.sql import fallbacks

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sql.md"

SHAPES = [
    ("pivot", "PIVOT orders ON o_orderstatus USING count(*) GROUP BY o_orderpriority"),
    (
        "pivot",
        "SELECT k, count(*) FROM (SELECT n_name, n_comment FROM nation) "
        "UNPIVOT (v FOR k IN (n_name, n_comment)) GROUP BY k ORDER BY k",
    ),
    ("columns expression", "SELECT max(COLUMNS('l_.*date')) FROM lineitem"),
    (
        "columns expression",
        "SELECT COLUMNS(lambda c: c LIKE 'n_%key') FROM nation WHERE n_regionkey = 1 ORDER BY 1",
    ),
]


def test_the_docs_list_the_documented_shapes() -> None:
    section = DOCS.read_text().split("### Fallbacks", 1)[1].split("\n### ", 1)[0]
    listed = re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE)
    assert sorted(listed) == sorted(fallbacks.DOCUMENTED)


@pytest.mark.parametrize(("shape", "sql"), SHAPES)
def test_a_documented_shape_falls_back_named_and_counted(
    session: Session, plain: duckdb.DuckDBPyConnection, shape: str, sql: str
) -> None:
    before = fallbacks.counts()
    check_query(session, plain, sql)
    assert [f[:3] for f in fallbacks.since(before)] == [("plan", shape, 1)]
    if sql.startswith("SELECT"):  # veil explain shows queries
        assert "the split planner gave up" in explain(session, sql)


@pytest.mark.fallback_expected  # the fallbacks it records by hand are not documented
def test_counts_are_per_stage_and_shape() -> None:
    before = fallbacks.counts()
    fallbacks.record(fallbacks.Fallback("run", "Binder Error", "the split plan failed (...)"))
    fallbacks.record(fallbacks.Fallback("run", "Binder Error", "the split plan failed (again)"))
    assert fallbacks.since(before) == [("run", "Binder Error", 2, "the split plan failed (again)")]
    assert fallbacks.counts()[("run", "Binder Error")] == before.get(("run", "Binder Error"), 0) + 2


def test_an_unused_cte_does_not_make_the_query_fall_back(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    # DuckDB never binds a CTE nothing reads, so it may name what does not exist (`inf`
    # is no constant there); the planner leaves it out rather than failing to qualify it
    # (the fuzzer's seeds 5498, 5548 and 5808 with the onion design)
    sql = (
        "WITH unused AS (SELECT n_name FROM nation WHERE n_regionkey = inf) "
        "SELECT count(*) FROM orders WHERE o_orderstatus = 'F'"
    )
    before = fallbacks.counts()
    check_query(session, plain, sql)
    assert fallbacks.since(before) == []
    plan = session.run(sql).plan
    assert plan is not None and plan.pushdown and "unused" not in plan.local.sql("duckdb")


def test_a_repeated_group_key_is_one_server_key(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    # GROUP BY a, a fetched a twice from the server-grouped rows, and decrypting them
    # gave a column of twice the rows: ArrowInvalid, and a fallback (fuzzer seed 6826)
    sql = (
        "SELECT l_returnflag, l_returnflag, count(*) FROM lineitem "
        "GROUP BY l_returnflag, l_returnflag ORDER BY 1"
    )
    check_query(session, plain, sql)
    plan = session.run(sql).plan
    assert plan is not None and plan.scans[0].aggregation is not None
    assert plan.scans[0].aggregation.keys == ["l_returnflag"]
