"""Canaries: distinctive plaintexts never reach the server, in any form we can see."""

from __future__ import annotations

import pyarrow as pa
import pytest

from veil.exec.session import Session

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


def test_statements_carry_no_plaintext(
    session: Session, server_log: list[tuple[str, object]]
) -> None:
    for sql in QUERIES:
        session.run(sql)
    assert server_log
    for statement, params in server_log:
        for needle in CANARIES + NAMES:
            assert needle.lower() not in statement.lower()
            assert not any(_contains(p, needle) for p in params or ())  # type: ignore[attr-defined]


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
    "backend_name", ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_server_tables_hold_no_plaintext(backend_name: str, request: pytest.FixtureRequest) -> None:
    session = request.getfixturevalue("session" if backend_name == "duckdb" else "postgres_session")
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
