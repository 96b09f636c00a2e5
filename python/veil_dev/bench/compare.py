"""Result comparison for oracle checks: Veil's rows against plaintext DuckDB's.

Used by ``veil bench tpch``, ``veil demo`` and the tests' oracle.

Rows compare equal when every value is equal, numbers to 1e-9 relative (DuckDB
may sum decimals and doubles in a different order on each side). Without an
ORDER BY the rows are compared as multisets.
"""

from __future__ import annotations

import decimal
import math

import pyarrow as pa

from veil.exec.rows import Row, table_rows

REL_TOL = 1e-9


def values_equal(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float | decimal.Decimal) or isinstance(b, float | decimal.Decimal):
        x, y = float(a), float(b)  # type: ignore[arg-type]
        return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=1e-12) or (
            math.isnan(x) and math.isnan(y)
        )
    return a == b


def _sort_key(row: Row) -> tuple[object, ...]:
    return tuple(
        (
            v is None,
            str(type(v)),
            round(float(v), 6) if isinstance(v, float | decimal.Decimal) else v,
        )
        for v in row
    )


def difference(got: pa.Table | list[Row], expected: list[Row], ordered: bool) -> str | None:
    """None when the results agree, else what differs first."""
    rows = table_rows(got) if isinstance(got, pa.Table) else list(got)
    if len(rows) != len(expected):
        return f"{len(rows)} rows from Veil, {len(expected)} expected"
    if not ordered:
        rows, expected = sorted(rows, key=_sort_key), sorted(expected, key=_sort_key)
    for index, (g, e) in enumerate(zip(rows, expected, strict=True)):
        if len(g) != len(e) or not all(map(values_equal, g, e)):
            return f"row {index}: {g} != {e}"
    return None
