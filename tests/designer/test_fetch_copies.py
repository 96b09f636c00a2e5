"""DET copies kept only to fetch OPE columns (``FETCH_COPY``, ``veil.load.fetch_copies``).

The greedy designer marks the DET copy of a column the workload only ranges over
and fetches; on DuckDB a load leaves it out where the OPE copy holds few values,
and the column is fetched from OPE. A column grouped by keeps its DET copy, a
column of many values too, and PostgreSQL keeps them all. Answers, before and
after writes of values the load never saw, are plaintext DuckDB's.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query, loaded_tables
from veil.ciphers.columns import available_schemes
from veil.design.model import DET, FETCH_COPY, OPE, Column
from veil.designer.greedy import greedy_design
from veil.load import fetch_copies
from veil.session.session import Session

# s_qty: 100 values; s_amount: 60,000 (over fetch_copies.MAX_DISTINCT); s_kind grouped by
SALES = (
    "SELECT i AS s_id, i % 100 AS s_qty, (i * 7919) % 1000003 AS s_amount, i % 7 AS s_kind "
    "FROM range(60000) t(i)"
)
QUERIES = [
    "SELECT s_id, s_qty, s_amount FROM sales WHERE s_qty BETWEEN 10 AND 12 "
    "AND s_amount > 900000 ORDER BY s_id",
    "SELECT s_qty, s_amount FROM sales WHERE s_id < 30 ORDER BY s_id",
    "SELECT max(s_qty), min(s_amount) FROM sales WHERE s_amount < 1000",
    "SELECT s_kind, count(*) FROM sales WHERE s_kind > 2 GROUP BY s_kind ORDER BY s_kind",
]
STATEMENTS = [
    "INSERT INTO sales VALUES (70000, 5000, -3, 1), (70001, NULL, NULL, 2), (70002, -7, 5, 6)",
    "UPDATE sales SET s_qty = 11 WHERE s_id = 17",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    with loaded_tables(
        request, tmp_path_factory.mktemp("fetch"), {"sales": SALES}, QUERIES
    ) as pair:
        yield pair


@pytest.mark.unit
def test_the_designer_marks_only_copies_no_query_compares() -> None:
    schema = {"sales": [Column(n, "BIGINT") for n in ("s_id", "s_qty", "s_amount", "s_kind")]}
    design = greedy_design(schema, QUERIES, available_schemes(), "test")
    table = design.tables["sales"]
    marked = {e.source for e in table.encryptions if e.scheme == DET and e.params.get(FETCH_COPY)}
    assert marked == {"s_id", "s_qty", "s_amount"}  # ranged over and fetched only
    assert table.find("s_kind", DET) is not None  # grouped by: equality on the server


def test_few_values_are_fetched_from_ope_on_duckdb(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = pair
    table = session.design.table("sales")
    assert table.find("s_qty", OPE) is not None and table.find("s_amount", OPE) is not None
    assert table.find("s_amount", DET) is not None  # 60,000 values: a fetch would be slow
    assert table.find("s_kind", DET) is not None
    qty = table.find("s_qty", DET)
    if session.backend.dialect == "duckdb":
        assert qty is None and table.fetchable("s_qty").scheme == OPE
        assert int(str(table.find("s_qty", OPE).params["distinct"])) <= fetch_copies.MAX_DISTINCT
    else:
        assert qty is not None


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_match_plaintext(pair: tuple[Session, duckdb.DuckDBPyConnection], sql: str) -> None:
    session, plain = pair
    check_query(session, plain, sql)


def test_writes_beyond_the_loaded_values(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = pair
    for statement in STATEMENTS:  # then every query again, over the written rows
        session.run(statement)
        plain.execute(statement)
    for sql in QUERIES:
        check_query(session, plain, sql)
