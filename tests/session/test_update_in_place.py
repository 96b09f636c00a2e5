"""UPDATE rewrites rows where they are: one server UPDATE, the table's row count kept.

On DuckDB and PostgreSQL (``Backend.updates_in_place``) an UPDATE's new
ciphertexts replace the old ones by the server's own UPDATE, under fresh row
ids; nothing is deleted and appended. PostgreSQL sends a few rows as array
parameters and many through COPY into a temporary table: both are run here.
Spark, which rewrites by delete and append, is covered by ``test_dml``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.oracle import assert_same, server_url
from veil.load.loader import load
from veil.session.session import Session

WORKLOAD = [
    "SELECT o_orderstatus, SUM(o_totalprice), COUNT(*) FROM orders GROUP BY 1",
    "SELECT * FROM orders WHERE o_orderkey = 7",
]
CHECKS = [
    "SELECT * FROM orders",
    "SELECT o_orderstatus, SUM(o_totalprice), COUNT(*) FROM orders GROUP BY 1",
    "SELECT * FROM orders WHERE o_orderkey = 7",
]
STATEMENTS = [  # one row (array parameters on PostgreSQL), then every row (COPY)
    "UPDATE orders SET o_totalprice = o_totalprice + 1, o_comment = 'one' WHERE o_orderkey = 7",
    "UPDATE orders SET o_totalprice = o_totalprice * 2, o_orderstatus = lower(o_orderstatus)",
    "UPDATE orders SET o_clerk = NULL WHERE o_orderkey % 3 = 0",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tpch_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("in_place")
    source = root / "src"
    source.mkdir()
    (source / "orders.parquet").symlink_to(tpch_dir / "orders.parquet")
    plain = duckdb.connect()
    plain.execute(f"CREATE TABLE orders AS SELECT * FROM read_parquet('{tpch_dir}/orders.parquet')")
    url = server_url(request, root, "veil_sql_in_place")
    load(str(source), url, str(root / "client"), WORKLOAD, progress=lambda _: None)
    session = Session(root / "client")
    yield session, plain
    session.close()


def test_updates_rewrite_rows_in_place(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = pair
    table = session.design.table("orders")
    rows = plain.execute("SELECT count(*) FROM orders").fetchone()
    assert rows is not None and rows[0] > 512  # PostgreSQL's COPY path runs too

    def stored() -> int:
        counted = session.backend.execute(f'SELECT count(*) FROM "{table.server_name}"')
        return int(counted.column(0)[0].as_py())

    sent: list[str] = []
    remove = session.backend.add_statement_listener(lambda sql, _: sent.append(sql))
    try:
        for statement in STATEMENTS:
            sent.clear()
            expected = plain.execute(statement).fetchall()[0][0]
            assert session.run(statement).rowcount == expected, statement
            writes = [s.split()[0].upper() for s in sent if f'"{table.server_name}"' in s]
            assert "UPDATE" in writes and "DELETE" not in writes, (statement, writes)
            assert stored() == rows[0], statement
            for check in CHECKS:
                assert_same(session.run(check).table, plain.execute(check).fetchall(), False, check)
    finally:
        remove()


def test_row_ids_stay_unique_and_fresh(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    """Every rewritten row got a new id (one-time pads), and no two rows share one."""
    session, _ = pair
    table = session.design.table("orders")
    ids = f'SELECT "{table.row_id}" FROM "{table.server_name}"'
    before = set(session.backend.execute(ids).column(0).to_pylist())
    for _ in range(3):  # the first plans the write's shape, the later ones run it bound
        session.run(
            "UPDATE orders SET o_shippriority = o_shippriority + ? WHERE o_orderkey = ?", [1, 7]
        )
        session.run("UPDATE orders SET o_shippriority = o_shippriority + 1 WHERE o_orderkey = 7")
    after = session.backend.execute(ids).column(0).to_pylist()
    assert len(after) == len(set(after)) == len(before)
    # ids come in blocks a process takes from the counter (``row_ids``): new, not the largest
    assert len(set(after) - before) == 1
