"""SUM and AVG on the server from packed Paillier groups (MONOMI §5.2-5.3), against plain DuckDB.

``readings`` has negative values, NULLs in summed columns, a group whose
few rows lie in packs shared with other groups (partial masks only), and a
group whose summed column is always NULL. A second load forces 3 bits of
headroom (chunks of 8 packs) on narrow declared domains, so a group's sums
overflow their slots unless the server multiplies at most 8 packs a product.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
import sqlglot

import veil.ciphers.hom_group as hom_group
from tests.exec.conftest import LoadOnServer
from tests.support.oracle import assert_same
from veil.ciphers.hom_group import slot_masks
from veil.session.session import Session

ROWS = 3000
READINGS = f"""
SELECT i AS id,
       CASE WHEN i IN (5, 1001, 2002) THEN 'rare' WHEN i % 500 = 7 THEN 'nulls'
            WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END AS g,
       CASE WHEN i % 7 = 0 OR i % 500 = 7 THEN NULL
            ELSE CAST((i * 37 % 2001 - 1000) / 4 AS DECIMAL(10, 2)) END AS a,
       CAST(i * 13 % 97 - 60 AS INTEGER) AS b,
       CAST(1000 - i % 3 AS SMALLINT) AS c
FROM range({ROWS}) t(i)
"""

QUERIES = [
    "SELECT g, SUM(a), AVG(a), COUNT(a), COUNT(*), SUM(b), AVG(a * b), MIN(b), MAX(b) FROM readings GROUP BY g",
    "SELECT SUM(a), AVG(b), COUNT(*) FROM readings WHERE b < 0",
    "SELECT g, SUM(a * b), AVG(a), COUNT(a) FROM readings WHERE id BETWEEN 100 AND 1500 GROUP BY g",
    "SELECT SUM(a), AVG(a), SUM(b) FROM readings WHERE g = 'rare'",
    "SELECT SUM(a), AVG(a), COUNT(a), SUM(b) FROM readings WHERE g = 'nulls'",
    "SELECT SUM(a * b), AVG(b), COUNT(*) FROM readings WHERE g = 'nothing'",
    "SELECT g, SUM(a) FROM readings WHERE b > 1000 GROUP BY g",
    "SELECT id % 10 AS k, SUM(a) FROM readings GROUP BY k ORDER BY k",
]
SERVER_SUMS = QUERIES[:7]


@pytest.fixture(scope="module")
def readings_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("readings")
    duckdb.sql(READINGS).write_parquet(str(source / "readings.parquet"))
    return source


@pytest.fixture(scope="module")
def hom_session(load_on_server: LoadOnServer, readings_dir: Path) -> Session:
    # several load batches, so slots and packs must continue across batches
    opened = load_on_server(readings_dir, "hom", QUERIES, batch_rows=700, sums="paillier")
    opened.hom_pushdown = "always"  # these tables are far too small for the cost rule
    return opened


CHUNKED_QUERIES = [
    "SELECT g, SUM(c), AVG(c), COUNT(*), SUM(-c), MIN(b) FROM readings GROUP BY g",
    "SELECT g, SUM(-c), AVG(c) FROM readings WHERE id > 100 GROUP BY g",
    "SELECT SUM(c), AVG(-c), COUNT(*) FROM readings WHERE b < 0",
    "SELECT SUM(c), SUM(-c) FROM readings WHERE g = 'rare'",
]
CHUNK_BITS = 3  # at most 8 packs a product


@pytest.fixture(scope="module")
def chunked_session(load_on_server: LoadOnServer, readings_dir: Path) -> Session:
    """c in 0..1000 (declared): 11 bits and 3 of headroom, 16-bit slots.

    A group of ~1500 rows (~190 packs) sums ~190 values of ~1000 in each slot,
    beyond the slots' ±2^15 unless the server multiplies at most 8 packs a
    product (the client adds the chunks' sums).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hom_group, "MIN_SUMMAND_BITS", CHUNK_BITS)
        patch.setattr(hom_group, "MAX_SUMMAND_BITS", CHUNK_BITS)
        opened = load_on_server(
            readings_dir, "hom_chunked", CHUNKED_QUERIES,
            domains=["readings.c=0..1000"], sums="paillier",
        )  # fmt: skip
    opened.hom_pushdown = "always"
    return opened


@pytest.fixture(scope="module")
def plain_readings(readings_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE readings AS SELECT * FROM '{readings_dir / 'readings.parquet'}'")
    return con


@pytest.mark.parametrize("sql", QUERIES)
def test_hom_sums_match_plaintext(
    hom_session: Session, plain_readings: duckdb.DuckDBPyConnection, sql: str
) -> None:
    ordered = sqlglot.parse_one(sql, read="duckdb").args.get("order") is not None
    assert_same(hom_session.run(sql).table, plain_readings.execute(sql).fetchall(), ordered, sql)


@pytest.mark.parametrize("sql", SERVER_SUMS)
def test_sums_run_on_the_server(hom_session: Session, sql: str) -> None:
    group = hom_session.design.table("readings").hom
    assert group is not None and group.rows_per_ciphertext > 1
    result = hom_session.run(sql)
    assert result.plan is not None and result.plan.scans[0].aggregation is not None
    assert all(group.server_name in s for s in result.stats.remote_sql)
    assert result.stats.bytes_received < 20_000  # a few (group, mask) rows, not 3000 rows


def test_the_rare_group_has_only_partial_masks(hom_session: Session) -> None:
    group = hom_session.design.table("readings").hom
    assert group is not None
    full = (1 << group.rows_per_ciphertext) - 1
    slot = f'"{group.slot_column}"'
    table = hom_session.design.table("readings")
    det = table.find("g", "DET")
    assert det is not None
    rare = hom_session.encrypt_constant(sqlglot.parse_one("'rare'"), det)
    slots = hom_session.backend.execute(
        f'SELECT {slot} FROM "{table.server_name}" WHERE "{det.name}" = $1', [rare]
    ).column(0)
    masks = slot_masks(np.array(slots.to_pylist()), group.rows_per_ciphertext)
    assert len(masks) == 3 and full not in masks.values()


def test_explain_shows_the_hom_step(hom_session: Session) -> None:
    from veil.frontend.explain import explain

    text = explain(hom_session, QUERIES[0])
    assert "server HOM" in text and "load order" in text
    # Its storage line counts the HOM and blocks side tables with the table they belong to.
    backend = hom_session.backend
    table = hom_session.design.table("readings")
    assert table.hom is not None
    sides = [table.hom.server_name, table.blocks_table]
    read = sum(backend.table_bytes(name) for name in [table.server_name, *sides] if name)
    assert f"server storage: {read / 2**20:,.1f} MB in the tables this query reads" in text


@pytest.mark.parametrize("sql", CHUNKED_QUERIES)
def test_chunked_products_sum_exactly(
    chunked_session: Session, plain_readings: duckdb.DuckDBPyConnection, sql: str
) -> None:
    group = chunked_session.design.table("readings").hom
    assert group is not None and group.summand_bits == CHUNK_BITS and group.value_bits == 11
    assert group.rows_per_ciphertext == 8  # ~47 chunks of 8 packs for 3000 rows
    result = chunked_session.run(sql)
    assert result.plan is not None and result.plan.scans[0].aggregation is not None
    assert_same(result.table, plain_readings.execute(sql).fetchall(), False, sql)
