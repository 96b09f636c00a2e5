"""Re-aggregating partial rows (per pack mask or block of ids): Arrow's path gives DuckDB's."""

from __future__ import annotations

import datetime
import decimal
import random

import pyarrow as pa
import pytest

from veil.exec.hom_fetch import _arrow_can, _reaggregate_arrow, _reaggregate_sql
from veil.sql.plan import AggregateItem, Aggregation

pytestmark = pytest.mark.unit

D = pa.decimal128(38, 2)


def _aggregation(keys: list[str]) -> Aggregation:
    items = [
        AggregateItem(key=0, kind="COUNT", enc=None),
        AggregateItem(key=1, kind="SUM", enc=None, count_key=0),
        AggregateItem(key=2, kind="MIN", enc=None),
        AggregateItem(key=3, kind="MAX", enc=None),
    ]
    return Aggregation(keys=keys, items=items)


def _partials(rows: int, seed: int, keys: list[str]) -> pa.Table:
    rng = random.Random(seed)
    columns: dict[str, pa.Array] = {}
    if "k" in keys:
        columns["k"] = pa.array([rng.choice(["a", "b", "é", None]) for _ in range(rows)])
    if "d" in keys:
        day = datetime.date(1995, 1, 1)
        columns["d"] = pa.array([rng.choice([day, None]) for _ in range(rows)])
    counts = [rng.choice([0, 0, 1, 5, None]) for _ in range(rows)]
    columns["__veil_agg_0"] = pa.array(counts, pa.int64())
    columns["__veil_agg_1"] = pa.array(
        [
            None if not c else decimal.Decimal(rng.randint(-(10**6), 10**6)).scaleb(-2)
            for c in counts
        ],
        D,
    )
    columns["__veil_agg_2"] = pa.array([rng.choice([None, "x", "y", "z"]) for _ in range(rows)])
    columns["__veil_agg_3"] = pa.array([rng.choice([None, 3, -7, 10**12]) for _ in range(rows)])
    return pa.table(columns)


def _sorted(table: pa.Table, keys: list[str]) -> list[dict[str, object]]:
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: tuple((r[k] is None, str(r[k])) for k in keys))


@pytest.mark.parametrize("keys", [[], ["k"], ["k", "d"]])
@pytest.mark.parametrize("rows", [0, 1, 300])
def test_arrow_matches_duckdb(keys: list[str], rows: int) -> None:
    for seed in range(5):
        partials = _partials(rows, seed, keys)
        aggregation = _aggregation(keys)
        assert _arrow_can(partials, aggregation)
        arrow = _reaggregate_arrow(partials, aggregation)
        duck = _reaggregate_sql(partials, aggregation)
        assert arrow.schema == duck.schema
        assert _sorted(arrow, keys) == _sorted(duck, keys)


def test_float_extremes_go_to_duckdb() -> None:
    """DuckDB orders NaN above every number; Arrow's MIN / MAX skip it."""
    partials = pa.table(
        {
            "__veil_agg_0": pa.array([1, 1], pa.int64()),
            "__veil_agg_1": pa.array([decimal.Decimal(1), decimal.Decimal(2)], D),
            "__veil_agg_2": pa.array([float("nan"), 1.0]),
            "__veil_agg_3": pa.array([float("nan"), 1.0]),
        }
    )
    assert not _arrow_can(partials, _aggregation([]))
