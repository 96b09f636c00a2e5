"""``?`` parameters bind with the SQL type DuckDB's Python API gives each value."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import duckdb
import pytest
from sqlglot import exp

from veil.sql.errors import QueryError
from veil.sql.parse import bind_parameters, parse_statement

pytestmark = pytest.mark.unit

VALUES = [
    5,
    -(2**31),
    2**31,
    2**40,
    -(2**63),
    2**63,
    2**70,
    -(2**63) - 1,
    2.5,
    0.1,
    -0.0,
    float("inf"),
    float("-inf"),
    float("nan"),
    decimal.Decimal("23"),
    decimal.Decimal("2.50"),
    decimal.Decimal("-0.001"),
    decimal.Decimal("0.5"),
    decimal.Decimal("0.05"),
    decimal.Decimal("0.10"),
    decimal.Decimal("0.0"),
    decimal.Decimal("5E-10"),
    decimal.Decimal("1E+3"),
    decimal.Decimal("1e40"),
    "x",
    "it's ?",
    "",
    True,
    None,
    b"\x00\xff'",
    dt.date(2020, 1, 2),
    dt.datetime(2020, 1, 2, 3, 4, 5, 6),
    dt.time(1, 2, 3, 400),
    dt.timedelta(days=1, seconds=5, microseconds=7),
    uuid.UUID(int=5),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_bound_parameter_has_duckdbs_type_and_value(value: object) -> None:
    con = duckdb.connect()
    sql = "SELECT typeof(?), ?, CAST(? AS VARCHAR)"
    if not isinstance(value, bool | bytes | dt.date | dt.time | dt.timedelta | uuid.UUID):
        sql += ", typeof(COALESCE(1::TINYINT, ?))"  # the others have no type in common
    given = [value] * sql.count("?")
    expected = con.execute(sql, given).fetchall()
    bound = bind_parameters(parse_statement(sql), given)
    got = con.execute(bound.sql(dialect="duckdb")).fetchall()
    if isinstance(value, float) and value != value:  # NaN
        assert got[0][0] == expected[0][0] and got[0][2] == expected[0][2]
    else:
        assert got == expected


def test_markers_bind_by_their_place_in_the_text() -> None:
    tree = bind_parameters(parse_statement("SELECT ? + 0, ?, ?::VARCHAR"), [1, 2, 3])
    assert tree.sql(dialect="duckdb") == (
        "SELECT CAST('1' AS INT) + 0, CAST('2' AS INT), CAST(CAST('3' AS INT) AS TEXT)"
    )


def test_unbindable_values_are_refused() -> None:
    with pytest.raises(QueryError, match="cannot bind a parameter of type object"):
        bind_parameters(parse_statement("SELECT ?"), [object()])
    # a list is an array (psycopg's lists), its elements bound one by one
    bound = bind_parameters(parse_statement("SELECT ?"), [[1, None]]).selects[0]
    assert isinstance(bound, exp.Array) and isinstance(bound.expressions[1], exp.Null)
    assert isinstance(bind_parameters(parse_statement("SELECT ?"), [None]).selects[0], exp.Null)


def test_markers_next_to_empty_strings_and_casts() -> None:
    """Numbering edits tokens, not the text (``$1 ... ''`` trips sqlglot's tokenizer)."""
    sql = "SELECT ? AS x, ?::VARCHAR FROM t WHERE a < '' AND b = ? OR c = '?'"
    tree = bind_parameters(parse_statement(sql), [1, 2, "z"])
    assert tree.sql(dialect="duckdb") == (
        "SELECT CAST('1' AS INT) AS x, CAST(CAST('2' AS INT) AS TEXT) FROM t "
        "WHERE a < '' AND b = 'z' OR c = '?'"
    )
