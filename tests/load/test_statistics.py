"""A load's statistics in one scan (``veil.load.statistics.record``).

The one aggregate statement records what the three scans of their own did
(distinct counts, keys, mean lengths, precomputed filters' shares, the data
profile of sums and integer keys); the quantiles are the exact order
statistics of the encoded values, where the t-digest's came out a little
different each run (and off at the extremes); a table too large to hold
its OPE columns in memory keeps the t-digest.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import duckdb
import pytest

from veil.ciphers.columns import available_schemes
from veil.design.model import OPE, TableDesign
from veil.designer.greedy import greedy_design
from veil.encoding import encode
from veil.load import statistics
from veil.load.sources import SourceTable, open_source

SOURCE = """
    SELECT i AS k, i % 50 AS g,
           CASE WHEN i % 7 = 0 THEN NULL ELSE CAST(((i * 7919) % 1009) / 4 AS DECIMAL(9, 2)) END
               AS amount,
           DATE '2020-01-01' + CAST(i % 400 AS INTEGER) AS day,
           'name ' || (i % 97) AS label, CAST(NULL AS INTEGER) AS nothing,
           CAST((i * 31) % 1000 - 300 AS INTEGER) AS small
    FROM range(3000) AS t(i)
"""
QUERIES = [
    "SELECT g, sum(amount), count(*) FROM sales WHERE day < DATE '2020-06-01' GROUP BY g",
    "SELECT k FROM sales WHERE amount > 100 AND label LIKE '%9%' AND nothing > 3",
    "SELECT count(DISTINCT g) FROM sales WHERE amount BETWEEN 3 AND 40 AND k < 2000",
    "SELECT count(*) FROM sales WHERE small < 500",
]


@pytest.fixture(scope="module")
def loaded(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[duckdb.DuckDBPyConnection, SourceTable, TableDesign]:
    root: Path = tmp_path_factory.mktemp("statistics")
    duckdb.sql(SOURCE).write_parquet(str(root / "sales.parquet"))
    con, [source] = open_source(str(root / "sales.parquet"))
    design = greedy_design(
        {"sales": source.columns(con)}, QUERIES, available_schemes(), "fingerprint"
    )
    return con, source, design.tables["sales"]


def _separately(
    con: duckdb.DuckDBPyConnection, source: SourceTable, table: TableDesign
) -> tuple[object, statistics.Ranges]:
    statistics.count_distinct_keys(source, con, table)
    statistics.record_statistics(source, con, table)
    return statistics.data_profile(source, con, table)


def _named(table: TableDesign, ranges: statistics.Ranges) -> dict[str, tuple[object, object]]:
    return {e.name: ranges[id(e)] for e in table.encryptions if id(e) in ranges}


def test_one_scan_records_what_the_scans_of_their_own_did(
    loaded: tuple[duckdb.DuckDBPyConnection, SourceTable, TableDesign],
) -> None:
    con, source, design = loaded
    alone, together = copy.deepcopy(design), copy.deepcopy(design)
    summed, ranges = _separately(con, source, alone)
    found_summed, found_ranges = statistics.record(source, con, together)
    assert found_summed == summed and summed is not None
    assert _named(together, found_ranges) == _named(alone, ranges) != {}
    assert [e.params for e in together.encryptions] == [e.params for e in alone.encryptions]
    recorded = {k for e in together.encryptions for k in e.params}
    assert {"distinct", "unique", "mean_bytes", "kept", "quantiles"} <= recorded


def test_quantiles_are_the_encoded_values_order_statistics(
    loaded: tuple[duckdb.DuckDBPyConnection, SourceTable, TableDesign],
) -> None:
    con, source, design = loaded
    table = copy.deepcopy(design)
    statistics.record(source, con, table)
    ordered = [e for e in table.encryptions if e.scheme == OPE and not e.is_expression]
    assert {e.source for e in ordered} >= {"amount", "day", "small", "k"}
    for enc in ordered:
        column = con.sql(f'SELECT "{enc.source}" FROM {source.relation_sql}').to_arrow_table()
        values = sorted(
            v for v in encode(column.column(0), enc.sql_type).to_pylist() if v is not None
        )
        if not values:
            assert "quantiles" not in enc.params  # the NULL column
            continue
        expected = [
            values[math.floor(i / statistics.QUANTILES * (len(values) - 1))]
            for i in range(statistics.QUANTILES + 1)
        ]
        assert enc.params["quantiles"] == expected


def test_a_table_past_the_memory_bound_keeps_the_t_digest(
    loaded: tuple[duckdb.DuckDBPyConnection, SourceTable, TableDesign],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    con, source, design = loaded
    monkeypatch.setattr(statistics, "EXACT_QUANTILE_VALUES", 1000)
    table = copy.deepcopy(design)
    statistics.record(source, con, table)
    amount = table.find("amount", OPE)
    assert amount is not None
    quantiles = amount.params["quantiles"]
    assert isinstance(quantiles, list) and len(quantiles) == statistics.QUANTILES + 1
    assert quantiles == sorted(quantiles)


def test_an_uncomputable_expression_falls_back_to_the_scans_of_their_own(
    loaded: tuple[duckdb.DuckDBPyConnection, SourceTable, TableDesign],
) -> None:
    con, source, design = loaded
    table = copy.deepcopy(design)
    assert table.sums is not None
    # a summed expression DuckDB cannot compute for every row: type-wide words, as before
    table.sums.sources = ["CAST(label AS INTEGER)", *table.sums.sources[1:]]
    alone = copy.deepcopy(table)
    summed, ranges = statistics.record(source, con, table)
    assert (summed, _named(table, ranges)) == (
        None,
        _named(alone, _separately(con, source, alone)[1]),
    )
    assert [e.params for e in table.encryptions] == [e.params for e in alone.encryptions]
