"""A statement's literals read off its tokens as plan parameters (``veil.sql.literals``)."""

from __future__ import annotations

import pytest

from veil.session.templates import binds_as_written
from veil.sql.literals import TextInt, normalized

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("sql", "text", "values"),
    [
        (
            "SELECT abalance FROM pgbench_accounts WHERE aid = 31337",
            "SELECT abalance FROM pgbench_accounts WHERE aid = ?",
            (31337,),
        ),
        (
            "SELECT a FROM t WHERE k = 7 AND s = 'it''s' LIMIT 10 OFFSET 2",
            "SELECT a FROM t WHERE k = ? AND s = ? LIMIT 10 OFFSET 2",
            (7, "it's"),
        ),
        (
            "SELECT * FROM t JOIN u ON t.a = u.b AND u.c = 'z' WHERE t.k IN (1, 2, -3)",
            "SELECT * FROM t JOIN u ON t.a = u.b AND u.c = ? WHERE t.k IN (?, ?, -?)",
            ("z", 1, 2, 3),
        ),
        (
            "UPDATE t SET b = b + -5 WHERE k = 12",
            "UPDATE t SET b = b + -? WHERE k = ?",
            (5, 12),
        ),
    ],
)
def test_values_become_markers(sql: str, text: str, values: tuple[object, ...]) -> None:
    found = normalized(sql)
    assert found is not None and found.text == text and found.values == values
    assert all(type(v) is TextInt for v in found.values if isinstance(v, int))
    assert binds_as_written(sql, found)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1, 'a' FROM t ORDER BY 1 LIMIT 5",  # select list, positions, counts
        "SELECT a FROM t GROUP BY 1, 2 HAVING a > 1.5",  # a decimal stays
        "SELECT a FROM t WHERE d = DATE '2020-01-01' AND i < INTERVAL '1' DAY",
        "SELECT a FROM t WHERE c = CAST(x AS DECIMAL(10, 2))",
        "SELECT a FROM t WHERE s = E'x'",
        "SELECT a FROM t WHERE k = ?",  # markers of its own
        "SELECT a FROM t WHERE k = $1",
        "INSERT INTO t VALUES (1, 'a')",
        "SELECT a FROM t WHERE s = $$x$$",
    ],
)
def test_what_stays_in_the_text(sql: str) -> None:
    found = normalized(sql)
    kept = {"DATE '2020-01-01'", "INTERVAL '1' DAY", "DECIMAL(10, 2)", "LIMIT 5", "1.5"}
    assert found is None or all(k in found.text for k in kept if k in sql)


def test_a_misread_literal_is_caught_by_the_bound_tree() -> None:
    """Adjacent strings ('a' 'b' is one string) would bind as another tree: planned as written."""
    sql = "SELECT a FROM t WHERE s = 'a'\n'b'"
    found = normalized(sql)
    assert found is None or not binds_as_written(sql, found)
