"""Canaries: distinctive plaintexts never reach the server, in any form we can see."""

from __future__ import annotations

import pyarrow as pa

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


def test_server_tables_hold_no_plaintext(session: Session) -> None:
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
