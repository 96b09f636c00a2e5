"""OPE columns warmed by their sorted distinct values before their rows (``veil.load.ope_warm``).

A table whose OPE amount repeats its ~400 values over 6,000 rows, loaded on DuckDB
in batches of 500 rows on every core with the thresholds lowered so it is warmed:
each encrypting thread primes its cipher with the values in ascending order, the
stored ciphertexts are what a cold cipher gives for the source's values, and the
answers are plaintext DuckDB's.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import veil.load.loader as loader
from tests.support.oracle import check_query
from veil.ciphers.columns import column_cipher
from veil.ciphers.encrypt import TableEncryptor
from veil.design.model import OPE
from veil.encoding import encode
from veil.load import ope_warm
from veil.load.loader import load
from veil.session.session import Session

SOURCE = """
    SELECT i AS k, CAST(((i * 7919) % 397) - 150 AS DECIMAL(7, 2)) / 4 AS amount,
           CASE WHEN i % 13 = 0 THEN NULL ELSE i % 5 END AS g
    FROM range(6000) AS t(i)
"""
QUERIES = [
    "SELECT count(*) FROM sales WHERE amount > 10",
    "SELECT g, count(*), min(amount), max(amount) FROM sales "
    "WHERE amount BETWEEN -20 AND 30 GROUP BY g ORDER BY g",
    "SELECT k FROM sales WHERE amount < -37 ORDER BY k LIMIT 20",
]


@pytest.fixture(scope="module")
def plain() -> duckdb.DuckDBPyConnection:
    return duckdb.connect().execute(f"CREATE TABLE sales AS {SOURCE}")


@pytest.fixture(scope="module")
def primed() -> list[dict[str, pa.Array]]:
    return []


@pytest.fixture(scope="module")
def session(
    tmp_path_factory: pytest.TempPathFactory, primed: list[dict[str, pa.Array]]
) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("ope-warm")
    duckdb.sql(SOURCE).write_parquet(str(root / "sales.parquet"))
    prime = TableEncryptor.prime

    def recorded(self: TableEncryptor, values: dict[str, pa.Array]) -> None:
        primed.append(dict(values))
        prime(self, values)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ope_warm, "MIN_DISTINCT", 100)
        patch.setattr(loader, "BATCH_ROWS", 500)
        patch.setattr(TableEncryptor, "prime", recorded)
        load(str(root / "sales.parquet"), f"duckdb:///{root / 'server.duckdb'}",
             str(root / "client"), QUERIES, progress=lambda _: None)  # fmt: skip
    opened = Session(root / "client")
    yield opened
    opened.close()


def test_each_thread_primes_the_sorted_distinct_values(
    session: Session, primed: list[dict[str, pa.Array]], plain: duckdb.DuckDBPyConnection
) -> None:
    amount = session.design.table("sales").find("amount", OPE)
    assert amount is not None
    assert primed and all(list(p) == [amount.name] for p in primed)
    values = plain.sql("SELECT DISTINCT amount FROM sales ORDER BY amount").to_arrow_table()
    expected = encode(values.column(0).combine_chunks(), amount.sql_type)
    for warmed in primed:
        assert warmed[amount.name].equals(expected)


def test_stored_ciphertexts_are_a_cold_ciphers(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    table = session.design.table("sales")
    amount = table.find("amount", OPE)
    assert amount is not None
    stored = session.backend.execute(
        f'SELECT "{amount.name}" FROM "{table.server_name}" ORDER BY "{table.row_id}"'
    ).column(0)
    # the ids follow the load's order, not the source's: compare the ciphertexts as multisets
    source = plain.sql("SELECT amount FROM sales").to_arrow_table().column(0).combine_chunks()
    cold = column_cipher(session.master, amount).encrypt(encode(source, amount.sql_type))
    assert sorted(pa.array(cold).to_pylist(), key=str) == sorted(stored.to_pylist(), key=str)
    assert np.unique(np.asarray(pa.array(cold).drop_null())).size <= 397


@pytest.mark.parametrize("sql", QUERIES)
def test_answers_match_plaintext(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    check_query(session, plain, sql)


def test_no_candidates_below_the_thresholds() -> None:
    from veil.design.model import Column, Encryption, TableDesign

    few = Encryption("c_a", "a", OPE, "BIGINT", "ope:t.a", {"bits": 32, "distinct": 50})
    many = Encryption("c_b", "b", OPE, "BIGINT", "ope:t.b", {"bits": 32, "distinct": 9000})
    table = TableDesign("t", "t_x", "c_id", [Column("a", "BIGINT"), Column("b", "BIGINT")],
                        [few, many])  # fmt: skip
    assert ope_warm.candidates(table, 100_000) == [many]
    assert ope_warm.candidates(table, 10_000) == []  # b's values repeat too little
    assert ope_warm.candidates(table, None) == []
