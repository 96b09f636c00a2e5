"""A column compared with ``=`` or ``<>`` to a scalar subquery's column is compared on the
server in DET (``veil.sql.workload``), so the design keeps its DET copy as an equality
copy, not one a load may leave out (``veil.load.fetch_copies``)."""

from __future__ import annotations

import pytest

from veil.sql.workload import analyse_workload

SCHEMA = {"parts": {"p_id": "BIGINT", "p_price": "DECIMAL(7,2)"}}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM parts p WHERE p.p_price = (SELECT q.p_price FROM parts q "
        "WHERE q.p_id = 1000)",
        "SELECT COUNT(*) FROM parts p WHERE p.p_price <> (SELECT DISTINCT q.p_price FROM parts q "
        "WHERE q.p_id = 11)",
        "SELECT COUNT(*) FROM parts p WHERE (SELECT q.p_price FROM parts q WHERE q.p_id = 3) "
        "= p.p_price",
    ],
)
def test_a_scalar_subquery_comparison_needs_equality(sql: str) -> None:
    needs = analyse_workload([sql], SCHEMA)
    assert ("parts", "p_price") in needs.det


def test_an_aggregate_subquery_needs_equality_on_the_column_only() -> None:
    sql = "SELECT p_id FROM parts WHERE p_price = (SELECT max(p_price) FROM parts)"
    needs = analyse_workload([sql], SCHEMA)
    assert ("parts", "p_price") in needs.det
