"""A local plan that only projects one scan's columns answers from the fetched rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import assert_same
from veil.encoding import result_type
from veil.exec.direct import decrypted_early, projection
from veil.load.loader import load
from veil.session.session import Session

pytestmark = pytest.mark.integration

WORKLOAD = [
    "SELECT * FROM orders WHERE o_orderkey = 1",
    "SELECT o_orderkey FROM orders WHERE o_orderpriority = '1-URGENT'",
    "SELECT count(*) FROM orders WHERE o_custkey = 1",
]


@pytest.fixture(scope="module")
def session(tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    work = tmp_path_factory.mktemp("direct")
    source = work / "src"
    source.mkdir()
    (source / "orders.parquet").symlink_to(tpch_dir / "orders.parquet")
    load(str(source), f"duckdb:///{work}/s.duckdb", str(work / "c"), WORKLOAD, progress=print)
    opened = Session(work / "c")
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("sql", "direct"),
    [
        ("SELECT * FROM orders WHERE o_orderkey = 7", True),
        ("SELECT o_totalprice, o_totalprice AS again FROM orders WHERE o_orderkey = 7", True),
        ("SELECT o_comment, o_orderdate FROM orders WHERE o_orderkey = -1", True),  # no row
        ("SELECT o_orderkey FROM orders WHERE o_orderpriority = '2-HIGH' ORDER BY 1", False),
        ("SELECT o_totalprice + 1 AS p FROM orders WHERE o_orderkey = 7", False),
        ("SELECT count(*) FROM orders WHERE o_custkey = 7", True),
        ("SELECT count(*) AS n, count(*) FROM orders WHERE o_custkey = -7", True),
        ("SELECT count(*) + 1 FROM orders WHERE o_custkey = 7", False),
        ("SELECT DISTINCT o_orderstatus FROM orders WHERE o_orderkey < 100", False),
    ],
)
def test_projections_answer_from_the_fetched_rows(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str, direct: bool
) -> None:
    result = session.run(sql)
    assert_same(result.table, plain.execute(sql).fetchall(), "ORDER BY" in sql, sql)
    assert result.table.column_names == [d[0] for d in plain.execute(sql).description]
    assert result.plan is not None and (projection(result.plan) is not None) == direct
    assert result.stats.statements == 1


def test_a_plans_projection_is_kept_with_its_own_local_plan(session: Session) -> None:
    """Each run of a kept plan is a copy sharing its local plan and scans: the projection
    found once is found again for the copy, never for another plan's."""
    import dataclasses

    point = session.run("SELECT o_totalprice FROM orders WHERE o_orderkey = 7").plan
    other = session.run("SELECT o_totalprice + 1 AS p FROM orders WHERE o_orderkey = 7").plan
    assert point is not None and other is not None
    found = projection(point)
    assert found is not None
    assert projection(dataclasses.replace(point, rendered={})) is found
    assert projection(other) is None
    assert projection(dataclasses.replace(other, rendered={})) is None


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM orders WHERE o_orderkey = ?",
        "SELECT o_custkey AS c, o_orderkey, o_orderkey AS again FROM orders WHERE o_orderkey = ?",
    ],
)
def test_late_outputs_passed_through_are_decrypted_with_the_scan(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    """A DET column the plan leaves encrypted for its result (``decrypt_outputs``) that the
    projection only passes through is decrypted with the scan's other columns (issue 41)."""
    for key in (7, 32, 7, -1, 33):  # planned, checked, then bound into the kept plan
        result = session.run(sql, [key])
        assert_same(result.table, plain.execute(sql, [key]).fetchall(), False, sql)
        plan = result.plan
        assert plan is not None and plan.late_outputs, "the plan decrypts no output late"
        for out in plan.late_outputs:  # typed as ``decrypt_outputs`` gives them
            assert result.table.schema.field(out.position).type == result_type(out.enc.sql_type)
        assert decrypted_early(plan) == {o.column for o in plan.late_outputs}
        assert plan.scans[0].ciphertext >= decrypted_early(plan)  # the plan is unchanged
