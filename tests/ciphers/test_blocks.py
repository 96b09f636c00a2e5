"""Columns the workload never reads, stored as sealed blocks of rows, on both backends.

``tickets`` has columns of every kind that no workload query reads (text with
a canary, integers, decimals, dates, doubles, booleans, NULLs): the design
stores them as BLOCKS in a side table. Queries outside the workload that read
them (whole rows, selective rows, joins, ORDER BY, client aggregates), and
INSERT / UPDATE / DELETE, must give plaintext DuckDB's answers; the server
stores no plaintext; a block moved to other rows does not open.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import veil.ciphers.blocks as blocks_module
import veil.load.loader as loader
from tests.support.oracle import check_query, load_tables
from veil.crypto.rowblocks import BlockIntegrityError
from veil.design.model import BLOCKS
from veil.session.session import Session

CANARY = "zebracanary"
TICKETS = f"""
SELECT i AS t_id, i % 9 AS t_kind,
       CASE WHEN i % 17 = 0 THEN NULL ELSE 'note {CANARY} ' || (i * 7919 % 1000) END AS t_note,
       (i * 31 % 200)::INTEGER AS t_qty, (i % 1000) / 100 + 0.25::DECIMAL(12,2) AS t_price,
       DATE '2020-01-01' + (i % 900)::INT AS t_day, CASE WHEN i % 5 = 0 THEN NULL ELSE i / 7.0 END AS t_x,
       i % 2 = 0 AS t_open
FROM range(2500) t(i)
"""
KINDS = "SELECT i AS k_id, 'kind ' || i AS k_name FROM range(9) t(i)"
WORKLOAD = [
    "SELECT t_kind, COUNT(*) FROM tickets WHERE t_id > 10 GROUP BY t_kind",
    "SELECT k_name FROM kinds WHERE k_id = 3",
]
QUERIES = [
    "SELECT * FROM tickets WHERE t_id = 1234",
    "SELECT * FROM tickets WHERE t_kind = 4 ORDER BY t_id",
    "SELECT t_note, t_qty, t_day FROM tickets WHERE t_id BETWEEN 700 AND 705 ORDER BY t_id",
    "SELECT t_id, t_note FROM tickets WHERE t_id IN (3, 1999, 2400, 17) ORDER BY t_id",
    "SELECT COUNT(t_note), SUM(t_qty), MIN(t_day), MAX(t_price), SUM(t_x), "
    "COUNT(*) FILTER (WHERE t_open) FROM tickets",
    "SELECT k_name, COUNT(*), MAX(t_note) FROM tickets JOIN kinds ON t_kind = k_id "
    "WHERE t_id < 300 GROUP BY k_name ORDER BY k_name",
    "SELECT t_note FROM tickets WHERE t_note LIKE '%99%' ORDER BY t_note, t_id LIMIT 7",
    "SELECT t_kind, AVG(t_qty) FROM tickets WHERE t_day > DATE '2021-06-01' GROUP BY t_kind",
    "SELECT t_kind, COUNT(t_note), COUNT(*) FROM tickets GROUP BY t_kind ORDER BY t_kind",
]
STATEMENTS = [
    f"INSERT INTO tickets VALUES (9000, 1, 'fresh {CANARY}', 5, 1.50, DATE '2030-01-01', 0.5, true), "
    "(9001, 2, NULL, NULL, NULL, NULL, NULL, NULL)",
    "UPDATE tickets SET t_note = 'changed', t_qty = t_qty + 1 WHERE t_id % 250 = 3",
    "DELETE FROM tickets WHERE t_kind = 4",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def tickets(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection, str]]:
    root = tmp_path_factory.mktemp("blocks")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loader, "BATCH_ROWS", 1000)  # blocks of 128, batches of 1000
        patch.setattr(blocks_module, "BLOCK_ROWS", 128)
        session, plain = load_tables(request, root, {"tickets": TICKETS, "kinds": KINDS}, WORKLOAD)
    yield session, plain, str(root)
    session.close()


def test_unread_columns_are_blocks(tickets: tuple[Session, duckdb.DuckDBPyConnection, str]) -> None:
    session, _, _ = tickets
    table = session.design.table("tickets")
    stored = {e.source for e in table.encryptions if e.scheme == BLOCKS}
    assert stored == {"t_note", "t_qty", "t_price", "t_day", "t_x", "t_open"}
    assert table.blocks_table in table.side_tables()
    assert not session.design.table("kinds").blocks_table  # the workload reads all of kinds
    count = session.backend.execute(f"SELECT COUNT(*) FROM {table.blocks_table}")
    assert count.column(0)[0].as_py() == 6 * (8 + 8 + 4)  # batches of 1000, 1000 and 500 rows


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_match_plaintext(
    tickets: tuple[Session, duckdb.DuckDBPyConnection, str], sql: str
) -> None:
    session, plain, _ = tickets
    check_query(session, plain, sql)


def test_count_of_a_blocks_column_is_not_counted_by_the_server(
    tickets: tuple[Session, duckdb.DuckDBPyConnection, str],
) -> None:
    """Its NULLs are inside the sealed blocks: the split plan fetches them (no fallback)."""
    session, _, _ = tickets
    plan = session.run(QUERIES[-1]).plan
    assert plan is not None and plan.pushdown
    assert all(s.aggregation is None for s in plan.scans)


def test_writes_then_queries(tickets: tuple[Session, duckdb.DuckDBPyConnection, str]) -> None:
    session, plain, _ = tickets
    for statement in STATEMENTS:
        session.run(statement)
        plain.execute(statement)
        for sql in QUERIES:
            check_query(session, plain, sql)


def test_the_server_stores_no_plaintext(
    tickets: tuple[Session, duckdb.DuckDBPyConnection, str],
) -> None:
    session, _, root = tickets
    backend = session.backend
    for name in backend.table_names():  # every value of every server table, blocks too
        for column in backend.execute(f'SELECT * FROM "{name}"').columns:
            if pa.types.is_binary(column.type):
                assert CANARY.encode() not in b"".join(v for v in column.to_pylist() if v)
    if backend.dialect == "duckdb":  # and every byte of the database file
        backend.execute("CHECKPOINT")
        assert CANARY.encode() not in Path(root, "server.duckdb").read_bytes()


def test_a_block_moved_to_other_rows_does_not_open(
    tickets: tuple[Session, duckdb.DuckDBPyConnection, str],
) -> None:
    session, _, _ = tickets
    table = session.design.table("tickets")
    backend = session.backend
    blocks = table.blocks_table
    with backend.transaction():
        backend.execute(f"UPDATE {blocks} SET first_id = -first_id - 1 WHERE first_id = 0")
        backend.execute(f"UPDATE {blocks} SET first_id = 0 WHERE first_id = 128")
        backend.execute(f"UPDATE {blocks} SET first_id = 128 WHERE first_id = -1")
    try:
        with pytest.raises(BlockIntegrityError, match="does not decrypt"):
            session.run("SELECT t_note FROM tickets WHERE t_id = 5")
    finally:
        with backend.transaction():
            backend.execute(f"UPDATE {blocks} SET first_id = -1 WHERE first_id = 0")
            backend.execute(f"UPDATE {blocks} SET first_id = 0 WHERE first_id = 128")
            backend.execute(f"UPDATE {blocks} SET first_id = 128 WHERE first_id = -1")
