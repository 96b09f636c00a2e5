"""Batches ordered by a key's DET ciphertexts (``veil.load.cipher_order``).

A dimension-like table (no sums) with a DET key of many values and a date the
workload filters by ranges, loaded on DuckDB in batches of 700 rows: within each
batch and run of equal dates the rows follow the key's ciphertexts, the dates'
order holds across the table, and every answer is plaintext DuckDB's, also after
writes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import veil.load.loader as loader
from tests.support.oracle import check_query
from veil.design.model import DET, OPE, Column, Encryption, TableDesign
from veil.load import cipher_order
from veil.load.loader import load
from veil.session.session import Session

SOURCE = """
    SELECT i AS k, DATE '2020-01-01' + (i // 500)::INTEGER AS d, i % 7 AS v,
           CASE WHEN i % 11 = 0 THEN NULL ELSE 'w' || (i % 13) END AS s
    FROM range(3000) AS t(i)
"""
QUERIES = [
    "SELECT k, d, v, s FROM facts WHERE k = 1234",
    "SELECT count(*), count(s) FROM facts WHERE d BETWEEN DATE '2020-01-02' AND DATE '2020-01-04'",
    "SELECT v, count(*) FROM facts WHERE d >= DATE '2020-01-03' GROUP BY v ORDER BY v",
    "SELECT k, d FROM facts WHERE k IN (5, 600, 2999) ORDER BY k",
    "SELECT d, count(DISTINCT k) FROM facts GROUP BY d ORDER BY d",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cipher-order")
    duckdb.sql(SOURCE).write_parquet(str(folder / "facts.parquet"))
    return folder


@pytest.fixture(scope="module")
def plain() -> duckdb.DuckDBPyConnection:
    """The same rows in plaintext DuckDB (the writes' test changes both sides)."""
    return duckdb.connect().execute(f"CREATE TABLE facts AS {SOURCE}")


@pytest.fixture(scope="module")
def session(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("cipher-order-db")
    url = f"duckdb:///{root / 'server.duckdb'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cipher_order, "MIN_ROWS", 1000)
        patch.setattr(cipher_order, "MIN_DISTINCT", 100)
        patch.setattr(loader, "BATCH_ROWS", 700)  # runs of dates cross batches
        load(str(source), url, str(root / "client"), QUERIES, progress=lambda _: None)
    opened = Session(root / "client")
    yield opened
    opened.close()


def _rows(session: Session) -> list[tuple[int, int]]:
    """(DET key ciphertext, OPE date ciphertext) of each server row, in row-id order."""
    table = session.design.table("facts")
    k, d = table.find("k", DET), table.find("d", OPE)
    assert k is not None and d is not None
    found = session.backend.execute(
        f'SELECT "{k.name}", "{d.name}" FROM "{table.server_name}" ORDER BY "{table.row_id}"'
    )
    return list(zip(found.column(0).to_pylist(), found.column(1).to_pylist(), strict=True))


def test_rows_follow_the_key_ciphertexts_within_each_batch_and_date(session: Session) -> None:
    table = session.design.table("facts")
    assert table.sort_by == "d"
    rows = _rows(session)
    assert [d for _, d in rows] == sorted(d for _, d in rows)  # the dates' order holds
    for start in range(0, len(rows), 700):
        batch = rows[start : start + 700]
        for _, run in itertools.groupby(batch, key=lambda row: row[1]):
            keys = [k for k, _ in run]
            assert keys == sorted(keys)
    assert [k for k, _ in rows] != sorted(k for k, _ in rows)  # ordered per run, not whole


@pytest.mark.parametrize("sql", QUERIES)
def test_answers_match_plaintext(
    session: Session, plain: duckdb.DuckDBPyConnection, sql: str
) -> None:
    check_query(session, plain, sql)


def test_answers_match_plaintext_after_writes(
    session: Session, plain: duckdb.DuckDBPyConnection
) -> None:
    statements = [
        "INSERT INTO facts VALUES (5000, DATE '2020-01-02', 3, 'new'), (5001, NULL, 1, NULL)",
        "UPDATE facts SET v = v + 1 WHERE k % 97 = 3",
        "DELETE FROM facts WHERE k = 1234",
    ]
    for statement in statements:
        plain.execute(statement)
        session.run(statement)
    for sql in QUERIES:
        check_query(session, plain, sql)


def _table(sums: bool = False, cluster: bool = False) -> TableDesign:
    key = Encryption("c_k", "k", DET, "BIGINT", "det:t.k", {"narrow_bits": 24, "distinct": 9000})
    few = Encryption("c_v", "v", DET, "BIGINT", "det:t.v", {"narrow_bits": 20, "distinct": 7})
    table = TableDesign("t", "t_x", "c_id", [Column("k", "BIGINT"), Column("v", "BIGINT")],
                        [few, key])  # fmt: skip
    if cluster:
        table.cluster_by = ["v"]
    if sums:
        from veil.design.model import AsheSums

        table.sums = AsheSums(["v"], ["BIGINT"], [["c_s"]], "ashe:s")
    return table


def test_the_key_is_the_narrow_det_column_of_most_values() -> None:
    assert (key := cipher_order.key_of(_table(), 1_000_000)) is not None and key.source == "k"
    assert cipher_order.key_of(_table(), 50_000) is None  # too few rows to matter
    # rows something else orders keep that order (ASHE's runs, clusters)
    assert cipher_order.key_of(_table(sums=True), 1_000_000) is None
    assert cipher_order.key_of(_table(cluster=True), 1_000_000) is None
    table = _table()
    table.encryptions[1].params.pop("narrow_bits")  # not narrow: no bit-packing to help
    assert cipher_order.key_of(table, 1_000_000) is None
