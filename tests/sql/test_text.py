"""``veil.sql.text``: a node's text without a deep copy, a plain literal's value without
DuckDB, both exactly as the slow ways give them."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import duckdb
import sqlglot
from sqlglot import exp

from veil.encoding import SqlType
from veil.session.session import Session
from veil.sql.text import NOT_PLAIN, plain_value, text

LITERALS = [
    "'O''Brien'", "'a\\b'", "'é'", "''", "'12'", "'1994-01-01'", "'1994-1-1'",
    "'1994-02-30'", "'0000-01-01'", "'9999-12-31'", "DATE '1998-12-01'", "0042", "127",
    "128", "255", "256", "32767", "2147483647", "2147483648", "4294967296",
    "9223372036854775807", "9223372036854775808", "1e3", "5.0", "0.05", "0.055", "-5",
    "12345678901234.56", "99999999999999999", "0.123456789012345678",
]  # fmt: skip
TYPES = [
    "VARCHAR", "TINYINT", "UTINYINT", "SMALLINT", "INTEGER", "UINTEGER", "BIGINT", "DATE",
    "DECIMAL(15,2)", "DECIMAL(4,2)", "DECIMAL(18,0)", "DOUBLE", "TIMESTAMP",
]  # fmt: skip


def test_plain_values_are_duckdbs() -> None:
    """Every literal and type where ``plain_value`` answers: DuckDB's own answer, same type."""
    catalog = SimpleNamespace(catalog=duckdb.connect())
    answered, wrong = 0, []
    for literal, sql_type in itertools.product(LITERALS, TYPES):
        node = sqlglot.parse_one(f"SELECT {literal}", read="duckdb").expressions[0]
        got = plain_value(node, SqlType(sql_type))
        if got is NOT_PLAIN:
            continue
        answered += 1
        want = Session._exact_value(catalog, text(node), SqlType(sql_type))  # type: ignore[arg-type]
        if got != want or type(got) is not type(want):
            wrong.append((literal, sql_type, got, want))
    assert not wrong
    assert answered > 60  # strings, integers, decimals and dates all take the fast way


def test_text_is_the_copied_rendering() -> None:
    sql = (
        "SELECT a FROM t WHERE b IN (SELECT c FROM u) AND d = [1, 2] AND e BETWEEN 1 AND 2 "
        "AND f LIKE 'x%' AND CAST(g AS DATE) = DATE '1994-01-01'"
    )
    struct = "SELECT n.st FROM fz_nested AS n WHERE {'a': 2, 'b': ''} OR TRUE"  # fuzz seed 675
    for tree in (sqlglot.parse_one(sql, read="duckdb"), sqlglot.parse_one(struct, read="duckdb")):
        _renders_unchanged(tree)


def _renders_unchanged(tree: exp.Expr) -> None:
    for node in tree.walk():
        if isinstance(node, exp.Expr):
            before = tree.sql(dialect="duckdb")
            assert text(node) == node.sql(dialect="duckdb")
            assert text(node, None) == node.sql()
            assert tree.sql(dialect="duckdb") == before  # rendering changed nothing
