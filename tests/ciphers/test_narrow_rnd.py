"""A number's RND keeps its type's bits, not 64 (issue 40: TPC-DS space).

A column the workload only fetches is stored as row-bound RND. Its 64-bit
ciphertexts are random, so DuckDB cannot compress them; the low ``bits`` bits
of the value XOR as many of the keystream, where ``bits`` holds every value of
the column's type (DECIMAL(7,2): 25), bit-pack instead. Every value the type
admits must still round-trip, inserted after the load too, and a value beyond
the width is refused rather than cut.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from tests.support.oracle import check_query, load_tables
from veil.ciphers.columns import RowBoundCipher
from veil.crypto.rowrnd import RowRnd
from veil.design.domains import rnd_bits, type_domain
from veil.design.model import RND, RND_BITS
from veil.encoding import SqlType
from veil.errors import DomainError
from veil.session.session import Session

TYPES = ["BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "DATE", "DECIMAL(7,2)", "DECIMAL(15,2)"]


@pytest.mark.parametrize("type_name", TYPES)
def test_every_value_of_the_type_round_trips_within_its_bits(type_name: str) -> None:
    sql_type = SqlType(type_name)
    bits = rnd_bits(sql_type)
    domain = type_domain(sql_type)
    assert bits is not None and domain is not None and bits < 64
    low, high = domain
    values = pa.array([low, high, 0, None, -1 if low < 0 else 1, low + 1, high - 1], pa.int64())
    cipher = RowBoundCipher(RowRnd(bytes(32), column="c"), None, bits=bits)
    ids = np.arange(100, 100 + len(values), dtype=np.int64)
    stored = cipher.encrypt_rows(ids, values)
    kept = [v for v in stored.to_pylist() if v is not None]
    assert all(0 <= v < 2**bits for v in kept)
    assert stored.null_count == 1
    assert cipher.decrypt_rows(ids, stored).to_pylist() == values.to_pylist()


def test_wide_types_keep_64_bits() -> None:
    for type_name in ("BIGINT", "TIMESTAMP", "DOUBLE", "VARCHAR"):
        assert rnd_bits(SqlType(type_name)) is None
    assert rnd_bits(SqlType("DECIMAL(18,2)")) == 61
    assert rnd_bits(SqlType("INTEGER"), [0, 100]) == 8  # a declared domain


def test_a_value_beyond_the_width_is_refused() -> None:
    cipher = RowBoundCipher(RowRnd(bytes(32), column="c"), None, bits=25)
    with pytest.raises(DomainError, match="25-bit"):
        cipher.encrypt_rows(np.arange(2, dtype=np.int64), pa.array([1, 2**24], pa.int64()))


SALES = """
SELECT i AS s_id, (i % 17)::INTEGER AS s_store,
       CASE WHEN i % 11 = 0 THEN NULL ELSE (i * 37 % 100000) / 100 END::DECIMAL(7,2) AS s_price,
       (i % 200 - 100)::SMALLINT AS s_delta, DATE '2001-01-01' + (i % 900)::INT AS s_day,
       i % 3 = 0 AS s_flag
FROM range(5000) t(i)
"""
# s_price, s_delta, s_day and s_flag are only read back: RND
QUERIES = [
    "SELECT s_id, s_price, s_delta, s_day, s_flag FROM sales WHERE s_store = 3 ORDER BY s_id",
    "SELECT s_store, SUM(s_price * s_delta), COUNT(s_day), COUNT(s_flag) FROM sales "
    "WHERE s_id > 100 GROUP BY s_store ORDER BY s_store",
]
BOUNDARIES = [
    "INSERT INTO sales VALUES (9000, 3, 99999.99, 32767, DATE '9999-12-31', true), "
    "(9001, 3, -99999.99, -32768, DATE '0001-01-01', false), "
    "(9002, 3, NULL, NULL, NULL, NULL)",
    "UPDATE sales SET s_price = -0.01, s_delta = -1 WHERE s_id % 500 = 3",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def sales(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("narrow-rnd"), {"sales": SALES}, QUERIES
    )
    yield session, plain
    session.close()


def test_fetched_numbers_are_narrow_rnd_and_match_plaintext(
    sales: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, plain = sales
    table = session.design.table("sales")
    widths = {e.source: e.params.get(RND_BITS) for e in table.encryptions if e.scheme == RND}
    assert widths == {"s_price": 25, "s_delta": 16, "s_day": 32, "s_flag": 2}
    check_boundaries(session, plain)


def check_boundaries(session: Session, plain: duckdb.DuckDBPyConnection) -> None:
    """``QUERIES`` answer as plaintext DuckDB does, before and after each of ``BOUNDARIES``."""
    for sql in QUERIES:
        check_query(session, plain, sql)
    for statement in BOUNDARIES:
        session.run(statement)
        plain.execute(statement)
        for sql in QUERIES:
            check_query(session, plain, sql)


def test_narrow_decryption_keeps_nulls_and_slices() -> None:
    """The sign extension runs over the values' buffer: NULLs and a slice's offset kept."""
    bits = 25
    cipher = RowBoundCipher(RowRnd(bytes(32), column="c"), None, bits=bits)
    values = pa.array([-(2**24), None, 2**24 - 1, 0, None, -1, 7], pa.int64())
    ids = np.arange(100, 107, dtype=np.int64)
    stored = cipher.encrypt_rows(ids, values)
    assert cipher.decrypt_rows(ids, stored).equals(values)
    part = cipher.decrypt_rows(ids[2:6], stored.slice(2, 4))
    assert part.equals(values.slice(2, 4))
