"""Canaries: distinctive plaintexts never reach the server, in any form we can see."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.tpch import BACKEND_SESSIONS
from veil.backends.spark_session import parse_url
from veil.session.session import Session

# Values present in TPC-H data or written into queries below.
CANARIES = [
    "Customer#000000001",
    "BUILDING",
    "ALGERIA",
    "MOZAMBIQUE",
    "Brand#12",
    "1-URGENT",
    "1995-03-15",
]
NAMES = ["lineitem", "orders", "customer", "nation", "c_name", "o_orderdate", "l_shipmode"]
QUERIES = [
    "SELECT c_name FROM customer WHERE c_name = 'Customer#000000001'",
    "SELECT COUNT(*) FROM customer WHERE c_mktsegment = 'BUILDING'",
    "SELECT n_name FROM nation WHERE n_name IN ('ALGERIA', 'MOZAMBIQUE')",
    "SELECT COUNT(*) FROM part WHERE p_brand = 'Brand#12' OR p_size = 5",
    "SELECT COUNT(*) FROM orders WHERE o_orderpriority = '1-URGENT' AND o_orderdate < DATE '1995-03-15'",
]


def _contains(value: object, needle: str) -> bool:
    if isinstance(value, list):  # a bind filter's key list
        return any(_contains(v, needle) for v in value)
    if isinstance(value, bytes):
        return needle.encode() in value
    return needle in str(value)


def statements_sent(session: Session, queries: list[str]) -> list[tuple[str, object]]:
    """Every statement (with its parameters) the server received while ``queries`` ran."""
    statements: list[tuple[str, object]] = []
    remove = session.backend.add_statement_listener(lambda q, p: statements.append((q, p)))
    try:
        for sql in queries:
            session.run(sql)
    finally:
        remove()
    assert statements
    return statements


def assert_no_plaintext_sent(statements: list[tuple[str, object]]) -> None:
    for statement, params in statements:
        for needle in CANARIES + NAMES:
            assert needle.lower() not in statement.lower()
            assert not any(_contains(p, needle) for p in params or ())  # type: ignore[attr-defined]


def test_statements_carry_no_plaintext(session: Session) -> None:
    assert_no_plaintext_sent(statements_sent(session, QUERIES))


@pytest.mark.spark
def test_spark_statements_and_files_hold_no_plaintext(spark_session: Session) -> None:
    """Every statement the Spark backend ran, and every file of its warehouse (Parquet
    footers name columns and carry min/max statistics), is free of the canaries."""
    assert_no_plaintext_sent(statements_sent(spark_session, QUERIES))
    warehouse = Path(parse_url(spark_session.backend.url).warehouse)
    files = [p for p in warehouse.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files)
    for path in files:
        content = path.read_bytes().lower()
        for needle in CANARIES + NAMES:
            assert needle.lower().encode() not in content, (needle, path.name)
        assert not any(n in str(path.relative_to(warehouse)).lower() for n in NAMES)


@pytest.mark.postgres
def test_postgres_log_holds_no_plaintext(
    postgres_session: Session, postgres_cluster: object
) -> None:
    """PostgreSQL logs every statement (log_statement=all): loads and queries alike."""
    before = len(postgres_cluster.read_log())  # type: ignore[attr-defined]
    for sql in QUERIES:
        postgres_session.run(sql)
    logged = postgres_session.load_log + postgres_cluster.read_log()[before:]  # type: ignore[attr-defined]
    assert "SELECT" in logged and "COPY" in logged.upper()
    for needle in CANARIES + NAMES:
        assert needle.lower() not in logged.lower(), needle


@pytest.mark.parametrize(
    "backend_name",
    [
        "duckdb",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("spark", marks=pytest.mark.spark),
    ],
)
def test_server_tables_hold_no_plaintext(backend_name: str, request: pytest.FixtureRequest) -> None:
    session = request.getfixturevalue(BACKEND_SESSIONS[backend_name])
    backend = session.backend
    for name in backend.table_names():
        assert not any(n in name.lower() for n in NAMES)
        table = backend.execute(f'SELECT * FROM "{name}"')
        for field in table.schema:
            assert not any(n in field.name.lower() for n in NAMES)
            assert field.type in (pa.int64(), pa.int32(), pa.binary(), pa.large_binary()), field
        for column in table.columns:
            if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
                blob = b"".join(v for v in column.to_pylist() if v is not None)
                assert not any(c.encode() in blob for c in CANARIES)
