"""Comparing Veil's answer with plaintext DuckDB's (floats to 1e-9 relative)."""

from __future__ import annotations

import decimal
import math
from pathlib import Path

import pyarrow as pa

FIXTURES = Path(__file__).parent / "fixtures"
REL_TOL = 1e-9


def read_fixture(name: str) -> list[tuple[str, str]]:
    """``(title, sql)`` pairs from a fixture file of ``-- title:`` blocks."""
    cases: list[tuple[str, str]] = []
    title, lines = None, []
    for line in (FIXTURES / name).read_text().splitlines():
        if line.startswith("-- title:"):
            if title:
                cases.append((title, "\n".join(lines).strip().rstrip(";")))
            title, lines = line.removeprefix("-- title:").strip(), []
        elif line.strip():
            lines.append(line)
    if title:
        cases.append((title, "\n".join(lines).strip().rstrip(";")))
    return cases


def _close(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float | decimal.Decimal) or isinstance(b, float | decimal.Decimal):
        x, y = float(a), float(b)  # type: ignore[arg-type]
        return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=1e-12) or (
            math.isnan(x) and math.isnan(y)
        )
    return a == b


def _sort_key(row: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(
        (
            v is None,
            str(type(v)),
            round(float(v), 6) if isinstance(v, float | decimal.Decimal) else v,
        )
        for v in row
    )


def assert_same(
    veil: pa.Table, expected: list[tuple[object, ...]], ordered: bool, sql: str
) -> None:
    got = [tuple(r.values()) for r in veil.to_pylist()]
    assert len(got) == len(expected), f"{len(got)} rows from Veil, {len(expected)} expected\n{sql}"
    if not ordered:
        got, expected = sorted(got, key=_sort_key), sorted(expected, key=_sort_key)
    for index, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert len(g) == len(e) and all(map(_close, g, e)), f"row {index}: {g} != {e}\n{sql}"
