"""A filtered dimension's key range, sent to the fact table ordered by its key (issue 40).

TPC-DS's date-range star joins read the whole fact table on the server: its
date key is DET, in no order. The designer now gives a fact's date key an OPE
encryption and loads the rows in its order (``veil.designer.ordered_keys``);
``plan_key_ranges`` sends the range of the dimension's fetched keys as an OPE
range the server skips blocks of rows by. Each answer is checked against
plaintext DuckDB, on DuckDB (blocks of 100 rows) and on PostgreSQL, whose
heap skips no blocks by min/max: there rows keep their load order, no zones
are recorded and no range is sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import duckdb
import pytest

import veil.load.zones as zones
from tests.support.oracle import checked_plan, loaded_tables
from veil.design.model import OPE
from veil.session.session import Session

pytestmark = pytest.mark.integration

TABLES = {
    # two facts in date order (as generated), a date dimension (at most a quarter of a
    # fact's rows: ``plan_key_ranges``), an item dimension
    "sales": "SELECT i::INT AS s_id, (i // 10)::INT AS s_date, (i % 13)::INT AS s_item, "
    "(i % 97)::DECIMAL(7, 2) AS s_amt FROM range(4000) t(i)",
    "returns": "SELECT i::INT AS r_id, (i // 6)::INT AS r_date, (i % 31)::DECIMAL(7, 2) AS r_amt "
    "FROM range(2400) t(i)",
    "dates": "SELECT i::INT AS d_sk, (2000 + i // 100)::INT AS d_year, (i % 100)::INT AS d_day, "
    "'day ' || i AS d_name FROM range(400) t(i)",
    "items": "SELECT i::INT AS i_sk, 'cat' || (i % 3) AS i_cat FROM range(13) t(i)",
}

RANGED = {
    "a year": "SELECT d_year, count(*), sum(s_amt) FROM sales, dates "
    "WHERE s_date = d_sk AND d_year = 2001 GROUP BY d_year",
    "a range of days": "SELECT count(*), sum(s_amt) FROM sales JOIN dates ON s_date = d_sk "
    "WHERE d_year = 2002 AND d_day BETWEEN 10 AND 40",
    "a filter the client runs": "SELECT count(*), sum(s_amt) FROM sales, dates "
    "WHERE s_date = d_sk AND d_name LIKE '%7'",
    "two dimensions": "SELECT i_cat, count(*), sum(s_amt) FROM sales, dates, items "
    "WHERE s_date = d_sk AND s_item = i_sk AND d_year = 2003 AND i_cat = 'cat1' GROUP BY i_cat",
    "two facts": "SELECT count(*), sum(r_amt) FROM returns, dates "
    "WHERE r_date = d_sk AND d_year IN (2000, 2003)",
    "in a subquery": "SELECT count(*) FROM items WHERE i_sk IN (SELECT s_item FROM sales, dates "
    "WHERE s_date = d_sk AND d_year = 2002 AND s_amt > 90)",
}

NOT_RANGED = {
    "unfiltered dimension": "SELECT count(*), sum(s_amt) FROM sales, dates WHERE s_date = d_sk",
    "the nullable side": "SELECT count(*), count(d_sk) FROM sales "
    "LEFT JOIN dates ON s_date = d_sk AND d_year = 2001 WHERE s_amt < 3",
}


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def shop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("ranges")
    workload = [*RANGED.values(), *NOT_RANGED.values()]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(zones, "ZONE_ROWS", 100)
        with loaded_tables(request, root, TABLES, workload) as shop:
            patch.undo()
            yield shop


def _range_statements(shop: tuple[Session, duckdb.DuckDBPyConnection], sql: str) -> list[str]:
    """The server statements reading the fact, with its date key's OPE compared by a range."""
    session, _ = shop
    fact = "returns" if "FROM returns" in sql else "sales"
    table = session.design.table(fact)
    enc = table.find("r_date" if fact == "returns" else "s_date", OPE)
    assert enc is not None
    statements = session.run(sql).stats.remote_sql
    ranged = re.compile(rf"\b{enc.name} BETWEEN ")
    return [s for s in statements if table.server_name in s and ranged.search(s)]


def _skips_blocks(shop: tuple[Session, duckdb.DuckDBPyConnection]) -> bool:
    return shop[0].backend.skips_row_blocks


def test_fact_tables_are_ordered_by_their_date_key(
    shop: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = shop
    for fact, key in (("sales", "s_date"), ("returns", "r_date")):
        table = session.design.table(fact)
        assert table.find(key, OPE) is not None
        assert table.sort_candidates[0] == key
        assert table.sort_by == (key if _skips_blocks(shop) else "")
    # the dimension's own key is not a foreign key: no OPE of it for this
    assert session.design.table("dates").find("d_sk", OPE) is None


@pytest.mark.parametrize("sql", RANGED.values(), ids=RANGED.keys())
def test_the_fact_gets_the_dimensions_key_range(
    shop: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    plan = checked_plan(*shop, sql)
    ranged = any(b.target_enc.scheme == OPE for s in plan.scans for b in s.binds)
    assert ranged == _skips_blocks(shop)
    assert bool(_range_statements(shop, sql)) == _skips_blocks(shop)


@pytest.mark.parametrize("sql", NOT_RANGED.values(), ids=NOT_RANGED.keys())
def test_shapes_without_a_range(shop: tuple[Session, duckdb.DuckDBPyConnection], sql: str) -> None:
    plan = checked_plan(*shop, sql)
    assert not any(b.target_enc.scheme == OPE for s in plan.scans for b in s.binds)


def test_no_key_kept_sends_false(shop: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    sql = "SELECT count(*), sum(s_amt) FROM sales, dates WHERE s_date = d_sk AND d_year = 1990"
    plan = checked_plan(*shop, sql)
    if not _skips_blocks(shop):
        return
    assert any(b.target_enc.scheme == OPE for s in plan.scans for b in s.binds)
    session, _ = shop
    server_name = session.design.table("sales").server_name
    statements = session.run(sql).stats.remote_sql
    assert any(f"FROM {server_name}" in s and "FALSE" in s.upper() for s in statements)


def test_the_plan_runs_again_with_other_parameters(
    shop: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    """The range is this run's (found once the dimension is fetched), not the plan's."""
    for year in (2000, 2003, 2001):
        checked_plan(*shop, RANGED["a year"].replace("2001", str(year)))
