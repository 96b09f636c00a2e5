"""Two columns of one row compared in a filter, precomputed as DET of the boolean.

TPC-H Q4, Q12 and Q21 filter lineitem by ``l_commitdate < l_receiptdate``
(Q21 spelled ``l_receiptdate > l_commitdate``). The design stores the
canonical comparison's boolean per row, and the server tests it
(``= DET(true)``) in WHERE, inside [NOT] EXISTS and negated, NULLs
following SQL; a column that only such comparisons read is stored in
BLOCKS. On DuckDB the boolean is narrow DET (bit-packed) rather than the
bytes form. Checked against plain DuckDB on both backends, before and after
writes that change the compared columns.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query, load_tables
from veil.design.model import BLOCKS, DET
from veil.frontend.explain import explain
from veil.session.session import Session

ITEMS = """
SELECT i AS i_id, i % 37 AS i_order,
       CASE WHEN i % 31 = 0 THEN NULL ELSE DATE '1995-01-01' + (i % 40)::INT END AS i_commit,
       CASE WHEN i % 29 = 0 THEN NULL ELSE DATE '1995-01-01' + (i % 23)::INT END AS i_receipt,
       DATE '1995-01-01' + (i % 17)::INT AS i_ship
FROM range(2000) t(i)
"""
WORKLOAD = [
    "SELECT COUNT(*) FROM items WHERE i_commit < i_receipt",
    "SELECT COUNT(*) FROM items i1 WHERE i1.i_receipt > i1.i_commit AND NOT EXISTS "
    "(SELECT * FROM items i2 WHERE i2.i_order = i1.i_order AND i2.i_id <> i1.i_id "
    "AND i2.i_receipt > i2.i_commit)",
    "SELECT i_order, COUNT(*) FROM items WHERE i_ship <= i_commit GROUP BY i_order",
]
QUERIES = [
    *WORKLOAD,
    "SELECT COUNT(*) FROM items WHERE NOT (i_commit < i_receipt)",
    "SELECT COUNT(*) FROM items WHERE i_receipt > i_commit OR i_order = 3",
    "SELECT i_id FROM items WHERE i_commit >= i_ship AND i_id < 80 ORDER BY i_id",
    "SELECT COUNT(*) FROM items WHERE i_receipt <= i_commit",  # not in the workload
]
STATEMENTS = [
    "INSERT INTO items VALUES (9000, 1, DATE '1996-01-01', DATE '1995-01-01', DATE '1994-01-01'), "
    "(9001, 1, NULL, DATE '1995-01-01', DATE '1995-01-01')",
    "UPDATE items SET i_commit = i_receipt - 1 WHERE i_id % 10 = 3",
    "UPDATE items SET i_receipt = NULL WHERE i_id % 10 = 4",
    "DELETE FROM items WHERE i_id % 10 = 5",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def items(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("order"), {"items": ITEMS}, WORKLOAD
    )
    yield session, plain
    session.close()


def test_the_design_precomputes_the_comparisons(
    items: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = items
    table = session.design.table("items")
    sources = {e.source: e for e in table.encryptions}
    assert sources["i_commit < i_receipt"].scheme == DET
    assert sources["i_ship <= i_commit"].scheme == DET
    assert sources["i_commit"].scheme == BLOCKS  # nothing reads its values
    if session.backend.compresses_repeated_bytes:  # bit-packed, not a BLOB dictionary
        assert sources["i_commit < i_receipt"].params.get("narrow_bits") == 20


def test_the_server_tests_the_boolean(items: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, _ = items
    text = explain(session, WORKLOAD[1])
    assert "server filter i1.i_receipt > i1.i_commit  [DET" in text
    assert "i2.i_receipt > i2.i_commit" in text and "[OPE" not in text
    assert "fetch i_commit" not in text and "fetch i_receipt" not in text


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_match_plaintext(
    items: tuple[Session, duckdb.DuckDBPyConnection], sql: str
) -> None:
    check_query(*items, sql)


def test_writes_then_queries(items: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = items
    for statement in STATEMENTS:
        session.run(statement)
        plain.execute(statement)
        for sql in QUERIES:
            check_query(session, plain, sql)
