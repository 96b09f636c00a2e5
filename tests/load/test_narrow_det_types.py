"""DET scopes narrowed by their SQL types on PostgreSQL (``narrow_det.choose_by_type``).

Keys, dates, small decimals and booleans whose types bound every value to 32
bits are stored as INTEGER ciphertexts (4 bytes a row), whatever the loaded
values, as are ASHE words of at most 31 bits; a BIGINT scope stays 64-bit.
Every value the types accept, the extremes among them, must be written and
found (and summed), and constants beyond the type must compare as plaintext
DuckDB compares them. On DuckDB the same queries run under its data-sized
narrow DET.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from tests.support.oracle import check_query, load_tables
from veil.ciphers.columns import STORED_BITS
from veil.design.model import DET
from veil.load.narrow_det import NARROW_PARAM
from veil.session.session import Session

ITEMS = (
    "SELECT i::INTEGER AS i_id, 'item ' || i AS i_name, (i % 7)::SMALLINT AS i_class, "
    "(DATE '2000-01-01' + (i % 400)::INTEGER) AS i_day, (i % 97 / 4)::DECIMAL(7, 2) AS i_price, "
    "i % 3 = 0 AS i_flag, i::BIGINT * 5 AS i_big FROM range(20000) t(i)"
)
SALES = (
    "SELECT i AS s_id, ((i * 7919) % 25000)::INTEGER AS s_item, "
    "(DATE '2000-01-01' + (i % 500)::INTEGER) AS s_day, (i % 13)::BIGINT * 5 AS s_big "
    "FROM range(40000) t(i)"
)
QUERIES = [
    "SELECT i_name FROM items WHERE i_id = 4242",
    "SELECT COUNT(*) FROM items JOIN sales ON i_id = s_item WHERE i_class = 3",
    "SELECT s_item, COUNT(*) FROM sales WHERE s_item IN (0, 7919, 24999, 1099511627776) "
    "GROUP BY s_item ORDER BY s_item",
    "SELECT i_id FROM items WHERE i_id = 2147483647 OR i_id = -2147483648 OR i_id = 4294967296 "
    "ORDER BY i_id",
    "SELECT COUNT(*) FROM items JOIN sales ON i_day = s_day WHERE i_flag AND i_price = 3.00",
    "SELECT i_day, COUNT(*) FROM items WHERE i_price IN (1.00, 2.00, 9999999.99) "
    "GROUP BY i_day ORDER BY i_day LIMIT 5",
    "SELECT COUNT(*) FROM items JOIN sales ON i_big = s_big",
    "SELECT i_class, i_flag, COUNT(DISTINCT i_day) FROM items GROUP BY i_class, i_flag "
    "ORDER BY i_class, i_flag",
    "SELECT i_class, SUM(i_price), SUM(i_id), COUNT(i_price) FROM items GROUP BY i_class "
    "ORDER BY i_class",
]
STATEMENTS = [
    "INSERT INTO items VALUES (2147483647, 'top', 32767, DATE '5877641-06-23', 99999.99, true, "
    "9223372036854775807), (-2147483648, 'bottom', -32768, DATE '-4712-01-01', -99999.99, "
    "false, -9223372036854775807), (NULL, 'none', NULL, NULL, NULL, NULL, NULL)",
    "INSERT INTO sales VALUES (90000, 2147483647, DATE '5877641-06-23', 9223372036854775807), "
    "(90001, -2147483648, DATE '-4712-01-01', 0), (90002, NULL, NULL, NULL)",
    "UPDATE sales SET s_item = -2147483648, s_day = 'infinity' WHERE s_id = 17",
]


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, duckdb.DuckDBPyConnection]]:
    session, plain = load_tables(
        request, tmp_path_factory.mktemp("typed"), {"items": ITEMS, "sales": SALES}, QUERIES
    )
    yield session, plain
    session.close()


def test_postgres_stores_type_bounded_scopes_as_integers(
    pair: tuple[Session, duckdb.DuckDBPyConnection],
) -> None:
    session, _ = pair
    if session.backend.dialect != "postgres":
        pytest.skip("DuckDB sizes narrow DET from the data (test_narrow_det)")
    items, sales = session.design.table("items"), session.design.table("sales")
    for table, column, bits in [
        (items, "i_id", 32),
        (sales, "s_item", 32),
        (items, "i_class", 20),
        (items, "i_day", 32),
        (sales, "s_day", 32),
        (items, "i_price", 25),
    ]:
        enc = table.find(column, DET)
        assert enc is not None, column
        assert enc.params.get(NARROW_PARAM) == bits, column
        assert enc.params.get(STORED_BITS) == 32, column
    for table, column in [(items, "i_big"), (sales, "s_big")]:
        enc = table.find(column, DET)
        assert enc is not None and NARROW_PARAM not in enc.params, column
    key = items.find("i_id", DET)
    assert key is not None
    types = session.backend.execute(
        "SELECT data_type FROM information_schema.columns WHERE table_name = $1 "
        "AND column_name = $2",
        [items.server_name, key.name],
    )
    assert types.column(0).to_pylist() == ["integer"]
    # the ASHE words (30 bits and less here) too, and the flags word if it is as narrow
    sums = items.sums
    assert sums is not None and sums.stored_bits == 32 and sums.overflow_column is not None
    words = [name for names in sums.columns for name in names]
    stored = session.backend.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $1",
        [items.server_name],
    )
    kinds = dict(zip(*(stored.column(i).to_pylist() for i in range(2)), strict=True))
    assert {kinds[name] for name in words} == {"integer"}
    flags = "integer" if sums.overflow_bits <= 31 else "bigint"
    assert kinds[sums.overflow_column] == flags


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_match_plaintext(pair: tuple[Session, duckdb.DuckDBPyConnection], sql: str) -> None:
    session, plain = pair
    check_query(session, plain, sql)


def test_writes_at_the_types_extremes(pair: tuple[Session, duckdb.DuckDBPyConnection]) -> None:
    session, plain = pair
    for statement in STATEMENTS:
        session.run(statement)
        plain.execute(statement)
    for sql in QUERIES:
        check_query(session, plain, sql)
