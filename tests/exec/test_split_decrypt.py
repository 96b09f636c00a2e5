"""Long columns are decrypted in slices side by side (``veil.exec.decrypt._parts``).

Lowered to 1,000 rows here, so every scheme's decryption runs on Arrow
slices with offsets: DET integers and text, OPE, row-bound RND (with the
slices of their row ids), NULLs, on both backends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import duckdb
import pytest

import veil.exec.decrypt as fetch
from tests.support.oracle import check_query, load_tables
from veil.session.session import Session

ITEMS = """
SELECT i AS i_id, CASE WHEN i % 17 = 0 THEN NULL ELSE i * 31 % 5003 END AS i_n,
       'name ' || (i % 700) AS i_name, CAST(i % 911 AS DECIMAL(10, 2)) / 7 AS i_price,
       DATE '2020-01-01' + (i % 1500)::INT AS i_day, repeat('x', i % 13) AS i_note
FROM range(7000) t(i)
"""
QUERIES = [
    "SELECT i_n, i_note FROM items ORDER BY i_n, i_note",
    "SELECT i_name, i_price FROM items ORDER BY i_price, i_name",
    "SELECT i_name, i_day FROM items WHERE i_n > 100 ORDER BY i_day, i_name",
    "SELECT i_id, i_price FROM items WHERE i_day BETWEEN DATE '2020-03-01' AND DATE '2021-01-01' "
    "ORDER BY i_id",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("split"), {"items": ITEMS}, QUERIES
    )
    yield session, plain
    session.close()


@pytest.mark.parametrize("sql", QUERIES)
def test_sliced_decryption_matches_plaintext(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
    sql: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(fetch, "_SPLIT_ROWS", 1000)
    monkeypatch.setattr(fetch, "_PARALLEL_ROWS", 1000)
    monkeypatch.setattr(fetch.os, "cpu_count", lambda: 64)  # 4 threads
    sliced: list[int] = []
    parts = fetch._parts

    def counted(ciphertexts):  # type: ignore[no-untyped-def]
        found = parts(ciphertexts)
        sliced.append(len(found))
        return found

    monkeypatch.setattr(fetch, "_parts", counted)
    session, plain = pair
    with caplog.at_level(logging.INFO, logger="veil"):
        check_query(session, plain, sql)
    assert max(sliced) > 1  # some column was cut into slices
    assert "split plan failed" not in caplog.text  # right through the slices, not the fallback
