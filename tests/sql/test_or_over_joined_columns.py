"""An OR over one joined table's columns is a filter like any other (issue 40).

A star join whose dimension filter is an OR (TPC-DS q07, q26, q34, q46, q53, q61,
q63, q68, q73, q79, q88) went to the server twice, once as written and once as
the conjunct it implies (itself), and stayed in the local plan too: the planner
took ``(a OR b)`` as the conjunct ``a OR b`` without its parentheses, and
removing the pushed node from the local plan missed it. The server join stopped
fetching the OR's columns, the local plan still read them: DuckDB's binder
failed and the whole query fell back to fetching every table.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import checked_plan
from veil.load.loader import load
from veil.session.session import Session

pytestmark = pytest.mark.integration

QUERIES = [
    # the minimal case: a comma join, the OR parenthesised after the join's equality
    "SELECT count(*) FROM store_sales, promotion WHERE ss_promo_sk = p_promo_sk "
    "AND (p_channel_email = 'N' OR p_channel_event = 'N')",
    # the OR first, doubly parenthesised, with a grouped output
    "SELECT ss_qty, count(*) FROM store_sales, promotion WHERE "
    "((p_channel_email = 'N' OR p_channel_event = 'N')) AND ss_promo_sk = p_promo_sk "
    "GROUP BY 1 ORDER BY 1",
    # an inner join's ON, the OR alone in the WHERE
    "SELECT sum(ss_qty) FROM store_sales JOIN promotion ON ss_promo_sk = p_promo_sk "
    "WHERE (p_channel_email = 'Y' OR p_channel_event = 'N')",
    # the OR in the ON clause, beside the join's equality
    "SELECT count(*) FROM store_sales JOIN promotion ON ss_promo_sk = p_promo_sk "
    "AND (p_channel_email = 'N' OR p_channel_event = 'Y') WHERE ss_qty > 2",
    # an OR of conjunctions over the dimension
    "SELECT count(*) FROM store_sales, promotion WHERE ss_promo_sk = p_promo_sk AND "
    "((p_channel_email = 'N' AND p_channel_event = 'N') OR p_channel_email = 'Y')",
]
# an OR over both tables: its implied per-table ORs go to the server, itself stays local
ACROSS = (
    "SELECT count(*) FROM store_sales, promotion WHERE ss_promo_sk = p_promo_sk AND "
    "((p_channel_email = 'N' AND p_channel_event = 'N') OR (p_channel_email = 'Y' AND ss_qty = 3))"
)


@pytest.fixture(scope="module")
def star(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("star")
    plain = duckdb.connect()
    plain.execute(
        "CREATE TABLE store_sales AS SELECT (i % 100)::INT AS ss_promo_sk, (i % 7)::INT AS ss_qty "
        "FROM range(1000) t(i)"
    )
    plain.execute(
        "CREATE TABLE promotion AS SELECT i::INT AS p_promo_sk, "
        "CASE WHEN i % 2 = 0 THEN 'N' ELSE 'Y' END AS p_channel_email, "
        "CASE WHEN i % 3 = 0 THEN 'N' ELSE 'Y' END AS p_channel_event FROM range(100) t(i)"
    )
    data = root / "data"
    data.mkdir()
    for table in ("store_sales", "promotion"):
        plain.execute(f"COPY {table} TO '{data / table}.parquet' (FORMAT parquet)")
    url = f"duckdb:///{root / 'server.duckdb'}"
    load(str(data), url, str(root / "client"), workload=[*QUERIES, ACROSS], progress=lambda _: None)
    session = Session(Path(root / "client"))
    try:
        yield session, plain
    finally:
        session.close()
        plain.close()


def split_local_sql(star: tuple[Session, duckdb.DuckDBPyConnection], sql: str) -> str:
    """The local plan of ``sql``, after checking its answer and that nothing fell back."""
    return checked_plan(*star, sql).local.sql(dialect="duckdb")


@pytest.mark.parametrize("sql", QUERIES)
def test_an_or_over_a_joined_table_splits(
    star: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    # the OR is a server filter once, never again in the local plan
    assert "p_channel" not in split_local_sql(star, sql)


def test_an_or_over_both_tables_stays_local_and_splits(
    star: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    assert "ss_qty = 3" in split_local_sql(star, ACROSS)


def test_a_repeated_group_key_of_a_server_join_is_one_key(
    star: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    # GROUP BY a, a over a grouped server join sent a twice, and the client's split of
    # the joined rows made columns of twice the rows: ArrowInvalid, and a fallback
    sql = (
        "SELECT p_channel_email, p_channel_email, count(*) FROM store_sales, promotion "
        "WHERE ss_promo_sk = p_promo_sk GROUP BY p_channel_email, p_channel_email ORDER BY 1"
    )
    split_local_sql(star, sql)
    plan = star[0].run(sql).plan
    assert plan is not None and any(s.joined and s.joined.groups for s in plan.scans)
