"""Comparing rows that clients printed as text (pgjdbc, psql) with plaintext DuckDB's."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterator

import duckdb
import sqlglot


def sections(output: str) -> Iterator[tuple[str, list[str]]]:
    name, lines = None, []
    for line in output.splitlines():
        if line.startswith("== ") and line.endswith(".sql"):
            if name is not None:
                yield name, lines
            name, lines = line[3:-4], []
        else:
            lines.append(line)
    if name is not None:
        yield name, lines


def matches(got: str, want: object) -> bool:
    if want is None:
        return got == "NULL"
    if isinstance(want, bool):
        return got in (("t", "true") if want else ("f", "false"))
    if isinstance(want, int | float | decimal.Decimal):
        try:
            return math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    if isinstance(want, dt.date):
        return got.startswith(want.isoformat())
    if isinstance(want, list):
        return got.strip("{}").replace('"', "") == ",".join(str(v) for v in want)
    return got == str(want)


def assert_text_rows(
    got: list[list[str]], plain: duckdb.DuckDBPyConnection, plain_sql: str, sent: str
) -> None:
    """``got`` (values as text, NULL for null) equals plaintext DuckDB's answer to ``plain_sql``."""
    want = plain.cursor().sql(plain_sql).fetchall()
    assert len(got) == len(want), f"{len(got)} rows, want {len(want)}\n{sent}"
    ordered = sqlglot.parse_one(plain_sql, read="duckdb").args.get("order") is not None
    if not ordered:  # rows compare in order only where the query orders them
        got = sorted(got)
        want = sorted(want, key=lambda row: ["NULL" if v is None else str(v) for v in row])
    for row, expected in zip(got, want, strict=True):
        assert all(matches(g, w) for g, w in zip(row, expected, strict=True)), (row, expected, sent)
